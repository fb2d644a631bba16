// SPDX-License-Identifier: MIT
// The conformance suite's fixture: one set of backend-neutral cases (tests/conformance/*.cpp),
// written against include/ferry/*.hpp only, run once per backend by tests/backends/<b>.cpp.
//
// A backend executable calls `conformance::configure()` before running doctest; every case
// then gets its device from `conformance::open_device()`. Cases are declared with
// `CONFORMANCE_CASE("name")`, a doctest TEST_CASE_FIXTURE whose fixture runs the per-case
// checks at the end of each case (pool invariants everywhere; zero validation messages on
// Vulkan) inside the case, so a failure is reported against the case that caused it.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"
#include "ferry/testing.hpp"

namespace conformance {

/// What a backend executable selects before running the cases.
struct Config {
  ferry::Backend backend = ferry::Backend::host;
  /// Vulkan: open with validation layers and fail a case on any validation message.
  bool validation = false;
};

/// Set the backend under test (call once from main, before doctest runs).
void configure(const Config& config);
/// The configuration set by `configure`.
const Config& config();

/// Options that open the device under test (latency injection is left to the environment:
/// `host_latency_us = -1` reads FERRY_HOST_LATENCY_US).
ferry::DeviceOptions options();

/// Open the device under test. The fixture keeps a handle until the end of the case, checks
/// its pool and (Vulkan) its validation messages, then closes it.
ferry::Device open_device();

/// Create another queue, or report "not supported: ..." (MESSAGE) and return a null queue
/// when the device has no queue left (lavapipe has one queue in all).
ferry::Queue try_create_queue(ferry::Device& device, ferry::QueueRole role, const std::string& name);

/// Run the end-of-case checks on `device` now (pool invariants, validation messages), then
/// close it. For cases that close a device before their end.
void finish_device(ferry::Device& device);

/// Print "SKIPPED: <backend>: no device (reason)" and return 77 when the backend was not built
/// or sees no device; return 0 when the suite can run.
int presence_check(ferry::Backend backend);

/// Run doctest with the command line; returns its exit code.
int run(int argc, char** argv);

/// Extra check run by the fixture at the end of every case for every device the case opened
/// with `open_device()` (still open at that point). Set by a backend's main.
using DeviceCheck = std::function<void(ferry::Device&)>;
void set_end_of_case_check(DeviceCheck check);

#if defined(__clang__) && __clang_major__ < 17
/// Whether a ferry::Error's where() names the caller's line. clang before 17 evaluates
/// std::source_location::current() in a default argument where the function is declared, not
/// where it is called (CWG 2631): there a case can check only that the call threw.
inline constexpr bool kCallerLocations = false;
#else
inline constexpr bool kCallerLocations = true;
#endif

/// FERRY_TEST_SMALL=1 (sanitizer runs): use smaller sizes in the expensive cases.
bool small();

/// A byte pattern that differs for every (seed, index) pair in a 251-cycle.
std::byte pattern_byte(std::uint64_t seed, std::uint64_t index);
void fill_pattern(std::span<std::byte> bytes, std::uint64_t seed);
/// Index of the first byte that differs from the pattern (shifted by `add`), or -1.
std::int64_t first_mismatch(std::span<const std::byte> bytes, std::uint64_t seed, int add = 0);

/// Upload a pattern, run the synthetic compute, download and compare: proves that a device
/// and transfer still work after an error.
void check_round_trip(ferry::Device& device, ferry::Transfer& transfer,
                      std::uint64_t bytes = 4096 + 7);

/// Device memory an engine allocated itself, with its vendor's calls (not ferry's pool), for
/// the adopted-memory cases (adopt.cpp). Freed with the vendor's calls when destroyed.
struct ForeignMemory {
  ferry::NativeMemory native{};   ///< what `Device::adopt_memory` is given
  std::uint64_t size = 0;         ///< bytes usable from the start of `native`
  std::byte* host = nullptr;      ///< the engine's host view of the memory; null: none
  std::function<void()> free{};   ///< the vendor's free
  ForeignMemory() = default;
  ForeignMemory(const ForeignMemory&) = delete;
  ForeignMemory& operator=(const ForeignMemory&) = delete;
  ~ForeignMemory() {
    if (free) free();
  }
};

/// Allocates foreign memory of at least `bytes` on the device under test (set by a backend's
/// main, with its vendor's calls).
using ForeignAllocator = std::function<std::unique_ptr<ForeignMemory>(ferry::Device&, std::uint64_t bytes)>;
void set_foreign_allocator(ForeignAllocator allocator);
/// Foreign memory from the backend's allocator, or null after reporting "not supported: ..."
/// (MESSAGE) when the backend's main set none.
std::unique_ptr<ForeignMemory> allocate_foreign(ferry::Device& device, std::uint64_t bytes);

/// An image an engine created itself, with its vendor's calls, for the image cases
/// (image.cpp). Destroyed with the vendor's calls when destroyed.
struct ForeignImage {
  ferry::NativeImage native{};  ///< what `Device::adopt_image` is given
  ferry::ImageDesc desc{};      ///< its shape
  std::function<void()> free{};  ///< the vendor's destroy
  ForeignImage() = default;
  ForeignImage(const ForeignImage&) = delete;
  ForeignImage& operator=(const ForeignImage&) = delete;
  ~ForeignImage() {
    if (free) free();
  }
};

/// Creates an image of `desc` on the device under test (set by a backend's main), or returns
/// null with the reason in `why_not` when the device cannot make one (a format it lacks).
using ImageAllocator =
    std::function<std::unique_ptr<ForeignImage>(ferry::Device&, const ferry::ImageDesc&, std::string& why_not)>;
void set_image_allocator(ImageAllocator allocator);
/// An image from the backend's allocator, or null after reporting "not supported: ..."
/// (MESSAGE) when the backend's main set none or the device cannot make this one.
std::unique_ptr<ForeignImage> allocate_image(ferry::Device& device, const ferry::ImageDesc& desc);

/// Holds a queue behind a host-signalled gate, so every free point it records stays pending
/// until open(): a case whose outcome must not depend on how fast the device runs its work.
/// open() is idempotent; a case opens the gate before it waits on the gated queue's work.
struct Gate {
  ferry::TimelineSemaphore semaphore;
  Gate(ferry::Device& dev, ferry::Queue& queue) : semaphore(dev.create_semaphore(0)) {
    queue.wait(semaphore.at(1));
  }
  void open() {
    if (semaphore.value() < 1) semaphore.signal(1);
  }
};

/// Fixture of every case (see the file comment).
struct CaseGuard {
  CaseGuard();
  ~CaseGuard();
  CaseGuard(const CaseGuard&) = delete;
  CaseGuard& operator=(const CaseGuard&) = delete;
};

/// Run `fn`, expecting a `ferry::Error` with `code`; reports the call site of the check.
template <class Fn>
void expect_error(ferry::ErrorCode code, Fn&& fn, std::string_view what = {},
                  std::source_location loc = std::source_location::current()) {
  std::string label = std::string(what.empty() ? "call" : what) + " (checked at line " +
                      std::to_string(loc.line()) + ")";
  try {
    fn();
    ADD_FAIL_CHECK_AT(loc.file_name(), static_cast<int>(loc.line()), "expected ferry::Error(" << ferry::to_string(code) << ") from " << label
                                            << ", but nothing was thrown");
  } catch (const ferry::Error& e) {
    if (e.code() != code) {
      ADD_FAIL_CHECK_AT(loc.file_name(), static_cast<int>(loc.line()), "expected " << ferry::to_string(code) << " from " << label << ", got "
                                 << e.what());
    } else {
      CHECK_MESSAGE(!e.message().empty(), label);
    }
  } catch (const std::exception& e) {
    ADD_FAIL_CHECK_AT(loc.file_name(), static_cast<int>(loc.line()), "expected ferry::Error(" << ferry::to_string(code) << ") from " << label
                                            << ", got another exception: " << e.what());
  } catch (...) {
    ADD_FAIL_CHECK_AT(loc.file_name(), static_cast<int>(loc.line()), "expected ferry::Error from " << label << ", got a non-std exception");
  }
}

/// Run `fn`, expecting a `ferry::Error` with one of `codes` (where the contract allows either).
template <class Fn>
void expect_error_any(std::initializer_list<ferry::ErrorCode> codes, Fn&& fn,
                      std::string_view what = {},
                      std::source_location loc = std::source_location::current()) {
  std::string label = std::string(what.empty() ? "call" : what) + " (checked at line " +
                      std::to_string(loc.line()) + ")";
  try {
    fn();
    ADD_FAIL_CHECK_AT(loc.file_name(), static_cast<int>(loc.line()), "expected a ferry::Error from " << label << ", but nothing was thrown");
  } catch (const ferry::Error& e) {
    bool ok = false;
    for (auto c : codes) ok = ok || c == e.code();
    if (!ok) ADD_FAIL_CHECK_AT(loc.file_name(), static_cast<int>(loc.line()), "unexpected error code from " << label << ": " << e.what());
  } catch (const std::exception& e) {
    ADD_FAIL_CHECK_AT(loc.file_name(), static_cast<int>(loc.line()), "expected ferry::Error from " << label << ", got: " << e.what());
  }
}

/// Run `fn`, expecting `invalid_argument` whose message contains every string of `needles`
/// (the argument it names, its index); `what` labels the check.
template <class Fn>
void expect_invalid_naming(Fn&& fn, std::initializer_list<std::string> needles, const char* what) {
  try {
    fn();
    FAIL_CHECK((std::string(what) + ": expected invalid_argument, nothing was thrown"));
  } catch (const ferry::Error& e) {
    CHECK_MESSAGE(e.code() == ferry::ErrorCode::invalid_argument, what << ": " << e.what());
    for (const auto& n : needles) {
      CHECK_MESSAGE(std::string(e.what()).find(n) != std::string::npos, what << ": '" << n << "' missing in " << e.what());
    }
  }
}

}  // namespace conformance

/// A conformance case: a doctest case run with the conformance fixture.
#define CONFORMANCE_CASE(name) TEST_CASE_FIXTURE(conformance::CaseGuard, name)
