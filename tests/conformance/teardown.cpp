// SPDX-License-Identifier: MIT
// Teardown with work in flight: closing a device or destroying a Transfer never crashes or
// hangs, and handles that outlive their device are inert.
#include <memory>
#include <thread>
#include <vector>

#include "conformance.hpp"

using namespace ferry;

namespace {
constexpr std::uint64_t MiB = 1024 * 1024;

struct InFlight {
  std::vector<HostBuffer> hosts;
  std::vector<DeviceBuffer> buffers;
  std::vector<TimelinePoint> points;
};

/// Enqueue uploads, compute, device copies and downloads without waiting for any of them.
InFlight enqueue_work(Device& dev, Transfer& xfer, int rounds) {
  InFlight w;
  Queue owner = dev.queue(QueueRole::compute);
  const std::uint64_t n = 2 * MiB + 3;
  for (int i = 0; i < rounds; ++i) {
    HostBuffer src = dev.host_pool().allocate(n);
    HostBuffer dst = dev.host_pool().allocate(n);
    conformance::fill_pattern(src.span(), static_cast<std::uint64_t>(i));
    Upload up = xfer.upload(src, owner);
    DeviceBuffer out = dev.pool().allocate(n, owner);
    run_synthetic_compute(owner, up.buffer, out, 4);
    DeviceBuffer copy = dev.pool().allocate(n, owner);
    w.points.push_back(xfer.copy(out, copy));
    w.points.push_back(xfer.download(copy, dst));
    if (i % 2 == 0) {
      up.buffer.release();  // some released while in flight, some kept past close
    } else {
      w.buffers.push_back(std::move(up.buffer));
    }
    w.buffers.push_back(std::move(out));
    w.buffers.push_back(std::move(copy));
    w.hosts.push_back(std::move(dst));
    // `src` goes out of scope with its upload in flight: the transfer keeps it alive
  }
  return w;
}

}  // namespace

CONFORMANCE_CASE("teardown: close the device with work in flight") {
  Device dev = conformance::open_device();
  auto xfer = std::make_unique<Transfer>(dev);
  InFlight w = enqueue_work(dev, *xfer, 24);
  conformance::finish_device(dev);  // waits for the work, frees everything
  CHECK_FALSE(dev.is_open());
  // close waited for everything enqueued: a host buffer that is still readable after close
  // holds the downloaded data (or it is inert and says so with invalid_argument)
  int inert = 0;
  for (std::size_t i = 0; i < w.hosts.size(); ++i) {
    try {
      std::span<std::byte> s = w.hosts[i].span();
      CHECK(conformance::first_mismatch(s, i, 1) == -1);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::invalid_argument);
      ++inert;
    }
  }
  if (inert > 0) MESSAGE(inert << " host buffers were inert after close");
  for (DeviceBuffer& b : w.buffers) CHECK_NOTHROW(b.release());  // inert after close
  w.buffers.clear();
  CHECK_NOTHROW(xfer.reset());  // the Transfer outlives its device safely
}

CONFORMANCE_CASE("teardown: destroy the Transfer with copies in flight, then keep going") {
  Device dev = conformance::open_device();
  InFlight w;
  {
    Transfer xfer(dev);
    w = enqueue_work(dev, xfer, 16);
  }  // destruction waits for the transfer's in-flight copies
  for (const TimelinePoint& p : w.points) CHECK(p.reached());
  for (std::size_t i = 0; i < w.hosts.size(); ++i) {
    CHECK(conformance::first_mismatch(w.hosts[i].span(), i, 1) == -1);
  }
  for (DeviceBuffer& b : w.buffers) b.release();
  w.buffers.clear();
  Transfer again(dev);
  conformance::check_round_trip(dev, again);
}

CONFORMANCE_CASE("teardown: the last handles go away with work in flight") {
  // Not tracked by the fixture: the device must close when its last handle is dropped.
  InFlight w;
  {
    Device dev = Device::open(conformance::options());
    Transfer xfer(dev);
    w = enqueue_work(dev, xfer, 12);
  }
  // Buffers still hold the device; dropping them last closes it.
  w.buffers.clear();
  w.points.clear();
  w.hosts.clear();
  CHECK(true);
}

CONFORMANCE_CASE("teardown: destroying buffers and the device from another thread") {
  Device dev = conformance::open_device();
  auto xfer = std::make_unique<Transfer>(dev);
  InFlight w = enqueue_work(dev, *xfer, 8);
  std::thread closer([&] { dev.close(); });
  closer.join();
  CHECK_FALSE(dev.is_open());
  w.buffers.clear();
  xfer.reset();
}
