// SPDX-License-Identifier: MIT
// ferry-bench: the host cost of one upload call. A loader with many small tensors:
// `calls` uploads of one small pinned range to the owner queue, each released right after,
// every call host-timed on its own. The engine's path on Vulkan is also timed in frames: an
// engine uploads a frame's tensors (owner_waits = false, deferred submission), uses them, and
// releases them at the frame's end. Releasing each buffer right after its upload instead makes
// every call a round trip between the queues (the owner waits for the copy to take the buffer
// back, and the next upload reuses the block after the owner's point), so no batching applies
// to that loop: its figure is reported beside the frame's. The vendor anchors are the host time of a bare async copy
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

namespace {

/// The host waits for the device every kRound calls (see the file comment).
constexpr int kRound = 256;

struct LoopTimes {
  Percentiles upload, release, pair;
};

/// The timed loop on one device: `calls` uploads of one pinned range to the compute queue,
/// in frames of `frame` uploads, each frame's buffers released after its last upload (1:
/// each buffer released right after its upload). Every upload and every release is timed.
LoopTimes time_loop(ferry::Device& dev, std::uint64_t bytes, int calls, const ferry::UploadOptions& options,
                    const ferry::TransferOptions& transfer = {}, int frame = 1) {
  constexpr int warmup = 64;
  ferry::Queue owner = dev.queue(ferry::QueueRole::compute);
  ferry::Transfer xfer(dev, transfer);
  ferry::HostBuffer source = dev.host_pool().allocate(bytes);
  std::fill(source.span().begin(), source.span().end(), std::byte{0x5a});

  std::vector<ferry::Upload> ups(static_cast<std::size_t>(frame));
  std::vector<double> up_times(static_cast<std::size_t>(frame));
  auto one_frame = [&](std::vector<double>* upload_us, std::vector<double>* release_us,
                       std::vector<double>* pair_us) {
    for (int k = 0; k < frame; ++k) {
      const auto t0 = clock_type::now();
      ups[static_cast<std::size_t>(k)] = xfer.upload(source, owner, options);
      up_times[static_cast<std::size_t>(k)] = us_between(t0, clock_type::now());
    }
    for (int k = 0; k < frame; ++k) {
      const auto t1 = clock_type::now();
      ups[static_cast<std::size_t>(k)].buffer.release();
      const double release = us_between(t1, clock_type::now());
      if (upload_us != nullptr) {
        upload_us->push_back(up_times[static_cast<std::size_t>(k)]);
        release_us->push_back(release);
        pair_us->push_back(up_times[static_cast<std::size_t>(k)] + release);
      }
    }
  };
  for (int i = 0; i < warmup; i += frame) one_frame(nullptr, nullptr, nullptr);
  owner.synchronize(std::chrono::minutes(1));
  std::vector<double> upload_us, release_us, pair_us;
  upload_us.reserve(static_cast<std::size_t>(calls));
  release_us.reserve(static_cast<std::size_t>(calls));
  pair_us.reserve(static_cast<std::size_t>(calls));
  const int round = std::max(kRound / frame, 1) * frame;
  for (int i = 0; i < calls; i += frame) {
    if (i > 0 && i % round == 0) owner.synchronize(std::chrono::minutes(1));  // untimed
    one_frame(&upload_us, &release_us, &pair_us);
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
    // Deferred submission (Vulkan): 16 calls share a submission of the executor, in the
    // engine's frames (the bar's variant) and with each buffer released at once.
    if (dev.backend() == ferry::Backend::vulkan) {
      const LoopTimes frames = time_loop(dev, bytes, calls, {.tag = "host cost", .owner_waits = false},
                                         {.submit_batch = HostCost::kFrame}, HostCost::kFrame);
      r.variants.push_back({HostCost::kBatchedVariant, frames.upload, frames.pair});
      const LoopTimes at_once =
          time_loop(dev, bytes, calls, {.tag = "host cost", .owner_waits = false}, {.submit_batch = HostCost::kFrame});
      r.variants.push_back({HostCost::kBatchedAtOnceVariant, at_once.upload, at_once.pair});
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
