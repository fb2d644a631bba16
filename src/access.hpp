// SPDX-License-Identifier: MIT
// Ordering of the executor's access to pool blocks: the waits, marks and queue-family
// ownership hand-offs around a copy, and the checks of buffers passed to a Transfer call.
// Not installed.
//
// Ownership protocol (no-ops on backends without queue families):
//  - a block's contents are discarded when it is allocated, so the first writer needs no acquire;
//  - after a queue X writes or reads a block that its owner O uses next, X releases the range
//    to O and O owes an acquire, performed by O's first wait on X's signal (enqueue_wait);
//  - before X reads a block that O holds, O releases it to X, signals, and X acquires after
//    waiting for that signal.
#pragma once

#include <cstdint>
#include <memory>
#include <source_location>
#include <span>

#include "device_state.hpp"

namespace ferry::detail {

using QueuePtr = std::shared_ptr<QueueState>;

/// The block's range as the backend addresses it.
DeviceRef ref(const BlockState& b);
/// Order `user` after every other queue's access to `b` and make it the holder.
/// Caller holds user.mutex.
void use_on(const QueuePtr& user, BlockState& b);
/// The queue whose work on `b` a later access must follow: the owner, or the queue recorded
/// as using it (a block of another queue consumed by compute). By construction the holder of
/// the range (queue-family ownership) is null, the executor, or this queue.
const QueuePtr& last_user(const BlockState& b);
/// The executor is about to access `b`: order it after the last user's work enqueued so far
/// and after any other queue's access. When `keep_contents` (a read) and the last user holds
/// the range, the user releases it to the executor, which acquires it after the wait.
/// Overwritten contents need no ownership transfer. With `user_idle` (the caller's guarantee
/// that the block is unused since its allocation, UploadIntoOptions::destination_unused) the
/// executor waits only for the block's ready_after and earlier accesses, unless the user must
/// hand the range back first (queue-family ownership), which runs after the user's work.
/// Caller holds no queue mutex.
void prepare_access(const QueuePtr& exec, BlockState& b, bool keep_contents, bool user_idle = false);
/// Whether prepare_access with these arguments might enqueue work on the executor (a wait, an
/// acquire): false only where it certainly enqueues nothing there. A call that batches its
/// copies ends a batch before such an access, so that the copies before it do not wait too.
/// Caller holds no queue mutex.
bool access_may_enqueue(const QueuePtr& exec, const BlockState& b, bool keep_contents, bool user_idle);
/// The point after `other`'s work enqueued so far, for `waiter` to wait on (empty when they
/// are the same queue). Takes other's mutex; the caller holds no queue mutex.
TimelinePoint mark_other_user(const QueuePtr& other, const QueueState& waiter);
/// After the executor accessed `b` (caller holds exec->mutex): hand the range to `next` (the
/// queue that uses it next), signal, and record the access. Returns the completion point.
TimelinePoint finish_access(const QueuePtr& exec, BlockState& b, const QueuePtr& next);
/// finish_access for several blocks accessed by one call, with one signal for them all:
/// block i goes to `next[i]` (the spans have one entry per block).
TimelinePoint finish_access(const QueuePtr& exec, std::span<BlockState* const> blocks, std::span<const QueuePtr> next);
/// Make `owner` wait on the device for `done`, a point just enqueued by the executor.
void make_owner_wait(const QueuePtr& owner, const TimelinePoint& done);
/// Validate a device buffer argument: live, not released, of `device`.
BlockState& checked_block(const DeviceBuffer& buffer, DeviceState* device, const char* function,
                          const std::source_location& where);
/// Validate a host buffer argument: live (its device open) and of `device`.
HostAllocation& checked_host(const HostBuffer& buffer, DeviceState* device, const char* function,
                             const std::source_location& where);
/// Validate `bytes` at `offset` of a buffer of `size` bytes (`what` names the buffer).
void check_range(std::uint64_t offset, std::uint64_t bytes, std::uint64_t size, const char* function,
                 const char* what, const std::source_location& where);

}  // namespace ferry::detail
