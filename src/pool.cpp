// SPDX-License-Identifier: MIT
// Device pool: allocation (segment growth, the out-of-memory path) and stream-ordered
// release around BlockAllocator, and the DeviceBuffer handle.
#include <algorithm>
#include <exception>
#include <functional>
#include <sstream>

#include "access.hpp"
#include "device_state.hpp"
#include "small_vector.hpp"

namespace ferry {
namespace detail {
namespace {

std::string mib(std::uint64_t bytes) {
  std::ostringstream s;
  s.precision(1);
  s << std::fixed << static_cast<double>(bytes) / (1024.0 * 1024.0) << " MiB";
  return s.str();
}

std::string pool_state_text(const PoolState& p) {
  return "reserved " + mib(p.budget.reserved_bytes) + ", active " + mib(p.budget.active_bytes) +
         ", free " + mib(p.allocator.free_bytes()) + " (" + std::to_string(p.allocator.pending_blocks()) +
         " blocks pending on a queue), " + std::to_string(p.budget.segment_count) + " segments";
}

/// `steady_now`: the calling pool function's clock reading (steady_now_ns()).
void record(DeviceState& d, PoolEventKind kind, std::uint64_t address, std::uint64_t size,
            std::uint32_t queue, const std::string& tag, std::int64_t steady_now) {
  if (!d.options.record_events) return;
  if (d.pool.events.size() >= (4u << 20)) return;  // bounded: ~4M events
  d.pool.events.push_back(PoolEvent{kind, address, size, queue, d.since_opened_ns(steady_now), tag});
}

/// After every pool operation in builds with heavy checks: the whole pool's invariants
/// (caller holds the pool mutex). A broken invariant is a bug in ferry: abort with it.
void heavy_check(const DeviceState& d) {
  if constexpr (FERRY_HEAVY_CHECKS) {
    const std::string problems = pool_problems(d);
    FERRY_ASSERT(problems.empty(), problems.c_str());
  } else {
    (void)d;
  }
}

/// The device whose segment callback the calling thread is running, if any.
thread_local const DeviceState* t_callback_device = nullptr;

/// Marks the calling thread as inside a segment callback of `d` for one scope.
class CallbackScope {
 public:
  explicit CallbackScope(const DeviceState& d) : previous_(t_callback_device) { t_callback_device = &d; }
  ~CallbackScope() { t_callback_device = previous_; }
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;

 private:
  const DeviceState* previous_;
};

/// Call `fn(info)` (a segment callback) with the thread marked (caller holds the pool mutex).
void invoke(const DeviceState& d, const std::function<void(const SegmentInfo&)>& fn, const SegmentInfo& info) {
  if (!fn) return;
  CallbackScope scope(d);
  fn(info);
}

}  // namespace

void refuse_in_segment_callback(const DeviceState& d, const char* function, const std::source_location& where) {
  FERRY_REQUIRE(t_callback_device != &d, function,
                "called from inside a segment callback of the same device, which runs under the pool's mutex "
                "(see SegmentCallbacks): a callback must not call ferry on its device",
                where);
}

std::unique_lock<std::mutex> lock_pool(DeviceState& d, const char* function, const std::source_location& where) {
  refuse_in_segment_callback(d, function, where);
  return std::unique_lock<std::mutex>(d.pool.mutex);
}

SegmentInfo segment_info(const DeviceState& d, std::uint64_t id) {
  const Segment& s = *d.pool.segments.at(id);
  SegmentInfo info;
  info.id = id;
  info.address = segment_address(d.pool, id);
  info.size = s.size;
  info.native = s.native;
  info.vulkan_memory = s.native_memory;
  info.pointer = !s.synthetic_address && s.address != 0;
  info.backend = d.options.backend;
  return info;
}

std::uint64_t segment_address(const PoolState& p, std::uint64_t id) {
  const Segment& s = *p.segments.at(id);
  return s.address != 0 ? s.address : (id << 40);
}

// The semaphore of a timeline, or null once it died with its queue (caller holds p.mutex). The
// pool's cache first (PoolState::semaphores), then the device's map (one device.mutex).
std::shared_ptr<SemaphoreState> pool_semaphore(DeviceState& d, std::uint32_t timeline) {
  auto& cache = d.pool.semaphores;
  for (auto it = cache.begin(); it != cache.end(); ++it) {
    if (it->first != timeline) continue;
    if (auto s = it->second.lock()) return s;
    cache.erase(it);  // died: never comes back (ids are not reused)
    return nullptr;
  }
  std::shared_ptr<SemaphoreState> s;
  {
    std::lock_guard lock(d.mutex);
    auto t = d.timelines.find(timeline);
    if (t != d.timelines.end()) s = t->second.lock();
  }
  if (s) {
    if (cache.size() >= 32) std::erase_if(cache, [](const auto& e) { return e.second.expired(); });
    cache.emplace_back(timeline, s);
  }
  return s;
}

// Record free_completed for released blocks whose free point has been reached, asking
// `reached` (the call's ReachedQuery, so a timeline is queried once per call however many
// passes ask). The frees of one timeline are in increasing value: the first one not reached
// ends that timeline's scan. `now`: the caller's clock reading (steady_now_ns()).
void complete_frees(DeviceState& d, ReachedQuery& reached, std::int64_t now) {
  for (auto it = d.pool.pending_frees.begin(); it != d.pool.pending_frees.end();) {
    auto& [semaphore, frees] = it->second;
    ReachedQuery::Known& k = reached.entry(it->first, &semaphore);
    while (!frees.empty() && reached.reached(k, frees.front().point.value)) {
      const PoolState::PendingFree& f = frees.front();
      record(d, PoolEventKind::free_completed, f.address, f.size, f.queue, f.tag, now);
      frees.pop_front();
    }
    it = frees.empty() ? d.pool.pending_frees.erase(it) : std::next(it);
  }
}

void note_peaks(PoolBudget& b) {
  b.peak_reserved_bytes = std::max(b.peak_reserved_bytes, b.reserved_bytes);
  b.peak_active_bytes = std::max(b.peak_active_bytes, b.active_bytes);
  b.peak_stranded_bytes = std::max(b.peak_stranded_bytes, b.stranded_bytes);
}

std::uint64_t trim_locked(DeviceState& d) {
  PoolState& p = d.pool;
  ReachedQuery reached(d);
  p.allocator.refresh(std::ref(reached));
  const std::int64_t now = steady_now_ns();
  complete_frees(d, reached, now);
  std::uint64_t returned = 0;
  std::exception_ptr failed;  // the first exception of a `destroyed` callback
  for (std::uint64_t id : p.allocator.idle_segments()) {
    const std::uint64_t address = segment_address(p, id);
    const std::uint32_t queue = p.allocator.segments().at(id).queue;
    // Reported before the memory goes back, while its registration is still valid.
    try {
      invoke(d, p.callbacks.destroyed, segment_info(d, id));
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
    const std::uint64_t size = p.allocator.remove_segment(id);
    auto node = p.segments.extract(id);
    d.backend->free_segment(std::move(node.mapped()));
    returned += size;
    p.budget.reserved_bytes -= size;
    p.budget.segment_count -= 1;
    record(d, PoolEventKind::segment_free, address, size, queue, {}, now);
  }
  heavy_check(d);
  if (failed) std::rethrow_exception(failed);
  return returned;
}

DeviceBuffer pool_allocate(DeviceState& d, const std::shared_ptr<DeviceState>& self, std::uint64_t bytes,
                           const std::shared_ptr<QueueState>& owner,
                           const std::shared_ptr<QueueState>& first_writer, const std::string& tag,
                           const std::source_location& where, bool allow_pending_reuse) {
  PoolState& p = d.pool;
  const auto lock = lock_pool(d, "DevicePool::allocate", where);
  const QueueState& first = first_writer ? *first_writer : *owner;
  auto block = std::make_shared<BlockState>();  // the allocator keeps its address (Block::user)
  BlockAllocator::Request request{bytes, owner->id, first.timeline->timeline_id,
                                  allow_pending_reuse && first_writer != nullptr && first_writer != owner,
                                  block.get()};
  // First pass with lazy queries: a block whose free point the watermark does not show
  // reached still serves a request that may reuse pending memory (the first writer waits for
  // the point on the device, a no-op there when it was reached), so the usual upload asks the
  // driver nothing. Only when that finds nothing are the timelines queried, before growing.
  const std::int64_t now = steady_now_ns();  // one clock reading for the call
  ReachedQuery lazy(d, now);
  complete_frees(d, lazy, now);
  auto placement = p.allocator.allocate(request, std::ref(lazy));
  ReachedQuery reached(d);
  if (!placement) {
    p.allocator.refresh(std::ref(reached));
    placement = p.allocator.allocate(request, std::ref(reached));
  }
  if (!placement) {
    // Grow by one segment. Record what the asking queue could not reuse (stranded memory).
    p.budget.stranded_bytes =
        p.allocator.unusable_free_bytes(request, owner->timeline->timeline_id, std::ref(reached));
    const std::uint64_t segment_bytes = p.allocator.segment_size_for(bytes);
    std::unique_ptr<Segment> segment;
    try {
      segment = d.backend->allocate_segment(segment_bytes);
    } catch (const Error& err) {
      if (err.code() != ErrorCode::out_of_memory) throw;
      // Out of memory: reclaim completed frees, return idle segments, retry once.
      trim_locked(d);
      placement = p.allocator.allocate(request, std::ref(reached));
      if (!placement) {
        try {
          segment = d.backend->allocate_segment(segment_bytes);
        } catch (const Error& again) {
          if (again.code() != ErrorCode::out_of_memory) throw;
          throw Error(ErrorCode::out_of_memory,
                      "DevicePool::allocate: cannot allocate " + std::to_string(bytes) + " bytes for queue '" +
                          owner->name + "' (needs a new " + mib(segment_bytes) + " segment; " +
                          pool_state_text(p) + "): " + again.message(),
                      again.call(), where);
        }
      }
    }
    if (segment) {
      const std::uint64_t id = p.next_segment_id++;
      p.segments.emplace(id, std::move(segment));
      // Reported before any block of it is handed out. A failing callback undoes the growth.
      try {
        invoke(d, p.callbacks.created, segment_info(d, id));
      } catch (...) {
        auto node = p.segments.extract(id);
        try {
          d.backend->free_segment(std::move(node.mapped()));
        } catch (...) {
          // The callback's exception is the one to report; the driver reclaims the rest.
        }
        throw;
      }
      const bool small = p.allocator.is_small(bytes);
      p.allocator.add_segment(id, segment_bytes, owner->id, small);
      p.budget.reserved_bytes += segment_bytes;
      p.budget.segment_count += 1;
      p.budget.segment_allocations += 1;
      record(d, PoolEventKind::segment_alloc, segment_address(p, id), segment_bytes, owner->id, tag, now);
      placement = p.allocator.allocate(request, std::ref(reached));
    }
  }
  if (!placement) {
    throw Error(ErrorCode::internal_error, "DevicePool::allocate: a fresh segment did not fit " +
                                              std::to_string(bytes) + " bytes", {}, where);
  }
  block->device = self;
  block->device_id = &d;
  block->segment_id = placement->segment;
  block->segment = p.segments.at(placement->segment).get();
  block->offset = placement->offset;
  block->size = placement->size;
  block->requested = bytes;
  block->owner = owner;
  if (first_writer) block->first_writer = first_writer->id;
  block->tag = tag;
  if (placement->pending_reuse) {
    // The first pass looked the timeline up already (the second pass, when it ran, too).
    block->ready_after = detail::access::point(lazy.entry(placement->wait.timeline).semaphore, placement->wait.value);
    p.budget.pending_reuses += 1;
  } else if (p.budget.segment_allocations > 0) {
    p.budget.immediate_reuses += 1;
  }
  p.budget.active_bytes += placement->size;
  p.budget.requested_bytes += bytes;
  p.budget.allocations += 1;
  QueueBudget& qb = p.per_queue[owner->id];
  if (qb.queue_name.empty()) {  // a new entry (names are fixed when a queue is made)
    qb.queue_id = owner->id;
    qb.queue_name = owner->name;
  }
  qb.active_bytes += placement->size;
  qb.peak_active_bytes = std::max(qb.peak_active_bytes, qb.active_bytes);
  note_peaks(p.budget);
  record(d, PoolEventKind::alloc, segment_address(p, block->segment_id) + block->offset, placement->size,
         owner->id, tag, now);
  heavy_check(d);
  return detail::access::make<DeviceBuffer>(std::move(block));
}

// Return a block to the allocator with a free point (caller validated the block).
void pool_release(DeviceState& d, BlockState& b, const TimelinePoint& point) {
  PoolState& p = d.pool;
  const auto lock = lock_pool(d, "DeviceBuffer::release", {});
  // The watermark only: `point` is usually the owner's mark just enqueued, which a query would
  // rarely find reached; the next pool call that needs it queries (and cleans) it.
  FreePoint fp;
  if (!point.empty() && !detail::access::semaphore(point)->known_reached(point.value)) {
    fp = FreePoint{detail::access::semaphore(point)->timeline_id, point.value};
  }
  const std::uint64_t address = segment_address(p, b.segment_id) + b.offset;
  p.allocator.release(b.segment_id, b.offset, fp);
  p.budget.active_bytes -= b.size;
  p.budget.requested_bytes -= b.requested;
  p.per_queue[b.owner->id].active_bytes -= b.size;
  const std::int64_t now = d.options.record_events ? steady_now_ns() : 0;  // only events need it
  record(d, PoolEventKind::free_requested, address, b.size, b.owner->id, b.tag, now);
  if (!fp.pending()) {
    record(d, PoolEventKind::free_completed, address, b.size, b.owner->id, b.tag, now);
  } else if (d.options.record_events) {
    auto& [semaphore, frees] = p.pending_frees[fp.timeline];
    if (!semaphore) semaphore = detail::access::semaphore(point);
    auto pos = frees.end();  // usually the greatest value so far: insert from the back
    while (pos != frees.begin() && std::prev(pos)->point.value > fp.value) --pos;
    frees.insert(pos, PoolState::PendingFree{fp, address, b.size, b.owner->id, b.tag});
  }
  b.released = true;
  heavy_check(d);
}

void pool_close(DeviceState& d) noexcept {
  PoolState& p = d.pool;
  std::lock_guard lock(p.mutex);
  p.pending_frees.clear();
  p.semaphores.clear();
  for (const auto& [id, info] : p.allocator.segments()) {
    for (const auto& [offset, block] : info.blocks) {
      if (block.allocated) static_cast<BlockState*>(block.user)->released = true;  // handles become inert
    }
  }
  for (auto& [id, segment] : p.segments) {
    try {
      invoke(d, p.callbacks.destroyed, segment_info(d, id));
    } catch (...) {
      // close() cannot report; the segment is freed all the same.
    }
    try {
      d.backend->free_segment(std::move(segment));
    } catch (...) {
      // Teardown continues; the driver reclaims the rest with the device.
    }
  }
  p.segments.clear();
  p.allocator = BlockAllocator(p.allocator.config());
  p.quarantined.clear();
  p.callbacks = {};
}

}  // namespace detail

// ---- DeviceBuffer ------------------------------------------------------------------------

namespace {
detail::BlockState& live_block(const std::shared_ptr<detail::BlockState>& s, const char* function,
                               const std::source_location& where) {
  FERRY_REQUIRE(s != nullptr, function, "null or moved-from buffer", where);
  (void)detail::lock_device(s->device, function, where);
  FERRY_REQUIRE(!s->released, function, "the buffer was released", where);
  return *s;
}
}  // namespace

DeviceBuffer::DeviceBuffer(DeviceBuffer&&) noexcept = default;
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (valid()) {
      try {
        release();
      } catch (...) {
      }
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (!valid()) return;
  try {
    release();
  } catch (...) {
    // A destructor cannot report; release() only fails on a lost device.
  }
}

bool DeviceBuffer::valid() const noexcept {
  if (state_ == nullptr || state_->released) return false;
  auto d = state_->device.lock();
  return d != nullptr && !d->closed.load();
}

std::uint64_t DeviceBuffer::size(std::source_location where) const {
  return live_block(state_, "DeviceBuffer::size", where).requested;
}

Queue DeviceBuffer::owner(std::source_location where) const {
  return detail::access::make<Queue>(live_block(state_, "DeviceBuffer::owner", where).owner);
}

DeviceView DeviceBuffer::view(std::source_location where) const {
  const auto& b = live_block(state_, "DeviceBuffer::view", where);
  DeviceView v;
  v.native = b.segment->native;
  v.offset = b.offset;
  v.size = b.requested;
  v.address = b.segment->address != 0 ? b.segment->address + b.offset : 0;
  return v;
}

TimelinePoint DeviceBuffer::ready_after(std::source_location where) const {
  return live_block(state_, "DeviceBuffer::ready_after", where).ready_after;
}

namespace {
// The free point of a block: the mark of the queue that used it last in stream order, after
// that queue has waited for any other queue's access (a copy still writing or reading it).
TimelinePoint free_point(detail::BlockState& b, const TimelinePoint& extra) {
  detail::QueueState& q = b.recorded_user ? *b.recorded_user : *b.owner;
  // A block recorded as used by another queue may still be in use by its owner too (compute
  // on both): the free point follows the owner's work enqueued so far as well.
  const TimelinePoint owner_done = detail::mark_other_user(b.owner, q);
  std::lock_guard lock(q.mutex);
  detail::enqueue_wait(q, owner_done);
  detail::enqueue_wait(q, b.last_access);
  detail::enqueue_wait(q, extra);
  TimelinePoint p = detail::enqueue_mark(q);
  detail::flush(q);
  return p;
}

// Return `b` to the pool at its free point; returns the point. When the free point cannot be
// enqueued (a lost device), nothing would order a later user of the memory after work that
// may still use it: the block stays allocated, held by the pool until the device closes, the
// handle becomes inert, and the error goes to the caller.
// Adopted memory never enters the pool: its free point is the release point handed to the
// engine, and a failure leaves only an inert handle (the engine learns of the lost device
// from the error and owns the memory).
TimelinePoint release_at_free_point(detail::DeviceState& d, const std::shared_ptr<detail::BlockState>& b,
                                    const TimelinePoint& extra) {
  TimelinePoint point;
  try {
    point = free_point(*b, extra);
  } catch (...) {
    if (!b->adopted) {
      std::lock_guard lock(d.pool.mutex);
      d.pool.quarantined.push_back(b);
    }
    b->released = true;
    throw;
  }
  if (b->adopted) {
    b->released = true;
  } else {
    detail::pool_release(d, *b, point);
  }
  return point;
}
}  // namespace

TimelinePoint DeviceBuffer::release(std::source_location where) {
  FERRY_REQUIRE(state_ != nullptr, "DeviceBuffer::release", "null or moved-from buffer", where);
  auto d = state_->device.lock();
  if (!d || d->closed.load()) {
    state_->released = true;  // inert after close: the segment is gone already
    return {};
  }
  FERRY_REQUIRE(!state_->released, "DeviceBuffer::release", "the buffer was already released (double release)", where);
  return release_at_free_point(*d, state_, {});
}

TimelinePoint DeviceBuffer::release_after(const TimelinePoint& point, std::source_location where) {
  auto& b = live_block(state_, "DeviceBuffer::release_after", where);
  if (point.empty()) return release(where);  // an empty point counts as reached: a plain release
  FERRY_REQUIRE(detail::access::semaphore(point)->device_id == b.device_id, "DeviceBuffer::release_after",
          "the point's semaphore belongs to another device", where);
  auto d = b.device.lock();
  return release_at_free_point(*d, state_, point);
}

TimelinePoint DeviceBuffer::release_unordered(std::source_location where) {
  auto& b = live_block(state_, "DeviceBuffer::release_unordered", where);
  FERRY_REQUIRE(b.adopted, "DeviceBuffer::release_unordered",
                "the buffer is a pool block, which the pool reuses in the owner's order: use release()", where);
  const auto& owed = b.owed;
  const bool owes_acquire = owed && !owed->taken.load(std::memory_order_acquire);
  FERRY_REQUIRE(!(owes_acquire && owed->from->family() != owed->to->family()), "DeviceBuffer::release_unordered",
                "the owner queue still owes the range's queue-family acquire: use release(), or record "
                "vulkan::engine_acquire's barrier first",
                where);
  // Within one queue family the semaphore wait on the returned point is the whole hand-over:
  // the owed acquire is dropped, so the owner's queue never records a barrier on a range the
  // engine may already have freed.
  if (owes_acquire) owed->taken.store(true, std::memory_order_release);
  // Every ferry access of the range is ordered before `last_access` (the executor's copies
  // complete in order, and each one followed the previous access), so that point alone is
  // the end of ferry's use.
  b.released = true;
  return b.last_access;
}

bool DeviceBuffer::adopted(std::source_location where) const {
  return live_block(state_, "DeviceBuffer::adopted", where).adopted;
}

// ---- DevicePool --------------------------------------------------------------------------

DeviceBuffer DevicePool::allocate(std::uint64_t bytes, const Queue& owner, AllocationOptions options,
                                  std::source_location where) {
  auto d = device_->shared_from_this();
  FERRY_REQUIRE(!d->closed.load(), "DevicePool::allocate", "the device is closed", where);
  FERRY_REQUIRE(bytes > 0, "DevicePool::allocate", "size 0 is not allowed", where);
  FERRY_REQUIRE(bytes <= detail::BlockAllocator::max_request(), "DevicePool::allocate",
          "size " + std::to_string(bytes) + " exceeds the largest supported allocation (2^52 bytes)", where);
  if (d->caps.device_memory_bytes != 0 && bytes > d->caps.device_memory_bytes) {
    // Known not to fit: say so without provoking the driver into an allocation failure.
    detail::fail(ErrorCode::out_of_memory,
                 "DevicePool::allocate: " + std::to_string(bytes) + " bytes exceed the device's memory (" +
                     std::to_string(d->caps.device_memory_bytes) + " bytes)",
                 where);
  }
  if (d->caps.max_allocation_bytes != 0 && bytes > d->caps.max_allocation_bytes) {
    detail::fail(ErrorCode::out_of_memory,
                 "DevicePool::allocate: " + std::to_string(bytes) + " bytes exceed the device's largest allocation (" +
                     std::to_string(d->caps.max_allocation_bytes) + " bytes)",
                 where);
  }
  detail::QueueState& q = detail::checked_queue(owner, "DevicePool::allocate", where);
  FERRY_REQUIRE(q.device_id == device_, "DevicePool::allocate", "the owner queue belongs to another device", where);
  std::shared_ptr<detail::QueueState> writer;
  if (options.first_writer) {
    detail::QueueState& w = detail::checked_queue(options.first_writer, "DevicePool::allocate", where);
    FERRY_REQUIRE(w.device_id == device_, "DevicePool::allocate", "the first writer belongs to another device", where);
    writer = detail::access::state(options.first_writer);
  }
  return detail::pool_allocate(*d, d, bytes, detail::access::state(owner), writer, options.tag, where);
}

std::uint64_t DevicePool::trim() {
  const std::source_location where = std::source_location::current();
  FERRY_REQUIRE(!device_->closed.load(), "DevicePool::trim", "the device is closed", where);
  const auto lock = detail::lock_pool(*device_, "DevicePool::trim", where);
  return detail::trim_locked(*device_);
}

void DevicePool::set_segment_callbacks(SegmentCallbacks callbacks, std::source_location where) {
  constexpr const char* fn = "DevicePool::set_segment_callbacks";
  FERRY_REQUIRE(!device_->closed.load(), fn, "the device is closed", where);
  const auto lock = detail::lock_pool(*device_, fn, where);
  detail::PoolState& p = device_->pool;
  std::vector<std::uint64_t> ids;
  ids.reserve(p.segments.size());
  for (const auto& [id, segment] : p.segments) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  std::size_t reported = 0;
  try {
    for (; reported < ids.size(); ++reported) {
      detail::invoke(*device_, callbacks.created, detail::segment_info(*device_, ids[reported]));
    }
  } catch (...) {
    // Undo what this `created` registered, newest first; nothing is installed.
    while (reported > 0) {
      --reported;
      try {
        detail::invoke(*device_, callbacks.destroyed, detail::segment_info(*device_, ids[reported]));
      } catch (...) {
        // The first exception is the one to report.
      }
    }
    throw;
  }
  p.callbacks = std::move(callbacks);
}

std::vector<SegmentInfo> DevicePool::segments(std::source_location where) const {
  FERRY_REQUIRE(!device_->closed.load(), "DevicePool::segments", "the device is closed", where);
  const auto lock = detail::lock_pool(*device_, "DevicePool::segments", where);
  std::vector<SegmentInfo> out;
  out.reserve(device_->pool.segments.size());
  for (const auto& [id, segment] : device_->pool.segments) out.push_back(detail::segment_info(*device_, id));
  std::sort(out.begin(), out.end(), [](const SegmentInfo& a, const SegmentInfo& b) { return a.id < b.id; });
  return out;
}

}  // namespace ferry
