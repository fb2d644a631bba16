// SPDX-License-Identifier: MIT
// A queue's first compute launch in a process never waits behind a queue that waits for the
// host. Drivers that load kernels lazily (CUDA's default) may wait for the context's queued
// work when a kernel is first launched; with a queue waiting for a semaphore the host signals
// only after the launch, such a launch never returns. The case runs in a process of its own
// too (tests/meson.build, first-launch-BACKEND), where its launch is the first one.
#include <chrono>
#include <future>

#include "conformance.hpp"
#include "ferry/testing.hpp"

using namespace ferry;
using namespace std::chrono_literals;

CONFORMANCE_CASE("first launch: compute behind a queue that waits for the host is enqueued at once") {
  Device dev = conformance::open_device();
  if (!dev.capabilities().synthetic_compute) {
    MESSAGE("not supported: no synthetic compute on " << dev.capabilities().name);
    return;
  }
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  constexpr std::uint64_t n = 1 << 20;
  HostBuffer src = dev.host_pool().allocate(n);
  conformance::fill_pattern(src.span(), 7);
  Upload in = xfer.upload(src, owner);
  DeviceBuffer out = dev.pool().allocate(n, owner);
  conformance::Gate gate(dev, owner);  // the owner waits for the host from here on
  // Enqueued on another thread, so that a launch that blocks is reported, not hung on: the
  // host opens the gate after the timeout either way.
  auto launched = std::async(std::launch::async, [&] { run_synthetic_compute(owner, in.buffer, out, 1); });
  const bool returned = launched.wait_for(20s) == std::future_status::ready;
  gate.open();
  launched.get();
  CHECK_MESSAGE(returned, "enqueuing compute blocked until the host signalled the semaphore its queue waits for "
                          "(a kernel loaded at its first launch waited for the queued work)");
  HostBuffer back = dev.host_pool().allocate(n);
  xfer.download(out, back).wait(30s);
  CHECK(conformance::first_mismatch(back.span(), 7, 1) == -1);
}
