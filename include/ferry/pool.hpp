// SPDX-License-Identifier: MIT
/// @file pool.hpp
/// @brief The stream-ordered device pool, device buffers, and pinned host memory.
///
/// ## The pool contract
///  - Every device block has an **owner queue**. Allocation is stream-ordered on the owner:
///    the block may be used by work enqueued on the owner after the allocation call.
///  - `DeviceBuffer::release()` is a **stream-ordered free**: it records the owner's current
///    timeline point (the *free point*). Later allocations *for the same owner* may reuse the
///    block at once (their work is queued after the free point). Other queues may reuse it
///    only once the free point has been reached, which the pool checks by querying the
///    semaphore, never by blocking the host.
///  - A block that another queue writes first (an upload's destination, written by the
///    transfer queue) carries the point that writer must wait for (`DeviceBuffer::ready_after`):
///    the pool prefers blocks whose free point is reached, takes a still-pending block of the
///    owner before growing (footprint first), and counts that choice in the statistics.
///  - The pool grows by whole segments: requests up to 1 MiB are served from 2 MiB segments,
///    up to 10 MiB from 20 MiB segments, larger requests get their own segment rounded up to
///    2 MiB (PyTorch's caching-allocator policy, so footprints compare like for like).
///    `trim()` returns idle segments to the backend.
///  - Out of memory: completed frees are reclaimed, idle segments are trimmed, the request is
///    retried, then `ErrorCode::out_of_memory` is thrown naming the request and pool state.
///
/// Thread-safety: DevicePool and HostPool methods may be called from any thread (one mutex
/// per pool); `get_budget`, `calculate_statistics`, `snapshot` and `validate` see a
/// consistent state while other threads allocate and release. A DeviceBuffer/HostBuffer
/// object is not itself synchronized: its const accessors may be called concurrently, but
/// releasing, moving or destroying one object must not race with any other use of it. Calls
/// that use one DeviceBuffer (copies, compute, release) from several threads must be ordered
/// by the caller, except calls through one Transfer, which it serializes. A HostBuffer's
/// handle may be dropped while copies that use it are in flight on any thread: the memory
/// stays alive until the last of them completes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <vector>

#include "ferry/api.hpp"
#include "ferry/device.hpp"

namespace ferry {

namespace detail {
struct BlockState;
struct HostAllocation;
}  // namespace detail

struct MemorySnapshot;

/// @brief How a backend addresses a device buffer (for kernels and interop).
struct DeviceView {
  std::uint64_t address = 0;  ///< CUDA/HIP device pointer, host-backend pointer; Vulkan: 0
  void* native = nullptr;     ///< Vulkan: the segment's VkBuffer; CUDA/HIP/host: segment base
  std::uint64_t offset = 0;   ///< offset of the buffer inside `native` (Vulkan)
  std::uint64_t size = 0;     ///< bytes
};

/// @brief RAII handle to a block of pooled device memory with an owner queue, or to an
/// engine's memory adopted with `Device::adopt_memory` (which ferry never frees).
///
/// Move-only. Destruction without `release()` releases (stream-ordered on the owner).
/// After release, or after the device is closed, accessors throw `invalid_argument`.
class FERRY_API DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&&) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&&) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  /// @brief Size requested at allocation, in bytes.
  [[nodiscard]] std::uint64_t size(std::source_location where = std::source_location::current()) const;
  /// @brief The owner queue (whose pool the block returns to).
  [[nodiscard]] Queue owner(std::source_location where = std::source_location::current()) const;
  /// @brief Native addressing (device pointer or VkBuffer + offset).
  [[nodiscard]] DeviceView view(std::source_location where = std::source_location::current()) const;
  /// @brief The point a queue other than the owner must wait for before writing this block
  /// (the previous owner's free point; empty when the block was already free for everyone).
  [[nodiscard]] TimelinePoint ready_after(std::source_location where = std::source_location::current()) const;
  /// @brief Stream-ordered free on the owner queue (see the pool contract). Releasing twice,
  /// or a moved-from/null buffer, throws `invalid_argument`. Returns the free point: the
  /// owner's point after every use of the buffer enqueued so far (ferry's copies included).
  /// For adopted memory (`Device::adopt_memory`) this ends ferry's use and the returned point
  /// is the release point: once reached, the engine may reuse or free the memory; nothing
  /// returns to the pool. After `Device::close()` the call only makes the handle inert and
  /// returns an empty point (every use has completed).
  TimelinePoint release(std::source_location where = std::source_location::current());
  /// @brief Stream-ordered free after `point`: the owner queue waits for `point` (GPU-side,
  /// host not blocked), then the block is released at the owner's next point, exactly as
  /// `release()` would. Use it when another queue or the host still uses the buffer up to
  /// `point`. (PyTorch's `record_stream` differs: the block's free point is the consuming
  /// queue's, and the owner's queue does not wait; `run_synthetic_compute` on a block of
  /// another queue records it that way, see testing.hpp.)
  /// An empty `point` counts as reached: the call is then exactly `release()`. Returns the
  /// free point (adopted memory: the release point), which follows `point`.
  TimelinePoint release_after(const TimelinePoint& point,
                              std::source_location where = std::source_location::current());
  /// @brief Adopted memory only: end ferry's use without enqueueing anything on the owner
  /// queue, and return the point at which every ferry copy and access of the range completes
  /// (empty when ferry never accessed it). The owner does not wait for a copy still in
  /// flight, so owner work enqueued after the call may overlap that copy.
  ///
  /// The engine then orders every later use and its own reuse of the memory after the
  /// returned point itself: a queue waits for it, or the engine's allocator defers the
  /// memory's reuse behind a queue that waits for it (PyTorch: `record_stream` on a stream
  /// made to wait for the point). Use `release()` where the owner's stream order is what
  /// protects the memory.
  ///
  /// Errors (`invalid_argument`, at the caller's `where`): a pool block (the pool reuses it
  /// in the owner's order, which must follow the copy: use `release()`), a released or null
  /// buffer, and, on Vulkan, a range whose queue-family acquire the owner still owes (the
  /// owner's acquire must come first: `release()`, or `vulkan::engine_acquire` and the
  /// engine's own barrier). The handle is inert afterwards.
  TimelinePoint release_unordered(std::source_location where = std::source_location::current());
  /// @brief Whether the buffer wraps an engine's memory (`Device::adopt_memory`) rather than
  /// a pool block. Throws `invalid_argument` for a released or null buffer.
  [[nodiscard]] bool adopted(std::source_location where = std::source_location::current()) const;
  /// @brief Whether this handle holds a live block.
  [[nodiscard]] bool valid() const noexcept;
  explicit operator bool() const noexcept { return valid(); }

 private:
  friend struct detail::access;
  explicit DeviceBuffer(std::shared_ptr<detail::BlockState> s) : state_(std::move(s)) {}
  std::shared_ptr<detail::BlockState> state_;
};

/// @brief Cheap pool statistics (`get_budget`): read under the pool mutex, O(queues).
/// Pool statistics, budgets and snapshots count pool memory only: adopted memory
/// (`Device::adopt_memory`) is the engine's and appears in none of them.
struct QueueBudget {
  std::uint32_t queue_id = 0;          ///< the owner queue
  std::string queue_name{};            ///< its name
  std::uint64_t active_bytes = 0;      ///< bytes allocated to this owner and not released
  std::uint64_t free_bytes = 0;        ///< free bytes last owned by this queue
  std::uint64_t peak_active_bytes = 0; ///< high-water mark of active_bytes
};

/// @brief Cheap statistics: suitable for every step of a training loop.
struct PoolBudget {
  std::uint64_t reserved_bytes = 0;       ///< bytes held in segments from the backend
  std::uint64_t active_bytes = 0;         ///< bytes in allocated blocks (rounded sizes)
  std::uint64_t requested_bytes = 0;      ///< bytes the callers asked for
  std::uint64_t peak_reserved_bytes = 0;  ///< high-water mark of reserved_bytes
  std::uint64_t peak_active_bytes = 0;    ///< high-water mark of active_bytes
  /// Bytes that were reserved and free but not reusable by the queue asking, at the last time
  /// the pool had to grow (the memory the usual side-queue copy strands).
  std::uint64_t stranded_bytes = 0;
  std::uint64_t peak_stranded_bytes = 0;  ///< high-water mark of stranded_bytes
  std::uint64_t segment_count = 0;        ///< live segments
  std::uint64_t allocations = 0;          ///< allocate calls served
  std::uint64_t segment_allocations = 0;  ///< segments requested from the backend
  std::uint64_t pending_reuses = 0;       ///< writer had to wait for the owner's free point
  std::uint64_t immediate_reuses = 0;     ///< block reused with no wait
  std::vector<QueueBudget> queues{};      ///< per-owner breakdown
};

/// @brief Slow statistics (`calculate_statistics`): walks every block. For debugging.
struct PoolDetailedStatistics {
  PoolBudget budget{};                     ///< the cheap numbers
  std::uint64_t free_blocks = 0;           ///< free blocks
  std::uint64_t allocated_blocks = 0;      ///< allocated blocks
  std::uint64_t pending_free_blocks = 0;   ///< free blocks whose free point is not reached
  std::uint64_t largest_free_block = 0;    ///< bytes
  std::uint64_t idle_segments = 0;         ///< segments with no allocated block
};

/// @brief Options of one allocation.
struct AllocationOptions {
  std::string tag{};  ///< free-form label recorded in pool events and snapshots
  /// The queue that will first write the block, when it is not the owner (an upload's
  /// executing queue). The pool then may hand out a block whose free point is still pending
  /// and reports that point in `DeviceBuffer::ready_after()`. A `Transfer` copy with
  /// `UploadIntoOptions::destination_unused` into the block needs this set to its executor.
  Queue first_writer{};
};

/// @brief One segment of a device pool: a range of device memory the pool obtained from the
/// backend in one piece, as reported to `SegmentCallbacks` (for registering pool memory with
/// NCCL's `ncclCommRegister`, NIXL's `registerMem` or UCX's `ucp_mem_map`).
///
/// Layout: a segment is **one driver allocation**, contiguous: `size` bytes starting at its
/// base, never moved, resized, split into several driver objects or remapped while it lives,
/// which is what RDMA and collective-library registration needs. Every pool block
/// (`DeviceBuffer` from `DevicePool::allocate` or an upload) lies inside exactly one segment:
/// its `view().native` is the segment's `native`, and on backends with `pointer` set its
/// `view().address` is in `[address, address + size)`. Per backend:
///  - CUDA/HIP: one `cudaMalloc`/`hipMalloc`; `address` is the device pointer (also `native`).
///  - host, null: one page-aligned host allocation; `address` is its pointer (also `native`).
///  - Vulkan: one `VkDeviceMemory` (`vulkan_memory`) bound whole, at offset 0, to one
///    `VkBuffer` (`native`). `address` is a synthetic label that keeps snapshots' addresses
///    distinct, never a pointer (`pointer` is false): register the memory object instead.
///  - interop pairs: one exportable Vulkan allocation imported whole into CUDA; `address` is
///    its CUDA device pointer, `native` that pointer, `vulkan_memory` null.
///
/// Adopted memory (`Device::adopt_memory`) is the engine's, not the pool's: it is never
/// reported.
struct SegmentInfo {
  std::uint64_t id = 0;          ///< unique within the pool for the device's lifetime
  std::uint64_t address = 0;     ///< base address (see `pointer`); what snapshots report
  std::uint64_t size = 0;        ///< bytes, from the base
  void* native = nullptr;        ///< base pointer (CUDA/HIP/host), VkBuffer (Vulkan)
  void* vulkan_memory = nullptr; ///< Vulkan: the VkDeviceMemory; null elsewhere
  bool pointer = true;           ///< `address` is a real pointer (false: a label, Vulkan)
  Backend backend = Backend::host;  ///< the backend of the device
};

/// @brief Callbacks through which a pool reports its segments (see `SegmentInfo`), installed
/// with `DevicePool::set_segment_callbacks`. Either may be empty (not called).
///
/// When they are called, and on which thread:
///  - `created(s)`: after the backend allocated `s` and before any block of it is handed out,
///    on the thread of the call that grew the pool (`DevicePool::allocate`, a `Transfer` call
///    that allocates a destination), so memory is registered before its first use. Also for
///    every segment alive when the callbacks are installed, on the installing thread.
///  - `destroyed(s)`: before `s` is returned to the backend, once no work ferry enqueued uses
///    it any more (the segment is idle, every free point of its blocks is reached), on the
///    thread of the call that frees it: `DevicePool::trim`, an allocation that trims on its
///    out-of-memory path, `Device::close` (or the drop of the device's last handle). At close,
///    every segment still alive is reported after the device's queues went idle.
///  - Exactly one `destroyed` follows each `created` of the same callbacks, with the same
///    `SegmentInfo`, unless the callbacks were replaced in between (see
///    `set_segment_callbacks`).
///
/// Locks and re-entrance: callbacks run under the pool's mutex, so one pool's callbacks never
/// run concurrently with each other nor with another call on that pool. A callback must not
/// call ferry on the same device (its pool, buffers, transfers, queues): those calls would wait
/// for the mutex it holds, so ferry detects a call into that device's pool or Transfer from
/// inside its callback and throws `invalid_argument` instead of deadlocking. Calls into other
/// libraries (NCCL, NIXL, UCX, the CUDA runtime) are what callbacks are for. A callback should
/// be quick: every allocation that grows the pool waits for it.
///
/// Exceptions: when `created` throws, the segment is returned to the backend (with no
/// `destroyed` call) and the exception leaves the call that grew the pool unchanged; the pool
/// is as before the call. When `destroyed` throws, the segment is freed anyway (its memory is
/// no longer usable after the call), the remaining idle segments are still reported and freed,
/// and the first exception leaves the call (`trim`, the allocation); `Device::close` cannot
/// report and drops it.
struct SegmentCallbacks {
  std::function<void(const SegmentInfo&)> created{};    ///< a segment exists (see above)
  std::function<void(const SegmentInfo&)> destroyed{};  ///< a segment is about to be freed
};

/// @brief The device's stream-ordered memory pool. Obtained from `Device::pool()`.
class FERRY_API DevicePool {
 public:
  /// @brief Allocate `bytes` (> 0) owned by `owner` (a queue of this device).
  /// Errors: `invalid_argument` for 0 bytes, sizes beyond the device limit, a null queue or a
  /// queue of another device; `out_of_memory` after reclaim + trim.
  DeviceBuffer allocate(std::uint64_t bytes, const Queue& owner, AllocationOptions options = {},
                        std::source_location where = std::source_location::current());
  /// @brief Cheap statistics.
  [[nodiscard]] PoolBudget get_budget() const;
  /// @brief Slow statistics (walks all blocks).
  [[nodiscard]] PoolDetailedStatistics calculate_statistics() const;
  /// @brief Reset the peak counters to the current values.
  void reset_peaks();
  /// @brief Return idle segments (no allocated block, all free points reached) to the
  /// backend. Returns the bytes returned.
  /// Blocking: on CUDA and HIP returning a segment (cudaFree) waits for all work of the
  /// device, on every stream. So a thread must not trim, nor allocate near the device's
  /// memory limit (the out-of-memory path trims), while a queue of the device waits for a
  /// semaphore that only this thread would signal later: that wait never ends.
  std::uint64_t trim();
  /// @brief Check every invariant of the pool; throws `internal_error` naming the broken one
  /// (a bug in ferry, never the caller's or the device's fault).
  void validate(std::source_location where = std::source_location::current()) const;
  /// @brief Segments, blocks and the recorded event trace (slow; copies everything).
  [[nodiscard]] MemorySnapshot snapshot() const;
  /// @brief Drop recorded events (keeps segments and blocks).
  void clear_events();
  /// @brief Install `callbacks` (see `SegmentCallbacks`), replacing any installed before.
  /// Before returning, `callbacks.created` is called on the calling thread for every segment
  /// alive now, in increasing id order, so the caller sees every segment exactly once whether
  /// it was made before or after the call. The callbacks replaced get no further call (not even
  /// `destroyed` for the segments they were told of): deregister what they registered before
  /// replacing them, if needed. Empty callbacks (`{}`) uninstall.
  /// If `created` throws for an existing segment, nothing is installed (the previous callbacks
  /// stay), `callbacks.destroyed` is called for the segments already reported to this
  /// `created`, newest first, and the exception leaves the call.
  /// Errors: `invalid_argument` when the device is closed, or when called from inside a
  /// segment callback of this pool.
  /// Thread-safety: like every DevicePool method; a call runs under the pool's mutex.
  void set_segment_callbacks(SegmentCallbacks callbacks,
                             std::source_location where = std::source_location::current());
  /// @brief The pool's live segments, in increasing id order (what `created` was or would be
  /// told). Cheap: O(segments).
  [[nodiscard]] std::vector<SegmentInfo> segments(std::source_location where = std::source_location::current()) const;

  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

 private:
  friend struct detail::access;
  explicit DevicePool(detail::DeviceState* device) : device_(device) {}
  detail::DeviceState* device_;
};

/// @brief Pinned (DMA-able) host memory: allocated by the host pool, user memory registered
/// with the device, or an engine's page-locked memory adopted with `HostPool::adopt`.
///
/// Move-only. Pool and registered memory stays alive while any enqueued copy still uses it,
/// even if this handle is destroyed first (the copy holds a reference until its point is
/// reached). Adopted memory is the engine's: the copy holds the handle's state, never the
/// memory, which the engine keeps alive until the copy's point is reached.
/// Freeing: the last reference to pool or registered memory frees or unregisters it with the
/// vendor's call (cudaFreeHost/cudaHostUnregister on CUDA, the HIP equivalents), which waits
/// for the device to go idle. Do not let it go while a queue waits for a host signal that
/// the same thread gives only afterwards; keep such buffers until the signal is given.
class FERRY_API HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(HostBuffer&&) noexcept = default;
  HostBuffer& operator=(HostBuffer&&) noexcept = default;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() = default;

  /// @brief The bytes (throws `invalid_argument` for a null buffer).
  [[nodiscard]] std::span<std::byte> span(std::source_location where = std::source_location::current()) const;
  /// @brief Start of the memory.
  [[nodiscard]] std::byte* data(std::source_location where = std::source_location::current()) const;
  /// @brief Size in bytes.
  [[nodiscard]] std::uint64_t size(std::source_location where = std::source_location::current()) const;
  /// @brief True for memory registered from the user (`HostPool::register_memory`).
  [[nodiscard]] bool registered(std::source_location where = std::source_location::current()) const;
  /// @brief True for an engine's page-locked memory adopted with `HostPool::adopt`.
  [[nodiscard]] bool adopted(std::source_location where = std::source_location::current()) const;
  /// @brief Whether this handle holds memory.
  [[nodiscard]] bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }

 private:
  friend struct detail::access;
  explicit HostBuffer(std::shared_ptr<detail::HostAllocation> s) : state_(std::move(s)) {}
  std::shared_ptr<detail::HostAllocation> state_;
};

/// @brief Pinned host memory of a device. Obtained from `Device::host_pool()`.
class FERRY_API HostPool {
 public:
  /// @brief Allocate `bytes` (> 0) of pinned host memory. Errors: `invalid_argument` for 0 or
  /// absurd sizes, `out_of_memory` when the backend cannot pin more.
  HostBuffer allocate(std::uint64_t bytes,
                      std::source_location where = std::source_location::current());
  /// @brief Register user memory for DMA. The caller keeps `memory` alive and unmodified by
  /// other code while copies use it. Overlapping an existing registration, an empty span, or
  /// (where the backend needs page alignment) an unaligned range is `invalid_argument`;
  /// `unsupported` when the backend cannot register memory.
  HostBuffer register_memory(std::span<std::byte> memory,
                             std::source_location where = std::source_location::current());
  /// @brief Adopt `size` bytes at `data`, host memory an engine already page-locked for this
  /// device (PyTorch's pinned tensors, `cudaHostAlloc` or `cudaHostRegister` memory), as a
  /// HostBuffer: every pinned path (`Transfer::upload` and `upload_into` of a HostBuffer,
  /// `Transfer::download` into one) then moves it by DMA directly, as pool memory, with no
  /// staging copy.
  ///
  /// Ownership and lifetime: ferry never frees, unregisters or pins adopted memory; it only
  /// describes the range. The caller keeps the memory allocated and page-locked, and leaves
  /// an upload's source unchanged and a download's destination unread, until the copy's
  /// point is reached, exactly as for a pool HostBuffer; dropping the handle earlier is fine
  /// (copies in flight hold its state), releasing the memory earlier is not. `Device::close()`
  /// waits for every copy, after which the memory is the engine's alone and the handle is
  /// inert (its accessors throw `invalid_argument`). Adopted memory is not counted in
  /// `pinned_bytes()`, and adoptions may overlap each other and registered ranges (several
  /// tensors of one pinned storage): ferry never writes a range it was not asked to.
  ///
  /// Rules and errors (`invalid_argument`, naming the value, at the caller's `where`): `data`
  /// not null, `size` > 0, `data` + `size` within the address space; the device is open.
  /// Per backend (`Capabilities::host_memory_adoption` says whether it can adopt):
  ///  - CUDA/HIP: the first and the last byte are page-locked host memory
  ///    (`cudaPointerGetAttributes` reports `cudaMemoryTypeHost`: `cudaHostAlloc`'d or
  ///    `cudaHostRegister`ed), allocated or registered for this device or portable to every
  ///    device (`cudaHostGetFlags` reports `cudaHostAllocPortable`); else `invalid_argument`
  ///    naming what the driver reported. A failing driver call is the driver's error code,
  ///    naming the call.
  ///  - host, null: any memory (the process's memory is the device's).
  ///  - Vulkan: the range is imported with VK_EXT_external_memory_host, as `register_memory`
  ///    imports it (the same alignment rules, `invalid_argument` when they are not met);
  ///    `unsupported` where the device lacks the extension, since without it a Vulkan queue
  ///    cannot address host memory that ferry did not allocate.
  ///  - interop pairs: `unsupported` (a pair would have to import the range into both APIs;
  ///    register it with `register_memory` instead).
  /// What cannot be checked is the caller's promise that the range is live, one allocation
  /// (the driver is asked about its ends only) and stays page-locked.
  ///
  /// Thread-safety: like every HostPool method. The engine must not write the memory while a
  /// ferry upload from it may be in flight, nor read or write it while a download into it
  /// may be, except in the order the copies' points give.
  HostBuffer adopt(void* data, std::uint64_t size,
                   std::source_location where = std::source_location::current());
  /// @brief Bytes of pinned memory currently allocated by this pool.
  [[nodiscard]] std::uint64_t pinned_bytes() const;

  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

 private:
  friend struct detail::access;
  explicit HostPool(detail::DeviceState* device) : device_(device) {}
  detail::DeviceState* device_;
};

}  // namespace ferry
