// SPDX-License-Identifier: MIT
// CUDA/HIP semaphores: the timeline semaphore of this backend (events plus a host-mapped
// counter), the counters' slabs it takes from the Core, and an imported timeline semaphore of
// another API (backends/pair/).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cuda/cuda_internal.hpp"

namespace ferry::detail::FERRY_GPU_NS {

Core::Counter Core::take_counter() {
  std::lock_guard lock(counters_mutex);
  if (free_counters.empty()) {
    void* slab = nullptr;
    // Mapped: the GPU reads and writes it directly. Portable: valid in every context.
    FERRY_GPU_CHECK(cudaHostAlloc(&slab, kSlabBytes, cudaHostAllocMapped | cudaHostAllocPortable));
    void* device = nullptr;
    try {
      FERRY_GPU_CHECK(cudaHostGetDevicePointer(&device, slab, 0));
    } catch (...) {
      ignore_in_destructor(cudaFreeHost(slab));
      throw;
    }
    slabs.push_back(slab);
    // Capacity for every counter there is, so give_counter never allocates.
    free_counters.reserve(slabs.size() * (kSlabBytes / kCounterStride));
    // One counter per cache line: the host polls them while the device writes others.
    for (std::size_t at = kSlabBytes; at >= kCounterStride; at -= kCounterStride) {
      free_counters.push_back({reinterpret_cast<std::uint64_t*>(static_cast<std::byte*>(slab) + at - kCounterStride),
                               static_cast<std::byte*>(device) + at - kCounterStride});
    }
  }
  const Counter c = free_counters.back();
  free_counters.pop_back();
  return c;
}

void Core::give_counter(Counter c) noexcept {
  std::lock_guard lock(counters_mutex);
  free_counters.push_back(c);  // within the capacity reserved in take_counter
}

void Core::retire_import(vendor::ExternalSemaphore handle) noexcept {
  std::lock_guard lock(counters_mutex);
  try {
    retired_imports.push_back(handle);
  } catch (...) {  // no memory to defer it: destroy it now
    vendor::destroy_external_semaphore(handle);
  }
}

Core::~Core() {
  if (slabs.empty() && retired_imports.empty() && !kernels_loaded && service_kernels.module == nullptr) return;
  const auto guard = ContextGuard::try_bind(*this);
  if (!guard) return;  // no context to bind: the process is going; the driver reclaims the rest
  for (vendor::ExternalSemaphore h : retired_imports) vendor::destroy_external_semaphore(h);
  for (void* slab : slabs) ignore_in_destructor(cudaFreeHost(slab));
  if (kernels_loaded) vendor::unload_kernels(loaded_kernels);
  vendor::unload_service_kernels(service_kernels);
}

namespace {

// ---------------------------------------------------------------------------------------------
// Timeline semaphore.
//
// Choice: events for the common case, stream memory operations on a host-mapped counter for
// what events cannot express. Measured on the H200 (docs/benchmarks.md): event record + wait
// 0.4 us per pair, cuStreamWriteValue64 + cuStreamWaitValue64 2.4 us; the bar for signal + wait
// is 1 us.
//
//  - queue signal(v): record an event after the queue's work and remember (v, event). Only
//    while a counter wait (below) may still be blocked, i.e. one was enqueued for a value not
//    yet reached, also write v to the counter (stream write with its default memory barrier,
//    *before* the event, so a completed event implies a completed write). Writing every signal
//    in that window, not just the first one >= the waited value, matters: queue A waits 10,
//    then signals 11 behind its own wait; queue B's later signal 12 must reach the counter.
//  - queue wait(v):   nothing if v is reached; else wait on the event of the smallest
//    recorded value >= v (cudaStreamWaitEvent; the wait binds the record made before it, so
//    events can be recycled once completed); else v has not been signalled by anyone yet
//    (the host or a queue will do it later): wait on the counter (cuStreamWaitValue64 GEQ),
//    and make later queue signals write the counter. Events cannot express this case:
//    waiting on an event not yet recorded is a no-op.
//  - host signal(v):  release-store v into the counter; queue waits on it proceed.
//  - value():         max(counter, values of completed events), retiring completed events.
//  - host wait:       polls value() with backoff (spin briefly, then sleep up to 1 ms).
//
// Ordering contract (as Vulkan's): signals execute in increasing value order. In particular a
// host signal must not overtake a pending queue signal of a smaller value, and two queues
// signalling one semaphore must be ordered by waits. A queue write of a smaller value landing
// after a larger one would move the counter back (value() never goes back: it keeps the max).
// A semaphore must not be destroyed while queue waits on it are pending.

class Semaphore final : public GpuSemaphore {
 public:
  Semaphore(std::shared_ptr<Core> core, std::uint64_t initial) : core_(std::move(core)) {
    ContextGuard guard(*core_);
    const Core::Counter c = core_->take_counter();
    counter_ = c.host;
    counter_device_ = c.device;
    std::atomic_ref<std::uint64_t>(*counter_).store(initial, std::memory_order_release);
    known_ = initial;
  }

  ~Semaphore() override {
    // Pending signals still write the counter: let them finish before it is reused. The
    // front end keeps a semaphore alive until the queues have passed its operations, so
    // these events are complete and the waits return at once. Any thread may drop the last
    // handle: it binds the context like every entry point.
    if (!pending_.empty() || !spare_.empty()) {
      if (const auto guard = ContextGuard::try_bind(*core_)) {
        for (const Pending& p : pending_) {
          ignore_in_destructor(cudaEventSynchronize(p.event));
          ignore_in_destructor(cudaEventDestroy(p.event));
        }
        for (cudaEvent_t e : spare_) ignore_in_destructor(cudaEventDestroy(e));
      }
    }
    core_->give_counter({counter_, counter_device_});
  }

  std::uint64_t value() override {
    std::lock_guard lock(mutex_);
    if (pending_.empty()) return value_locked();  // no event to query: no context needed
    ContextGuard guard(*core_);
    return value_locked();
  }

  void signal(std::uint64_t value) override {
    std::lock_guard lock(mutex_);
    std::atomic_ref<std::uint64_t>(*counter_).store(value, std::memory_order_release);
    known_ = std::max(known_, value);
  }

  /// Longest sleep between two polls of a host wait: how late a wait may return. 100 us keeps
  /// a loader that waits for batch i-2 before issuing batch i from letting the copy queue run
  /// dry (a 64 MB copy takes 1.2 ms on the H200; with a 1 ms cap, waits returned up to 1 ms
  /// late and owner_owned measured 97% of back-to-back cudaMemcpyAsync at 64 MB). Costs up
  /// to 10k wake-ups per second of waiting.
  static constexpr std::chrono::microseconds kMaxNap{100};
  /// How long a host wait polls without sleeping before its naps begin. A sleep returns a
  /// timer slack (about 50 us on Linux) after its nap, so a napping wait returns up to a nap
  /// plus that slack after its point is reached: a large share of a copy that takes a few
  /// hundred microseconds (a 4K frame). CUDA's own stream and event synchronization spins by
  /// default while the host has cores to spare, so short waits spin here too; the spin is
  /// bounded, so a long wait still sleeps.
  static constexpr std::chrono::microseconds kSpin{2000};

  bool wait(std::uint64_t value, std::chrono::nanoseconds timeout) override {
    const auto spin_until = std::chrono::steady_clock::now() + kSpin;
    std::chrono::nanoseconds nap = std::chrono::microseconds(10);
    return poll_wait(
        timeout, [&] { return this->value() >= value; },
        [&](std::chrono::nanoseconds left) {
          if (std::chrono::steady_clock::now() < spin_until) {
            std::this_thread::yield();
            return false;
          }
          std::this_thread::sleep_for(std::min(nap, left));
          nap = std::min<std::chrono::nanoseconds>(nap * 2, kMaxNap);
          return false;  // the next poll tells
        });
  }

  /// Queue side of signal (see the class comment). Called with the queue's context bound.
  void enqueue_signal(cudaStream_t stream, std::uint64_t value) override {
    std::lock_guard lock(mutex_);
    if (counter_waited_ > known_ && counter_waited_ > value_locked()) {
      vendor::write_value64(stream, counter_device_, value);
    }
    if (pending_.size() >= retire_at_) retire_completed();  // amortizes the event queries
    cudaEvent_t event = nullptr;
    if (spare_.empty()) {
      FERRY_GPU_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    } else {
      event = spare_.back();
      spare_.pop_back();
    }
    try {
      vendor::record_event(event, stream);
    } catch (...) {
      spare_.push_back(event);
      throw;
    }
    pending_.push_back({value, event});
  }

  /// Queue side of wait (see the class comment). Called with the queue's context bound.
  void enqueue_wait(cudaStream_t stream, std::uint64_t value) override {
    std::lock_guard lock(mutex_);
    if (known_ >= value) return;
    const auto it = std::lower_bound(pending_.begin(), pending_.end(), value,
                                     [](const Pending& p, std::uint64_t v) { return p.value < v; });
    if (it != pending_.end()) {  // possibly complete already: then the wait costs nothing
      vendor::stream_wait_event(stream, it->event);
      return;
    }
    if (value_locked() >= value) return;  // reached by a host signal
    if (!core_->stream_mem_ops64) {
      throw Error(ErrorCode::unsupported,
                  FERRY_GPU_LABEL ": queue wait on timeline value " + std::to_string(value) +
                      ", not signalled yet, needs 64-bit stream memory operations, which this device lacks",
                  {}, std::source_location{});
    }
    vendor::wait_value64_geq(stream, counter_device_, value);
    counter_waited_ = std::max(counter_waited_, value);
  }

 private:
  struct Pending {
    std::uint64_t value;
    cudaEvent_t event;
  };
  /// A queue signal retires completed events once kRetireBatch more are pending than after the
  /// last retirement. Not "whenever 16 are pending": while the device runs more than 16 signals
  /// behind the host, that asked the driver 1 + log2(n) questions on every signal (~0.4 us
  /// each on the H200), half of the upload call's host time.
  static constexpr std::size_t kRetireBatch = 16;

  /// Caller holds mutex_ and, when events are pending, has bound the device's context: the
  /// queue entry points and value() do, so the event queries below need no guard of their own
  /// (one context query per entry point, not one per nested helper).
  std::uint64_t value_locked() {
    retire_completed();
    known_ = std::max(known_, std::atomic_ref<std::uint64_t>(*counter_).load(std::memory_order_acquire));
    return known_;
  }

  /// Retire the completed prefix of pending_. Events complete in signal order (on one stream;
  /// across streams the values only grow because signals execute in increasing value order,
  /// see above), so the completed events are a prefix, found by bisection: the newest first
  /// (the usual answer when the device keeps up: all done, one query), then halving. At most
  /// 1 + log2(n) queries, where querying every event costs ~0.2 us per event on the upload
  /// path. Caller holds mutex_ with the context bound.
  void retire_completed() {
    retire_at_ = pending_.size() + kRetireBatch;  // what is left now, plus a batch
    if (pending_.empty()) return;
    const auto complete = [&](std::size_t i) {
      return vendor::event_complete(pending_[i].event);
    };
    std::size_t done = 0;  // pending_[0, done) complete, pending_[not_done, ...) not
    std::size_t not_done = pending_.size();
    if (complete(not_done - 1)) {
      done = not_done;
    } else {
      --not_done;
      while (done < not_done) {
        const std::size_t mid = done + (not_done - done) / 2;
        if (complete(mid)) {
          done = mid + 1;
        } else {
          not_done = mid;
        }
      }
    }
    if (done == 0) return;
    known_ = std::max(known_, pending_[done - 1].value);
    for (std::size_t i = 0; i < done; ++i) spare_.push_back(pending_[i].event);
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(done));
    retire_at_ = pending_.size() + kRetireBatch;
  }

  std::shared_ptr<Core> core_;
  std::mutex mutex_;  ///< guards everything below
  std::uint64_t* counter_ = nullptr;      ///< host view of the mapped counter
  void* counter_device_ = nullptr;        ///< device view of the same word
  std::uint64_t known_ = 0;               ///< greatest value known reached
  std::uint64_t counter_waited_ = 0;      ///< greatest value a queue waits for on the counter
  std::deque<Pending> pending_;           ///< queue signals not seen complete, values increasing
  std::size_t retire_at_ = kRetireBatch;  ///< pending_ size at which a queue signal retires
  std::vector<cudaEvent_t> spare_;        ///< completed events, for reuse
};

// ---------------------------------------------------------------------------------------------
// Interop (backends/pair/): a timeline semaphore of another API (Vulkan) imported from an
// opaque fd. Queue signal/wait are GPU-side (the shim's external semaphore operations with the
// timeline value); the host side belongs to the exporting API, so value/signal/wait here
// refuse. Made only where the shim can import one (not on HIP: its import refuses).
class ExternalSemaphore final : public GpuSemaphore {
 public:
  ExternalSemaphore(std::shared_ptr<Core> core, vendor::ExternalSemaphore handle)
      : core_(std::move(core)), handle_(handle) {}
  ~ExternalSemaphore() override { core_->retire_import(handle_); }
  void enqueue_signal(cudaStream_t stream, std::uint64_t value) override {
    vendor::signal_external_semaphore(handle_, stream, value);
  }
  void enqueue_wait(cudaStream_t stream, std::uint64_t value) override {
    vendor::wait_external_semaphore(handle_, stream, value);
  }
  std::uint64_t value() override { refuse(); }
  void signal(std::uint64_t) override { refuse(); }
  bool wait(std::uint64_t, std::chrono::nanoseconds) override { refuse(); }

 private:
  [[noreturn]] static void refuse() {
    throw Error(ErrorCode::unsupported,
                FERRY_GPU_LABEL ": an imported timeline semaphore is signalled and queried on the host "
                "through the API that exported it",
                {}, std::source_location{});
  }
  std::shared_ptr<Core> core_;
  vendor::ExternalSemaphore handle_;
};

}  // namespace

std::unique_ptr<BackendSemaphore> Device::create_semaphore(std::uint64_t initial) {
  return std::make_unique<Semaphore>(core_, initial);
}

// Interop: a Vulkan timeline semaphore exported as an opaque fd. The vendor owns the fd once
// the import succeeded.
std::unique_ptr<BackendSemaphore> Device::import_semaphore(int fd) {
  ContextGuard guard(*core_);
  return std::make_unique<ExternalSemaphore>(core_, vendor::import_timeline_semaphore(fd));
}

}  // namespace ferry::detail::FERRY_GPU_NS
