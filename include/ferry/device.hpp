// SPDX-License-Identifier: MIT
/// @file device.hpp
/// @brief Devices, queues and timeline semaphores: the ordering vocabulary of ferry.
///
/// Terminology (used the same way in every header):
///  - **owner queue**: the queue whose pool a device buffer comes from and returns to (usually
///    the engine's compute queue).
///  - **executing queue**: the queue that runs a copy (usually a transfer queue / DMA engine).
///  - **timeline point**: `(semaphore, value)`; "reached" once the semaphore's value is >= value.
///
/// Handle semantics: `Device`, `Queue` and `TimelineSemaphore` are cheap, copyable handles to
/// shared state. A default-constructed handle is *null*; every method of a null handle throws
/// `ErrorCode::invalid_argument`. After `Device::close()` every handle of that device throws
/// `invalid_argument` ("device is closed") instead of touching freed backend objects.
///
/// Thread-safety: all methods of these handles may be called concurrently from several threads,
/// on one handle object or on copies of it, with one exception: `Device::close()` is teardown
/// and must not run while another thread is inside a call on any handle of that device (after
/// it returns, those handles throw `invalid_argument` instead of touching freed objects). The
/// same holds for dropping the last handle, which closes the device. Work enqueued on one
/// queue from several threads is ordered by the order of the calls (each queue serializes its
/// enqueues), and a point a call returns covers exactly the work enqueued before it.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "ferry/api.hpp"
#include "ferry/error.hpp"

namespace ferry {

namespace detail {
struct DeviceState;
struct QueueState;
struct SemaphoreState;
/// ferry's own way into the handles' private state (a private header of the library's
/// sources): the handles' state constructors and state are not part of the API.
struct access;
}  // namespace detail

class DevicePool;
class DeviceBuffer;
class HostPool;
class Image;
struct ImageDesc;
struct NativeImage;
struct ImageAdoptOptions;

/// @brief The backends ferry can be built with.
enum class Backend : std::uint8_t {
  host,    ///< CPU reference backend: worker threads, memcpy; always available when built
  cuda,    ///< NVIDIA CUDA runtime
  hip,     ///< AMD HIP (built from the CUDA backend's sources)
  vulkan,  ///< Vulkan 1.2+ with timeline semaphores
  /// Interop pair (see interop.hpp): one GPU seen through Vulkan and CUDA. Copies execute on
  /// a Vulkan transfer queue; compute (owner) queues are CUDA streams; pool memory is Vulkan
  /// memory exported to CUDA, semaphores Vulkan timelines imported into CUDA.
  vulkan_cuda,
  /// Interop pair, the other way round: copies execute on CUDA streams, owner queues are
  /// Vulkan queues (same memory and semaphores as `vulkan_cuda`).
  cuda_vulkan,
  /// A device that accepts every operation and does none of the work: copies move no bytes,
  /// queue signals are reached at once, memory is plain host memory. For testing and measuring
  /// ferry's own bookkeeping without a driver; never chosen by `Device::open_default()`.
  null,
};

/// @brief Lower-case backend name ("host", "cuda", "hip", "vulkan", "vulkan_cuda", "cuda_vulkan",
/// "null").
FERRY_API std::string_view to_string(Backend backend) noexcept;

/// @brief Parse a backend name; throws `invalid_argument` for an unknown name.
FERRY_API Backend parse_backend(std::string_view name,
                                std::source_location where = std::source_location::current());

/// @brief The role of a queue in a transfer.
enum class QueueRole : std::uint8_t {
  compute,   ///< owner queue: runs the consumer's work; device buffers belong to it
  transfer,  ///< executing queue: runs copies (DMA engine / transfer-only family)
};

/// @brief Device capabilities and limits, filled by the backend at open.
struct Capabilities {
  std::string name{};                       ///< human-readable device name
  Backend backend = Backend::host;          ///< backend that opened the device
  bool is_gpu = false;                      ///< false for the host backend and CPU Vulkan drivers
  std::uint64_t device_memory_bytes = 0;    ///< total device memory (0 = unknown)
  std::uint32_t copy_engines = 0;           ///< independent copy engines (asyncEngineCount)
  /// Urgent copies overtake a bulk copy in flight (transfer.hpp, "Priorities"): the backend
  /// has a yield point between copies, so the copy engine leaves a bulk copy cut into pieces
  /// for a copy ready on another queue (CUDA also copies small urgent uploads with the SMs).
  /// False: urgent copies still run on a queue of their own, but the engine may serve them
  /// only once the bulk copy it runs is done.
  bool copy_priorities = false;
  /// The host<->device copy rate the backend states, in bytes per second (0 = unknown), from
  /// which TransferOptions::bulk_piece_bytes is derived (host backend: 10 GB/s, a memcpy's
  /// order of magnitude).
  std::uint64_t copy_bytes_per_second = 0;
  bool dedicated_transfer_queue = false;    ///< transfer work runs on its own queue/family
  bool separate_queue_families = false;     ///< Vulkan: transfer and compute families differ
  bool ownership_transfer = false;          ///< Vulkan: buffers need queue-family ownership transfer
  bool host_memory_registration = false;    ///< user memory can be registered (pinned/imported)
  bool host_memory_adoption = false;        ///< page-locked engine memory can be adopted (HostPool::adopt)
  bool timeline_export = false;             ///< timeline semaphores exportable (interop)
  /// `run_synthetic_compute` (testing.hpp) runs here. On CUDA and Vulkan the kernel is
  /// ferry-testkit's device code, registered when the kit loads: false without the kit.
  bool synthetic_compute = false;
  std::uint64_t min_alignment = 256;        ///< pool sub-allocation alignment in bytes
  std::uint64_t max_allocation_bytes = 0;   ///< largest single segment (0 = unknown)
  /// Device UUID as the vendor reports it (CUDA `cudaDeviceProp::uuid`, Vulkan
  /// `VkPhysicalDeviceIDProperties::deviceUUID`): the same GPU has the same UUID in every API.
  /// All zero when unknown (host backend).
  std::array<std::uint8_t, 16> uuid{};
  std::string notes{};                      ///< backend-specific facts ("transfer family 1 x2")
};

/// @brief How a copy between buffers of two devices runs (`Transfer::peer_path`).
enum class PeerPath : std::uint8_t {
  same_device,  ///< both buffers are on one device: the plain device-to-device copy
  /// Device to device over the interconnect: CUDA/HIP with peer access enabled (NVLink, PCIe
  /// peer-to-peer) on a copy engine; host devices copy process memory directly.
  direct,
  /// Through host memory: the devices cannot access each other (CUDA/HIP without peer access,
  /// where the driver stages `cudaMemcpyPeerAsync` through pinned host memory).
  staged,
};

/// @brief Lower-case name of a peer path ("same_device", "direct", "staged").
FERRY_API std::string_view to_string(PeerPath path) noexcept;

/// @brief How to open a device.
struct DeviceOptions {
  Backend backend = Backend::host;  ///< which backend
  int ordinal = 0;                  ///< device index within that backend
  /// Host backend only: delay every queued operation by a random 0..N microseconds so a
  /// missing wait shows up as wrong data. Negative = read `FERRY_HOST_LATENCY_US` from the
  /// environment (unset = 0).
  int host_latency_us = -1;
  /// Vulkan only: enable VK_LAYER_KHRONOS_validation with synchronization validation and count
  /// its messages (see `Device::validation_messages()`).
  bool validation = false;
  /// Record pool events for snapshots (cheap; on by default).
  bool record_events = true;
  /// Interop pairs only (`vulkan_cuda`, `cuda_vulkan`): the CUDA device ordinal. -1 (default)
  /// picks the CUDA device whose UUID equals the Vulkan device's (`ordinal`); an explicit
  /// ordinal of another GPU is `invalid_argument` (the UUIDs are named in the message).
  int peer_ordinal = -1;
};

class TimelineSemaphore;

/// @brief A point on a timeline: "all work up to here". Reached once the semaphore's value is
/// >= `value`. A default-constructed point is *empty* and counts as already reached; points
/// on a timeline come from `Queue::mark()`, `TimelineSemaphore::at()` and the calls that
/// return a completion point, and a copy names the same point.
class FERRY_API TimelinePoint {
 public:
  TimelinePoint() = default;

  std::uint64_t value = 0;  ///< the value to reach (meaningless for an empty point)

  /// @brief True for an empty point.
  [[nodiscard]] bool empty() const noexcept { return semaphore_ == nullptr; }
  /// @brief Non-blocking query: has the point been reached? Empty points are reached.
  [[nodiscard]] bool reached(std::source_location where = std::source_location::current()) const;
  /// @brief Whether the point is known to be reached without asking the device: true for an
  /// empty point, or when a query or wait on its semaphore, by any thread, has already seen a
  /// value at or past it. False means "not known", not "not reached": `reached()` asks. For hot
  /// paths that prune lists of points (one query per batch of them rather than per point).
  /// Never blocks, never throws; thread-safe (an atomic load).
  [[nodiscard]] bool known_reached() const noexcept;
  /// @brief Block the calling thread until reached; throws `timeout` after `timeout`.
  void wait(std::chrono::nanoseconds timeout = std::chrono::seconds(60),
            std::source_location where = std::source_location::current()) const;

 private:
  friend struct detail::access;
  TimelinePoint(std::shared_ptr<detail::SemaphoreState> semaphore, std::uint64_t at)
      : value(at), semaphore_(std::move(semaphore)) {}

  std::shared_ptr<detail::SemaphoreState> semaphore_{};  ///< null = empty point
};

/// @brief A monotonic 64-bit counter that host and queues signal and wait on.
///
/// Contract: values only increase. A host `signal(v)` with v <= the current value is an
/// `invalid_argument` error. Queue-side signals are ordered after the queue's earlier work.
///
/// Lifetime: the handles (and the points made from them) share the semaphore. Queued work
/// that waits for or signals it (`Queue::wait`, `Queue::signal`, a call's wait or signal
/// list) holds it too, until the queue has passed that work: the last handle may go at once,
/// for example right after signalling the value a queue waits for. Where destroying the
/// native object could wait for the device (a Vulkan semaphore that queued work used, the
/// CUDA import of a pair's semaphore), it is destroyed when the device closes instead, so a
/// program that makes semaphores per frame on those backends should reuse them.
class FERRY_API TimelineSemaphore {
 public:
  TimelineSemaphore() = default;
  /// @brief The current value (non-blocking query).
  [[nodiscard]] std::uint64_t value(std::source_location where = std::source_location::current()) const;
  /// @brief Signal from the host. Throws `invalid_argument` if `value` <= current value, and
  /// for a queue's private timeline (a `Queue::mark()` point's semaphore), which only ferry
  /// signals: a user signal would make the queue's marks report pending work complete.
  void signal(std::uint64_t value, std::source_location where = std::source_location::current());
  /// @brief Block the calling thread until the value is >= `value`; throws `timeout`.
  void wait(std::uint64_t value, std::chrono::nanoseconds timeout = std::chrono::seconds(60),
            std::source_location where = std::source_location::current()) const;
  /// @brief Like `wait`, but returns false instead of throwing on timeout.
  [[nodiscard]] bool try_wait(std::uint64_t value, std::chrono::nanoseconds timeout,
                              std::source_location where = std::source_location::current()) const;
  /// @brief The point `(this, value)`.
  [[nodiscard]] TimelinePoint at(std::uint64_t value, std::source_location where = std::source_location::current()) const;
  /// @brief True for a non-null handle.
  explicit operator bool() const noexcept { return state_ != nullptr; }

 private:
  friend struct detail::access;
  explicit TimelineSemaphore(std::shared_ptr<detail::SemaphoreState> s) : state_(std::move(s)) {}
  std::shared_ptr<detail::SemaphoreState> state_;
};

/// @brief A queue of ordered work, with a role. Each queue owns a private timeline ("its
/// progress") on which `mark()` places points.
///
/// Ordering: work enqueued on a queue runs in enqueue order. `wait(point)` makes every later
/// operation of this queue start after `point` is reached, without blocking the host.
class FERRY_API Queue {
 public:
  Queue() = default;
  /// @brief Compute (owner) or transfer (executing).
  [[nodiscard]] QueueRole role(std::source_location where = std::source_location::current()) const;
  /// @brief Stable per-device id (used in snapshots and statistics).
  [[nodiscard]] std::uint32_t id(std::source_location where = std::source_location::current()) const;
  /// @brief Name for reports ("compute", "transfer", or the name given at creation).
  [[nodiscard]] const std::string& name(std::source_location where = std::source_location::current()) const;
  /// @brief Make later work on this queue wait for `point` (GPU-side; host not blocked).
  /// Waiting on a point of another device's semaphore is `invalid_argument`.
  void wait(const TimelinePoint& point,
            std::source_location where = std::source_location::current());
  /// @brief Signal `point` after all work enqueued so far. `point.value` must exceed every
  /// value signalled before on that semaphore (else `invalid_argument`).
  void signal(const TimelinePoint& point,
              std::source_location where = std::source_location::current());
  /// @brief A point reached once all work enqueued so far on this queue has completed.
  [[nodiscard]] TimelinePoint mark(std::source_location where = std::source_location::current());
  /// @brief Block the host until all work enqueued so far has completed; throws `timeout`.
  void synchronize(std::chrono::nanoseconds timeout = std::chrono::seconds(60),
                   std::source_location where = std::source_location::current());
  /// @brief True for a non-null handle.
  explicit operator bool() const noexcept { return state_ != nullptr; }
  friend bool operator==(const Queue& a, const Queue& b) noexcept { return a.state_ == b.state_; }

 private:
  friend struct detail::access;
  explicit Queue(std::shared_ptr<detail::QueueState> s) : state_(std::move(s)) {}
  std::shared_ptr<detail::QueueState> state_;
};

/// @brief A backend's native queue handle, for adopting an engine's queue.
///
/// CUDA/HIP: `handle` is the `cudaStream_t`/`hipStream_t` (the legacy default stream, 0, is
/// refused: it synchronizes with every blocking stream and cannot be ordered by ferry).
/// Vulkan: `handle` is the `VkQueue`, with its `family` and `index`. The engine keeps
/// ownership: ferry never destroys an adopted queue. Host: not supported.
struct NativeQueue {
  void* handle = nullptr;        ///< cudaStream_t / hipStream_t / VkQueue
  std::uint32_t family = 0;      ///< Vulkan queue family index
  std::uint32_t index = 0;       ///< Vulkan queue index within the family
};

/// @brief How the queues that use an adopted `VkBuffer` share it (Vulkan's
/// `VkBufferCreateInfo::sharingMode`, as the engine created the buffer). Ignored elsewhere.
enum class MemorySharing : std::uint8_t {
  /// `VK_SHARING_MODE_EXCLUSIVE`: ferry transfers queue-family ownership of the range between
  /// the owner's and the executor's families around every copy, exactly as for pool buffers.
  exclusive,
  /// `VK_SHARING_MODE_CONCURRENT`, created with (at least) the families of the owner queue and
  /// of every executing queue in `pQueueFamilyIndices`: no ownership transfer.
  concurrent,
};

/// @brief An engine's own device memory, as the backend addresses it (see
/// `Device::adopt_memory`). A vendor-free description: each backend reads the fields it can
/// address and refuses the others (`invalid_argument`).
///
///  - host, null: `pointer` is a host pointer (`std::malloc`, an aligned allocation, ...).
///  - CUDA/HIP: `pointer` is a device pointer of the device (`CUdeviceptr`, a `cudaMalloc` /
///    `hipMalloc` / pool / caching-allocator pointer, cast to an integer).
///  - Vulkan: `vulkan_buffer` is a `VkBuffer` of the device's `VkDevice` (cast to an integer;
///    `ferry::vulkan::native_buffer` in vulkan.hpp fills these fields from Vulkan types); the
///    adopted range starts at `vulkan_offset`; `vulkan_buffer_size` is the size the buffer was
///    created with (`VkBufferCreateInfo::size`), against which the range is checked;
///    `vulkan_sharing` states its sharing mode. A VMA sub-allocation is its block's VkBuffer
///    at the allocation's offset.
///  - interop pairs: both views of one allocation: `vulkan_buffer` (and its fields) for the
///    Vulkan queues, and `pointer` for the CUDA streams: the CUDA device pointer of the byte at
///    `vulkan_offset` (the engine's import of the same memory into CUDA).
struct NativeMemory {
  std::uint64_t pointer = 0;                 ///< host / CUDA / HIP pointer; 0 = none
  std::uint64_t vulkan_buffer = 0;           ///< VkBuffer handle; 0 = none
  std::uint64_t vulkan_offset = 0;           ///< start of the range in `vulkan_buffer`
  std::uint64_t vulkan_buffer_size = 0;      ///< VkBufferCreateInfo::size of `vulkan_buffer`
  MemorySharing vulkan_sharing = MemorySharing::exclusive;  ///< its sharing mode

  /// @brief A host or CUDA/HIP pointer (`pointer`).
  [[nodiscard]] static NativeMemory from_pointer(const void* p) noexcept {
    NativeMemory m;
    m.pointer = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
    return m;
  }
};

/// @brief Options of `Device::adopt_memory`.
struct AdoptOptions {
  /// The engine's point after which ferry may access the memory (its last use before the
  /// adoption on another queue than the owner, or by the host; a TimelineSemaphore the engine
  /// signals). Empty (the default): only the owner queue's work enqueued so far, which ferry
  /// waits for anyway. The first access by any queue, ferry's or the owner's through ferry,
  /// waits for it on the device.
  TimelinePoint ready_after{};
  std::string tag{};  ///< label for reports
};

/// @brief One device opened through one backend.
///
/// Owns: the queues it created, its device pool and host pool. Closing (explicit `close()`, or
/// when the last handle that refers to the device -- Device, Queue, semaphore, buffer -- goes
/// away) waits for all queued work, frees every segment and invalidates all handles; buffers
/// still alive after close become inert (their release is a no-op, their accessors throw).
class FERRY_API Device {
 public:
  Device() = default;
  /// @brief Open a device. Fails with `unsupported` (naming the meson option) when the backend
  /// was not built, `invalid_argument` for an ordinal out of range, `unsupported` when no
  /// device of that backend is present.
  ///
  /// Vulkan picks the first family with compute for the owner (compute) queue and the first
  /// transfer-only family for the executor; the environment variables
  /// `FERRY_VULKAN_COMPUTE_FAMILY` and `FERRY_VULKAN_TRANSFER_FAMILY` (a family index) override
  /// that choice, for drivers whose first families are not their best; a family that does not
  /// exist or lacks the capability is `invalid_argument` naming the variable.
  static Device open(const DeviceOptions& options,
                     std::source_location where = std::source_location::current());
  /// @brief Open the best device present: every GPU before every CPU device, in the order
  /// CUDA, Vulkan on a GPU, HIP, then Vulkan on a CPU driver, then the host backend (a device
  /// that fails to open gives way to the next). Interop pairs and the null backend are never
  /// chosen.
  static Device open_default(std::source_location where = std::source_location::current());
  /// @brief Number of devices a backend sees: `open` accepts ordinals 0 to count - 1 (0 when
  /// not built or none present; never throws for a missing driver). Interop pairs count the
  /// Vulkan devices, their ordinals, once a Vulkan GPU and a CUDA device are present; whether
  /// one Vulkan device has a CUDA twin is known at open, which says why when it has not.
  static int count(Backend backend) noexcept;
  /// @brief Whether the backend was compiled into this build of ferry.
  static bool built_with(Backend backend) noexcept;
  /// @brief Whether the backend was compiled in and the vendor library it opens at run time
  /// loads here and provides what the backend needs: CUDA's `libcuda.so.1` (installed by the
  /// NVIDIA driver), HIP's `libamdhip64.so.<major>` (ROCm's HIP runtime), Vulkan's loader
  /// `libvulkan.so.1`; both of them for the interop pairs. No ferry binary links a vendor
  /// library, so ferry loads without them, and opening a backend whose library is missing
  /// throws `unsupported` naming it. True for the host and null backends when built (they
  /// need no vendor library). A present runtime may still see no device: `count` tells. The
  /// first call per backend opens its library (thread-safe; the answer is kept for the
  /// process). `FERRY_CUDA_LIBRARY` and `FERRY_HIP_LIBRARY` name another path to load
  /// (docs/environment.md). Never throws.
  static bool runtime_present(Backend backend) noexcept;

  /// @brief Capabilities and limits.
  [[nodiscard]] const Capabilities& capabilities(std::source_location where = std::source_location::current()) const;
  /// @brief The backend.
  [[nodiscard]] Backend backend(std::source_location where = std::source_location::current()) const;
  /// @brief The device's default queue of a role (created at open). For `transfer`, a
  /// dedicated transfer queue when the device has one, else a second queue of the compute
  /// family (or, on one-queue devices, the compute queue itself; see capabilities).
  [[nodiscard]] Queue queue(QueueRole role, std::source_location where = std::source_location::current()) const;
  /// @brief Create another queue of a role. `priority` > 0 asks for higher priority where the
  /// backend supports it (on CUDA such a queue also copies uploads of at most 1 MiB from
  /// page-locked memory with the SMs: transfer.hpp, "Priorities"; Vulkan fixes priorities at
  /// device creation). Throws `unsupported` when the device has no queue left to give (a
  /// Vulkan device whose families' queues are all in use; lavapipe has one queue in all), and
  /// the backend's error (`out_of_memory`, `backend_error`) when creating the native queue fails.
  Queue create_queue(QueueRole role, std::string name = {}, int priority = 0,
                     std::source_location where = std::source_location::current());
  /// @brief Adopt an engine's native queue (see NativeQueue). ferry never destroys it.
  /// A native handle cannot be validated: it must be a live stream (CUDA/HIP) or queue
  /// (Vulkan) of this device, and must outlive every use of the returned Queue; anything else
  /// is undefined behaviour in the driver. What can be checked is: a null handle is
  /// `invalid_argument`, and on Vulkan the family and index must exist on the device and the
  /// family must support the role (`invalid_argument` naming them).
  /// The engine may keep enqueueing its own work on the native queue: since ferry cannot see
  /// it, every ordering point ferry takes on an adopted queue (an access ordered after "the
  /// owner's work so far", a release, `mark()`) is a fresh mark enqueued on it, never an older
  /// mark reused because ferry enqueued nothing since (one event record on CUDA, one
  /// submission on Vulkan).
  /// Lifetime: every Queue made by `create_queue` or `adopt_queue` stays registered with the
  /// device until it closes, handles or not (its timeline may still be signalled by work in
  /// flight, and close orders and destroys it): adopt a native queue once and keep the Queue,
  /// never once per call.
  Queue adopt_queue(QueueRole role, const NativeQueue& native, std::string name = {},
                    std::source_location where = std::source_location::current());
  /// @brief Adopt an engine's own device memory (its allocator's: VMA, CUDA pools, PyTorch's
  /// caching allocator) as a `DeviceBuffer` of `size` bytes owned by `owner`, for ferry's
  /// transfers. Include ferry/pool.hpp to use the result.
  ///
  /// Ownership: ferry never frees adopted memory and holds no reference to it beyond the
  /// buffer; the engine keeps it allocated until the buffer's release point (below) is
  /// reached. The buffer is not pool memory: it is not counted in `DevicePool` budgets,
  /// statistics or snapshots, and the pool never reuses, splits or trims it.
  ///
  /// Ordering: the protocol of pool memory (transfer.hpp). Every copy into or out of the
  /// range waits on the device for the owner's work enqueued before the call (and, for the
  /// first access, `options.ready_after`); with `UploadIntoOptions::owner_waits` the owner waits
  /// for the copy. The contents are kept: ferry treats the memory as written by the owner.
  /// On Vulkan, an `exclusive` buffer's range must be owned by the owner queue's family when
  /// adopted (or never used by a queue); ferry moves it to the executor's family and back
  /// around each copy, and it is the owner family's again at the release point.
  ///
  /// End of use: `DeviceBuffer::release()` (or `release_after`) ends ferry's use and returns
  /// the release point: once it is reached, every ferry copy and access of the range has
  /// completed and the engine may reuse or free the memory. Work the engine enqueues on the
  /// owner queue after the release call is already ordered after it; other queues and the
  /// host wait for the point. Destroying the buffer without `release()` ends the use the same
  /// way (the point is then that of `owner.mark()` taken after the destruction). After
  /// `Device::close()` nothing of ferry's is in flight: the memory is free to reuse.
  ///
  /// Rules and errors (`invalid_argument`, naming the value, at the caller's `where`):
  ///  - `size` > 0; `owner` a live queue of this device; `options.ready_after` empty or a
  ///    point of this device;
  ///  - the start (`pointer`, or `vulkan_offset` on Vulkan) is a multiple of 4 bytes: device
  ///    kernels (`run_synthetic_compute`) and Vulkan storage-buffer access address 32-bit
  ///    words; the size may be any number of bytes;
  ///  - the backend's field is set (`pointer` on host/CUDA/HIP, `vulkan_buffer` on Vulkan,
  ///    both on a pair) and no field it cannot address;
  ///  - `pointer` + `size` does not wrap around the address space;
  ///  - CUDA/HIP: the first and the last byte are device (or managed) memory of this device
  ///    (`cudaPointerGetAttributes`), else `invalid_argument` naming the device it is of;
  ///  - Vulkan: `vulkan_buffer_size` > 0, `vulkan_offset + size` <= `vulkan_buffer_size`,
  ///    and `vulkan_buffer_size` <= the buffer's `vkGetBufferMemoryRequirements` size (a
  ///    stated size that its memory cannot hold is not the size it was created with).
  /// What cannot be checked is the caller's promise: the pointer or VkBuffer is live, of this
  /// device (a VkBuffer of another VkDevice cannot be recognised), created with
  /// TRANSFER_SRC and TRANSFER_DST usage (and STORAGE_BUFFER for `run_synthetic_compute`),
  /// bound to memory, and of the stated sharing mode; anything else is undefined behaviour
  /// in the driver. `unsupported`, with the reason: an interop pair given only one API's view
  /// of the memory (and HIP, which forms no pair).
  ///
  /// Thread-safety: like every Device method; the returned buffer is a DeviceBuffer (see
  /// pool.hpp). The engine must not write the range while a ferry copy into or out of it
  /// may be in flight, nor read it while a copy into it may be, except in the order the
  /// points give (after the copy's point, or on the owner queue after `owner_waits`).
  DeviceBuffer adopt_memory(const NativeMemory& native, std::uint64_t size, const Queue& owner,
                            AdoptOptions options = {},
                            std::source_location where = std::source_location::current());
  /// @brief Adopt an engine's image (a `VkImage`, a CUDA array or mipmapped array, a pitched
  /// host region: see `NativeImage` in image.hpp, which declares the result) of shape
  /// `desc`, owned by `owner`, for ferry's image copies (`Transfer::upload_image`, ...).
  ///
  /// Ownership: ferry never creates, frees or destroys the native image; the engine keeps it
  /// alive until the release point (`Image::release`) is reached. Ordering: that of adopted
  /// memory (see `adopt_memory`); on Vulkan, the layouts and queue-family ownership of
  /// image.hpp's file comment.
  ///
  /// Rules and errors (`invalid_argument`, naming the value, at the caller's `where`): a
  /// known format; width, height, depth, mip_levels and array_layers >= 1; mip_levels at
  /// most the full chain; a 3D image (depth > 1) with one layer; `owner` a live queue of this
  /// device; `options.ready_after` empty or of this device; the backend's field set and no
  /// field of another backend. Per backend:
  ///  - host: pitches 0 or at least the tight ones, row pitch a multiple of the block size,
  ///    slice pitch a multiple of the row pitch;
  ///  - Vulkan: `vulkan_final_layout` set (not UNDEFINED or PREINITIALIZED), a `concurrent`
  ///    image lists the owner's family;
  ///  - CUDA: the array's elements (size; channel kind for BC1-7), extent, layering and
  ///    levels match `desc` (`cudaArrayGetInfo` on every level); ASTC is `unsupported`;
  ///  - interop pairs: the Vulkan rules, an `exclusive` image, and the memory fields
  ///    `NativeImage` lists for pairs (the import into CUDA checks them); ASTC and
  ///    `concurrent` images are `unsupported`.
  /// `unsupported`, with the reason: a backend without images (HIP, null).
  /// What cannot be checked is the caller's promise: the native image is live, of this
  /// device, in the stated layout and created as `NativeImage` describes.
  ///
  /// Thread-safety: like every Device method.
  Image adopt_image(const NativeImage& native, const ImageDesc& desc, const Queue& owner,
                    std::source_location where = std::source_location::current());
  /// @brief `adopt_image` with options (the engine's ready point, a tag).
  Image adopt_image(const NativeImage& native, const ImageDesc& desc, const Queue& owner,
                    const ImageAdoptOptions& options,
                    std::source_location where = std::source_location::current());
  /// @brief Create a timeline semaphore starting at `initial`.
  TimelineSemaphore create_semaphore(std::uint64_t initial = 0,
                                     std::source_location where = std::source_location::current());
  /// @brief The device memory pool (stream-ordered; see pool.hpp).
  [[nodiscard]] DevicePool& pool(std::source_location where = std::source_location::current()) const;
  /// @brief The pinned host memory pool (see pool.hpp).
  [[nodiscard]] HostPool& host_pool(std::source_location where = std::source_location::current()) const;
  /// @brief Vulkan with validation: number of validation messages seen so far (0 elsewhere).
  /// Readable after `close()` too (then it includes messages raised during teardown).
  [[nodiscard]] std::uint64_t validation_messages(std::source_location where = std::source_location::current()) const;
  /// @brief How many times a host wait on this device's timelines actually blocked: explicit
  /// waits (`TimelinePoint::wait`, `TimelineSemaphore::wait`/`try_wait`, `synchronize`) and
  /// ferry's own (staging slots, pageable downloads) that found their point
  /// not yet reached. Waits on reached points do not count. Lets a loop check that its steady
  /// state never stalls the host. Readable after `close()`.
  [[nodiscard]] std::uint64_t host_waits(std::source_location where = std::source_location::current()) const;
  /// @brief Driver submissions ferry has made on this device's queues so far (Vulkan:
  /// vkQueueSubmit2 or vkQueueSubmit calls), to see deferred submission at work
  /// (transfer.hpp). 0 on backends whose work starts when enqueued (CUDA, HIP, host, null):
  /// they have no submission step. Thread-safety: like every Device method.
  [[nodiscard]] std::uint64_t submissions(std::source_location where = std::source_location::current()) const;
  /// @brief Wait for all work, free everything, invalidate handles. Idempotent.
  /// Like vkDeviceWaitIdle, it waits for every queue: a queue blocked on a semaphore value
  /// that nobody will signal keeps it waiting. Signal or abandon such waits first.
  void close();
  /// @brief False for a null or closed device.
  [[nodiscard]] bool is_open() const noexcept;
  explicit operator bool() const noexcept { return state_ != nullptr; }
  friend bool operator==(const Device& a, const Device& b) noexcept { return a.state_ == b.state_; }

 private:
  friend struct detail::access;
  explicit Device(std::shared_ptr<detail::DeviceState> s) : state_(std::move(s)) {}
  std::shared_ptr<detail::DeviceState> state_;
};

}  // namespace ferry
