// SPDX-License-Identifier: MIT
// Timeline state and the completion policy: when ferry asks a backend whether a timeline
// reached a value. Not installed.
//
// The policy, in one place:
//  - Every semaphore keeps a watermark (`SemaphoreState::reached`), the greatest value seen
//    reached. A point at or below it is reached without asking the backend (lock-free).
//  - Otherwise `observe()` asks the backend once and raises the watermark.
//  - Hot paths (an upload's pool allocation, activity spans) use `observe_throttled()`: a
//    timeline is asked at most every kHotPathQueryInterval; in between the watermark answers.
//    A point it does not show reached is treated as pending, which orders work with a queue
//    wait (cheap, and a no-op on the device when the point was in fact reached).
// Every backend query of a semaphore's value goes through `observe_locked()`.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>

#include "backend.hpp"
#include "ferry/device.hpp"

namespace ferry::detail {

struct DeviceState;

/// Raise `a` to `value` (no-op when it is already at or above it); never lowers it.
inline void raise_to(std::atomic<std::uint64_t>& a, std::uint64_t value) noexcept {
  std::uint64_t seen = a.load(std::memory_order_relaxed);
  while (seen < value && !a.compare_exchange_weak(seen, value, std::memory_order_release, std::memory_order_relaxed)) {
  }
}

struct SemaphoreState {
  std::weak_ptr<DeviceState> device;
  DeviceState* device_id = nullptr;  // identity only; never dereferenced without `device`
  std::uint32_t timeline_id = 0;     // id used by the pool's free points
  std::mutex mutex;
  std::unique_ptr<BackendSemaphore> backend;  // null once the device closed
  std::uint64_t max_signal = 0;               // highest value signalled or enqueued for signal
  /// A queue's private progress timeline: only ferry signals it (Queue::mark), so marks never
  /// report work complete that is still pending. Host and queue signals of it are refused.
  bool queue_private = false;
  /// A queue of another device has waited on this semaphore (peer copies): at close its
  /// backend semaphore is handed to those devices instead of destroyed (DeviceState::close),
  /// since their queues may still hold the wait.
  std::atomic<bool> foreign_waits{false};
  /// Greatest value seen reached: raised by every backend query (observe_locked), by host
  /// signals and by successful host waits; never lowered (timelines only grow). A point at or
  /// below it is reached without asking the backend (lock-free). UINT64_MAX once closed.
  std::atomic<std::uint64_t> reached{0};
  /// steady_clock ns of the last backend query (observe_locked); what the hot paths' throttle
  /// (observe_throttled) reads.
  std::atomic<std::int64_t> last_query_ns{INT64_MIN / 2};
  /// A private timeline of a queue whose backend defers signals to its next flush
  /// (QueueTraits::defers_signals): that queue, so that a wait on one of its values flushes
  /// it first (ensure_submitted). Null otherwise, and once the device closed. Under `mutex`.
  BackendQueue* submitter = nullptr;
  /// Greatest value whose signal is known submitted to the device: every value of a
  /// semaphore without a `submitter` (UINT64_MAX).
  std::atomic<std::uint64_t> submitted{UINT64_MAX};

  /// Whether `value` is known reached, without a backend query.
  [[nodiscard]] bool known_reached(std::uint64_t value) const noexcept {
    return reached.load(std::memory_order_acquire) >= value;
  }
  /// Raise `reached` to `value` (no-op when lower).
  void note_reached(std::uint64_t value) noexcept { raise_to(reached, value); }
};

/// The completion policy's constants (see the file comment).
struct CompletionPolicy {
  /// How often a hot path may ask the backend about one timeline. Asking costs: on CUDA,
  /// querying an event recorded a moment ago makes the driver submit the work batched so far
  /// (the upload call's host time on the H200 is measured with and without these queries in
  /// docs/benchmarks.md).
  static constexpr std::int64_t kHotPathQueryIntervalNs = 50'000;
  /// Activity spans are resolved (their end stamped) at most this often on the hot path, so
  /// a trace's end times are upper bounds off by at most this much plus the query interval.
  static constexpr std::uint64_t kActivityResolveIntervalNs = 10'000;
};

/// steady_clock now, in ns. The hot paths read it once per call and pass it on: on virtual
/// machines a clock read costs tens of nanoseconds.
inline std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// One backend query of `s` (caller holds s.mutex): raises the watermark, records the time of
/// the query, returns the value. UINT64_MAX once the device closed (everything is complete).
std::uint64_t observe_locked(SemaphoreState& s);
/// observe_locked() under s.mutex.
std::uint64_t observe(SemaphoreState& s);
/// observe() when the last query of `s` is older than kHotPathQueryIntervalNs at `now`
/// (steady_now_ns()), else the watermark. Never claims a point reached that is not.
std::uint64_t observe_throttled(SemaphoreState& s, std::int64_t now);
/// Whether `point` is reached (empty = reached; closed device = reached): the watermark,
/// else one backend query.
bool point_reached(const TimelinePoint& point);
/// Make sure the signal of `value` on `s` is on its way to the device: flush the queue that
/// recorded it when its backend defers signals and it was not flushed since. Every wait on a
/// point, host or device, calls it first, so nothing ever waits for work never submitted.
/// Caller holds no lock of `s`.
void ensure_submitted(SemaphoreState& s, std::uint64_t value);

}  // namespace ferry::detail
