// SPDX-License-Identifier: MIT
// The state of a Transfer: its executor, the host memory it keeps alive, and the pinned
// staging ring through which pageable and scattered copies are pipelined. Not installed.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <source_location>
#include <vector>

#include "device_state.hpp"
#include "ferry/transfer.hpp"
#include "parallel_copy.hpp"
#include "planning.hpp"
#include "small_vector.hpp"

namespace ferry::detail {

/// What the two lanes of a Transfer (bulk and urgent: "Priorities" in transfer.hpp) share: a
/// lock over the ordering state of the buffers and images the calls access (BlockState's
/// last access, holder and owed acquire; an image's), held by a call from lock() to its end,
/// except while it waits for its staging ring. Then the buffer or image it stages is `busy`,
/// and a call of the other lane that accesses it waits until it is not.
struct LaneOrder {
  std::mutex mutex;
  std::condition_variable idle;  ///< notified when an object leaves `busy`
  std::vector<const void*> busy;
};

/// A Transfer is two lanes of this state: the bulk lane (the Transfer's own) and the urgent
/// lane (`urgent`, made at the first urgent call), each with its executor, lock, staging ring
/// and list of host memory kept alive, so that an urgent call never waits for a bulk call's
/// staging. They share `order`.
struct TransferState {
  Device device;  // keeps the device open while the Transfer lives
  std::shared_ptr<QueueState> exec;
  TransferOptions options;
  std::mutex mutex;  // serializes calls of this lane
  std::shared_ptr<LaneOrder> order = std::make_shared<LaneOrder>();
  /// The most bytes a copy of this lane moves between yield points (pacing.hpp); 0 cuts
  /// nothing (the urgent lane, or an executor without yield points).
  std::uint64_t piece = 0;
  /// The bulk lane only: the urgent lane, once made (under urgent_mutex; never unset).
  std::mutex urgent_mutex;
  std::unique_ptr<TransferState> urgent;
  /// The bulk lane only: the urgent lane, made now if it is not yet.
  TransferState& urgent_lane(const std::source_location& where);
  struct InFlight {
    TimelinePoint done;
    std::shared_ptr<HostAllocation> host;
  };
  std::deque<InFlight> in_flight;  // host memory kept alive until its copy completed
  struct Slot {
    HostBuffer buffer;
    TimelinePoint free;  // the copy that last used this slot
  };
  std::vector<Slot> ring;
  std::size_t next_slot = 0;
  std::unique_ptr<ParallelCopier> copier;  // started on first staged copy

  void ensure_staging(DeviceState& d, const std::source_location& where);

  // ---- Pipelined staging -------------------------------------------------------------------
  //
  // A staged copy moves a "stream" of `total` bytes (a batch upload's packed layout, or the
  // coalesced source ranges of a batch download) through the ring in chunks (see
  // planning::staging_geometry). The ring keeps its configured buffers (staging_chunks x
  // staging_chunk_bytes: the cap is never exceeded); a call may cut each buffer into several
  // smaller chunks.
  //
  // Why smaller chunks: with 4 x 16 MiB and a 64 MiB batch, chunk k's DMA cannot start before
  // all of chunk k is packed, so the first 16 MiB of packing and the last 16 MiB of DMA do not
  // overlap anything: on the H200 (16 threads, 42.6 GB/s memcpy, 55.5 GB/s DMA) that is
  // ~0.4 ms + ~0.3 ms on top of ~1.6 ms of packing. Aiming at >= 32 chunks per call (2 MiB
  // for 64 MiB) leaves ~40 us of fill and drain. The 1 MiB floor keeps DMAs large enough for
  // the copy engine to reach full rate (per-copy launch ~5-10 us is hidden behind the previous
  // DMA of >= 1 MiB, ~20 us at 55 GB/s). Chunks are the buffer size divided by a power of
  // two, so they tile every buffer exactly. Figures: docs/benchmarks.md.
  //
  // Host side: the whole call's memcpys are planned up front (planning::plan_copies) and
  // split into units balanced by bytes. The helpers are woken once per call and claim units
  // in order, so all threads work on the oldest chunks first; the calling thread issues each
  // chunk's DMA the moment its last unit finishes, in whatever order chunks finish, and packs
  // units in between. A download releases each chunk to the helpers once its DMA is seen
  // complete, also between the submissions of later chunks.
  static constexpr planning::StagingTuning kTuning{};

  using StreamPiece = planning::StreamPiece;
  using Run = planning::Run;

  planning::Geometry geometry(std::uint64_t total) const {
    return planning::staging_geometry(total, options.staging_chunk_bytes, ring.size(), next_slot, kTuning);
  }

  CopyPlan plan_copies(const std::vector<StreamPiece>& pieces, std::uint64_t total, const planning::Geometry& g,
                       bool to_staging) const {
    SmallVector<std::byte*, 8> bases;
    for (const Slot& slot : ring) bases.push_back(slot.buffer.data());
    return planning::plan_copies(pieces, total, g, std::span<std::byte* const>(bases.begin(), bases.size()),
                                 copier->threads() + 1, kTuning, to_staging);
  }

  /// Spin briefly, then yield: the caller waits for helpers finishing a unit (tens of us).
  static void pause(unsigned& idle) {
    if (++idle > 64) std::this_thread::yield();
  }

  /// Upload: pack `pieces` (stream = the batch layout, `total` bytes) through the ring into
  /// block `b` at `base` (stream position 0 lands at b's byte `base`), one DMA per chunk.
  /// Caller holds `mutex` and ordered the executor's access to `b`.
  void staged_h2d(const std::vector<StreamPiece>& pieces, std::uint64_t total, const BlockState& b,
                  const std::source_location& where, std::uint64_t base = 0);

  /// Download: DMA the stream (`runs` of `b`, `total` bytes) through the ring chunk by chunk
  /// and scatter each chunk into `pieces` as soon as its DMA completes. Returns when every
  /// byte is in host memory. Caller holds `mutex` and ordered the executor after the
  /// source's producers.
  void staged_d2h(const std::vector<StreamPiece>& pieces, const std::vector<Run>& runs, std::uint64_t total,
                  const BlockState& b, const std::source_location& where);

  /// Keep `host` alive until `done`. Completed entries are dropped in batches, once 32 more
  /// are kept than after the last prune: each prune asks the backend, and a query costs the
  /// copy path (see CompletionPolicy), so most calls ask nothing. Caller holds `mutex`.
  void keep(const TimelinePoint& done, const std::shared_ptr<HostAllocation>& host);
  /// Drop the entries whose copy is complete, and only those: an entry is released when its
  /// own point is seen reached, never because of a wait that began before it was kept (a
  /// copy enqueued by another thread during that wait still reads or writes its memory).
  /// Entries are kept in call order on the executor's timeline, so the first entry not
  /// reached ends the scan. Caller holds `mutex`.
  void prune_completed();
  std::size_t prune_at = 32;
};

}  // namespace ferry::detail
