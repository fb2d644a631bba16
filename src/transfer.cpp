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
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>

#include "internal.hpp"
#include "parallel_copy.hpp"
#include "planning.hpp"
#include "small_vector.hpp"

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
    FERRY_REQUIRE(options.staging, "Transfer", "staging is disabled (TransferOptions::staging = false)", where);
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

  // ---- Pipelined staging -------------------------------------------------------------------
  //
  // A staged copy moves a "stream" of `total` bytes (a batch upload's packed layout, or the
  // coalesced source ranges of a batch download) through the ring in chunks (see
  // planning::staging_geometry). The ring keeps its configured buffers (staging_chunks x
  // staging_chunk_bytes: the cap is never exceeded); a call may cut each buffer into several
  // smaller chunks.
  //
  // Why smaller chunks: with 4 x 16 MiB and a 64 MiB batch, chunk k's DMA cannot start before
  // all of chunk k is packed, so the first 16 MiB of packing and the last 16 MiB of DMA do not
  // overlap anything: on the H200 (16 threads, 42.6 GB/s memcpy, 55.5 GB/s DMA) that is
  // ~0.4 ms + ~0.3 ms on top of ~1.6 ms of packing. Aiming at >= 32 chunks per call (2 MiB
  // for 64 MiB) leaves ~40 us of fill and drain. The 1 MiB floor keeps DMAs large enough for
  // the copy engine to reach full rate (per-copy launch ~5-10 us is hidden behind the previous
  // DMA of >= 1 MiB, ~20 us at 55 GB/s). Chunks are the buffer size divided by a power of
  // two, so they tile every buffer exactly. Figures: docs/benchmarks.md.
  //
  // Host side: the whole call's memcpys are planned up front (planning::plan_copies) and
  // split into units balanced by bytes. The helpers are woken once per call and claim units
  // in order, so all threads work on the oldest chunks first; the calling thread issues each
  // chunk's DMA the moment its last unit finishes and packs units in between.
  static constexpr planning::StagingTuning kTuning{};

  using StreamPiece = planning::StreamPiece;
  using Run = planning::Run;

  planning::Geometry geometry(std::uint64_t total) const {
    return planning::staging_geometry(total, options.staging_chunk_bytes, ring.size(), next_slot, kTuning);
  }

  CopyPlan plan_copies(const std::vector<StreamPiece>& pieces, std::uint64_t total, const planning::Geometry& g,
                       bool to_staging) const {
    SmallVector<std::byte*, 8> bases;
    for (const Slot& slot : ring) bases.push_back(slot.buffer.data());
    return planning::plan_copies(pieces, total, g, std::span<std::byte* const>(bases.data(), bases.size()),
                                 copier->threads() + 1, kTuning, to_staging);
  }

  /// Spin briefly, then yield: the caller waits for helpers finishing a unit (tens of us).
  static void pause(unsigned& idle) {
    if (++idle > 64) std::this_thread::yield();
  }

  /// Upload: pack `pieces` (stream = the batch layout, `total` bytes) through the ring into
  /// block `b`, one DMA per chunk. Caller holds `mutex` and made the executor wait for
  /// b.ready_after.
  void staged_h2d(const std::vector<StreamPiece>& pieces, std::uint64_t total, const BlockState& b,
                  const std::source_location& where) {
    const planning::Geometry g = geometry(total);
    const CopyPlan plan = plan_copies(pieces, total, g, true);
    const std::uint64_t K = g.chunks, R = g.ring_chunks;
    std::vector<TimelinePoint> before(ring.size());  // last use of each buffer before this call
    for (std::size_t i = 0; i < ring.size(); ++i) before[i] = ring[i].free;
    std::vector<TimelinePoint> dma(K);
    // Chunk k's staging may be written once its previous reader is done: a DMA of an earlier
    // call (first lap) or of chunk k - R of this call.
    auto gate = [&](std::uint64_t k) -> const TimelinePoint& {
      return k < R ? before[g.buffer(k)] : dma[k - R];
    };
    PipelinedCopy job(*copier, plan);
    std::uint64_t released = 0, issued = 0;
    unsigned idle = 0;
    while (issued < K) {
      bool progress = false;
      while (released < K && (released < R || released - R < issued) && gate(released).reached()) {
        job.release_through(static_cast<std::uint32_t>(released++));
        progress = true;
      }
      while (issued < released && job.chunk_done(static_cast<std::uint32_t>(issued))) {
        const std::uint64_t at = issued * g.chunk, n = std::min(g.chunk, total - at);
        Slot& slot = ring[g.buffer(issued)];
        std::lock_guard elock(exec->mutex);
        exec->backend->copy_h2d(DeviceRef{b.segment, b.offset + at},
                                HostRef{slot.buffer.state()->memory.get(), g.offset(issued)}, n);
        exec->dirty = true;
        dma[issued] = slot.free = enqueue_mark(*exec);
        exec->backend->flush();
        ++issued;
        progress = true;
      }
      if (issued == K) break;
      if (job.run_one() || progress) {
        idle = 0;
        continue;
      }
      if (issued == released) {
        gate(released).wait(std::chrono::hours(1), where);  // DMA-bound: sleep on the queue
      } else {
        pause(idle);  // helpers are finishing the oldest chunk
      }
    }
    next_slot = g.next_first();
  }

  /// Download: DMA the stream (`runs` of `b`, `total` bytes) through the ring chunk by chunk
  /// and scatter each chunk into `pieces` as soon as its DMA completes. Returns when every
  /// byte is in host memory. Caller holds `mutex` and ordered the executor after the
  /// source's producers.
  void staged_d2h(const std::vector<StreamPiece>& pieces, const std::vector<Run>& runs, std::uint64_t total,
                  const BlockState& b, const std::source_location& where) {
    const planning::Geometry g = geometry(total);
    const CopyPlan plan = plan_copies(pieces, total, g, false);
    const std::uint64_t K = g.chunks, R = g.ring_chunks;
    std::vector<TimelinePoint> dma(K);
    PipelinedCopy job(*copier, plan);
    std::uint64_t released = 0, issued = 0;
    std::size_t run = 0;
    unsigned idle = 0;
    while (!job.all_done()) {
      bool progress = false;
      // DMA ahead while the ring has room: chunk k reuses the staging of chunk k - R, whose
      // scatter must be complete; in the first lap, wait for earlier calls' use of the buffer.
      while (issued < K && (issued < R || job.chunk_done(static_cast<std::uint32_t>(issued - R)))) {
        Slot& slot = ring[g.buffer(issued)];
        if (issued < R && g.offset(issued) == 0) slot.free.wait(std::chrono::hours(1), where);
        const std::uint64_t cb = issued * g.chunk, ce = std::min(total, cb + g.chunk);
        std::lock_guard elock(exec->mutex);
        while (run < runs.size() && runs[run].stream + runs[run].size <= cb) ++run;
        for (std::size_t r = run; r < runs.size() && runs[r].stream < ce; ++r) {
          const std::uint64_t a = std::max(cb, runs[r].stream), e = std::min(ce, runs[r].stream + runs[r].size);
          exec->backend->copy_d2h(HostRef{slot.buffer.state()->memory.get(), g.offset(issued) + (a - cb)},
                                  DeviceRef{b.segment, b.offset + runs[r].source + (a - runs[r].stream)}, e - a);
        }
        exec->dirty = true;
        dma[issued] = slot.free = enqueue_mark(*exec);
        exec->backend->flush();
        ++issued;
        progress = true;
      }
      while (released < issued && dma[released].reached()) {
        job.release_through(static_cast<std::uint32_t>(released++));
        progress = true;
      }
      if (job.run_one() || progress) {
        idle = 0;
        continue;
      }
      if (released < issued) {
        dma[released].wait(std::chrono::hours(1), where);  // DMA-bound: sleep on the queue
      } else {
        pause(idle);  // helpers are finishing units
      }
    }
    next_slot = g.next_first();
  }

  /// Keep `host` alive until `done`. Completed entries are dropped in batches, once 32 more
  /// are kept than after the last prune: each prune asks the backend, and a query costs the
  /// copy path (see kHotPathQueryIntervalNs), so most calls ask nothing. Caller holds `mutex`.
  void keep(const TimelinePoint& done, const std::shared_ptr<HostAllocation>& host) {
    if (in_flight.size() >= prune_at) {
      prune_completed();
      prune_at = in_flight.size() + 32;
    }
    in_flight.push_back({done, host});
  }
  /// Drop the entries whose copy is complete, and only those: an entry is released when its
  /// own point is seen reached, never because of a wait that began before it was kept (a
  /// copy enqueued by another thread during that wait still reads or writes its memory).
  /// Entries are kept in call order on the executor's timeline, so the first entry not
  /// reached ends the scan. Caller holds `mutex`.
  void prune_completed() {
    while (!in_flight.empty() && point_reached(in_flight.front().done)) in_flight.pop_front();
  }
  std::size_t prune_at = 32;
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
  if (next != exec && next->backend->acquires_ownership()) {
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
  FERRY_REQUIRE(options.staging_threads >= -1, "Transfer::Transfer",
                "staging_threads must be -1 (automatic) or >= 0, not " + std::to_string(options.staging_threads),
                where);
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

Queue Transfer::executor(std::source_location where) const {
  FERRY_REQUIRE(state_ != nullptr, "Transfer::executor", "moved-from transfer", where);
  return Queue(state_->exec);
}

namespace {
detail::DeviceState& transfer_device(const std::unique_ptr<detail::TransferState>& s, const char* function,
                                     const std::source_location& where) {
  FERRY_REQUIRE(s != nullptr, function, "moved-from transfer", where);
  FERRY_REQUIRE(s->device.is_open(), function, "the device is closed", where);
  return *s->device.state();
}

/// The owner queue's state, checked against `d`: the transfer's device, which the caller has
/// found open and which the transfer keeps alive, so no lock of the queue's device is needed
/// once the queue is known to belong to it.
const std::shared_ptr<detail::QueueState>& checked_owner(const Queue& owner, detail::DeviceState& d,
                                                         const char* function, const std::source_location& where) {
  FERRY_REQUIRE(static_cast<bool>(owner), function, "null queue handle", where);
  FERRY_REQUIRE(owner.state()->device_id == &d, function, "the owner queue belongs to another device", where);
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
  const detail::BoundThread bound(*d.backend);
  auto& host = detail::checked_host(source, &d, "Transfer::upload", where);
  detail::check_range(offset, bytes, host.memory->size, "Transfer::upload", "source", where);
  const auto& q = checked_owner(owner, d, "Transfer::upload", where);
  FERRY_REQUIRE(options.mode != CopyMode::preallocated, "Transfer::upload",
          "CopyMode::preallocated needs a destination: use Transfer::upload_into", where);
  std::lock_guard lock(state_->mutex);
  const auto& self = state_->device.state();
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
  const detail::BoundThread bound(*d.backend);
  FERRY_REQUIRE(!views.empty(), fn, "empty span of views", where);
  FERRY_REQUIRE(views.size() <= max_batch_views, fn,
          std::to_string(views.size()) + " views exceed the limit of " + std::to_string(max_batch_views), where);
  const auto& q = checked_owner(owner, d, fn, where);
  FERRY_REQUIRE(options.mode == CopyMode::owner_owned || options.mode == CopyMode::blocking, fn,
          "host views support the owner_owned and blocking modes", where);
  for (std::size_t i = 0; i < views.size(); ++i) {
    const HostView& v = views[i];
    FERRY_REQUIRE(v.data != nullptr, fn, "view " + std::to_string(i) + " has a null data pointer", where);
    FERRY_REQUIRE(v.size > 0, fn, "view " + std::to_string(i) + " is empty (size 0)", where);
    FERRY_REQUIRE(state_->options.staging, fn,
                  "view " + std::to_string(i) + " (" + std::to_string(v.size) +
                      " bytes of host memory) is larger than the staging cap of 0 bytes: staging is disabled "
                      "(TransferOptions::staging = false); upload a HostBuffer instead",
                  where);
  }
  std::optional<detail::planning::BatchLayout> layout =
      detail::planning::layout_batch(views, detail::BlockAllocator::max_request());
  FERRY_REQUIRE(layout.has_value(), fn, "the batch exceeds the largest supported allocation (2^52 bytes)", where);
  const std::uint64_t total = layout->total;
  UploadBatch batch;
  batch.offsets = std::move(layout->offsets);
  const std::vector<detail::planning::StreamPiece>& pieces = layout->pieces;
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
  try {
    s.staged_h2d(pieces, total, b, where);
  } catch (...) {
    // The chunks issued before the failure still write the block: its release (the batch's
    // buffer goes with the exception) must come after them.
    std::lock_guard elock(exec->mutex);
    (void)detail::finish_access(exec, b, q);
    throw;
  }
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
  const detail::BoundThread bound(*d.backend);
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
  const detail::BoundThread bound(*d.backend);
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
  const detail::BoundThread bound(*d.backend);
  auto& b = detail::checked_block(source, &d, "Transfer::download", where);
  FERRY_REQUIRE(!destination.empty() && destination.data() != nullptr, "Transfer::download", "empty destination span",
          where);
  FERRY_REQUIRE(destination.size() >= b.requested, "Transfer::download",
          "destination (" + std::to_string(destination.size()) + " bytes) is smaller than the buffer (" +
              std::to_string(b.requested) + " bytes)",
          where);
  const DownloadView view{0, destination.data(), b.requested};
  download(source, std::span<const DownloadView>(&view, 1), where);
}

void Transfer::download(const DeviceBuffer& source, std::span<const DownloadView> views, std::source_location where) {
  constexpr const char* fn = "Transfer::download(batch)";
  auto& d = transfer_device(state_, fn, where);
  const detail::BoundThread bound(*d.backend);
  auto& b = detail::checked_block(source, &d, fn, where);
  FERRY_REQUIRE(!views.empty(), fn, "empty span of views", where);
  FERRY_REQUIRE(views.size() <= max_batch_views, fn,
                std::to_string(views.size()) + " views exceed the limit of " + std::to_string(max_batch_views), where);
  for (std::size_t i = 0; i < views.size(); ++i) {
    const DownloadView& v = views[i];
    FERRY_REQUIRE(v.data != nullptr, fn, "view " + std::to_string(i) + " has a null data pointer", where);
    FERRY_REQUIRE(v.size > 0, fn, "view " + std::to_string(i) + " is empty (size 0)", where);
    FERRY_REQUIRE(v.offset <= b.requested && v.size <= b.requested - v.offset, fn,
                  "view " + std::to_string(i) + ": range [" + std::to_string(v.offset) + ", +" +
                      std::to_string(v.size) + ") exceeds the source buffer's " + std::to_string(b.requested) +
                      " bytes",
                  where);
    FERRY_REQUIRE(reinterpret_cast<std::uintptr_t>(v.data) <= UINTPTR_MAX - v.size, fn,
                  "view " + std::to_string(i) + ": destination range wraps around the address space", where);
    FERRY_REQUIRE(state_->options.staging, fn,
                  "view " + std::to_string(i) + " (" + std::to_string(v.size) +
                      " bytes) is larger than the staging cap of 0 bytes: staging is disabled "
                      "(TransferOptions::staging = false); download into a HostBuffer instead",
                  where);
  }
  // Destinations must not overlap: sort by address, compare neighbours.
  std::vector<std::uint32_t> order(views.size());
  for (std::size_t i = 0; i < views.size(); ++i) order[i] = static_cast<std::uint32_t>(i);
  auto addr = [&](std::uint32_t i) { return reinterpret_cast<std::uintptr_t>(views[i].data); };
  std::sort(order.begin(), order.end(), [&](std::uint32_t x, std::uint32_t y) { return addr(x) < addr(y); });
  for (std::size_t j = 1; j < order.size(); ++j) {
    const std::uint32_t p = order[j - 1], c = order[j];
    FERRY_REQUIRE(addr(p) + views[p].size <= addr(c), fn,
                  "the destinations of views " + std::to_string(std::min(p, c)) + " and " +
                      std::to_string(std::max(p, c)) + " overlap",
                  where);
  }
  const detail::planning::DownloadPlan plan = detail::planning::coalesce_downloads(views);
  std::lock_guard lock(state_->mutex);
  auto& s = *state_;
  s.ensure_staging(d, where);
  const auto& exec = s.exec;
  const auto owner = detail::last_user(b);
  detail::prepare_access(exec, b, true);  // after the work that produced the data
  TimelinePoint done;
  try {
    s.staged_d2h(plan.pieces, plan.runs, plan.total, b, where);
  } catch (...) {
    std::lock_guard elock(exec->mutex);
    (void)detail::finish_access(exec, b, owner);  // keep the block's ordering consistent
    throw;
  }
  {
    std::lock_guard elock(exec->mutex);
    done = detail::finish_access(exec, b, owner);
  }
  detail::record_activity(d, *exec, "copy d2h (staged)", plan.total, done);
}

void Transfer::download(const UploadBatch& batch, std::span<const HostSpan> destinations, std::source_location where) {
  constexpr const char* fn = "Transfer::download(batch)";
  FERRY_REQUIRE(destinations.size() == batch.offsets.size() && batch.views.size() == batch.offsets.size(), fn,
                std::to_string(destinations.size()) + " destinations for a batch of " +
                    std::to_string(batch.offsets.size()) + " inputs",
                where);
  std::vector<DownloadView> views(destinations.size());
  for (std::size_t i = 0; i < destinations.size(); ++i) {
    FERRY_REQUIRE(destinations[i].size == batch.views[i].size, fn,
                  "destination " + std::to_string(i) + " has " + std::to_string(destinations[i].size) +
                      " bytes, input " + std::to_string(i) + " of the batch has " +
                      std::to_string(batch.views[i].size),
                  where);
    views[i] = {batch.offsets[i], destinations[i].data, destinations[i].size};
  }
  download(batch.buffer, std::span<const DownloadView>(views), where);
}

TimelinePoint Transfer::copy(const DeviceBuffer& source, const DeviceBuffer& destination, std::uint64_t bytes,
                             std::source_location where) {
  auto& d = transfer_device(state_, "Transfer::copy", where);
  const detail::BoundThread bound(*d.backend);
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
  // Copies enqueued by other threads while this thread waited are not covered by the wait:
  // only what is seen complete is let go.
  state_->prune_completed();
  state_->prune_at = state_->in_flight.size() + 32;
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
