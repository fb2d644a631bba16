// SPDX-License-Identifier: MIT
// ferry-bench: the whole-batch study. Many scattered pageable buffers in one upload call, and
// one large pageable buffer, against the ceiling of any path that must stage on the host:
// min(parallel host memcpy into pinned memory, pinned DMA), both measured in this run. The
// memcpy side is measured in rounds alternating with ferry's calls, on the bytes of the call
// it bounds (see BatchStudy).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
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

// A team of copy threads started once, outside every timing, so that a ceiling pays the
// wake-up of sleeping threads as ferry's helpers do, and not the creation of threads.
class Team {
 public:
  explicit Team(unsigned threads) {
    for (unsigned t = 0; t < threads; ++t) workers_.emplace_back([this, t] { loop(t); });
  }
  ~Team() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }
  Team(const Team&) = delete;
  Team& operator=(const Team&) = delete;
  [[nodiscard]] unsigned size() const { return static_cast<unsigned>(workers_.size()); }

  /// Run `part(t, threads)` on every thread; GB/s of `bytes` from the start signal to the
  /// end of the last part.
  double gbps(std::uint64_t bytes, const std::function<void(unsigned, unsigned)>& part) {
    const auto t0 = clock_type::now();
    start(part);
    wait();
    return static_cast<double>(bytes) / seconds_since(t0) / 1e9;
  }

  /// Wake every thread to run `part(t, threads)`; `part` must live until wait() returns.
  void start(const std::function<void(unsigned, unsigned)>& part) {
    {
      std::lock_guard lock(mutex_);
      job_ = &part;
      pending_ = size();
      ++generation_;
    }
    wake_.notify_all();
  }
  /// Until every thread has returned from the part start() gave it.
  void wait() {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
  }

 private:
  void loop(unsigned t) {
    std::uint64_t seen = 0;
    for (;;) {
      const std::function<void(unsigned, unsigned)>* job = nullptr;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      (*job)(t, size());
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(unsigned, unsigned)>* job_ = nullptr;
  unsigned pending_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

// `bytes` of contiguous memory, each thread a contiguous part.
double contiguous_gbps(Team& team, std::byte* dst, const std::byte* src, std::uint64_t bytes) {
  return team.gbps(bytes, [=](unsigned t, unsigned n) {
    const std::uint64_t a = bytes * t / n, b = bytes * (t + 1) / n;
    std::memcpy(dst + a, src + a, b - a);
  });
}

// The scattered buffers packed back to back into `packed` (gather) or filled from it
// (scatter), each thread a contiguous run of buffers.
double scattered_gbps(Team& team, std::vector<std::vector<std::byte>>& pieces, std::byte* packed, bool gather) {
  std::uint64_t bytes = 0;
  for (const auto& p : pieces) bytes += p.size();
  const std::uint64_t each = pieces.empty() ? 0 : pieces.front().size();
  return team.gbps(bytes, [&, packed, gather, each](unsigned t, unsigned n) {
    const std::size_t a = pieces.size() * t / n, b = pieces.size() * (t + 1) / n;
    for (std::size_t i = a; i < b; ++i) {
      std::byte* staged = packed + i * each;
      if (gather) {
        std::memcpy(staged, pieces[i].data(), each);
      } else {
        std::memcpy(pieces[i].data(), staged, each);
      }
    }
  });
}

double gbps_of(std::uint64_t bytes, clock_type::time_point t0) {
  return static_cast<double>(bytes) / seconds_since(t0) / 1e9;
}

// The scattered buffers staged by hand, as an engine without ferry's staging would: the team
// packs them with memcpy into pinned memory chunk by chunk (each thread a slice of every
// chunk, in chunk order), and this thread uploads each chunk (a pinned range into `dst`, one
// DMA) as soon as every slice of it is packed. `dst` belongs to the executor, so each copy is
// just a DMA on the executor, with no hand-over between queues.
double hand_staged_gbps(Team& team, const std::vector<std::vector<std::byte>>& pieces, ferry::Transfer& xfer,
                        const ferry::HostBuffer& pinned, const ferry::DeviceBuffer& dst, std::uint64_t chunk_bytes) {
  const std::uint64_t each = pieces.front().size();
  const std::size_t per_chunk = static_cast<std::size_t>(std::max<std::uint64_t>(1, chunk_bytes / each));
  const std::size_t chunks = (pieces.size() + per_chunk - 1) / per_chunk;
  const std::unique_ptr<std::atomic<unsigned>[]> packed(new std::atomic<unsigned>[chunks]);
  for (std::size_t k = 0; k < chunks; ++k) packed[k].store(0, std::memory_order_relaxed);
  std::byte* const base = pinned.data();
  const std::function<void(unsigned, unsigned)> part = [&](unsigned t, unsigned n) {
    for (std::size_t k = 0; k < chunks; ++k) {
      const std::size_t first = k * per_chunk, count = std::min(per_chunk, pieces.size() - first);
      for (std::size_t i = first + count * t / n; i < first + count * (t + 1) / n; ++i) {
        std::memcpy(base + i * each, pieces[i].data(), each);
      }
      packed[k].fetch_add(1, std::memory_order_release);
    }
  };
  ferry::UploadIntoOptions options;
  options.destination_unused = true;  // only these copies ever write `dst`
  options.owner_waits = false;
  const auto t0 = clock_type::now();
  team.start(part);
  ferry::TimelinePoint last;
  for (std::size_t k = 0; k < chunks; ++k) {
    while (packed[k].load(std::memory_order_acquire) < team.size()) std::this_thread::yield();
    const std::uint64_t at = k * per_chunk * each, n = std::min(per_chunk, pieces.size() - k * per_chunk) * each;
    last = xfer.upload_into(pinned, at, n, dst, at, options);
  }
  last.wait(std::chrono::minutes(5));
  const double g = gbps_of(pieces.size() * each, t0);
  team.wait();
  return g;
}

}  // namespace

BatchStudy run_batch_study(const DeviceFactory& factory, std::uint64_t pageable_bytes, double dma_gbps,
                           double dma_d2h_gbps, int rounds, const Progress& progress) {
  BatchStudy s;
  ferry::Device dev = factory.open();
  ferry::Queue compute = dev.queue(ferry::QueueRole::compute);
  ferry::Transfer xfer(dev);

  s.scattered_count = 4096;
  s.scattered_each = 16 << 10;
  const std::uint64_t scattered_bytes = s.scattered_count * s.scattered_each;
  std::vector<std::vector<std::byte>> pieces(s.scattered_count, std::vector<std::byte>(s.scattered_each));
  std::vector<ferry::HostView> views;
  for (auto& p : pieces) views.push_back({p.data(), p.size()});
  s.pageable_bytes = pageable_bytes;

  // The contiguous pageable source holds at least the scattered call's bytes: its first
  // scattered_bytes are the contiguous twin of the scattered call.
  std::vector<std::byte> pageable(std::max(pageable_bytes, scattered_bytes));
  for (std::size_t i = 0; i < pageable.size(); i += 4096) pageable[i] = static_cast<std::byte>(i >> 12);
  const std::span<const std::byte> whole(pageable.data(), pageable_bytes);
  const std::span<const std::byte> twin(pageable.data(), scattered_bytes);
  ferry::HostBuffer pinned = dev.host_pool().allocate(pageable.size());
  Team team(std::max(1u, std::thread::hardware_concurrency()));
  s.memcpy_threads = team.size();
  s.dma_gbps = dma_gbps;
  s.dma_d2h_gbps = dma_d2h_gbps;
  s.rounds = rounds;
  auto capped = [](double memcpy_gbps, double dma) { return dma > 0 ? std::min(memcpy_gbps, dma) : memcpy_gbps; };

  // Warm-up: the staging ring, the pool's segments, the helper threads and the team's copies
  // exist before round 1.
  ferry::UploadBatch resident = xfer.upload(std::span<const ferry::HostView>(views), compute);
  resident.ready.wait(std::chrono::minutes(5));
  std::vector<ferry::DownloadView> down;
  for (std::size_t i = 0; i < views.size(); ++i) down.push_back({resident.offsets[i], pieces[i].data(), pieces[i].size()});
  xfer.upload(whole, compute).ready.wait(std::chrono::minutes(5));
  xfer.upload(twin, compute).ready.wait(std::chrono::minutes(5));
  // The hand-staged anchor packs into pinned memory of its own, as a user's code would, in
  // chunks of the size ferry's staging cuts such a call into.
  const ferry::Queue executor = dev.queue(ferry::QueueRole::transfer);
  ferry::HostBuffer hand_pinned = dev.host_pool().allocate(scattered_bytes);
  ferry::DeviceBuffer hand_dst = dev.pool().allocate(scattered_bytes, executor);
  s.hand_chunk = 2 << 20;
  (void)hand_staged_gbps(team, pieces, xfer, hand_pinned, hand_dst, s.hand_chunk);
  (void)scattered_gbps(team, pieces, pinned.data(), true);
  (void)contiguous_gbps(team, pinned.data(), pageable.data(), pageable.size());

  std::vector<double> gather, same, ceiling_s, scattered, scattered_ratio, contiguous, contiguous_ratio, memcpy_in,
      ceiling, page, page_ratio, memcpy_out, ceiling_down, scattered_down, down_ratio, hand, hand_ratio, vs_hand;
  // Each ferry call right after the ceiling that bounds it (A B A B ...).
  auto upload_gbps = [&](auto&& input, std::uint64_t bytes) {
    const auto t0 = clock_type::now();
    auto up = xfer.upload(input, compute);
    up.ready.wait(std::chrono::minutes(5));
    const double g = gbps_of(bytes, t0);
    up.buffer.release();
    return g;
  };
  for (int round = 0; round < rounds; ++round) {
    const std::string r = " (round " + std::to_string(round + 1) + "/" + std::to_string(rounds) + ")";
    progress.phase("batch study: host memcpy ceiling of the scattered call" + r);
    gather.push_back(scattered_gbps(team, pieces, pinned.data(), true));
    same.push_back(contiguous_gbps(team, pinned.data(), pageable.data(), scattered_bytes));
    ceiling_s.push_back(capped(std::max(gather.back(), same.back()), dma_gbps));

    progress.phase("batch study: 4096 x 16K scattered pageable upload" + r);
    // Ferry's call and the hand-staged one take turns going first, so neither always finds
    // the buffers just read by the other.
    const auto by_hand = [&] {
      progress.phase("batch study: the scattered buffers staged by hand" + r);
      hand.push_back(hand_staged_gbps(team, pieces, xfer, hand_pinned, hand_dst, s.hand_chunk));
    };
    if (round % 2 == 1) by_hand();
    scattered.push_back(upload_gbps(std::span<const ferry::HostView>(views), scattered_bytes));
    scattered_ratio.push_back(scattered.back() / ceiling_s.back());
    if (round % 2 == 0) by_hand();
    hand_ratio.push_back(hand.back() / ceiling_s.back());
    vs_hand.push_back(scattered.back() / hand.back());

    progress.phase("batch study: one pageable buffer of the scattered call's size" + r);
    const double same_again = contiguous_gbps(team, pinned.data(), pageable.data(), scattered_bytes);
    const double ceiling_c = capped(std::max(gather.back(), same_again), dma_gbps);
    contiguous.push_back(upload_gbps(twin, scattered_bytes));
    contiguous_ratio.push_back(contiguous.back() / ceiling_c);

    progress.phase("batch study: host memcpy ceiling of one pageable buffer" + r);
    memcpy_in.push_back(contiguous_gbps(team, pinned.data(), pageable.data(), pageable_bytes));
    ceiling.push_back(capped(memcpy_in.back(), dma_gbps));

    progress.phase("batch study: one pageable buffer" + r);
    page.push_back(upload_gbps(whole, pageable_bytes));
    page_ratio.push_back(page.back() / ceiling.back());

    progress.phase("batch study: host memcpy-out ceiling" + r);
    const double scatter_out = scattered_gbps(team, pieces, pinned.data(), false);
    const double same_out = contiguous_gbps(team, pageable.data(), pinned.data(), scattered_bytes);
    memcpy_out.push_back(std::max(scatter_out, same_out));
    ceiling_down.push_back(capped(memcpy_out.back(), dma_d2h_gbps));

    progress.phase("batch study: batch download into 4096 x 16K scattered pageable buffers" + r);
    const auto t0 = clock_type::now();
    xfer.download(resident.buffer, std::span<const ferry::DownloadView>(down));  // blocking
    scattered_down.push_back(gbps_of(scattered_bytes, t0));
    down_ratio.push_back(scattered_down.back() / ceiling_down.back());
  }
  compute.synchronize(std::chrono::minutes(5));
  s.memcpy_gather_gbps = spread(gather);
  s.memcpy_same_gbps = spread(same);
  s.ceiling_scattered_gbps = spread(ceiling_s);
  s.scattered_gbps = spread(scattered);
  s.scattered_ratio = spread(scattered_ratio);
  s.hand_staged_gbps = spread(hand);
  s.hand_staged_ratio = spread(hand_ratio);
  s.scattered_vs_hand = spread(vs_hand);
  s.contiguous_gbps = spread(contiguous);
  s.contiguous_ratio = spread(contiguous_ratio);
  s.memcpy_gbps = spread(memcpy_in);
  s.ceiling_gbps = spread(ceiling);
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
