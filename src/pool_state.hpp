// SPDX-License-Identifier: MIT
// Device pool state: the allocator, segments, statistics, events, pending frees. Not
// installed.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <source_location>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend.hpp"
#include "block_allocator.hpp"
#include "block_state.hpp"
#include "ferry/pool.hpp"
#include "ferry/snapshot.hpp"
#include "small_vector.hpp"
#include "timeline.hpp"

namespace ferry::detail {

struct DeviceState;
struct QueueState;

struct PoolState {
  std::mutex mutex;
  BlockAllocator allocator;
  std::unordered_map<std::uint64_t, std::unique_ptr<Segment>> segments;
  std::uint64_t next_segment_id = 1;
  PoolBudget budget;
  std::unordered_map<std::uint32_t, QueueBudget> per_queue;
  std::deque<PoolEvent> events;  // a deque: recording never moves what is recorded
  /// Released blocks whose free point is pending: each gets a free_completed event once its
  /// point is observed reached (checked on later pool calls; never blocks).
  struct PendingFree {
    FreePoint point;
    std::uint64_t address = 0;
    std::uint64_t size = 0;
    std::uint32_t queue = 0;
    std::string tag;
  };
  /// Pending frees of one timeline, in increasing point value, so that checking them reads
  /// its watermark (and queries it at most once) and stops at its first point not reached.
  /// The semaphore is held while frees are pending on it.
  struct TimelineFrees {
    std::shared_ptr<SemaphoreState> semaphore;
    std::deque<PendingFree> frees;
  };
  std::unordered_map<std::uint32_t, TimelineFrees> pending_frees;
  /// The semaphores the allocator's free points name, by timeline id: the pool's own cache of
  /// DeviceState::timelines, read under this mutex instead of the device's (a few entries;
  /// expired ones are dropped when met).
  std::vector<std::pair<std::uint32_t, std::weak_ptr<SemaphoreState>>> semaphores;
  /// Released blocks whose free point could not be enqueued (a lost device): nothing orders a
  /// later user after the work that may still use them, so they stay allocated, held here,
  /// until the device closes.
  std::vector<std::shared_ptr<BlockState>> quarantined;
  /// DevicePool::set_segment_callbacks: called under this mutex (see SegmentCallbacks).
  SegmentCallbacks callbacks;
};

/// Take the pool's mutex for `function` (a public entry point), refusing a call from inside
/// one of this device's segment callbacks on this thread, which holds the mutex already.
std::unique_lock<std::mutex> lock_pool(DeviceState& d, const char* function, const std::source_location& where);
/// Throw invalid_argument when the calling thread is inside a segment callback of `d` (for
/// entry points that take other locks first, such as a Transfer call's).
void refuse_in_segment_callback(const DeviceState& d, const char* function, const std::source_location& where);
/// The segment `id` as the user sees it (caller holds the pool mutex).
SegmentInfo segment_info(const DeviceState& d, std::uint64_t id);

/// The semaphore of a timeline, or null once it died with its queue (caller holds the pool
/// mutex): the pool's cache first (PoolState::semaphores), then the device's map.
std::shared_ptr<SemaphoreState> pool_semaphore(DeviceState& d, std::uint32_t timeline);

// The Reached callback of one pool call. Per timeline: the semaphore is looked up once (see
// pool_semaphore), its watermark answers points at or below it, and the backend is queried at
// most once (free points are found by querying, never by blocking). Only for the duration of
// one call: a reached value older than the call could hide completed work, never claim
// incomplete work.
// A `lazy` query asks the backend only when the timeline's last query is older than
// CompletionPolicy::kHotPathQueryIntervalNs (an allocation's first pass: see pool_allocate).
struct ReachedQuery {
  DeviceState& device;
  bool lazy = false;
  std::int64_t now = 0;  // lazy: the call's clock reading (steady_now_ns())
  struct Known {
    std::uint32_t timeline = 0;
    std::uint64_t value = 0;  // a value known reached
    bool queried = false;     // `value` is this call's backend query (or the timeline is gone)
    std::shared_ptr<SemaphoreState> semaphore;
  };
  SmallVector<Known, 4> known;  // a few timelines per call: linear search

  explicit ReachedQuery(DeviceState& d) : device(d) {}
  ReachedQuery(DeviceState& d, std::int64_t lazy_now) : device(d), lazy(true), now(lazy_now) {}

  /// The call's entry for `timeline`; `held` is its semaphore when the caller holds it
  /// (pending frees do), which saves the lookup.
  Known& entry(std::uint32_t timeline, const std::shared_ptr<SemaphoreState>* held = nullptr) {
    for (auto& k : known) {
      if (k.timeline == timeline) return k;
    }
    Known k;
    k.timeline = timeline;
    k.semaphore = held != nullptr ? *held : pool_semaphore(device, timeline);
    if (k.semaphore) {
      k.value = k.semaphore->reached.load(std::memory_order_acquire);
    } else {
      k.value = UINT64_MAX;  // a timeline that died with its queue is complete
      k.queried = true;
    }
    return known.push_back(std::move(k));
  }

  /// Whether `value` of k's timeline is reached: the watermark, else this call's one query.
  bool reached(Known& k, std::uint64_t value) {
    if (k.value < value && !k.queried) {
      k.value = lazy ? observe_throttled(*k.semaphore, now) : observe(*k.semaphore);
      k.queried = true;
    }
    return k.value >= value;
  }

  bool operator()(const FreePoint& fp) { return !fp.pending() || reached(entry(fp.timeline), fp.value); }
};

/// Record free_completed for released blocks whose free point has been reached (see pool.cpp).
void complete_frees(DeviceState& d, ReachedQuery& reached, std::int64_t now);
/// Raise the budget's peaks to its current values.
void note_peaks(PoolBudget& b);
/// Reclaim completed frees and return idle segments to the backend (caller holds the pool
/// mutex); returns the bytes returned.
std::uint64_t trim_locked(DeviceState& d);
/// The address a segment is reported at (its device address, or a synthetic one).
std::uint64_t segment_address(const PoolState& p, std::uint64_t id);
/// Check the pool's invariants (caller holds the pool mutex); empty, or what is broken.
std::string pool_problems(const DeviceState& d);

/// Allocate a block (pool.cpp; see DevicePool::allocate and Transfer::upload).
DeviceBuffer pool_allocate(DeviceState& device, const std::shared_ptr<DeviceState>& self,
                           std::uint64_t bytes, const std::shared_ptr<QueueState>& owner,
                           const std::shared_ptr<QueueState>& first_writer, const std::string& tag,
                           const std::source_location& where, bool allow_pending_reuse = true);
/// Free every segment and make live buffers inert (close). Never throws.
void pool_close(DeviceState& device) noexcept;

}  // namespace ferry::detail
