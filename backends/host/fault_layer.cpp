// SPDX-License-Identifier: MIT
// The host backend's fault injection (fault_layer.hpp): parsing FERRY_HOST_FAULTS, and the
// counting that decides which enqueue loses the device, which copy and which allocations fail.
#include "host/fault_layer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iterator>
#include <source_location>
#include <string>

#include "ferry/error.hpp"

namespace ferry::detail::host_impl {

namespace {

[[noreturn]] void bad_faults(const std::string& text, const std::string& why) {
  throw Error(ErrorCode::invalid_argument,
              std::string("host: environment variable ") + kFaultsVariable + "='" + text + "': " + why +
                  " (expected a comma-separated list of device_lost_at=N, alloc_fail_at=N, "
                  "alloc_fail_count=N, copy_fail_at=N, each N an integer >= 1)",
              {}, std::source_location{});
}

// Strict: digits only (no sign, no spaces), no overflow, at least 1.
std::uint64_t fault_number(const std::string& text, const std::string& key, const std::string& value) {
  if (value.empty() || value.size() > 19 ||
      !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    bad_faults(text, "the value of " + key + " ('" + value + "') is not a decimal integer");
  }
  const std::uint64_t n = std::stoull(value);  // 19 digits always fit in 64 bits
  if (n == 0) bad_faults(text, "the value of " + key + " must be at least 1");
  return n;
}

}  // namespace

FaultPlan parse_faults() {
  FaultPlan plan;
  const char* env = std::getenv(kFaultsVariable);
  if (env == nullptr || *env == '\0') return plan;
  const std::string text(env);
  plan.text = text;
  bool seen[4] = {false, false, false, false};
  std::size_t begin = 0;
  for (;;) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    const std::size_t eq = item.find('=');
    if (item.empty()) bad_faults(text, "empty entry");
    if (eq == std::string::npos) bad_faults(text, "entry '" + item + "' has no '='");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    static constexpr const char* keys[4] = {"device_lost_at", "alloc_fail_at", "alloc_fail_count", "copy_fail_at"};
    const std::size_t k = static_cast<std::size_t>(std::find(std::begin(keys), std::end(keys), key) - std::begin(keys));
    if (k == 4) bad_faults(text, "unknown key '" + key + "'");
    if (seen[k]) bad_faults(text, "key '" + key + "' given twice");
    seen[k] = true;
    std::uint64_t* fields[4] = {&plan.device_lost_at, &plan.alloc_fail_at, &plan.alloc_fail_count, &plan.copy_fail_at};
    *fields[k] = fault_number(text, key, value);
    if (end == text.size()) break;
    begin = end + 1;
  }
  if (seen[2] && !seen[1]) bad_faults(text, "alloc_fail_count needs alloc_fail_at");
  return plan;
}

bool FaultState::begin_operation() {
  std::lock_guard lock(mutex_);
  if (lost()) return false;
  ++running_;
  return true;
}

void FaultState::end_operation() {
  std::lock_guard lock(mutex_);
  if (--running_ == 0) idle_.notify_all();
}

[[noreturn]] void FaultState::throw_lost() {
  {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return running_ == 0; });
  }
  throw Error(ErrorCode::device_lost,
              "host: the device is lost (injected: " + std::string(kFaultsVariable) +
                  " device_lost_at=" + std::to_string(plan_.device_lost_at) + ")",
              "host queue", std::source_location{});
}

void FaultState::enqueue(bool copy) {
  if (lost()) throw_lost();
  const std::uint64_t n = operations_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (plan_.device_lost_at != 0 && n >= plan_.device_lost_at) {
    lost_.store(true, std::memory_order_release);
    throw_lost();
  }
  if (copy && plan_.copy_fail_at != 0 && copies_.fetch_add(1, std::memory_order_relaxed) + 1 == plan_.copy_fail_at) {
    throw Error(ErrorCode::backend_error,
                "host: copy " + std::to_string(plan_.copy_fail_at) + " failed (injected: " + kFaultsVariable +
                    " copy_fail_at=" + std::to_string(plan_.copy_fail_at) + ")",
                "memcpy", std::source_location{});
  }
}

void FaultState::allocate(std::uint64_t bytes) {
  if (plan_.alloc_fail_at == 0) return;
  const std::uint64_t n = allocations_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (n >= plan_.alloc_fail_at && n - plan_.alloc_fail_at < plan_.alloc_fail_count) {
    throw Error(ErrorCode::out_of_memory,
                "host: cannot allocate " + std::to_string(bytes) + " bytes (injected: allocation " +
                    std::to_string(n) + ", " + kFaultsVariable + " alloc_fail_at=" +
                    std::to_string(plan_.alloc_fail_at) + " alloc_fail_count=" +
                    std::to_string(plan_.alloc_fail_count) + ")",
                "aligned_alloc", std::source_location{});
  }
}

bool FaultSemaphore::wait(std::uint64_t v, std::chrono::nanoseconds timeout) {
  using clock = std::chrono::steady_clock;
  const auto deadline = timeout >= std::chrono::hours(24 * 365) ? clock::time_point::max() : clock::now() + timeout;
  for (;;) {
    if (value() >= v) return true;
    if (faults_->lost()) faults_->throw_lost();
    const auto now = clock::now();
    if (now >= deadline) return false;
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now);
    if (wait_for(v, std::min<std::chrono::nanoseconds>(left, kWaitSlice))) return true;
  }
}

}  // namespace ferry::detail::host_impl
