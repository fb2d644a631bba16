// SPDX-License-Identifier: MIT
// Argument checks of public entry points and internal invariant checks. Not installed.
//
// Two kinds of failure, kept apart: a caller breaking a documented precondition gets a typed
// ferry::Error (`invalid_argument`) naming the function and the caller's line (FERRY_REQUIRE);
// ferry finding its own invariant broken is a bug in ferry, reported with the broken rule and
// ferry's own line (FERRY_ASSERT), never disguised as a device error.
#pragma once

#include <cstdint>
#include <cstdio>
#include <source_location>
#include <string>

#include "ferry/error.hpp"

namespace ferry::detail {

/// Throw `invalid_argument` with `message` at the caller's location.
[[noreturn]] void fail(ErrorCode code, const std::string& message, const std::source_location& where);
/// `value` in hexadecimal with a 0x prefix: an address in an argument check's message.
inline std::string hex_address(std::uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}
/// Argument check of a public entry point: throws `invalid_argument` naming the function.
/// A macro so the message (often built with std::to_string) is only built on failure: the
/// checks sit on every call's hot path.
#define FERRY_REQUIRE(condition, function, what, where)                                           \
  do {                                                                                            \
    if (!(condition)) {                                                                           \
      ::ferry::detail::fail(::ferry::ErrorCode::invalid_argument,                                 \
                            std::string(function) + ": " + (what), where);                      \
    }                                                                                             \
  } while (0)

/// Report a broken internal invariant (`expression`, with the rule `why`) at ferry's
/// `file`:`line` on stderr and abort: state that broke an invariant cannot be trusted to
/// unwind through.
[[noreturn]] void assert_fail(const char* expression, const char* why, const char* file, int line) noexcept;

/// An internal invariant: always checked (the conditions are cheap), aborts with the rule.
#define FERRY_ASSERT(condition, why)                                                              \
  do {                                                                                            \
    if (!(condition)) ::ferry::detail::assert_fail(#condition, why, __FILE__, __LINE__);          \
  } while (0)

/// Heavy invariant checks (the pool's validate() after every pool operation, as VMA's
/// VMA_HEAVY_ASSERT does): compiled in when the build defines FERRY_HEAVY_CHECKS=1
/// (meson -Dheavy_checks=true), off otherwise, since they cost O(blocks) per call.
#ifndef FERRY_HEAVY_CHECKS
#define FERRY_HEAVY_CHECKS 0
#endif

}  // namespace ferry::detail
