// SPDX-License-Identifier: MIT
// The host backend's fault injection: a layer of its own over the reference backend. It
// gives a device with faults planned its own semaphores (FaultSemaphore), and the reference
// backend calls it at four hooks (an enqueue, the run of an operation, a segment allocation,
// wait_idle) through a pointer that is null when no fault is planned.
//
// Fault injection (FERRY_HOST_FAULTS, read at open): a comma-separated list of key=N, each N
// a decimal integer >= 1, each key at most once; anything else makes the open fail with
// invalid_argument naming the variable. Faults exist so that tests can drive the front end's
// error paths, which a CPU never takes on its own:
//  - device_lost_at=N: the N-th enqueue of an operation on any queue of the device (copies,
//    signals, waits and compute, counted from 1) loses the device. It and every later
//    enqueue throws device_lost; the workers drop what is still queued (as a GPU abandons
//    its work), so points not reached by then never are, and a host wait for one throws
//    device_lost instead of waiting; wait_idle throws it after the queues ran dry. A loss is
//    reported only once no operation runs any more: the caller may then free what the lost
//    work named, as after a GPU's loss.
//  - alloc_fail_at=N, alloc_fail_count=K (default 1): allocate_segment calls N..N+K-1 throw
//    out_of_memory, as a full GPU does when the pool grows.
//  - copy_fail_at=N: the N-th copy enqueued (h2d, d2h or d2d, any queue) throws
//    backend_error and is not queued; the device stays usable, as after a failed copy call.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "host/host_internal.hpp"

namespace ferry::detail::host_impl {

inline constexpr const char* kFaultsVariable = "FERRY_HOST_FAULTS";

struct FaultPlan {
  std::uint64_t device_lost_at = 0;  // 0 = never
  std::uint64_t alloc_fail_at = 0;
  std::uint64_t alloc_fail_count = 1;
  std::uint64_t copy_fail_at = 0;
  std::string text;  // the variable's value, for reports

  [[nodiscard]] bool any() const { return device_lost_at != 0 || alloc_fail_at != 0 || copy_fail_at != 0; }
};

/// The plan in FERRY_HOST_FAULTS (no fault when unset or empty); invalid_argument naming the
/// variable for anything other than the form above.
FaultPlan parse_faults();

// What the device's queues, semaphores and allocations share while faults are injected.
class FaultState {
 public:
  explicit FaultState(const FaultPlan& plan) : plan_(plan) {}

  [[nodiscard]] bool lost() const { return lost_.load(std::memory_order_acquire); }

  // Worker side, around each operation: whether it may run (false once the device is lost);
  // when it may, end_operation() follows it.
  bool begin_operation();
  void end_operation();

  // Host side (never a worker). Waits until no operation runs: an operation begun before the
  // loss finishes (a wait is abandoned within a slice), and none begins after it.
  [[noreturn]] void throw_lost();

  // Counts one enqueue; throws when it is (or comes after) the fatal one, or is the failing copy.
  void enqueue(bool copy);

  // Counts one segment allocation; throws out_of_memory for the failing ones.
  void allocate(std::uint64_t bytes);

 private:
  const FaultPlan plan_;
  std::atomic<std::uint64_t> operations_{0};
  std::atomic<std::uint64_t> copies_{0};
  std::atomic<std::uint64_t> allocations_{0};
  std::atomic<bool> lost_{false};
  std::mutex mutex_;                // orders begin_operation against a loss
  std::condition_variable idle_;    // running_ dropped to 0
  std::uint64_t running_ = 0;       // operations the workers are executing
};

// A semaphore of a device with faults planned. A value reached is reached, lost device or
// not; a host wait sleeps in slices, so that a device lost while it waits (nobody will
// signal) is reported promptly. Queue workers wait with the plain wait (wait_for), as on
// every device.
class FaultSemaphore final : public HostSemaphore {
 public:
  FaultSemaphore(std::uint64_t initial, std::shared_ptr<FaultState> faults)
      : HostSemaphore(initial), faults_(std::move(faults)) {}
  bool wait(std::uint64_t v, std::chrono::nanoseconds timeout) override;

 private:
  const std::shared_ptr<FaultState> faults_;
};

}  // namespace ferry::detail::host_impl
