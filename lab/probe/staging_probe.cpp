// SPDX-License-Identifier: MIT
// ferry-probe-staging: an experiment, not part of ferry. How fast host threads pack pageable
// memory into pinned staging memory, with plain stores (memcpy) and with non-temporal stores,
// alone and while the copy engine reads other pinned memory (the pipelined upload's steady
// state: chunk k is packed while chunk k-1 is DMAed), and how fast that DMA runs meanwhile.
// The packing is split into units claimed by every thread in order, as ferry's staging does,
// and the streaming copy is ferry's own. Only cudart is linked.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "parallel_copy.hpp"
#include "probe_util.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Plain copy, or ferry's own streaming copy (src/parallel_copy.cpp, compiled into the probe),
// fenced per unit as ferry's staging does before a DMA may read the bytes.
void copy_plain(std::byte* dst, const std::byte* src, std::size_t n) { std::memcpy(dst, src, n); }

void copy_stream(std::byte* dst, const std::byte* src, std::size_t n) {
  ferry::detail::stream_copy(dst, src, n);
  ferry::detail::finish_stream_copies();
}

// Threads started once; run() wakes them (spinning: the probe measures copies, not wake-ups).
class Team {
 public:
  explicit Team(unsigned n) {
    for (unsigned t = 0; t < n; ++t) threads_.emplace_back([this] { loop(); });
  }
  ~Team() {
    stop_.store(true);
    generation_.fetch_add(1);
    for (auto& t : threads_) t.join();
  }
  void run(const std::function<void()>& job) {
    job_ = &job;
    pending_.store(static_cast<unsigned>(threads_.size()));
    generation_.fetch_add(1, std::memory_order_release);
    job();
    while (pending_.load(std::memory_order_acquire) != 0) {
    }
  }

 private:
  void loop() {
    std::uint64_t seen = 0;
    for (;;) {
      std::uint64_t g;
      while ((g = generation_.load(std::memory_order_acquire)) == seen) std::this_thread::yield();
      seen = g;
      if (stop_.load()) return;
      (*job_)();
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
  std::vector<std::thread> threads_;
  const std::function<void()>* job_ = nullptr;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<unsigned> pending_{0};
  std::atomic<bool> stop_{false};
};

// GB/s of packing `bytes` from src into dst in `unit`-byte units claimed in order.
double pack_gbps(Team& team, std::byte* dst, const std::byte* src, std::uint64_t bytes, std::uint64_t unit,
                 bool stream) {
  std::atomic<std::uint64_t> next{0};
  const std::uint64_t units = (bytes + unit - 1) / unit;
  const std::function<void()> job = [&] {
    for (std::uint64_t u; (u = next.fetch_add(1, std::memory_order_relaxed)) < units;) {
      const std::uint64_t a = u * unit, n = std::min(unit, bytes - a);
      (stream ? copy_stream : copy_plain)(dst + a, src + a, n);
    }
  };
  const auto t0 = clock_type::now();
  team.run(job);
  return static_cast<double>(bytes) / seconds_since(t0) / 1e9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  std::uint64_t bytes = 64ull << 20, unit = 256ull << 10;
  int reps = 9;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  const std::string usage = " (--bytes, --unit, --reps, --threads, each with a value)";
  if (argc % 2 == 0) throw std::runtime_error(std::string("option ") + argv[argc - 1] + " has no value" + usage);
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--bytes") bytes = probe::parse_size(v);
    else if (k == "--unit") unit = probe::parse_size(v);
    else if (k == "--reps") reps = std::stoi(v);
    else if (k == "--threads") threads = static_cast<unsigned>(std::stoul(v));
    else throw std::runtime_error("unknown option " + k + usage);
  }
  if (reps < 1) throw std::runtime_error("--reps must be at least 1");
  if (threads < 1) throw std::runtime_error("--threads must be at least 1 (the calling thread packs too)");
  std::vector<std::byte> pageable(bytes);
  for (std::size_t i = 0; i < bytes; i += 64) pageable[i] = static_cast<std::byte>(i >> 6);
  std::byte *staging = nullptr, *dma_src = nullptr, *device = nullptr;
  check(cudaHostAlloc(reinterpret_cast<void**>(&staging), bytes, cudaHostAllocDefault), "cudaHostAlloc");
  check(cudaHostAlloc(reinterpret_cast<void**>(&dma_src), bytes, cudaHostAllocDefault), "cudaHostAlloc");
  check(cudaMalloc(reinterpret_cast<void**>(&device), bytes), "cudaMalloc");
  std::memset(staging, 1, bytes);
  std::memset(dma_src, 2, bytes);
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  Team team(threads - 1);  // the calling thread packs too

  // DMA alone: GPU-timed burst of 8 copies.
  auto dma_burst = [&](int copies) {
    check(cudaEventRecord(e0, s), "cudaEventRecord");
    for (int c = 0; c < copies; ++c) check(cudaMemcpyAsync(device, dma_src, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
    check(cudaEventRecord(e1, s), "cudaEventRecord");
  };
  auto dma_gbps = [&](int copies) {
    check(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    return static_cast<double>(bytes) * copies / (ms * 1e6);
  };
  dma_burst(2);
  (void)dma_gbps(2);
  std::vector<double> alone;
  for (int r = 0; r < reps; ++r) {
    dma_burst(8);
    alone.push_back(dma_gbps(8));
  }
  std::printf("bytes %s, unit %s, threads %u, reps %d\n", probe::size_str(bytes).c_str(), probe::size_str(unit).c_str(),
              threads, reps);
  std::printf("DMA alone (pinned h2d, GPU-timed)                 %6.1f GB/s\n", median(alone));
  for (const bool stream : {false, true}) {
    const char* name = stream ? "streaming   " : "memcpy      ";
    (void)pack_gbps(team, staging, pageable.data(), bytes, unit, stream);
    std::vector<double> idle, busy, dma;
    for (int r = 0; r < reps; ++r) idle.push_back(pack_gbps(team, staging, pageable.data(), bytes, unit, stream));
    for (int r = 0; r < reps; ++r) {
      // Pack repeatedly while a burst of copies runs; the DMA figure covers the whole burst.
      dma_burst(6);
      std::this_thread::sleep_for(std::chrono::microseconds(300));  // the burst is running
      for (int k = 0; k < 3; ++k) busy.push_back(pack_gbps(team, staging, pageable.data(), bytes, unit, stream));
      while (cudaEventQuery(e1) == cudaErrorNotReady) (void)pack_gbps(team, staging, pageable.data(), bytes, unit, stream);
      dma.push_back(dma_gbps(6));
    }
    std::printf("pack %s alone                               %6.1f GB/s\n", name, median(idle));
    std::printf("pack %s while the DMA runs                  %6.1f GB/s  (DMA meanwhile %5.1f GB/s)\n", name,
                median(busy), median(dma));
  }
  check(cudaStreamDestroy(s), "cudaStreamDestroy");
  check(cudaFree(device), "cudaFree");
  check(cudaFreeHost(staging), "cudaFreeHost");
  check(cudaFreeHost(dma_src), "cudaFreeHost");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ferry-probe-staging: %s\n", e.what());
  return 1;
}
