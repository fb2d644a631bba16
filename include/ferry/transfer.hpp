// SPDX-License-Identifier: MIT
/// @file transfer.hpp
/// @brief The transfer engine: copies between host memory, device buffers and images, run on
/// one queue (the executor) for memory owned by another (the owner). The rules every copy
/// call follows -- ordering, ownership, blocking, wait and signal lists, thread-safety,
/// errors -- are stated once, in "the contract of every copy call" below the includes; each
/// call's comment adds only what is its own.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <memory>
#include <ranges>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ferry/api.hpp"
#include "ferry/device.hpp"
#include "ferry/image.hpp"
#include "ferry/pool.hpp"

/// @page transfer_contract Transfer: the contract of every copy call
/// Every member of Transfer that enqueues device work -- `upload`, `upload_into`, `download`,
/// `copy`, `copy_to`, `upload_image`, `download_image`, `copy_to_image`, `copy_from_image` --
/// and the structured calls built on them follow the rules below. A call's own comment adds
/// only what is particular to it.
///
/// ## Ordering
/// ```
/// owner queue:     [alloc d]------------------[wait T1][use d][release d]--[alloc d' reuses d]
/// executing queue:          [wait A0][copy host->d][signal T1]
/// ```
///  - The executor (`TransferOptions::executor`) runs the copy. Before it accesses a buffer
///    or image, it waits, on the device, for the work that the buffer's owner enqueued before
///    the call, for ferry's earlier accesses to it and for its `ready_after()` (`A0`: the
///    previous owner work that freed the block). A destination the call allocates (`upload`,
///    `copy_to`) is new: only its `ready_after()` is waited for. With
///    `UploadIntoOptions::destination_unused` the executor skips the owner's queued work.
///  - Every call that does not block returns a point (a `TimelinePoint`, `Upload::ready`,
///    `UploadBatch::ready`, `PeerCopy::ready`) reached once its device work is complete
///    (`T1`): the bytes are in place and the sources read.
///  - The owner's work enqueued after the call -- a release included -- is ordered after the
///    call's access to its buffer. For a destination, the calls that take `UploadOptions` or
///    `UploadIntoOptions` enqueue `owner.wait(point)` (and, on Vulkan, the queue-family
///    acquire) when `owner_waits` is set, the default; without it the caller places that wait
///    (`owner.wait(point)`, or `vulkan::engine_acquire` for the engine's own submission).
///    The other calls make a destination's owner wait themselves. ferry's own later
///    operations on a buffer (copies, downloads, `release`) are ordered after the copy either
///    way.
///  - Only device work is ordered. A pageable source (`std::span`, `HostView`) is read on the
///    host during the call, whatever the waits, into the pinned staging ring; a pinned
///    `HostBuffer` source is read by the device after the waits.
///
/// ## Ownership and lifetime
///  - An allocating call (`upload`, `copy_to`) takes its destination from the owner's pool,
///    in the owner's stream order: the returned buffer belongs to the owner queue, and its
///    release is stream-ordered there, so the owner's next allocation may reuse it.
///  - A caller-supplied destination or source (a `DeviceBuffer` from a pool or from
///    `Device::adopt_memory`, an adopted `Image`) stays the caller's: every call that takes a
///    `DeviceBuffer` takes adopted memory, under the same ordering.
///  - A pinned source is kept alive by the Transfer until its copy completes. The device
///    reads it after the call's wait points: it may be written until they are signalled, and
///    must then stay unchanged until the returned point. A pageable source may be reused when
///    the call returns.
///  - A pinned host destination is written by the device: read it after the returned point
///    (or a point of the signal list). A pageable destination is written before the call
///    returns; nothing is retained after it.
///  - Destroying a Transfer waits for its in-flight copies.
///
/// ## Blocking calls
/// Calls with pageable destinations (the pageable and batch downloads, `download_image` into
/// a span, `download_structured`) return once every byte is in host memory, and a pageable
/// upload may wait for a staging buffer to come free (a staging buffer is reused only after
/// its copy). Their wait points must be signalled by another thread or queue: a point the
/// calling thread signals only after the call returns never comes, and the call stalls until
/// its host wait times out. Every other call returns once its work is enqueued.
///
/// ## Wait and signal lists
/// Every call takes a list of points to wait on and a list of points to signal (`wait` and
/// `signal` of `UploadOptions`, `UploadIntoOptions`, `CallOptions`), in the shape of IREE HAL's
/// queue operations, so an engine can chain copies into its own timelines without a host round
/// trip: a copy ordered after a point the engine signals, a copy that signals a semaphore the
/// engine's queue then waits on.
///  - `wait`: the call's device work starts only once every point is reached, in addition to
///    the ordering above. Waits are device-side, like `Queue::wait`: they do not block the
///    host, except inside the blocking calls above. A point of the executor's own timeline is
///    already ordered and costs nothing. An empty point counts as reached, as everywhere, and
///    is skipped. A wait on a point that nobody signals stalls the executor, as with
///    `Queue::wait`: every later copy on it, `synchronize()`, the Transfer's destructor and
///    `Device::close()` wait for it. Signal or abandon such points first.
///  - `signal`: every point is signalled on the executor, in list order, after the call's last
///    device work, so a point is reached only once the copy is complete. When the call also
///    returns a point, the signals come after it. Signal points must be on semaphores from
///    `Device::create_semaphore`, never a queue's private timeline (a `Queue::mark()` point, an
///    `Upload::ready`), which only ferry signals; their values must exceed every value
///    signalled or enqueued for signal on their semaphore so far, and strictly increase within
///    the list. The device must also reach a semaphore's values in increasing order, as with
///    `Queue::signal`: signal one semaphore from one queue, or order the queues that signal it.
///  - A call that fails after enqueueing device work (a device error, out of memory while
///    staging) signals none of its points: a waiter must not take a partial copy for a
///    complete one.
///  - The lists are read during the call only. Signal values are checked when the call begins
///    and again when each signal is enqueued. A semaphore should have one signaller at a time:
///    when another thread signals it at or above a listed value during the call, the call
///    throws `invalid_argument` after its copy was enqueued (the copy completes and its source
///    is kept alive as usual); that signal and the later ones of the list are not enqueued.
///
/// ## Priorities
/// Every call has a priority class (`priority` of `UploadOptions`, `UploadIntoOptions`,
/// `CallOptions`): `Priority::bulk`, the default, or `Priority::urgent`, for a small copy that
/// the next kernel needs while a large one is in flight.
///  - Copies of one class on a Transfer keep their order, as above. An urgent copy is not
///    ordered after the Transfer's earlier bulk copies, except through its waits (a wait
///    point, or a buffer that a bulk copy accessed before it: ferry's accesses to one buffer
///    stay ordered whatever their class): it may complete first, which is its purpose.
///    Everything else -- the wait and signal lists, `owner_waits`, `destination_unused`, the
///    release point, the blocking rules -- holds for both classes.
///  - Urgent copies run on a second executor: `TransferOptions::urgent_executor`, or the
///    device's urgent transfer queue, made at the first urgent call (high priority where the
///    backend has priorities; where the device has no queue left, the bulk executor, and then
///    an urgent copy waits behind the bulk copies queued before it). They take their own lock:
///    an urgent call never waits for a bulk call in another thread to finish its staging, and
///    a staged urgent copy has a staging ring of its own, of at most 2 chunks.
///  - A copy engine serves one queue's copies back to back, whatever the queues' priorities.
///    So the bulk executor cuts its copies into pieces of at most
///    `TransferOptions::bulk_piece_bytes` and puts a yield point between pieces, where the
///    engine serves a copy ready on another queue first: an urgent copy waits for at most one
///    piece. Copies smaller than a piece are not cut, and consecutive small copies share a
///    piece; the staging ring's chunks yield the same way. An image copy is not cut: it yields
///    before it starts. Where the backend has no yield point (`Capabilities::copy_priorities`
///    false) nothing is cut, and an urgent copy may wait for the bulk copy the engine runs.
///  - Where a yield costs the engine time of its own (CUDA's is a kernel, which the engine
///    waits for between two pieces), small pieces lose bandwidth, so bulk copies are cut only
///    into a piece the caller gives (`TransferOptions::bulk_piece_bytes`): the caller picks
///    the latency it buys with that bandwidth. docs/guide.md gives the measured trade.
///  - CUDA needs no piece for an urgent upload of at most 1 MiB from page-locked memory (a
///    staged one included: the staging ring is page-locked): the urgent queue copies it with
///    the SMs, a kernel that reads the host memory over the bus, so it never waits for the
///    copy engine. Larger urgent uploads, downloads and memory without a device mapping go to
///    a copy engine. The same holds for any CUDA queue made with `Device::create_queue` at a
///    priority above 0, such as an `urgent_executor`.
///
/// ## Deferred submission
/// On Vulkan a queue submission costs the host several microseconds, more than recording a
/// small copy, so the executor may record consecutive calls and submit them together, in one
/// vkQueueSubmit2 however many waits and signals they carry. It submits:
///  - when `TransferOptions::submit_batch` calls are pending, or a call brings the pending
///    copies to `TransferOptions::submit_bytes` (a large copy starts at once, so its DMA
///    overlaps the host's next work; small ones share a submission);
///  - at `Transfer::flush()`;
///  - before any wait on a point of the executor: a host wait (`TimelinePoint::wait`,
///    `reached()`, `synchronize()`), another queue made to wait (`Queue::wait`, `owner_waits`,
///    a wait list), an engine handed the point to wait on (`vulkan::engine_acquire`). Nothing
///    ever waits on a point whose work was never submitted;
///  - when a call signals a semaphore of its signal list (an engine may wait on it where ferry
///    cannot see the wait), and before the Transfer or the device goes away.
/// The default, `submit_batch = 1`, submits every call, so a copy is under way when its call
/// returns. Batching is for an engine's many small copies with `owner_waits = false` whose
/// points it waits for later; with `owner_waits` every upload is submitted in its own call, as
/// the owner's wait requires. CUDA, HIP and the host backend start every copy when it is
/// enqueued: there the options change nothing and `flush()` is a no-op.
///
/// ## Thread-safety
/// A Transfer may be used from several threads; calls of one class are serialized internally
/// and enqueue in call order (urgent and bulk calls take separate locks: see "Priorities").
/// The caller's host memory must not be modified by other threads during a call that reads
/// it, nor touched while a call writes it. `synchronize()` waits for the copies enqueued
/// before it began, of both classes; copies other threads enqueue meanwhile keep their host
/// memory alive until they complete. Moving or destroying a Transfer must not race with a
/// call on it. Several Transfers may share one executor queue; each keeps its own staging ring.
///
/// ## Errors
/// Every call checks its arguments before it enqueues anything and throws `ferry::Error` at
/// the caller's `where`, naming the call and the offending argument (with its index in a list:
/// "view 3", "destination 1", "region 0", "wait point 2"):
///  - `invalid_argument`, in every call that takes the argument: a moved-from Transfer or a
///    closed device; a null, moved-from or released buffer, image or queue, or one of another
///    device (peer copies excepted); an empty list, or more than `max_batch_views` elements;
///    a null data pointer with a size > 0; a range outside its buffer (naming the range and
///    the size); two destination ranges that overlap; counts of two parallel lists that
///    differ; staging needed (a pageable source or destination with bytes to move) while
///    `TransferOptions::staging` is false; an option set for a call it does not apply to
///    (see `UploadIntoOptions`); a `priority` that is no `Priority` value (naming the field).
///  - `invalid_argument` for the lists: a wait or signal point on a semaphore of another
///    device; an empty signal point; a signal point on a queue's private timeline; a signal
///    value at or below the highest value signalled or enqueued for signal on its semaphore,
///    or at or below an earlier signal point of the list on the same semaphore; a wait point
///    at or above a signal point's value on the same semaphore (only a signal at or above the
///    call's own could reach it, after which that signal would not increase the timeline).
///  - `out_of_memory` from the owner's pool in an allocating call (see pool.hpp).
///  - The backend's error (`device_lost`, `timeout` of a blocking call's host wait, ...) when
///    device work fails.

namespace ferry {

namespace detail {
struct TransferState;
}

/// @brief The priority class of a copy (see "Priorities" in the contract above).
enum class Priority : std::uint8_t {
  bulk,    ///< the default: in call order on the executor, cut into pieces that yield
  urgent,  ///< on the urgent executor, never queued behind bulk pieces; not cut
};

/// @brief Lower-case name of a priority class ("bulk", "urgent").
FERRY_API std::string_view to_string(Priority priority) noexcept;

/// @brief Options of a Transfer.
struct TransferOptions {
  /// The executing queue; null = the device's transfer queue.
  Queue executor{};
  /// The queue of urgent copies (see "Priorities" above); null = the device's urgent transfer
  /// queue, made at the first urgent call. It must be a queue of the Transfer's device.
  Queue urgent_executor{};
  /// The most bytes a bulk copy moves between two yield points. 0 (the default) derives it
  /// where a yield costs the engine nothing (the host backend's model): the bytes the link
  /// moves in 100 us at `Capabilities::copy_bytes_per_second` (25 GB/s, a PCIe 4.0 x16 link,
  /// when the backend states none), rounded to the nearest power of two and clamped to
  /// [1 MiB, 64 MiB], so that an urgent copy waits about 100 us; where a yield costs engine
  /// time (CUDA), 0 cuts nothing (see "Priorities"). Otherwise at least 64 KiB.
  std::uint64_t bulk_piece_bytes = 0;
  /// Pinned staging used for pageable sources/destinations: chunk size and number of chunks
  /// in the ring. The ring is allocated on first use and bounded by chunk * chunks bytes (the
  /// staging cap): a Transfer never holds more pinned staging than that, whatever the size of
  /// a call, plus, once it stages an urgent copy, the urgent ring of min(chunks, 2) chunks
  /// (see "Priorities"). A call may cut each ring buffer into smaller chunks (a power-of-two
  /// fraction, at least 1 MiB) so that a batch of a few buffers' worth still pipelines packing
  /// and DMA.
  std::uint64_t staging_chunk_bytes = 16ull << 20;
  std::uint32_t staging_chunks = 4;
  /// false: staging disabled. The Transfer allocates no staging ring and starts no helper
  /// threads; its staging cap is 0 bytes. Every path that needs staging -- pageable uploads
  /// (`upload(span<const std::byte>)`, batch uploads of HostViews) and pageable or batch
  /// downloads -- then fails with `invalid_argument` naming the offending view, its size and
  /// the cap, before anything is enqueued. Pinned paths (HostBuffer uploads and downloads,
  /// `upload_into`, `copy`) are unaffected. Use it to guarantee that a Transfer never pins
  /// memory of its own or copies on the host.
  bool staging = true;
  /// Helper threads packing host memory into staging (persistent, started on first use).
  /// -1 = one less than the hardware threads, at most 15; 0 = pack on the calling thread.
  /// Any other negative value is refused (`invalid_argument` from the constructor).
  int staging_threads = -1;
  /// Deferred submission (see "Deferred submission" in the contract above; Vulkan): at most
  /// this many calls share one submission of the executor. 1 (the default) submits every
  /// call, so every copy starts when its call returns; an engine that records many small
  /// copies and waits for them later (owner_waits = false) raises it, 16 for one. Must be >= 1.
  std::uint32_t submit_batch = 1;
  /// Deferred submission: pending copies are submitted once they reach this many bytes (a
  /// call at least this large is submitted at once). Must be >= 1.
  std::uint64_t submit_bytes = 1ull << 20;
};

/// @brief A range of host memory (pageable or pinned) to upload as part of a batch.
/// An empty view (size 0) is valid, and its data may then be null: it reads no byte.
struct HostView {
  const void* data = nullptr;  ///< start; may be null only when `size` is 0
  std::uint64_t size = 0;      ///< bytes; 0 is an empty view
};

/// @brief Result of a batch upload: one owner-owned allocation holding every input.
/// Every input, empty ones included, has a 256-aligned offset with `offsets[i] + size_i <=
/// buffer.size()`; an empty input's view has size 0 and the address its offset gives, and
/// holds no byte. A batch whose inputs are all empty still owns a live buffer (the pool's
/// smallest allocation, since a block of 0 bytes does not exist), so that releasing it,
/// viewing it and downloading from it work as for any batch.
struct UploadBatch {
  DeviceBuffer buffer{};                 ///< the destination region (owner = the owner queue)
  std::vector<std::uint64_t> offsets{};  ///< where input i starts inside `buffer` (256-aligned)
  std::vector<DeviceView> views{};       ///< device view of input i (size 0 for an empty input)
  TimelinePoint ready{};                 ///< every copy complete once reached
};

/// @brief A destination of a batch download: `size` bytes of the source buffer starting at
/// `offset` are written to host memory at `data` (pageable or pinned).
/// An empty view (size 0) is valid at any offset up to the source's size, and its data may
/// then be null: it writes no byte.
struct DownloadView {
  std::uint64_t offset = 0;  ///< start of the range in the source buffer
  void* data = nullptr;      ///< destination; may be null only when `size` is 0
  std::uint64_t size = 0;    ///< bytes; 0 is an empty view
};

/// @brief A writable range of host memory (pageable or pinned). An empty span (size 0) is
/// valid, and its data may then be null.
struct HostSpan {
  void* data = nullptr;    ///< start; may be null only when `size` is 0
  std::uint64_t size = 0;  ///< bytes; 0 is an empty span
};

/// @brief Most views one batch upload or batch download accepts.
inline constexpr std::size_t max_batch_views = std::size_t{1} << 20;

/// @brief Options of a call that allocates its destination from the owner's pool: `upload`
/// (every overload), `upload_structured` and `copy_to`.
struct UploadOptions {
  std::string tag{};  ///< label of the destination in pool events and snapshots
  /// The pool's choice when no free block of the owner is ready yet.
  /// false (footprint first, the default): take a block the owner released but may still be
  /// reading, and make the copy wait for that owner work -- the footprint of a blocking copy,
  /// but the copy of batch i+1 cannot overlap the compute that reads batch i. true (overlap
  /// first): grow the pool instead, so the copy never waits behind owner compute -- one more
  /// batch of memory per batch in flight, and the freed blocks stay the owner's (reusable by
  /// its temporaries), unlike blocks of the executor's.
  bool overlap = false;
  /// Enqueue `owner.wait(ready)` (and any queue-family acquire) in the call. When false, place
  /// the wait yourself with `owner.wait(upload.ready)`; ferry's own later operations on the
  /// buffer (copies, downloads, release) are ordered after the copy either way.
  bool owner_waits = true;
  /// Points the copy waits for before it starts (see "Wait and signal lists" above).
  std::vector<TimelinePoint> wait{};
  /// Points signalled once the copy is complete (see "Wait and signal lists" above).
  std::vector<TimelinePoint> signal{};
  /// The copy's class (see "Priorities" above).
  Priority priority = Priority::bulk;
};

/// @brief Options of a call that writes a caller-supplied destination: `upload_into` (every
/// overload), `upload_image` and `copy_to_image`. A flag set for a call it does not apply to
/// is `invalid_argument`, naming the flag and the call.
struct UploadIntoOptions {
  /// Enqueue `owner.wait(point)` for the destination's owner (and any queue-family acquire) in
  /// the call. When false, place the wait yourself; ferry's own later operations on the
  /// destination (copies, downloads, release) are ordered after the copy either way.
  bool owner_waits = true;
  /// Points the copy waits for before it starts (see "Wait and signal lists" above).
  std::vector<TimelinePoint> wait{};
  /// Points signalled once the copy is complete (see "Wait and signal lists" above).
  std::vector<TimelinePoint> signal{};
  /// The copy's class (see "Priorities" above).
  Priority priority = Priority::bulk;
  /// Batch `upload_into` (HostViews at offsets) only: the destination bytes between two
  /// consecutive views (in destination order) that are less than `kPaddingLimit` bytes apart
  /// are padding, which the copy may overwrite with unspecified bytes. Views separated only by
  /// padding then share one staged stream: one staging pass and one DMA per chunk instead of
  /// one per view, which is what a layout aligning every view to 256 bytes (UploadBatch's,
  /// ferry.torch's) needs for many small views. Set it only when nothing else lives in such
  /// gaps: with it the call's "bytes outside the views are kept" holds only for gaps of
  /// `kPaddingLimit` bytes or more and outside the first and last view. Default false.
  bool overwrite_padding = false;
  /// `upload_into` only (a DeviceBuffer destination): the caller guarantees that no work on
  /// any queue has used the destination since it was allocated (`DevicePool::allocate`) or
  /// adopted (`Device::adopt_memory`), other than ferry's own copies. The copy then waits only
  /// for `destination.ready_after()` and ferry's earlier accesses to it, not for all of the
  /// owner's work enqueued so far, so the copy into a fresh block overlaps the compute already
  /// queued on the owner. Where the owner must first hand the range back (Vulkan exclusive
  /// buffers, after an earlier copy into part of it), that hand-back runs after the owner's
  /// queued work and the call orders as without the flag. A false guarantee lets the copy
  /// overwrite data that queued work still reads. Default false.
  bool destination_unused = false;
  /// The gap below which `overwrite_padding` treats destination bytes between views as
  /// padding: the batch alignment, so that in a 256-aligned layout no other view fits.
  static constexpr std::uint64_t kPaddingLimit = 256;
};

/// @brief Options of one download or device-to-device copy: the extra ordering of the call
/// (see "Wait and signal lists" above).
struct CallOptions {
  std::vector<TimelinePoint> wait{};    ///< points the call's device work waits for
  std::vector<TimelinePoint> signal{};  ///< points signalled once the call's work is complete
  Priority priority = Priority::bulk;   ///< the call's class (see "Priorities" above)
};

/// @brief Result of an upload: the owner-owned destination and the point it is ready at.
struct Upload {
  DeviceBuffer buffer{};  ///< the destination (owner = the owner queue)
  TimelinePoint ready{};  ///< the copy is complete once reached
};

/// @brief Result of `Transfer::copy_to`: a new buffer of the owner's device, owned by the
/// owner queue, holding a copy of the source.
struct PeerCopy {
  DeviceBuffer buffer{};              ///< from the owner device's pool, owned by the owner queue
  TimelinePoint ready{};              ///< the copy is complete once reached
  PeerPath path = PeerPath::direct;   ///< how the copy ran (`same_device` within one device)
};

/// @brief Executes copies on a queue for buffers owned by other queues. Every copy call
/// follows the contract above (`transfer_contract`).
class FERRY_API Transfer {
 public:
  /// @brief A transfer engine on `device` (executor = its transfer queue unless given).
  explicit Transfer(const Device& device, TransferOptions options = {},
                    std::source_location where = std::source_location::current());
  ~Transfer();
  Transfer(Transfer&&) noexcept;
  Transfer& operator=(Transfer&&) noexcept;
  Transfer(const Transfer&) = delete;
  Transfer& operator=(const Transfer&) = delete;

  /// @brief The executing queue.
  [[nodiscard]] Queue executor(std::source_location where = std::source_location::current()) const;
  /// @brief The queue that runs urgent copies (see "Priorities" above); made now if no urgent
  /// call made it yet. It is `executor()` where the device has no queue left to give.
  [[nodiscard]] Queue urgent_executor(std::source_location where = std::source_location::current());
  /// @brief The most bytes a bulk copy moves between two yield points (the derived or given
  /// `TransferOptions::bulk_piece_bytes`); 0 where nothing is cut: the executor has no yield
  /// point, or its yield costs engine time and no piece was given.
  [[nodiscard]] std::uint64_t bulk_piece_bytes(std::source_location where = std::source_location::current()) const;

  /// @brief Copy pinned/registered host memory to a new device buffer owned by `owner`, by
  /// DMA from the HostBuffer itself. Errors: an empty source.
  Upload upload(const HostBuffer& source, const Queue& owner, UploadOptions options = {},
                std::source_location where = std::source_location::current());
  /// @brief Copy a byte range of pinned host memory (`offset`, `bytes` within `source`) to a
  /// new device buffer owned by `owner`.
  Upload upload(const HostBuffer& source, std::uint64_t offset, std::uint64_t bytes,
                const Queue& owner, UploadOptions options = {},
                std::source_location where = std::source_location::current());
  /// @brief Copy pageable (ordinary) host memory through the pinned staging ring to a new
  /// device buffer owned by `owner`. Returns once the last chunk is enqueued.
  Upload upload(std::span<const std::byte> source, const Queue& owner, UploadOptions options = {},
                std::source_location where = std::source_location::current());
  /// @brief Upload many host ranges in one call (a KeyedJaggedTensor-like batch): one
  /// owner-owned allocation, inputs packed at 256-byte aligned offsets, gathered into pinned
  /// staging by helper threads and moved with one DMA per staging chunk. Empty views are
  /// valid (see HostView and UploadBatch): they get an offset and a view of size 0 and copy
  /// nothing; views that are all empty allocate the batch's buffer and copy nothing. Errors:
  /// a total size overflow.
  UploadBatch upload(std::span<const HostView> views, const Queue& owner, UploadOptions options = {},
                     std::source_location where = std::source_location::current());
  /// @brief Copy all of pinned `source` into the start of a caller-supplied destination; the
  /// destination's bytes past `source.size()` are kept. Errors:
  /// `source.size()` larger than `destination.size()`.
  TimelinePoint upload_into(const HostBuffer& source, const DeviceBuffer& destination,
                            UploadIntoOptions options = {},
                            std::source_location where = std::source_location::current());
  /// @brief Copy `bytes` of pinned host memory from `source_offset` of `source` to
  /// `destination_offset` of a caller-supplied destination, by DMA from the
  /// HostBuffer itself (pool, registered or adopted memory; no staging). Bytes of
  /// `destination` outside the range are kept, so several sources can fill one destination
  /// (a structure of pinned tensors into one allocation). Errors: `bytes` 0.
  TimelinePoint upload_into(const HostBuffer& source, std::uint64_t source_offset, std::uint64_t bytes,
                            const DeviceBuffer& destination, std::uint64_t destination_offset,
                            UploadIntoOptions options = {},
                            std::source_location where = std::source_location::current());
  /// @brief Upload ranges of one pinned HostBuffer into several caller-supplied destinations,
  /// each filled whole: `destinations[i].size()` bytes from
  /// `source_offsets[i]` of `source` (ranges of the source may overlap). One call does what
  /// that many range `upload_into`s would, in the spans' order (see the next overload), with
  /// one completion point. The options apply to the call; with `owner_waits` each distinct
  /// owner waits once, for the last run that filled one of its destinations. Destinations that
  /// share memory (two adoptions of one range) are the caller's error, as with two
  /// `upload_into` calls.
  TimelinePoint upload_into(const HostBuffer& source, std::span<const std::uint64_t> source_offsets,
                            std::span<const DeviceBuffer> destinations, UploadIntoOptions options = {},
                            std::source_location where = std::source_location::current());
  /// @brief Upload several pinned HostBuffers, each whole, into caller-supplied destinations:
  /// `*sources[i]` into the start of `destinations[i]`, whose bytes past it are kept. One call
  /// does what that many `upload_into(source, destination)` calls would, with one completion
  /// point. The copies run in the spans' order, each after its own destination's previous use
  /// and the copies before it, never after a later destination's: destinations that come free
  /// at different times (ranges released by different work) are filled as each comes free, as
  /// with a call each. The copies between two destinations that make the executor wait go
  /// back to back (one driver call where the backend has a batched copy: CUDA's
  /// `cudaMemcpyBatchAsync`), and each such run's destinations are handed back at its end, so a
  /// destination's later use waits only for its own run. Ordering the destinations by when they
  /// come free makes the fewest runs. The options apply to the call; with `owner_waits` each
  /// distinct owner waits once, for the last run that filled one of its destinations. The
  /// call keeps every source alive until its copy
  /// completes. Destinations that share memory (two adoptions of one range) are the caller's
  /// error, as with two calls. Errors: spans of different lengths, empty or longer than
  /// `max_batch_views`; a null source; a source larger than its destination.
  TimelinePoint upload_into(std::span<const HostBuffer* const> sources, std::span<const DeviceBuffer> destinations,
                            UploadIntoOptions options = {},
                            std::source_location where = std::source_location::current());
  /// @brief Batch upload into a caller-supplied destination: view i is
  /// copied to `offsets[i]` of `destination` (a pool buffer or adopted memory), through the
  /// pinned staging ring, with one DMA per chunk of each run of views whose destination
  /// ranges are contiguous (or separated by padding only, with
  /// `UploadIntoOptions::overwrite_padding`). Bytes of `destination` outside the views' ranges
  /// are kept (padding excepted, with that option). Errors: an empty view.
  TimelinePoint upload_into(std::span<const HostView> views, const DeviceBuffer& destination,
                            std::span<const std::uint64_t> offsets, UploadIntoOptions options = {},
                            std::source_location where = std::source_location::current());
  /// @brief Copy all of a device buffer into pinned/registered host memory at `offset`.
  TimelinePoint download(const DeviceBuffer& source, const HostBuffer& destination,
                         std::uint64_t offset = 0, CallOptions options = {},
                         std::source_location where = std::source_location::current());
  /// @brief Download several device buffers, each whole, into one pinned/registered
  /// HostBuffer: `sources[i]` goes to `offsets[i]` of `destination`. One call does what that
  /// many single `download`s would, with one completion point and the copies back to back
  /// (one driver call where the backend has a batched copy: CUDA's `cudaMemcpyBatchAsync`).
  /// For many buffers (a model's state) this costs the host far less than one call per
  /// buffer.
  TimelinePoint download(std::span<const DeviceBuffer> sources, const HostBuffer& destination,
                         std::span<const std::uint64_t> offsets, CallOptions options = {},
                         std::source_location where = std::source_location::current());
  /// @brief Copy a device buffer into pageable memory through the staging ring (blocking).
  void download(const DeviceBuffer& source, std::span<std::byte> destination, CallOptions options = {},
                std::source_location where = std::source_location::current());
  /// @brief Batch download, the mirror of the batch upload: for every view, `size` bytes of
  /// `source` at `offset` are copied to `data`. The source ranges are coalesced (sorted by
  /// offset, nearby ranges merged) and moved through the pinned staging ring with one DMA per
  /// chunk and run; helper threads scatter each chunk into the destinations as soon as its DMA
  /// completes (blocking). Source ranges may overlap each other (the same bytes downloaded
  /// twice); non-empty destinations may not. Empty views are valid (see DownloadView): they
  /// read and write nothing. When every view is empty the call enqueues no copy and returns
  /// once the arguments are checked; the executor still waits for `options.wait` before it
  /// signals `options.signal`.
  void download(const DeviceBuffer& source, std::span<const DownloadView> views,
                CallOptions options = {}, std::source_location where = std::source_location::current());
  /// @brief Download a batch upload's inputs back into `destinations` (destination i receives
  /// input i, `batch.offsets[i]`; its size must equal input i's size, 0 for an empty input).
  /// Otherwise as the DownloadView overload. Errors: a size that differs from its input's.
  void download(const UploadBatch& batch, std::span<const HostSpan> destinations, CallOptions options = {},
                std::source_location where = std::source_location::current());
  /// @brief Device-to-device copy of `bytes` (0 = all of `source`) on the executor. The
  /// destination's owner is made to wait for the copy (GPU-side, as with
  /// `UploadOptions::owner_waits`).
  ///
  /// **Peer copies.** The source and the destination may be buffers of two devices A and B
  /// (of one backend, opened in this process), one of which is the Transfer's device: the
  /// copy then runs on the executor, on a copy engine, by the path `peer_path(other)` names
  /// (CUDA/HIP: `cudaMemcpyPeerAsync`, with peer access enabled where the topology allows,
  /// else staged by the driver through host memory; host devices: a memory copy).
  ///  - Ordering as in the contract, across the two devices: cross-device waits are
  ///    semaphores of one device waited on by a queue of the other (CUDA: events, valid across
  ///    devices of one process; host: plain host objects).
  ///  - `options.wait` may name points of either device; `options.signal` only semaphores of
  ///    the Transfer's device (a queue signals its own device's semaphores).
  ///  - Memory and budgets: nothing is allocated; each buffer stays in its own pool.
  ///  - Lifetime: both devices stay open for the call. Closing either later is safe: a device
  ///    that closes hands the semaphores a peer's queue may still wait on to that peer, which
  ///    destroys them when it closes.
  /// Errors: `invalid_argument` when neither buffer is
  /// on the Transfer's device, a buffer's device is closed, or a wait point is of a third
  /// device; `unsupported`, naming the reason, when the backend has no peer copies (Vulkan,
  /// interop pairs, null), for devices of different backends, or where the driver refuses.
  TimelinePoint copy(const DeviceBuffer& source, const DeviceBuffer& destination,
                     std::uint64_t bytes = 0, CallOptions options = {},
                     std::source_location where = std::source_location::current());
  /// @brief Copy all of `source` into a new buffer from the pool of `owner`'s device, owned by
  /// `owner`: a peer copy when `owner` is a queue of another device than the source's (one of
  /// the two is the Transfer's device), else a plain device-to-device copy.
  ///  - The destination is allocated in the owner device's pool exactly as an upload's
  ///    (`UploadOptions::overlap` chooses between waiting for a block the owner released and
  ///    growing the pool); it counts in that pool's budget only. `options.tag` labels it.
  ///  - Returns the buffer, its ready point and the path the copy took.
  /// Errors: those of `copy`.
  PeerCopy copy_to(const DeviceBuffer& source, const Queue& owner, UploadOptions options = {},
                   std::source_location where = std::source_location::current());
  /// @brief How this Transfer's copies to or from buffers of `other` run: `same_device` for
  /// its own device, else the peer path (`direct` or `staged`). May enable what the path needs
  /// (CUDA: peer access from this device to `other`), once per pair of devices.
  /// Errors: `invalid_argument` for a null or closed device; `unsupported`, with the reason,
  /// when no copy between the two devices is possible (see `copy`).
  [[nodiscard]] PeerPath peer_path(const Device& other,
                                   std::source_location where = std::source_location::current()) const;
  /// @name Images (image.hpp)
  /// Copies between linear memory and an adopted image, in regions (`ImageRegion`), on the
  /// executor, under the contract (an image is ordered like a buffer: image.hpp). What the
  /// six calls add:
  ///  - Vulkan: the copy carries the layout transitions and queue-family ownership transfers
  ///    of image.hpp; the image is in its final layout, the owner's, after the point.
  ///  - Regions: every region is checked (see `ImageRegion`) before anything is enqueued;
  ///    regions that write the image must not overlap. Errors name the region's index: a
  ///    region's rule broken, a region's footprint outside the buffer, a block row larger than
  ///    one staging chunk (pageable paths).
  /// @{

  /// @brief Upload pinned host memory into `destination`'s regions, by DMA from the
  /// HostBuffer itself (no staging; its row pitch as given).
  TimelinePoint upload_image(const HostBuffer& source, const Image& destination, std::span<const ImageRegion> regions,
                             UploadIntoOptions options = {},
                             std::source_location where = std::source_location::current());
  /// @brief Upload pageable host memory into `destination`'s regions through the staging ring:
  /// each region's rows are read at their pitch and packed tightly into staging, whole rows of
  /// blocks per chunk.
  TimelinePoint upload_image(std::span<const std::byte> source, const Image& destination,
                             std::span<const ImageRegion> regions, UploadIntoOptions options = {},
                             std::source_location where = std::source_location::current());
  /// @brief Copy `source`'s regions into pinned host memory at each region's buffer offset
  /// and pitch (bytes between rows are kept).
  TimelinePoint download_image(const Image& source, const HostBuffer& destination, std::span<const ImageRegion> regions,
                               CallOptions options = {}, std::source_location where = std::source_location::current());
  /// @brief Copy `source`'s regions into pageable memory through the staging ring, at each
  /// region's offset and pitch (bytes between rows are kept; blocking).
  void download_image(const Image& source, std::span<std::byte> destination, std::span<const ImageRegion> regions,
                      CallOptions options = {}, std::source_location where = std::source_location::current());
  /// @brief Device-to-device copy from a DeviceBuffer (a pool block or adopted memory) into
  /// `destination`'s regions.
  TimelinePoint copy_to_image(const DeviceBuffer& source, const Image& destination, std::span<const ImageRegion> regions,
                              UploadIntoOptions options = {},
                              std::source_location where = std::source_location::current());
  /// @brief Device-to-device copy of `source`'s regions into a DeviceBuffer; the buffer's
  /// bytes outside the regions' rows are kept, and its owner waits for the copy.
  TimelinePoint copy_from_image(const Image& source, const DeviceBuffer& destination,
                                std::span<const ImageRegion> regions, CallOptions options = {},
                                std::source_location where = std::source_location::current());
  /// @}

  /// @brief Host wait for every copy this Transfer had enqueued when the call began; throws
  /// `timeout` after `timeout`. Copies other threads enqueue during the wait are not waited
  /// for, and the host memory they use stays alive until they complete.
  void synchronize(std::chrono::nanoseconds timeout = std::chrono::seconds(60),
                   std::source_location where = std::source_location::current());
  /// @brief Submit the copies recorded and not submitted yet (see "Deferred submission"
  /// above), so that they start; does not wait. It submits other threads' pending calls too.
  /// Errors: `invalid_argument` for a moved-from Transfer or a closed device; the backend's
  /// error when the submission fails.
  void flush(std::source_location where = std::source_location::current());

 private:
  std::unique_ptr<detail::TransferState> state_;
};

/// @name Structured transfers
/// A structure of host buffers (a KeyedJaggedTensor-like batch: per feature its values,
/// lengths and weights, a dense tensor, labels) moves in one batch upload and comes back in
/// one batch download. Its type T describes its buffers -- its *leaves* -- once, in one
/// function found by argument-dependent lookup, which serves both directions:
///
/// ```
/// template <ferry::maybe_const<Batch> B, class Leaf>   // B is Batch or const Batch
/// DeviceBatch ferry_leaves(B& batch, Leaf&& leaf) {
///   DeviceBatch d;
///   for (auto& f : batch.features) d.features.push_back({leaf(f.values), leaf(f.lengths)});
///   d.dense = leaf(batch.dense);
///   return d;                                          // the device-side shape
/// }
/// ```
///
/// Rules of `ferry_leaves(value, leaf)`:
///  - It calls `leaf(x)` once per leaf, in an order that depends only on the value's shape
///    (the sizes of its containers), never on anything else: the upload calls it twice and
///    matches the calls by position, and the download matches them against the upload's.
///    Sequence the calls: in statements, or in a braced initializer list (evaluated left to
///    right), never as several arguments of one function call (an unspecified order).
///  - A leaf `x` is a HostView (read-only: upload only), a HostSpan, or a contiguous sized
///    range of trivially copyable elements (`std::vector`, `std::array`, `std::span`, a
///    built-in array) passed as an lvalue or as a view (a temporary `std::span`), so that its
///    memory outlives the call. A leaf may be empty (size 0, data possibly null).
///  - `leaf(x)` returns the leaf's DeviceView in the batch (size 0 for an empty leaf); the
///    function's return value is the device-side shape (any non-void type). During the
///    upload's first call and during a download the views are placeholders, and the return
///    value is discarded.
///  - For the upload ferry calls it with `const T&`, which hands it read-only leaves; for the
///    download with `T&`, which hands it writable leaves: a leaf that is read-only there (a
///    HostView, a range of const elements) is a compile error, never a cast.
///  - It may throw; the exception then leaves the structured call, and a batch already
///    uploaded is released (stream-ordered) with it.
/// @{

/// @brief `S` is `T` or `const T`: constrains a `ferry_leaves` template to one structure, so
/// that argument-dependent lookup does not offer it for other types of its namespace.
template <class S, class T>
concept maybe_const = std::same_as<std::remove_const_t<S>, T>;

namespace detail {

template <class>
inline constexpr bool dependent_false = false;

/// A leaf given as a range: contiguous, sized, of trivially copyable elements, and naming
/// memory that outlives the call (an lvalue, or a borrowed range such as std::span).
template <class L>
concept range_leaf = std::ranges::contiguous_range<L> && std::ranges::sized_range<L> &&
                     std::is_trivially_copyable_v<std::ranges::range_value_t<L>> &&
                     (std::is_lvalue_reference_v<L> || std::ranges::borrowed_range<L>);

/// Compile-time check of a leaf's kind, with the rule it breaks as the message.
template <class L>
constexpr void check_leaf() {
  using B = std::remove_cvref_t<L>;
  static_assert(std::is_same_v<B, HostView> || std::is_same_v<B, HostSpan> || range_leaf<L>,
                "a ferry leaf is a HostView, a HostSpan, or a contiguous sized range of trivially copyable "
                "elements (std::vector, std::array, std::span) whose memory outlives the call");
}

/// The `leaf` of upload_structured. The first pass collects the host views; after the upload,
/// the second pass returns the batch's device views in the same order.
class UploadLeaves {
 public:
  template <class L>
  DeviceView operator()(L&& leaf) {
    check_leaf<L>();
    using B = std::remove_cvref_t<L>;
    HostView v{};
    if constexpr (std::is_same_v<B, HostView> || std::is_same_v<B, HostSpan>) {
      v = {leaf.data, leaf.size};
    } else if constexpr (range_leaf<L>) {
      v = {std::ranges::data(leaf), std::ranges::size(leaf) * sizeof(std::ranges::range_value_t<L>)};
    }
    if (batch_ == nullptr) {
      views_.push_back(v);
      return {};
    }
    const std::size_t i = next_++;
    if (i >= batch_->views.size() || v.size != views_[i].size) {
      mismatch_ = true;
      return {};
    }
    return batch_->views[i];
  }

  [[nodiscard]] const std::vector<HostView>& views() const noexcept { return views_; }
  /// Start the second pass over `batch`, the upload of views().
  void assign(const UploadBatch& batch) noexcept { batch_ = &batch; }
  /// Whether the second pass visited the leaves of the first one.
  [[nodiscard]] bool matched() const noexcept { return !mismatch_ && next_ == views_.size(); }

 private:
  std::vector<HostView> views_{};
  const UploadBatch* batch_ = nullptr;
  std::size_t next_ = 0;
  bool mismatch_ = false;
};

/// The `leaf` of download_structured: collects writable host spans and returns the batch's
/// device view of the same position (a placeholder past the batch's end).
class DownloadLeaves {
 public:
  explicit DownloadLeaves(const UploadBatch& batch) noexcept : batch_(&batch) {}

  template <class L>
  DeviceView operator()(L&& leaf) {
    check_leaf<L>();
    using B = std::remove_cvref_t<L>;
    if constexpr (std::is_same_v<B, HostView>) {
      static_assert(dependent_false<L>,
                    "download_structured writes into its leaves: a HostView is read-only, describe writable "
                    "memory with a HostSpan");
    } else if constexpr (std::is_same_v<B, HostSpan>) {
      spans_.push_back({leaf.data, leaf.size});
    } else if constexpr (range_leaf<L>) {
      if constexpr (std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<L>>>) {
        static_assert(dependent_false<L>,
                      "download_structured writes into its leaves: a range of const elements is read-only");
      } else {
        spans_.push_back({std::ranges::data(leaf), std::ranges::size(leaf) * sizeof(std::ranges::range_value_t<L>)});
      }
    }
    const std::size_t i = spans_.size() - 1;
    return i < batch_->views.size() ? batch_->views[i] : DeviceView{};
  }

  [[nodiscard]] const std::vector<HostSpan>& spans() const noexcept { return spans_; }

 private:
  const UploadBatch* batch_;
  std::vector<HostSpan> spans_{};
};

/// Run `fn`, naming `function` (the structured call the caller made) in front of the message
/// of any ferry::Error it throws; the code, vendor call and caller's location stay.
template <class Fn>
decltype(auto) structured_call(const char* function, Fn&& fn) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const Error& e) {
    throw Error(e.code(), std::string(function) + ": " + e.message(), e.call(), e.where());
  }
}

}  // namespace detail

/// @brief T uploads with upload_structured: `ferry_leaves(const T&, leaf)` (see above) is found
/// by argument-dependent lookup and returns the device-side shape.
template <class T>
concept Uploadable = requires(const T& value, detail::UploadLeaves& leaf) {
  ferry_leaves(value, leaf);
  requires !std::is_void_v<decltype(ferry_leaves(value, leaf))>;
};

/// @brief T downloads with download_structured: `ferry_leaves(T&, leaf)` (see above) is found by
/// argument-dependent lookup for a non-const T.
template <class T>
concept Downloadable = !std::is_const_v<T> && requires(T& value, detail::DownloadLeaves& leaf) {
  ferry_leaves(value, leaf);
};

/// @brief Upload a structured value (see Uploadable) in one batch upload: leaf i of the
/// structure, in `ferry_leaves` order, is input i of the batch.
///  - Returns the batch (which owns the device memory: keep it alive while the shape is used)
///    and the device-side shape `ferry_leaves` built from the batch's views.
///  - Empty leaves are valid (an offset and a view of size 0, no byte copied), and so is a
///    structure whose leaves are all empty (see UploadBatch). A structure with no leaf at all
///    is `invalid_argument`.
///  - It is a batch upload (`Transfer::upload(std::span<const HostView>, ...)`) under the
///    contract of every copy call; `options` applies to the batch. `ferry_leaves(value, ...)`
///    runs twice on the calling thread.
/// Errors: any error of the batch upload, its message prefixed with `ferry::upload_structured`
/// (its "view i" is leaf i); `invalid_argument` when the two passes of `ferry_leaves` visit
/// different leaves (then the batch is released).
template <Uploadable T>
auto upload_structured(Transfer& transfer, const T& value, const Queue& owner, UploadOptions options = {},
                       std::source_location where = std::source_location::current()) {
  constexpr const char* fn = "ferry::upload_structured";
  detail::UploadLeaves leaves;
  (void)ferry_leaves(value, leaves);
  UploadBatch batch = detail::structured_call(fn, [&] {
    return transfer.upload(std::span<const HostView>(leaves.views()), owner, std::move(options), where);
  });
  leaves.assign(batch);
  auto shape = ferry_leaves(value, leaves);
  if (!leaves.matched()) {
    throw Error(ErrorCode::invalid_argument,
                std::string(fn) + ": ferry_leaves visited " + std::to_string(leaves.views().size()) +
                    " leaves, then different ones on the same value: its leaves must depend only on the shape",
                {}, where);
  }
  return std::pair<UploadBatch, decltype(shape)>{std::move(batch), std::move(shape)};
}

/// @brief Download a batch back into a host structure of the same shape, the mirror of
/// upload_structured: input i of `batch` (`batch.offsets[i]` of `batch.buffer`) is written
/// to leaf i of `value`, in `ferry_leaves` order.
///  - `value` must already have the batch's shape: as many leaves, each of the size of its
///    input (containers are not resized). Empty leaves read and write nothing.
///  - It is a batch download (`Transfer::download(const UploadBatch&, ...)`, blocking) under
///    the contract of every copy call; `options` adds waits and signals as there.
///    `ferry_leaves(value, ...)` runs once on the calling thread.
/// Errors (`invalid_argument`, nothing is read): a count of leaves other than the batch's
/// inputs, a leaf whose size differs from its input's (both named), then any error of the
/// batch download (`Transfer::download(const UploadBatch&, ...)`), its message prefixed with
/// `ferry::download_structured` (its "destination i" is leaf i).
template <Downloadable T>
void download_structured(Transfer& transfer, const UploadBatch& batch, T& value, CallOptions options = {},
                         std::source_location where = std::source_location::current()) {
  constexpr const char* fn = "ferry::download_structured";
  detail::DownloadLeaves leaves(batch);
  (void)ferry_leaves(value, leaves);
  const std::vector<HostSpan>& spans = leaves.spans();
  if (spans.size() != batch.views.size()) {
    throw Error(ErrorCode::invalid_argument,
                std::string(fn) + ": the value has " + std::to_string(spans.size()) + " leaves, the batch " +
                    std::to_string(batch.views.size()) + " inputs",
                {}, where);
  }
  for (std::size_t i = 0; i < spans.size(); ++i) {
    if (spans[i].size != batch.views[i].size) {
      throw Error(ErrorCode::invalid_argument,
                  std::string(fn) + ": leaf " + std::to_string(i) + " has " + std::to_string(spans[i].size) +
                      " bytes, input " + std::to_string(i) + " of the batch has " +
                      std::to_string(batch.views[i].size),
                  {}, where);
    }
  }
  detail::structured_call(fn, [&] { transfer.download(batch, std::span<const HostSpan>(spans), std::move(options), where); });
}

/// @}

}  // namespace ferry
