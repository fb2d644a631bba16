// SPDX-License-Identifier: MIT
// Device pool statistics: the cheap budget, the detailed walk, invariant validation and the
// snapshot.
#include <algorithm>

#include "device_state.hpp"

namespace ferry {

PoolBudget DevicePool::get_budget() const {
  const auto lock = detail::lock_pool(*device_, "DevicePool::get_budget", {});
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
  const auto lock = detail::lock_pool(*device_, "DevicePool::calculate_statistics", {});
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
  const auto lock = detail::lock_pool(*device_, "DevicePool::reset_peaks", {});
  auto& b = device_->pool.budget;
  b.peak_reserved_bytes = b.reserved_bytes;
  b.peak_active_bytes = b.active_bytes;
  b.peak_stranded_bytes = b.stranded_bytes = 0;
  for (auto& [id, qb] : device_->pool.per_queue) qb.peak_active_bytes = qb.active_bytes;
}

namespace detail {

std::string pool_problems(const DeviceState& d) {
  const auto& p = d.pool;
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
  return problems;
}

}  // namespace detail

void DevicePool::validate(std::source_location where) const {
  const auto lock = detail::lock_pool(*device_, "DevicePool::validate", where);
  const std::string problems = detail::pool_problems(*device_);
  if (!problems.empty()) {
    throw Error(ErrorCode::internal_error, "DevicePool::validate: " + problems, {}, where);
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
  const auto lock = detail::lock_pool(*device_, "DevicePool::snapshot", {});
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
  const auto lock = detail::lock_pool(*device_, "DevicePool::clear_events", {});
  device_->pool.events.clear();
  std::lock_guard alock(device_->activity_mutex);
  device_->activity.clear();
  device_->unresolved_activity.clear();
}

}  // namespace ferry
