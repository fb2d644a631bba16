// SPDX-License-Identifier: MIT
// Unit tests of the staging packer (src/parallel_copy.cpp): pipelined copies run every unit
// once, chunk by chunk, and streaming copies are byte-exact.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "parallel_copy.hpp"

using ferry::detail::ParallelCopier;

TEST_CASE("pipelined copy: chunks released in order, helpers and caller run every unit once") {
  using ferry::detail::CopyItem;
  using ferry::detail::CopyPlan;
  using ferry::detail::CopyUnit;
  using ferry::detail::PipelinedCopy;
  std::mt19937_64 rng(5);
  for (unsigned threads : {0u, 1u, 3u}) {
    CAPTURE(threads);
    ParallelCopier copier(threads);
    for (int round = 0; round < 20; ++round) {
      // 1..9 chunks of 1..6 units of 1..5 items each.
      CopyPlan plan;
      plan.chunks = 1 + static_cast<std::uint32_t>(rng() % 9);
      std::vector<std::vector<std::byte>> src, dst;
      for (std::uint32_t k = 0; k < plan.chunks; ++k) {
        const int units = 1 + static_cast<int>(rng() % 6);
        for (int u = 0; u < units; ++u) {
          CopyUnit unit{static_cast<std::uint32_t>(plan.items.size()), 0, k};
          const int items = 1 + static_cast<int>(rng() % 5);
          for (int i = 0; i < items; ++i) {
            src.emplace_back(1 + rng() % 5000);
            for (auto& b : src.back()) b = static_cast<std::byte>(rng());
            dst.emplace_back(src.back().size(), std::byte{0});
          }
          unit.end = static_cast<std::uint32_t>(unit.begin + items);
          for (std::uint32_t i = unit.begin; i < unit.end; ++i) {
            plan.items.push_back({dst[i].data(), src[i].data(), src[i].size()});
          }
          plan.units.push_back(unit);
        }
      }
      PipelinedCopy job(copier, plan);
      for (std::uint32_t k = 0; k < plan.chunks; ++k) {
        CHECK_FALSE(job.chunk_done(k));  // nothing of chunk k may run before its release
        job.release_through(k);
        while (!job.chunk_done(k)) {
          if (!job.run_one()) std::this_thread::yield();
        }
      }
      CHECK(job.all_done());
      CHECK(src == dst);
    }
  }
}

TEST_CASE("stream copy: every alignment and size around the streaming edges is exact") {
  std::vector<std::byte> src(4096 + 64), dst(4096 + 64);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 7 + 3);
  for (std::size_t dst_off : {0u, 1u, 8u, 15u, 16u, 33u}) {
    for (std::size_t src_off : {0u, 3u, 16u}) {
      for (std::size_t n : {0u, 1u, 63u, 255u, 256u, 257u, 320u, 1000u, 4000u}) {
        std::fill(dst.begin(), dst.end(), std::byte{0xee});
        ferry::detail::stream_copy(dst.data() + dst_off, src.data() + src_off, n);
        ferry::detail::finish_stream_copies();
        CAPTURE(dst_off);
        CAPTURE(src_off);
        CAPTURE(n);
        CHECK(std::memcmp(dst.data() + dst_off, src.data() + src_off, n) == 0);
        // Nothing outside [dst_off, dst_off + n) was written.
        bool outside_intact = true;
        for (std::size_t i = 0; i < dst.size(); ++i) {
          if ((i < dst_off || i >= dst_off + n) && dst[i] != std::byte{0xee}) outside_intact = false;
        }
        CHECK(outside_intact);
      }
    }
  }
}
