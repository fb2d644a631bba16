// SPDX-License-Identifier: MIT
// Ordering: the owner never sees stale data, and the executor never overwrites a
// block the owner is still using. Run with latency injection (conformance-host-latency) a
// missing wait anywhere here turns into wrong bytes.
#include <array>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>
#include <vector>

#include "conformance.hpp"
#include "reference.hpp"

using namespace ferry;
using conformance::fill_pattern;
using conformance::first_mismatch;

namespace {
constexpr std::uint64_t KiB = 1024, MiB = 1024 * KiB;
}

CONFORMANCE_CASE("ordering: the owner never sees stale data (pipelined reuse)") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  const std::uint64_t n = 256 * KiB + 3;
  const int iterations = conformance::small() ? 60 : 200;
  constexpr int ring = 4;  // host buffers in flight

  ferry_bench::ReferenceUploads uploads(dev, xfer, owner);
  using ferry_bench::Strategy;
  for (Strategy mode : {Strategy::owner_owned, Strategy::executor_owned, Strategy::blocking}) {
    CAPTURE(ferry_bench::to_string(mode));
    struct Slot {
      HostBuffer src, dst;
      TimelinePoint done;
      int iteration = -1;
    };
    std::array<Slot, ring> slots;
    for (Slot& s : slots) {
      s.src = dev.host_pool().allocate(n);
      s.dst = dev.host_pool().allocate(n);
    }
    int failures = 0;
    auto verify = [&](Slot& s) {
      if (s.iteration < 0) return;
      s.done.wait();
      std::int64_t bad = first_mismatch(s.dst.span(), static_cast<std::uint64_t>(s.iteration), 1);
      if (bad != -1 && failures++ < 5) {
        FAIL_CHECK("iteration " << s.iteration << ": the owner saw stale data at byte "
                                    << bad);
      }
      s.iteration = -1;
    };
    for (int k = 0; k < iterations; ++k) {
      Slot& s = slots[static_cast<std::size_t>(k % ring)];
      verify(s);  // frees the slot's host memory for reuse
      fill_pattern(s.src.span(), static_cast<std::uint64_t>(k));
      Upload up = uploads.upload(mode, s.src);
      // Blocks released by the previous iteration are reused here while its compute may
      // still be queued on the owner.
      DeviceBuffer out = dev.pool().allocate(n, owner);
      run_synthetic_compute(owner, up.buffer, out, 1 + static_cast<std::uint32_t>(k % 3));
      s.done = xfer.download(out, s.dst);
      up.buffer.release();
      out.release();
      s.iteration = k;
    }
    for (Slot& s : slots) verify(s);
    CHECK(failures == 0);
    owner.synchronize();
    xfer.synchronize();
  }
}

CONFORMANCE_CASE("ordering: the executor never overwrites a block still in use") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  // Above 10 MiB every request gets a segment of its own (pool.hpp), so no free remainder
  // can serve the second upload: the pool must take the busy block or grow.
  const std::uint64_t n = conformance::small() ? 12 * MiB : 24 * MiB;
  const std::uint32_t units = conformance::small() ? 4 : 10;
  HostBuffer first = dev.host_pool().allocate(n);
  HostBuffer second = dev.host_pool().allocate(n);
  HostBuffer result = dev.host_pool().allocate(n);
  HostBuffer result2 = dev.host_pool().allocate(n);
  const int rounds = conformance::small() ? 3 : 6;
  int reused = 0;
  for (int r = 0; r < rounds; ++r) {
    CAPTURE(r);
    fill_pattern(first.span(), 100 + static_cast<std::uint64_t>(r));
    fill_pattern(second.span(), 200 + static_cast<std::uint64_t>(r));
    Upload a = xfer.upload(first, owner);
    DeviceBuffer out = dev.pool().allocate(n, owner);
    // The compute waits behind a gate, so its free point is still pending when the second
    // upload allocates, however fast the device is.
    conformance::Gate gate(dev, owner);
    run_synthetic_compute(owner, a.buffer, out, units);  // reads `a` many times
    const std::uint64_t a_address = a.buffer.view().address;
    const void* a_native = a.buffer.view().native;
    const std::uint64_t a_offset = a.buffer.view().offset;
    a.buffer.release();  // stream-ordered: the compute above still reads it
    // Same size: the pool hands `a`'s block to this upload. The executor must wait for the
    // compute reading it before writing.
    Upload b = xfer.upload(second, owner);
    DeviceView bv = b.buffer.view();
    if (bv.address == a_address && bv.native == a_native && bv.offset == a_offset) {
      ++reused;
      CHECK_MESSAGE(!b.buffer.ready_after().empty(),
                    "a reused block whose free point was pending must carry ready_after");
    }
    gate.open();
    TimelinePoint d1 = xfer.download(out, result);
    TimelinePoint d2 = xfer.download(b.buffer, result2);
    d1.wait();
    d2.wait();
    CHECK_MESSAGE(first_mismatch(result.span(), 100 + static_cast<std::uint64_t>(r), 1) == -1,
                  "the compute's input was overwritten by a later upload while in use");
    CHECK(first_mismatch(result2.span(), 200 + static_cast<std::uint64_t>(r)) == -1);
    b.buffer.release();
    out.release();
    owner.synchronize();
    xfer.synchronize();
    dev.pool().trim();  // next round starts with no free block but the one being released
  }
  // The pool contract: the pool takes the owner's still-pending block before growing (footprint
  // first), so every round must have handed `a`'s block to the second upload.
  CHECK_MESSAGE(reused == rounds, "the second upload reused the busy block in " << reused
                                      << " of " << rounds << " rounds");
  PoolBudget budget = dev.pool().get_budget();
  CHECK(budget.pending_reuses > 0);
}

CONFORMANCE_CASE("ordering: download waits for the owner's work enqueued before it") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  const std::uint64_t n = 2 * MiB + 1;
  HostBuffer src = dev.host_pool().allocate(n);
  HostBuffer dst = dev.host_pool().allocate(n);
  for (int k = 0; k < 20; ++k) {
    fill_pattern(src.span(), 300 + static_cast<std::uint64_t>(k));
    Upload up = xfer.upload(src, owner);
    DeviceBuffer out = dev.pool().allocate(n, owner);
    DeviceBuffer out2 = dev.pool().allocate(n, owner);
    run_synthetic_compute(owner, up.buffer, out, 4);
    run_synthetic_compute(owner, out, out2, 1);  // out2 = in + 2
    TimelinePoint d = xfer.download(out2, dst);
    // released right after the download was enqueued: the read must still see the data
    out2.release();
    out.release();
    up.buffer.release();
    d.wait();
    CHECK(first_mismatch(dst.span(), 300 + static_cast<std::uint64_t>(k), 2) == -1);
  }
}

CONFORMANCE_CASE("ordering: device-to-device copy between two owners") {
  Device dev = conformance::open_device();
  Queue a = dev.queue(QueueRole::compute);
  Queue b = conformance::try_create_queue(dev, QueueRole::compute, "b");
  if (!b) return;
  Transfer xfer(dev);
  const std::uint64_t n = MiB + 9;
  HostBuffer src = dev.host_pool().allocate(n);
  HostBuffer dst = dev.host_pool().allocate(n);
  for (int k = 0; k < 10; ++k) {
    fill_pattern(src.span(), 400 + static_cast<std::uint64_t>(k));
    Upload up = xfer.upload(src, a);
    DeviceBuffer t = dev.pool().allocate(n, a);
    run_synthetic_compute(a, up.buffer, t, 3);
    DeviceBuffer on_b = dev.pool().allocate(n, b);
    xfer.copy(t, on_b);  // waits for a's compute; b's later work waits for the copy
    DeviceBuffer out = dev.pool().allocate(n, b);
    run_synthetic_compute(b, on_b, out);
    TimelinePoint d = xfer.download(out, dst);
    t.release();
    up.buffer.release();
    on_b.release();
    out.release();
    d.wait();
    CHECK(first_mismatch(dst.span(), 400 + static_cast<std::uint64_t>(k), 2) == -1);
  }
}

CONFORMANCE_CASE("ordering: destination_unused waits for the block's ready_after, not the owner's queued work") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  if (xfer.executor() == owner || !dev.capabilities().dedicated_transfer_queue) {
    MESSAGE("not supported here: transfers share the compute queue, which the test must block");
    return;
  }
  const std::uint64_t n = 1 * MiB + 5;
  const auto wait = std::chrono::seconds(30);
  HostBuffer src = dev.host_pool().allocate(n);
  fill_pattern(src.span(), 81);
  UploadIntoOptions unused;
  unused.destination_unused = true;
  unused.owner_waits = false;
  AllocationOptions for_exec;
  for_exec.first_writer = xfer.executor();

  // Misuse first: a block the owner allocated for itself carries no ready_after for the
  // executor, so the guarantee cannot be honoured.
  {
    DeviceBuffer own = dev.pool().allocate(n, owner);
    conformance::expect_error(ErrorCode::invalid_argument, [&] { (void)xfer.upload_into(src, own, unused); },
                              "destination_unused into a block without first_writer");
    own.release();
  }

  // The owner's previous use of a block: released behind a gate (pending), then reused.
  conformance::Gate old_use(dev, owner);
  const std::uint64_t whole = 24 * MiB;  // a segment of its own, so the reuse is that block
  DeviceBuffer first = dev.pool().allocate(whole, owner, for_exec);
  first.release();  // free point: behind the gate
  DeviceBuffer reused = dev.pool().allocate(whole, owner, for_exec);
  CHECK_FALSE(reused.ready_after().empty());
  // The gate also stands for compute queued on the owner after that free point, which a copy
  // into a block unused by it must not wait for.
  DeviceBuffer fresh = dev.pool().allocate(8 * MiB, owner, for_exec);  // its own segment, never used
  const TimelinePoint fresh_done = xfer.upload_into(src, 0, n, fresh, 0, unused);
  // Completes while the owner is still held: the copy does not wait for its queued work.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!fresh_done.reached() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(fresh_done.reached());
  if (!dev.capabilities().ownership_transfer) {
    // A second copy into another part of the block: only ferry's first copy touched it, so
    // it too runs while the owner is held (with ownership transfers the owner must hand the
    // range back first, after its queued work).
    const TimelinePoint second = xfer.upload_into(src, 0, n, fresh, 2 * MiB, unused);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!second.reached() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK(second.reached());
  }

  const TimelinePoint reused_done = xfer.upload_into(src, 0, n, reused, 0, unused);
  CHECK_FALSE(reused_done.reached());  // waits for the block's previous use
  // Without the flag the copy waits for the owner's queued work (the gate).
  DeviceBuffer other = dev.pool().allocate(8 * MiB, owner, for_exec);
  UploadIntoOptions plain;
  plain.owner_waits = false;
  const TimelinePoint plain_done = xfer.upload_into(src, 0, n, other, 0, plain);
  CHECK_FALSE(plain_done.reached());
  old_use.open();
  reused_done.wait(wait);
  plain_done.wait(wait);
  for (DeviceBuffer* b : {&fresh, &reused, &other}) {
    HostBuffer back = dev.host_pool().allocate(b->size());
    xfer.download(*b, back, 0).wait(wait);
    CHECK(first_mismatch(back.span().first(n), 81) == -1);
    if (b == &fresh && !dev.capabilities().ownership_transfer) {
      CHECK(first_mismatch(back.span().subspan(2 * MiB, n), 81) == -1);
    }
    b->release();
  }
  owner.synchronize();
}
