// SPDX-License-Identifier: MIT
// ferry-bench: the whole-batch study. Many scattered pageable buffers in one upload call, and
// one large pageable buffer, against the ceiling of any path that must stage on the host:
// min(parallel host memcpy into pinned memory, pinned DMA), both measured in this run.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "bench.hpp"

namespace ferry_bench {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Pageable -> pinned with `threads` threads, each a contiguous part (best of 3).
double parallel_memcpy_gbps(std::byte* dst, const std::byte* src, std::uint64_t bytes, unsigned threads) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = clock_type::now();
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([=] {
        const std::uint64_t a = bytes * t / threads, b = bytes * (t + 1) / threads;
        std::memcpy(dst + a, src + a, b - a);
      });
    }
    for (auto& th : pool) th.join();
    best = std::max(best, static_cast<double>(bytes) / seconds_since(t0) / 1e9);
  }
  return best;
}

}  // namespace

BatchStudy run_batch_study(const DeviceFactory& factory, std::uint64_t pageable_bytes, double dma_gbps,
                           double dma_d2h_gbps, const Progress& progress) {
  BatchStudy s;
  ferry::Device dev = factory.open();
  ferry::Queue compute = dev.queue(ferry::QueueRole::compute);
  ferry::Transfer xfer(dev);

  progress.phase("batch study: host memcpy ceiling");
  std::vector<std::byte> pageable(pageable_bytes);
  for (std::size_t i = 0; i < pageable.size(); i += 4096) pageable[i] = static_cast<std::byte>(i >> 12);
  {
    ferry::HostBuffer pinned = dev.host_pool().allocate(pageable_bytes);
    s.memcpy_threads = std::max(1u, std::thread::hardware_concurrency());
    s.memcpy_gbps = parallel_memcpy_gbps(pinned.data(), pageable.data(), pageable_bytes, s.memcpy_threads);
    s.memcpy_out_gbps = parallel_memcpy_gbps(pageable.data(), pinned.data(), pageable_bytes, s.memcpy_threads);
  }
  s.dma_gbps = dma_gbps;
  s.ceiling_gbps = dma_gbps > 0 ? std::min(s.memcpy_gbps, dma_gbps) : s.memcpy_gbps;
  s.dma_d2h_gbps = dma_d2h_gbps;
  s.ceiling_down_gbps = dma_d2h_gbps > 0 ? std::min(s.memcpy_out_gbps, dma_d2h_gbps) : s.memcpy_out_gbps;

  progress.phase("batch study: 4096 x 16K scattered pageable buffers");
  s.scattered_count = 4096;
  s.scattered_each = 16 << 10;
  std::vector<std::vector<std::byte>> pieces(s.scattered_count, std::vector<std::byte>(s.scattered_each));
  std::vector<ferry::HostView> views;
  for (auto& p : pieces) views.push_back({p.data(), p.size()});
  std::vector<double> gbps;
  for (int rep = 0; rep < 6; ++rep) {
    const auto t0 = clock_type::now();
    ferry::UploadBatch b = xfer.upload(std::span<const ferry::HostView>(views), compute);
    b.ready.wait(std::chrono::minutes(5));
    if (rep > 0) gbps.push_back(static_cast<double>(s.scattered_count * s.scattered_each) / seconds_since(t0) / 1e9);
  }
  s.scattered_gbps = median(gbps);

  progress.phase("batch study: batch download into 4096 x 16K scattered pageable buffers");
  {
    ferry::UploadBatch b = xfer.upload(std::span<const ferry::HostView>(views), compute);
    std::vector<ferry::DownloadView> down;
    for (std::size_t i = 0; i < views.size(); ++i) down.push_back({b.offsets[i], pieces[i].data(), pieces[i].size()});
    gbps.clear();
    for (int rep = 0; rep < 6; ++rep) {
      const auto t0 = clock_type::now();
      xfer.download(b.buffer, std::span<const ferry::DownloadView>(down));  // blocking
      if (rep > 0) gbps.push_back(static_cast<double>(s.scattered_count * s.scattered_each) / seconds_since(t0) / 1e9);
    }
    s.scattered_down_gbps = median(gbps);
  }

  progress.phase("batch study: one pageable buffer");
  s.pageable_bytes = pageable_bytes;
  gbps.clear();
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = clock_type::now();
    ferry::Upload u = xfer.upload(std::span<const std::byte>(pageable), compute);
    u.ready.wait(std::chrono::minutes(5));
    if (rep > 0) gbps.push_back(static_cast<double>(pageable_bytes) / seconds_since(t0) / 1e9);
  }
  s.pageable_gbps = median(gbps);
  compute.synchronize(std::chrono::minutes(5));
  s.ran = true;
  return s;
}

}  // namespace ferry_bench
