// SPDX-License-Identifier: MIT
// The internal interface each backend implements (docs/architecture.md, "Layers").
//
// Backends are *trusting*: the front end in src/ has validated every argument (sizes > 0,
// ranges in bounds, handles of this device, monotonic signal values) before calling in.
// Backends never repeat argument checks. They report device failures by throwing
// ferry::Error with the failing vendor call named (see check.hpp).
//
// Threading: the front end serializes calls per queue (one mutex per QueueState) and per
// device for allocation; backends may still be called concurrently on *different* queues and
// must protect any state shared between queues (Vulkan: one submit lock per device).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>

#include "ferry/device.hpp"
#include "ferry/error.hpp"
#include "ferry/image.hpp"

namespace ferry::detail {

/// A timeline semaphore of the backend.
class BackendSemaphore {
 public:
  virtual ~BackendSemaphore() = default;
  /// Current value, non-blocking.
  virtual std::uint64_t value() = 0;
  /// Host signal (value strictly greater than all earlier signals: checked by the front end).
  virtual void signal(std::uint64_t value) = 0;
  /// Host wait; returns false on timeout. Must not spin-burn a core for long waits.
  virtual bool wait(std::uint64_t value, std::chrono::nanoseconds timeout) = 0;
};

/// A segment of device memory obtained from the backend.
struct Segment {
  std::uint64_t size = 0;     ///< bytes
  std::uint64_t address = 0;  ///< device VA (CUDA/HIP), host pointer (host), 0 or BDA (Vulkan)
  void* native = nullptr;     ///< backend handle (Vulkan: VkBuffer), or the base pointer
  void* backend_data = nullptr;  ///< backend private (e.g. Vulkan VkDeviceMemory record)
  /// The one driver memory object the segment is (Vulkan: its VkDeviceMemory), for
  /// SegmentInfo::vulkan_memory; null where `native` already names the allocation.
  void* native_memory = nullptr;
  /// `address` is a label that only keeps snapshot addresses distinct (Vulkan without buffer
  /// device addresses), not a pointer a registration API could take.
  bool synthetic_address = false;
  /// Backend private data the segment itself owns (adopted ranges: freed with the segment,
  /// with no backend call, so it may outlive the device); `backend_data` points into it.
  std::shared_ptr<void> owned_data{};
};

/// An engine's range adopted by a backend (BackendDevice::adopt_memory): a segment that
/// describes it (never passed to free_segment: the engine frees the memory) and the range's
/// offset in it.
struct AdoptedRange {
  std::unique_ptr<Segment> segment;
  std::uint64_t offset = 0;
};

/// A segment that is a plain allocation at `base` (CUDA/HIP device pointers, host memory): its
/// address is the pointer, and the pointer is its native handle.
inline std::unique_ptr<Segment> pointer_segment(void* base, std::uint64_t bytes) {
  auto segment = std::make_unique<Segment>();
  segment->size = bytes;
  segment->address = reinterpret_cast<std::uintptr_t>(base);
  segment->native = base;
  return segment;
}

/// The host wait of a semaphore that is polled (CUDA events, an interop pair): true once
/// `reached()` holds, false at the deadline. The first 32 polls only yield (waits of a few
/// microseconds); after that each round calls `pause(remaining)`, which blocks for at most
/// `remaining` and returns whether it saw the value reached.
template <class Reached, class Pause>
bool poll_wait(std::chrono::nanoseconds timeout, Reached&& reached, Pause&& pause) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + timeout;
  for (int round = 0;; ++round) {
    if (reached()) return true;
    const auto now = clock::now();
    if (now >= deadline) return false;
    if (round < 32) {
      std::this_thread::yield();
    } else if (pause(std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now))) {
      return true;
    }
  }
}

/// Pinned or registered host memory known to the backend.
struct HostMemory {
  std::byte* ptr = nullptr;      ///< start
  std::uint64_t size = 0;        ///< bytes
  void* backend_data = nullptr;  ///< backend private (Vulkan: VkBuffer + memory record)
  bool registered = false;       ///< user memory (vs. allocated by the backend)
  /// An engine's page-locked memory (adopt_host): also `registered` (never freed by the
  /// backend), and not registered by the backend either, so free_host drops only what the
  /// backend attached to it.
  bool adopted = false;
};

/// Host memory at `ptr` as the backend knows it: `registered` for user memory (registered,
/// never freed by the backend), else memory the backend allocated and frees.
inline std::unique_ptr<HostMemory> host_memory(std::byte* ptr, std::uint64_t bytes, bool registered) {
  auto memory = std::make_unique<HostMemory>();
  memory->ptr = ptr;
  memory->size = bytes;
  memory->registered = registered;
  return memory;
}

/// An engine's memory at `ptr` as adopt_host returns it: registered and adopted.
inline std::unique_ptr<HostMemory> adopted_host_memory(std::byte* ptr, std::uint64_t bytes) {
  auto memory = host_memory(ptr, bytes, /*registered=*/true);
  memory->adopted = true;
  return memory;
}

/// Interop: device memory exported as an opaque POSIX fd (VK_KHR_external_memory_fd).
struct ExternalMemory {
  int fd = -1;               ///< owned by whoever holds the struct until imported
  std::uint64_t size = 0;    ///< size of the whole allocation (what an importer must map)
  bool dedicated = false;    ///< a dedicated allocation (CUDA: cudaExternalMemoryDedicated)
};

/// A range in a segment.
struct DeviceRef {
  const Segment* segment = nullptr;
  std::uint64_t offset = 0;
};

/// A range in host memory known to the backend.
struct HostRef {
  const HostMemory* memory = nullptr;
  std::uint64_t offset = 0;
};

/// An engine's image as a backend addresses it (BackendDevice::adopt_image). Never frees
/// the native object. Backend private, beyond this base.
class BackendImage {
 public:
  virtual ~BackendImage() = default;
};

/// One region of an image copy, resolved by the front end (image.cpp): every value checked,
/// tight pitches filled in. The buffer side: rows of `row_bytes` bytes, `row_pitch` apart,
/// `rows` of them per slice, slices `slice_pitch` apart, `depth * layers` slices, from
/// `buffer_offset` of the buffer the call names.
struct ImageCopy {
  std::uint64_t buffer_offset = 0;  ///< bytes from the buffer reference to the first row
  std::uint64_t row_pitch = 0;      ///< bytes between rows of blocks (> 0)
  std::uint64_t slice_pitch = 0;    ///< bytes between slices (> 0)
  std::uint64_t row_bytes = 0;      ///< bytes of one row of the region
  std::uint32_t rows = 0;           ///< rows of blocks per slice of the region
  std::uint32_t row_length = 0;     ///< row_pitch in texels (Vulkan bufferRowLength)
  std::uint32_t image_height = 0;   ///< slice_pitch in texel rows (Vulkan bufferImageHeight)
  std::uint32_t mip = 0;
  std::uint32_t base_layer = 0;
  std::uint32_t layers = 1;
  std::uint32_t x = 0, y = 0, z = 0;               ///< texels
  std::uint32_t width = 0, height = 0, depth = 0;  ///< texels
};

/// What the image is used as on either side of a hand-over (BackendQueue::image_barrier).
enum class ImageUse : std::uint8_t {
  engine,    ///< the engine's: its current layout before a copy, its final layout after
  copy_dst,  ///< written by a copy (Vulkan TRANSFER_DST_OPTIMAL)
  copy_src,  ///< read by a copy (Vulkan TRANSFER_SRC_OPTIMAL)
};

/// One half of an image's hand-over between the owner (engine side) and the executor (copy
/// side): the image goes from use `from` on a queue of `src_family` to use `to` on one of
/// `dst_family`. The front end records both halves on the two queues, the release half first
/// (then a semaphore between them); `executor` says which half is the executor's. Where no
/// queue-family ownership transfer applies, the executor's half records the whole transition
/// and the owner's half nothing.
struct ImageHandOff {
  ImageUse from = ImageUse::engine;
  ImageUse to = ImageUse::copy_dst;
  std::uint32_t src_family = 0;
  std::uint32_t dst_family = 0;
  bool release = false;   ///< the release half (on the src_family queue), else the acquire
  bool executor = false;  ///< recorded on the executor
};

/// One copy between pinned host memory and a device range, within a batch
/// (BackendQueue::copy_h2d_many, copy_d2h_many).
struct HostDeviceCopy {
  DeviceRef device;
  HostRef host;
  std::uint64_t bytes = 0;  ///< > 0
};

class BackendDevice;

/// How a queue's work behaves where the front end's path depends on it. Each field is fixed
/// for the queue's life, so the front end reads the traits once, when it makes the queue's
/// state, and branches on its copy. They describe a queue, not a device (not Capabilities):
/// an interop pair's two sides answer differently on one device. Each stays a front-end
/// decision because it acts on state that spans queues or calls, which a backend does not see.
/// Defaults: every wait is enqueued, ownership is a no-op, work is submitted as it is enqueued.
struct QueueTraits {
  /// A wait orders *all* later work of the queue after the waited value (a stream operation:
  /// CUDA, HIP, host, null), so the front end skips a wait for a value the queue has waited
  /// for already; only the front end knows a queue's earlier waits on its timelines. False: a
  /// wait may cover one submission only (Vulkan).
  bool wait_orders_later_work = false;
  /// acquire_ownership does something on the queue (Vulkan), so the front end records the
  /// acquire that a later access owes after a queue-family release: the debt outlives the call
  /// that released it and is paid on another queue. False: ownership is a no-op.
  bool acquires_ownership = false;
  /// Signals (and the work before them) reach the device only at the next flush() (Vulkan):
  /// a wait on a value flushes the queue that recorded its signal first, and the front end may
  /// defer a call's submission (TransferOptions::submit_batch); both need the front end's
  /// record of which queue signals which value. False: a signal is on its way once enqueued.
  bool defers_signals = false;
  /// enqueue_yield lets another queue's copies take the copy engine between two of this
  /// queue's copies (host: its engine model; CUDA and Vulkan fill it in). The front end then
  /// cuts bulk copies into pieces with a yield between them, so that an urgent copy on
  /// another queue starts within a piece. False: there is no yield, so the front end neither
  /// cuts bulk copies nor calls enqueue_yield.
  bool yields = false;
  /// With `yields`: the front end cuts bulk copies into the derived piece when the caller
  /// gives no TransferOptions::bulk_piece_bytes. False where a yield costs the copy engine
  /// time of its own (CUDA's yield is a kernel, which the engine waits for between two
  /// pieces), so that small pieces lose bandwidth: cutting is then the caller's choice, by a
  /// piece it gives, of the latency it buys with that bandwidth.
  bool cuts_by_default = false;
};

/// A queue of the backend. Operations execute in enqueue order. Each call enqueues and
/// returns; nothing blocks the host except where stated.
///
/// Its QueueTraits are data each backend passes to the constructor, not a virtual: the type
/// then guarantees what the front end's cached copy relies on, that they never change. A pair
/// queue passes its inner queue's. What remains a virtual acts per call, not per queue:
/// hold_signals brackets one front-end call under deferred submission (see there), flush
/// submits, driver_submits is a statistic; family() is data that ownership transfers exchange
/// between queues of a backend.
class BackendQueue {
 public:
  virtual ~BackendQueue() = default;
  /// What the queue's work does (QueueTraits), as set at construction.
  [[nodiscard]] const QueueTraits& traits() const noexcept { return traits_; }
  virtual void copy_h2d(DeviceRef dst, HostRef src, std::uint64_t bytes) = 0;
  virtual void copy_d2h(HostRef dst, DeviceRef src, std::uint64_t bytes) = 0;
  virtual void copy_d2d(DeviceRef dst, DeviceRef src, std::uint64_t bytes) = 0;
  /// Optional: copies between pinned host memory and device ranges, in enqueue order like that many
  /// copy_h2d / copy_d2h calls. A backend with a batched copy call (CUDA's
  /// cudaMemcpyBatchAsync) makes one driver call for them all, which costs the host far less
  /// than one call per copy. Default: one copy_h2d / copy_d2h each.
  virtual void copy_h2d_many(std::span<const HostDeviceCopy> copies) {
    for (const HostDeviceCopy& c : copies) copy_h2d(c.device, c.host, c.bytes);
  }
  virtual void copy_d2h_many(std::span<const HostDeviceCopy> copies) {
    for (const HostDeviceCopy& c : copies) copy_d2h(c.host, c.device, c.bytes);
  }
  /// Optional (QueueTraits::yields): a yield point. A copy engine serves one queue's
  /// consecutive copies back to back, whatever the queues' priorities; after a yield point it
  /// serves the copies other queues have ready first, then this queue's next copy. Orders
  /// nothing: work before and after it keeps its queue order. Called only on a queue whose
  /// traits say it yields, between two copies. Default: nothing to enqueue.
  virtual void enqueue_yield() {}
  /// Signal `value` on `sem` after all earlier work of this queue.
  virtual void signal(BackendSemaphore& sem, std::uint64_t value) = 0;
  /// Later work of this queue starts after `sem` reaches `value`.
  virtual void wait(BackendSemaphore& sem, std::uint64_t value) = 0;
  /// Optional (Vulkan EXCLUSIVE buffers): queue-family ownership release of a range to
  /// `to`'s family, recorded after this queue's earlier work. Default: nothing to do.
  virtual void release_ownership(DeviceRef /*range*/, std::uint64_t /*bytes*/,
                                 BackendQueue& /*to*/) {}
  /// Optional: the matching acquire on the receiving queue (after a wait on the releasing
  /// queue's signal). Default: nothing to do.
  virtual void acquire_ownership(DeviceRef /*range*/, std::uint64_t /*bytes*/,
                                 BackendQueue& /*from*/) {}
  /// Optional: the synthetic compute kernel (see run_synthetic_compute, include/ferry/testing.hpp):
  /// out[i] = in[i] + 1, `units` passes. Return false if not supported.
  virtual bool synthetic_compute(DeviceRef /*in*/, DeviceRef /*out*/, std::uint64_t /*bytes*/,
                                 std::uint32_t /*units*/) {
    return false;
  }
  /// Optional: make enqueued work start (Vulkan: submit what was recorded). Called by the
  /// front end after each public call, or later when it defers submission
  /// (QueueTraits::defers_signals). Safe to call from any thread at any time. Default: work
  /// starts when enqueued.
  virtual void flush() {}
  /// Optional (QueueTraits::defers_signals): while held, signal() only records; otherwise
  /// each signal submits what was recorded up to it at once. A scope, not a trait: the front
  /// end holds a queue's signals around one call's work when it may defer that call's
  /// submission (TransferOptions::submit_batch > 1), a choice it makes per call from its counts
  /// of pending calls and bytes, which the backend does not see. Called only on a queue whose
  /// traits defer signals. Default: nothing to hold.
  virtual void hold_signals(bool /*held*/) {}
  /// Optional: driver submissions made so far (Device::submissions); thread-safe. Default 0:
  /// no submission step.
  [[nodiscard]] virtual std::uint64_t driver_submits() const { return 0; }
  /// Optional (images): copy regions between a buffer (pinned host memory at `src`/`dst`, or
  /// a segment range) and an image of this queue's device, in enqueue order like every copy.
  /// The front end checked every region and ordered the access (image_barrier). Defaults
  /// (backend.cpp) throw `unsupported`; a backend whose adopt_image succeeds implements all.
  virtual void copy_h2i(BackendImage& dst, HostRef src, std::span<const ImageCopy> regions);
  virtual void copy_i2h(HostRef dst, BackendImage& src, std::span<const ImageCopy> regions);
  virtual void copy_d2i(BackendImage& dst, DeviceRef src, std::span<const ImageCopy> regions);
  virtual void copy_i2d(DeviceRef dst, BackendImage& src, std::span<const ImageCopy> regions);
  /// Optional (Vulkan): record one half of an image hand-over (layout transition and queue-
  /// family ownership transfer; see ImageHandOff), over every level and layer. Default:
  /// nothing to record (images have no layouts or families).
  virtual void image_barrier(BackendImage& /*image*/, const ImageHandOff& /*hand_off*/) {}
  /// Optional: queue family index (Vulkan; kExternalQueueFamily for a pair's other API).
  /// Default 0.
  [[nodiscard]] virtual std::uint32_t family() const { return 0; }
  /// Optional (peer copies): copy `bytes` from `src`, a segment of `src_device`, to `dst`, a
  /// segment of `dst_device`; one of the two is this queue's device, and its peer_support for
  /// the other said the copy is possible (the front end checked). Default (backend.cpp):
  /// `unsupported`.
  virtual void copy_peer(DeviceRef dst, BackendDevice& dst_device, DeviceRef src, BackendDevice& src_device,
                         std::uint64_t bytes);

 protected:
  explicit BackendQueue(QueueTraits traits = {}) noexcept : traits_(traits) {}

 private:
  QueueTraits traits_;
};

/// What BackendDevice::peer_support answers for another device.
struct PeerSupport {
  bool possible = false;               ///< copies and cross-device waits work
  PeerPath path = PeerPath::staged;    ///< how copies run, when possible
  std::string reason{};                ///< why not, when impossible
};

/// What a backend remembers between bind_thread and unbind_thread (see there). Backend private.
struct ThreadBinding {
  const void* outer = nullptr;   ///< the binding this one nests in
  std::uintptr_t previous = 0;   ///< the thread's binding before
  bool switched = false;         ///< whether bind_thread changed the thread's binding
};

/// An opened device of the backend.
class BackendDevice {
 public:
  virtual ~BackendDevice() = default;
  [[nodiscard]] virtual const Capabilities& capabilities() const = 0;
  /// The device's default queue of a role. May return the same object for both roles on a
  /// one-queue device. Owned by the BackendDevice.
  virtual BackendQueue& default_queue(QueueRole role) = 0;
  /// A new queue (owned by the caller). Throw `unsupported` when none is left.
  virtual std::unique_ptr<BackendQueue> create_queue(QueueRole role, int priority) = 0;
  /// Adopt an engine queue (owned by the caller, but never destroys the native object).
  /// Backends validate *native* handles here (stream of another device, family out of range),
  /// since only they can; throw `invalid_argument` / `unsupported`.
  virtual std::unique_ptr<BackendQueue> adopt_queue(QueueRole role, const NativeQueue& native) = 0;
  virtual std::unique_ptr<BackendSemaphore> create_semaphore(std::uint64_t initial) = 0;
  /// Raw device memory. Throw Error(out_of_memory) when the device is full.
  virtual std::unique_ptr<Segment> allocate_segment(std::uint64_t bytes) = 0;
  virtual void free_segment(std::unique_ptr<Segment> segment) = 0;
  /// Pinned host memory. Throw Error(out_of_memory) when it cannot be pinned.
  virtual std::unique_ptr<HostMemory> allocate_host(std::uint64_t bytes) = 0;
  /// Register user memory (front end checked: non-empty, no overlap with other
  /// registrations). Throw `unsupported` if impossible, `invalid_argument` for alignment the
  /// backend needs.
  virtual std::unique_ptr<HostMemory> register_host(std::byte* ptr, std::uint64_t bytes) = 0;
  /// Free pinned memory or unregister user memory; for adopted memory, release only what
  /// adopt_host attached (the memory stays the engine's).
  virtual void free_host(std::unique_ptr<HostMemory> memory) = 0;
  /// Optional: describe an engine's page-locked host memory (HostPool::adopt) for DMA. The
  /// front end checked: non-null, size > 0, no wrap-around. The backend checks what its
  /// driver can tell (CUDA: page-locked for this device), throwing `invalid_argument` naming
  /// it, and returns memory with `registered` and `adopted` set. Default (backend.cpp):
  /// `unsupported`.
  virtual std::unique_ptr<HostMemory> adopt_host(std::byte* ptr, std::uint64_t bytes);
  /// Optional: bind the device to the calling thread for one front-end call, so that the
  /// backend entry points the call makes skip binding it each (CUDA: one context query per
  /// call instead of one per entry point). Paired with unbind_thread on the same thread, which
  /// restores the thread's binding; bindings nest. Default: nothing to bind.
  virtual void bind_thread(ThreadBinding& /*binding*/) {}
  virtual void unbind_thread(ThreadBinding& /*binding*/) noexcept {}
  /// Block until all queues of the device are idle (used at close).
  virtual void wait_idle() = 0;
  /// Optional: Vulkan validation message count. Default 0.
  [[nodiscard]] virtual std::uint64_t validation_messages() const { return 0; }

  // ---- Optional interop hooks (backends/pair/). Defaults (backend.cpp) throw `unsupported`. ----
  /// Exporter: a timeline semaphore whose payload is exported as an opaque fd (`*fd`, owned by
  /// the caller). Vulkan.
  virtual std::unique_ptr<BackendSemaphore> create_exported_semaphore(std::uint64_t initial, int* fd);
  /// Exporter: a segment of device memory exported as an opaque fd (`*out`, fd owned by the
  /// caller). Vulkan.
  virtual std::unique_ptr<Segment> allocate_exported_segment(std::uint64_t bytes, ExternalMemory* out);
  /// Importer: a timeline semaphore imported from an opaque fd. Takes ownership of `fd` on
  /// success only. Queue signal/wait work; host value/signal/wait may throw `unsupported`
  /// (the exporter's side answers those). CUDA.
  virtual std::unique_ptr<BackendSemaphore> import_semaphore(int fd);
  /// Importer: device memory imported from an opaque fd and mapped whole (takes ownership of
  /// `memory.fd` on success only); freed with free_segment. CUDA.
  virtual std::unique_ptr<Segment> import_segment(const ExternalMemory& memory);
  /// Exporter (images): the memory an engine's `VkImage` is bound to (NativeImage's
  /// `vulkan_memory*` fields, checked here against the image's memory requirements, naming
  /// the field: `invalid_argument`), exported as an opaque fd (`fd` owned by the caller) with
  /// the allocation's size and dedication as the engine stated them. Vulkan.
  virtual ExternalMemory export_image_memory(const NativeImage& native);
  /// Importer (images): the image of shape `desc` that lies at `offset` of the memory
  /// exported as `memory`, imported and mapped as the importer's image (CUDA: a mipmapped
  /// array, with cudaArrayColorAttachment when `color_attachment`), which owns the import
  /// and never frees the exporter's image. Takes ownership of `memory.fd` (closed on
  /// failure too). `unsupported` for a format the importer has no image form of. CUDA.
  virtual std::unique_ptr<BackendImage> import_image(const ExternalMemory& memory, std::uint64_t offset,
                                                     const ImageDesc& desc, bool color_attachment);
  /// Optional (composite devices, interop pairs): the device of `backend` this device is
  /// made of, for the public calls that address one API's objects (vulkan::native_handles).
  /// Default null: the device is made of no other.
  [[nodiscard]] virtual BackendDevice* part(Backend /*backend*/) { return nullptr; }
  /// Optional (interop): another API also signals and waits on this device's semaphores
  /// (Vulkan: the validation layer cannot see those operations; see vulkan_device.cpp).
  /// Default: nothing.
  virtual void note_external_signals() {}
  /// Optional: describe an engine's memory (Device::adopt_memory). The front end checked the
  /// backend-neutral rules (size > 0, 4-byte aligned start, no wrap-around); the backend
  /// checks which fields of `native` it can address and what its driver can tell (device of
  /// a pointer, size of a VkBuffer), throwing `invalid_argument` naming them. Default
  /// (backend.cpp): `unsupported`.
  virtual AdoptedRange adopt_memory(const NativeMemory& native, std::uint64_t bytes);
  /// Optional (images, Device::adopt_image): describe an engine's image of shape `desc`
  /// (checked by the front end: known format, extents, levels, layers) owned by a queue of
  /// `owner_family`. The backend checks which fields of `native` it can address and what its
  /// driver can tell (an array's extent and format), throwing `invalid_argument` naming them.
  /// Default (backend.cpp): `unsupported`.
  virtual std::unique_ptr<BackendImage> adopt_image(const NativeImage& native, const ImageDesc& desc,
                                                    std::uint32_t owner_family);
  /// Optional (images): the granularity of image copies on a queue of `family`, in texel blocks (Vulkan:
  /// VkQueueFamilyProperties::minImageTransferGranularity; (0, 0, 0): whole levels only). The
  /// front end refuses regions that break it. Default (1, 1, 1): any block-aligned box.
  [[nodiscard]] virtual Extent3D image_copy_granularity(std::uint32_t /*family*/) const { return {1, 1, 1}; }
  /// Optional (images): whether handing `image` from a queue of `src_family` to one of `dst_family` transfers
  /// queue-family ownership (Vulkan: families differ and the image is EXCLUSIVE), so that the
  /// receiving queue owes an acquire (recorded at its wait, or by the engine). Default: no.
  [[nodiscard]] virtual bool image_hand_off_needed(const BackendImage& /*image*/, std::uint32_t /*src_family*/,
                                                   std::uint32_t /*dst_family*/) const {
    return false;
  }
  /// Optional: alignment that register_host needs for pointer and size. Default 1: any.
  [[nodiscard]] virtual std::uint64_t host_registration_alignment() const { return 1; }
  /// Optional (peer copies): whether this device's queues can copy between its segments and
  /// those of `other` (another device of the same backend, opened in this process, possibly
  /// the same hardware opened twice) with BackendQueue::copy_peer, and wait on `other`'s
  /// semaphores with BackendQueue::wait (signals stay on a queue's own device's semaphores).
  /// May enable what the route needs (CUDA: peer access) and is then cached. Default
  /// (backend.cpp): impossible, naming the backend.
  virtual PeerSupport peer_support(BackendDevice& other);
};

/// Queue family index standing for "another API" in ownership transfers
/// (VK_QUEUE_FAMILY_EXTERNAL): what family() of a queue of the other API reports in a pair.
inline constexpr std::uint32_t kExternalQueueFamily = ~std::uint32_t{0} - 1;

/// Where a backend's devices rank in Device::open_default().
enum class DeviceKind : std::uint8_t {
  gpu,        ///< tried before every CPU device (a descriptor's is_gpu may demote an ordinal)
  cpu,        ///< tried after every GPU device
  composite,  ///< made of other backends' devices (interop pairs): never chosen by open_default,
              ///< which ranks the parts on their own
  inert,      ///< does no work (Backend::null): never chosen by open_default
};

/// What each backend folder exports (backends/<name>/): one descriptor per Backend value it
/// implements, named after the enumerator (`cuda_backend_descriptor`). A backend that was not built exports the same descriptor
/// from its folder's stub.cpp (`built` false, no devices, `open` throws `unsupported` naming
/// the option), so the library links in every configuration. The registry (src/registry.cpp)
/// lists them all through the generated backend_table.hpp.
struct BackendDescriptor {
  Backend id = Backend::host;
  const char* name = "";    ///< to_string(id)
  const char* option = "";  ///< the meson arguments that build it ("-Dcuda=enabled")
  DeviceKind kind = DeviceKind::inert;
  bool built = false;       ///< compiled into this library (false: the folder's stub)
  /// Number of devices: the ordinals `open` accepts are [0, count). Never throws: 0 when the
  /// driver or the device is missing.
  int (*count)() noexcept = nullptr;
  /// Open device `options.ordinal`, which the front end has checked against `count`. Throws
  /// Error (`unsupported` when no device is present, saying why).
  std::unique_ptr<BackendDevice> (*open)(const DeviceOptions& options) = nullptr;
  /// Optional, for kind gpu: whether `ordinal` is a real GPU (Vulkan: false for a CPU driver
  /// such as lavapipe, which open_default then ranks among the CPU devices). Null: all are.
  bool (*is_gpu)(int ordinal) noexcept = nullptr;
  /// Optional (interop pairs): the device count of the backend that `options.peer_ordinal`
  /// indexes, against which the front end checks an explicit peer ordinal. Null: the backend
  /// ignores peer_ordinal.
  int (*peer_count)() noexcept = nullptr;
  /// Optional, for backends that load a vendor library at run time (Device::runtime_present):
  /// whether it loads and provides what the backend needs. Never throws. Null: the backend
  /// needs no library beyond libferry's own dependencies.
  bool (*runtime_present)() noexcept = nullptr;
};

/// Device code of the synthetic compute step (run_synthetic_compute), for backends that load
/// kernels from an image: libferry holds no device code of its own, and ferry-testkit
/// registers its image (CUDA: a fatbin or PTX text whose kernel is ferry_synthetic_compute)
/// when it loads. The image must outlive the process's devices (the kit's static data does).
/// Thread-safe; an empty span: no image registered for `backend`.
void set_synthetic_kernel_image(Backend backend, std::span<const std::byte> image) noexcept;
std::span<const std::byte> synthetic_kernel_image(Backend backend) noexcept;

/// For pointer backends' adopt_memory: `invalid_argument` unless `native.pointer` is set and
/// no vulkan_* field is (`backend` names the backend in the message).
void require_pointer_only(const NativeMemory& native, const char* backend);

/// For stubs: a `count` for a backend that was not built.
int no_devices() noexcept;
/// For stubs: the `unsupported` error of opening a backend that was not built, naming the
/// meson arguments that build it.
[[noreturn]] void fail_not_built(const char* name, const char* option);

}  // namespace ferry::detail
