// SPDX-License-Identifier: MIT
// The CUDA backend's private declarations, shared by its files (one per resource: device,
// queue, semaphore, memory, image). Also compiled as the HIP backend with FERRY_VENDOR_HIP
// (see vendor/vendor.hpp). Written against CUDA runtime names; vendor differences live in
// the shim.
//
// Contracts these files rely on (backend.hpp): arguments were validated by the front end;
// calls on one queue are serialized by the front end; different queues, the device and
// semaphores may be used from several threads at once, so state shared between them (the
// stream registry, each semaphore) has its own mutex.
//
// Current device: every entry point binds this device to the calling thread for its duration
// and restores the thread's previous binding (ContextGuard), so the engine's notion of the
// current device is never changed by ferry.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "backend.hpp"
#include "check.hpp"
#include "cuda/vendor/vendor.hpp"

// Two levels so that, under HIP, the call text in errors shows the mapped (hip*) names.
#define FERRY_GPU_CHECK_WITH(expr, classify) \
  FERRY_CHECK_GEN(expr, cudaSuccess, ::ferry::detail::FERRY_GPU_NS::vendor::describe, classify)
#define FERRY_GPU_CHECK(expr) FERRY_GPU_CHECK_WITH(expr, ::ferry::detail::FERRY_GPU_NS::vendor::classify)
#define FERRY_GPU_NAME(symbol) FERRY_GPU_NAME_(symbol)
#define FERRY_GPU_NAME_(symbol) #symbol

namespace ferry::detail::FERRY_GPU_NS {

/// Destructors cannot throw. A failure to release a stream/event/allocation there means the
/// context is already gone (device lost, process exit): nothing is left to free.
inline void ignore_in_destructor(cudaError_t e) noexcept {
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
  /// Defined with the semaphores (cuda_semaphore.cpp), as are the Core's destructor and
  /// retire_import.
  Counter take_counter();
  void give_counter(Counter c) noexcept;
  Core() = default;
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;
  ~Core();

  /// An imported semaphore (the pair backend's) whose handle went: destroyed with the Core.
  /// cudaDestroyExternalSemaphore may wait for the device like cudaFreeHost, with the same
  /// hang when a queue waits for a host signal still to come; the Vulkan side likewise keeps
  /// its queued semaphores until the device goes.
  void retire_import(vendor::ExternalSemaphore handle) noexcept;
  std::vector<vendor::ExternalSemaphore> retired_imports;

  /// The synthetic compute kernel, loaded from the image ferry-testkit registers
  /// (synthetic_kernel_image) at open, or at the first launch when the image came later.
  /// Caller binds the context. Defined with the device (cuda_device.cpp).
  const vendor::Kernels& kernels(std::span<const std::byte> image);
  std::mutex kernels_mutex;  ///< guards loaded_kernels and kernels_loaded
  vendor::Kernels loaded_kernels;
  bool kernels_loaded = false;

  /// ferry's service kernels (vendor::load_service_kernels: the yield point and the SM copy),
  /// loaded at open, before any queue exists, for the same reason as the synthetic kernel;
  /// null where the driver could not load them, and the queues then neither yield nor copy
  /// with the SMs.
  vendor::ServiceKernels service_kernels;

  static constexpr std::size_t kSlabBytes = 4096;
  static constexpr std::size_t kCounterStride = 64;
  std::mutex counters_mutex;  ///< guards slabs, free_counters and retired_imports
  std::vector<void*> slabs;
  std::vector<Counter> free_counters;
};

/// The device a front-end call has bound to this thread (Device::bind_thread), if any: for
/// the duration of that call the thread's binding is known to be its context. Defined in
/// cuda_device.cpp.
extern thread_local constinit const Core* t_bound;

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

  /// For destructors: binds like the constructor and reports failure instead of throwing
  /// (no driver left to bind with: the process is going, and the driver reclaims the rest).
  static std::optional<ContextGuard> try_bind(const Core& core) noexcept {
    try {
      return std::optional<ContextGuard>(std::in_place, core);
    } catch (...) {
      return std::nullopt;
    }
  }

 private:
  vendor::DeviceContext previous_{};
  bool switched_ = false;
};

inline void* device_ptr(DeviceRef r) { return reinterpret_cast<void*>(r.segment->address + r.offset); }
inline void* host_ptr(HostRef r) { return r.memory->ptr + r.offset; }

/// What a queue needs of a semaphore of this backend: the queue-side signal and wait. Own
/// timelines (Semaphore) and imported ones (ExternalSemaphore) both provide them.
class GpuSemaphore : public BackendSemaphore {
 public:
  /// Called with the queue's context bound.
  virtual void enqueue_signal(cudaStream_t stream, std::uint64_t value) = 0;
  virtual void enqueue_wait(cudaStream_t stream, std::uint64_t value) = 0;
};

/// The ordinal of a device of this backend (peer copies: the front end checked that `device`
/// is one, through peer_support).
int ordinal_of(BackendDevice& device);

// ---------------------------------------------------------------------------------------------
// Queues (cuda_queue.cpp; image copies in cuda_image.cpp): one stream each, own (destroyed with
// the queue) or adopted (never destroyed).
class Queue final : public BackendQueue {
 public:
  /// cudaStreamWaitEvent and cuStreamWaitValue64 are stream operations: all later work of the
  /// stream starts after them.
  /// It yields where the device has the service kernels (Core::service_kernels).
  static constexpr QueueTraits kTraits{.wait_orders_later_work = true, .acquires_ownership = false,
                                       .defers_signals = false};

  /// An urgent queue (a stream ferry made with the greatest priority) copies small uploads
  /// from page-locked memory with the SMs (copy_h2d says when).
  Queue(std::shared_ptr<Core> core, cudaStream_t stream, bool owned, bool urgent = false);

  /// The largest upload an urgent queue copies with the SMs. Past it the copy goes to a copy
  /// engine, as on any queue: an SM copy reads the host memory over the bus in small reads,
  /// which moves a large copy slower than the engine does.
  static constexpr std::uint64_t kSmCopyMaxBytes = std::uint64_t{1} << 20;
  ~Queue() override;

  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  void copy_h2d(DeviceRef dst, HostRef src, std::uint64_t bytes) override;
  void copy_d2h(HostRef dst, DeviceRef src, std::uint64_t bytes) override;
  void copy_d2d(DeviceRef dst, DeviceRef src, std::uint64_t bytes) override;
#if FERRY_GPU_HAS_BATCH_COPY
  void copy_h2d_many(std::span<const HostDeviceCopy> copies) override { copy_many(copies, true); }
  void copy_d2h_many(std::span<const HostDeviceCopy> copies) override { copy_many(copies, false); }
  void copy_many(std::span<const HostDeviceCopy> copies, bool to_device);
#endif
  void copy_peer(DeviceRef dst, BackendDevice& dst_device, DeviceRef src, BackendDevice& src_device,
                 std::uint64_t bytes) override;
  void signal(BackendSemaphore& sem, std::uint64_t value) override;
  void wait(BackendSemaphore& sem, std::uint64_t value) override;
#if FERRY_GPU_HAS_IMAGES
  void copy_h2i(BackendImage& dst, HostRef src, std::span<const ImageCopy> regions) override;
  void copy_i2h(HostRef dst, BackendImage& src, std::span<const ImageCopy> regions) override;
  void copy_d2i(BackendImage& dst, DeviceRef src, std::span<const ImageCopy> regions) override;
  void copy_i2d(DeviceRef dst, BackendImage& src, std::span<const ImageCopy> regions) override;
#endif

  bool synthetic_compute(DeviceRef in, DeviceRef out, std::uint64_t bytes, std::uint32_t units) override;
  void enqueue_yield() override;

 private:
  std::shared_ptr<Core> core_;
  cudaStream_t stream_;
  bool owned_;
  bool sm_copies_;  ///< urgent and the SM copy kernels loaded
};

// ---------------------------------------------------------------------------------------------
// The device (cuda_device.cpp), with the members of each resource defined in that resource's
// file: semaphores (cuda_semaphore.cpp), memory (cuda_memory.cpp), images (cuda_image.cpp).
class Device final : public BackendDevice {
 public:
  explicit Device(int ordinal);
  ~Device() override = default;  // queues go first (members), then the Core when unshared

  void bind_thread(ThreadBinding& binding) override;
  void unbind_thread(ThreadBinding& binding) noexcept override;
  const Capabilities& capabilities() const override { return caps_; }
  BackendQueue& default_queue(QueueRole role) override;
  std::unique_ptr<BackendQueue> create_queue(QueueRole role, int priority) override;
  std::unique_ptr<BackendQueue> adopt_queue(QueueRole role, const NativeQueue& native) override;
  PeerSupport peer_support(BackendDevice& other) override;
  [[nodiscard]] int ordinal() const { return core_->ordinal; }
  void wait_idle() override;

  // Semaphores (cuda_semaphore.cpp).
  std::unique_ptr<BackendSemaphore> create_semaphore(std::uint64_t initial) override;
  std::unique_ptr<BackendSemaphore> import_semaphore(int fd) override;

  // Memory (cuda_memory.cpp).
  AdoptedRange adopt_memory(const NativeMemory& native, std::uint64_t bytes) override;
  std::unique_ptr<Segment> allocate_segment(std::uint64_t bytes) override;
  void free_segment(std::unique_ptr<Segment> segment) override;
  std::unique_ptr<Segment> import_segment(const ExternalMemory& memory) override;
  std::unique_ptr<HostMemory> allocate_host(std::uint64_t bytes) override;
  std::unique_ptr<HostMemory> register_host(std::byte* ptr, std::uint64_t bytes) override;
  std::unique_ptr<HostMemory> adopt_host(std::byte* ptr, std::uint64_t bytes) override;
  void free_host(std::unique_ptr<HostMemory> memory) override;

#if FERRY_GPU_HAS_IMAGES
  // Images (cuda_image.cpp).
  std::unique_ptr<BackendImage> adopt_image(const NativeImage& native, const ImageDesc& desc,
                                            std::uint32_t owner_family) override;
  std::unique_ptr<BackendImage> import_image(const ExternalMemory& memory, std::uint64_t offset, const ImageDesc& desc,
                                             bool color_attachment) override;
#endif

 private:
  std::unique_ptr<Queue> make_queue(int priority);

  std::shared_ptr<Core> core_;
  Capabilities caps_;
  std::unique_ptr<Queue> compute_;
  std::unique_ptr<Queue> transfer_;
  std::mutex peers_mutex_;                            ///< guards peers_
  std::vector<std::pair<int, PeerSupport>> peers_;  ///< peer_support's answers, by ordinal
};

}  // namespace ferry::detail::FERRY_GPU_NS
