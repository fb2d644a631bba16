// SPDX-License-Identifier: MIT
// Unit tests of the staging packer (src/parallel_copy.cpp): gathers of scattered pieces into a
// packed range, split across helper threads, byte-exact against a serial model.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "parallel_copy.hpp"

using ferry::detail::GatherPiece;
using ferry::detail::ParallelCopier;

namespace {

struct Scatter {
  std::vector<std::vector<std::byte>> sources;
  std::vector<GatherPiece> pieces;  // packed with gaps, like a batch upload's aligned layout
  std::uint64_t total = 0;
};

Scatter make_scatter(std::mt19937_64& rng, int count, std::uint64_t max_size, std::uint64_t align) {
  Scatter s;
  s.sources.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    const std::uint64_t size = 1 + rng() % max_size;
    s.sources.emplace_back(size);
    for (auto& b : s.sources.back()) b = static_cast<std::byte>(rng());
    s.total = (s.total + align - 1) / align * align;
    s.pieces.push_back({s.total, s.sources.back().data(), size});
    s.total += size;
  }
  return s;
}

// What [begin, end) of the packed layout must hold; gap bytes keep `fill`.
std::vector<std::byte> expected(const Scatter& s, std::uint64_t begin, std::uint64_t end, std::byte fill) {
  std::vector<std::byte> out(end - begin, fill);
  for (const auto& p : s.pieces) {
    for (std::uint64_t i = 0; i < p.size; ++i) {
      const std::uint64_t at = p.at + i;
      if (at >= begin && at < end) out[at - begin] = p.src[i];
    }
  }
  return out;
}

}  // namespace

TEST_CASE("parallel copy: gathers of random chunks match a serial model") {
  std::mt19937_64 rng(42);
  for (unsigned threads : {0u, 1u, 3u, 7u}) {
    CAPTURE(threads);
    ParallelCopier copier(threads);
    CHECK(copier.threads() == threads);
    // Small pieces (many per chunk) and large ones (one piece spanning several chunks).
    for (std::uint64_t max_size : {std::uint64_t{300}, std::uint64_t{3} << 20}) {
      CAPTURE(max_size);
      const Scatter s = make_scatter(rng, max_size > 1000 ? 6 : 4000, max_size, 256);
      const std::uint64_t chunk = max_size > 1000 ? (1u << 20) + 13 : 4096 + 7;  // odd chunk edges
      for (std::uint64_t begin = 0; begin < s.total; begin += chunk) {
        const std::uint64_t end = std::min(s.total, begin + chunk);
        std::vector<std::byte> dst(end - begin, std::byte{0xEE});
        copier.gather(s.pieces, begin, end, dst.data());
        if (dst != expected(s, begin, end, std::byte{0xEE})) {
          FAIL("gather of [" << begin << ", " << end << ") differs from the model");
        }
      }
    }
  }
}

TEST_CASE("parallel copy: a large contiguous copy is exact and reusable many times") {
  ParallelCopier copier(5);
  std::vector<std::byte> src((8u << 20) + 3);
  std::mt19937_64 rng(7);
  for (auto& b : src) b = static_cast<std::byte>(rng());
  for (int round = 0; round < 20; ++round) {  // the helpers are persistent: reuse them
    std::vector<std::byte> dst(src.size());
    copier.copy(dst.data(), src.data(), src.size());
    REQUIRE(dst == src);
  }
}

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
