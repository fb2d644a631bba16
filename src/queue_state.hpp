// SPDX-License-Identifier: MIT
// Queue state and the enqueue helpers (waits, marks, ownership acquires owed). Not installed.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend.hpp"
#include "block_state.hpp"
#include "ferry/device.hpp"
#include "timeline.hpp"

namespace ferry::detail {

struct DeviceState;

struct QueueState {
  std::weak_ptr<DeviceState> device;
  DeviceState* device_id = nullptr;
  std::uint32_t id = 0;
  std::string name;
  QueueRole role = QueueRole::compute;
  std::unique_ptr<BackendQueue> owned;  // null for the backend's default queues
  BackendQueue* backend = nullptr;      // null once the device closed
  /// The backend queue's traits, read once when the state is made (make_queue); every
  /// front-end branch on them reads this copy, which outlives `backend`.
  QueueTraits traits{};
  std::shared_ptr<SemaphoreState> timeline;  // private progress timeline
  std::recursive_mutex mutex;                // serializes enqueues on this queue
  std::uint64_t last_mark = 0;               // last value signalled on `timeline`
  bool dirty = false;                        // work enqueued since last mark
  /// Bulk copy bytes enqueued since the queue's last yield point (pacing.hpp; under mutex).
  std::uint64_t unyielded = 0;
  /// An engine's queue (Device::adopt_queue): the engine enqueues work ferry never sees, so
  /// ferry cannot know it idle since its last mark; every mark is a new one.
  bool external = false;
  /// Queue-family ownership acquires released to this queue: performed by its first wait on
  /// their point (or later), since the release is ordered before that point, unless another
  /// queue of the family took them first (see OwedAcquire).
  std::vector<std::shared_ptr<OwedAcquire>> pending_acquires;
  /// Waits enqueued on this queue, (timeline id, greatest value): on a backend whose waits
  /// order all later work (QueueTraits::wait_orders_later_work), a wait at or below is
  /// redundant. A small cache: forgetting an entry only costs a redundant wait. Ids are never
  /// reused, so an entry cannot be mistaken for another semaphore's.
  struct Waited {
    std::uint32_t timeline = 0;  ///< 0 = unused slot
    std::uint64_t value = 0;
  };
  std::array<Waited, 8> waited{};
  std::size_t waited_next = 0;  ///< slot replaced next when the timeline is not cached
  /// Calls and bytes recorded on a deferring backend since its last flush (submit_or_defer).
  std::uint32_t deferred_calls = 0;
  std::uint64_t deferred_bytes = 0;
  /// Semaphores that work enqueued on this queue waits for or signals (other than its own
  /// timeline), each kept alive until this queue's timeline reaches `until`, a mark after
  /// that work. A backend operation uses its semaphore until it has run (the host backend's
  /// worker, CUDA's stream memory operations, a pending Vulkan submission), while a caller
  /// may drop its TimelineSemaphore as soon as it signalled it or saw it signalled. In
  /// increasing `until`; under `mutex` (hold_semaphore).
  struct Held {
    std::uint64_t until = 0;
    std::shared_ptr<SemaphoreState> semaphore;
  };
  std::deque<Held> held;
  /// `held` asks the backend for this queue's progress once it grows to this many entries,
  /// then again only after kHeldBatch more: a queue whose device work runs far behind the
  /// host would otherwise pay a driver query on every wait.
  std::size_t held_observe_at = kHeldBatch;
  static constexpr std::size_t kHeldBatch = 32;
};

/// Submit what q recorded (BackendQueue::flush) and note its marks submitted (caller holds
/// q.mutex).
void flush(QueueState& q);
/// After a call that recorded `bytes` of copies on q (caller holds q.mutex): flush now, or,
/// on a backend that defers signals, keep recording until `max_calls` calls or `max_bytes`
/// bytes are pending (TransferOptions::submit_batch / submit_bytes). Waits on q's points
/// flush it in between (ensure_submitted).
void submit_or_defer(QueueState& q, std::uint64_t bytes, std::uint32_t max_calls, std::uint64_t max_bytes);

// Enqueue helpers; caller holds q.mutex. They mark the queue dirty.
/// Make q's later work wait for `point`. Nothing is enqueued when the point is of q's own
/// timeline, known reached (watermark, else one query), or (stream-ordered backends) already
/// waited for by q. Also performs the ownership acquires q owes up to `point`.
/// `query` false: trust the watermark alone (for a point just enqueued, or one queried moments
/// ago in the same call), saving a backend query that would almost always answer "not yet";
/// the cost of a stale watermark is a wait for a point already reached, which is harmless.
void enqueue_wait(QueueState& q, const TimelinePoint& point, bool query = true);
/// Whether enqueue_wait(q, point, /*query=*/false) might enqueue work on q: a wait for a
/// point not of q's own timeline, not known reached and not already waited for, or an
/// ownership acquire q owes. Never false where it would (caller holds q.mutex).
bool wait_needed(const QueueState& q, const TimelinePoint& point);
/// Signal the queue's own timeline if work was enqueued since the last mark (always, on an
/// external queue); returns the point.
TimelinePoint enqueue_mark(QueueState& q);
/// Keep `s` alive until q's next mark is reached: work just enqueued on q waits for or
/// signals it (see QueueState::held). Also lets go of the semaphores q has passed.
void hold_semaphore(QueueState& q, const std::shared_ptr<SemaphoreState>& s);

}  // namespace ferry::detail
