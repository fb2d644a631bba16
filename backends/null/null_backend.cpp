// SPDX-License-Identifier: MIT
// The null backend (Backend::null): a device that accepts every operation and does none of
// the work, so that ferry's own bookkeeping (argument checks, the pool, ordering, statistics,
// snapshots) can be tested and measured without a driver (tests/backends/null.cpp,
// lab/probe/front_end_probe.cpp).
//
//  - Memory is real host memory (segments and pinned memory are heap allocations), so every
//    pointer the front end hands out is valid; copies move no bytes.
//  - A queue signal is seen reached FERRY_NULL_LAG signals later (read at open; default 0:
//    at once), as on a device that runs that far behind the host. A host wait for a value a
//    queue has signalled returns at once (the device gets there); one for a value nobody
//    signalled yet waits for a host signal.
//  - A queue wait does nothing: nothing runs on the queue for it to hold back.
//  - Any native handle but null can be adopted as a queue (none is ever used).
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "backend.hpp"

namespace ferry::detail {
namespace {

/// Raise `a` to at least `v`: signals of different queues may race, the value only grows.
void raise_to(std::atomic<std::uint64_t>& a, std::uint64_t v) noexcept {
  std::uint64_t seen = a.load(std::memory_order_relaxed);
  while (seen < v && !a.compare_exchange_weak(seen, v, std::memory_order_acq_rel)) {
  }
}

class NullSemaphore final : public BackendSemaphore {
 public:
  NullSemaphore(std::uint64_t initial, std::uint64_t lag) : host_(initial), lag_(lag) {}

  std::uint64_t value() override {
    const std::uint64_t queued = queued_.load(std::memory_order_acquire);
    return std::max({host_.load(std::memory_order_acquire), caught_up_.load(std::memory_order_acquire),
                     queued > lag_ ? queued - lag_ : 0});
  }

  void signal(std::uint64_t value) override {
    raise_to(host_, value);
    std::lock_guard lock(mutex_);  // a waiter checks and sleeps under the lock: no lost wakeup
    cv_.notify_all();
  }

  bool wait(std::uint64_t value, std::chrono::nanoseconds timeout) override {
    if (value <= queued_.load(std::memory_order_acquire)) {  // enqueued: the device gets there
      raise_to(caught_up_, value);
      return true;
    }
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] {
      if (value <= queued_.load(std::memory_order_acquire)) raise_to(caught_up_, value);
      return this->value() >= value;
    });
  }

  void queue_signal(std::uint64_t value) {
    raise_to(queued_, value);
    std::lock_guard lock(mutex_);
    cv_.notify_all();
  }

 private:
  std::atomic<std::uint64_t> host_;          ///< greatest host signal (and the initial value)
  std::atomic<std::uint64_t> queued_{0};     ///< greatest queue signal
  std::atomic<std::uint64_t> caught_up_{0};  ///< greatest queue signal a host wait reached
  std::uint64_t lag_;
  std::mutex mutex_;
  std::condition_variable cv_;
};

class NullQueue final : public BackendQueue {
 public:
  /// As a stream: a wait would order all later work of the queue.
  NullQueue()
      : BackendQueue(QueueTraits{.wait_orders_later_work = true, .acquires_ownership = false, .defers_signals = false}) {}
  void copy_h2d(DeviceRef, HostRef, std::uint64_t) override {}
  void copy_d2h(HostRef, DeviceRef, std::uint64_t) override {}
  void copy_d2d(DeviceRef, DeviceRef, std::uint64_t) override {}
  void signal(BackendSemaphore& sem, std::uint64_t value) override {
    static_cast<NullSemaphore&>(sem).queue_signal(value);  // same backend: front end checked
  }
  void wait(BackendSemaphore&, std::uint64_t) override {}
};

/// FERRY_NULL_LAG, a decimal count of signals; unset or empty = 0.
std::uint64_t lag_from_environment() {
  const char* text = std::getenv("FERRY_NULL_LAG");
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-') {
    throw Error(ErrorCode::invalid_argument,
                std::string("null: environment variable FERRY_NULL_LAG='") + text +
                    "' is not a non-negative integer",
                {}, std::source_location{});
  }
  return v;
}

class NullDevice final : public BackendDevice {
 public:
  explicit NullDevice(std::uint64_t lag) : lag_(lag) {
    caps_.name = "ferry null device (no work done)";
    caps_.backend = Backend::null;
    caps_.is_gpu = false;
    caps_.copy_engines = 1;
    caps_.dedicated_transfer_queue = true;
    caps_.host_memory_registration = true;
    caps_.host_memory_adoption = true;
    caps_.min_alignment = kAlignment;
    caps_.notes = "copies move no bytes; queue signals reached " + std::to_string(lag_) +
                  " signals late (FERRY_NULL_LAG)";
  }

  [[nodiscard]] const Capabilities& capabilities() const override { return caps_; }
  BackendQueue& default_queue(QueueRole role) override { return role == QueueRole::compute ? compute_ : transfer_; }
  std::unique_ptr<BackendQueue> create_queue(QueueRole, int) override { return std::make_unique<NullQueue>(); }
  std::unique_ptr<BackendQueue> adopt_queue(QueueRole, const NativeQueue& native) override {
    if (native.handle == nullptr) {  // the public contract: a null handle names no queue
      throw Error(ErrorCode::invalid_argument, "null: adopt_queue: null handle", {}, std::source_location{});
    }
    return std::make_unique<NullQueue>();
  }
  std::unique_ptr<BackendSemaphore> create_semaphore(std::uint64_t initial) override {
    return std::make_unique<NullSemaphore>(initial, lag_);
  }

  std::unique_ptr<Segment> allocate_segment(std::uint64_t bytes) override {
    void* p = allocate(bytes, "segment");
    return pointer_segment(p, bytes);
  }
  void free_segment(std::unique_ptr<Segment> segment) override { std::free(segment->native); }
  // The null device moves no bytes: an adopted pointer is only described, never accessed.
  AdoptedRange adopt_memory(const NativeMemory& native, std::uint64_t bytes) override {
    require_pointer_only(native, "null");
    return AdoptedRange{pointer_segment(reinterpret_cast<void*>(static_cast<std::uintptr_t>(native.pointer)), bytes), 0};
  }

  std::unique_ptr<HostMemory> allocate_host(std::uint64_t bytes) override {
    return host_memory(static_cast<std::byte*>(allocate(bytes, "host memory")), bytes, /*registered=*/false);
  }
  std::unique_ptr<HostMemory> register_host(std::byte* ptr, std::uint64_t bytes) override {
    return host_memory(ptr, bytes, /*registered=*/true);
  }
  // Like registration: the null device only describes the range, never accesses it.
  std::unique_ptr<HostMemory> adopt_host(std::byte* ptr, std::uint64_t bytes) override {
    return adopted_host_memory(ptr, bytes);
  }
  void free_host(std::unique_ptr<HostMemory> memory) override {
    if (!memory->registered) std::free(memory->ptr);
  }

  void wait_idle() override {}

 private:
  static constexpr std::uint64_t kAlignment = 256;

  static void* allocate(std::uint64_t bytes, const char* what) {
    const std::uint64_t size = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, size);
    if (p == nullptr) {
      throw Error(ErrorCode::out_of_memory,
                  std::string("null: ") + what + " of " + std::to_string(bytes) + " bytes: the heap is exhausted",
                  {}, std::source_location{});
    }
    return p;
  }

  Capabilities caps_;
  std::uint64_t lag_;
  NullQueue compute_, transfer_;
};

}  // namespace

extern const BackendDescriptor null_backend_descriptor;
constinit const BackendDescriptor null_backend_descriptor{
    .id = Backend::null,
    .name = "null",
    .option = "-Dnull=enabled",
    .kind = DeviceKind::inert,
    .built = true,
    .count = []() noexcept { return 1; },
    .open = [](const DeviceOptions&) -> std::unique_ptr<BackendDevice> {
      return std::make_unique<NullDevice>(lag_from_environment());
    },
};

}  // namespace ferry::detail
