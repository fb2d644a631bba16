// SPDX-License-Identifier: MIT
// Conformance: a buffer used by its owner and by another queue. Every later user of its memory
// (its owner, the executor, the next owner of the block once it is released) must come after
// the work of both queues, not only after the last queue that used it.
#include <chrono>
#include <cstdint>
#include <string>

#include "conformance.hpp"

using namespace ferry;

namespace {

/// Whether the backend runs the synthetic kernel (Vulkan and CUDA do; HIP does not).
bool has_compute(Device& dev, Queue& q, Transfer& xfer) {
  HostBuffer h = dev.host_pool().allocate(256);
  Upload up = xfer.upload(h, q);
  DeviceBuffer out = dev.pool().allocate(256, q);
  try {
    run_synthetic_compute(q, up.buffer, out);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::unsupported) return false;
    throw;
  }
  q.synchronize();
  return true;
}

/// Whether `point` is reached within `ms` milliseconds (a bounded wait that may time out).
bool reached_within(const TimelinePoint& point, int ms) {
  try {
    point.wait(std::chrono::milliseconds(ms));
    return true;
  } catch (const Error& e) {
    if (e.code() != ErrorCode::timeout) throw;
    return false;
  }
}

}  // namespace

CONFORMANCE_CASE("cross queue: a buffer read by its owner and another queue is freed after both") {
  Device dev = conformance::open_device();
  Queue q0 = dev.queue(QueueRole::compute);
  Queue q1 = conformance::try_create_queue(dev, QueueRole::compute, "compute-2");
  if (!q1) {
    conformance::finish_device(dev);
    return;
  }
  Transfer xfer(dev);
  if (!has_compute(dev, q0, xfer)) {
    MESSAGE("not supported: no synthetic compute kernel on this backend");
    conformance::finish_device(dev);
    return;
  }
  constexpr std::uint64_t n = 12ull << 20;  // above 10 MiB: a segment of its own, so the next 12 MiB request reuses exactly A's block
  HostBuffer first = dev.host_pool().allocate(n);
  conformance::fill_pattern(first.span(), 10);
  HostBuffer second = dev.host_pool().allocate(n);
  conformance::fill_pattern(second.span(), 20);
  Upload a = xfer.upload(first, q0);  // A, owned by q0, ready on q0
  q1.wait(a.ready);
  DeviceBuffer b1 = dev.pool().allocate(n, q1);
  run_synthetic_compute(q1, a.buffer, b1);  // q1 reads A
  // q0 reads A too, but only once the gate opens: its read is still pending below.
  TimelineSemaphore gate = dev.create_semaphore(0);
  q0.wait(gate.at(1));
  DeviceBuffer b0 = dev.pool().allocate(n, q0);
  run_synthetic_compute(q0, a.buffer, b0);
  a.buffer.release();
  // A's free point must follow q0's pending read, so neither q1's work from here on nor the
  // next user of A's memory may complete before the gate opens. Were the free point to cover
  // q1 alone, the copy below would overwrite A while q0 has not read it yet.
  const bool freed_early = reached_within(q1.mark(), 300);
  Upload next = xfer.upload(second, q1);
  const bool overwritten_early = reached_within(next.ready, 300);
  MESSAGE("before q0's read: A's free point " << std::string(freed_early ? "reached" : "pending")
                                              << ", the next copy " << std::string(overwritten_early ? "done" : "pending"));
  gate.signal(1);
  q0.synchronize();
  HostBuffer back = dev.host_pool().allocate(n);
  xfer.download(b0, back).wait(std::chrono::seconds(30));
  CHECK_MESSAGE(conformance::first_mismatch(back.span(), 10, 1) == -1, "q0 read A after it was reused");
  xfer.download(b1, back).wait(std::chrono::seconds(30));
  CHECK(conformance::first_mismatch(back.span(), 10, 1) == -1);
  xfer.download(next.buffer, back).wait(std::chrono::seconds(30));
  CHECK(conformance::first_mismatch(back.span(), 20) == -1);
  conformance::finish_device(dev);
}
