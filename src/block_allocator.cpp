// SPDX-License-Identifier: MIT
#include "block_allocator.hpp"

#include <algorithm>
#include <sstream>

#include "small_vector.hpp"

namespace ferry::detail {

std::uint64_t BlockAllocator::round_size(std::uint64_t bytes) const noexcept {
  const std::uint64_t a = config_.alignment;
  return bytes == 0 ? a : (bytes + a - 1) / a * a;
}

std::uint64_t BlockAllocator::segment_size_for(std::uint64_t bytes) const noexcept {
  const std::uint64_t rounded = round_size(bytes);
  if (rounded <= config_.small_request) return config_.small_segment;
  if (rounded < config_.medium_request) return config_.medium_segment;
  const std::uint64_t r = config_.large_round;
  return (rounded + r - 1) / r * r;
}

bool BlockAllocator::mergeable(const Block& a, const Block& b) noexcept {
  // Only identical free points merge: merging A@3 with A@7 would make the older half wait for
  // 7, re-stranding memory that is already reusable (refresh() merges them once clean).
  return !a.allocated && !b.allocated && a.free_point.timeline == b.free_point.timeline &&
         a.free_point.value == b.free_point.value;
}

void BlockAllocator::index_free(std::uint64_t segment, const SegmentInfo& info, const Block& block) {
  const FreePoint& fp = block.free_point;
  class_index(info)[fp.timeline].emplace(block.size, fp.value, segment, block.offset);
  if (fp.pending()) ++pending_blocks_;
  free_bytes_ += block.size;
  free_by_timeline_[fp.timeline] += block.size;
}

void BlockAllocator::unindex_free(std::uint64_t segment, const SegmentInfo& info, const Block& block) {
  const FreePoint& fp = block.free_point;
  ClassIndex& index = class_index(info);
  auto t = index.find(fp.timeline);
  t->second.erase(Key{block.size, fp.value, segment, block.offset});
  if (fp.pending()) --pending_blocks_;
  // An emptied timeline keeps its (empty) entry: the clean one empties and fills on most
  // allocations. refresh() drops the empty entries of other timelines (they come and go with
  // their queues).
  free_bytes_ -= block.size;
  auto it = free_by_timeline_.find(fp.timeline);
  it->second -= block.size;
  if (it->second == 0) free_by_timeline_.erase(it);
}

void BlockAllocator::coalesce(std::uint64_t segment, SegmentInfo& info,
                              std::map<std::uint64_t, Block>::iterator it) {
  // Caller has *not* indexed `it` yet; neighbours are indexed and get unindexed when merged.
  if (it != info.blocks.begin()) {
    auto prev = std::prev(it);
    if (mergeable(prev->second, it->second)) {
      unindex_free(segment, info, prev->second);
      prev->second.size += it->second.size;
      prev->second.free_point.value =
          std::max(prev->second.free_point.value, it->second.free_point.value);
      info.blocks.erase(it);
      it = prev;
    }
  }
  auto next = std::next(it);
  if (next != info.blocks.end() && mergeable(it->second, next->second)) {
    unindex_free(segment, info, next->second);
    it->second.size += next->second.size;
    it->second.free_point.value = std::max(it->second.free_point.value, next->second.free_point.value);
    info.blocks.erase(next);
  }
  index_free(segment, info, it->second);
}

BlockAllocator::Placement BlockAllocator::take(std::uint64_t segment, std::uint64_t offset,
                                               std::uint64_t rounded, const Request& request,
                                               bool pending_reuse) {
  SegmentInfo& info = segments_.at(segment);
  auto it = info.blocks.find(offset);
  Block& block = it->second;
  const FreePoint point = block.free_point;
  if (block.size > rounded) {
    // Split: the remainder keeps the free point, so its index entry is the block's, re-keyed
    // in place (no index node freed and made again on the allocation path).
    Block rest;
    rest.offset = block.offset + rounded;
    rest.size = block.size - rounded;
    rest.owner = block.owner;
    rest.free_point = point;
    TimelineFree& free = class_index(info).at(point.timeline);
    auto node = free.extract(Key{block.size, point.value, segment, block.offset});
    node.value() = Key{rest.size, point.value, segment, rest.offset};
    free.insert(std::move(node));
    free_bytes_ -= rounded;
    free_by_timeline_.at(point.timeline) -= rounded;  // the remainder keeps it above 0
    block.size = rounded;
    info.blocks.emplace(rest.offset, rest);
  } else {
    unindex_free(segment, info, block);
  }
  block.allocated = true;
  block.owner = request.owner;
  block.requested = request.bytes;
  block.user = request.user;
  block.free_point = {};
  Placement p;
  p.segment = segment;
  p.offset = offset;
  p.size = rounded;
  p.pending_reuse = pending_reuse;
  if (pending_reuse) p.wait = point;
  return p;
}

namespace {

/// What one allocate() call learnt about each timeline: values known reached / not reached.
/// See BlockAllocator::Reached for the monotonicity this relies on.
class ReachedMemo {
 public:
  explicit ReachedMemo(const BlockAllocator::Reached& reached) : reached_(reached) {}

  bool operator()(const FreePoint& fp) {
    Entry* e = nullptr;
    for (auto& x : entries_) {
      if (x.timeline == fp.timeline) e = &x;
    }
    if (e == nullptr) e = &entries_.push_back(Entry{fp.timeline});
    if (e->any_reached && fp.value <= e->max_reached) return true;
    if (e->any_unreached && fp.value >= e->min_unreached) return false;
    if (reached_(fp)) {
      e->max_reached = e->any_reached ? std::max(e->max_reached, fp.value) : fp.value;
      e->any_reached = true;
      return true;
    }
    e->min_unreached = e->any_unreached ? std::min(e->min_unreached, fp.value) : fp.value;
    e->any_unreached = true;
    return false;
  }

 private:
  struct Entry {
    std::uint32_t timeline = 0;
    bool any_reached = false;
    bool any_unreached = false;
    std::uint64_t max_reached = 0;
    std::uint64_t min_unreached = 0;
  };
  const BlockAllocator::Reached& reached_;
  SmallVector<Entry, 4> entries_;  // a few timelines per call
};

}  // namespace

std::optional<BlockAllocator::Placement> BlockAllocator::allocate(const Request& request,
                                                                  const Reached& reached) {
  const std::uint64_t rounded = round_size(request.bytes);
  const bool small = rounded <= config_.small_request;
  const ClassIndex& index = small ? free_small_ : free_large_;
  // Large requests do not carve up segments much bigger than they are (PyTorch: a request
  // >= 1 MiB never takes a block more than 20 MiB bigger), so big segments stay whole.
  const std::uint64_t max_waste = small ? UINT64_MAX : config_.medium_segment;
  const Key from{rounded, 0, 0, 0};
  const auto fits = [&](const Key& k) { return std::get<0>(k) - rounded <= max_waste; };

  // Usable at once: the best clean block, and the best block the first user freed itself
  // (its work is queued after the free point). Then other timelines, below.
  std::optional<Key> best;
  struct Other {
    Key first;  // the timeline's best fit, reached or not
    std::uint32_t timeline;
    const TimelineFree* free;
  };
  SmallVector<Other, 8> others;
  for (const auto& [timeline, t] : index) {
    const auto it = t.lower_bound(from);
    if (it == t.end() || !fits(*it)) continue;
    if (timeline == 0 || timeline == request.first_user) {
      if (!best || *it < *best) best = *it;
    } else {
      others.push_back(Other{*it, timeline, &t});
    }
  }
  // Another queue's blocks are usable once their free point is reached. In the order of their
  // best fits, each timeline that could still beat `best`: per size from the best fit up, the
  // oldest free point of that size answers: reached, that block is the timeline's best;
  // not reached, no block of that size is, and the next size is tried.
  std::sort(others.begin(), others.end(), [](const Other& x, const Other& y) { return x.first < y.first; });
  ReachedMemo memo(reached);
  for (const Other& o : others) {
    if (best && !(o.first < *best)) break;
    for (auto it = o.free->lower_bound(from); it != o.free->end();) {
      if (!fits(*it) || (best && !(*it < *best))) break;
      const auto [size, value, segment, offset] = *it;
      if (memo(FreePoint{o.timeline, value})) {
        best = *it;
        break;
      }
      it = o.free->lower_bound(Key{size + 1, 0, 0, 0});  // the next size
    }
  }
  if (best) {
    const auto [size, value, segment, offset] = *best;
    return take(segment, offset, rounded, request, false);
  }
  // Nothing usable at once: the best fit among the pending blocks, whose point the first user
  // will wait for (of one size, the oldest point). `others` holds each timeline's best fit.
  if (request.allow_pending && !others.empty()) {
    const auto [size, value, segment, offset] = others.front().first;
    return take(segment, offset, rounded, request, true);
  }
  return std::nullopt;
}

void BlockAllocator::add_segment(std::uint64_t id, std::uint64_t size, std::uint32_t queue,
                                 bool small) {
  SegmentInfo info;
  info.size = size;
  info.queue = queue;
  info.small = small;
  Block block;
  block.offset = 0;
  block.size = size;
  block.owner = queue;
  info.blocks.emplace(0, block);
  auto [it, inserted] = segments_.emplace(id, std::move(info));
  (void)inserted;
  index_free(id, it->second, it->second.blocks.at(0));
}

std::uint64_t BlockAllocator::release(std::uint64_t segment, std::uint64_t offset, FreePoint point) {
  SegmentInfo& info = segments_.at(segment);
  auto it = info.blocks.find(offset);
  Block& block = it->second;
  const std::uint64_t size = block.size;
  block.allocated = false;
  block.requested = 0;
  block.user = nullptr;
  block.free_point = point;
  coalesce(segment, info, it);
  return size;
}

std::uint64_t BlockAllocator::refresh(const Reached& reached) {
  std::uint64_t cleaned = 0;
  ReachedMemo memo(reached);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> done;
  for (const ClassIndex* index : {&free_small_, &free_large_}) {
    for (const auto& [timeline, t] : *index) {
      if (timeline == 0) continue;
      for (const auto& [size, value, segment, offset] : t) {
        if (memo(FreePoint{timeline, value})) done.emplace_back(segment, offset);
      }
    }
  }
  for (ClassIndex* index : {&free_small_, &free_large_}) {
    std::erase_if(*index, [](const auto& entry) { return entry.first != 0 && entry.second.empty(); });
  }
  for (const auto& [segment, offset] : done) {
    SegmentInfo& info = segments_.at(segment);
    auto it = info.blocks.find(offset);
    if (it == info.blocks.end() || it->second.allocated || !it->second.free_point.pending()) {
      continue;  // merged into a neighbour already
    }
    unindex_free(segment, info, it->second);
    it->second.free_point = {};
    cleaned += it->second.size;
    coalesce(segment, info, it);
  }
  return cleaned;
}

std::vector<std::uint64_t> BlockAllocator::idle_segments() const {
  std::vector<std::uint64_t> idle;
  for (const auto& [id, info] : segments_) {
    if (info.blocks.size() == 1) {
      const Block& b = info.blocks.begin()->second;
      if (!b.allocated && !b.free_point.pending()) idle.push_back(id);
    }
  }
  return idle;
}

std::uint64_t BlockAllocator::remove_segment(std::uint64_t id) {
  auto it = segments_.find(id);
  const std::uint64_t size = it->second.size;
  unindex_free(id, it->second, it->second.blocks.begin()->second);
  segments_.erase(it);
  return size;
}

std::uint64_t BlockAllocator::unusable_free_bytes(const Request& request, std::uint32_t owner_timeline,
                                                  const Reached& reached) const {
  if (request.allow_pending) return 0;
  std::uint64_t total = 0;
  ReachedMemo memo(reached);
  for (const auto& [timeline, t] : is_small(request.bytes) ? free_small_ : free_large_) {
    if (timeline == 0 || timeline == request.first_user || timeline == owner_timeline) continue;
    for (const auto& [size, value, segment, offset] : t) {
      if (!memo(FreePoint{timeline, value})) total += size;
    }
  }
  return total;
}

std::string BlockAllocator::validate() const {
  std::ostringstream err;
  std::uint64_t free_total = 0;
  std::size_t free_count = 0;
  std::size_t pending_count = 0;
  std::unordered_map<std::uint32_t, std::uint64_t> by_timeline;
  for (const auto& [id, info] : segments_) {
    std::uint64_t expect = 0;
    const Block* prev = nullptr;
    for (const auto& [offset, b] : info.blocks) {
      if (offset != b.offset) err << "segment " << id << ": block key " << offset << " != offset " << b.offset << "; ";
      if (b.offset != expect) err << "segment " << id << ": gap or overlap at " << b.offset << " (expected " << expect << "); ";
      if (b.size == 0 || b.size % config_.alignment != 0) err << "segment " << id << ": block at " << b.offset << " has bad size " << b.size << "; ";
      if (b.allocated && b.free_point.pending()) err << "segment " << id << ": allocated block at " << b.offset << " has a free point; ";
      if (b.allocated && (b.requested == 0 || b.requested > b.size)) err << "segment " << id << ": block at " << b.offset << " requested " << b.requested << " of " << b.size << "; ";
      if (!b.allocated) {
        ++free_count;
        free_total += b.size;
        by_timeline[b.free_point.timeline] += b.size;
        const auto& index = info.small ? free_small_ : free_large_;
        const auto t = index.find(b.free_point.timeline);
        if (t == index.end() || !t->second.contains(Key{b.size, b.free_point.value, id, b.offset})) {
          err << "segment " << id << ": free block at " << b.offset << " not indexed under its free point; ";
        }
        if (b.free_point.pending()) ++pending_count;
        if (prev != nullptr && mergeable(*prev, b)) err << "segment " << id << ": uncoalesced free blocks at " << prev->offset << " and " << b.offset << "; ";
      }
      expect = b.offset + b.size;
      prev = &b;
    }
    if (expect != info.size) err << "segment " << id << ": blocks cover " << expect << " of " << info.size << "; ";
  }
  std::size_t indexed_count = 0;
  for (const ClassIndex* index : {&free_small_, &free_large_}) {
    for (const auto& [timeline, t] : *index) indexed_count += t.size();
  }
  if (free_count != indexed_count) err << "free index holds " << indexed_count << " blocks, segments hold " << free_count << "; ";
  if (pending_count != pending_blocks_) err << "pending block counter " << pending_blocks_ << " != " << pending_count << "; ";
  if (free_total != free_bytes_) err << "free bytes counter " << free_bytes_ << " != " << free_total << "; ";
  if (by_timeline != free_by_timeline_) err << "per-timeline free bytes out of date; ";
  return err.str();
}

}  // namespace ferry::detail
