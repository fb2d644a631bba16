// SPDX-License-Identifier: MIT
// ferry-bench's urgent-copy loop (tools/bench/contention_loop.hpp), which times ferry's urgent
// copies and the vendor references' alike: against copies that complete on a fake device, it
// issues as many as asked or until told to stop, stamps each from its submit to the poll that
// first sees it complete, never reuses a slot still in flight, and rethrows a failure of
// either thread.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

#include "contention_loop.hpp"

using namespace ferry_bench;
using namespace std::chrono_literals;

namespace {

/// A fake queue: copy i completes once `completed` reaches i + 1, in order.
struct FakeQueue {
  std::atomic<std::uint64_t> issued{0}, completed{0};
  std::uint64_t issue() { return issued.fetch_add(1) + 1; }
  bool done(std::uint64_t token) const { return completed.load() >= token; }
};

}  // namespace

TEST_CASE("a count of urgent copies gives one latency per copy, from submit to completion") {
  FakeQueue q;
  std::atomic<bool> stop_device{false};
  // The device completes each copy about 200 us after it is issued.
  std::thread device([&] {
    while (!stop_device.load()) {
      if (q.completed.load() < q.issued.load()) {
        std::this_thread::sleep_for(200us);
        q.completed.fetch_add(1);
      } else {
        std::this_thread::yield();
      }
    }
  });
  const auto latencies = run_urgent_copies<std::uint64_t>(
      500us, 20, [&](std::size_t) { return q.issue(); }, [&](std::uint64_t t) { return q.done(t); },
      [] { return false; });
  stop_device = true;
  device.join();
  CHECK(q.issued.load() == 20);
  REQUIRE(latencies.size() == 20);
  for (double us : latencies) {
    CHECK(us >= 150.0);   // not stamped before the device completed the copy
    CHECK(us < 1e6);
  }
  ContentionRow row;
  summarize_latencies(row, latencies);
  CHECK(row.samples == 20);
  CHECK(row.p50_us <= row.p99_us);
  CHECK(row.p99_us <= row.max_us);
}

TEST_CASE("without a count, urgent copies run until stop() and are all stamped") {
  FakeQueue q;
  std::atomic<int> calls{0};
  const auto latencies = run_urgent_copies<std::uint64_t>(
      100us, 0,
      [&](std::size_t) {
        const std::uint64_t t = q.issue();
        q.completed.store(t);  // complete at once
        return t;
      },
      [&](std::uint64_t t) { return q.done(t); }, [&] { return ++calls > 10; });
  CHECK(q.issued.load() == 10);
  CHECK(latencies.size() == 10);
}

TEST_CASE("a slot is reused only once its copy was seen complete") {
  FakeQueue q;
  std::atomic<bool> reused_in_flight{false};
  std::atomic<bool> stop_device{false};
  std::thread device([&] {  // completes copies in bursts, so that the issuer runs ahead
    while (!stop_device.load()) {
      std::this_thread::sleep_for(2ms);
      q.completed.store(q.issued.load());
    }
  });
  const std::uint64_t count = 3 * kUrgentSlots;
  std::vector<std::uint64_t> slot_token(kUrgentSlots, 0);
  const auto latencies = run_urgent_copies<std::uint64_t>(
      0us, count,
      [&](std::size_t slot) {
        if (slot_token[slot] != 0 && !q.done(slot_token[slot])) reused_in_flight = true;
        slot_token[slot] = q.issue();
        return slot_token[slot];
      },
      [&](std::uint64_t t) { return q.done(t); }, [] { return false; });
  stop_device = true;
  device.join();
  CHECK_FALSE(reused_in_flight.load());
  CHECK(latencies.size() == count);
}

TEST_CASE("a failure of the issue or of the poll is rethrown to the caller") {
  FakeQueue q;
  CHECK_THROWS_WITH_AS(run_urgent_copies<std::uint64_t>(
                           10us, 5,
                           [&](std::size_t) -> std::uint64_t {
                             if (q.issued.load() == 2) throw std::runtime_error("cudaMemcpyAsync: failed");
                             const std::uint64_t t = q.issue();
                             q.completed.store(t);
                             return t;
                           },
                           [&](std::uint64_t t) { return q.done(t); }, [] { return false; }),
                       "cudaMemcpyAsync: failed", std::runtime_error);
  FakeQueue never;
  CHECK_THROWS_WITH_AS(run_urgent_copies<std::uint64_t>(
                           10us, 5, [&](std::size_t) { return never.issue(); },
                           [&](std::uint64_t) -> bool { throw std::runtime_error("cudaEventQuery: failed"); },
                           [] { return false; }),
                       "cudaEventQuery: failed", std::runtime_error);
}

TEST_CASE("a contention row without bulk gets the alone count; a bulk row its reps and GB/s") {
  ContentionConfig config;
  config.bulk_bytes = 1 << 20;
  config.alone_copies = 7;
  config.reps = 3;
  config.period_us = 100;
  FakeQueue q;
  const auto urgent = [&](std::uint64_t count, auto&& stop) {
    return run_urgent_copies<std::uint64_t>(
        std::chrono::microseconds(config.period_us), count,
        [&](std::size_t) {
          const std::uint64_t t = q.issue();
          q.completed.store(t);
          return t;
        },
        [&](std::uint64_t t) { return q.done(t); }, stop);
  };
  int bulks = 0, idles = 0;
  ContentionRow alone{.path = "fake", .name = "urgent alone", .bulk = "none", .urgent = true, .how = "fake"};
  measure_contention_row(alone, config, [&] { ++bulks; }, urgent, [&] { ++idles; });
  CHECK(bulks == 0);
  CHECK(alone.samples == 7);
  CHECK(alone.bulk_gbps == 0);

  ContentionRow both{.path = "fake", .name = "h2d bulk + urgent", .bulk = "h2d", .urgent = true, .how = "fake"};
  // Each fake bulk lasts until an urgent copy was issued beside it, then 5 ms more.
  const auto bulk = [&] {
    const std::uint64_t start = q.issued.load();
    ++bulks;
    while (q.issued.load() == start) std::this_thread::yield();
    std::this_thread::sleep_for(5ms);
  };
  measure_contention_row(both, config, bulk, urgent, [&] { ++idles; });
  CHECK(bulks == 3);
  CHECK(idles == 6);         // the alone row: before and after; this row: before each bulk, after the last
  CHECK(both.samples >= 3);  // urgent copies ran beside every bulk
  CHECK(both.bulk_gbps > 0);
  CHECK(both.bulk_gbps < static_cast<double>(config.bulk_bytes) / 5e-3 / 1e9 * 1.01);  // bytes / at least 5 ms

  ContentionRow bulk_alone{.path = "fake", .name = "h2d bulk alone", .bulk = "h2d", .urgent = false, .how = "fake"};
  const std::uint64_t before = q.issued.load();
  measure_contention_row(bulk_alone, config, [&] { std::this_thread::sleep_for(1ms); }, urgent, [] {});
  CHECK(q.issued.load() == before);
  CHECK(bulk_alone.samples == 0);
  CHECK(bulk_alone.bulk_gbps > 0);
}
