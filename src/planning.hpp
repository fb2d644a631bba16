// SPDX-License-Identifier: MIT
// Transfer planning as pure functions: where each input of a batch lands, which device ranges
// a batch download reads, how a staged copy is cut into chunks of the staging ring, and which
// memcpys the host threads run. No device, no queue, no lock: unit-tested on the CPU
// (tests/unit/planning_test.cpp). The front end (transfer.cpp) checks arguments first, then
// plans, then enqueues what was planned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "ferry/transfer.hpp"
#include "parallel_copy.hpp"

namespace ferry::detail::planning {

/// Inputs of a batch upload start at multiples of this many bytes in its allocation: the
/// largest alignment a kernel's vector loads need on every backend.
inline constexpr std::uint64_t kBatchAlignment = 256;

/// A batch download reads a gap of up to this many bytes between two requested source
/// ranges rather than paying for another DMA (a copy's fixed cost is worth ~64 KiB of
/// bandwidth on a PCIe Gen5 link).
inline constexpr std::uint64_t kCoalesceGap = 64 << 10;

/// A piece of a staged copy's *stream* (the bytes that pass through the staging ring, in
/// order): `size` bytes at stream position `at` correspond to host memory at `host`.
struct StreamPiece {
  std::uint64_t at = 0;
  std::byte* host = nullptr;  ///< written only by downloads (uploads never write through it)
  std::uint64_t size = 0;
};

/// Where a batch upload's inputs land: input i at `offsets[i]` of one allocation of
/// `allocation` bytes. The stream of the staged copy is that layout's first `total` bytes.
struct BatchLayout {
  std::vector<std::uint64_t> offsets;  ///< one per view, kBatchAlignment-aligned
  std::vector<StreamPiece> pieces;     ///< one per non-empty view, in view order
  std::uint64_t total = 0;             ///< stream bytes: the end of the last non-empty view
  /// Bytes to allocate: at least `total`, at least every offset (an empty view's offset lies
  /// inside or at the end of the allocation), and at least 1, since the pool refuses an
  /// allocation of 0 bytes (a batch of empty views still owns a buffer).
  std::uint64_t allocation = 0;
};

/// Pack `views` at kBatchAlignment-aligned offsets, in order. A non-empty view occupies
/// [offset, offset + size); an empty view (size 0, data possibly null) takes the aligned
/// offset the next input would start at and occupies nothing: it moves no byte and adds no
/// piece to the stream. nullopt when the allocation would exceed `limit` bytes (the
/// allocator's largest request).
std::optional<BatchLayout> layout_batch(std::span<const HostView> views, std::uint64_t limit);

/// A run of the source buffer copied as one contiguous part of a download's stream.
struct Run {
  std::uint64_t stream = 0;  ///< stream position of the run's first byte
  std::uint64_t source = 0;  ///< offset in the source buffer
  std::uint64_t size = 0;
};

/// What a batch download reads and where each byte goes.
struct DownloadPlan {
  std::vector<Run> runs;            ///< by increasing source offset; disjoint; none empty
  std::vector<StreamPiece> pieces;  ///< one per non-empty view, in increasing source offset
  std::uint64_t total = 0;          ///< stream bytes (requested bytes plus coalesced gaps)
};

/// Coalesce the source ranges of `views` (in range of the source, possibly overlapping each
/// other) into runs: ranges that overlap or lie within `gap` bytes of each other share a run.
/// An empty view reads nothing: it joins no run and has no piece, so views that are all empty
/// plan no copy at all (`total` 0).
DownloadPlan coalesce_downloads(std::span<const DownloadView> views, std::uint64_t gap = kCoalesceGap);

/// Tuning of the staging geometry (see TransferOptions and docs/benchmarks.md).
struct StagingTuning {
  std::uint64_t min_chunk = 1ull << 20;  ///< smallest chunk a ring buffer is cut into
  std::uint64_t target_chunks = 32;      ///< chunks per call aimed at (pipeline fill and drain)
  std::uint64_t unit_bytes = 256ull << 10;  ///< host memcpy work per unit
};

/// How one staged copy of `total` bytes is cut into chunks of the staging ring.
struct Geometry {
  std::uint64_t chunk = 0;        ///< bytes per chunk
  std::uint64_t per_buffer = 0;   ///< chunks per ring buffer
  std::uint64_t ring_chunks = 0;  ///< chunks the ring holds at once
  std::size_t first = 0;          ///< ring buffer of chunk 0
  std::size_t buffers = 0;        ///< ring buffers
  std::uint64_t chunks = 0;       ///< chunks in this call
  /// The ring buffer of chunk k.
  [[nodiscard]] std::size_t buffer(std::uint64_t k) const {
    return (first + (k % ring_chunks) / per_buffer) % buffers;
  }
  /// The offset of chunk k in its ring buffer.
  [[nodiscard]] std::uint64_t offset(std::uint64_t k) const { return (k % ring_chunks) % per_buffer * chunk; }
  /// The ring buffer the next call starts with.
  [[nodiscard]] std::size_t next_first() const { return chunks == 0 ? first : (buffer(chunks - 1) + 1) % buffers; }
};

/// Cut ring buffers of `buffer_bytes` (`buffers` of them, the next call starting at `first`)
/// into chunks for a copy of `total` bytes: halve the chunk while it stays a whole fraction of
/// a buffer and at least tuning.min_chunk, until the call has tuning.target_chunks chunks, so
/// packing (or scattering) and DMA overlap even for a copy of a few buffers' worth.
Geometry staging_geometry(std::uint64_t total, std::uint64_t buffer_bytes, std::size_t buffers, std::size_t first,
                          const StagingTuning& tuning);

/// Plan the host memcpys of a staged copy. `ring` holds the ring buffers' base addresses;
/// `to_staging` packs (upload), else scatters (download). Every stream byte of `pieces` is
/// copied by exactly one item; items are grouped into units of about tuning.unit_bytes, at
/// most `workers` per chunk, cut at 4 KiB stream boundaries (no two threads write one cache
/// line of staging), and units are ordered by chunk.
CopyPlan plan_copies(std::span<const StreamPiece> pieces, std::uint64_t total, const Geometry& g,
                     std::span<std::byte* const> ring, std::uint64_t workers, const StagingTuning& tuning,
                     bool to_staging);

/// The derived bulk piece (TransferOptions::bulk_piece_bytes = 0): the bytes a link of
/// `bytes_per_second` moves in kPieceLatencyNs (at kAssumedCopyRate when the rate is 0),
/// rounded to the nearest power of two, clamped to [kMinPiece, kMaxPiece]. The latency bounds
/// an urgent copy's wait behind a bulk copy; the floor keeps pieces large enough for the copy
/// engine to keep its full rate (a copy's fixed cost hides behind the previous one's DMA).
inline constexpr std::uint64_t kPieceLatencyNs = 100'000;
inline constexpr std::uint64_t kAssumedCopyRate = 25'000'000'000;  ///< PCIe 4.0 x16, bytes/s
inline constexpr std::uint64_t kMinPiece = 1ull << 20;
inline constexpr std::uint64_t kMaxPiece = 64ull << 20;
/// The smallest piece a caller may ask for (TransferOptions::bulk_piece_bytes).
inline constexpr std::uint64_t kMinGivenPiece = 64ull << 10;
std::uint64_t derived_bulk_piece(std::uint64_t bytes_per_second) noexcept;

}  // namespace ferry::detail::planning
