// SPDX-License-Identifier: MIT
// Pool reuse, footprint bounds and statistics.
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <vector>

#include "conformance.hpp"
#include "reference.hpp"

using namespace ferry;
using conformance::expect_error;

namespace {

constexpr std::uint64_t KiB = 1024, MiB = 1024 * KiB;

struct Footprint {
  std::uint64_t peak_reserved = 0;
  std::uint64_t peak_active = 0;
  std::uint64_t peak_stranded = 0;
  std::uint64_t segment_allocations = 0;
};

/// The issue-2 scenario: `steps` of upload → compute on the owner (into a temporary drawn from
/// the same pool) → release, with at most two steps in flight.
Footprint run_steps(ferry_bench::Strategy strategy, std::uint64_t bytes, int steps) {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  ferry_bench::ReferenceUploads uploads(dev, xfer, owner);
  HostBuffer src = dev.host_pool().allocate(bytes);
  conformance::fill_pattern(src.span(), 1);
  HostBuffer check = dev.host_pool().allocate(bytes);
  std::deque<TimelinePoint> computed;
  for (int step = 0; step < steps; ++step) {
    if (computed.size() >= 2) {  // host waits for step i-2's compute
      computed.front().wait();
      computed.pop_front();
    }
    UploadOptions o;
    o.tag = "input";
    Upload up = uploads.upload(strategy, src, o);
    AllocationOptions ao;
    ao.tag = "temporary";
    DeviceBuffer out = dev.pool().allocate(bytes, owner, ao);  // the step's temporary
    run_synthetic_compute(owner, up.buffer, out);
    computed.push_back(owner.mark());
    if (step == steps - 1) {
      xfer.download(out, check).wait();
      CHECK(conformance::first_mismatch(check.span(), 1, 1) == -1);
    }
    up.buffer.release();
    out.release();
  }
  owner.synchronize();
  xfer.synchronize();
  PoolBudget b = dev.pool().get_budget();
  Footprint f{b.peak_reserved_bytes, b.peak_active_bytes, b.peak_stranded_bytes,
              b.segment_allocations};
  conformance::finish_device(dev);
  return f;
}

}  // namespace

CONFORMANCE_CASE("pool: footprint: owner_owned reserves no more than a blocking copy") {
  const std::uint64_t bytes = conformance::small() ? 8 * MiB : 64 * MiB;
  const int steps = 30;
  const Footprint blocking = run_steps(ferry_bench::Strategy::blocking, bytes, steps);
  const Footprint executor = run_steps(ferry_bench::Strategy::executor_owned, bytes, steps);
  const Footprint owner = run_steps(ferry_bench::Strategy::owner_owned, bytes, steps);
  MESSAGE("peak reserved MiB over " << steps << " steps of " << bytes / MiB
                                    << " MiB: blocking " << blocking.peak_reserved / MiB
                                    << ", executor_owned " << executor.peak_reserved / MiB
                                    << ", owner_owned " << owner.peak_reserved / MiB
                                    << "; peak stranded MiB: executor_owned "
                                    << executor.peak_stranded / MiB << ", owner_owned "
                                    << owner.peak_stranded / MiB);
  // every mode holds one input and one temporary at a time at least
  CHECK(blocking.peak_reserved >= 2 * bytes);
  CHECK(blocking.peak_active >= 2 * bytes);
  // the claim ferry exists for
  CHECK(owner.peak_reserved <= blocking.peak_reserved + 2 * MiB);
  // the problem it removes: side-queue ownership strands released inputs
  CHECK(executor.peak_reserved > blocking.peak_reserved);
  CHECK(executor.peak_stranded > 0);
  // owner_owned grows only when nothing free exists, so nothing is ever stranded
  CHECK(owner.peak_stranded == 0);
  // reuse, not growth, after the first steps
  CHECK(owner.segment_allocations <= blocking.segment_allocations + 1);
}

CONFORMANCE_CASE("pool: statistics follow allocation and release; trim returns idle segments") {
  Device dev = conformance::open_device();
  DevicePool& pool = dev.pool();
  Queue owner = dev.queue(QueueRole::compute);
  Queue transfer = dev.queue(QueueRole::transfer);
  pool.trim();
  const PoolBudget b0 = pool.get_budget();
  CHECK(b0.active_bytes == 0);
  CHECK(b0.requested_bytes == 0);

  std::vector<DeviceBuffer> bufs;
  const std::vector<std::uint64_t> sizes{1, 1000, 300 * KiB, MiB + 1, 5 * MiB, 12 * MiB};
  std::uint64_t requested = 0;
  for (std::uint64_t s : sizes) {
    bufs.push_back(pool.allocate(s, owner));
    requested += s;
    CHECK(bufs.back().size() == s);
    CHECK(bufs.back().valid());
  }
  DeviceBuffer tb = pool.allocate(3 * MiB, transfer);
  CHECK(tb.owner() == transfer);

  PoolBudget b1 = pool.get_budget();
  CHECK(b1.requested_bytes == requested + 3 * MiB);
  CHECK(b1.active_bytes >= b1.requested_bytes);
  CHECK(b1.reserved_bytes >= b1.active_bytes);
  CHECK(b1.peak_reserved_bytes >= b1.reserved_bytes);
  CHECK(b1.peak_active_bytes >= b1.active_bytes);
  CHECK(b1.segment_count >= 2);  // small (2 MiB) and large classes never share segments
  CHECK(b1.allocations >= b0.allocations + sizes.size() + 1);
  std::map<std::uint32_t, QueueBudget> per_queue;
  for (const QueueBudget& q : b1.queues) per_queue[q.queue_id] = q;
  REQUIRE(per_queue.count(owner.id()) == 1);
  REQUIRE(per_queue.count(transfer.id()) == 1);
  CHECK(per_queue[owner.id()].active_bytes >= requested);
  CHECK(per_queue[transfer.id()].active_bytes >= 3 * MiB);
  CHECK(per_queue[owner.id()].active_bytes + per_queue[transfer.id()].active_bytes ==
        b1.active_bytes);

  PoolDetailedStatistics d1 = pool.calculate_statistics();
  CHECK(d1.allocated_blocks == sizes.size() + 1);
  CHECK(d1.budget.reserved_bytes == b1.reserved_bytes);
  CHECK_NOTHROW(pool.validate());

  // snapshot agrees with the statistics
  MemorySnapshot snap = pool.snapshot();
  std::uint64_t total = 0, allocated = 0;
  for (const SnapshotSegment& seg : snap.segments) {
    total += seg.total_size;
    allocated += seg.allocated_size;
    std::uint64_t in_blocks = 0;
    for (const SnapshotBlock& blk : seg.blocks) in_blocks += blk.size;
    CHECK(in_blocks == seg.total_size);
  }
  CHECK(total == b1.reserved_bytes);
  CHECK(allocated == b1.active_bytes);
  CHECK(snap.backend == to_string(dev.backend()));
  std::string json = to_json(snap);
  CHECK(json.find("segments") != std::string::npos);

  for (DeviceBuffer& b : bufs) b.release();
  tb.release();
  CHECK_FALSE(bufs.front().valid());
  owner.synchronize();
  transfer.synchronize();
  PoolBudget b2 = pool.get_budget();
  CHECK(b2.active_bytes == 0);
  CHECK(b2.requested_bytes == 0);
  CHECK(b2.reserved_bytes == b1.reserved_bytes);  // freed blocks stay cached
  CHECK(b2.peak_reserved_bytes >= b1.reserved_bytes);

  const std::uint64_t returned = pool.trim();
  PoolBudget b3 = pool.get_budget();
  CHECK(returned == b2.reserved_bytes);
  CHECK(b3.reserved_bytes == 0);
  CHECK(b3.segment_count == 0);
  CHECK(b3.peak_reserved_bytes >= b1.reserved_bytes);  // trim keeps the peak
  pool.reset_peaks();
  CHECK(pool.get_budget().peak_reserved_bytes == 0);
  CHECK(pool.trim() == 0);
  CHECK_NOTHROW(pool.validate());

  // events were recorded: alloc, free_requested/free_completed, segment alloc and free
  MemorySnapshot after = pool.snapshot();
  std::map<PoolEventKind, int> kinds;
  for (const PoolEvent& e : after.events) kinds[e.kind]++;
  CHECK(kinds[PoolEventKind::alloc] >= 7);
  CHECK(kinds[PoolEventKind::segment_alloc] >= 2);
  CHECK(kinds[PoolEventKind::segment_free] >= 2);
  CHECK(kinds[PoolEventKind::free_requested] + kinds[PoolEventKind::free_completed] >= 7);
  pool.clear_events();
  CHECK(pool.snapshot().events.empty());
}

CONFORMANCE_CASE("pool: the same owner reuses a released block at once") {
  Device dev = conformance::open_device();
  DevicePool& pool = dev.pool();
  Queue owner = dev.queue(QueueRole::compute);
  for (std::uint64_t size : {4 * KiB, 3 * MiB, 24 * MiB}) {
    CAPTURE(size);
    DeviceBuffer a = pool.allocate(size, owner);
    const PoolBudget before = pool.get_budget();
    a.release();
    DeviceBuffer b = pool.allocate(size, owner);  // no host wait, no growth
    CHECK(pool.get_budget().reserved_bytes == before.reserved_bytes);
    CHECK(pool.get_budget().segment_allocations == before.segment_allocations);
    b.release();
  }
  owner.synchronize();
}

CONFORMANCE_CASE("pool: footprint first waits for owner work; overlap first grows instead") {
  Device dev = conformance::open_device();
  DevicePool& pool = dev.pool();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  if (xfer.executor() == owner || !dev.capabilities().dedicated_transfer_queue) {
    MESSAGE("not supported here: transfers share the compute queue, which the test must block");
    return;
  }
  const std::uint64_t n = 24 * MiB;  // its own segment
  HostBuffer src = dev.host_pool().allocate(n);
  conformance::fill_pattern(src.span(), 5);
  // Hold the owner behind a gate so the block it releases stays pending.
  TimelineSemaphore gate = dev.create_semaphore(0);
  Upload first = xfer.upload(src, owner);
  owner.wait(gate.at(1));
  first.buffer.release();  // free point: behind the gate
  const PoolBudget before = pool.get_budget();

  // The executor runs copies in order, so the overlap-first upload goes first: nothing ahead
  // of it on the executor waits for the gated owner.
  UploadOptions o;
  o.overlap = true;
  Upload overlap = xfer.upload(src, owner, o);  // must not wait behind the gate
  CHECK(overlap.buffer.ready_after().empty());
  CHECK(pool.get_budget().reserved_bytes > before.reserved_bytes);
  overlap.ready.wait(std::chrono::seconds(30));  // completes while the owner is still gated
  const PoolBudget grown = pool.get_budget();

  Upload footprint = xfer.upload(src, owner);  // default: takes the pending block
  CHECK_FALSE(footprint.buffer.ready_after().empty());
  CHECK(pool.get_budget().reserved_bytes == grown.reserved_bytes);
  CHECK(pool.get_budget().pending_reuses == grown.pending_reuses + 1);
  CHECK_FALSE(footprint.ready.reached());  // the copy waits for the gated owner

  gate.signal(1);
  footprint.ready.wait(std::chrono::seconds(30));
  HostBuffer back = dev.host_pool().allocate(n);
  for (Upload* u : {&footprint, &overlap}) {
    xfer.download(u->buffer, back).wait(std::chrono::seconds(30));
    CHECK(conformance::first_mismatch(back.span(), 5) == -1);
    u->buffer.release();
  }
  owner.synchronize();
}

CONFORMANCE_CASE("pool: a loader's stream of small uploads stays in one segment, also while every free block is pending") {
  // Many small uploads, each released at once (a data loader of small tensors). The pool's
  // first pass reads the timelines' watermarks, not the driver: a released block it cannot
  // see reached must still be reused (the copy waits on the device), never make the pool grow.
  Device dev = conformance::open_device();
  DevicePool& pool = dev.pool();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  constexpr std::uint64_t n = 64 * KiB;
  // More than a 2 MiB small segment holds (32 blocks), so pending blocks must be reused; few
  // enough that the work queued behind the gate stays far below a driver's queue depth
  // (a full CUDA stream would block the enqueue, and the gate opens only after the loop).
  constexpr int kUploads = 100;
  std::vector<HostBuffer> sources;
  for (int k = 0; k < 3; ++k) {
    sources.push_back(dev.host_pool().allocate(n));
    conformance::fill_pattern(sources.back().span(), 40 + static_cast<std::uint64_t>(k));
  }
  // Hold the owner behind a gate: every block it releases stays pending until the end.
  TimelineSemaphore gate = dev.create_semaphore(0);
  owner.wait(gate.at(1));
  Upload first = xfer.upload(sources[0], owner);
  const PoolBudget after_first = pool.get_budget();
  first.buffer.release();
  Upload last;
  for (int i = 1; i < kUploads; ++i) {
    Upload up = xfer.upload(sources[static_cast<std::size_t>(i) % sources.size()], owner);
    if (i == kUploads - 1) {
      last = std::move(up);
    } else {
      up.buffer.release();
    }
  }
  const PoolBudget gated = pool.get_budget();
  CHECK(gated.segment_allocations == after_first.segment_allocations);
  CHECK(gated.reserved_bytes == after_first.reserved_bytes);
  CHECK(gated.peak_stranded_bytes == 0);
  CHECK(gated.pending_reuses > 0);  // the blocks were reused while pending

  gate.signal(1);
  HostBuffer back = dev.host_pool().allocate(n);
  xfer.download(last.buffer, back).wait(std::chrono::seconds(30));
  CHECK(conformance::first_mismatch(back.span(), 40 + (kUploads - 1) % 3) == -1);
  last.buffer.release();
  owner.synchronize();
  xfer.synchronize();
  CHECK(pool.get_budget().segment_allocations == after_first.segment_allocations);
}

CONFORMANCE_CASE("pool: randomized operations keep the invariants") {
  Device dev = conformance::open_device();
  DevicePool& pool = dev.pool();
  std::vector<Queue> queues{dev.queue(QueueRole::compute), dev.queue(QueueRole::transfer)};
  if (Queue third = conformance::try_create_queue(dev, QueueRole::compute, "third")) {
    queues.push_back(third);
  }
  std::mt19937_64 rng(12345);
  std::vector<DeviceBuffer> live;
  std::uint64_t live_requested = 0;
  const int ops = conformance::small() ? 600 : 2000;
  for (int i = 0; i < ops; ++i) {
    const auto r = rng() % 100;
    if (r < 50 || live.empty()) {
      std::uint64_t size = 1 + rng() % (r < 5 ? 24 * MiB : 1536 * KiB);
      Queue& q = queues[rng() % queues.size()];
      live.push_back(pool.allocate(size, q));
      live_requested += size;
    } else if (r < 90) {
      std::size_t k = rng() % live.size();
      live_requested -= live[k].size();
      live[k].release();
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    } else if (r < 95) {
      queues[rng() % queues.size()].synchronize();
    } else {
      (void)pool.trim();
    }
    if (i % 10 == 0) REQUIRE_NOTHROW(pool.validate());
    PoolBudget b = pool.get_budget();
    if (b.requested_bytes != live_requested || b.active_bytes > b.reserved_bytes) {
      FAIL("statistics diverged at op " << i << ": requested " << b.requested_bytes
                                        << " vs live " << live_requested << ", active "
                                        << b.active_bytes << ", reserved " << b.reserved_bytes);
    }
  }
  PoolDetailedStatistics d = pool.calculate_statistics();
  CHECK(d.allocated_blocks == live.size());
  for (DeviceBuffer& b : live) b.release();
  for (Queue& q : queues) q.synchronize();
  CHECK(pool.get_budget().active_bytes == 0);
  pool.trim();
  CHECK(pool.get_budget().reserved_bytes == 0);
  CHECK_NOTHROW(pool.validate());
}

CONFORMANCE_CASE("pool: snapshot JSON written to a file; bad path is backend_error") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  AllocationOptions ao;
  ao.tag = "json-tag";
  DeviceBuffer b = dev.pool().allocate(10000, owner, ao);
  MemorySnapshot snap = dev.pool().snapshot();
  CHECK_FALSE(snap.segments.empty());
  CHECK_FALSE(snap.queues.empty());
  const auto path = std::filesystem::temp_directory_path() /
                    ("ferry-conformance-" + std::string(to_string(dev.backend())) + ".json");
  write_json(snap, path);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  CHECK(ss.str() == to_json(snap));
  CHECK(ss.str().find("json-tag") != std::string::npos);
  std::filesystem::remove(path);
  expect_error(ErrorCode::backend_error,
               [&] { write_json(snap, "/nonexistent-dir-ferry/x/y.json"); },
               "write_json to a missing directory");
  b.release();
}
