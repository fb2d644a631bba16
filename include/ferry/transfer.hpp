// SPDX-License-Identifier: MIT
/// @file transfer.hpp
/// @brief The transfer engine: copies executed on one queue into memory owned by another.
///
/// ## Ordering
/// ```
/// owner queue:     [alloc d]------------------[wait T1][use d][release d]--[alloc d' reuses d]
/// executing queue:          [wait A0][copy host->d][signal T1]
/// ```
///  - `d` comes from the owner's pool, in the owner's stream order.
///  - The executing queue writes `d` only after `A0` (`d.ready_after()`: the previous owner
///    work that freed the block has completed).
///  - The owner uses `d` only after `T1` (`Upload::ready`). By default the upload call itself
///    enqueues that wait on the owner (`UploadOptions::owner_waits`), so owner work enqueued
///    after the call is ordered; turn it off to place the wait yourself.
///  - Releasing `d` is stream-ordered on the owner: the next owner allocation may reuse it.
///
/// ## Copy modes
///  - `owner_owned` (default): the above. Footprint of a blocking copy, DMA engine bandwidth.
///  - `blocking`: copy enqueued on the owner queue, host waits for it. The reference footprint.
///  - `executor_owned`: the destination belongs to the executing queue's pool and its release
///    is deferred until the owner's use completes (PyTorch `non_blocking` + `record_stream`).
///    Kept to reproduce the problem; its released blocks are stranded for the owner.
///  - `preallocated`: the caller supplies the destination (`upload_into`).
///
/// Adopted memory (`Device::adopt_memory`) is a DeviceBuffer like a pool buffer: every entry
/// point that takes a DeviceBuffer (`upload_into`, the downloads, `copy`,
/// `run_synthetic_compute`) takes it, under the same ordering. The entry points that allocate
/// (`upload`) always allocate from the pool.
///
/// Lifetime: source host memory is kept alive by the transfer until the copy completes.
/// Destroying a Transfer waits for its in-flight copies.
///
/// Thread-safety: a Transfer may be used from several threads; calls are serialized
/// internally and enqueue in call order. `synchronize()` waits for the copies enqueued before
/// it began; copies other threads enqueue meanwhile keep their host memory alive until they
/// complete. Moving or destroying a Transfer must not race with a call on it. Several
/// Transfers may share one executor queue; each keeps its own staging ring.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>
#include <source_location>
#include <span>
#include <string>

#include "ferry/device.hpp"
#include "ferry/pool.hpp"

namespace ferry {

namespace detail {
struct TransferState;
}

/// @brief The four copy strategies (see the file comment).
enum class CopyMode : std::uint8_t { blocking, executor_owned, preallocated, owner_owned };

/// @brief Lower-case name of a copy mode.
std::string_view to_string(CopyMode mode) noexcept;

/// @brief Options of a Transfer.
struct TransferOptions {
  /// The executing queue; null = the device's transfer queue.
  Queue executor{};
  /// Pinned staging used for pageable sources/destinations: chunk size and number of chunks
  /// in the ring. The ring is allocated on first use and bounded by chunk * chunks bytes (the
  /// staging cap): a Transfer never holds more pinned staging than that, whatever the size of
  /// a call. A call may cut each ring buffer into smaller chunks (a power-of-two fraction, at
  /// least 1 MiB) so that a batch of a few buffers' worth still pipelines packing and DMA.
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
};

/// @brief A range of host memory (pageable or pinned) to upload as part of a batch.
struct HostView {
  const void* data = nullptr;  ///< start; must not be null
  std::uint64_t size = 0;      ///< bytes; must be > 0
};

/// @brief Result of a batch upload: one owner-owned allocation holding every input.
struct UploadBatch {
  DeviceBuffer buffer{};                 ///< the destination region (owner = the owner queue)
  std::vector<std::uint64_t> offsets{};  ///< where input i starts inside `buffer` (256-aligned)
  std::vector<DeviceView> views{};       ///< device view of input i
  TimelinePoint ready{};                 ///< every copy complete once reached
};

/// @brief A destination of a batch download: `size` bytes of the source buffer starting at
/// `offset` are written to host memory at `data` (pageable or pinned).
struct DownloadView {
  std::uint64_t offset = 0;  ///< start of the range in the source buffer
  void* data = nullptr;      ///< destination; must not be null
  std::uint64_t size = 0;    ///< bytes; must be > 0
};

/// @brief A writable range of host memory (pageable or pinned).
struct HostSpan {
  void* data = nullptr;    ///< start; must not be null
  std::uint64_t size = 0;  ///< bytes; must be > 0
};

/// @brief Most views one batch upload or batch download accepts.
inline constexpr std::size_t max_batch_views = std::size_t{1} << 20;

/// @brief Options of one upload.
struct UploadOptions {
  CopyMode mode = CopyMode::owner_owned;  ///< strategy; `preallocated` only via upload_into
  std::string tag{};                      ///< label for pool events
  /// owner_owned only: the pool's choice when no free block of the owner is ready yet.
  /// false (footprint first, the default): take a block the owner released but may still be
  /// reading, and make the copy wait for that owner work -- the footprint of a blocking copy,
  /// but the copy of batch i+1 cannot overlap the compute that reads batch i. true (overlap
  /// first): grow the pool instead, so the copy never waits behind owner compute -- one more
  /// batch of memory per batch in flight, and the freed blocks stay the owner's (reusable by
  /// its temporaries), unlike executor_owned.
  bool overlap = false;
  /// Enqueue `owner.wait(ready)` (and any queue-family acquire) in the call. When false, place
  /// the wait yourself with `owner.wait(upload.ready)`; ferry's own later operations on the
  /// buffer (run_synthetic_compute, downloads, release) are ordered after the copy either way.
  bool owner_waits = true;
};

/// @brief Result of an upload: the owner-owned destination and the point it is ready at.
struct Upload {
  DeviceBuffer buffer{};  ///< the destination (owner = the owner queue; executor in executor_owned)
  TimelinePoint ready{};  ///< the copy is complete once reached
};

/// @brief Executes copies on a queue for buffers owned by other queues.
class Transfer {
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

  /// @brief Copy pinned/registered host memory to a new device buffer owned by `owner`.
  /// Returns at once (except in `blocking` mode). Errors: empty source, queue of another
  /// device, `mode == preallocated` (use `upload_into`): `invalid_argument`.
  Upload upload(const HostBuffer& source, const Queue& owner, UploadOptions options = {},
                std::source_location where = std::source_location::current());
  /// @brief Copy a byte range of pinned host memory (`offset`, `bytes` within `source`).
  Upload upload(const HostBuffer& source, std::uint64_t offset, std::uint64_t bytes,
                const Queue& owner, UploadOptions options = {},
                std::source_location where = std::source_location::current());
  /// @brief Copy pageable (ordinary) host memory through the pinned staging ring. Returns once
  /// the last chunk is enqueued; `source` may be reused when the call returns.
  Upload upload(std::span<const std::byte> source, const Queue& owner, UploadOptions options = {},
                std::source_location where = std::source_location::current());
  /// @brief Upload many host ranges in one call (a KeyedJaggedTensor-like batch): one
  /// owner-owned allocation, inputs packed at 256-byte aligned offsets, gathered into pinned
  /// staging by helper threads and moved with one DMA per staging chunk. Sources may be
  /// reused when the call returns. Errors: empty span, more than `max_batch_views` views, a
  /// null or empty view, a total size overflow: `invalid_argument`. Modes: owner_owned or
  /// blocking.
  UploadBatch upload(std::span<const HostView> views, const Queue& owner, UploadOptions options = {},
                     std::source_location where = std::source_location::current());
  /// @brief Copy into a caller-supplied destination (`preallocated`). The executor waits for
  /// the destination owner's work enqueued so far; the owner waits for the copy when
  /// `owner_waits`. `source.size()` must be <= `destination.size()`.
  TimelinePoint upload_into(const HostBuffer& source, const DeviceBuffer& destination,
                            UploadOptions options = {},
                            std::source_location where = std::source_location::current());
  /// @brief Batch upload into a caller-supplied destination (`preallocated`): view i is
  /// copied to `offsets[i]` of `destination` (a pool buffer or adopted memory), through the
  /// pinned staging ring, with one DMA per chunk of each run of views whose destination
  /// ranges are contiguous. Bytes of `destination` outside the views' ranges are kept. Sources
  /// may be reused when the call returns. Ordering as `upload_into`: the executor waits for
  /// the destination owner's work enqueued so far; the owner waits for the copy when
  /// `owner_waits`. Returns the point at which every view is copied.
  /// Errors (`invalid_argument`, naming the view index; nothing is enqueued): an empty span,
  /// more than `max_batch_views` views, counts of views and offsets that differ, a null or
  /// empty view, a range outside the destination, two destination ranges that overlap,
  /// staging disabled, a mode other than `owner_owned`/`preallocated` (both mean this).
  TimelinePoint upload_into(std::span<const HostView> views, const DeviceBuffer& destination,
                            std::span<const std::uint64_t> offsets, UploadOptions options = {},
                            std::source_location where = std::source_location::current());
  /// @brief Copy a device buffer into pinned/registered host memory at `offset`. The executor
  /// waits for the source owner's work enqueued so far; the owner's later work (including a
  /// release) is ordered after the read. Host: wait on the returned point before reading.
  TimelinePoint download(const DeviceBuffer& source, const HostBuffer& destination,
                         std::uint64_t offset = 0,
                         std::source_location where = std::source_location::current());
  /// @brief Copy a device buffer into pageable memory; blocks until the data is there.
  /// Goes through the staging ring (`invalid_argument` when staging is disabled).
  void download(const DeviceBuffer& source, std::span<std::byte> destination,
                std::source_location where = std::source_location::current());
  /// @brief Batch download, the mirror of the batch upload: for every view, `size` bytes of
  /// `source` at `offset` are copied to `data`. The source ranges are coalesced (sorted by
  /// offset, nearby ranges merged) and moved through the pinned staging ring with one DMA per
  /// chunk and run; helper threads scatter each chunk into the destinations as soon as its DMA
  /// completes.
  ///  - Blocking: returns once every byte is in host memory; the destinations may then be read.
  ///  - Ordering: the copy follows the source owner's work enqueued before the call (e.g. a
  ///    `run_synthetic_compute` that wrote it); the owner's later work (including a release)
  ///    is ordered after the read.
  ///  - Ownership: the caller owns the destinations and must keep them alive and untouched by
  ///    other threads during the call; nothing is retained after it returns. Source ranges may
  ///    overlap each other (the same bytes downloaded twice); destinations may not.
  ///  - Thread-safety: like every Transfer call, serialized with the Transfer's other calls.
  /// Errors (`invalid_argument`, naming the view index; nothing is enqueued): an empty span,
  /// more than `max_batch_views` views, a null destination, a zero size, a range outside the
  /// source buffer, two destination ranges that overlap, staging disabled.
  void download(const DeviceBuffer& source, std::span<const DownloadView> views,
                std::source_location where = std::source_location::current());
  /// @brief Download a batch upload's inputs back into `destinations` (destination i receives
  /// input i, `batch.offsets[i]`; its size must equal input i's size). Same contract as the
  /// DownloadView overload, plus `invalid_argument` when the counts or a size differ.
  void download(const UploadBatch& batch, std::span<const HostSpan> destinations,
                std::source_location where = std::source_location::current());
  /// @brief Device-to-device copy of `bytes` (0 = all of `source`) on the executor; both
  /// owners are ordered around it like `download`.
  TimelinePoint copy(const DeviceBuffer& source, const DeviceBuffer& destination,
                     std::uint64_t bytes = 0,
                     std::source_location where = std::source_location::current());
  /// @brief Host wait for every copy this Transfer had enqueued when the call began; throws
  /// `timeout` after `timeout`. Copies other threads enqueue during the wait are not waited
  /// for, and the host memory they use stays alive until they complete.
  void synchronize(std::chrono::nanoseconds timeout = std::chrono::seconds(60),
                   std::source_location where = std::source_location::current());

 private:
  std::unique_ptr<detail::TransferState> state_;
};

/// @brief Structured inputs: a type T uploads with one call when two functions are found
/// by argument-dependent lookup:
///  - `std::vector<HostView> ferry_host_views(const T&)` lists its buffers, and
///  - `ferry_device_shape(const T&, const UploadBatch&)` returns the same shape holding
///    `DeviceView`s (view i of the batch is input i of the list).
template <class T>
concept Uploadable = requires(const T& value, const UploadBatch& batch) {
  { ferry_host_views(value) } -> std::convertible_to<std::vector<HostView>>;
  ferry_device_shape(value, batch);
};

/// @brief Upload a structured value (see Uploadable). Returns the batch (which owns the device
/// memory: keep it alive while the shape is used) and the device-side shape.
template <Uploadable T>
auto upload_structured(Transfer& transfer, const T& value, const Queue& owner, UploadOptions options = {},
                       std::source_location where = std::source_location::current()) {
  const std::vector<HostView> views = ferry_host_views(value);
  UploadBatch batch = transfer.upload(std::span<const HostView>(views), owner, std::move(options), where);
  auto shape = ferry_device_shape(value, batch);
  return std::pair<UploadBatch, decltype(shape)>{std::move(batch), std::move(shape)};
}

/// @brief A synthetic compute step standing in for a model's work (benchmarks, tests):
/// enqueued on `queue`, it reads `input` and writes `output[i] = input[i] + 1` (bytes,
/// wrapping), making `units` passes over the data. Both buffers must be live buffers of the
/// queue's device with the same size. A buffer owned by another queue (an executor_owned
/// upload) is recorded as used by `queue`: its release then waits for `queue` (PyTorch's
/// `record_stream`). `unsupported` where the backend has no kernel for it.
void run_synthetic_compute(const Queue& queue, const DeviceBuffer& input,
                           const DeviceBuffer& output, std::uint32_t units = 1,
                           std::source_location where = std::source_location::current());

}  // namespace ferry
