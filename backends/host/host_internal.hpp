// SPDX-License-Identifier: MIT
// The host (CPU reference) backend's private declarations, shared by its files: the
// semaphore, the queue (host_queue.cpp) and what the device (host_device.cpp) shares with
// them. Fault injection is a layer of its own (fault_layer.hpp).
//
// "Device memory" is ordinary process memory: segments are 4096-aligned allocations and
// Segment::address / Segment::native are the base pointer. Each queue is a worker thread that
// drains a FIFO of operations (copy = memmove, signal, wait, synthetic compute) strictly in
// enqueue order. Timeline semaphores are an atomic counter plus a condition variable.
//
// Several devices: every Device::open of the host backend is a device of its own (its own
// queues, pool and semaphores). Two of them copy between each other (peer copies) with a
// memmove, and a worker of one waits on the other's semaphores, which are plain host objects:
// so the cross-device ordering of peer copies is tested without a GPU.
//
// Copy engines: a device has one copy engine per direction (to the device, from it, within
// it), shared by all its queues, as a GPU's DMA engines are. A copy runs only while its queue
// holds the engine of its direction. A queue keeps the engine from one copy to its next one
// while only signals come between them, so a queue's back-to-back copies never let another
// queue's copy in, whatever the queues' priorities: that is how a GPU's copy engine treats
// streams. A yield point (enqueue_yield), any other operation (a wait, compute) or an empty
// FIFO lets the engine go: it then serves the queues that have a copy ready, in the order they
// asked for it, before this queue's next copy. With latency injection the delay of a copy
// counts as engine time, so a long chain of unyielded copies visibly holds other queues back.
//
// Latency injection (DeviceOptions::host_latency_us, or FERRY_HOST_LATENCY_US when that is
// negative): before each operation the worker sleeps a random 0..N microseconds, so that a
// missing queue wait shows up as wrong data rather than passing by luck.
//
// Memory limit (FERRY_HOST_MEMORY_LIMIT, bytes): when set, allocate_segment throws
// out_of_memory once the sum of live segment sizes would exceed it, so tests can exercise
// the pool's out-of-memory path. It is reported as device_memory_bytes.
//
// Fault injection (FERRY_HOST_FAULTS): see fault_layer.hpp.
//
// Lifetime contracts for the front end:
//  - Operations capture raw pointers: segments, host memory and semaphores named by enqueued
//    work must stay alive until that work has completed (synchronize / wait_idle).
//  - Destroying a queue stops its worker promptly: the operation in progress finishes (a
//    blocked wait is abandoned within ~10 ms) and every operation still queued is DROPPED.
//    Drain first (wait_idle, or a signal + host wait) when the work must complete.
//  - wait_idle() waits for every live queue of the device to run dry; it blocks forever if a
//    queue waits on a value nobody will signal (as a GPU backend would).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <thread>
#include <unordered_set>
#include <vector>

#include "backend.hpp"

namespace ferry::detail::host_impl {

class FaultState;  // fault_layer.hpp

inline constexpr auto kWaitSlice = std::chrono::milliseconds(10);

// ---------------------------------------------------------------------------------------------
// Semaphore: the value is atomic (lock-free queries); the mutex only orders stores against
// waiters so that no wake-up is lost.

class HostSemaphore : public BackendSemaphore {
 public:
  explicit HostSemaphore(std::uint64_t initial) : value_(initial) {}

  // A host thread may destroy the semaphore as soon as it observes the value (value() or
  // wait()), while the signalling worker is still inside signal(): taking the mutex here
  // waits for that signal() to finish touching this object.
  ~HostSemaphore() override { std::lock_guard lock(mutex_); }

  HostSemaphore(const HostSemaphore&) = delete;
  HostSemaphore& operator=(const HostSemaphore&) = delete;

  std::uint64_t value() override { return value_.load(std::memory_order_acquire); }

  void signal(std::uint64_t v) override {
    // Store and notify under the mutex: see the destructor.
    std::lock_guard lock(mutex_);
    value_.store(v, std::memory_order_release);
    cv_.notify_all();
  }

  // The host wait: the plain wait below (the fault layer's semaphore waits in slices).
  bool wait(std::uint64_t v, std::chrono::nanoseconds timeout) override { return wait_for(v, timeout); }

  // The plain wait, which never throws (the queue workers' too): true once `v` is reached,
  // false at the timeout.
  bool wait_for(std::uint64_t v, std::chrono::nanoseconds timeout) {
    if (value() >= v) return true;
    std::unique_lock lock(mutex_);
    const auto reached = [&] { return value_.load(std::memory_order_acquire) >= v; };
    // Very long timeouts (e.g. nanoseconds::max()) would overflow the clock arithmetic.
    if (timeout >= std::chrono::hours(24 * 365)) {
      cv_.wait(lock, reached);
      return true;
    }
    return cv_.wait_for(lock, timeout, reached);
  }

 private:
  std::atomic<std::uint64_t> value_;
  std::mutex mutex_;
  std::condition_variable cv_;
};

// ---------------------------------------------------------------------------------------------
// Queue: one worker thread, one FIFO. Every public method only enqueues (never blocks on the
// worker), and is safe to call from several threads.

class HostQueue;

/// An engine's host image (Device::adopt_image): memory in the reference layout of
/// host_image_level, with the level-0 pitches it was adopted with (0 = tight).
struct HostImage final : BackendImage {
  std::byte* base = nullptr;
  ImageDesc desc{};
  std::uint64_t row_pitch = 0;
  std::uint64_t slice_pitch = 0;
};

/// One row of an image copy, as the worker runs it.
struct RowCopy {
  std::byte* dst = nullptr;
  const std::byte* src = nullptr;
  std::uint64_t bytes = 0;
};

// The copy engines of a device (see the file comment), one per direction. A queue's worker
// asks for an engine only while it holds no other, so no two workers can wait on each other.
class CopyEngines {
 public:
  static constexpr int kCount = 3;  ///< to the device, from the device, within the device

  /// Block until `queue` holds engine `e` (queues are served in the order they asked);
  /// false, holding nothing, once `stop` is set (wake() interrupts the wait).
  bool acquire(int e, const void* queue, const std::atomic<bool>& stop);
  /// Let engine `e` go if `queue` holds it: to the queue that asked first, if any.
  void release(int e, const void* queue);
  /// Wake every waiting worker, to see its `stop`.
  void wake();

 private:
  struct Engine {
    const void* holder = nullptr;
    std::deque<const void*> waiting;
  };
  std::mutex mutex_;
  std::condition_variable cv_;
  std::array<Engine, kCount> engines_{};
};

// The set of live queues of a device, for wait_idle, and the device's copy engines. Shared so
// that a caller-owned queue may outlive its device without touching freed memory.
struct QueueRegistry {
  std::mutex mutex;
  std::unordered_set<HostQueue*> queues;
  CopyEngines engines;
};

class HostQueue final : public BackendQueue {
 public:
  /// The worker blocks on a wait before anything queued after it.
  static constexpr QueueTraits kTraits{.wait_orders_later_work = true, .acquires_ownership = false,
                                       .defers_signals = false, .yields = true,
                                       .cuts_by_default = true};

  HostQueue(std::shared_ptr<QueueRegistry> registry, std::uint32_t latency_us, std::shared_ptr<FaultState> faults);
  ~HostQueue() override;

  HostQueue(const HostQueue&) = delete;
  HostQueue& operator=(const HostQueue&) = delete;

  void copy_h2d(DeviceRef dst, HostRef src, std::uint64_t bytes) override;
  void copy_d2h(HostRef dst, DeviceRef src, std::uint64_t bytes) override;
  void copy_d2d(DeviceRef dst, DeviceRef src, std::uint64_t bytes) override;
  void copy_h2i(BackendImage& dst, HostRef src, std::span<const ImageCopy> regions) override;
  void copy_i2h(HostRef dst, BackendImage& src, std::span<const ImageCopy> regions) override;
  void copy_d2i(BackendImage& dst, DeviceRef src, std::span<const ImageCopy> regions) override;
  void copy_i2d(DeviceRef dst, BackendImage& src, std::span<const ImageCopy> regions) override;
  void copy_peer(DeviceRef dst, BackendDevice& dst_device, DeviceRef src, BackendDevice& src_device,
                 std::uint64_t bytes) override;
  void enqueue_yield() override;
  void signal(BackendSemaphore& sem, std::uint64_t value) override;
  void wait(BackendSemaphore& sem, std::uint64_t value) override;
  bool synthetic_compute(DeviceRef in, DeviceRef out, std::uint64_t bytes, std::uint32_t units) override;

  // Block until everything enqueued before this call has run or was dropped (a lost device),
  // or the queue is stopping.
  void drain();

 private:
  struct Op {
    enum class Kind : std::uint8_t { copy, compute, signal, wait, rows, yield } kind = Kind::copy;
    std::uint8_t engine = 0;  // copy, rows: the copy engine (CopyEngines), by direction
    std::shared_ptr<const std::vector<RowCopy>> rows{};  // Kind::rows: an image copy's rows
    std::byte* dst = nullptr;
    const std::byte* src = nullptr;
    std::uint64_t bytes = 0;
    HostSemaphore* sem = nullptr;
    std::uint64_t value = 0;
    std::uint32_t units = 0;

    static Op copy(std::byte* d, const std::byte* s, std::uint64_t n, std::uint8_t e) {
      Op op{Kind::copy};
      op.engine = e;
      op.dst = d;
      op.src = s;
      op.bytes = n;
      return op;
    }
  };

  static std::byte* device_ptr(DeviceRef r) {
    return static_cast<std::byte*>(r.segment->native) + r.offset;
  }
  static std::byte* host_ptr(HostRef r) { return r.memory->ptr + r.offset; }

  /// One queued operation copying every row of `regions` between linear memory at `linear`
  /// and the image's reference layout (host_image_level), in the direction `to_image`.
  void push_rows(const HostImage& image, std::byte* linear, std::span<const ImageCopy> regions, bool to_image,
                 std::uint8_t engine);
  void push(const Op& op);
  void run() noexcept;
  void inject_latency();
  // Returns false only when a wait was interrupted by destruction.
  bool execute(const Op& op);
  // The worker's hold on the copy engines: take the one `op` needs (letting the others go
  // first), keep it over signals, let all go before anything else. False: stopping.
  bool hold_engines(const Op& op);
  void release_engines() noexcept;

  std::shared_ptr<QueueRegistry> registry_;
  const std::uint32_t latency_us_;
  const std::shared_ptr<FaultState> faults_;  // null: no faults injected
  std::mt19937 rng_;  // used by the worker only
  unsigned held_engines_ = 0;  // bit e: the worker holds engine e (worker only)

  std::mutex mutex_;                  // guards ops_, submitted_, completed_
  std::condition_variable work_cv_;   // worker: work arrived or stop
  std::condition_variable done_cv_;   // drain(): an operation completed or stop
  std::deque<Op> ops_;
  std::uint64_t submitted_ = 0;
  std::uint64_t completed_ = 0;
  std::atomic<bool> stop_{false};
  std::thread worker_;  // last: started after every other member is constructed
};

}  // namespace ferry::detail::host_impl
