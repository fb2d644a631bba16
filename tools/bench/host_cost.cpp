// SPDX-License-Identifier: MIT
// ferry-bench: the host cost of one upload call. A loader with many small tensors:
// `calls` uploads of one small pinned range to the owner queue, each released right after,
// every call host-timed on its own. The vendor anchors are the host time of a bare async copy
// of the same size from pinned memory on CUDA, and of one raw vkQueueSubmit per copy (copy +
// timeline signal) on Vulkan (vendor.hpp), measured the same way.
//
// Rounds: the host waits for the device every `kRound` calls, outside the timed region, so the
// device's command queue never fills up (a full queue makes an enqueue block, which would
// measure the device's copy time rather than the host's cost of issuing it).
#include <algorithm>
#include <chrono>

#include "bench.hpp"

namespace ferry_bench {
namespace {

using clock_type = std::chrono::steady_clock;

double us_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

}  // namespace

Percentiles percentiles(std::vector<double> samples) {
  Percentiles p;
  if (samples.empty()) return p;
  std::sort(samples.begin(), samples.end());
  const auto at = [&](double q) {
    const auto i = static_cast<std::size_t>(q * static_cast<double>(samples.size() - 1) + 0.5);
    return samples[std::min(i, samples.size() - 1)];
  };
  p.median = at(0.5);
  p.p90 = at(0.9);
  return p;
}

namespace {

/// The host waits for the device every kRound calls (see the file comment).
constexpr int kRound = 256;

struct LoopTimes {
  Percentiles upload, release, pair;
};

/// The timed loop on one device: `calls` uploads of one pinned range to the compute queue,
/// each released right after.
LoopTimes time_loop(ferry::Device& dev, std::uint64_t bytes, int calls, const ferry::UploadOptions& options,
                    const ferry::TransferOptions& transfer = {}) {
  constexpr int warmup = 64;
  ferry::Queue owner = dev.queue(ferry::QueueRole::compute);
  ferry::Transfer xfer(dev, transfer);
  ferry::HostBuffer source = dev.host_pool().allocate(bytes);
  std::fill(source.span().begin(), source.span().end(), std::byte{0x5a});

  auto one = [&](std::vector<double>* upload_us, std::vector<double>* release_us, std::vector<double>* pair_us) {
    const auto t0 = clock_type::now();
    ferry::Upload up = xfer.upload(source, owner, options);
    const auto t1 = clock_type::now();
    up.buffer.release();
    const auto t2 = clock_type::now();
    if (upload_us != nullptr) {
      upload_us->push_back(us_between(t0, t1));
      release_us->push_back(us_between(t1, t2));
      pair_us->push_back(us_between(t0, t2));
    }
  };
  for (int i = 0; i < warmup; ++i) one(nullptr, nullptr, nullptr);
  owner.synchronize(std::chrono::minutes(1));
  std::vector<double> upload_us, release_us, pair_us;
  upload_us.reserve(static_cast<std::size_t>(calls));
  release_us.reserve(static_cast<std::size_t>(calls));
  pair_us.reserve(static_cast<std::size_t>(calls));
  for (int i = 0; i < calls; ++i) {
    if (i > 0 && i % kRound == 0) owner.synchronize(std::chrono::minutes(1));  // untimed
    one(&upload_us, &release_us, &pair_us);
  }
  owner.synchronize(std::chrono::minutes(1));
  xfer.synchronize(std::chrono::minutes(1));
  return {percentiles(std::move(upload_us)), percentiles(std::move(release_us)), percentiles(std::move(pair_us))};
}

}  // namespace

HostCost run_host_cost(const DeviceFactory& factory, std::uint64_t bytes, int calls, const Progress& progress) {
  HostCost r;
  r.bytes = bytes;
  r.calls = calls;
  progress.phase("host cost: " + std::to_string(calls) + " uploads of " + size_label(bytes));
  {
    ferry::Device dev = factory.open();
    const LoopTimes t = time_loop(dev, bytes, calls, {.tag = "host cost"});
    r.upload = t.upload;
    r.release = t.release;
    r.pair = t.pair;
    // Attribution: the owner's wait left out (the caller orders the owner itself).
    const LoopTimes no_wait = time_loop(dev, bytes, calls, {.tag = "host cost", .owner_waits = false});
    r.variants.push_back({"owner_waits = false", no_wait.upload, no_wait.pair});
    // Deferred submission (Vulkan): 16 calls share a submission of the executor.
    if (dev.backend() == ferry::Backend::vulkan) {
      const LoopTimes batched =
          time_loop(dev, bytes, calls, {.tag = "host cost", .owner_waits = false}, {.submit_batch = 16});
      r.variants.push_back({HostCost::kBatchedVariant, batched.upload, batched.pair});
    }
  }
  {
    ferry::Device dev = factory.open_unrecorded();  // snapshots' event recording left out
    const LoopTimes t = time_loop(dev, bytes, calls, {.tag = "host cost"});
    r.variants.push_back({"record_events = false", t.upload, t.pair});
  }
  r.vendor = measure_vendor_call_cost(bytes, calls, kRound);
  {
    ferry::Device dev = factory.open();
    if (dev.backend() == ferry::Backend::vulkan) r.vulkan = measure_vulkan_call_cost(dev, bytes, calls, kRound);
  }
  r.ran = true;
  return r;
}

}  // namespace ferry_bench
