// SPDX-License-Identifier: MIT
// The pool's allocation algorithm: free lists, splitting, coalescing and the stream-ordering
// rules of the pool contract (include/ferry/pool.hpp), over abstract segments. No device, no
// vendor code: unit-tested on the CPU (tests/unit/block_allocator_test.cpp) with randomized
// sequences and validate().
//
// Vocabulary:
//  - A *timeline* is identified by a non-zero id (the front end assigns one per semaphore;
//    each queue's private progress timeline has one).
//  - A *free point* (timeline, value) is attached to a free block: the block's previous users
//    are done once that timeline reaches that value. timeline 0 = clean (free for everyone).
//  - A request has a *first user*: the timeline of the queue whose work touches the block
//    first. A pending block is usable at once by a first user on the same timeline (its work is
//    queued after the free point: stream order), by anyone once the point is reached, and, if
//    the request allows waiting, by anyone who waits for the point first.
//
// Not thread-safe: the front end holds the pool mutex around every call.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace ferry::detail {

/// A free point: the block is reusable by everyone once `timeline` reaches `value`.
struct FreePoint {
  std::uint32_t timeline = 0;  ///< 0 = clean
  std::uint64_t value = 0;
  [[nodiscard]] bool pending() const noexcept { return timeline != 0; }
};

class BlockAllocator {
 public:
  /// Size policy (PyTorch caching allocator's, so footprints compare like for like).
  struct Config {
    std::uint64_t alignment = 512;            ///< every block size and offset is a multiple
    std::uint64_t small_request = 1ull << 20;  ///< requests <= this use small segments
    std::uint64_t small_segment = 2ull << 20;  ///< size of a small segment
    std::uint64_t medium_request = 10ull << 20;///< requests < this share medium segments
    std::uint64_t medium_segment = 20ull << 20;///< size of a medium segment
    std::uint64_t large_round = 2ull << 20;    ///< larger requests: own segment, rounded up
  };

  struct Request {
    std::uint64_t bytes = 0;          ///< > 0, <= max_request()
    std::uint32_t owner = 0;          ///< owner queue id (bookkeeping only)
    std::uint32_t first_user = 0;     ///< timeline id of the queue that touches it first
    bool allow_pending = false;       ///< may hand out a block the first user must wait for
    void* user = nullptr;             ///< opaque, kept with the allocated block (Block::user)
  };

  struct Placement {
    std::uint64_t segment = 0;
    std::uint64_t offset = 0;
    std::uint64_t size = 0;     ///< rounded size actually reserved
    FreePoint wait;             ///< the first user must wait for this (clean = no wait)
    bool pending_reuse = false; ///< true when `wait` is pending
  };

  struct Block {
    std::uint64_t offset = 0;
    std::uint64_t size = 0;
    bool allocated = false;
    std::uint32_t owner = 0;          ///< owner queue (last owner when free)
    std::uint64_t requested = 0;      ///< requested bytes (allocated blocks)
    FreePoint free_point;             ///< free blocks only
    void* user = nullptr;             ///< allocated blocks: the request's `user` (the pool's buffer)
  };

  struct SegmentInfo {
    std::uint64_t size = 0;
    std::uint32_t queue = 0;  ///< queue the segment was created for
    bool small = false;       ///< serves requests <= small_request
    std::map<std::uint64_t, Block> blocks;  ///< by offset, covering [0, size)
  };

  /// Asks whether a free point has been reached (queries a semaphore; never blocks).
  /// Contract: monotone per timeline for the duration of one allocator call (a timeline only
  /// grows): allocate() infers the answer for a point from answers it already has for the same
  /// timeline in that call (a lower value was reached: reached; a value at or below one that
  /// was not reached: not reached) instead of asking again. The inference may only miss a
  /// point that was reached during the call, which is then used at a later call.
  using Reached = std::function<bool(const FreePoint&)>;

  BlockAllocator() = default;
  explicit BlockAllocator(Config config) : config_(config) {}

  [[nodiscard]] const Config& config() const noexcept { return config_; }
  /// Largest request the size arithmetic supports.
  [[nodiscard]] static constexpr std::uint64_t max_request() noexcept { return 1ull << 52; }
  /// Request size rounded to the alignment.
  [[nodiscard]] std::uint64_t round_size(std::uint64_t bytes) const noexcept;
  /// Size of the segment to create for a request of `bytes` that found no block.
  [[nodiscard]] std::uint64_t segment_size_for(std::uint64_t bytes) const noexcept;
  /// Whether a request of `bytes` is served by small segments.
  [[nodiscard]] bool is_small(std::uint64_t bytes) const noexcept {
    return round_size(bytes) <= config_.small_request;
  }

  /// Find a block: first the best fit usable without waiting, then (allow_pending) the best
  /// fit still pending. Returns nullopt when the pool must grow. "Best fit" is the smallest
  /// free block of the size class that holds the request; among blocks of one size, clean ones
  /// and the oldest free points first (then segment, offset). Cost: O(t s log n) for t
  /// timelines with free blocks in the class and s distinct sizes tried in each (usually 1):
  /// clean blocks and the first user's own are found by one lookup each; for a timeline of
  /// another queue, the oldest free point of a size answers for all blocks of that size (a
  /// timeline only grows), so blocks are not walked one by one. `reached` is asked only about
  /// pending blocks of other timelines than the first user's, only for sizes that could beat
  /// the best found so far, and not when an earlier answer of this call for the same timeline
  /// decides it (see Reached).
  std::optional<Placement> allocate(const Request& request, const Reached& reached);
  /// Add a segment (one free clean block). `id` must be new.
  void add_segment(std::uint64_t id, std::uint64_t size, std::uint32_t queue, bool small);
  /// Free an allocated block; it becomes usable per `point` (clean = at once for everyone).
  /// Returns the freed (rounded) size.
  std::uint64_t release(std::uint64_t segment, std::uint64_t offset, FreePoint point);
  /// Mark pending blocks whose point is reached as clean and coalesce them. Returns the bytes
  /// that became clean.
  std::uint64_t refresh(const Reached& reached);
  /// Segments with no allocated and no pending block.
  [[nodiscard]] std::vector<std::uint64_t> idle_segments() const;
  /// Remove an idle segment; returns its size.
  std::uint64_t remove_segment(std::uint64_t id);
  /// Stranded bytes for `request`: free bytes in segments of its size class that neither its
  /// first user nor its owner (`owner_timeline`, the owner queue's timeline) can reuse, i.e.
  /// blocks pending on a third timeline whose point is not reached. The owner's own pending
  /// blocks are not stranded (its later work is ordered after their free points), and a
  /// request that may wait for a pending block (`allow_pending`) strands nothing.
  [[nodiscard]] std::uint64_t unusable_free_bytes(const Request& request, std::uint32_t owner_timeline,
                                                  const Reached& reached) const;
  /// Check every invariant; returns an empty string or a description of the first broken one.
  [[nodiscard]] std::string validate() const;

  [[nodiscard]] const std::map<std::uint64_t, SegmentInfo>& segments() const noexcept {
    return segments_;
  }
  /// Free bytes pending on each timeline (timeline 0 = clean free bytes).
  [[nodiscard]] const std::unordered_map<std::uint32_t, std::uint64_t>& free_by_timeline() const noexcept {
    return free_by_timeline_;
  }
  [[nodiscard]] std::uint64_t free_bytes() const noexcept { return free_bytes_; }
  [[nodiscard]] std::uint64_t pending_blocks() const noexcept { return pending_blocks_; }

 private:
  // Free blocks of one size class, per timeline (0 = clean), keyed (size, free point value,
  // segment, offset): best fit is a lower_bound, and the blocks of one size come oldest free
  // point first, so when that one is not reached, none of that size is (see allocate).
  using Key = std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t>;
  using TimelineFree = std::set<Key>;
  using ClassIndex = std::map<std::uint32_t, TimelineFree>;

  [[nodiscard]] ClassIndex& class_index(const SegmentInfo& info) { return info.small ? free_small_ : free_large_; }
  void index_free(std::uint64_t segment, const SegmentInfo& info, const Block& block);
  void unindex_free(std::uint64_t segment, const SegmentInfo& info, const Block& block);
  /// Merge the free block at `it` with free neighbours that have the identical free point.
  void coalesce(std::uint64_t segment, SegmentInfo& info, std::map<std::uint64_t, Block>::iterator it);
  static bool mergeable(const Block& a, const Block& b) noexcept;
  Placement take(std::uint64_t segment, std::uint64_t offset, std::uint64_t rounded,
                 const Request& request, bool pending_reuse);

  Config config_;
  std::map<std::uint64_t, SegmentInfo> segments_;
  ClassIndex free_small_;
  ClassIndex free_large_;
  std::uint64_t pending_blocks_ = 0;
  std::unordered_map<std::uint32_t, std::uint64_t> free_by_timeline_;
  std::uint64_t free_bytes_ = 0;
};

}  // namespace ferry::detail
