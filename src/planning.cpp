// SPDX-License-Identifier: MIT
// Transfer planning (see planning.hpp): pure functions over sizes and addresses.
#include "planning.hpp"

#include <algorithm>
#include <bit>
#include <numeric>

namespace ferry::detail::planning {

std::optional<BatchLayout> layout_batch(std::span<const HostView> views, std::uint64_t limit) {
  BatchLayout layout;
  layout.offsets.reserve(views.size());
  layout.pieces.reserve(views.size());
  std::uint64_t total = 0, allocation = 1;
  for (const HostView& v : views) {
    if (v.size > limit || total > limit) return std::nullopt;  // no overflow below
    const std::uint64_t at = (total + kBatchAlignment - 1) / kBatchAlignment * kBatchAlignment;
    layout.offsets.push_back(at);
    allocation = std::max(allocation, at);
    if (v.size == 0) continue;
    // const_cast: an upload only reads through StreamPiece::host.
    layout.pieces.push_back({at, const_cast<std::byte*>(static_cast<const std::byte*>(v.data)), v.size});
    total = at + v.size;
  }
  allocation = std::max(allocation, total);
  if (allocation > limit) return std::nullopt;
  layout.total = total;
  layout.allocation = allocation;
  return layout;
}

DownloadPlan coalesce_downloads(std::span<const DownloadView> views, std::uint64_t gap) {
  std::vector<std::uint32_t> order(views.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](std::uint32_t x, std::uint32_t y) {
    return views[x].offset < views[y].offset || (views[x].offset == views[y].offset && x < y);
  });
  DownloadPlan plan;
  plan.pieces.reserve(views.size());
  for (const std::uint32_t i : order) {
    const DownloadView& v = views[i];
    if (v.size == 0) continue;
    if (plan.runs.empty() || v.offset > plan.runs.back().source + plan.runs.back().size + gap) {
      plan.runs.push_back({plan.total, v.offset, 0});
    }
    Run& r = plan.runs.back();
    const std::uint64_t end = std::max(r.source + r.size, v.offset + v.size);
    plan.total += end - (r.source + r.size);
    r.size = end - r.source;
    plan.pieces.push_back({r.stream + (v.offset - r.source), static_cast<std::byte*>(v.data), v.size});
  }
  return plan;
}

Geometry staging_geometry(std::uint64_t total, std::uint64_t buffer_bytes, std::size_t buffers, std::size_t first,
                          const StagingTuning& tuning) {
  Geometry g;
  g.chunk = buffer_bytes;
  while (g.chunk % 2 == 0 && g.chunk / 2 >= tuning.min_chunk && (total + g.chunk - 1) / g.chunk < tuning.target_chunks) {
    g.chunk /= 2;
  }
  g.per_buffer = buffer_bytes / g.chunk;
  g.buffers = buffers;
  g.ring_chunks = g.per_buffer * buffers;
  g.first = first;
  g.chunks = (total + g.chunk - 1) / g.chunk;
  return g;
}

CopyPlan plan_copies(std::span<const StreamPiece> pieces, std::uint64_t total, const Geometry& g,
                     std::span<std::byte* const> ring, std::uint64_t workers, const StagingTuning& tuning,
                     bool to_staging) {
  CopyPlan plan;
  plan.chunks = static_cast<std::uint32_t>(g.chunks);
  std::vector<std::uint64_t> unit_begin;  // stream position where unit u starts
  for (std::uint64_t k = 0; k < g.chunks; ++k) {
    const std::uint64_t cb = k * g.chunk, n = std::min(g.chunk, total - cb);
    const std::uint64_t parts = std::clamp<std::uint64_t>(n / tuning.unit_bytes, 1, workers);
    std::uint64_t prev = cb;
    for (std::uint64_t i = 1; i <= parts; ++i) {
      const std::uint64_t e = i == parts ? cb + n : cb + (n * i / parts) / 4096 * 4096;
      if (e <= prev) continue;
      unit_begin.push_back(prev);
      plan.units.push_back({0, 0, static_cast<std::uint32_t>(k)});
      prev = e;
    }
  }
  const std::size_t units = plan.units.size();
  auto unit_end = [&](std::size_t u) { return u + 1 < units ? unit_begin[u + 1] : total; };
  // Visit the fragments of every piece, cut at unit boundaries. Pieces come in stream order
  // (a batch layout, or coalesced downloads by source offset), so the unit of each piece's
  // start is found by walking on from the previous piece's: amortized O(1) a piece for a
  // batch of thousands of small views. A piece that starts before the previous one (any
  // other order) is found by bisection.
  auto for_each_fragment = [&](auto&& fn) {
    std::size_t first = 0;  // unit of the previous piece's start
    for (const StreamPiece& p : pieces) {
      if (first < units && unit_begin[first] <= p.at) {
        while (first + 1 < units && unit_begin[first + 1] <= p.at) ++first;
      } else {
        first = static_cast<std::size_t>(
            std::upper_bound(unit_begin.begin(), unit_begin.end(), p.at) - unit_begin.begin() - 1);
      }
      for (std::size_t u = first; u < units && unit_begin[u] < p.at + p.size; ++u) {
        const std::uint64_t a = std::max(p.at, unit_begin[u]), b = std::min(p.at + p.size, unit_end(u));
        if (a < b) fn(u, p, a, b);
      }
    }
  };
  std::vector<std::uint32_t> count(units + 1, 0);
  for_each_fragment([&](std::size_t u, const StreamPiece&, std::uint64_t, std::uint64_t) { ++count[u + 1]; });
  for (std::size_t u = 0; u < units; ++u) count[u + 1] += count[u];
  for (std::size_t u = 0; u < units; ++u) plan.units[u].begin = plan.units[u].end = count[u];
  plan.items.resize(count[units]);
  // Where each chunk's staging starts: finding a chunk's place in the ring takes three
  // divisions, done once per chunk instead of once per fragment.
  std::vector<std::byte*> chunk_base(g.chunks);
  for (std::uint64_t k = 0; k < g.chunks; ++k) chunk_base[k] = ring[g.buffer(k)] + g.offset(k);
  for_each_fragment([&](std::size_t u, const StreamPiece& p, std::uint64_t a, std::uint64_t b) {
    const std::uint64_t k = plan.units[u].chunk;
    std::byte* staged = chunk_base[k] + (a - k * g.chunk);
    std::byte* host = p.host + (a - p.at);
    plan.items[plan.units[u].end++] = to_staging ? CopyItem{staged, host, b - a} : CopyItem{host, staged, b - a};
  });
  return plan;
}

std::uint64_t derived_bulk_piece(std::uint64_t bytes_per_second) noexcept {
  const std::uint64_t rate = bytes_per_second != 0 ? bytes_per_second : kAssumedCopyRate;
  // bytes = rate * latency, without overflow for any rate: rate / 1e9 * ns + the remainder.
  const std::uint64_t bytes = rate / 1'000'000'000 * kPieceLatencyNs + rate % 1'000'000'000 * kPieceLatencyNs / 1'000'000'000;
  if (bytes <= kMinPiece) return kMinPiece;
  if (bytes >= kMaxPiece) return kMaxPiece;
  const std::uint64_t below = std::bit_floor(bytes);
  return bytes - below < 2 * below - bytes ? below : 2 * below;  // the nearer; a tie rounds up
}

}  // namespace ferry::detail::planning
