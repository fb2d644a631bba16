// SPDX-License-Identifier: MIT
// ferry-bench: the whole-batch study. Many scattered pageable buffers in one upload call, and
// one large pageable buffer, against the ceiling of any path that must stage on the host:
// min(parallel host memcpy into pinned memory, pinned DMA), both measured in this run. The
// memcpy side is measured in rounds alternating with ferry's calls (see BatchStudy).
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

Spread spread(std::vector<double> v) {
  Spread r;
  if (v.empty()) return r;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  r.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  r.min = v.front();
  r.max = v.back();
  return r;
}

// Pageable -> pinned with `threads` threads, each a contiguous part (best of 2).
double parallel_memcpy_gbps(std::byte* dst, const std::byte* src, std::uint64_t bytes, unsigned threads) {
  double best = 0;
  for (int rep = 0; rep < 2; ++rep) {
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

double gbps_of(std::uint64_t bytes, clock_type::time_point t0) {
  return static_cast<double>(bytes) / seconds_since(t0) / 1e9;
}

}  // namespace

BatchStudy run_batch_study(const DeviceFactory& factory, std::uint64_t pageable_bytes, double dma_gbps,
                           double dma_d2h_gbps, int rounds, const Progress& progress) {
  BatchStudy s;
  ferry::Device dev = factory.open();
  ferry::Queue compute = dev.queue(ferry::QueueRole::compute);
  ferry::Transfer xfer(dev);

  std::vector<std::byte> pageable(pageable_bytes);
  for (std::size_t i = 0; i < pageable.size(); i += 4096) pageable[i] = static_cast<std::byte>(i >> 12);
  ferry::HostBuffer pinned = dev.host_pool().allocate(pageable_bytes);
  s.memcpy_threads = std::max(1u, std::thread::hardware_concurrency());
  s.dma_gbps = dma_gbps;
  s.dma_d2h_gbps = dma_d2h_gbps;
  s.rounds = rounds;

  s.scattered_count = 4096;
  s.scattered_each = 16 << 10;
  const std::uint64_t scattered_bytes = s.scattered_count * s.scattered_each;
  std::vector<std::vector<std::byte>> pieces(s.scattered_count, std::vector<std::byte>(s.scattered_each));
  std::vector<ferry::HostView> views;
  for (auto& p : pieces) views.push_back({p.data(), p.size()});
  s.pageable_bytes = pageable_bytes;

  // Warm-up: the staging ring, the pool's segments and the helper threads exist before round 1.
  ferry::UploadBatch resident = xfer.upload(std::span<const ferry::HostView>(views), compute);
  resident.ready.wait(std::chrono::minutes(5));
  std::vector<ferry::DownloadView> down;
  for (std::size_t i = 0; i < views.size(); ++i) down.push_back({resident.offsets[i], pieces[i].data(), pieces[i].size()});
  xfer.upload(std::span<const std::byte>(pageable), compute).ready.wait(std::chrono::minutes(5));

  std::vector<double> memcpy_in, memcpy_out, ceiling, ceiling_down, scattered, scattered_ratio, page, page_ratio,
      scattered_down, down_ratio;
  for (int round = 0; round < rounds; ++round) {
    const std::string r = " (round " + std::to_string(round + 1) + "/" + std::to_string(rounds) + ")";
    progress.phase("batch study: host memcpy ceiling" + r);
    memcpy_in.push_back(parallel_memcpy_gbps(pinned.data(), pageable.data(), pageable_bytes, s.memcpy_threads));
    ceiling.push_back(dma_gbps > 0 ? std::min(memcpy_in.back(), dma_gbps) : memcpy_in.back());

    progress.phase("batch study: 4096 x 16K scattered pageable upload" + r);
    auto t0 = clock_type::now();
    ferry::UploadBatch b = xfer.upload(std::span<const ferry::HostView>(views), compute);
    b.ready.wait(std::chrono::minutes(5));
    scattered.push_back(gbps_of(scattered_bytes, t0));
    scattered_ratio.push_back(scattered.back() / ceiling.back());
    b.buffer.release();

    progress.phase("batch study: one pageable buffer" + r);
    t0 = clock_type::now();
    ferry::Upload u = xfer.upload(std::span<const std::byte>(pageable), compute);
    u.ready.wait(std::chrono::minutes(5));
    page.push_back(gbps_of(pageable_bytes, t0));
    page_ratio.push_back(page.back() / ceiling.back());
    u.buffer.release();

    progress.phase("batch study: host memcpy-out ceiling" + r);
    memcpy_out.push_back(parallel_memcpy_gbps(pageable.data(), pinned.data(), pageable_bytes, s.memcpy_threads));
    ceiling_down.push_back(dma_d2h_gbps > 0 ? std::min(memcpy_out.back(), dma_d2h_gbps) : memcpy_out.back());

    progress.phase("batch study: batch download into 4096 x 16K scattered pageable buffers" + r);
    t0 = clock_type::now();
    xfer.download(resident.buffer, std::span<const ferry::DownloadView>(down));  // blocking
    scattered_down.push_back(gbps_of(scattered_bytes, t0));
    down_ratio.push_back(scattered_down.back() / ceiling_down.back());
  }
  compute.synchronize(std::chrono::minutes(5));
  s.memcpy_gbps = spread(memcpy_in);
  s.ceiling_gbps = spread(ceiling);
  s.scattered_gbps = spread(scattered);
  s.scattered_ratio = spread(scattered_ratio);
  s.pageable_gbps = spread(page);
  s.pageable_ratio = spread(page_ratio);
  s.memcpy_out_gbps = spread(memcpy_out);
  s.ceiling_down_gbps = spread(ceiling_down);
  s.scattered_down_gbps = spread(scattered_down);
  s.scattered_down_ratio = spread(down_ratio);
  s.ran = true;
  return s;
}

}  // namespace ferry_bench
