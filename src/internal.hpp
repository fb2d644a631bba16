// SPDX-License-Identifier: MIT
// Front-end state shared by src/*.cpp. Not installed.
//
// Lifetime model: Device handles own the DeviceState (shared_ptr). Every other handle
// (Queue, TimelineSemaphore, DeviceBuffer, HostBuffer) holds its own state plus a weak_ptr to
// the device: once the last Device handle goes away (or close() is called) the device waits
// for its queues, destroys every backend object it made -- including those still referenced by
// live handles -- and those handles become inert ("device is closed" errors).
#pragma once

#include <atomic>
#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <source_location>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend.hpp"
#include "block_allocator.hpp"
#include "ferry/device.hpp"
#include "ferry/pool.hpp"
#include "ferry/snapshot.hpp"

namespace ferry::detail {

struct DeviceState;

/// Throw `invalid_argument` with `message` at the caller's location.
[[noreturn]] void fail(ErrorCode code, const std::string& message, const std::source_location& where);
/// Argument check of a public entry point: throws `invalid_argument` naming the function.
/// A macro so the message (often built with std::to_string) is only built on failure: the
/// checks sit on every call's hot path.
#define FERRY_REQUIRE(condition, function, what, where)                                           \
  do {                                                                                            \
    if (!(condition)) {                                                                           \
      ::ferry::detail::fail(::ferry::ErrorCode::invalid_argument,                                 \
                            std::string(function) + ": " + (what), where);                      \
    }                                                                                             \
  } while (0)

struct SemaphoreState {
  std::weak_ptr<DeviceState> device;
  DeviceState* device_id = nullptr;  // identity only; never dereferenced without `device`
  std::uint32_t timeline_id = 0;     // id used by the pool's free points
  std::mutex mutex;
  std::unique_ptr<BackendSemaphore> backend;  // null once the device closed
  std::uint64_t max_signal = 0;               // highest value signalled or enqueued for signal
  /// A queue's private progress timeline: only ferry signals it (Queue::mark), so marks never
  /// report work complete that is still pending. Host and queue signals of it are refused.
  bool queue_private = false;
  /// Greatest value seen reached: raised by every query through query_value(), by host
  /// signals and by successful host waits; never lowered (timelines only grow). A point at or
  /// below it is reached without asking the backend (lock-free). UINT64_MAX once closed.
  std::atomic<std::uint64_t> reached{0};
  /// steady_clock ns of the last backend query (query_value); what the hot paths' throttle
  /// (query_value_throttled) reads.
  std::atomic<std::int64_t> last_query_ns{INT64_MIN / 2};

  /// Whether `value` is known reached, without a backend query.
  [[nodiscard]] bool known_reached(std::uint64_t value) const noexcept {
    return reached.load(std::memory_order_acquire) >= value;
  }
  /// Raise `reached` to `value` (no-op when lower).
  void note_reached(std::uint64_t value) noexcept {
    std::uint64_t seen = reached.load(std::memory_order_relaxed);
    while (seen < value && !reached.compare_exchange_weak(seen, value, std::memory_order_release,
                                                          std::memory_order_relaxed)) {
    }
  }
};

/// One backend query of the current value (takes s.mutex); raises s.reached. UINT64_MAX once
/// the device closed (everything is complete then).
std::uint64_t query_value(SemaphoreState& s);

/// How often a hot path (an upload's pool allocation, activity spans, kept host memory) may
/// ask the backend about one timeline. Asking costs: on CUDA, querying an event recorded a
/// moment ago makes the driver submit the work batched so far (measured on the H200: the
/// upload call's host time fell from 5.7 to ~2 us without these queries). Between queries the
/// watermark answers; a point it does not show reached is treated as pending, which orders
/// work with a queue wait (cheap, and a no-op on the device when the point was reached).
inline constexpr std::int64_t kHotPathQueryIntervalNs = 50'000;

/// steady_clock now, in ns. The hot paths read it once per call and pass it on: on virtual
/// machines a clock read costs tens of nanoseconds.
inline std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// query_value() when the last query of `s` is older than kHotPathQueryIntervalNs at `now`
/// (steady_now_ns()), else the watermark. Never claims a point reached that is not.
std::uint64_t query_value_throttled(SemaphoreState& s, std::int64_t now);

struct QueueState {
  std::weak_ptr<DeviceState> device;
  DeviceState* device_id = nullptr;
  std::uint32_t id = 0;
  std::string name;
  QueueRole role = QueueRole::compute;
  std::unique_ptr<BackendQueue> owned;  // null for the backend's default queues
  BackendQueue* backend = nullptr;      // null once the device closed
  std::shared_ptr<SemaphoreState> timeline;  // private progress timeline
  std::recursive_mutex mutex;                // serializes enqueues on this queue
  std::uint64_t last_mark = 0;               // last value signalled on `timeline`
  bool dirty = false;                        // work enqueued since last mark
  /// Queue-family ownership acquires this queue owes: performed by the first wait of this
  /// queue on `point` (or later), since a release on `from` is ordered before that point.
  struct PendingAcquire {
    TimelinePoint point;
    DeviceRef range;
    std::uint64_t bytes = 0;
    BackendQueue* from = nullptr;
  };
  std::vector<PendingAcquire> pending_acquires;
  /// Waits enqueued on this queue, (timeline id, greatest value): on a backend whose waits
  /// order all later work (BackendQueue::wait_orders_later_work), a wait at or below is
  /// redundant. A small cache: forgetting an entry only costs a redundant wait. Ids are never
  /// reused, so an entry cannot be mistaken for another semaphore's.
  struct Waited {
    std::uint32_t timeline = 0;  ///< 0 = unused slot
    std::uint64_t value = 0;
  };
  std::array<Waited, 8> waited{};
  std::size_t waited_next = 0;  ///< slot replaced next when the timeline is not cached
};

struct HostAllocation {
  std::weak_ptr<DeviceState> device;
  DeviceState* device_id = nullptr;
  std::unique_ptr<HostMemory> memory;  // null once freed (device closed)
  ~HostAllocation();
};

/// Binds the device's backend to the calling thread for one front-end call (see
/// BackendDevice::bind_thread): the hot calls (uploads, downloads, copies) make several backend
/// calls in a row.
class BoundThread {
 public:
  explicit BoundThread(BackendDevice& device) : device_(device) { device_.bind_thread(binding_); }
  ~BoundThread() { device_.unbind_thread(binding_); }
  BoundThread(const BoundThread&) = delete;
  BoundThread& operator=(const BoundThread&) = delete;

 private:
  BackendDevice& device_;
  ThreadBinding binding_;
};

struct BlockState {
  BlockState() {}  // user-provided: make_shared<BlockState>() sets the members, no zeroing first
  std::weak_ptr<DeviceState> device;
  DeviceState* device_id = nullptr;
  std::uint64_t segment_id = 0;
  const Segment* segment = nullptr;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;       // rounded
  std::uint64_t requested = 0;  // asked for
  std::shared_ptr<QueueState> owner;
  std::shared_ptr<QueueState> recorded_user;  // executor_owned: release waits for this queue
  std::shared_ptr<QueueState> holder;  // queue holding queue-family ownership (null: none yet)
  TimelinePoint ready_after;
  TimelinePoint last_access;  // last access by a queue other than the owner (a copy)
  std::string tag;
  bool released = false;
};

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
};

struct HostPoolState {
  std::mutex mutex;
  std::uint64_t pinned_bytes = 0;
  std::map<std::uintptr_t, std::uintptr_t> registered;  // start -> end
  std::vector<std::weak_ptr<HostAllocation>> live;
};

struct DeviceState : std::enable_shared_from_this<DeviceState> {
  std::unique_ptr<BackendDevice> backend;
  DeviceOptions options;
  Capabilities caps;
  std::atomic<bool> closed{false};
  std::uint64_t validation_messages_at_close = 0;  // readable after close
  std::atomic<std::uint64_t> host_waits{0};        // Device::host_waits
  std::int64_t opened_steady_ns = steady_now_ns();

  std::mutex mutex;  // queues, semaphores registries
  std::vector<std::shared_ptr<QueueState>> queues;
  /// Every semaphore of the device by timeline id (queue timelines and user semaphores): the
  /// pool resolves free points through it, close() destroys what is left through it.
  std::unordered_map<std::uint32_t, std::weak_ptr<SemaphoreState>> timelines;
  std::size_t prune_timelines_at = 64;  // forget dead entries when the map reaches this size
  std::uint32_t next_queue_id = 1;
  std::uint32_t next_timeline_id = 1;
  std::shared_ptr<QueueState> compute;
  std::shared_ptr<QueueState> transfer;

  PoolState pool;
  HostPoolState host;
  DevicePool pool_api{this};
  HostPool host_pool_api{this};
  std::mutex activity_mutex;
  std::deque<QueueActivity> activity;  // (see PoolState::events)
  /// Spans not seen complete yet, per semaphore, in increasing value of their end point:
  /// resolve_activity queries each semaphore at most once and stops at its first span not
  /// reached. (index into `activity`, end point value).
  struct UnresolvedSpans {
    std::shared_ptr<SemaphoreState> semaphore;
    std::deque<std::pair<std::uint64_t, std::size_t>> spans;  // (value, index)
  };
  std::vector<UnresolvedSpans> unresolved_activity;
  std::uint64_t last_resolve_ns = 0;  // resolve_activity rate limit (guarded by activity_mutex)

  ~DeviceState();
  void close() noexcept;
  /// A steady_now_ns() reading as ns since the device was opened (what events and spans carry).
  [[nodiscard]] std::uint64_t since_opened_ns(std::int64_t steady_ns) const {
    return static_cast<std::uint64_t>(steady_ns - opened_steady_ns);
  }
};

// ---- helpers used across src/*.cpp ------------------------------------------------------

/// Lock the device of a handle; throws invalid_argument when closed.
std::shared_ptr<DeviceState> lock_device(const std::weak_ptr<DeviceState>& device,
                                         const char* function, const std::source_location& where);
/// Validate a queue handle (non-null, device open) and return its state + device.
QueueState& checked_queue(const Queue& queue, const char* function, const std::source_location& where);
/// Create a semaphore state registered with the device (assigns a timeline id).
std::shared_ptr<SemaphoreState> make_semaphore(DeviceState& device, const std::shared_ptr<DeviceState>& self,
                                               std::uint64_t initial);
/// Wrap a backend queue as a QueueState registered with the device.
std::shared_ptr<QueueState> make_queue(DeviceState& device, const std::shared_ptr<DeviceState>& self,
                                       QueueRole role, std::string name, BackendQueue* backend,
                                       std::unique_ptr<BackendQueue> owned);

/// Wrap a backend device (opened or adopted) as a front-end Device: capabilities, pool
/// allocator, default queues. Shared by Device::open and the backends' public adopt functions
/// (ferry::vulkan::adopt_device), so an adopted device behaves exactly like an opened one.
/// `options.backend` is what Device::backend() reports. Throws invalid_argument for a null backend.
Device wrap_backend_device(std::unique_ptr<BackendDevice> backend, const DeviceOptions& options,
                           std::source_location where);

// Enqueue helpers; caller holds q.mutex. They mark the queue dirty.
/// Make q's later work wait for `point`. Nothing is enqueued when the point is of q's own
/// timeline, known reached (watermark, else one query), or (stream-ordered backends) already
/// waited for by q. Also performs the ownership acquires q owes up to `point`.
/// `query` false: trust the watermark alone (for a point just enqueued, or one queried moments
/// ago in the same call), saving a backend query that would almost always answer "not yet";
/// the cost of a stale watermark is a wait for a point already reached, which is harmless.
void enqueue_wait(QueueState& q, const TimelinePoint& point, bool query = true);
/// Signal the queue's own timeline if work was enqueued since the last mark; returns the point.
TimelinePoint enqueue_mark(QueueState& q);
/// Whether `point` is reached (empty = reached; closed device = reached): the semaphore's
/// watermark, else one backend query.
bool point_reached(const TimelinePoint& point);
/// Record queue activity for traces: begins now (enqueue), ends when `done` is observed
/// reached by a later record_activity/resolve_activity call (an upper bound on completion).
void record_activity(DeviceState& device, const QueueState& q, std::string name, std::uint64_t bytes,
                     const TimelinePoint& done);
/// Stamp the end time of recorded activity whose point is reached. Caller holds activity_mutex.
void resolve_activity(DeviceState& device, bool force = false);
/// The same with the caller's clock reading (steady_now_ns()).
void resolve_activity(DeviceState& device, bool force, std::int64_t steady_now);

// Pool internals (pool.cpp).
DeviceBuffer pool_allocate(DeviceState& device, const std::shared_ptr<DeviceState>& self,
                           std::uint64_t bytes, const std::shared_ptr<QueueState>& owner,
                           const std::shared_ptr<QueueState>& first_writer, const std::string& tag,
                           const std::source_location& where, bool allow_pending_reuse = true);
void pool_close(DeviceState& device) noexcept;
void host_pool_close(DeviceState& device) noexcept;

}  // namespace ferry::detail
