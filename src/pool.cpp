// SPDX-License-Identifier: MIT
// Front end of the device pool (DESIGN §5) and the pinned host pool: argument checks,
// statistics, events, segment growth and the out-of-memory path, around BlockAllocator.
#include <algorithm>
#include <sstream>

#include "internal.hpp"
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

// The Reached callback of one pool call. Per timeline: the semaphore is looked up once (see
// pool_semaphore), its watermark answers points at or below it, and the backend is queried at
// most once (DESIGN §5: by querying, never blocking). Only for the duration of one call: a
// reached value older than the call could hide completed work, never claim incomplete work.
// A `lazy` query asks the backend only when the timeline's last query is older than
// kHotPathQueryIntervalNs (an allocation's first pass: see pool_allocate).
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
      k.value = lazy ? query_value_throttled(*k.semaphore, now) : query_value(*k.semaphore);
      k.queried = true;
    }
    return k.value >= value;
  }

  bool operator()(const FreePoint& fp) { return !fp.pending() || reached(entry(fp.timeline), fp.value); }
};

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
  for (std::uint64_t id : p.allocator.idle_segments()) {
    const std::uint64_t address = segment_address(p, id);
    const std::uint32_t queue = p.allocator.segments().at(id).queue;
    const std::uint64_t size = p.allocator.remove_segment(id);
    auto node = p.segments.extract(id);
    d.backend->free_segment(std::move(node.mapped()));
    returned += size;
    p.budget.reserved_bytes -= size;
    p.budget.segment_count -= 1;
    record(d, PoolEventKind::segment_free, address, size, queue, {}, now);
  }
  return returned;
}

}  // namespace

HostAllocation::~HostAllocation() {
  if (!memory) return;
  auto d = device.lock();
  if (!d || d->closed.load()) return;  // freed by host_pool_close
  std::lock_guard lock(d->host.mutex);
  if (!memory) return;
  if (memory->registered) {
    d->host.registered.erase(reinterpret_cast<std::uintptr_t>(memory->ptr));
  } else {
    d->host.pinned_bytes -= memory->size;
  }
  try {
    d->backend->free_host(std::move(memory));
  } catch (...) {
    // Destructors do not throw; a failing free leaves the memory to the driver's teardown.
  }
}

DeviceBuffer pool_allocate(DeviceState& d, const std::shared_ptr<DeviceState>& self, std::uint64_t bytes,
                           const std::shared_ptr<QueueState>& owner,
                           const std::shared_ptr<QueueState>& first_writer, const std::string& tag,
                           const std::source_location& where, bool allow_pending_reuse) {
  PoolState& p = d.pool;
  std::lock_guard lock(p.mutex);
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
      const bool small = p.allocator.is_small(bytes);
      p.allocator.add_segment(id, segment_bytes, owner->id, small);
      p.segments.emplace(id, std::move(segment));
      p.budget.reserved_bytes += segment_bytes;
      p.budget.segment_count += 1;
      p.budget.segment_allocations += 1;
      record(d, PoolEventKind::segment_alloc, segment_address(p, id), segment_bytes, owner->id, tag, now);
      placement = p.allocator.allocate(request, std::ref(reached));
    }
  }
  if (!placement) {
    throw Error(ErrorCode::backend_error, "DevicePool::allocate: internal error: a fresh segment did not fit " +
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
  block->tag = tag;
  if (placement->pending_reuse) {
    // The first pass looked the timeline up already (the second pass, when it ran, too).
    block->ready_after = TimelinePoint{lazy.entry(placement->wait.timeline).semaphore, placement->wait.value};
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
  return DeviceBuffer(std::move(block));
}

// Return a block to the allocator with a free point (caller validated the block).
void pool_release(DeviceState& d, BlockState& b, const TimelinePoint& point) {
  PoolState& p = d.pool;
  std::lock_guard lock(p.mutex);
  // The watermark only: `point` is usually the owner's mark just enqueued, which a query would
  // rarely find reached; the next pool call that needs it queries (and cleans) it.
  FreePoint fp;
  if (!point.empty() && !point.semaphore->known_reached(point.value)) {
    fp = FreePoint{point.semaphore->timeline_id, point.value};
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
    if (!semaphore) semaphore = point.semaphore;
    auto pos = frees.end();  // usually the greatest value so far: insert from the back
    while (pos != frees.begin() && std::prev(pos)->point.value > fp.value) --pos;
    frees.insert(pos, PoolState::PendingFree{fp, address, b.size, b.owner->id, b.tag});
  }
  b.released = true;
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
      d.backend->free_segment(std::move(segment));
    } catch (...) {
      // Teardown continues; the driver reclaims the rest with the device.
    }
  }
  p.segments.clear();
  p.allocator = BlockAllocator(p.allocator.config());
  p.quarantined.clear();
}

void host_pool_close(DeviceState& d) noexcept {
  std::lock_guard lock(d.host.mutex);
  for (auto& w : d.host.live) {
    if (auto a = w.lock()) {
      if (a->memory) {
        try {
          d.backend->free_host(std::move(a->memory));
        } catch (...) {
        }
      }
    }
  }
  d.host.live.clear();
  d.host.registered.clear();
  d.host.pinned_bytes = 0;
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
  return Queue(live_block(state_, "DeviceBuffer::owner", where).owner);
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
  std::lock_guard lock(q.mutex);
  detail::enqueue_wait(q, b.last_access);
  detail::enqueue_wait(q, extra);
  TimelinePoint p = detail::enqueue_mark(q);
  q.backend->flush();
  return p;
}

// Return `b` to the pool at its free point. When the free point cannot be enqueued (a lost
// device), nothing would order a later user of the memory after work that may still use it:
// the block stays allocated, held by the pool until the device closes, the handle becomes
// inert, and the error goes to the caller.
void release_at_free_point(detail::DeviceState& d, const std::shared_ptr<detail::BlockState>& b,
                           const TimelinePoint& extra) {
  TimelinePoint point;
  try {
    point = free_point(*b, extra);
  } catch (...) {
    std::lock_guard lock(d.pool.mutex);
    d.pool.quarantined.push_back(b);
    b->released = true;
    throw;
  }
  detail::pool_release(d, *b, point);
}
}  // namespace

void DeviceBuffer::release(std::source_location where) {
  FERRY_REQUIRE(state_ != nullptr, "DeviceBuffer::release", "null or moved-from buffer", where);
  auto d = state_->device.lock();
  if (!d || d->closed.load()) {
    state_->released = true;  // inert after close: the segment is gone already
    return;
  }
  FERRY_REQUIRE(!state_->released, "DeviceBuffer::release", "the buffer was already released (double release)", where);
  release_at_free_point(*d, state_, {});
}

void DeviceBuffer::release_after(const TimelinePoint& point, std::source_location where) {
  auto& b = live_block(state_, "DeviceBuffer::release_after", where);
  if (point.empty()) {  // an empty point counts as reached: a plain release
    release(where);
    return;
  }
  FERRY_REQUIRE(point.semaphore->device_id == b.device_id, "DeviceBuffer::release_after",
          "the point's semaphore belongs to another device", where);
  auto d = b.device.lock();
  release_at_free_point(*d, state_, point);
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
    writer = options.first_writer.state();
  }
  return detail::pool_allocate(*d, d, bytes, owner.state(), writer, options.tag, where);
}

PoolBudget DevicePool::get_budget() const {
  std::lock_guard lock(device_->pool.mutex);
  PoolBudget b = device_->pool.budget;
  const auto& free_by = device_->pool.allocator.free_by_timeline();
  std::unordered_map<std::uint32_t, std::uint32_t> timeline_of;  // queue id -> its timeline
  {
    std::lock_guard dl(device_->mutex);
    for (const auto& q : device_->queues) timeline_of[q->id] = q->timeline->timeline_id;
  }
  for (const auto& [id, qb] : device_->pool.per_queue) {
    QueueBudget copy = qb;
    if (auto t = timeline_of.find(id); t != timeline_of.end()) {
      auto it = free_by.find(t->second);
      copy.free_bytes = it == free_by.end() ? 0 : it->second;
    }
    b.queues.push_back(std::move(copy));
  }
  return b;
}

PoolDetailedStatistics DevicePool::calculate_statistics() const {
  PoolDetailedStatistics s;
  s.budget = get_budget();
  std::lock_guard lock(device_->pool.mutex);
  detail::ReachedQuery reached(*device_);
  for (const auto& [id, info] : device_->pool.allocator.segments()) {
    bool idle = true;
    for (const auto& [offset, block] : info.blocks) {
      if (block.allocated) {
        ++s.allocated_blocks;
        idle = false;
      } else {
        ++s.free_blocks;
        s.largest_free_block = std::max(s.largest_free_block, block.size);
        if (block.free_point.pending() && !reached(block.free_point)) ++s.pending_free_blocks;
      }
    }
    if (idle) ++s.idle_segments;
  }
  return s;
}

void DevicePool::reset_peaks() {
  std::lock_guard lock(device_->pool.mutex);
  auto& b = device_->pool.budget;
  b.peak_reserved_bytes = b.reserved_bytes;
  b.peak_active_bytes = b.active_bytes;
  b.peak_stranded_bytes = b.stranded_bytes = 0;
  for (auto& [id, qb] : device_->pool.per_queue) qb.peak_active_bytes = qb.active_bytes;
}

std::uint64_t DevicePool::trim() {
  FERRY_REQUIRE(!device_->closed.load(), "DevicePool::trim", "the device is closed", std::source_location::current());
  std::lock_guard lock(device_->pool.mutex);
  return detail::trim_locked(*device_);
}

void DevicePool::validate() const {
  std::lock_guard lock(device_->pool.mutex);
  const auto& p = device_->pool;
  std::string problems = p.allocator.validate();
  std::uint64_t reserved = 0;
  std::uint64_t active = 0;
  for (const auto& [id, info] : p.allocator.segments()) {
    reserved += info.size;
    if (!p.segments.contains(id)) problems += "segment " + std::to_string(id) + " has no backend memory; ";
    for (const auto& [offset, block] : info.blocks) {
      if (block.allocated) {
        active += block.size;
        if (block.user == nullptr) problems += "allocated block without a live buffer; ";
      }
    }
  }
  if (reserved != p.budget.reserved_bytes) problems += "reserved_bytes counter out of date; ";
  if (active != p.budget.active_bytes) problems += "active_bytes counter out of date; ";
  if (!problems.empty()) {
    throw Error(ErrorCode::backend_error, "DevicePool::validate: " + problems, {}, std::source_location::current());
  }
}

MemorySnapshot DevicePool::snapshot() const {
  MemorySnapshot snap;
  snap.device_name = device_->caps.name;
  snap.backend = std::string(to_string(device_->options.backend));
  {
    std::lock_guard lock(device_->mutex);
    for (const auto& q : device_->queues) {
      snap.queues.push_back({q->id, q->name, q->role == QueueRole::compute ? "compute" : "transfer"});
    }
  }
  {
    std::lock_guard lock(device_->activity_mutex);
    detail::resolve_activity(*device_, /*force=*/true);
    snap.activity.assign(device_->activity.begin(), device_->activity.end());
  }
  std::lock_guard lock(device_->pool.mutex);
  const auto& p = device_->pool;
  detail::ReachedQuery reached(*device_);
  detail::complete_frees(*device_, reached, detail::steady_now_ns());
  for (const auto& [id, info] : p.allocator.segments()) {
    SnapshotSegment seg;
    seg.address = detail::segment_address(p, id);
    seg.total_size = info.size;
    seg.queue_id = info.queue;
    seg.large = !info.small;
    for (const auto& [offset, block] : info.blocks) {
      SnapshotBlock sb;
      sb.address = seg.address + offset;
      sb.size = block.size;
      sb.queue_id = block.owner;
      if (block.allocated) {
        sb.state = BlockStateKind::active_allocated;
        sb.requested_size = block.requested;
        if (block.user != nullptr) sb.tag = static_cast<const detail::BlockState*>(block.user)->tag;
        seg.allocated_size += block.size;
        seg.active_size += block.size;
        seg.requested_size += block.requested;
      } else if (block.free_point.pending() && !reached(block.free_point)) {
        sb.state = BlockStateKind::active_pending_free;
        seg.active_size += block.size;
      } else {
        sb.state = BlockStateKind::inactive;
      }
      seg.blocks.push_back(std::move(sb));
    }
    snap.segments.push_back(std::move(seg));
  }
  snap.events.assign(p.events.begin(), p.events.end());
  return snap;
}

void DevicePool::clear_events() {
  std::lock_guard lock(device_->pool.mutex);
  device_->pool.events.clear();
  std::lock_guard alock(device_->activity_mutex);
  device_->activity.clear();
  device_->unresolved_activity.clear();
}

// ---- HostBuffer / HostPool ---------------------------------------------------------------

namespace {
const detail::HostMemory& live_host(const std::shared_ptr<detail::HostAllocation>& s, const char* function,
                                    const std::source_location& where) {
  FERRY_REQUIRE(s != nullptr, function, "null or moved-from host buffer", where);
  FERRY_REQUIRE(s->memory != nullptr, function, "the device of this host buffer is closed", where);
  return *s->memory;
}
}  // namespace

std::span<std::byte> HostBuffer::span(std::source_location where) const {
  const auto& m = live_host(state_, "HostBuffer::span", where);
  return {m.ptr, static_cast<std::size_t>(m.size)};
}
std::byte* HostBuffer::data(std::source_location where) const {
  return live_host(state_, "HostBuffer::data", where).ptr;
}
std::uint64_t HostBuffer::size(std::source_location where) const {
  return live_host(state_, "HostBuffer::size", where).size;
}
bool HostBuffer::registered(std::source_location where) const {
  return live_host(state_, "HostBuffer::registered", where).registered;
}

HostBuffer HostPool::allocate(std::uint64_t bytes, std::source_location where) {
  auto d = device_->shared_from_this();
  FERRY_REQUIRE(!d->closed.load(), "HostPool::allocate", "the device is closed", where);
  FERRY_REQUIRE(bytes > 0, "HostPool::allocate", "size 0 is not allowed", where);
  FERRY_REQUIRE(bytes <= (1ull << 46), "HostPool::allocate",
          "size " + std::to_string(bytes) + " exceeds the largest supported pinned allocation (64 TiB)", where);
  auto a = std::make_shared<detail::HostAllocation>();
  a->device = d;
  a->device_id = device_;
  try {
    a->memory = d->backend->allocate_host(bytes);
  } catch (const Error& err) {
    throw Error(err.code(), "HostPool::allocate(" + std::to_string(bytes) + "): " + err.message(), err.call(), where);
  }
  std::lock_guard lock(d->host.mutex);
  d->host.pinned_bytes += a->memory->size;
  std::erase_if(d->host.live, [](const auto& w) { return w.expired(); });
  d->host.live.push_back(a);
  return HostBuffer(std::move(a));
}

HostBuffer HostPool::register_memory(std::span<std::byte> memory, std::source_location where) {
  auto d = device_->shared_from_this();
  FERRY_REQUIRE(!d->closed.load(), "HostPool::register_memory", "the device is closed", where);
  FERRY_REQUIRE(!memory.empty() && memory.data() != nullptr, "HostPool::register_memory", "empty span", where);
  const auto start = reinterpret_cast<std::uintptr_t>(memory.data());
  const auto end = start + memory.size();
  FERRY_REQUIRE(end > start, "HostPool::register_memory", "the range wraps around the address space", where);
  std::lock_guard lock(d->host.mutex);
  auto next = d->host.registered.lower_bound(start);
  const bool overlaps_next = next != d->host.registered.end() && next->first < end;
  const bool overlaps_prev = next != d->host.registered.begin() && std::prev(next)->second > start;
  FERRY_REQUIRE(!overlaps_next && !overlaps_prev, "HostPool::register_memory",
          "the range overlaps memory registered before", where);
  auto a = std::make_shared<detail::HostAllocation>();
  a->device = d;
  a->device_id = device_;
  try {
    a->memory = d->backend->register_host(memory.data(), memory.size());
  } catch (const Error& err) {
    throw Error(err.code(), "HostPool::register_memory: " + err.message(), err.call(), where);
  }
  d->host.registered.emplace(start, end);
  std::erase_if(d->host.live, [](const auto& w) { return w.expired(); });
  d->host.live.push_back(a);
  return HostBuffer(std::move(a));
}

std::uint64_t HostPool::pinned_bytes() const {
  std::lock_guard lock(device_->host.mutex);
  return device_->host.pinned_bytes;
}

}  // namespace ferry
