// SPDX-License-Identifier: MIT
// The CUDA backend, and the HIP backend when compiled with FERRY_VENDOR_HIP (see
// vendor/vendor.hpp). Written against CUDA runtime names; vendor differences live in the shim.
//
// Contracts this file relies on (backend.hpp): arguments were validated by the front end;
// calls on one queue are serialized by the front end; different queues, the device and
// semaphores may be used from several threads at once, so state shared between them (the
// stream registry, each semaphore) has its own mutex.
//
// Current device: every entry point binds this device to the calling thread for its duration
// and restores the thread's previous binding (ContextGuard), so the engine's notion of the
// current device is never changed by ferry.
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

#include <unistd.h>

#include "backend.hpp"
#include "check.hpp"
#include "cuda/vendor/vendor.hpp"

#if FERRY_GPU_HAS_KERNELS
#include "cuda/kernels.hpp"
#endif

// Two levels so that, under HIP, the call text in errors shows the mapped (hip*) names.
#define FERRY_GPU_CHECK_WITH(expr, classify) \
  FERRY_CHECK_GEN(expr, cudaSuccess, ::ferry::detail::FERRY_GPU_NS::vendor::describe, classify)
#define FERRY_GPU_CHECK(expr) FERRY_GPU_CHECK_WITH(expr, ::ferry::detail::FERRY_GPU_NS::vendor::classify)
#define FERRY_GPU_NAME(symbol) FERRY_GPU_NAME_(symbol)
#define FERRY_GPU_NAME_(symbol) #symbol

namespace ferry::detail::FERRY_GPU_NS {
namespace {

/// Destructors cannot throw. A failure to release a stream/event/allocation there means the
/// context is already gone (device lost, process exit): nothing is left to free.
void ignore_in_destructor(cudaError_t e) noexcept {
  if (e != cudaSuccess) (void)cudaGetLastError();
}

/// State shared by a device, its queues and semaphores (kept alive by whichever goes last).
struct Core {
  int ordinal = 0;
  vendor::DeviceContext context{};
  int max_blocks = 0;             ///< grid cap for kernels (4 blocks per SM)
  int priority_least = 0;         ///< stream priority range (lower number = higher priority)
  int priority_greatest = 0;
  bool stream_mem_ops64 = false;  ///< queue waits on not-yet-signalled values possible

  std::mutex mutex;                     ///< guards `streams`
  std::vector<cudaStream_t> streams;   ///< live queues (own and adopted), for wait_idle

  /// A semaphore's counter: one mapped host word, seen by the host and the device.
  struct Counter {
    std::uint64_t* host = nullptr;
    void* device = nullptr;
  };
  /// Counters come from page-sized slabs of mapped, portable host memory and go back to a
  /// free list when their semaphore goes; the slabs are freed with the Core, once the device
  /// is closed. Freeing each counter with its semaphore would call cudaFreeHost, which
  /// synchronizes the device: dropping one semaphore while a queue waits for a host signal on
  /// another (the host's next step) would then never return. Caller binds the context.
  Counter take_counter() {
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
  void give_counter(Counter c) noexcept {
    std::lock_guard lock(counters_mutex);
    free_counters.push_back(c);  // within the capacity reserved in take_counter
  }
  Core() = default;
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;
  ~Core();

  /// An imported semaphore (the pair backend's) whose handle went: destroyed with the Core.
  /// cudaDestroyExternalSemaphore may wait for the device like cudaFreeHost, with the same
  /// hang when a queue waits for a host signal still to come; the Vulkan side likewise keeps
  /// its queued semaphores until the device goes.
  void retire_import(vendor::ExternalSemaphore handle) noexcept {
    std::lock_guard lock(counters_mutex);
    try {
      retired_imports.push_back(handle);
    } catch (...) {  // no memory to defer it: destroy it now
      vendor::destroy_external_semaphore(handle);
    }
  }
  std::vector<vendor::ExternalSemaphore> retired_imports;

  static constexpr std::size_t kSlabBytes = 4096;
  static constexpr std::size_t kCounterStride = 64;
  std::mutex counters_mutex;  ///< guards slabs, free_counters and retired_imports
  std::vector<void*> slabs;
  std::vector<Counter> free_counters;
};

/// The device a front-end call has bound to this thread (Device::bind_thread), if any: for
/// the duration of that call the thread's binding is known to be its context.
thread_local const Core* t_bound = nullptr;

/// Binds the device's context to the calling thread for one scope; restores the previous one.
/// The current binding is asked every time (cuCtxGetCurrent, a thread-local read in the
/// driver), not cached across ferry calls: the engine may rebind the thread between two ferry
/// calls, and a stale cache would leave its context switched. Inside one front-end call that
/// bound the device (t_bound), nothing is asked. Helpers called inside a guarded entry point
/// rely on its binding instead of guarding again (see Semaphore::value_locked).
class ContextGuard {
 public:
  explicit ContextGuard(const Core& core) {
    if (t_bound == &core) return;  // the enclosing front-end call bound it
    previous_ = vendor::current_context();
    if (previous_ != core.context) {
      vendor::make_current(core.context);
      switched_ = true;
    }
  }
  ~ContextGuard() {
    if (switched_) vendor::restore_current(previous_);
  }
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;

 private:
  vendor::DeviceContext previous_{};
  bool switched_ = false;
};

ErrorCode classify_register(cudaError_t e) {
  return e == cudaErrorHostMemoryAlreadyRegistered ? ErrorCode::invalid_argument : vendor::classify(e);
}

Core::~Core() {
  if (slabs.empty() && retired_imports.empty()) return;
  try {
    ContextGuard guard(*this);
    for (vendor::ExternalSemaphore h : retired_imports) vendor::destroy_external_semaphore(h);
    for (void* slab : slabs) ignore_in_destructor(cudaFreeHost(slab));
  } catch (...) {  // no context to bind: the process is going; the driver reclaims the slabs
  }
}

void* device_ptr(DeviceRef r) { return reinterpret_cast<void*>(r.segment->address + r.offset); }
void* host_ptr(HostRef r) { return r.memory->ptr + r.offset; }

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
/// What a queue needs of a semaphore of this backend: the queue-side signal and wait. Own
/// timelines (Semaphore) and imported ones (ExternalSemaphore) both provide them.
class GpuSemaphore : public BackendSemaphore {
 public:
  /// Called with the queue's context bound.
  virtual void enqueue_signal(cudaStream_t stream, std::uint64_t value) = 0;
  virtual void enqueue_wait(cudaStream_t stream, std::uint64_t value) = 0;
};

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
    // these events are complete and the waits return at once.
    for (const Pending& p : pending_) {
      ignore_in_destructor(cudaEventSynchronize(p.event));
      ignore_in_destructor(cudaEventDestroy(p.event));
    }
    for (cudaEvent_t e : spare_) ignore_in_destructor(cudaEventDestroy(e));
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

/// An imported segment's vendor objects (Segment::backend_data; null for cudaMalloc segments).
struct ImportedMemory {
  vendor::ExternalMemory handle{};
};

/// The ordinal of a device of this backend (peer copies: the front end checked that `device`
/// is one, through peer_support).
int ordinal_of(BackendDevice& device);

#if FERRY_GPU_HAS_IMAGES
// ---------------------------------------------------------------------------------------------
// Images: an engine's cudaArray_t or cudaMipmappedArray_t (Device::adopt_image), never freed.

/// A failure of a call on an array the engine named is the engine's wrong handle or shape.
ErrorCode classify_engine_array(cudaError_t) { return ErrorCode::invalid_argument; }

/// The channel kind of a CUDA block-compressed array of `format` (CUDA 11.5 and later);
/// cudaChannelFormatKindNone for a format with none: the uncompressed ones, and ASTC, which
/// CUDA arrays cannot hold.
cudaChannelFormatKind block_compressed_kind(ImageFormat format) {
  switch (format) {
    case ImageFormat::bc1_rgba_unorm: return cudaChannelFormatKindUnsignedBlockCompressed1;
    case ImageFormat::bc1_rgba_srgb: return cudaChannelFormatKindUnsignedBlockCompressed1SRGB;
    case ImageFormat::bc2_unorm: return cudaChannelFormatKindUnsignedBlockCompressed2;
    case ImageFormat::bc3_unorm: return cudaChannelFormatKindUnsignedBlockCompressed3;
    case ImageFormat::bc3_srgb: return cudaChannelFormatKindUnsignedBlockCompressed3SRGB;
    case ImageFormat::bc4_unorm: return cudaChannelFormatKindUnsignedBlockCompressed4;
    case ImageFormat::bc5_unorm: return cudaChannelFormatKindUnsignedBlockCompressed5;
    case ImageFormat::bc6h_ufloat: return cudaChannelFormatKindUnsignedBlockCompressed6H;
    case ImageFormat::bc6h_sfloat: return cudaChannelFormatKindSignedBlockCompressed6H;
    case ImageFormat::bc7_unorm: return cudaChannelFormatKindUnsignedBlockCompressed7;
    case ImageFormat::bc7_srgb: return cudaChannelFormatKindUnsignedBlockCompressed7SRGB;
    default: return cudaChannelFormatKindNone;
  }
}

/// The channels of a CUDA array holding `format` as a Vulkan image of the matching VkFormat
/// holds it (vulkan::to_vk_format), for an imported image: the format's channels and kind,
/// the packed 32-bit formats as one 32-bit channel (CUDA has no packed kinds; the bytes are
/// what is copied), BC1-7 as their block-compressed kinds. Channels of 0 bits (kind None):
/// no CUDA form (ASTC).
cudaChannelFormatDesc import_channels(ImageFormat format) {
  using F = ImageFormat;
  constexpr auto u = cudaChannelFormatKindUnsigned;
  constexpr auto i = cudaChannelFormatKindSigned;
  constexpr auto fl = cudaChannelFormatKindFloat;
  switch (format) {
    case F::r8_unorm:
    case F::r8_uint: return cudaCreateChannelDesc(8, 0, 0, 0, u);
    case F::rg8_unorm: return cudaCreateChannelDesc(8, 8, 0, 0, u);
    case F::rgba8_unorm:
    case F::rgba8_srgb:
    case F::rgba8_uint:
    case F::bgra8_unorm:
    case F::bgra8_srgb: return cudaCreateChannelDesc(8, 8, 8, 8, u);
    case F::r16_unorm:
    case F::r16_uint: return cudaCreateChannelDesc(16, 0, 0, 0, u);
    case F::r16_float: return cudaCreateChannelDesc(16, 0, 0, 0, fl);
    case F::rg16_float: return cudaCreateChannelDesc(16, 16, 0, 0, fl);
    case F::rgba16_unorm: return cudaCreateChannelDesc(16, 16, 16, 16, u);
    case F::rgba16_float: return cudaCreateChannelDesc(16, 16, 16, 16, fl);
    case F::r32_uint: return cudaCreateChannelDesc(32, 0, 0, 0, u);
    case F::r32_sint: return cudaCreateChannelDesc(32, 0, 0, 0, i);
    case F::r32_float: return cudaCreateChannelDesc(32, 0, 0, 0, fl);
    case F::rg32_uint: return cudaCreateChannelDesc(32, 32, 0, 0, u);
    case F::rg32_float: return cudaCreateChannelDesc(32, 32, 0, 0, fl);
    case F::rgba32_uint: return cudaCreateChannelDesc(32, 32, 32, 32, u);
    case F::rgba32_float: return cudaCreateChannelDesc(32, 32, 32, 32, fl);
    case F::rgb10a2_unorm:
    case F::rg11b10_float: return cudaCreateChannelDesc(32, 0, 0, 0, u);
    case F::bc4_unorm: return cudaCreateChannelDesc(8, 0, 0, 0, block_compressed_kind(format));
    case F::bc5_unorm: return cudaCreateChannelDesc(8, 8, 0, 0, block_compressed_kind(format));
    case F::bc6h_ufloat:
    case F::bc6h_sfloat: return cudaCreateChannelDesc(16, 16, 16, 0, block_compressed_kind(format));
    default: break;
  }
  const cudaChannelFormatKind bc = block_compressed_kind(format);
  if (bc != cudaChannelFormatKindNone) return cudaCreateChannelDesc(8, 8, 8, 8, bc);  // BC1-3, BC7
  return cudaCreateChannelDesc(0, 0, 0, 0, cudaChannelFormatKindNone);
}

/// Whether `kind` is one of the block-compressed channel kinds (BC1-7, signed or not, sRGB).
bool is_block_compressed(cudaChannelFormatKind kind) {
  return kind >= cudaChannelFormatKindUnsignedBlockCompressed1 &&
         kind <= cudaChannelFormatKindUnsignedBlockCompressed7SRGB;
}

/// An array's elements in an error message: "32-bit elements", or the channel kind of a
/// block-compressed array.
std::string describe_elements(const cudaChannelFormatDesc& channels) {
  if (is_block_compressed(channels.f)) {
    return "block-compressed elements (cudaChannelFormatKind " + std::to_string(static_cast<int>(channels.f)) + ")";
  }
  return std::to_string(channels.x + channels.y + channels.z + channels.w) + "-bit elements";
}

struct GpuImage final : BackendImage {
  cudaArray_t array = nullptr;               ///< one level (not mipmapped)
  cudaMipmappedArray_t mipmapped = nullptr;  ///< the levels (mipmapped)
  bool layered = false;                      ///< cudaArrayLayered: z addresses layers
  bool volume = false;                       ///< a 3D array: z addresses depth slices
  std::uint32_t block_bytes = 0;             ///< bytes per element (per block when compressed)
  std::uint32_t block_width = 1;             ///< texels per element, across (4 for BC)
  std::uint32_t block_height = 1;            ///< texels per element, down (4 for BC)
  /// An imported image (import_image) owns its import: `mipmapped` mapped onto `external`,
  /// both freed here, in the device's context (`core`). Adopted arrays own nothing.
  std::shared_ptr<Core> core;
  cudaExternalMemory_t external = nullptr;

  GpuImage() = default;
  GpuImage(const GpuImage&) = delete;
  GpuImage& operator=(const GpuImage&) = delete;
  ~GpuImage() override {
    if (external == nullptr) return;
    try {
      ContextGuard guard(*core);
      if (mipmapped != nullptr) ignore_in_destructor(cudaFreeMipmappedArray(mipmapped));
      ignore_in_destructor(cudaDestroyExternalMemory(external));
    } catch (...) {  // no context to bind: the process is going, and the driver reclaims the import
    }
  }

  /// The array of level `mip` (checked at adoption to exist).
  [[nodiscard]] cudaArray_t level(std::uint32_t mip) const {
    if (mipmapped == nullptr) return array;
    cudaArray_t a = nullptr;
    FERRY_GPU_CHECK(cudaGetMipmappedArrayLevel(&a, mipmapped, mip));
    return a;
  }
};

/// Copy every region between linear memory at `linear` (host or device, per `kind`) and
/// `image`, on `stream`: a plain 2D region with cudaMemcpy2DToArrayAsync /
/// cudaMemcpy2DFromArrayAsync, layers and depth slices with cudaMemcpy3DAsync (the linear
/// side's slices `image_height` rows of `row_pitch` bytes apart).
///
/// The two calls address a block-compressed array differently, and the front end's regions
/// are whole blocks (offsets on block boundaries, extents too unless they end at the level's
/// edge), so both forms below are exact:
///  - the 2D calls count in blocks: the x offset and the width in bytes of whole blocks
///    (blocks x block_bytes), the y offset and the height in rows of blocks;
///  - cudaMemcpy3DAsync counts the array's position and extent in texels (a partial block at
///    the edge included), while the pitched side's `ysize` is in rows of blocks.
/// For an uncompressed array a block is one texel, and the same arithmetic gives the usual
/// byte offsets and texel rows.
void copy_image_regions(const GpuImage& image, std::byte* linear, std::span<const ImageCopy> regions, bool to_image,
                        cudaMemcpyKind kind, cudaStream_t stream) {
  for (const ImageCopy& c : regions) {
    const cudaArray_t a = image.level(c.mip);
    std::byte* at = linear + c.buffer_offset;
    if (!image.layered && !image.volume) {
      const std::size_t x_bytes = std::size_t{c.x / image.block_width} * image.block_bytes;
      const std::size_t y_rows = c.y / image.block_height;
      const std::size_t width_bytes = c.row_bytes;  // whole blocks: ceil(width / block_width) of them
      const std::size_t rows = c.rows;              // rows of blocks
      if (to_image) {
        FERRY_GPU_CHECK(cudaMemcpy2DToArrayAsync(a, x_bytes, y_rows, at, c.row_pitch, width_bytes, rows, kind, stream));
      } else {
        FERRY_GPU_CHECK(cudaMemcpy2DFromArrayAsync(at, c.row_pitch, a, x_bytes, y_rows, width_bytes, rows, kind, stream));
      }
      continue;
    }
    cudaMemcpy3DParms p{};
    // The fields of make_cudaPitchedPtr / make_cudaPos / make_cudaExtent (driver_functions.h,
    // which the runtime API header alone does not include).
    cudaPitchedPtr pitched{};
    pitched.ptr = at;
    pitched.pitch = c.row_pitch;
    pitched.xsize = c.width;
    pitched.ysize = c.image_height / image.block_height;  // rows of blocks per slice
    cudaPos pos{};
    pos.x = c.x;
    pos.y = c.y;
    pos.z = image.layered ? c.base_layer : c.z;
    if (to_image) {
      p.srcPtr = pitched;
      p.dstArray = a;
      p.dstPos = pos;
    } else {
      p.srcArray = a;
      p.srcPos = pos;
      p.dstPtr = pitched;
    }
    p.extent.width = c.width;
    p.extent.height = c.height;
    p.extent.depth = image.layered ? c.layers : c.depth;
    p.kind = kind;
    FERRY_GPU_CHECK(cudaMemcpy3DAsync(&p, stream));
  }
}
#endif

// ---------------------------------------------------------------------------------------------
// Queues: one stream each, own (destroyed with the queue) or adopted (never destroyed).
class Queue final : public BackendQueue {
 public:
  Queue(std::shared_ptr<Core> core, cudaStream_t stream, bool owned)
      : core_(std::move(core)), stream_(stream), owned_(owned) {
    std::lock_guard lock(core_->mutex);
    core_->streams.push_back(stream_);
  }

  ~Queue() override {
    {
      std::lock_guard lock(core_->mutex);
      std::erase(core_->streams, stream_);
    }
    // Returns at once; the stream's resources go once its pending work has completed.
    if (owned_) ignore_in_destructor(cudaStreamDestroy(stream_));
  }

  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  void copy_h2d(DeviceRef dst, HostRef src, std::uint64_t bytes) override {
    ContextGuard guard(*core_);
    vendor::copy_h2d_async(device_ptr(dst), host_ptr(src), bytes, stream_);
  }

  void copy_d2h(HostRef dst, DeviceRef src, std::uint64_t bytes) override {
    ContextGuard guard(*core_);
    vendor::copy_d2h_async(host_ptr(dst), device_ptr(src), bytes, stream_);
  }

  void copy_d2d(DeviceRef dst, DeviceRef src, std::uint64_t bytes) override {
    ContextGuard guard(*core_);
    vendor::copy_d2d_async(device_ptr(dst), device_ptr(src), bytes, stream_);
  }

#if FERRY_GPU_HAS_BATCH_COPY
  void copy_h2d_many(std::span<const HostDeviceCopy> copies) override { copy_many(copies, true); }
  void copy_d2h_many(std::span<const HostDeviceCopy> copies) override { copy_many(copies, false); }

  /// One cudaMemcpyBatchAsync for the whole batch: one driver call, where a loop of single
  /// copies pays the per-call cost for each copy. Stream-ordered source access keeps the
  /// batch's ordering that of single copies on this stream. The legacy default stream, which
  /// the batch call refuses, and a single copy take the single-copy path.
  void copy_many(std::span<const HostDeviceCopy> copies, bool to_device) {
    if (copies.empty()) return;
    if (copies.size() == 1 || stream_ == nullptr || stream_ == cudaStreamLegacy || stream_ == cudaStreamPerThread) {
      for (const HostDeviceCopy& c : copies) {
        if (to_device) {
          copy_h2d(c.device, c.host, c.bytes);
        } else {
          copy_d2h(c.host, c.device, c.bytes);
        }
      }
      return;
    }
    ContextGuard guard(*core_);
    std::vector<void*> dsts(copies.size());
    std::vector<const void*> srcs(copies.size());
    std::vector<std::size_t> sizes(copies.size());
    for (std::size_t i = 0; i < copies.size(); ++i) {
      void* device = device_ptr(copies[i].device);
      void* host = host_ptr(copies[i].host);
      dsts[i] = to_device ? device : host;
      srcs[i] = to_device ? host : device;
      sizes[i] = copies[i].bytes;
    }
    cudaMemcpyAttributes attributes{};
    attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attributes.flags = cudaMemcpyFlagDefault;
    std::size_t first = 0;  // every copy uses attributes[0]
    FERRY_GPU_CHECK(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), copies.size(), &attributes, &first,
                                         1, stream_));
  }
#endif

  // On the stream's copy engine. With peer access enabled (peer_support) the copy engine
  // reads or writes the other device's memory over the interconnect; without it the driver
  // stages the copy through pinned host memory, still ordered on this stream.
  void copy_peer(DeviceRef dst, BackendDevice& dst_device, DeviceRef src, BackendDevice& src_device,
                 std::uint64_t bytes) override {
    ContextGuard guard(*core_);
    FERRY_GPU_CHECK(cudaMemcpyPeerAsync(device_ptr(dst), ordinal_of(dst_device), device_ptr(src),
                                        ordinal_of(src_device), bytes, stream_));
  }

  void signal(BackendSemaphore& sem, std::uint64_t value) override {
    ContextGuard guard(*core_);
    static_cast<GpuSemaphore&>(sem).enqueue_signal(stream_, value);  // same backend: front end checked
  }

  void wait(BackendSemaphore& sem, std::uint64_t value) override {
    ContextGuard guard(*core_);
    static_cast<GpuSemaphore&>(sem).enqueue_wait(stream_, value);
  }

#if FERRY_GPU_HAS_IMAGES
  void copy_h2i(BackendImage& dst, HostRef src, std::span<const ImageCopy> regions) override {
    ContextGuard guard(*core_);
    copy_image_regions(static_cast<GpuImage&>(dst), static_cast<std::byte*>(host_ptr(src)), regions, true,
                       cudaMemcpyHostToDevice, stream_);
  }
  void copy_i2h(HostRef dst, BackendImage& src, std::span<const ImageCopy> regions) override {
    ContextGuard guard(*core_);
    copy_image_regions(static_cast<GpuImage&>(src), static_cast<std::byte*>(host_ptr(dst)), regions, false,
                       cudaMemcpyDeviceToHost, stream_);
  }
  void copy_d2i(BackendImage& dst, DeviceRef src, std::span<const ImageCopy> regions) override {
    ContextGuard guard(*core_);
    copy_image_regions(static_cast<GpuImage&>(dst), static_cast<std::byte*>(device_ptr(src)), regions, true,
                       cudaMemcpyDeviceToDevice, stream_);
  }
  void copy_i2d(DeviceRef dst, BackendImage& src, std::span<const ImageCopy> regions) override {
    ContextGuard guard(*core_);
    copy_image_regions(static_cast<GpuImage&>(src), static_cast<std::byte*>(device_ptr(dst)), regions, false,
                       cudaMemcpyDeviceToDevice, stream_);
  }
#endif

  /// cudaStreamWaitEvent and cuStreamWaitValue64 are stream operations: all later work of the
  /// stream starts after them.
  [[nodiscard]] bool wait_orders_later_work() const override { return true; }

  bool synthetic_compute(DeviceRef in, DeviceRef out, std::uint64_t bytes, std::uint32_t units) override {
#if FERRY_GPU_HAS_KERNELS
    ContextGuard guard(*core_);
    FERRY_GPU_CHECK(launch_synthetic_compute(device_ptr(in), device_ptr(out), bytes, units,
                                             core_->max_blocks, stream_));
    return true;
#else
    (void)in, (void)out, (void)bytes, (void)units;
    return false;  // no device compiler built kernels.cu for this vendor
#endif
  }

 private:
  std::shared_ptr<Core> core_;
  cudaStream_t stream_;
  bool owned_;
};

// ---------------------------------------------------------------------------------------------
class Device final : public BackendDevice {
 public:
  void bind_thread(ThreadBinding& binding) override {
    binding.outer = t_bound;
    if (t_bound == core_.get()) return;  // nested in a call that bound this device
    const vendor::DeviceContext previous = vendor::current_context();
    if (previous != core_->context) {
      vendor::make_current(core_->context);
      binding.switched = true;
    }
    binding.previous = vendor::context_word(previous);
    t_bound = core_.get();
  }

  void unbind_thread(ThreadBinding& binding) noexcept override {
    if (binding.outer == core_.get()) return;  // nested: bind_thread changed nothing
    if (binding.switched) vendor::restore_current(vendor::context_from_word(binding.previous));
    t_bound = static_cast<const Core*>(binding.outer);
  }

  explicit Device(int ordinal) : core_(std::make_shared<Core>()) {
    core_->ordinal = ordinal;
    core_->context = vendor::device_context(ordinal);
    ContextGuard guard(*core_);

    cudaDeviceProp prop{};
    FERRY_GPU_CHECK(cudaGetDeviceProperties(&prop, ordinal));
    const vendor::Features features = vendor::query_features(ordinal, prop);
    FERRY_GPU_CHECK(cudaDeviceGetStreamPriorityRange(&core_->priority_least, &core_->priority_greatest));
    core_->max_blocks = std::max(1, prop.multiProcessorCount) * 4;
    core_->stream_mem_ops64 = features.stream_mem_ops64;
#if FERRY_GPU_HAS_KERNELS
    // Before any queue can wait for the host: a lazily loaded kernel's first launch could
    // otherwise wait behind such a queue (kernels.hpp).
    FERRY_GPU_CHECK(preload_kernels());
#endif

    caps_.name = prop.name;
    caps_.backend = FERRY_GPU_BACKEND;
    caps_.is_gpu = true;
    caps_.synthetic_compute = FERRY_GPU_HAS_KERNELS != 0;
    caps_.device_memory_bytes = prop.totalGlobalMem;
    caps_.copy_engines = features.copy_engines;
    caps_.dedicated_transfer_queue = true;   // its own stream; copies go to the copy engines
    caps_.host_memory_registration = true;   // cudaHostRegister
    caps_.host_memory_adoption = true;       // cudaPointerGetAttributes says page-locked
    caps_.min_alignment = 256;               // cudaMalloc guarantees 256; keeps copies aligned
    caps_.uuid = features.uuid_bytes;
    auto yes_no = [](bool b) { return b ? "yes" : "no"; };
    caps_.notes = "uuid " + features.uuid + "; " + std::to_string(prop.multiProcessorCount) +
                  " multiprocessors; memory pools: " + yes_no(features.memory_pools) +
                  "; 64-bit stream memory ops: " + yes_no(features.stream_mem_ops64) +
                  (features.stream_mem_ops64 ? "" : " (queue waits on values not yet signalled: unsupported)") +
                  "; stream priorities " + std::to_string(core_->priority_least) + " (least) to " +
                  std::to_string(core_->priority_greatest) + " (greatest)";

    compute_ = make_queue(0);
    transfer_ = make_queue(0);
  }

  ~Device() override = default;  // queues go first (members), then the Core when unshared

  const Capabilities& capabilities() const override { return caps_; }

  BackendQueue& default_queue(QueueRole role) override {
    return role == QueueRole::compute ? *compute_ : *transfer_;
  }

  std::unique_ptr<BackendQueue> create_queue(QueueRole /*role*/, int priority) override {
    return make_queue(priority);
  }

  std::unique_ptr<BackendQueue> adopt_queue(QueueRole /*role*/, const NativeQueue& native) override {
    auto stream = static_cast<cudaStream_t>(native.handle);
    if (vendor::is_implicit_stream(stream)) {
      throw Error(ErrorCode::invalid_argument,
                  FERRY_GPU_LABEL ": adopt_queue: the null handle or the per-thread default stream cannot be "
                  "adopted: the per-thread stream names a different stream on each thread, so ferry could "
                  "not order work on it; pass a stream object (or the legacy default stream)",
                  {}, std::source_location{});
    }
    ContextGuard guard(*core_);
    if (vendor::is_legacy_stream(stream)) return std::make_unique<Queue>(core_, stream, /*owned=*/false);
    if (const auto device = vendor::stream_device(stream); device && *device != core_->ordinal) {
      throw Error(ErrorCode::invalid_argument,
                  FERRY_GPU_LABEL ": adopt_queue: stream belongs to device " + std::to_string(*device) +
                      ", not " + std::to_string(core_->ordinal),
                  {}, std::source_location{});
    }
    return std::make_unique<Queue>(core_, stream, /*owned=*/false);
  }

  std::unique_ptr<BackendSemaphore> create_semaphore(std::uint64_t initial) override {
    return std::make_unique<Semaphore>(core_, initial);
  }

  // Segments come from cudaMalloc, not cuMemCreate/cuMemMap: the front end's pool
  // sub-allocates whole segments and never remaps them, so physical/virtual separation buys
  // nothing here, and cudaMalloc has the same call under HIP. cudaFree synchronizes the
  // device: the pool frees segments only when trimming.
  // An engine's device pointer: its first and last byte must be device (or managed) memory of
  // this device. Both ends are asked, so a range that runs off the device's memory into host
  // memory, or starts in another device's, is refused; a range spanning two allocations of
  // this device cannot be told apart from one. A range inside the one mapping the first
  // byte's answer reports has its last byte in the same memory, so it is asked once.
  AdoptedRange adopt_memory(const NativeMemory& native, std::uint64_t bytes) override {
    require_pointer_only(native, FERRY_GPU_LABEL);
    ContextGuard guard(*core_);
    for (const std::uint64_t at : {native.pointer, native.pointer + bytes - 1}) {
      const vendor::PointerLocation where = vendor::pointer_location(reinterpret_cast<const void*>(at));
      const std::string which = at == native.pointer ? "first" : "last";
      if (!where.device_memory) {
        throw Error(ErrorCode::invalid_argument,
                    FERRY_GPU_LABEL ": the range's " + which + " byte is not " FERRY_GPU_VENDOR " device memory",
                    {}, std::source_location{});
      }
      if (where.device != core_->ordinal) {
        throw Error(ErrorCode::invalid_argument,
                    FERRY_GPU_LABEL ": the range's " + which + " byte is memory of device " +
                        std::to_string(where.device) + ", not of device " + std::to_string(core_->ordinal),
                    {}, std::source_location{});
      }
      if (where.maps(native.pointer, bytes)) break;
    }
    return AdoptedRange{pointer_segment(reinterpret_cast<void*>(static_cast<std::uintptr_t>(native.pointer)), bytes), 0};
  }

#if FERRY_GPU_HAS_IMAGES
  // An engine's array: its elements, extent, layering and levels are asked of the driver
  // (cudaArrayGetInfo on every level) and must be the stated shape's. The elements of an
  // uncompressed format are compared by size (ferry never converts, so any kind of the same
  // bits copies the same bytes), those of a BC format by channel kind (the bits per channel
  // the driver reports do not describe a block). ASTC has no CUDA array form.
  std::unique_ptr<BackendImage> adopt_image(const NativeImage& native, const ImageDesc& desc,
                                            std::uint32_t /*owner_family*/) override {
    if (native.host_pointer != 0 || native.host_row_pitch != 0 || native.host_slice_pitch != 0 ||
        native.vulkan_image != 0 || native.vulkan_layout != 0 || native.vulkan_final_layout != 0 ||
        !native.vulkan_queue_families.empty() || native.vulkan_memory != 0 || native.vulkan_memory_offset != 0 ||
        native.vulkan_memory_size != 0 || native.vulkan_dedicated || native.vulkan_usage != 0) {
      throw Error(ErrorCode::invalid_argument,
                  FERRY_GPU_LABEL ": a host or Vulkan field of NativeImage is set; a " FERRY_GPU_VENDOR
                                  " image is NativeImage::cuda_array",
                  {}, std::source_location{});
    }
    if (native.cuda_array == 0) {
      throw Error(ErrorCode::invalid_argument, FERRY_GPU_LABEL ": NativeImage::cuda_array is null", {},
                  std::source_location{});
    }
    const FormatInfo f = format_info(desc.format);
    const cudaChannelFormatKind bc_kind = block_compressed_kind(desc.format);
    if (f.compressed() && bc_kind == cudaChannelFormatKindNone) {
      throw Error(ErrorCode::unsupported,
                  FERRY_GPU_LABEL ": " + std::string(f.name) +
                      " has no CUDA array form (CUDA arrays hold the block-compressed formats BC1-7 only)",
                  {}, std::source_location{});
    }
    if (!native.cuda_mipmapped && desc.mip_levels != 1) {
      throw Error(ErrorCode::invalid_argument,
                  FERRY_GPU_LABEL ": a cudaArray_t has one level, not " + std::to_string(desc.mip_levels) +
                      " (adopt a cudaMipmappedArray_t with cuda_mipmapped = true)",
                  {}, std::source_location{});
    }
    ContextGuard guard(*core_);
    auto image = std::make_unique<GpuImage>();
    image->block_bytes = f.block_bytes;
    image->block_width = f.block_width;
    image->block_height = f.block_height;
    image->volume = desc.depth > 1;
    if (native.cuda_mipmapped) {
      image->mipmapped = reinterpret_cast<cudaMipmappedArray_t>(static_cast<std::uintptr_t>(native.cuda_array));
    } else {
      image->array = reinterpret_cast<cudaArray_t>(static_cast<std::uintptr_t>(native.cuda_array));
    }
    for (std::uint32_t l = 0; l < desc.mip_levels; ++l) {
      cudaArray_t a = image->array;
      if (image->mipmapped != nullptr) {
        FERRY_GPU_CHECK_WITH(cudaGetMipmappedArrayLevel(&a, image->mipmapped, l), classify_engine_array);
      }
      cudaChannelFormatDesc channels{};
      cudaExtent extent{};
      unsigned int flags = 0;
      FERRY_GPU_CHECK_WITH(cudaArrayGetInfo(&channels, &extent, &flags, a), classify_engine_array);
      const int bits = channels.x + channels.y + channels.z + channels.w;
      const bool elements_match = f.compressed() ? channels.f == bc_kind
                                                 : bits == static_cast<int>(f.block_bytes * 8) &&
                                                       !is_block_compressed(channels.f);
      const bool layered = (flags & cudaArrayLayered) != 0;
      const Extent3D e = mip_extent(desc, l);
      const std::size_t want_height = e.height;
      const std::size_t want_depth = layered ? desc.array_layers : (desc.depth > 1 ? e.depth : 0);
      // A block-compressed array's extent counts texels, as the stated shape does.
      const bool matches = elements_match && extent.width == e.width &&
                           (extent.height == want_height || (extent.height == 0 && want_height == 1)) &&
                           (extent.depth == want_depth || (extent.depth == 1 && want_depth == 0)) &&
                           (layered || desc.array_layers == 1);
      if (!matches) {
        const std::string stated =
            f.compressed() ? std::string(f.name) + " (block-compressed elements, cudaChannelFormatKind " +
                                 std::to_string(static_cast<int>(bc_kind)) + ")"
                           : std::string(f.name) + " (" + std::to_string(f.block_bytes * 8) + "-bit elements)";
        throw Error(ErrorCode::invalid_argument,
                    FERRY_GPU_LABEL ": level " + std::to_string(l) + " of the array is " + std::to_string(extent.width) +
                        "x" + std::to_string(extent.height) + "x" + std::to_string(extent.depth) + (layered ? " layered" : "") +
                        " of " + describe_elements(channels) + ", not the stated " + std::to_string(e.width) + "x" +
                        std::to_string(e.height) + "x" + std::to_string(desc.depth > 1 ? e.depth : desc.array_layers) +
                        " of " + stated,
                    "cudaArrayGetInfo", std::source_location{});
      }
      if (l == 0) image->layered = layered;
    }
    return image;
  }

  // Interop (images): the memory of another API's image (a Vulkan image's, exported as an
  // opaque fd) imported whole, and the image's levels mapped at `offset` as a mipmapped array
  // of the stated shape and the format's channels (import_channels). The driver lays the
  // array out as the exporter laid out the image, given the same shape, format and levels
  // (and the color-attachment flag, which changes that layout).
  std::unique_ptr<BackendImage> import_image(const ExternalMemory& memory, std::uint64_t offset, const ImageDesc& desc,
                                             bool color_attachment) override {
    const FormatInfo f = format_info(desc.format);
    const cudaChannelFormatDesc channels = import_channels(desc.format);
    if (channels.f == cudaChannelFormatKindNone) {
      ::close(memory.fd);
      throw Error(ErrorCode::unsupported,
                  FERRY_GPU_LABEL ": " + std::string(f.name) +
                      " has no CUDA array form (CUDA arrays hold the block-compressed formats BC1-7 only)",
                  {}, std::source_location{});
    }
    ContextGuard guard(*core_);
    cudaExternalMemoryHandleDesc handle{};
    handle.type = cudaExternalMemoryHandleTypeOpaqueFd;
    handle.handle.fd = memory.fd;
    handle.size = memory.size;
    handle.flags = memory.dedicated ? cudaExternalMemoryDedicated : 0;
    auto image = std::make_unique<GpuImage>();
    image->core = core_;
    // The engine's statement of its allocation (size, dedication) is what the import checks.
    // The fd is CUDA's once imported, and closed here when the import fails.
    try {
      FERRY_GPU_CHECK_WITH(cudaImportExternalMemory(&image->external, &handle), classify_engine_array);
    } catch (...) {
      ::close(memory.fd);
      throw;
    }
    const bool layered = desc.array_layers > 1;
    cudaExternalMemoryMipmappedArrayDesc levels{};
    levels.offset = offset;
    levels.formatDesc = channels;
    levels.extent.width = desc.width;
    levels.extent.height = desc.height;
    levels.extent.depth = layered ? desc.array_layers : (desc.depth > 1 ? desc.depth : 0);
    levels.flags = (layered ? cudaArrayLayered : 0u) | (color_attachment ? cudaArrayColorAttachment : 0u);
    levels.numLevels = desc.mip_levels;
    FERRY_GPU_CHECK_WITH(cudaExternalMemoryGetMappedMipmappedArray(&image->mipmapped, image->external, &levels),
                         classify_engine_array);  // on failure the destructor destroys the import
    image->block_bytes = f.block_bytes;
    image->block_width = f.block_width;
    image->block_height = f.block_height;
    image->layered = layered;
    image->volume = desc.depth > 1;
    return image;
  }
#endif

  std::unique_ptr<Segment> allocate_segment(std::uint64_t bytes) override {
    ContextGuard guard(*core_);
    void* p = nullptr;
    FERRY_GPU_CHECK(cudaMalloc(&p, bytes));  // out of memory -> ErrorCode::out_of_memory
    return pointer_segment(p, bytes);
  }

  void free_segment(std::unique_ptr<Segment> segment) override {
    ContextGuard guard(*core_);
    std::unique_ptr<ImportedMemory> imported(static_cast<ImportedMemory*>(segment->backend_data));
    FERRY_GPU_CHECK(cudaFree(segment->native));  // also for a mapped import (CUDA documents so)
    if (imported) vendor::destroy_external_memory(imported->handle);
  }

  // Interop: a Vulkan timeline semaphore exported as an opaque fd. The vendor owns the fd once
  // the import succeeded.
  std::unique_ptr<BackendSemaphore> import_semaphore(int fd) override {
    ContextGuard guard(*core_);
    return std::make_unique<ExternalSemaphore>(core_, vendor::import_timeline_semaphore(fd));
  }

  // Interop: Vulkan device memory exported as an opaque fd, mapped whole as one buffer.
  std::unique_ptr<Segment> import_segment(const ExternalMemory& memory) override {
    ContextGuard guard(*core_);
    auto imported = std::make_unique<ImportedMemory>();
    void* p = vendor::import_memory(memory.fd, memory.size, memory.dedicated, &imported->handle);
    auto segment = pointer_segment(p, memory.size);
    segment->backend_data = imported.release();
    return segment;
  }

  std::unique_ptr<HostMemory> allocate_host(std::uint64_t bytes) override {
    ContextGuard guard(*core_);
    void* p = nullptr;
    // Portable: pinned for every context. Cannot pin -> ErrorCode::out_of_memory.
    FERRY_GPU_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
    auto memory = std::make_unique<HostMemory>();
    memory->ptr = static_cast<std::byte*>(p);
    memory->size = bytes;
    return memory;
  }

  std::unique_ptr<HostMemory> register_host(std::byte* ptr, std::uint64_t bytes) override {
    ContextGuard guard(*core_);
    // A range (partly) registered already, e.g. by the engine, is the caller's mistake.
    FERRY_GPU_CHECK_WITH(cudaHostRegister(ptr, bytes, cudaHostRegisterPortable), classify_register);
    auto memory = std::make_unique<HostMemory>();
    memory->ptr = ptr;
    memory->size = bytes;
    memory->registered = true;
    return memory;
  }

  // An engine's page-locked memory: DMA reads and writes it directly only if the driver
  // knows it as page-locked for this device (else it would treat it as pageable and copy it
  // through its own staging, synchronously). Both ends are asked, since an allocation ends
  // where its pinning ends. Memory pinned under another device's context counts for this
  // one only when portable; cudaHostGetFlags answers that for cudaHostAlloc memory, and
  // fails for registered memory, whose flags the driver does not report. A range inside the
  // one mapping the first byte's answer reports is asked once, as in adopt_memory.
  std::unique_ptr<HostMemory> adopt_host(std::byte* ptr, std::uint64_t bytes) override {
    ContextGuard guard(*core_);
    for (std::byte* at : {ptr, ptr + (bytes - 1)}) {
      const vendor::PointerLocation where = vendor::pointer_location(at);
      const std::string which = at == ptr ? "first" : "last";
      if (!where.host_memory) {
        throw Error(ErrorCode::invalid_argument,
                    FERRY_GPU_LABEL ": the range's " + which + " byte is not page-locked host memory (" +
                        (where.device_memory ? "it is device memory; adopt it with Device::adopt_memory"
                                             : "pageable: pin it (cudaHostAlloc, cudaHostRegister, "
                                               "HostPool::register_memory) or upload it as pageable memory") +
                        ")",
                    {}, std::source_location{});
      }
      const bool whole = where.maps(reinterpret_cast<std::uintptr_t>(ptr), bytes);
      if (where.device == core_->ordinal) {
        if (whole) break;
        continue;
      }
      unsigned int flags = 0;
      const cudaError_t e = cudaHostGetFlags(&flags, at);
      if (e == cudaErrorInvalidValue) (void)cudaGetLastError();
      if (e != cudaSuccess && e != cudaErrorInvalidValue) {
        raise_vendor_error(vendor::classify(e), FERRY_GPU_NAME(cudaHostGetFlags), vendor::describe(e), __FILE__,
                           __LINE__);
      }
      if (e != cudaSuccess || (flags & cudaHostAllocPortable) == 0) {
        throw Error(ErrorCode::invalid_argument,
                    FERRY_GPU_LABEL ": the range's " + which + " byte is page-locked for device " +
                        std::to_string(where.device) + ", not for device " + std::to_string(core_->ordinal) +
                        ", and not portable (" +
                        (e == cudaSuccess ? std::string("cudaHostGetFlags reports no cudaHostAllocPortable")
                                          : std::string("registered memory, whose flags the driver does not report")) +
                        ")",
                    {}, std::source_location{});
      }
      if (whole) break;
    }
    return adopted_host_memory(ptr, bytes);
  }

  void free_host(std::unique_ptr<HostMemory> memory) override {
    if (memory->adopted) return;  // the engine's: nothing was pinned or registered by ferry
    ContextGuard guard(*core_);
    if (memory->registered) {
      FERRY_GPU_CHECK(cudaHostUnregister(memory->ptr));
    } else {
      FERRY_GPU_CHECK(cudaFreeHost(memory->ptr));
    }
  }

  // Peer copies between two devices of this backend. The route is decided once per peer:
  // peer access where the topology allows it (cudaDeviceCanAccessPeer), enabled for this
  // device's context, so its copy engines reach the peer's memory directly; otherwise the
  // driver stages cudaMemcpyPeerAsync through host memory. Semaphores work across devices:
  // stream waits on another device's events are valid within one process, and the counter
  // is portable host-mapped memory. The same GPU opened twice copies as within one device.
  PeerSupport peer_support(BackendDevice& other) override {
    auto* peer = dynamic_cast<Device*>(&other);
    PeerSupport s;
    if (peer == nullptr) {
      s.reason = FERRY_GPU_LABEL ": the other device is not a " FERRY_GPU_LABEL " device";
      return s;
    }
    const int theirs = peer->core_->ordinal;
    std::lock_guard lock(peers_mutex_);
    for (const auto& [ordinal, known] : peers_) {
      if (ordinal == theirs) return known;
    }
    s.possible = true;
    s.path = PeerPath::direct;
    if (theirs != core_->ordinal) {
      ContextGuard guard(*core_);
      int can = 0;
      FERRY_GPU_CHECK(cudaDeviceCanAccessPeer(&can, core_->ordinal, theirs));
      if (can != 0) {
        const cudaError_t e = cudaDeviceEnablePeerAccess(theirs, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled) {
          (void)cudaGetLastError();  // enabled by the engine or an earlier open: fine
        } else {
          FERRY_GPU_CHECK(e);
        }
      } else {
        s.path = PeerPath::staged;
      }
    }
    peers_.emplace_back(theirs, s);
    return s;
  }

  [[nodiscard]] int ordinal() const { return core_->ordinal; }

  void wait_idle() override {
    std::vector<cudaStream_t> streams;
    {
      std::lock_guard lock(core_->mutex);
      streams = core_->streams;
    }
    ContextGuard guard(*core_);
    for (cudaStream_t s : streams) FERRY_GPU_CHECK(cudaStreamSynchronize(s));
  }

 private:
  std::unique_ptr<Queue> make_queue(int priority) {
    ContextGuard guard(*core_);
    cudaStream_t stream = nullptr;
    // Non-blocking: never synchronizes with the legacy default stream the engine may use.
    FERRY_GPU_CHECK(cudaStreamCreateWithPriority(
        &stream, cudaStreamNonBlocking, priority > 0 ? core_->priority_greatest : core_->priority_least));
    return std::make_unique<Queue>(core_, stream, /*owned=*/true);
  }

  std::shared_ptr<Core> core_;
  Capabilities caps_;
  std::unique_ptr<Queue> compute_;
  std::unique_ptr<Queue> transfer_;
  std::mutex peers_mutex_;                            ///< guards peers_
  std::vector<std::pair<int, PeerSupport>> peers_;  ///< peer_support's answers, by ordinal
};

int ordinal_of(BackendDevice& device) { return static_cast<Device&>(device).ordinal(); }

}  // namespace
}  // namespace ferry::detail::FERRY_GPU_NS

namespace ferry::detail {

namespace {

int device_count() noexcept {
  int count = 0;
  // Any failure (no driver, no device, driver too old) means "no device": never throw.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::unique_ptr<BackendDevice> open_device(const DeviceOptions& options) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    const std::string why = e == cudaSuccess ? std::string("the driver reports 0 devices")
                                             : FERRY_GPU_NS::vendor::describe(e);
    throw Error(ErrorCode::unsupported, std::string("no ") + FERRY_GPU_VENDOR + " device present (" + why + ")",
                e == cudaSuccess ? std::string{} : std::string(FERRY_GPU_NAME(cudaGetDeviceCount)),
                std::source_location{});
  }
  return std::make_unique<FERRY_GPU_NS::Device>(options.ordinal);
}

}  // namespace

extern const BackendDescriptor FERRY_GPU_DESCRIPTOR;
constinit const BackendDescriptor FERRY_GPU_DESCRIPTOR{
    .id = FERRY_GPU_BACKEND,
    .name = FERRY_GPU_LABEL,
    .option = FERRY_GPU_OPTION,
    .kind = DeviceKind::gpu,
    .built = true,
    .count = &device_count,
    .open = &open_device,
};

}  // namespace ferry::detail
