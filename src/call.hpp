// SPDX-License-Identifier: MIT
// The skeleton every Transfer call shares (class Call) and the argument checks of buffers and
// owner queues, for the Transfer API's files (transfer.cpp, image.cpp). Not installed.
#pragma once

#include <algorithm>
#include <memory>
#include <mutex>
#include <source_location>
#include <string>
#include <vector>

#include "access.hpp"
#include "staging.hpp"

namespace ferry::detail {

/// The name of the priority field of a call's options, for its errors.
inline const char* priority_field(const UploadOptions&) { return "UploadOptions::priority"; }
inline const char* priority_field(const UploadIntoOptions&) { return "UploadIntoOptions::priority"; }
inline const char* priority_field(const CallOptions&) { return "CallOptions::priority"; }

/// The skeleton every Transfer call shares, in order: check the Transfer and its device, bind
/// the thread to the device's backend (one binding for the call's several backend calls),
/// check the arguments (the call does, between construction and lock(), so a refused call
/// touches nothing; order() checks the caller's wait and signal lists), take the Transfer's
/// lock, order the executor's access to each block (access()), enqueue the caller's waits
/// before the call's first device work and operate on the executor and hand the range on
/// (on_executor()), record the activity, keep host memory alive until its copy completes and
/// signal the caller's points (finish()).
class Call {
 public:
  Call(const std::unique_ptr<detail::TransferState>& s, const char* function, const std::source_location& where)
      : root_(checked(s, function, where)),
        state_(&root_),
        device_(*detail::access::state(root_.device)),
        bound_(*device_.backend),
        function_(function),
        where_(where) {
    // The Transfer's lock, then the pool's: a segment callback holds the latter.
    detail::refuse_in_segment_callback(device_, function, where);
  }

  [[nodiscard]] detail::DeviceState& device() const { return device_; }
  [[nodiscard]] detail::TransferState& state() const { return *state_; }
  [[nodiscard]] const QueuePtr& exec() const { return state_->exec; }
  /// The most bytes the call's lane moves between yield points (pacing.hpp; 0: not cut).
  [[nodiscard]] std::uint64_t piece() const { return state_->piece; }

  /// The call's options: its priority class picks its lane (before anything reads exec()),
  /// then order() checks its lists. Argument checks, so before lock().
  template <class Options>
  void order(const Options& options) {
    prioritize(options.priority, priority_field(options));
    order(options.wait, options.signal);
  }

  /// Check `priority` (`field` names it in the error) and take the urgent lane for an urgent
  /// call (see "Priorities" in transfer.hpp).
  void prioritize(Priority priority, const char* field) {
    FERRY_REQUIRE(priority == Priority::bulk || priority == Priority::urgent, function_,
                  std::string(field) + " is " + std::to_string(static_cast<unsigned>(priority)) +
                      ", not a Priority (bulk = 0, urgent = 1)",
                  where_);
    if (priority == Priority::urgent) state_ = &root_.urgent_lane(where_);
  }

  /// Check the caller's wait and signal lists (UploadOptions, UploadIntoOptions, CallOptions)
  /// and keep them for the call; an argument check, so before lock(). The signal values are
  /// read under each semaphore's mutex; enqueue_signals() checks them again, since another
  /// thread may signal the semaphore meanwhile.
  void order(const std::vector<TimelinePoint>& wait, const std::vector<TimelinePoint>& signal) {
    for (std::size_t i = 0; i < wait.size(); ++i) {
      const TimelinePoint& p = wait[i];
      if (p.empty()) continue;  // reached: nothing to wait for
      FERRY_REQUIRE(detail::access::semaphore(p)->device_id == &device_ ||
                        (peer_ != nullptr && detail::access::semaphore(p)->device_id == peer_),
                    function_,
                    "wait point " + std::to_string(i) + " (value " + std::to_string(p.value) +
                        ") is on a semaphore of another device",
                    where_);
    }
    for (std::size_t i = 0; i < signal.size(); ++i) {
      const TimelinePoint& p = signal[i];
      const std::string what = "signal point " + std::to_string(i);
      FERRY_REQUIRE(!p.empty(), function_, what + " is empty (no semaphore): there is nothing to signal", where_);
      FERRY_REQUIRE(detail::access::semaphore(p)->device_id == &device_, function_,
                    what + " (value " + std::to_string(p.value) + ") is on a semaphore of another device", where_);
      FERRY_REQUIRE(!detail::access::semaphore(p)->queue_private, function_,
                    what + " is on a queue's private timeline, which only ferry signals (signalling it would make "
                           "the queue's marks report pending work complete); signal a semaphore from "
                           "Device::create_semaphore instead",
                    where_);
      std::uint64_t highest = 0;
      {
        std::lock_guard slock(detail::access::semaphore(p)->mutex);
        FERRY_REQUIRE(detail::access::semaphore(p)->backend != nullptr, function_, what + ": the device is closed", where_);
        highest = detail::access::semaphore(p)->max_signal;
      }
      FERRY_REQUIRE(p.value > highest, function_,
                    what + ": value " + std::to_string(p.value) +
                        " does not exceed the highest value signalled so far on its semaphore (" +
                        std::to_string(highest) + "; timelines only move forward)",
                    where_);
      for (std::size_t j = 0; j < i; ++j) {
        FERRY_REQUIRE(detail::access::semaphore(signal[j]) != detail::access::semaphore(p) || signal[j].value < p.value, function_,
                      what + ": value " + std::to_string(p.value) + " does not exceed the value " +
                          std::to_string(signal[j].value) + " of signal point " + std::to_string(j) +
                          " on the same semaphore (values must strictly increase along the list)",
                      where_);
      }
      for (std::size_t k = 0; k < wait.size(); ++k) {
        FERRY_REQUIRE(detail::access::semaphore(wait[k]) != detail::access::semaphore(p) || wait[k].value < p.value, function_,
                      "wait point " + std::to_string(k) + " (value " + std::to_string(wait[k].value) +
                          ") is not below " + what + " (value " + std::to_string(p.value) +
                          ") on the same semaphore: only a signal at or above the call's own could reach it, "
                          "after which the call's signal would not increase the timeline",
                      where_);
      }
    }
    // Empty lists add no wait, signal or flush: a call without lists pays nothing for them.
    wait_ = wait.empty() ? nullptr : &wait;
    signal_ = signal.empty() ? nullptr : &signal;
  }

  /// A peer copy's other device: its points may be waited on too (before order()).
  void allow_peer(const detail::DeviceState& peer) { peer_ = &peer; }

  /// Take the lane's lock (calls of a class enqueue in call order), then the lanes' order lock.
  void lock() {
    lock_ = std::unique_lock(state_->mutex);
    order_lock_ = std::unique_lock(state_->order->mutex);
  }

  /// Let the order lock go for the rest of the call, which then touches no ordering state
  /// (a blocking call's last host wait).
  void end_ordering() {
    if (order_lock_.owns_lock()) order_lock_.unlock();
  }

  /// Wait until `object` (a block or an image the call accesses) is not being staged by a
  /// call of the other lane (LaneOrder); after lock().
  void wait_not_busy(const void* object) {
    detail::LaneOrder& o = *state_->order;
    o.idle.wait(order_lock_, [&] { return std::find(o.busy.begin(), o.busy.end(), object) == o.busy.end(); });
  }

  /// The scope of a staged copy's chunks through the ring of `object` (a block or an image the
  /// call has accessed): the order lock is let go for it, so that a call of the other lane
  /// runs meanwhile, and `object` is busy for the calls that access it.
  class Staging {
   public:
    Staging(Call& call, const void* object) : call_(call), object_(object) {
      call_.state_->order->busy.push_back(object_);
      call_.order_lock_.unlock();
    }
    ~Staging() {
      detail::LaneOrder& o = *call_.state_->order;
      call_.order_lock_.lock();
      o.busy.erase(std::find(o.busy.begin(), o.busy.end(), object_));
      o.idle.notify_all();
    }
    Staging(const Staging&) = delete;
    Staging& operator=(const Staging&) = delete;

   private:
    Call& call_;
    const void* object_;
  };

  /// Enqueue the caller's waits on `q`, the queue about to run the call's first device work;
  /// later calls do nothing (caller holds q.mutex). Not queried: like Queue::wait, a wait for
  /// a point that turns out reached costs the backend less than asking first.
  void enqueue_waits(detail::QueueState& q) {
    if (wait_ == nullptr) return;
    for (const TimelinePoint& p : *wait_) detail::enqueue_wait(q, p, /*query=*/false);
    wait_ = nullptr;
  }

  /// enqueue_waits() on the executor, for calls whose first device work is not on_executor()'s
  /// (the staged copies).
  void enqueue_waits_on_executor() {
    std::lock_guard elock(state_->exec->mutex);
    enqueue_waits(*state_->exec);
  }

  /// Enqueue the caller's waits, then its signals, on the executor: a call with no device
  /// work of its own still orders its signal points after its wait points.
  void pass_through_executor() {
    std::lock_guard elock(state_->exec->mutex);
    enqueue_waits(*state_->exec);
    enqueue_signals(*state_->exec);
  }

  /// Signal the caller's points on `q`, after the call's last device work (caller holds
  /// q.mutex). Each value is checked again under its semaphore's mutex: another thread may
  /// have signalled the semaphore since order() (see "Wait and signal lists" in transfer.hpp).
  void enqueue_signals(detail::QueueState& q) {
    if (signal_ == nullptr) return;
    const std::vector<TimelinePoint>& signal = *signal_;
    signal_ = nullptr;
    try {
      for (std::size_t i = 0; i < signal.size(); ++i) {
        signal_one(q, signal[i], i);
        // Outside the semaphore's mutex (see enqueue_wait).
        detail::hold_semaphore(q, detail::access::semaphore(signal[i]));
      }
    } catch (...) {
      detail::flush(q);  // the signals enqueued before the failure go out with the copy
      throw;
    }
    // Always submitted at once: an engine may wait for its own semaphore where ferry cannot
    // see the wait (a flush on wait covers only ferry's waits).
    detail::flush(q);
  }

  /// Enqueue signal point `i` of the call's list on `q` (caller holds q.mutex).
  void signal_one(detail::QueueState& q, const TimelinePoint& point, std::size_t i) {
    detail::SemaphoreState& s = *detail::access::semaphore(point);
    std::lock_guard slock(s.mutex);
    FERRY_REQUIRE(s.backend != nullptr, function_, "signal point " + std::to_string(i) + ": the device is closed",
                  where_);
    FERRY_REQUIRE(point.value > s.max_signal, function_,
                  "signal point " + std::to_string(i) + ": value " + std::to_string(point.value) +
                      " no longer exceeds the highest value signalled on its semaphore (" +
                      std::to_string(s.max_signal) +
                      "): another thread signalled it during the call; the copy was enqueued, this "
                      "signal and the later ones of the list were not",
                  where_);
    // Every signal goes through ferry and raises max_signal (as Queue::signal does).
    s.max_signal = point.value;
    q.backend->signal(*s.backend, point.value);
    q.dirty = true;
  }

  /// Order the executor's access to `b` after its last user (see prepare_access); returns
  /// the queue that uses `b` next, to hand the range back to.
  QueuePtr access(detail::BlockState& b, bool keep_contents, bool user_idle = false) {
    check_access(b, user_idle);
    wait_not_busy(&b);
    QueuePtr next = detail::last_user(b);
    detail::prepare_access(state_->exec, b, keep_contents, user_idle);
    return next;
  }

  /// The argument check of access(), for a call that checks all its blocks before it
  /// accesses the first.
  void check_access(const detail::BlockState& b, bool user_idle) const {
    // Without a ready_after that covers the block's previous life for the executor, "unused
    // since its allocation" would let the copy overwrite what the owner's queued work of that
    // life still reads: a block the owner allocated for itself carries no such point.
    FERRY_REQUIRE(!user_idle || b.adopted || b.owner == state_->exec || b.first_writer == state_->exec->id, function_,
                  "UploadIntoOptions::destination_unused needs adopted memory or a block allocated with "
                  "AllocationOptions::first_writer = this transfer's executor (its ready_after then covers the "
                  "block's previous use); this block was allocated for its owner alone",
                  where_);
  }

  /// Whether access() with these arguments might enqueue work on the executor (see
  /// detail::access_may_enqueue).
  [[nodiscard]] bool access_may_enqueue(const detail::BlockState& b, bool keep_contents, bool user_idle) const {
    return detail::access_may_enqueue(state_->exec, b, keep_contents, user_idle);
  }

  /// Run `op(executor queue)` with the executor's mutex held, after the caller's waits when
  /// no earlier device work of the call enqueued them, then hand `b` to `next`; returns the
  /// point at which the copy is complete.
  template <class Op>
  TimelinePoint on_executor(detail::BlockState& b, const QueuePtr& next, Op&& op) {
    return with_executor([&](detail::QueueState& e) {
      op(e);
      return detail::finish_access(state_->exec, b, next);
    });
  }

  /// Run `op(executor queue)` with the executor's mutex held (and its signals held under
  /// deferred submission), after the caller's waits when no earlier device work of the call
  /// enqueued them; the work counts as the call's, submitted by finish(). Returns op's result.
  template <class Op>
  decltype(auto) with_executor(Op&& op) {
    const QueuePtr& exec = state_->exec;
    std::lock_guard elock(exec->mutex);
    enqueue_waits(*exec);
    // Deferred submission: the call's signals wait for submit_or_defer() in finish().
    const bool hold = state_->options.submit_batch > 1 && exec->traits.defers_signals;
    if (hold) exec->backend->hold_signals(true);
    struct Unhold {  // also when op() throws
      detail::BackendQueue* q;
      ~Unhold() {
        if (q != nullptr) q->hold_signals(false);
      }
    } unhold{hold ? exec->backend : nullptr};
    exec->dirty = true;
    submit_pending_ = true;
    return op(*exec);
  }

  /// Record the copy's activity on the executor, keep `host` (when given) alive until `done`,
  /// then signal the caller's points on the executor, after the call's last device work.
  void finish(const char* name, std::uint64_t bytes, const TimelinePoint& done,
              const std::shared_ptr<detail::HostAllocation>& host = nullptr) {
    detail::record_activity(device_, *state_->exec, name, bytes, done);
    if (host) state_->keep(done, host);
    std::lock_guard elock(state_->exec->mutex);
    if (signal_ != nullptr) enqueue_signals(*state_->exec);
    if (submit_pending_) {
      detail::submit_or_defer(*state_->exec, bytes, state_->options.submit_batch, state_->options.submit_bytes);
      submit_pending_ = false;
    }
  }

  /// finish() for a call that read several host allocations: each is kept until `done`.
  void finish(const char* name, std::uint64_t bytes, const TimelinePoint& done,
              std::span<const std::shared_ptr<detail::HostAllocation>> hosts) {
    for (const auto& host : hosts) state_->keep(done, host);
    finish(name, bytes, done);
  }

  /// A call that recorded device work and failed before finish() submits it at once (its
  /// failure may leave nobody to wait for it, and a lost batch would hold the executor).
  ~Call() {
    if (!submit_pending_) return;
    try {
      std::lock_guard elock(state_->exec->mutex);
      detail::flush(*state_->exec);
    } catch (...) {  // a device error: the call is failing with its own error already
    }
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

 private:
  static detail::TransferState& checked(const std::unique_ptr<detail::TransferState>& s, const char* function,
                                        const std::source_location& where) {
    FERRY_REQUIRE(s != nullptr, function, "moved-from transfer", where);
    FERRY_REQUIRE(s->device.is_open(), function, "the device is closed", where);
    return *s;
  }

  detail::TransferState& root_;  ///< the Transfer's state: its bulk lane
  detail::TransferState* state_;  ///< the call's lane (prioritize())
  detail::DeviceState& device_;
  const detail::BoundThread bound_;
  const char* function_;
  const std::source_location where_;
  /// The caller's lists (set by order(); they outlive the call). Each is cleared once
  /// enqueued, so a call's several device steps wait and signal once.
  const std::vector<TimelinePoint>* wait_ = nullptr;
  const std::vector<TimelinePoint>* signal_ = nullptr;
  /// on_executor() recorded work that finish() has not submitted or deferred yet.
  bool submit_pending_ = false;
  const detail::DeviceState* peer_ = nullptr;  ///< allow_peer()
  std::unique_lock<std::mutex> lock_;        ///< the lane's
  std::unique_lock<std::mutex> order_lock_;  ///< the lanes' LaneOrder (released before lock_)
};

/// A device buffer argument of a call that may name another device (peer copies): live, of
/// an open device; returns the block and keeps its device alive in `device`.
inline detail::BlockState& checked_any_block(const DeviceBuffer& buffer, std::shared_ptr<detail::DeviceState>& device,
                                      const char* function, const std::source_location& where) {
  FERRY_REQUIRE(static_cast<bool>(detail::access::state(buffer)), function, "null or moved-from device buffer", where);
  detail::BlockState& b = *detail::access::state(buffer);
  device = detail::lock_device(b.device, function, where);
  return detail::checked_block(buffer, device.get(), function, where);
}

/// The owner queue's state, checked against `d`: the transfer's device, which the caller has
/// found open and which the transfer keeps alive, so no lock of the queue's device is needed
/// once the queue is known to belong to it.
inline const std::shared_ptr<detail::QueueState>& checked_owner(const Queue& owner, detail::DeviceState& d,
                                                         const char* function, const std::source_location& where) {
  FERRY_REQUIRE(static_cast<bool>(owner), function, "null queue handle", where);
  FERRY_REQUIRE(detail::access::state(owner)->device_id == &d, function, "the owner queue belongs to another device", where);
  return detail::access::state(owner);
}

}  // namespace ferry::detail
