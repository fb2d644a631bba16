// SPDX-License-Identifier: MIT
// Ordering of the executor's access to pool blocks (see access.hpp).
#include "access.hpp"

#include <string>

namespace ferry::detail {

DeviceRef ref(const BlockState& b) { return DeviceRef{b.segment, b.offset}; }

/// Order `user` after every other queue's access to `b` and make it the holder.
/// Caller holds user.mutex.
void use_on(const QueuePtr& user, BlockState& b) {
  enqueue_wait(*user, b.last_access);  // also performs the acquires this queue owes
  // A range released to this queue's family but not acquired yet (released to another queue
  // of the family, which has not used it): this queue, first to use it, acquires it, after the
  // wait above ordered it after the release.
  if (const auto& owed = b.owed; owed && !owed->taken.load(std::memory_order_acquire) &&
                                 owed->to->family() == user->backend->family() &&
                                 !owed->taken.exchange(true, std::memory_order_acq_rel)) {
    owed->perform(*user->backend);
    user->dirty = true;
  }
  b.holder = user;
}

/// The queue whose work on `b` a later access must follow: the owner, or the queue recorded
/// as using it (a block of another queue consumed by compute). By construction the holder of
/// the range (queue-family ownership) is null, the executor, or this queue.
const QueuePtr& last_user(const BlockState& b) { return b.recorded_user ? b.recorded_user : b.owner; }

/// The executor is about to access `b`: order it after the last user's work enqueued so far
/// and after any other queue's access. When `keep_contents` (a read) and the last user holds
/// the range, the user releases it to the executor, which acquires it after the wait.
/// Overwritten contents need no ownership transfer. Caller holds no queue mutex.
void prepare_access(const QueuePtr& exec, BlockState& b, bool keep_contents, bool user_idle) {
  const QueuePtr& user = last_user(b);
  const bool hand_off = keep_contents && b.holder && b.holder != exec;
  // A hand-back the backend performs (Vulkan queue-family ownership) runs on the user after
  // its queued work; where ownership is a no-op (CUDA, HIP, host) there is nothing to hand.
  if (user_idle && !(hand_off && exec->traits.acquires_ownership)) {
    // The caller guarantees that no queue used the block beyond ferry's copies since its
    // allocation: the copy follows the block's previous life (ready_after) and ferry's own
    // accesses, and none of the user's queued work, so it can overlap that work. Not queried:
    // these points were usually enqueued a moment ago (an engine's ready_after, ferry's last
    // copy), so a query would rarely find them reached, and a device wait for a point that
    // turns out reached costs less than the query.
    std::lock_guard lock(exec->mutex);
    enqueue_wait(*exec, b.last_access, /*query=*/false);
    enqueue_wait(*exec, b.ready_after, /*query=*/false);
    return;
  }
  TimelinePoint user_done;
  if (user != exec) {
    std::lock_guard lock(user->mutex);
    enqueue_wait(*user, b.last_access);  // performs an acquire this queue still owes
    if (hand_off) {
      user->backend->release_ownership(ref(b), b.size, *exec->backend);
      user->dirty = true;
    }
    user_done = enqueue_mark(*user);
    detail::flush(*user);
  }
  // The owner may be using the block too when another queue is recorded as its user.
  const TimelinePoint owner_done = b.owner != user ? mark_other_user(b.owner, *exec) : TimelinePoint{};
  std::lock_guard lock(exec->mutex);
  enqueue_wait(*exec, b.last_access);
  enqueue_wait(*exec, user_done);
  enqueue_wait(*exec, owner_done);
  if (hand_off) {
    exec->backend->acquire_ownership(ref(b), b.size, *user->backend);
    exec->dirty = true;
  }
}

bool access_may_enqueue(const QueuePtr& exec, const BlockState& b, bool keep_contents, bool user_idle) {
  const bool hand_off = keep_contents && b.holder && b.holder != exec;
  const QueuePtr& user = last_user(b);
  TimelinePoint user_done;
  if (user_idle && !(hand_off && exec->traits.acquires_ownership)) {
    // prepare_access's first path: the two waits alone.
  } else if (hand_off || b.owner != user) {
    return true;  // a hand-back, or another queue's mark: not worth predicting
  } else if (user != exec) {
    // The user's mark: a new one where it has work since its last (always on an external
    // queue) or first waits for the block's last access, else its last, which the executor
    // may have waited for already.
    std::lock_guard lock(user->mutex);
    if (user->dirty || user->external || wait_needed(*user, b.last_access)) return true;
    user_done = detail::access::point(user->timeline, user->last_mark);
  }
  std::lock_guard lock(exec->mutex);
  return wait_needed(*exec, b.last_access) || wait_needed(*exec, b.ready_after) || wait_needed(*exec, user_done);
}

TimelinePoint mark_other_user(const QueuePtr& other, const QueueState& waiter) {
  if (!other || other.get() == &waiter) return {};
  std::lock_guard lock(other->mutex);
  TimelinePoint p = enqueue_mark(*other);
  detail::flush(*other);
  return p;
}

/// After the executor accessed `b` (caller holds exec->mutex): hand the range to `next` (the
/// queue that uses it next), signal, and record the access. Returns the completion point.
TimelinePoint finish_access(const QueuePtr& exec, BlockState& b, const QueuePtr& next) {
  BlockState* const block = &b;
  return finish_access(exec, std::span<BlockState* const>(&block, 1), std::span<const QueuePtr>(&next, 1));
}

TimelinePoint finish_access(const QueuePtr& exec, std::span<BlockState* const> blocks, std::span<const QueuePtr> next) {
  // Every hand-back is recorded before the one signal, so a queue that waits for the signal
  // is ordered after all of them.
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (next[i] != exec) exec->backend->release_ownership(ref(*blocks[i]), blocks[i]->size, *next[i]->backend);
  }
  TimelinePoint done = enqueue_mark(*exec);  // submitted by the caller (submit_or_defer)
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    BlockState& b = *blocks[i];
    b.last_access = done;
    b.holder = next[i];
    b.owed.reset();
    if (next[i] != exec && next[i]->traits.acquires_ownership) {
      auto owed = std::make_shared<OwedAcquire>();
      owed->point = done;
      owed->range = ref(b);
      owed->bytes = b.size;
      owed->from = exec->backend;
      owed->to = next[i]->backend;
      b.owed = owed;
      std::lock_guard lock(next[i]->mutex);
      next[i]->pending_acquires.push_back(std::move(owed));
    }
  }
  return done;
}

void make_owner_wait(const QueuePtr& owner, const TimelinePoint& done) {
  std::lock_guard lock(owner->mutex);
  enqueue_wait(*owner, done, /*query=*/false);  // `done` was just enqueued: not reached yet
  detail::flush(*owner);
}

BlockState& checked_block(const DeviceBuffer& buffer, DeviceState* device, const char* function,
                          const std::source_location& where) {
  FERRY_REQUIRE(static_cast<bool>(detail::access::state(buffer)), function, "null or moved-from device buffer", where);
  BlockState& b = *detail::access::state(buffer);
  (void)lock_device(b.device, function, where);
  FERRY_REQUIRE(!b.released, function, "the device buffer was released", where);
  FERRY_REQUIRE(b.device_id == device, function, "the device buffer belongs to another device", where);
  return b;
}

HostAllocation& checked_host(const HostBuffer& buffer, DeviceState* device, const char* function,
                             const std::source_location& where) {
  FERRY_REQUIRE(static_cast<bool>(detail::access::state(buffer)), function, "null or moved-from host buffer", where);
  HostAllocation& h = *detail::access::state(buffer);
  FERRY_REQUIRE(h.memory != nullptr, function, "the host buffer's device is closed", where);
  FERRY_REQUIRE(h.device_id == device, function, "the host buffer belongs to another device", where);
  return h;
}

void check_range(std::uint64_t offset, std::uint64_t bytes, std::uint64_t size, const char* function,
                 const char* what, const std::source_location& where) {
  FERRY_REQUIRE(bytes > 0, function, std::string(what) + ": size 0 is not allowed", where);
  FERRY_REQUIRE(offset <= size && bytes <= size - offset, function,
          std::string(what) + ": range [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
              ") exceeds the buffer's " + std::to_string(size) + " bytes",
          where);
}

}  // namespace ferry::detail
