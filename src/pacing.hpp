// SPDX-License-Identifier: MIT
// Bulk copies yield (transfer.hpp, "Priorities"): on a bulk lane a copy is cut into pieces of
// at most `piece` bytes, and a yield point (BackendQueue::enqueue_yield) goes before a piece
// wherever the bytes enqueued on the queue since its last yield would exceed a piece. A copy
// engine serves one queue's consecutive copies back to back, so without the yields an urgent
// copy on another queue would wait for the whole bulk copy. `piece` 0 (an urgent lane, or a
// queue without yield points) cuts nothing. Callers hold q.mutex. Not installed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "queue_state.hpp"

namespace ferry::detail {

/// Whether a copy of `n` bytes about to be enqueued on q must come after a yield: the bytes
/// since the last yield and `n` exceed `piece`.
inline bool yield_due(const QueueState& q, std::uint64_t piece, std::uint64_t n) {
  return piece != 0 && q.unyielded > 0 && q.unyielded + n > piece;
}

/// Enqueue a yield point on q and start counting its bytes afresh.
inline void enqueue_yield(QueueState& q) {
  q.backend->enqueue_yield();
  q.unyielded = 0;
}

/// Account for a copy of `n` bytes about to be enqueued on q as one command, after a yield
/// where one is due.
inline void yield_before(QueueState& q, std::uint64_t piece, std::uint64_t n) {
  if (piece == 0) return;
  if (yield_due(q, piece, n)) enqueue_yield(q);
  q.unyielded += n;
}

/// Enqueue one copy of `bytes`, cut into pieces: `copy(at, n)` enqueues bytes [at, at + n).
template <class Copy>
void paced(QueueState& q, std::uint64_t piece, std::uint64_t bytes, Copy&& copy) {
  if (piece == 0) {
    copy(std::uint64_t{0}, bytes);
    return;
  }
  for (std::uint64_t at = 0; at < bytes;) {
    const std::uint64_t n = std::min(piece, bytes - at);
    yield_before(q, piece, n);
    copy(at, n);
    at += n;
  }
}

/// copy_h2d_many (`to_device`) or copy_d2h_many of `copies`, cut into pieces; the list goes to
/// the backend in runs between yields.
inline void paced_many(QueueState& q, std::uint64_t piece, std::span<const HostDeviceCopy> copies, bool to_device) {
  auto send = [&](std::span<const HostDeviceCopy> run) {
    if (run.empty()) return;
    if (to_device) {
      q.backend->copy_h2d_many(run);
    } else {
      q.backend->copy_d2h_many(run);
    }
  };
  if (piece == 0) {
    send(copies);
    return;
  }
  std::vector<HostDeviceCopy> run;
  for (const HostDeviceCopy& c : copies) {
    for (std::uint64_t at = 0; at < c.bytes;) {
      const std::uint64_t n = std::min(piece, c.bytes - at);
      if (yield_due(q, piece, n)) {
        send(run);
        run.clear();
        enqueue_yield(q);
      }
      run.push_back({DeviceRef{c.device.segment, c.device.offset + at}, HostRef{c.host.memory, c.host.offset + at}, n});
      q.unyielded += n;
      at += n;
    }
  }
  send(run);
}

}  // namespace ferry::detail
