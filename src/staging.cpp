// SPDX-License-Identifier: MIT
// The staging ring of a Transfer (see staging.hpp): pipelined packing and DMA for uploads,
// DMA and scattering for downloads, and the keep-alive list of host memory.
#include "staging.hpp"

#include "pacing.hpp"

#include <algorithm>
#include <thread>

namespace ferry::detail {

void TransferState::ensure_staging(DeviceState& d, const std::source_location& where) {
  FERRY_REQUIRE(options.staging, "Transfer", "staging is disabled (TransferOptions::staging = false)", where);
  if (ring.empty()) {
    for (std::uint32_t i = 0; i < options.staging_chunks; ++i) {
      ring.push_back({d.host_pool_api.allocate(options.staging_chunk_bytes, where), {}});
    }
  }
  if (!copier) {
    int n = options.staging_threads;
    if (n < 0) n = std::clamp(static_cast<int>(std::thread::hardware_concurrency()) - 1, 0, 15);
    copier = std::make_unique<ParallelCopier>(static_cast<unsigned>(n));
  }
}

TransferState& TransferState::urgent_lane(const std::source_location& where) {
  std::lock_guard lock(urgent_mutex);
  if (urgent) return *urgent;
  auto lane = std::make_unique<TransferState>();
  lane->device = device;
  lane->options = options;
  // A ring of its own for staged urgent copies: urgent copies are small, two chunks pipeline them.
  lane->options.staging_chunks = std::min<std::uint32_t>(options.staging_chunks, 2);
  lane->order = order;
  if (options.urgent_executor) {
    lane->exec = detail::access::state(options.urgent_executor);
  } else {
    DeviceState& d = *detail::access::state(device);
    std::lock_guard dlock(d.urgent_mutex);
    if (!d.urgent_transfer) {
      try {
        Queue q = device.create_queue(QueueRole::transfer, "urgent transfer", /*priority=*/1, where);
        d.urgent_transfer = detail::access::state(q);
      } catch (const Error& e) {
        // No queue left to give (a one-queue device): urgent copies share the bulk executor.
        if (e.code() != ErrorCode::unsupported) throw;
        d.urgent_transfer = detail::access::state(device.queue(QueueRole::transfer, where));
      }
    }
    lane->exec = d.urgent_transfer;
  }
  urgent = std::move(lane);
  return *urgent;
}

void TransferState::staged_h2d(const std::vector<StreamPiece>& pieces, std::uint64_t total, const BlockState& b,
                const std::source_location& where, std::uint64_t base) {
  const planning::Geometry g = geometry(total);
  const CopyPlan plan = plan_copies(pieces, total, g, true);
  const std::uint64_t K = g.chunks, R = g.ring_chunks;
  std::vector<TimelinePoint> before(ring.size());  // last use of each buffer before this call
  for (std::size_t i = 0; i < ring.size(); ++i) before[i] = ring[i].free;
  std::vector<TimelinePoint> dma(K);
  // Chunk k's staging may be written once its previous reader is done: a DMA of an earlier
  // call (first lap) or of chunk k - R of this call.
  auto gate = [&](std::uint64_t k) -> const TimelinePoint& {
    return k < R ? before[g.buffer(k)] : dma[k - R];
  };
  PipelinedCopy job(*copier, plan);
  // A chunk's DMA is issued as soon as all its units are packed, in any order: a helper that
  // is descheduled in the middle of one unit then delays that chunk only, not every chunk
  // after it (the executor's copies land in disjoint ranges, and its marks complete in order,
  // so the call's last mark still covers every chunk).
  std::vector<std::uint8_t> sent(K, 0);
  std::uint64_t released = 0, first_unsent = 0, sent_count = 0;
  unsigned idle = 0;
  while (sent_count < K) {
    bool progress = false;
    while (released < K && (released < R || sent[released - R]) && gate(released).reached()) {
      job.release_through(static_cast<std::uint32_t>(released++));
      progress = true;
    }
    while (first_unsent < released && sent[first_unsent]) ++first_unsent;
    for (std::uint64_t k = first_unsent; k < released; ++k) {
      if (sent[k] || !job.chunk_done(static_cast<std::uint32_t>(k))) continue;
      const std::uint64_t at = k * g.chunk, n = std::min(g.chunk, total - at);
      Slot& slot = ring[g.buffer(k)];
      std::lock_guard elock(exec->mutex);
      const HostMemory* stage = detail::access::state(slot.buffer)->memory.get();
      paced(*exec, piece, n, [&](std::uint64_t o, std::uint64_t m) {
        exec->backend->copy_h2d(DeviceRef{b.segment, b.offset + base + at + o}, HostRef{stage, g.offset(k) + o}, m);
      });
      exec->dirty = true;
      // The newest mark on the executor: it covers every earlier use of the buffer too.
      dma[k] = slot.free = enqueue_mark(*exec);
      detail::flush(*exec);
      sent[k] = 1;
      ++sent_count;
      progress = true;
    }
    if (sent_count == K) break;
    if (job.run_one() || progress) {
      idle = 0;
      continue;
    }
    if (sent_count == released) {
      gate(released).wait(std::chrono::hours(1), where);  // DMA-bound: sleep on the queue
    } else {
      pause(idle);  // helpers are finishing the oldest chunks
    }
  }
  next_slot = g.next_first();
}

void TransferState::staged_d2h(const std::vector<StreamPiece>& pieces, const std::vector<Run>& runs, std::uint64_t total,
                const BlockState& b, const std::source_location& where) {
  const planning::Geometry g = geometry(total);
  const CopyPlan plan = plan_copies(pieces, total, g, false);
  const std::uint64_t K = g.chunks, R = g.ring_chunks;
  std::vector<TimelinePoint> dma(K);
  PipelinedCopy job(*copier, plan);
  std::uint64_t released = 0, issued = 0;
  std::size_t run = 0;
  unsigned idle = 0;
  // Hands every chunk whose DMA is seen complete to the helpers; true if it handed any.
  auto release_reached = [&] {
    const std::uint64_t before = released;
    while (released < issued && dma[released].reached()) job.release_through(static_cast<std::uint32_t>(released++));
    return released != before;
  };
  while (!job.all_done()) {
    bool progress = false;
    // DMA ahead while the ring has room: chunk k reuses the staging of chunk k - R, whose
    // scatter must be complete; in the first lap, wait for earlier calls' use of the buffer.
    while (issued < K && (issued < R || job.chunk_done(static_cast<std::uint32_t>(issued - R)))) {
      Slot& slot = ring[g.buffer(issued)];
      if (issued < R && g.offset(issued) == 0) slot.free.wait(std::chrono::hours(1), where);
      const std::uint64_t cb = issued * g.chunk, ce = std::min(total, cb + g.chunk);
      {
        std::lock_guard elock(exec->mutex);
        while (run < runs.size() && runs[run].stream + runs[run].size <= cb) ++run;
        for (std::size_t r = run; r < runs.size() && runs[r].stream < ce; ++r) {
          const std::uint64_t a = std::max(cb, runs[r].stream), e = std::min(ce, runs[r].stream + runs[r].size);
          const HostRef stage{detail::access::state(slot.buffer)->memory.get(), g.offset(issued) + (a - cb)};
          const DeviceRef from{b.segment, b.offset + runs[r].source + (a - runs[r].stream)};
          paced(*exec, piece, e - a, [&](std::uint64_t o, std::uint64_t m) {
            exec->backend->copy_d2h(HostRef{stage.memory, stage.offset + o}, DeviceRef{from.segment, from.offset + o}, m);
          });
        }
        exec->dirty = true;
        dma[issued] = slot.free = enqueue_mark(*exec);
        detail::flush(*exec);
      }
      ++issued;
      progress = true;
      // Hand finished chunks to the helpers between issues: a submission can cost several
      // microseconds, and the helpers would otherwise idle until the whole ring is issued.
      release_reached();
    }
    if (release_reached()) progress = true;
    if (job.run_one() || progress) {
      idle = 0;
      continue;
    }
    if (released < issued) {
      dma[released].wait(std::chrono::hours(1), where);  // DMA-bound: sleep on the queue
    } else {
      pause(idle);  // helpers are finishing units
    }
  }
  next_slot = g.next_first();
}

void TransferState::keep(const TimelinePoint& done, const std::shared_ptr<HostAllocation>& host) {
  if (in_flight.size() >= prune_at) {
    prune_completed();
    prune_at = in_flight.size() + 32;
  }
  in_flight.push_back({done, host});
}

void TransferState::prune_completed() {
  while (!in_flight.empty() && point_reached(in_flight.front().done)) in_flight.pop_front();
}

}  // namespace ferry::detail
