// SPDX-License-Identifier: MIT
// Transfer planning: which queue runs a copy, what it waits for, what it signals, queue-family
// ownership hand-offs, pinned staging for pageable memory, and keeping sources alive.
//
// Ownership protocol (no-ops on backends without queue families):
//  - a block's contents are discarded when it is allocated, so the first writer needs no acquire;
//  - after a queue X writes or reads a block that its owner O uses next, X releases the range
//    to O and O owes an acquire, performed by O's first wait on X's signal (enqueue_wait);
//  - before X reads a block that O holds, O releases it to X, signals, and X acquires after
//    waiting for that signal.
#include "ferry/transfer.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <thread>

#include "internal.hpp"
#include "parallel_copy.hpp"

namespace ferry {
namespace detail {

struct TransferState {
  Device device;  // keeps the device open while the Transfer lives
  std::shared_ptr<QueueState> exec;
  TransferOptions options;
  std::mutex mutex;  // serializes calls on this Transfer
  struct InFlight {
    TimelinePoint done;
    std::shared_ptr<HostAllocation> host;
  };
  std::deque<InFlight> in_flight;  // host memory kept alive until its copy completed
  struct Slot {
    HostBuffer buffer;
    TimelinePoint free;  // the copy that last used this slot
  };
  std::vector<Slot> ring;
  std::size_t next_slot = 0;
  std::unique_ptr<ParallelCopier> copier;  // started on first staged copy

  void ensure_staging(DeviceState& d, const std::source_location& where) {
    if (ring.empty()) {
      for (std::uint32_t i = 0; i < options.staging_chunks; ++i) {
        ring.push_back({d.host_pool_api.allocate(options.staging_chunk_bytes, where), {}});
      }
    }
    if (!copier) {
      int n = options.staging_threads;
      if (n < 0) n = std::clamp(static_cast<int>(std::thread::hardware_concurrency()) - 1, 0, 15);
      copier = std::make_unique<ParallelCopier>(static_cast<unsigned>(n));
    }
  }

  /// Pack `pieces` (total `total` bytes) through the staging ring into block `b`, one DMA
  /// per chunk on the executor; host packing of chunk k+1 overlaps the DMA of chunk k.
  /// Caller holds `mutex` and has made the executor wait for b.ready_after.
  void staged_h2d(const std::vector<GatherPiece>& pieces, std::uint64_t total, const BlockState& b,
                  const std::source_location& where) {
    const std::uint64_t chunk = options.staging_chunk_bytes;
    for (std::uint64_t at = 0; at < total; at += chunk) {
      const std::uint64_t n = std::min(chunk, total - at);
      Slot& slot = ring[next_slot];
      next_slot = (next_slot + 1) % ring.size();
      slot.free.wait(std::chrono::hours(1), where);  // the slot's previous DMA has read it
      copier->gather(pieces, at, at + n, slot.buffer.data());
      std::lock_guard elock(exec->mutex);
      exec->backend->copy_h2d(DeviceRef{b.segment, b.offset + at}, HostRef{slot.buffer.state()->memory.get(), 0}, n);
      exec->dirty = true;
      slot.free = enqueue_mark(*exec);
      exec->backend->flush();
    }
  }

  void keep(const TimelinePoint& done, const std::shared_ptr<HostAllocation>& host) {
    while (!in_flight.empty() && point_reached(in_flight.front().done)) in_flight.pop_front();
    in_flight.push_back({done, host});
  }
};

namespace {

using QueuePtr = std::shared_ptr<QueueState>;

DeviceRef ref(const BlockState& b) { return DeviceRef{b.segment, b.offset}; }

/// Order `user` after every other queue's access to `b` and make it the holder.
/// Caller holds user.mutex.
void use_on(const QueuePtr& user, BlockState& b) {
  enqueue_wait(*user, b.last_access);  // also records an acquire owed for this block
  b.holder = user;
}

/// The queue whose work on `b` a later access must follow: the owner, or the queue recorded
/// as using it (executor_owned uploads consumed by compute). By construction the holder of
/// the range (queue-family ownership) is null, the executor, or this queue.
const QueuePtr& last_user(const BlockState& b) { return b.recorded_user ? b.recorded_user : b.owner; }

/// The executor is about to access `b`: order it after the last user's work enqueued so far
/// and after any other queue's access. When `keep_contents` (a read) and the last user holds
/// the range, the user releases it to the executor, which acquires it after the wait.
/// Overwritten contents need no ownership transfer. Caller holds no queue mutex.
void prepare_access(const QueuePtr& exec, BlockState& b, bool keep_contents) {
  const QueuePtr& user = last_user(b);
  const bool hand_off = keep_contents && b.holder && b.holder != exec;
  TimelinePoint user_done;
  if (user != exec) {
    std::lock_guard lock(user->mutex);
    enqueue_wait(*user, b.last_access);  // performs an acquire this queue still owes
    if (hand_off) {
      user->backend->release_ownership(ref(b), b.size, *exec->backend);
      user->dirty = true;
    }
    user_done = enqueue_mark(*user);
    user->backend->flush();
  }
  std::lock_guard lock(exec->mutex);
  enqueue_wait(*exec, b.last_access);
  enqueue_wait(*exec, user_done);
  if (hand_off) {
    exec->backend->acquire_ownership(ref(b), b.size, *user->backend);
    exec->dirty = true;
  }
}

/// After the executor accessed `b` (caller holds exec->mutex): hand the range to `next` (the
/// queue that uses it next), signal, and record the access. Returns the completion point.
TimelinePoint finish_access(const QueuePtr& exec, BlockState& b, const QueuePtr& next) {
  if (next != exec) exec->backend->release_ownership(ref(b), b.size, *next->backend);
  TimelinePoint done = enqueue_mark(*exec);
  exec->backend->flush();
  b.last_access = done;
  b.holder = next;
  if (next != exec) {
    std::lock_guard lock(next->mutex);
    next->pending_acquires.push_back({done, ref(b), b.size, exec->backend});
  }
  return done;
}

void make_owner_wait(const QueuePtr& owner, const TimelinePoint& done) {
  std::lock_guard lock(owner->mutex);
  enqueue_wait(*owner, done, /*query=*/false);  // `done` was just enqueued: not reached yet
  owner->backend->flush();
}

BlockState& checked_block(const DeviceBuffer& buffer, DeviceState* device, const char* function,
                          const std::source_location& where) {
  FERRY_REQUIRE(static_cast<bool>(buffer.state()), function, "null or moved-from device buffer", where);
  BlockState& b = *buffer.state();
  (void)lock_device(b.device, function, where);
  FERRY_REQUIRE(!b.released, function, "the device buffer was released", where);
  FERRY_REQUIRE(b.device_id == device, function, "the device buffer belongs to another device", where);
  return b;
}

HostAllocation& checked_host(const HostBuffer& buffer, DeviceState* device, const char* function,
                             const std::source_location& where) {
  FERRY_REQUIRE(static_cast<bool>(buffer.state()), function, "null or moved-from host buffer", where);
  HostAllocation& h = *buffer.state();
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

}  // namespace
}  // namespace detail


std::string_view to_string(CopyMode mode) noexcept {
  switch (mode) {
    case CopyMode::blocking: return "blocking";
    case CopyMode::executor_owned: return "executor_owned";
    case CopyMode::preallocated: return "preallocated";
    case CopyMode::owner_owned: return "owner_owned";
  }
  return "unknown";
}

Transfer::Transfer(const Device& device, TransferOptions options, std::source_location where) {
  FERRY_REQUIRE(static_cast<bool>(device) && device.is_open(), "Transfer::Transfer", "null or closed device", where);
  FERRY_REQUIRE(options.staging_chunk_bytes >= 4096 && options.staging_chunk_bytes <= (1ull << 32),
          "Transfer::Transfer", "staging_chunk_bytes must be in [4 KiB, 4 GiB]", where);
  FERRY_REQUIRE(options.staging_chunks >= 1 && options.staging_chunks <= 64, "Transfer::Transfer",
          "staging_chunks must be in [1, 64]", where);
  state_ = std::make_unique<detail::TransferState>();
  state_->device = device;
  if (options.executor) {
    detail::QueueState& q = detail::checked_queue(options.executor, "Transfer::Transfer", where);
    FERRY_REQUIRE(q.device_id == device.state().get(), "Transfer::Transfer", "the executor queue belongs to another device",
            where);
    state_->exec = options.executor.state();
  } else {
    state_->exec = device.queue(QueueRole::transfer).state();
  }
  state_->options = std::move(options);
}

Transfer::~Transfer() {
  if (!state_) return;
  try {
    synchronize();
  } catch (...) {
    // Closed or lost device: nothing is in flight any more.
  }
}

Transfer::Transfer(Transfer&&) noexcept = default;
Transfer& Transfer::operator=(Transfer&&) noexcept = default;

Queue Transfer::executor() const {
  FERRY_REQUIRE(state_ != nullptr, "Transfer::executor", "moved-from transfer", std::source_location::current());
  return Queue(state_->exec);
}

namespace {
detail::DeviceState& transfer_device(const std::unique_ptr<detail::TransferState>& s, const char* function,
                                     const std::source_location& where) {
  FERRY_REQUIRE(s != nullptr, function, "moved-from transfer", where);
  FERRY_REQUIRE(s->device.is_open(), function, "the device is closed", where);
  return *s->device.state();
}

std::shared_ptr<detail::QueueState> checked_owner(const Queue& owner, detail::DeviceState& d, const char* function,
                                                  const std::source_location& where) {
  detail::QueueState& q = detail::checked_queue(owner, function, where);
  FERRY_REQUIRE(q.device_id == &d, function, "the owner queue belongs to another device", where);
  return owner.state();
}
}  // namespace

Upload Transfer::upload(const HostBuffer& source, const Queue& owner, UploadOptions options,
                        std::source_location where) {
  FERRY_REQUIRE(static_cast<bool>(source.state()), "Transfer::upload", "null or moved-from host buffer", where);
  return upload(source, 0, source.size(), owner, std::move(options), where);
}

Upload Transfer::upload(const HostBuffer& source, std::uint64_t offset, std::uint64_t bytes, const Queue& owner,
                        UploadOptions options, std::source_location where) {
  auto& d = transfer_device(state_, "Transfer::upload", where);
  auto& host = detail::checked_host(source, &d, "Transfer::upload", where);
  detail::check_range(offset, bytes, host.memory->size, "Transfer::upload", "source", where);
  auto q = checked_owner(owner, d, "Transfer::upload", where);
  FERRY_REQUIRE(options.mode != CopyMode::preallocated, "Transfer::upload",
          "CopyMode::preallocated needs a destination: use Transfer::upload_into", where);
  std::lock_guard lock(state_->mutex);
  auto self = state_->device.state();
  const detail::HostRef src{host.memory.get(), offset};
  const auto& exec = state_->exec;
  Upload up;
  switch (options.mode) {
    case CopyMode::blocking: {
      up.buffer = detail::pool_allocate(d, self, bytes, q, nullptr, options.tag, where);
      auto& b = *up.buffer.state();
      {
        std::lock_guard qlock(q->mutex);
        detail::use_on(q, b);
        q->backend->copy_h2d(detail::ref(b), src, bytes);
        q->dirty = true;
        up.ready = detail::enqueue_mark(*q);
        q->backend->flush();
      }
      detail::record_activity(d, *q, "copy h2d (blocking)", bytes, up.ready);
      up.ready.wait(std::chrono::hours(1), where);
      return up;
    }
    case CopyMode::executor_owned:
    case CopyMode::owner_owned: {
      const bool executor_owned = options.mode == CopyMode::executor_owned;
      up.buffer = executor_owned ? detail::pool_allocate(d, self, bytes, exec, nullptr, options.tag, where)
                                 : detail::pool_allocate(d, self, bytes, q, exec, options.tag, where, !options.overlap);
      auto& b = *up.buffer.state();
      if (executor_owned && exec != q) b.recorded_user = q;  // record_stream: release waits for q
      {
        std::lock_guard elock(exec->mutex);
        // ready_after is pending only if the pool found it not reached in this call.
        detail::enqueue_wait(*exec, b.ready_after, /*query=*/false);
        exec->backend->copy_h2d(detail::ref(b), src, bytes);
        exec->dirty = true;
        up.ready = detail::finish_access(exec, b, q);
      }
      detail::record_activity(d, *exec, "copy h2d", bytes, up.ready);
      state_->keep(up.ready, source.state());
      if (options.owner_waits) detail::make_owner_wait(q, up.ready);
      return up;
    }
    case CopyMode::preallocated: break;
  }
  return up;
}

Upload Transfer::upload(std::span<const std::byte> source, const Queue& owner, UploadOptions options,
                        std::source_location where) {
  FERRY_REQUIRE(!source.empty() && source.data() != nullptr, "Transfer::upload", "empty source span", where);
  const HostView view{source.data(), source.size()};
  UploadBatch batch = upload(std::span<const HostView>(&view, 1), owner, std::move(options), where);
  return Upload{std::move(batch.buffer), std::move(batch.ready)};
}

UploadBatch Transfer::upload(std::span<const HostView> views, const Queue& owner, UploadOptions options,
                             std::source_location where) {
  constexpr const char* fn = "Transfer::upload(batch)";
  auto& d = transfer_device(state_, fn, where);
  FERRY_REQUIRE(!views.empty(), fn, "empty span of views", where);
  FERRY_REQUIRE(views.size() <= max_batch_views, fn,
          std::to_string(views.size()) + " views exceed the limit of " + std::to_string(max_batch_views), where);
  auto q = checked_owner(owner, d, fn, where);
  FERRY_REQUIRE(options.mode == CopyMode::owner_owned || options.mode == CopyMode::blocking, fn,
          "host views support the owner_owned and blocking modes", where);
  // Layout: inputs packed at 256-byte aligned offsets.
  constexpr std::uint64_t align = 256;
  UploadBatch batch;
  batch.offsets.reserve(views.size());
  std::vector<detail::GatherPiece> pieces;
  pieces.reserve(views.size());
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < views.size(); ++i) {
    const HostView& v = views[i];
    FERRY_REQUIRE(v.data != nullptr && v.size > 0, fn, "view " + std::to_string(i) + " is null or empty", where);
    FERRY_REQUIRE(v.size <= detail::BlockAllocator::max_request() && total <= detail::BlockAllocator::max_request(), fn,
            "the batch exceeds the largest supported allocation (2^52 bytes)", where);
    total = (total + align - 1) / align * align;
    batch.offsets.push_back(total);
    pieces.push_back({total, static_cast<const std::byte*>(v.data), v.size});
    total += v.size;
  }
  FERRY_REQUIRE(total <= detail::BlockAllocator::max_request(), fn,
          "the batch exceeds the largest supported allocation (2^52 bytes)", where);
  std::lock_guard lock(state_->mutex);
  auto& s = *state_;
  s.ensure_staging(d, where);
  const auto& exec = s.exec;
  batch.buffer = detail::pool_allocate(d, s.device.state(), total, q, exec, options.tag, where, !options.overlap);
  auto& b = *batch.buffer.state();
  {
    std::lock_guard elock(exec->mutex);
    detail::enqueue_wait(*exec, b.ready_after);
  }
  s.staged_h2d(pieces, total, b, where);
  {
    std::lock_guard elock(exec->mutex);
    batch.ready = detail::finish_access(exec, b, q);
  }
  detail::record_activity(d, *exec, "copy h2d (staged)", total, batch.ready);
  if (options.owner_waits || options.mode == CopyMode::blocking) detail::make_owner_wait(q, batch.ready);
  if (options.mode == CopyMode::blocking) batch.ready.wait(std::chrono::hours(1), where);
  const DeviceView base = batch.buffer.view();
  batch.views.reserve(views.size());
  for (std::size_t i = 0; i < views.size(); ++i) {
    DeviceView v = base;
    v.offset += batch.offsets[i];
    if (v.address != 0) v.address += batch.offsets[i];
    v.size = views[i].size;
    batch.views.push_back(v);
  }
  return batch;
}

TimelinePoint Transfer::upload_into(const HostBuffer& source, const DeviceBuffer& destination,
                                    UploadOptions options, std::source_location where) {
  auto& d = transfer_device(state_, "Transfer::upload_into", where);
  auto& host = detail::checked_host(source, &d, "Transfer::upload_into", where);
  auto& b = detail::checked_block(destination, &d, "Transfer::upload_into", where);
  FERRY_REQUIRE(host.memory->size <= b.requested, "Transfer::upload_into",
          "source (" + std::to_string(host.memory->size) + " bytes) is larger than the destination (" +
              std::to_string(b.requested) + " bytes)",
          where);
  std::lock_guard lock(state_->mutex);
  const auto& exec = state_->exec;
  const auto owner = detail::last_user(b);
  // The owner may still read the old contents: the executor waits for its work so far. A
  // smaller source leaves the tail as it was, so then the range changes hands properly.
  detail::prepare_access(exec, b, host.memory->size < b.requested);
  TimelinePoint done;
  {
    std::lock_guard elock(exec->mutex);
    exec->backend->copy_h2d(detail::ref(b), detail::HostRef{host.memory.get(), 0}, host.memory->size);
    exec->dirty = true;
    done = detail::finish_access(exec, b, owner);
  }
  detail::record_activity(d, *exec, "copy h2d (preallocated)", host.memory->size, done);
  state_->keep(done, source.state());
  if (options.owner_waits) detail::make_owner_wait(owner, done);
  return done;
}

TimelinePoint Transfer::download(const DeviceBuffer& source, const HostBuffer& destination, std::uint64_t offset,
                                 std::source_location where) {
  auto& d = transfer_device(state_, "Transfer::download", where);
  auto& b = detail::checked_block(source, &d, "Transfer::download", where);
  auto& host = detail::checked_host(destination, &d, "Transfer::download", where);
  detail::check_range(offset, b.requested, host.memory->size, "Transfer::download", "destination", where);
  std::lock_guard lock(state_->mutex);
  const auto& exec = state_->exec;
  const auto owner = detail::last_user(b);
  detail::prepare_access(exec, b, true);  // after the work that produced the data
  TimelinePoint done;
  {
    std::lock_guard elock(exec->mutex);
    exec->backend->copy_d2h(detail::HostRef{host.memory.get(), offset}, detail::ref(b), b.requested);
    exec->dirty = true;
    done = detail::finish_access(exec, b, owner);
  }
  detail::record_activity(d, *exec, "copy d2h", b.requested, done);
  state_->keep(done, destination.state());
  return done;
}

void Transfer::download(const DeviceBuffer& source, std::span<std::byte> destination, std::source_location where) {
  auto& d = transfer_device(state_, "Transfer::download", where);
  auto& b = detail::checked_block(source, &d, "Transfer::download", where);
  FERRY_REQUIRE(!destination.empty() && destination.data() != nullptr, "Transfer::download", "empty destination span",
          where);
  FERRY_REQUIRE(destination.size() >= b.requested, "Transfer::download",
          "destination (" + std::to_string(destination.size()) + " bytes) is smaller than the buffer (" +
              std::to_string(b.requested) + " bytes)",
          where);
  std::lock_guard lock(state_->mutex);
  auto& s = *state_;
  s.ensure_staging(d, where);
  const auto& exec = s.exec;
  const auto owner = detail::last_user(b);
  detail::prepare_access(exec, b, true);  // after the work that produced the data
  // Pipeline: keep up to ring-size chunks in flight, copy each out as it completes.
  const std::uint64_t chunk = s.options.staging_chunk_bytes;
  const std::uint64_t total = b.requested;
  struct Pending {
    std::size_t slot;
    std::uint64_t at;
    std::uint64_t n;
  };
  std::deque<Pending> pending;
  auto drain_one = [&] {
    const Pending p = pending.front();
    pending.pop_front();
    s.ring[p.slot].free.wait(std::chrono::hours(1), where);
    s.copier->copy(destination.data() + p.at, s.ring[p.slot].buffer.data(), p.n);
  };
  for (std::uint64_t at = 0; at < total; at += chunk) {
    if (pending.size() == s.ring.size()) drain_one();
    const std::uint64_t n = std::min(chunk, total - at);
    const std::size_t slot = s.next_slot;
    s.next_slot = (s.next_slot + 1) % s.ring.size();
    std::lock_guard elock(exec->mutex);
    exec->backend->copy_d2h(detail::HostRef{s.ring[slot].buffer.state()->memory.get(), 0},
                            detail::DeviceRef{b.segment, b.offset + at}, n);
    exec->dirty = true;
    s.ring[slot].free = detail::enqueue_mark(*exec);
    exec->backend->flush();
    pending.push_back({slot, at, n});
  }
  TimelinePoint done;
  {
    std::lock_guard elock(exec->mutex);
    done = detail::finish_access(exec, b, owner);
  }
  while (!pending.empty()) drain_one();
  detail::record_activity(d, *exec, "copy d2h (staged)", total, done);
}

TimelinePoint Transfer::copy(const DeviceBuffer& source, const DeviceBuffer& destination, std::uint64_t bytes,
                             std::source_location where) {
  auto& d = transfer_device(state_, "Transfer::copy", where);
  auto& src = detail::checked_block(source, &d, "Transfer::copy", where);
  auto& dst = detail::checked_block(destination, &d, "Transfer::copy", where);
  FERRY_REQUIRE(&src != &dst, "Transfer::copy", "source and destination are the same buffer", where);
  if (bytes == 0) bytes = src.requested;
  FERRY_REQUIRE(bytes <= src.requested && bytes <= dst.requested, "Transfer::copy",
          std::to_string(bytes) + " bytes exceed the source (" + std::to_string(src.requested) +
              ") or destination (" + std::to_string(dst.requested) + ")",
          where);
  std::lock_guard lock(state_->mutex);
  const auto& exec = state_->exec;
  const auto src_owner = detail::last_user(src);
  const auto dst_owner = detail::last_user(dst);
  detail::prepare_access(exec, src, true);
  detail::prepare_access(exec, dst, bytes < dst.requested);  // a partial write keeps the rest
  TimelinePoint done;
  {
    std::lock_guard elock(exec->mutex);
    exec->backend->copy_d2d(detail::ref(dst), detail::ref(src), bytes);
    exec->dirty = true;
    (void)detail::finish_access(exec, src, src_owner);
    done = detail::finish_access(exec, dst, dst_owner);
  }
  detail::record_activity(d, *exec, "copy d2d", bytes, done);
  return done;
}

void Transfer::synchronize(std::chrono::nanoseconds timeout, std::source_location where) {
  FERRY_REQUIRE(state_ != nullptr, "Transfer::synchronize", "moved-from transfer", where);
  if (!state_->device.is_open()) return;
  Queue(state_->exec).synchronize(timeout, where);
  std::lock_guard lock(state_->mutex);
  state_->in_flight.clear();
}

void run_synthetic_compute(const Queue& queue, const DeviceBuffer& input, const DeviceBuffer& output,
                           std::uint32_t units, std::source_location where) {
  constexpr const char* fn = "run_synthetic_compute";
  detail::QueueState& q = detail::checked_queue(queue, fn, where);
  auto& in = detail::checked_block(input, q.device_id, fn, where);
  auto& out = detail::checked_block(output, q.device_id, fn, where);
  FERRY_REQUIRE(&in != &out, fn, "input and output must be different buffers", where);
  FERRY_REQUIRE(in.requested == out.requested, fn,
          "input (" + std::to_string(in.requested) + " bytes) and output (" + std::to_string(out.requested) +
              " bytes) differ in size",
          where);
  FERRY_REQUIRE(units >= 1 && units <= 1'000'000, fn, "units must be in [1, 1000000]", where);
  auto qs = queue.state();
  std::lock_guard lock(q.mutex);
  detail::use_on(qs, in);
  detail::use_on(qs, out);
  // A buffer owned by another queue (executor_owned uploads) is now in use by this queue too:
  // its release must wait for this queue (PyTorch's record_stream).
  for (auto* b : {&in, &out}) {
    if (b->owner != qs) b->recorded_user = qs;
  }
  if (!q.backend->synthetic_compute(detail::ref(in), detail::ref(out), in.requested, units)) {
    detail::fail(ErrorCode::unsupported, std::string(fn) + ": this backend has no synthetic compute kernel", where);
  }
  q.dirty = true;
  auto d = q.device.lock();
  if (d && d->options.record_events) {
    const TimelinePoint done = detail::enqueue_mark(q);  // lets traces see when compute ends
    q.backend->flush();
    detail::record_activity(*d, q, "compute", in.requested, done);
  } else {
    q.backend->flush();
  }
}

}  // namespace ferry
