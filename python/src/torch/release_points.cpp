// SPDX-License-Identifier: MIT
// The release points of ferry.torch's destinations (release_points.hpp).
#include "release_points.hpp"

#include <chrono>

namespace ferry::python::torch {

bool ThrottledReached::operator()(const ferry::TimelinePoint& point) {
  if (point.known_reached()) return true;
  const std::int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
  if (now - last_query_ns_ < kQueryIntervalNs) return false;
  last_query_ns_ = now;
  return point.reached();  // raises the watermark for the points behind it too
}

ferry::TimelinePoint ReleasePoints::wait_for(std::uint64_t pointer, std::uint64_t nbytes) {
  const std::uint64_t end = pointer + nbytes;
  ferry::TimelinePoint wait;
  std::lock_guard<std::mutex> lock(mutex_);
  // Release points of one target are recorded in the order of its timeline, so the reached
  // ones lead. An entry recorded out of order behind an unreached one stays until those
  // before it are reached; an entry not known reached is waited for on the device, which
  // costs no more than asking.
  while (!order_.empty() && reached_(order_.front()->second.point)) {
    by_start_.erase(order_.front());
    order_.pop_front();
  }
  if (order_.empty()) longest_ = 0;
  // A range that starts `longest_` bytes or more before `pointer` ends at or before it.
  const std::uint64_t from = pointer >= longest_ ? pointer - longest_ + 1 : 0;
  for (auto it = by_start_.lower_bound(from); it != by_start_.end() && it->first < end; ++it) {
    const Freed& f = it->second;
    if (pointer < f.end && (wait.empty() || f.point.value > wait.value)) wait = f.point;
  }
  return wait;
}

void ReleasePoints::record(std::uint64_t pointer, std::uint64_t nbytes, const ferry::TimelinePoint& point) {
  if (point.empty() || nbytes == 0) return;  // reached points are dropped by the next query, which asks anyway
  std::lock_guard<std::mutex> lock(mutex_);
  order_.push_back(by_start_.emplace(pointer, Freed{pointer + nbytes, point}));
  if (nbytes > longest_) longest_ = nbytes;
}

std::size_t ReleasePoints::pending() {
  std::lock_guard<std::mutex> lock(mutex_);
  return order_.size();
}

}  // namespace ferry::python::torch
