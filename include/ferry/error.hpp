// SPDX-License-Identifier: MIT
/// @file error.hpp
/// @brief ferry's single error type.
///
/// Every public function of ferry validates its arguments and reports failure by throwing
/// `ferry::Error`. An Error carries:
///  - a typed `ErrorCode` to branch on,
///  - a message saying what was wrong (sizes, pool state, handles),
///  - the vendor call that failed, for device errors (`cudaMallocAsync`, `vkQueueSubmit2`, ...),
///  - the caller's source location: public entry points take a defaulted
///    `std::source_location` argument so the error names the *user's* line, not ferry's.
///
/// Bad input never corrupts memory or loses data: argument checks happen before any state is
/// changed, so after an `invalid_argument` error every object is as it was before the call.
///
/// Thread-safety: Error is a value type; copies are independent.
#pragma once

#include <cstdint>
#include <source_location>
#include <stdexcept>
#include <string>
#include <string_view>

#include "ferry/api.hpp"

namespace ferry {

/// @brief What kind of failure an Error reports.
enum class ErrorCode : std::uint8_t {
  invalid_argument,  ///< the caller broke a documented precondition; nothing was changed
  out_of_memory,     ///< device or pinned host memory exhausted (after reclaim and trim)
  unsupported,       ///< backend not built, capability missing, or operation not available
  device_lost,       ///< the device stopped working (VK_ERROR_DEVICE_LOST, sticky CUDA errors)
  timeout,           ///< a host wait ran past its deadline; the wait had no other effect
  backend_error,     ///< any other vendor API failure; `call()` names the call
  internal_error,    ///< an invariant of ferry's own state was found broken: a bug in ferry
};

/// @brief Stable lower-case name of an error code ("invalid_argument", ...).
constexpr std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::out_of_memory: return "out_of_memory";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::device_lost: return "device_lost";
    case ErrorCode::timeout: return "timeout";
    case ErrorCode::backend_error: return "backend_error";
    case ErrorCode::internal_error: return "internal_error";
  }
  return "unknown";
}

/// @brief The exception every ferry function throws.
///
/// `what()` is a complete one-line report:
/// `ferry: invalid_argument: Transfer::upload: size 0 is not allowed [at bench.cpp:42]`
/// or, for a device error, `... (call: cudaMemcpyAsync: invalid argument)`.
class FERRY_API Error : public std::runtime_error {
 public:
  /// @param code     the kind of failure
  /// @param message  what was wrong, including the function that detected it
  /// @param call     the vendor call that failed, empty for argument errors
  /// @param where    the caller's source location (filled by public entry points)
  Error(ErrorCode code, std::string message, std::string call = {},
        std::source_location where = std::source_location::current())
      : std::runtime_error(format(code, message, call, where)),
        code_(code),
        message_(std::move(message)),
        call_(std::move(call)),
        where_(where) {}

  /// @brief The typed failure kind.
  [[nodiscard]] ErrorCode code() const noexcept { return code_; }
  /// @brief The message without the code, call and location decorations.
  [[nodiscard]] const std::string& message() const noexcept { return message_; }
  /// @brief The vendor call that failed ("" for argument errors).
  [[nodiscard]] const std::string& call() const noexcept { return call_; }
  /// @brief Where the failing public function was called from.
  [[nodiscard]] const std::source_location& where() const noexcept { return where_; }

 private:
  static std::string format(ErrorCode code, const std::string& message, const std::string& call,
                            const std::source_location& where) {
    std::string s = "ferry: ";
    s += to_string(code);
    s += ": ";
    s += message;
    if (!call.empty()) {
      s += " (call: ";
      s += call;
      s += ")";
    }
    if (where.file_name() != nullptr && where.file_name()[0] != '\0') {
      s += " [at ";
      s += where.file_name();
      s += ":";
      s += std::to_string(where.line());
      s += "]";
    }
    return s;
  }

  ErrorCode code_;
  std::string message_;
  std::string call_;
  std::source_location where_;
};

}  // namespace ferry
