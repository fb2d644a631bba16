// SPDX-License-Identifier: MIT
// The release points of the destinations ferry.torch's glue takes from PyTorch's caching
// allocator: which point a writer of a byte range must wait for before it reuses the range.
// It uses ferry's public API only (no Python, no torch); the binding exposes it to the tests.
//
// Thread-safety: each type locks its own state (ThrottledReached is used under its owner's).
#pragma once

#include <ferry/ferry.hpp>

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>

namespace ferry::python::torch {

/// Reached-ness of points on a hot path: the watermark first (free), the device at most once
/// per kQueryIntervalNs (one driver query costs about what a whole small copy's enqueue does,
/// and a point not known reached is at worst kept, or waited for on the device, a little
/// longer). Used under its owner's mutex.
class ThrottledReached {
 public:
  static constexpr std::int64_t kQueryIntervalNs = 50'000;
  bool operator()(const ferry::TimelinePoint& point);

 private:
  std::int64_t last_query_ns_ = INT64_MIN / 2;
};

/// The release points of the byte ranges ferry let go of on one target stream, while they may
/// still be in use there. A writer of a range waits for the latest point it overlaps: the
/// points are all on the target's timeline, so that one covers the others.
///
/// A call that takes one block per leaf asks once per leaf while the previous batch's hundreds
/// of ranges are still in use, so a lookup finds the overlapping ranges by address (a search
/// from the first range that can reach the asked one) rather than by a pass over every range.
class ReleasePoints {
 public:
  /// The point a writer of [pointer, pointer + nbytes) waits for (empty: no range it overlaps
  /// may still be in use). Drops the points found reached.
  ferry::TimelinePoint wait_for(std::uint64_t pointer, std::uint64_t nbytes);
  /// From any thread: record that [pointer, pointer + nbytes) is in use until `point`.
  void record(std::uint64_t pointer, std::uint64_t nbytes, const ferry::TimelinePoint& point);
  /// Ranges whose point was not known reached when last looked at.
  std::size_t pending();

 private:
  struct Freed {
    std::uint64_t end;
    ferry::TimelinePoint point;
  };
  using ByStart = std::multimap<std::uint64_t, Freed>;
  std::mutex mutex_;
  ByStart by_start_;                    ///< the ranges, by start address
  std::deque<ByStart::iterator> order_;  ///< the same, in the order recorded (the timeline's)
  std::uint64_t longest_ = 0;           ///< no range held is longer (reset when none is held)
  ThrottledReached reached_;            ///< under mutex_
};

}  // namespace ferry::python::torch
