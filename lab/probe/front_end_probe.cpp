// SPDX-License-Identifier: MIT
// ferry-probe-front-end: the host cost of ferry's own work in one upload call, with no driver
// underneath. The device is the null backend (Backend::null, backends/null/): copies do
// nothing, a queue signal is seen reached `--lag` signals later (FERRY_NULL_LAG: a device that
// runs that far behind the host), host waits return at once for enqueued values. What is left
// is the front end: argument checks, the pool's allocation and release, ordering bookkeeping
// and the snapshot recording. ferry-bench's host-cost loop, minus the vendor calls: read it
// beside `ferry-bench --host-cost-only` on the same machine, whose upload call adds the
// driver's four calls (wait, copy, record, wait).
//
//   ferry-probe-front-end [--calls N] [--size SIZE] [--lag N] [--repeat N] [--case I]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"
#include "probe_util.hpp"

namespace {

using namespace ferry;

struct Times {
  double upload_median = 0, upload_p90 = 0, release_median = 0, release_p90 = 0;
};

/// ferry-bench's host-cost loop (tools/bench/host_cost.cpp) on the null device.
Times time_loop(std::uint64_t lag, bool record_events, const UploadOptions& options, std::uint64_t bytes, int calls) {
  // The null backend reads its lag at open.
  if (::setenv("FERRY_NULL_LAG", std::to_string(lag).c_str(), 1) != 0) throw std::runtime_error("setenv failed");
  Device dev = Device::open({.backend = Backend::null, .record_events = record_events});
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

int main(int argc, char** argv) { return probe::guarded_main("ferry-probe-front-end", run, argc, argv); }
