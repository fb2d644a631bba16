// SPDX-License-Identifier: MIT
// The urgent copies of the contention section (docs/benchmarks.md, "Contention"): one small
// copy issued every period from the calling thread, its completion stamped by a dedicated
// polling thread. Header-only, so that ferry's rows (contention.cpp) and the vendor references
// (vendor_cuda.cpp in the CUDA module, vendor_vulkan.cpp) time their copies the same way.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

#include "vendor.hpp"

namespace ferry_bench {

/// The most urgent copies in flight at once: the issuing thread waits for the poller before it
/// reuses a slot, so that a vendor reference can keep one event per slot.
inline constexpr std::size_t kUrgentSlots = 1024;

/// Issues urgent copies from the calling thread, one every `period` (the next is due one
/// period after the previous one's submit stamp; a late one is issued at once): `count` of
/// them when `count` > 0, else until `stop()` returns true (checked before each copy). For
/// each copy the host clock is read just before `issue(slot)`, which enqueues the copy and
/// returns a token of its completion. A dedicated thread polls the oldest outstanding token
/// with `done(token)`, spinning (a yield between queries), and stamps the moment it first
/// reports the copy complete: a copy's latency is from its submit stamp to that stamp, in
/// microseconds. The copies of one run go to one queue and complete in call order, so
/// polling them in order stamps each at its own completion. An exception of `issue` or
/// `done` stops both threads and is rethrown here.
template <class Token, class Issue, class Done, class Stop>
std::vector<double> run_urgent_copies(std::chrono::microseconds period, std::uint64_t count, Issue&& issue,
                                      Done&& done, Stop&& stop) {
  using clock = std::chrono::steady_clock;
  std::vector<Token> tokens(kUrgentSlots);
  std::vector<clock::time_point> submitted(kUrgentSlots);
  std::vector<double> latencies;
  std::atomic<std::uint64_t> issued{0}, completed{0};
  std::atomic<bool> issuing_done{false}, abort{false};
  std::exception_ptr poll_error;
  std::thread poller([&] {
    try {
      std::uint64_t c = 0;
      while (!abort.load(std::memory_order_acquire)) {
        if (c < issued.load(std::memory_order_acquire)) {
          const std::size_t slot = c % kUrgentSlots;
          while (!done(tokens[slot])) {
            if (abort.load(std::memory_order_acquire)) return;
            std::this_thread::yield();
          }
          const auto t1 = clock::now();
          latencies.push_back(std::chrono::duration<double, std::micro>(t1 - submitted[slot]).count());
          completed.store(++c, std::memory_order_release);
        } else if (issuing_done.load(std::memory_order_acquire) && c == issued.load(std::memory_order_acquire)) {
          return;
        } else {
          std::this_thread::yield();
        }
      }
    } catch (...) {
      poll_error = std::current_exception();
      abort.store(true, std::memory_order_release);
    }
  });
  std::exception_ptr issue_error;
  try {
    auto next = clock::now();
    for (std::uint64_t i = 0; count == 0 || i < count; ++i) {
      std::this_thread::sleep_until(next);
      if (abort.load(std::memory_order_acquire)) break;
      if (count == 0 && stop()) break;
      while (i - completed.load(std::memory_order_acquire) >= kUrgentSlots && !abort.load(std::memory_order_acquire)) {
        std::this_thread::yield();
      }
      if (abort.load(std::memory_order_acquire)) break;
      const std::size_t slot = i % kUrgentSlots;
      submitted[slot] = clock::now();
      next = submitted[slot] + period;
      tokens[slot] = issue(slot);
      issued.store(i + 1, std::memory_order_release);
    }
  } catch (...) {
    issue_error = std::current_exception();
    abort.store(true, std::memory_order_release);
  }
  issuing_done.store(true, std::memory_order_release);
  poller.join();
  if (issue_error) std::rethrow_exception(issue_error);
  if (poll_error) std::rethrow_exception(poll_error);
  return latencies;
}

/// Fills a row's latency columns from its pooled samples (nearest rank, as the probes).
inline void summarize_latencies(ContentionRow& row, std::vector<double> samples) {
  row.samples = samples.size();
  if (samples.empty()) return;
  std::sort(samples.begin(), samples.end());
  const auto at = [&](double q) {
    const auto i = static_cast<std::size_t>(q * static_cast<double>(samples.size() - 1) + 0.5);
    return samples[std::min(i, samples.size() - 1)];
  };
  row.p50_us = at(0.50);
  row.p99_us = at(0.99);
  row.max_us = samples.back();
}

/// Median of the bulk copies' GB/s over the repetitions.
inline double median_gbps(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Measures `row` (its bulk and urgent fields set): for bulk "none", `config.alone_copies`
/// urgent copies; else `config.reps` bulk copies, each `bulk()` (which issues the bulk and
/// returns once the calling thread has seen it complete), host-timed from just before the call
/// to its return, beside urgent copies when `row.urgent`: these start from a thread of their
/// own as the bulk is issued and stop once the bulk is seen complete. `urgent(count, stop)`
/// runs the urgent copies as run_urgent_copies does and returns their latencies; `idle()`
/// waits until the device has nothing queued, before each bulk.
template <class Bulk, class Urgent, class Idle>
void measure_contention_row(ContentionRow& row, const ContentionConfig& config, Bulk&& bulk, Urgent&& urgent,
                            Idle&& idle) {
  std::vector<double> latencies, gbps;
  if (row.bulk == "none") {
    idle();
    latencies = urgent(static_cast<std::uint64_t>(config.alone_copies), [] { return false; });
  }
  for (int rep = 0; row.bulk != "none" && rep < config.reps; ++rep) {
    idle();
    std::atomic<bool> go{false}, bulk_done{false};
    std::vector<double> rep_latencies;
    std::exception_ptr urgent_error, bulk_error;
    std::thread urgent_thread;
    if (row.urgent) {
      urgent_thread = std::thread([&] {
        try {
          while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
          rep_latencies = urgent(0, [&] { return bulk_done.load(std::memory_order_acquire); });
        } catch (...) {
          urgent_error = std::current_exception();
        }
      });
    }
    double seconds = 0;
    try {
      go.store(true, std::memory_order_release);
      const auto t0 = std::chrono::steady_clock::now();
      bulk();
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } catch (...) {
      bulk_error = std::current_exception();
    }
    bulk_done.store(true, std::memory_order_release);
    go.store(true, std::memory_order_release);
    if (urgent_thread.joinable()) urgent_thread.join();
    if (bulk_error) std::rethrow_exception(bulk_error);
    if (urgent_error) std::rethrow_exception(urgent_error);
    gbps.push_back(static_cast<double>(config.bulk_bytes) / seconds / 1e9);
    latencies.insert(latencies.end(), rep_latencies.begin(), rep_latencies.end());
  }
  idle();
  if (row.urgent) summarize_latencies(row, std::move(latencies));
  row.bulk_gbps = median_gbps(std::move(gbps));
}

}  // namespace ferry_bench
