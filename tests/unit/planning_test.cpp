// SPDX-License-Identifier: MIT
// Unit tests of transfer planning (src/planning.cpp): batch layout, download coalescing,
// staging geometry and the host copy plan, checked against direct models on random inputs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "planning.hpp"

using namespace ferry;
using namespace ferry::detail::planning;

namespace {
constexpr std::uint64_t KiB = 1024, MiB = 1024 * KiB;
}  // namespace

TEST_CASE("planning: batch layout packs inputs in order at aligned, disjoint offsets") {
  std::mt19937_64 rng(11);
  std::vector<std::byte> memory(1);
  for (int round = 0; round < 200; ++round) {
    // A quarter of the views empty (some with a null pointer), in runs at any position.
    std::vector<HostView> views(1 + rng() % 40);
    for (auto& v : views) {
      if (rng() % 4 == 0) {
        v = {rng() % 2 ? nullptr : memory.data(), 0};
      } else {
        v = {memory.data(), 1 + rng() % (3 * kBatchAlignment)};
      }
    }
    const auto layout = layout_batch(views, UINT64_MAX / 4);
    REQUIRE(layout.has_value());
    REQUIRE(layout->offsets.size() == views.size());
    std::uint64_t end = 0;
    std::size_t piece = 0;
    for (std::size_t i = 0; i < views.size(); ++i) {
      CAPTURE(i);
      CHECK(layout->offsets[i] % kBatchAlignment == 0);
      CHECK(layout->offsets[i] >= end);                        // after the previous input
      CHECK(layout->offsets[i] < end + kBatchAlignment);       // and no further than alignment needs
      CHECK(layout->offsets[i] + views[i].size <= layout->allocation);  // inside the allocation
      if (views[i].size == 0) continue;                        // occupies nothing, streams nothing
      REQUIRE(piece < layout->pieces.size());
      CHECK(layout->pieces[piece].at == layout->offsets[i]);
      CHECK(layout->pieces[piece].size == views[i].size);
      CHECK(layout->pieces[piece].host == views[i].data);
      ++piece;
      end = layout->offsets[i] + views[i].size;
    }
    CHECK(piece == layout->pieces.size());  // one piece per non-empty view
    CHECK(layout->total == end);
    CHECK(layout->allocation >= std::max<std::uint64_t>(end, 1));
    CHECK(layout->allocation < std::max<std::uint64_t>(end, 1) + kBatchAlignment);
  }
}

TEST_CASE("planning: batch layout of empty views at the start, the end, and everywhere") {
  std::byte b[1000]{};
  // Empty views first and last: the first takes offset 0, the last the aligned end, which the
  // allocation covers.
  const std::vector<HostView> edges = {{nullptr, 0}, {b, 1000}, {b, 0}, {nullptr, 0}};
  const auto l = layout_batch(edges, UINT64_MAX / 4);
  REQUIRE(l.has_value());
  CHECK(l->offsets == std::vector<std::uint64_t>{0, 0, 1024, 1024});
  REQUIRE(l->pieces.size() == 1);
  CHECK(l->pieces[0].at == 0);
  CHECK(l->pieces[0].size == 1000);
  CHECK(l->total == 1000);
  CHECK(l->allocation == 1024);
  // Nothing but empty views: no stream, every offset 0, the smallest allocation.
  const std::vector<HostView> none = {{nullptr, 0}, {b, 0}, {nullptr, 0}};
  const auto n = layout_batch(none, UINT64_MAX / 4);
  REQUIRE(n.has_value());
  CHECK(n->offsets == std::vector<std::uint64_t>{0, 0, 0});
  CHECK(n->pieces.empty());
  CHECK(n->total == 0);
  CHECK(n->allocation == 1);
  // An empty view does not move the next input: it starts where it would have without it.
  const std::vector<HostView> middle = {{b, 10}, {nullptr, 0}, {b, 10}};
  const auto m = layout_batch(middle, UINT64_MAX / 4);
  REQUIRE(m.has_value());
  CHECK(m->offsets == std::vector<std::uint64_t>{0, 256, 256});
  CHECK(m->total == 266);
}

TEST_CASE("planning: batch layout refuses a total above the limit, also near overflow") {
  std::byte b{};
  const std::vector<HostView> two = {{&b, 1000}, {&b, 1000}};
  CHECK(layout_batch(two, 2000 + kBatchAlignment).has_value());
  CHECK_FALSE(layout_batch(two, 1999).has_value());
  const std::vector<HostView> huge = {{&b, UINT64_MAX / 2}, {&b, UINT64_MAX / 2}, {&b, UINT64_MAX / 2}};
  CHECK_FALSE(layout_batch(huge, std::uint64_t{1} << 52).has_value());
  // A trailing empty view's aligned offset counts against the limit too.
  const std::vector<HostView> trailing = {{&b, 1000}, {nullptr, 0}};
  CHECK(layout_batch(trailing, 1024).has_value());
  CHECK_FALSE(layout_batch(trailing, 1023).has_value());
}

TEST_CASE("planning: download coalescing reads every requested byte once per run") {
  std::mt19937_64 rng(3);
  std::vector<std::byte> host(1);
  for (int round = 0; round < 200; ++round) {
    const std::uint64_t source = 1 + rng() % (4 * MiB);
    std::vector<DownloadView> views(1 + rng() % 30);
    std::size_t nonempty = 0;
    for (auto& v : views) {
      v.offset = rng() % (source + 1);  // an empty view may sit at the very end
      if (rng() % 5 == 0 || v.offset == source) {
        v.size = 0;
        v.data = rng() % 2 ? nullptr : host.data();
        continue;
      }
      v.size = 1 + rng() % std::min<std::uint64_t>(source - v.offset, 300 * KiB);
      v.data = host.data();
      ++nonempty;
    }
    const std::uint64_t gap = rng() % 2 ? kCoalesceGap : rng() % (8 * KiB);
    const DownloadPlan plan = coalesce_downloads(views, gap);
    REQUIRE(plan.pieces.size() == nonempty);  // empty views read nothing
    // Runs: increasing, disjoint, separated by more than `gap`, contiguous in the stream.
    std::uint64_t stream = 0;
    for (std::size_t r = 0; r < plan.runs.size(); ++r) {
      CHECK(plan.runs[r].stream == stream);
      CHECK(plan.runs[r].size > 0);
      if (r > 0) CHECK(plan.runs[r].source > plan.runs[r - 1].source + plan.runs[r - 1].size + gap);
      stream += plan.runs[r].size;
    }
    CHECK(plan.total == stream);
    // Every view's range lies in one run, at the stream position its piece says.
    std::vector<bool> matched(views.size(), false);
    for (const StreamPiece& p : plan.pieces) {
      const auto run = std::find_if(plan.runs.begin(), plan.runs.end(), [&](const Run& r) {
        return p.at >= r.stream && p.at + p.size <= r.stream + r.size;
      });
      REQUIRE(run != plan.runs.end());
      const std::uint64_t offset = run->source + (p.at - run->stream);
      for (std::size_t i = 0; i < views.size(); ++i) {
        if (!matched[i] && views[i].size > 0 && views[i].offset == offset && views[i].size == p.size) {
          matched[i] = true;
          break;
        }
      }
    }
    for (std::size_t i = 0; i < views.size(); ++i) CHECK(matched[i] == (views[i].size > 0));
    // The runs hold nothing but requested bytes and gaps of at most `gap`.
    std::uint64_t requested_span = 0;
    for (const Run& r : plan.runs) requested_span += r.size;
    CHECK(requested_span <= source);
  }
}

TEST_CASE("planning: download coalescing of empty views plans no copy") {
  std::byte b[16]{};
  const std::vector<DownloadView> none = {{0, nullptr, 0}, {4096, b, 0}, {100, nullptr, 0}};
  const DownloadPlan p = coalesce_downloads(none);
  CHECK(p.runs.empty());
  CHECK(p.pieces.empty());
  CHECK(p.total == 0);
  // An empty view between two ranges too far apart to coalesce does not bridge them: it would
  // if it counted as a range ending within the gap of both.
  const std::vector<DownloadView> bridged = {
      {0, b, 8}, {8 + kCoalesceGap, nullptr, 0}, {8 + 2 * kCoalesceGap, b + 8, 8}};
  const DownloadPlan q = coalesce_downloads(bridged);
  REQUIRE(q.runs.size() == 2);
  CHECK(q.total == 16);
  CHECK(q.pieces.size() == 2);
}

TEST_CASE("planning: staging geometry tiles the ring with power-of-two chunks above the floor") {
  const StagingTuning tuning{};
  for (const std::uint64_t buffer : {4 * KiB, 16 * MiB, 16 * MiB + 4 * KiB, 3 * MiB}) {
    for (const std::size_t buffers : {std::size_t{1}, std::size_t{4}}) {
      for (const std::uint64_t total : {std::uint64_t{1}, 100 * KiB, 64 * MiB, 512 * MiB + 17}) {
        for (std::size_t first = 0; first < buffers; ++first) {
          CAPTURE(buffer);
          CAPTURE(buffers);
          CAPTURE(total);
          const Geometry g = staging_geometry(total, buffer, buffers, first, tuning);
          CHECK(g.chunk * g.per_buffer == buffer);                          // chunks tile a buffer
          CHECK((g.chunk == buffer || g.chunk >= tuning.min_chunk));        // the floor holds
          CHECK(g.chunks == (total + g.chunk - 1) / g.chunk);
          CHECK(g.ring_chunks == g.per_buffer * buffers);
          if (g.chunk != buffer && g.chunk / 2 >= tuning.min_chunk && (buffer / g.chunk) % 2 == 0) {
            CHECK(g.chunks >= tuning.target_chunks);  // halved only while short of the target
          }
          // Chunks of one lap occupy distinct (buffer, offset) slots, starting at `first`.
          CHECK(g.buffer(0) == first);
          std::vector<std::pair<std::size_t, std::uint64_t>> slots;
          for (std::uint64_t k = 0; k < std::min(g.chunks, g.ring_chunks); ++k) {
            CHECK(g.offset(k) + g.chunk <= buffer);
            slots.emplace_back(g.buffer(k), g.offset(k));
          }
          std::sort(slots.begin(), slots.end());
          CHECK(std::adjacent_find(slots.begin(), slots.end()) == slots.end());
          CHECK(g.next_first() == (g.buffer(g.chunks - 1) + 1) % buffers);
        }
      }
    }
  }
}

TEST_CASE("planning: the copy plan moves every stream byte once, in units cut at 4 KiB") {
  std::mt19937_64 rng(17);
  for (int round = 0; round < 40; ++round) {
    // Random pieces of a packed stream, as a batch upload lays them out.
    std::vector<std::vector<std::byte>> sources(1 + rng() % 20);
    std::vector<HostView> views;
    for (auto& s : sources) {
      s.resize(1 + rng() % (rng() % 4 == 0 ? 3 * MiB : 20 * KiB));
      for (auto& b : s) b = static_cast<std::byte>(rng());
      views.push_back({s.data(), s.size()});
    }
    const auto layout = layout_batch(views, UINT64_MAX / 4);
    REQUIRE(layout.has_value());
    const std::size_t buffers = 1 + rng() % 4;
    const std::uint64_t buffer_bytes = (1 + rng() % 4) * MiB;
    StagingTuning tuning;
    tuning.unit_bytes = (1 + rng() % 64) * 4 * KiB;
    const Geometry g = staging_geometry(layout->total, buffer_bytes, buffers, rng() % buffers, tuning);
    std::vector<std::vector<std::byte>> ring(buffers, std::vector<std::byte>(buffer_bytes));
    std::vector<std::byte*> bases;
    for (auto& r : ring) bases.push_back(r.data());
    const std::uint64_t workers = 1 + rng() % 8;
    const ferry::detail::CopyPlan plan = plan_copies(layout->pieces, layout->total, g, bases, workers, tuning, true);
    REQUIRE(plan.chunks == g.chunks);
    // Units: ordered by chunk, at most `workers` per chunk, items contiguous.
    std::vector<std::uint64_t> per_chunk(g.chunks, 0);
    std::uint32_t next_item = 0;
    for (std::size_t u = 0; u < plan.units.size(); ++u) {
      const auto& unit = plan.units[u];
      if (u > 0) CHECK(unit.chunk >= plan.units[u - 1].chunk);
      CHECK(unit.begin == next_item);
      next_item = unit.end;
      ++per_chunk[unit.chunk];
    }
    CHECK(next_item == plan.items.size());
    for (const std::uint64_t n : per_chunk) CHECK(n <= workers);
    // Run the plan chunk by chunk the way the DMA would read it, lap by lap of the ring.
    std::vector<std::byte> stream(layout->total, std::byte{0});
    std::vector<bool> written(layout->total, false);
    bool twice = false;
    for (std::uint64_t k = 0; k < g.chunks; ++k) {
      for (const auto& unit : plan.units) {
        if (unit.chunk != k) continue;
        std::byte* base = ring[g.buffer(k)].data() + g.offset(k);
        for (std::uint32_t i = unit.begin; i < unit.end; ++i) {
          const auto& item = plan.items[i];
          REQUIRE(item.dst >= base);
          REQUIRE(item.dst + item.size <= base + g.chunk);  // inside its chunk's staging
          const std::uint64_t at = k * g.chunk + static_cast<std::uint64_t>(item.dst - base);
          for (std::uint64_t j = 0; j < item.size; ++j) {
            twice = twice || written[at + j];
            written[at + j] = true;
          }
          std::memcpy(item.dst, item.src, item.size);
        }
      }
      const std::uint64_t at = k * g.chunk, n = std::min(g.chunk, layout->total - at);
      std::memcpy(stream.data() + at, ring[g.buffer(k)].data() + g.offset(k), n);
    }
    CHECK_FALSE(twice);
    for (std::size_t i = 0; i < views.size(); ++i) {
      const std::uint64_t at = layout->offsets[i];
      CHECK(std::memcmp(stream.data() + at, sources[i].data(), sources[i].size()) == 0);
      CHECK(std::all_of(written.begin() + static_cast<std::ptrdiff_t>(at),
                        written.begin() + static_cast<std::ptrdiff_t>(at + sources[i].size()), [](bool w) { return w; }));
    }
  }
}

TEST_CASE("planning: the scatter plan gives every piece its stream bytes, in any piece order") {
  // A download's pieces may overlap (overlapping views read the same stream bytes) and a
  // caller may list them in any order: each piece must still receive exactly its own range.
  std::mt19937_64 rng(29);
  for (int round = 0; round < 40; ++round) {
    const std::uint64_t total = 1 + rng() % (6 * MiB);
    std::vector<StreamPiece> pieces(1 + rng() % 40);
    std::vector<std::vector<std::byte>> hosts(pieces.size());
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const std::uint64_t at = rng() % total;
      const std::uint64_t size = 1 + rng() % std::min<std::uint64_t>(total - at, rng() % 2 ? 64 * KiB : 2 * MiB);
      hosts[i].assign(size, std::byte{0});
      pieces[i] = {at, hosts[i].data(), size};
    }
    if (rng() % 4 != 0) {  // mostly in stream order, as coalesce_downloads lists them
      std::sort(pieces.begin(), pieces.end(), [](const StreamPiece& x, const StreamPiece& y) { return x.at < y.at; });
    }
    StagingTuning tuning;
    tuning.unit_bytes = (1 + rng() % 64) * 4 * KiB;
    const std::size_t buffers = 1 + rng() % 4;
    const std::uint64_t buffer_bytes = (1 + rng() % 4) * MiB;
    const Geometry g = staging_geometry(total, buffer_bytes, buffers, rng() % buffers, tuning);
    std::vector<std::vector<std::byte>> ring(buffers, std::vector<std::byte>(buffer_bytes));
    std::vector<std::byte*> bases;
    for (auto& r : ring) bases.push_back(r.data());
    const ferry::detail::CopyPlan plan = plan_copies(pieces, total, g, bases, 1 + rng() % 8, tuning, false);
    // The stream's byte at s is f(s); lap by lap, fill each chunk's staging, then run its units.
    auto f = [](std::uint64_t s) { return static_cast<std::byte>((s * 2654435761u) >> 13); };
    std::uint64_t copied = 0;
    for (std::uint64_t k = 0; k < g.chunks; ++k) {
      std::byte* base = ring[g.buffer(k)].data() + g.offset(k);
      const std::uint64_t at = k * g.chunk, n = std::min(g.chunk, total - at);
      for (std::uint64_t j = 0; j < n; ++j) base[j] = f(at + j);
      for (const auto& unit : plan.units) {
        if (unit.chunk != k) continue;
        for (std::uint32_t i = unit.begin; i < unit.end; ++i) {
          const auto& item = plan.items[i];
          REQUIRE(item.src >= base);
          REQUIRE(item.src + item.size <= base + n);  // inside its chunk's staging
          std::memcpy(item.dst, item.src, item.size);
          copied += item.size;
        }
      }
    }
    std::uint64_t requested = 0;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      requested += pieces[i].size;
      bool same = true;
      for (std::uint64_t j = 0; j < pieces[i].size && same; ++j) same = pieces[i].host[j] == f(pieces[i].at + j);
      CHECK_MESSAGE(same, "round " << round << ", piece at " << pieces[i].at << " of " << pieces[i].size << " bytes");
    }
    CHECK(copied == requested);  // each piece's bytes copied once
  }
}

TEST_CASE("planning: the derived bulk piece is the link's 100 us, a power of two in [1 MiB, 64 MiB]") {
  // 0: the assumed 25 GB/s moves 2.5 MB in 100 us, nearest to 2 MiB.
  CHECK(derived_bulk_piece(0) == 2 * MiB);
  CHECK(derived_bulk_piece(kAssumedCopyRate) == 2 * MiB);
  CHECK(derived_bulk_piece(10'000'000'000) == 1 * MiB);   // 1 MB: the floor
  CHECK(derived_bulk_piece(1'000'000) == 1 * MiB);        // a slow link: still the floor
  CHECK(derived_bulk_piece(55'500'000'000) == 4 * MiB);   // 5.55 MB: nearer 4 MiB than 8 MiB
  CHECK(derived_bulk_piece(83'886'080'000) == 8 * MiB);   // exactly 8 MiB
  CHECK(derived_bulk_piece(31'457'280'000) == 4 * MiB);   // exactly 3 MiB: a tie rounds up
  CHECK(derived_bulk_piece(1'000'000'000'000) == 64 * MiB);  // 100 MB: the ceiling
  CHECK(derived_bulk_piece(UINT64_MAX) == 64 * MiB);      // no overflow
  std::mt19937_64 rng(5);
  for (int i = 0; i < 2000; ++i) {
    const std::uint64_t rate = rng() >> (rng() % 40);
    const std::uint64_t p = derived_bulk_piece(rate);
    CAPTURE(rate);
    REQUIRE((p & (p - 1)) == 0);
    REQUIRE(p >= kMinPiece);
    REQUIRE(p <= kMaxPiece);
    // Inside the clamp, the nearer of the two powers of two around the bytes moved in 100 us:
    // a piece p is chosen for bytes in [3p/4, 3p/2].
    const double bytes = static_cast<double>(rate) * 1e-4;
    if (bytes > static_cast<double>(kMinPiece) && bytes < static_cast<double>(kMaxPiece)) {
      CHECK(static_cast<double>(p) <= bytes * 4 / 3 * 1.000001);
      CHECK(static_cast<double>(p) >= bytes / 1.5 * 0.999999);
    }
  }
}
