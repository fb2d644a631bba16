// SPDX-License-Identifier: MIT
// The queue activity trace: spans recorded at enqueue, ended when their point is seen reached.
#include <algorithm>
#include <iterator>

#include "device_state.hpp"

namespace ferry::detail {

void resolve_activity(DeviceState& device, bool force) { resolve_activity(device, force, steady_now_ns()); }

void resolve_activity(DeviceState& device, bool force, std::int64_t steady_now) {
  if (device.unresolved_activity.empty()) return;
  const std::uint64_t now = device.since_opened_ns(steady_now);
  // On the hot path (every copy records a span) look at most every 10 us, and ask the
  // backend about a timeline at most every CompletionPolicy::kHotPathQueryIntervalNs: a span's end is "first
  // seen complete" either way, so this bounds its error by that interval and keeps driver
  // queries off the copy path. Snapshots force a full resolve.
  if (!force && now - device.last_resolve_ns < CompletionPolicy::kActivityResolveIntervalNs) return;
  device.last_resolve_ns = now;
  // Spans of one semaphore are kept in increasing end value: one query per semaphore, and
  // the first span not reached ends the scan of that semaphore.
  std::erase_if(device.unresolved_activity, [&](DeviceState::UnresolvedSpans& u) {
    SemaphoreState& s = *u.semaphore;
    std::uint64_t value = s.reached.load(std::memory_order_acquire);
    if (value < u.spans.front().first) value = force ? observe(s) : observe_throttled(s, steady_now);
    while (!u.spans.empty() && u.spans.front().first <= value) {
      device.activity[u.spans.front().second].end_ns = now;
      u.spans.pop_front();
    }
    return u.spans.empty();
  });
}

void record_activity(DeviceState& device, const QueueState& q, std::string name, std::uint64_t bytes,
                     const TimelinePoint& done) {
  if (!device.options.record_events) return;
  std::lock_guard lock(device.activity_mutex);
  const std::int64_t steady_now = steady_now_ns();  // one clock reading for the call
  resolve_activity(device, false, steady_now);
  if (device.activity.size() >= (1u << 20)) return;  // bounded: a million spans
  const std::uint64_t now = device.since_opened_ns(steady_now);
  device.activity.push_back(QueueActivity{q.id, std::move(name), now, 0, bytes});
  const std::size_t index = device.activity.size() - 1;
  // Only the watermark is consulted: `done` was just enqueued, a query would rarely find it
  // reached, and a later call resolves it (the end is an upper bound either way).
  if (done.empty() || detail::access::semaphore(done)->known_reached(done.value)) {
    device.activity.back().end_ns = now;
    return;
  }
  auto it = std::find_if(device.unresolved_activity.begin(), device.unresolved_activity.end(),
                         [&](const DeviceState::UnresolvedSpans& u) { return u.semaphore == detail::access::semaphore(done); });
  if (it == device.unresolved_activity.end()) {
    it = device.unresolved_activity.insert(device.unresolved_activity.end(), {detail::access::semaphore(done), {}});
  }
  // Usually the greatest value so far (a queue's marks grow); callers racing on one queue may
  // record out of order by a few: insert from the back.
  auto pos = it->spans.end();
  while (pos != it->spans.begin() && std::prev(pos)->first > done.value) --pos;
  it->spans.insert(pos, {done.value, index});
}

}  // namespace ferry::detail
