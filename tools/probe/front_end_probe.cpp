// SPDX-License-Identifier: MIT
// ferry-probe-front-end: the host cost of ferry's own work in one upload call, with no driver
// underneath. The device is a null backend (BackendDevice, backends/backend.hpp): copies do
// nothing, a queue signal is recorded and seen reached `--lag` signals later (a device that
// runs that far behind the host), host waits return at once for enqueued values. What is left
// is the front end: argument checks, the pool's allocation and release, ordering bookkeeping
// and the snapshot recording. ferry-bench's host-cost loop, minus the vendor calls: read it
// beside `ferry-bench --host-cost-only` on the same machine, whose upload call adds the
// driver's four calls (wait, copy, record, wait).
//
//   ferry-probe-front-end [--calls N] [--size SIZE] [--lag N] [--repeat N] [--case I]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend.hpp"
#include "ferry/ferry.hpp"
#include "device_state.hpp"
#include "probe_util.hpp"

namespace {

using namespace ferry;
using namespace ferry::detail;

/// A timeline whose queue signals are seen reached `lag` signals after they were made.
class NullSemaphore final : public BackendSemaphore {
 public:
  NullSemaphore(std::uint64_t initial, std::uint64_t lag) : host_(initial), lag_(lag) {}
  std::uint64_t value() override {
    const std::uint64_t q = queued_.load(std::memory_order_acquire);
    return std::max({host_.load(std::memory_order_acquire), caught_up_.load(std::memory_order_acquire),
                     q > lag_ ? q - lag_ : 0});
  }
  void signal(std::uint64_t value) override { host_.store(value, std::memory_order_release); }
  bool wait(std::uint64_t value, std::chrono::nanoseconds timeout) override {
    if (value <= std::max(queued_.load(), host_.load())) {  // enqueued: the device gets there
      std::uint64_t seen = caught_up_.load();
      while (seen < value && !caught_up_.compare_exchange_weak(seen, value)) {
      }
      return true;
    }
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(timeout, std::chrono::milliseconds(10)));
    return value <= this->value();
  }
  void queue_signal(std::uint64_t value) { queued_.store(value, std::memory_order_release); }

 private:
  std::atomic<std::uint64_t> host_;
  std::atomic<std::uint64_t> queued_{0};
  std::atomic<std::uint64_t> caught_up_{0};
  std::uint64_t lag_;
};

class NullQueue final : public BackendQueue {
 public:
  void copy_h2d(DeviceRef, HostRef, std::uint64_t) override {}
  void copy_d2h(HostRef, DeviceRef, std::uint64_t) override {}
  void copy_d2d(DeviceRef, DeviceRef, std::uint64_t) override {}
  void signal(BackendSemaphore& sem, std::uint64_t value) override {
    static_cast<NullSemaphore&>(sem).queue_signal(value);
  }
  void wait(BackendSemaphore&, std::uint64_t) override {}
  [[nodiscard]] bool wait_orders_later_work() const override { return true; }  // as CUDA's streams
};

class NullDevice final : public BackendDevice {
 public:
  explicit NullDevice(std::uint64_t lag) : lag_(lag) {
    caps_.name = "null device (front-end cost probe)";
    caps_.backend = Backend::host;
    caps_.dedicated_transfer_queue = true;
    caps_.copy_engines = 1;
  }
  [[nodiscard]] const Capabilities& capabilities() const override { return caps_; }
  BackendQueue& default_queue(QueueRole role) override { return role == QueueRole::compute ? compute_ : transfer_; }
  std::unique_ptr<BackendQueue> create_queue(QueueRole, int) override { return std::make_unique<NullQueue>(); }
  std::unique_ptr<BackendQueue> adopt_queue(QueueRole, const NativeQueue&) override {
    throw Error(ErrorCode::unsupported, "null device: no native queues", {}, std::source_location::current());
  }
  std::unique_ptr<BackendSemaphore> create_semaphore(std::uint64_t initial) override {
    return std::make_unique<NullSemaphore>(initial, lag_);
  }
  std::unique_ptr<Segment> allocate_segment(std::uint64_t bytes) override {
    auto s = std::make_unique<Segment>();  // never dereferenced: copies do nothing
    s->size = bytes;
    s->address = next_address_;
    next_address_ += bytes;
    return s;
  }
  void free_segment(std::unique_ptr<Segment>) override {}
  std::unique_ptr<HostMemory> allocate_host(std::uint64_t bytes) override {
    return host_memory(new std::byte[bytes], bytes, /*registered=*/false);
  }
  std::unique_ptr<HostMemory> register_host(std::byte* ptr, std::uint64_t bytes) override {
    return host_memory(ptr, bytes, /*registered=*/true);
  }
  void free_host(std::unique_ptr<HostMemory> memory) override {
    if (memory && !memory->registered) delete[] memory->ptr;
  }
  void wait_idle() override {}

 private:
  Capabilities caps_;
  std::uint64_t lag_;
  NullQueue compute_, transfer_;
  std::uint64_t next_address_ = 1ull << 40;
};

struct Times {
  double upload_median = 0, upload_p90 = 0, release_median = 0, release_p90 = 0;
};

/// ferry-bench's host-cost loop (tools/bench/host_cost.cpp) on the null device.
Times time_loop(std::uint64_t lag, bool record_events, const UploadOptions& options, std::uint64_t bytes, int calls) {
  DeviceOptions o;
  o.record_events = record_events;
  Device dev = wrap_backend_device(std::make_unique<NullDevice>(lag), o, std::source_location::current());
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  HostBuffer source = dev.host_pool().allocate(bytes);
  std::vector<double> up, rel;
  up.reserve(static_cast<std::size_t>(calls));
  rel.reserve(static_cast<std::size_t>(calls));
  using clock = std::chrono::steady_clock;
  const auto us = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
  };
  for (int i = -64; i < calls; ++i) {  // 64 warm-up calls
    if (i > 0 && i % 256 == 0) owner.synchronize(std::chrono::minutes(1));  // as ferry-bench's rounds
    const auto t0 = clock::now();
    Upload u = xfer.upload(source, owner, options);
    const auto t1 = clock::now();
    u.buffer.release();
    const auto t2 = clock::now();
    if (i >= 0) {
      up.push_back(us(t0, t1));
      rel.push_back(us(t1, t2));
    }
  }
  owner.synchronize(std::chrono::minutes(1));
  return {probe::median(up), probe::quantile(up, 0.9), probe::median(rel), probe::quantile(rel, 0.9)};
}

int run(int argc, char** argv) {
  int calls = 4096, repeat = 3, only = -1;
  std::uint64_t bytes = 64 << 10, lag = 8;
  probe::Args args(argc, argv);
  while (args.next()) {
    if (args.flag() == "--calls") calls = std::stoi(args.value());
    else if (args.flag() == "--size") bytes = probe::parse_size(args.value());
    else if (args.flag() == "--lag") lag = std::stoull(args.value());
    else if (args.flag() == "--repeat") repeat = std::stoi(args.value());
    else if (args.flag() == "--case") only = std::stoi(args.value());
    else if (args.flag() == "--help") {
      std::printf("usage: %s [--calls N (4096)] [--size SIZE (64K)] [--lag SIGNALS (8)] [--repeat N (3)]\n"
                  "  [--case I: only loop I of the three (0 defaults, 1 owner_waits = false, 2 record_events = false)]\n",
                  args.program());
      return 0;
    } else {
      throw std::runtime_error("unknown option " + args.flag());
    }
  }
  if (calls < 1 || repeat < 1) throw std::runtime_error("--calls and --repeat must be >= 1");
  if (only < -1 || only > 2) throw std::runtime_error("--case takes 0, 1 or 2");
  std::printf("ferry front end on a null device (no driver): %d uploads of %s, each released; device %llu signals behind\n",
              calls, probe::size_str(bytes).c_str(), static_cast<unsigned long long>(lag));
  std::printf("%-44s %18s %18s\n", "loop (us of host time)", "upload med / p90", "release med / p90");
  struct Case {
    const char* what;
    bool record_events;
    UploadOptions options;
  };
  const Case cases[] = {
      {"Transfer::upload + release (defaults)", true, {.tag = "host cost"}},
      {"  owner_waits = false", true, {.tag = "host cost", .owner_waits = false}},
      {"  record_events = false", false, {.tag = "host cost"}},
  };
  for (int r = 0; r < repeat; ++r) {
    for (int i = 0; i < 3; ++i) {
      if (only != -1 && i != only) continue;
      const Case& c = cases[i];
      const Times t = time_loop(lag, c.record_events, c.options, bytes, calls);
      std::printf("%-44s %8.2f / %7.2f %8.2f / %7.2f\n", c.what, t.upload_median, t.upload_p90, t.release_median,
                  t.release_p90);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry-probe-front-end: %s\n", e.what());
    return 1;
  }
}
