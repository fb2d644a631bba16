// SPDX-License-Identifier: MIT
// Timelines: the completion policy (timeline.hpp), the enqueue helpers (waits, marks), and the
// TimelinePoint / TimelineSemaphore handles.
#include <algorithm>

#include "device_state.hpp"

namespace ferry {
namespace detail {

std::uint64_t observe_locked(SemaphoreState& s) {
  const std::uint64_t v = s.backend == nullptr ? UINT64_MAX : s.backend->value();
  s.note_reached(v);
  s.last_query_ns.store(steady_now_ns(), std::memory_order_relaxed);
  return v;
}

std::uint64_t observe(SemaphoreState& s) {
  std::lock_guard lock(s.mutex);
  return observe_locked(s);
}

std::uint64_t observe_throttled(SemaphoreState& s, std::int64_t now) {
  if (now - s.last_query_ns.load(std::memory_order_relaxed) < CompletionPolicy::kHotPathQueryIntervalNs) {
    return s.reached.load(std::memory_order_acquire);
  }
  return observe(s);
}

namespace {

/// Whether q has a wait enqueued for `timeline` at `value` or later (caller holds q.mutex).
bool already_waited(const QueueState& q, std::uint32_t timeline, std::uint64_t value) {
  for (const auto& w : q.waited) {
    if (w.timeline == timeline) return w.value >= value;
  }
  return false;
}

void note_waited(QueueState& q, std::uint32_t timeline, std::uint64_t value) {
  for (auto& w : q.waited) {
    if (w.timeline == timeline) {
      w.value = std::max(w.value, value);
      return;
    }
  }
  q.waited[q.waited_next] = {timeline, value};
  q.waited_next = (q.waited_next + 1) % q.waited.size();
}

}  // namespace

void ensure_submitted(SemaphoreState& s, std::uint64_t value) {
  if (s.submitted.load(std::memory_order_acquire) >= value) return;
  std::lock_guard lock(s.mutex);
  if (s.submitter == nullptr || s.backend == nullptr) return;  // closed: nothing is pending
  // The value's signal was recorded before its point existed, so this flush submits it. The
  // backend queue locks itself: flushing it while its front-end queue is mid-call only splits
  // that call's work into two submissions.
  s.submitter->flush();
  raise_to(s.submitted, value);
}

void flush(QueueState& q) {
  q.backend->flush();
  q.deferred_calls = 0;
  q.deferred_bytes = 0;
  if (q.traits.defers_signals) raise_to(q.timeline->submitted, q.last_mark);
}

void submit_or_defer(QueueState& q, std::uint64_t bytes, std::uint32_t max_calls, std::uint64_t max_bytes) {
  if (!q.traits.defers_signals) {
    flush(q);
    return;
  }
  ++q.deferred_calls;
  q.deferred_bytes += bytes;
  if (q.deferred_calls >= max_calls || q.deferred_bytes >= max_bytes) flush(q);
}

void enqueue_wait(QueueState& q, const TimelinePoint& point, bool query) {
  if (point.empty()) return;
  SemaphoreState& s = *detail::access::semaphore(point);
  // A queue is already ordered after points of its own timeline and after values it waited
  // for (stream-ordered backends); reached points need no wait (their work is complete).
  // Cheapest test first: only the last one asks the backend.
  if (&s != q.timeline.get() && !s.known_reached(point.value) && !already_waited(q, s.timeline_id, point.value)) {
    ensure_submitted(s, point.value);  // another queue waits: the signal must be on its way
    bool waited = false;
    {
      std::lock_guard lock(s.mutex);  // one lock: the query and the wait
      std::uint64_t value = UINT64_MAX;  // closed: all done
      if (s.backend != nullptr) value = query ? observe_locked(s) : s.reached.load(std::memory_order_acquire);
      if (value < point.value) {
        if (s.device_id != q.device_id) s.foreign_waits.store(true, std::memory_order_relaxed);
        q.backend->wait(*s.backend, point.value);
        q.dirty = true;
        waited = true;
        if (q.traits.wait_orders_later_work) note_waited(q, s.timeline_id, point.value);
      }
    }
    // Outside s.mutex: holding queries q's own timeline, whose mutex must never be taken
    // under another semaphore's (two queues waiting on each other's timelines).
    if (waited) hold_semaphore(q, detail::access::semaphore(point));
  }
  // Ownership acquires whose release is ordered before this point are recorded now.
  if (!q.pending_acquires.empty()) {
    std::erase_if(q.pending_acquires, [&](const std::shared_ptr<OwedAcquire>& a) {
      if (a->taken.load(std::memory_order_acquire)) return true;  // another queue of the family did
      if (detail::access::semaphore(a->point) != detail::access::semaphore(point) || a->point.value > point.value) return false;
      if (!a->taken.exchange(true, std::memory_order_acq_rel)) {
        a->perform(*q.backend);
        q.dirty = true;
      }
      return true;
    });
  }
}

bool wait_needed(const QueueState& q, const TimelinePoint& point) {
  if (!q.pending_acquires.empty()) return true;
  if (point.empty()) return false;
  const SemaphoreState& s = *detail::access::semaphore(point);
  return &s != q.timeline.get() && !s.known_reached(point.value) && !already_waited(q, s.timeline_id, point.value);
}

void hold_semaphore(QueueState& q, const std::shared_ptr<SemaphoreState>& s) {
  // Passed entries go first, by the watermark; a long list asks the backend once per
  // kHeldBatch entries, so that a queue whose points nobody waits for still lets go of what
  // it passed, without a query per call while its device work runs behind.
  const bool ask = q.held.size() >= q.held_observe_at;
  if (ask) observe(*q.timeline);
  while (!q.held.empty() && q.timeline->known_reached(q.held.front().until)) q.held.pop_front();
  if (ask || q.held.size() < QueueState::kHeldBatch) q.held_observe_at = q.held.size() + QueueState::kHeldBatch;
  if (s.get() == q.timeline.get()) return;
  const std::uint64_t until = q.last_mark + 1;  // the next mark follows the work just enqueued
  if (!q.held.empty() && q.held.back().until == until && q.held.back().semaphore == s) return;
  q.held.push_back({until, s});
}

TimelinePoint enqueue_mark(QueueState& q) {
  if (q.dirty || q.external) {
    std::lock_guard lock(q.timeline->mutex);
    const std::uint64_t v = ++q.last_mark;
    q.timeline->max_signal = v;
    q.backend->signal(*q.timeline->backend, v);
    q.dirty = false;
  }
  return detail::access::point(q.timeline, q.last_mark);
}

bool point_reached(const TimelinePoint& point) {
  if (point.empty()) return true;
  SemaphoreState& s = *detail::access::semaphore(point);
  if (s.known_reached(point.value)) return true;
  ensure_submitted(s, point.value);  // a caller polling reached() must see it come
  return observe(s) >= point.value;
}

}  // namespace detail

using detail::fail;

// ---- TimelinePoint / TimelineSemaphore --------------------------------------------------

bool TimelinePoint::reached(std::source_location where) const {
  try {
    return detail::point_reached(*this);
  } catch (const Error& err) {  // a device error while querying: name the caller
    throw Error(err.code(), "TimelinePoint::reached: " + err.message(), err.call(), where);
  }
}

bool TimelinePoint::known_reached() const noexcept {
  return empty() || semaphore_->known_reached(value);
}

void TimelinePoint::wait(std::chrono::nanoseconds timeout, std::source_location where) const {
  if (empty()) return;
  detail::access::make<TimelineSemaphore>(semaphore_).wait(value, timeout, where);
}

std::uint64_t TimelineSemaphore::value(std::source_location where) const {
  FERRY_REQUIRE(state_ != nullptr, "TimelineSemaphore::value", "null semaphore handle", where);
  std::lock_guard lock(state_->mutex);
  FERRY_REQUIRE(state_->backend != nullptr, "TimelineSemaphore::value", "the device is closed", where);
  return detail::observe_locked(*state_);
}

void TimelineSemaphore::signal(std::uint64_t value, std::source_location where) {
  FERRY_REQUIRE(state_ != nullptr, "TimelineSemaphore::signal", "null semaphore handle", where);
  auto device = detail::lock_device(state_->device, "TimelineSemaphore::signal", where);
  FERRY_REQUIRE(!state_->queue_private, "TimelineSemaphore::signal",
                "the semaphore is a queue's private timeline, which only ferry signals (signalling it "
                "would make the queue's marks report pending work complete); signal a semaphore from "
                "Device::create_semaphore instead",
                where);
  std::lock_guard lock(state_->mutex);
  FERRY_REQUIRE(state_->backend != nullptr, "TimelineSemaphore::signal", "the device is closed", where);
  const std::uint64_t current = std::max(state_->max_signal, detail::observe_locked(*state_));
  FERRY_REQUIRE(value > current, "TimelineSemaphore::signal",
          "value " + std::to_string(value) + " does not exceed the current value " +
              std::to_string(current) + " (timelines only move forward)",
          where);
  state_->backend->signal(value);
  state_->max_signal = value;
  state_->note_reached(value);  // a host signal takes effect at once
}

bool TimelineSemaphore::try_wait(std::uint64_t value, std::chrono::nanoseconds timeout,
                                 std::source_location where) const {
  FERRY_REQUIRE(state_ != nullptr, "TimelineSemaphore::try_wait", "null semaphore handle", where);
  detail::BackendSemaphore* backend = nullptr;
  if (!state_->known_reached(value)) detail::ensure_submitted(*state_, value);
  {
    std::lock_guard lock(state_->mutex);
    FERRY_REQUIRE(state_->backend != nullptr, "TimelineSemaphore::try_wait", "the device is closed", where);
    backend = state_->backend.get();
    // Reached (the watermark, else one query): not a blocking wait, not counted in host_waits.
    if (state_->known_reached(value)) return true;
    const std::uint64_t now = detail::observe_locked(*state_);
    if (now >= value) return true;
  }
  if (auto device = state_->device.lock()) device->host_waits.fetch_add(1, std::memory_order_relaxed);
  // Not holding the mutex while blocked: a host signal from another thread must get through.
  if (!backend->wait(value, timeout)) return false;
  state_->note_reached(value);
  return true;
}

void TimelineSemaphore::wait(std::uint64_t value, std::chrono::nanoseconds timeout,
                             std::source_location where) const {
  FERRY_REQUIRE(state_ != nullptr, "TimelineSemaphore::wait", "null semaphore handle", where);
  if (!try_wait(value, timeout, where)) {
    fail(ErrorCode::timeout,
         "TimelineSemaphore::wait: value " + std::to_string(value) + " not reached within " +
             std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()) +
             " ms (current value " + std::to_string(this->value(where)) + ")",
         where);
  }
}

TimelinePoint TimelineSemaphore::at(std::uint64_t value, std::source_location where) const {
  FERRY_REQUIRE(state_ != nullptr, "TimelineSemaphore::at", "null semaphore handle", where);
  return detail::access::point(state_, value);
}

}  // namespace ferry
