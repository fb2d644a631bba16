// SPDX-License-Identifier: MIT
// Conformance: what PoolBudget::stranded_bytes means. Stranded memory is free memory that the
// asking queue cannot reuse when the pool grows: blocks whose free point is pending on a
// queue other than the request's owner and first writer. Memory the owner itself can reuse
// (its own pending blocks, or blocks the copy may wait for) is never stranded.
#include <chrono>
#include <cstdint>
#include <vector>

#include "conformance.hpp"
#include "reference.hpp"

using namespace ferry;

namespace {

constexpr std::uint64_t MiB = 1024 * 1024;
using conformance::Gate;

}  // namespace

CONFORMANCE_CASE("budget: one owner with varying batch sizes strands nothing") {
  for (const bool overlap : {false, true}) {
    CAPTURE(overlap);
    Device dev = conformance::open_device();
    Queue owner = dev.queue(QueueRole::compute);
    Transfer xfer(dev);
    DevicePool& pool = dev.pool();
    Gate gate(dev, owner);
    // 24 MiB grows the pool; 12 MiB fits the released 24 MiB block; 30 MiB must grow again
    // while the owner's released blocks are still pending on the owner itself.
    const std::vector<std::uint64_t> sizes = {24 * MiB, 12 * MiB, 30 * MiB, 6 * MiB, 24 * MiB, 40 * MiB};
    std::vector<HostBuffer> sources;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      sources.push_back(dev.host_pool().allocate(sizes[i]));
      conformance::fill_pattern(sources.back().span(), 70 + i);
    }
    Upload last;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      UploadOptions o;
      o.overlap = overlap;
      Upload up = xfer.upload(sources[i], owner, o);
      const PoolBudget b = pool.get_budget();
      CAPTURE(i);
      CHECK(b.stranded_bytes == 0);
      CHECK(b.peak_stranded_bytes == 0);
      if (i + 1 == sizes.size()) {
        last = std::move(up);
      } else {
        up.buffer.release();
      }
    }
    // The owner's own next allocation reuses its pending memory without growing.
    const std::uint64_t segments = pool.get_budget().segment_allocations;
    DeviceBuffer temp = pool.allocate(12 * MiB, owner);
    CHECK(pool.get_budget().segment_allocations == segments);
    temp.release();

    gate.open();
    HostBuffer back = dev.host_pool().allocate(sizes.back());
    xfer.download(last.buffer, back).wait(std::chrono::seconds(60));
    CHECK(conformance::first_mismatch(back.span(), 70 + sizes.size() - 1) == -1);
    last.buffer.release();
    owner.synchronize();
    xfer.synchronize();
    CHECK(pool.get_budget().peak_stranded_bytes == 0);
    conformance::finish_device(dev);
  }
}

CONFORMANCE_CASE("budget: executor_owned strands the blocks its consumer still holds") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  if (xfer.executor().id() == owner.id()) {
    MESSAGE("not supported: the device has one queue, so the executor is the owner and nothing is stranded");
    conformance::finish_device(dev);
    return;
  }
  DevicePool& pool = dev.pool();
  Gate gate(dev, owner);
  ferry_bench::ReferenceUploads uploads(dev, xfer, owner);
  // A 12 MiB request takes 12 MiB of a 20 MiB segment and leaves 8 MiB clean (the consumer's
  // 12 MiB output takes a segment of its own). Released after its consumer's use (compute on
  // the owner, still behind the gate), the 12 MiB block is pending on the owner, so the
  // executor's next 12 MiB request cannot use it: the pool grows, stranding exactly it.
  constexpr std::uint64_t n = 12 * MiB;
  HostBuffer src = dev.host_pool().allocate(n);
  conformance::fill_pattern(src.span(), 90);
  Upload first = uploads.executor_owned(src);
  CHECK(first.buffer.owner() == xfer.executor());
  DeviceBuffer out = pool.allocate(n, owner);
  run_synthetic_compute(owner, first.buffer, out);  // records the owner as a user of the block
  const PoolBudget before = pool.get_budget();
  CHECK(before.stranded_bytes == 0);
  first.buffer.release();  // deferred until the owner's use (behind the gate) completes
  Upload second = uploads.executor_owned(src);
  const PoolBudget after = pool.get_budget();
  CHECK(after.segment_allocations == before.segment_allocations + 1);
  CHECK(after.stranded_bytes == n);
  CHECK(after.peak_stranded_bytes == n);

  gate.open();
  out.release();
  HostBuffer back = dev.host_pool().allocate(n);
  xfer.download(second.buffer, back).wait(std::chrono::seconds(60));
  CHECK(conformance::first_mismatch(back.span(), 90) == -1);
  second.buffer.release();
  owner.synchronize();
  xfer.synchronize();
  conformance::finish_device(dev);
}
