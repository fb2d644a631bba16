// SPDX-License-Identifier: MIT
// Batch transfers: batch downloads into many host ranges, their ordering after owner
// work, reuse of the staging ring across calls with its cap respected, staging disabled, and
// every bad input of the batch paths.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "conformance.hpp"
#include "reference.hpp"

using namespace ferry;
using conformance::expect_error;
using conformance::expect_invalid_naming;
using conformance::fill_pattern;
using conformance::first_mismatch;

namespace {

constexpr std::uint64_t KiB = 1024, MiB = 1024 * KiB;
constexpr auto kInvalid = ErrorCode::invalid_argument;
constexpr std::byte kGuard{0xA5};


/// A device buffer holding pattern `seed` (uploaded from pinned memory).
DeviceBuffer patterned(Device& dev, Transfer& xfer, std::uint64_t n, std::uint64_t seed) {
  HostBuffer src = dev.host_pool().allocate(n);
  fill_pattern(src.span(), seed);
  Upload up = xfer.upload(src, dev.queue(QueueRole::compute));
  up.ready.wait();
  return std::move(up.buffer);
}

/// Random download views of a `source_bytes` source into one host arena: destinations at
/// random places with guard gaps (never overlapping), source ranges random (may overlap).
struct RandomViews {
  std::vector<DownloadView> views;
  std::vector<std::uint64_t> arena_at;  // where view i lands in the arena
};

RandomViews random_views(std::mt19937_64& rng, std::byte* arena, std::uint64_t arena_bytes, std::uint64_t source_bytes,
                         std::size_t count, std::uint64_t max_size) {
  RandomViews r;
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t size = 1 + rng() % max_size;
    at += rng() % 300;  // guard gap, sometimes 0: adjacent destinations are allowed
    if (at + size > arena_bytes || size > source_bytes) break;
    const std::uint64_t offset = rng() % (source_bytes - size + 1);
    r.views.push_back({offset, arena + at, size});
    r.arena_at.push_back(at);
    at += size;
  }
  // Submit in random order: neither sources nor destinations are sorted.
  std::vector<std::size_t> perm(r.views.size());
  std::iota(perm.begin(), perm.end(), std::size_t{0});
  std::shuffle(perm.begin(), perm.end(), rng);
  RandomViews shuffled;
  for (std::size_t i : perm) {
    shuffled.views.push_back(r.views[i]);
    shuffled.arena_at.push_back(r.arena_at[i]);
  }
  return shuffled;
}

/// Every view holds source bytes [offset, +size) of pattern `seed` (+ add); every other byte
/// of the arena still holds the guard.
void check_views(const RandomViews& r, std::span<const std::byte> arena, std::uint64_t seed, int add = 0) {
  std::vector<char> covered(arena.size(), 0);
  int bad = 0;
  for (std::size_t i = 0; i < r.views.size(); ++i) {
    const DownloadView& v = r.views[i];
    for (std::uint64_t j = 0; j < v.size; ++j) {
      const auto want = static_cast<std::byte>(static_cast<unsigned>(conformance::pattern_byte(seed, v.offset + j)) + add);
      if (arena[r.arena_at[i] + j] != want) {
        ++bad;
        break;
      }
    }
    std::fill(covered.begin() + static_cast<std::ptrdiff_t>(r.arena_at[i]),
              covered.begin() + static_cast<std::ptrdiff_t>(r.arena_at[i] + v.size), 1);
  }
  CHECK_MESSAGE(bad == 0, bad << " of " << r.views.size() << " views arrived wrong");
  std::int64_t stray = -1;
  for (std::size_t i = 0; i < arena.size() && stray < 0; ++i) {
    if (!covered[i] && arena[i] != kGuard) stray = static_cast<std::int64_t>(i);
  }
  CHECK_MESSAGE(stray == -1, "a batch download wrote outside its destinations at arena byte " << stray);
}

}  // namespace

CONFORMANCE_CASE("batch: download into many views, random sizes and offsets, pageable and pinned") {
  Device dev = conformance::open_device();
  std::mt19937_64 rng(42);
  // Small ring (3 x 1 MiB): the calls below wrap it many times.
  TransferOptions topt;
  topt.staging_chunk_bytes = MiB;
  topt.staging_chunks = 3;
  for (const TransferOptions& o : {topt, TransferOptions{}}) {
    CAPTURE(o.staging_chunk_bytes);
    Transfer xfer(dev, o);
    const std::uint64_t source_bytes = conformance::small() ? 3 * MiB + 77 : 9 * MiB + 77;
    DeviceBuffer src = patterned(dev, xfer, source_bytes, 7);
    // Pageable arena.
    for (std::size_t count : {std::size_t{1}, std::size_t{17}, std::size_t{700}}) {
      CAPTURE(count);
      std::vector<std::byte> arena(12 * MiB, kGuard);
      RandomViews r = random_views(rng, arena.data(), arena.size(), source_bytes, count, count == 1 ? 5 * MiB : 40 * KiB);
      REQUIRE(!r.views.empty());
      xfer.download(src, std::span<const DownloadView>(r.views));
      check_views(r, arena, 7);
    }
    // Pinned arena, one view spanning the whole source (a run larger than the ring).
    HostBuffer pinned = dev.host_pool().allocate(source_bytes + 512);
    std::fill(pinned.span().begin(), pinned.span().end(), kGuard);
    RandomViews whole;
    whole.views.push_back({0, pinned.data() + 100, source_bytes});
    whole.arena_at.push_back(100);
    xfer.download(src, std::span<const DownloadView>(whole.views));
    check_views(whole, pinned.span(), 7);
  }
}

CONFORMANCE_CASE("batch: download of an UploadBatch back into host ranges (the mirror of the upload)") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  TransferOptions topt;
  topt.staging_chunk_bytes = 2 * MiB;
  topt.staging_chunks = 2;
  Transfer xfer(dev, topt);
  std::mt19937_64 rng(7);
  std::vector<std::vector<std::byte>> inputs;
  for (int i = 0; i < 400; ++i) {
    inputs.emplace_back(1 + rng() % 30000);
    fill_pattern(inputs.back(), 300 + static_cast<std::uint64_t>(i));
  }
  std::vector<HostView> views;
  for (auto& in : inputs) views.push_back({in.data(), in.size()});
  UploadBatch batch = xfer.upload(std::span<const HostView>(views), owner);
  std::vector<std::vector<std::byte>> outputs;
  std::vector<HostSpan> spans;
  for (auto& in : inputs) outputs.emplace_back(in.size(), std::byte{0});
  for (auto& out : outputs) spans.push_back({out.data(), out.size()});
  xfer.download(batch, std::span<const HostSpan>(spans));
  int bad = 0;
  for (std::size_t i = 0; i < outputs.size(); ++i) bad += first_mismatch(outputs[i], 300 + i) != -1;
  CHECK_MESSAGE(bad == 0, bad << " of " << outputs.size() << " inputs came back wrong");
}

CONFORMANCE_CASE("batch: a batch download after owner compute sees its result") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  TransferOptions topt;
  topt.staging_chunk_bytes = MiB;
  topt.staging_chunks = 2;
  Transfer xfer(dev, topt);
  std::mt19937_64 rng(3);
  for (std::uint64_t round = 0; round < 4; ++round) {
    CAPTURE(round);
    std::vector<std::vector<std::byte>> inputs;
    for (int i = 0; i < 64; ++i) {
      inputs.emplace_back(1 + rng() % 70000);
      fill_pattern(inputs.back(), 500 + round * 100 + static_cast<std::uint64_t>(i));
    }
    std::vector<HostView> views;
    for (auto& in : inputs) views.push_back({in.data(), in.size()});
    UploadBatch batch = xfer.upload(std::span<const HostView>(views), owner);
    DeviceBuffer out = dev.pool().allocate(batch.buffer.size(), owner);
    // Enough passes that a download not ordered after the compute would see stale bytes.
    run_synthetic_compute(owner, batch.buffer, out, 20);
    std::vector<std::vector<std::byte>> results;
    std::vector<DownloadView> down;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      results.emplace_back(inputs[i].size(), std::byte{0});
      down.push_back({batch.offsets[i], results.back().data(), inputs[i].size()});
    }
    xfer.download(out, std::span<const DownloadView>(down));
    int bad = 0;
    for (std::size_t i = 0; i < results.size(); ++i) bad += first_mismatch(results[i], 500 + round * 100 + i, 1) != -1;
    CHECK_MESSAGE(bad == 0, bad << " of " << results.size() << " views missed the compute's result");
    batch.buffer.release();  // stream-ordered after the download's read
    out.release();
  }
}

CONFORMANCE_CASE("batch: staging ring reused across many calls, the cap respected") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  TransferOptions topt;
  topt.staging_chunk_bytes = MiB;
  topt.staging_chunks = 2;
  const std::uint64_t cap = topt.staging_chunk_bytes * topt.staging_chunks;
  Transfer xfer(dev, topt);
  const std::uint64_t pinned_before = dev.host_pool().pinned_bytes();
  std::mt19937_64 rng(11);
  std::uint64_t largest = 0;
  const int calls = conformance::small() ? 12 : 40;
  for (int call = 0; call < calls; ++call) {
    CAPTURE(call);
    // From a few bytes to 2.5x the cap: calls alternate between fitting and wrapping.
    const std::size_t count = 1 + rng() % 40;
    std::vector<std::vector<std::byte>> inputs;
    std::vector<HostView> views;
    for (std::size_t i = 0; i < count; ++i) {
      inputs.emplace_back(1 + rng() % (5 * cap / 2 / count + 1));
      fill_pattern(inputs.back(), static_cast<std::uint64_t>(call) * 1000 + i);
    }
    for (auto& in : inputs) views.push_back({in.data(), in.size()});
    UploadBatch batch = xfer.upload(std::span<const HostView>(views), owner);
    largest = std::max(largest, batch.buffer.size());
    std::vector<std::vector<std::byte>> outputs;
    std::vector<HostSpan> spans;
    for (auto& in : inputs) outputs.emplace_back(in.size());
    for (auto& out : outputs) spans.push_back({out.data(), out.size()});
    xfer.download(batch, std::span<const HostSpan>(spans));
    int bad = 0;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      bad += first_mismatch(outputs[i], static_cast<std::uint64_t>(call) * 1000 + i) != -1;
    }
    CHECK_MESSAGE(bad == 0, bad << " of " << outputs.size() << " views came back wrong");
    // The ring is exactly the cap, allocated once, whatever the size of the call.
    CHECK(dev.host_pool().pinned_bytes() - pinned_before == cap);
  }
  CHECK(largest > cap);  // some calls were larger than the ring
}

CONFORMANCE_CASE("batch: staging disabled") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  TransferOptions topt;
  topt.staging = false;
  Transfer xfer(dev, topt);
  const std::uint64_t pinned_before = dev.host_pool().pinned_bytes();
  std::vector<std::byte> pageable(3 * MiB);
  fill_pattern(pageable, 1);
  std::vector<HostView> views{{pageable.data(), 100}, {pageable.data() + 100, pageable.size() - 100}};
  expect_invalid_naming([&] { (void)xfer.upload(std::span<const HostView>(views), owner); },
                 {"view 0", "100 bytes", "staging cap of 0 bytes"}, "batch upload, staging disabled");
  expect_invalid_naming([&] { (void)xfer.upload(std::span<const std::byte>(pageable), owner); },
                 {std::to_string(pageable.size()) + " bytes", "staging cap of 0 bytes"},
                 "pageable upload, staging disabled");
  // Pinned paths still work, without a ring.
  HostBuffer pinned = dev.host_pool().allocate(MiB);
  fill_pattern(pinned.span(), 2);
  Upload up = xfer.upload(pinned, owner);
  std::vector<std::byte> back(MiB);
  expect_invalid_naming([&] { xfer.download(up.buffer, std::span<std::byte>(back)); },
                 {std::to_string(MiB) + " bytes", "staging cap of 0 bytes"}, "pageable download, staging disabled");
  std::vector<DownloadView> down{{0, back.data(), 10}};
  expect_invalid_naming([&] { xfer.download(up.buffer, std::span<const DownloadView>(down)); },
                 {"view 0", "staging cap of 0 bytes"}, "batch download, staging disabled");
  HostBuffer pinned_back = dev.host_pool().allocate(MiB);
  xfer.download(up.buffer, pinned_back).wait();
  CHECK(first_mismatch(pinned_back.span(), 2) == -1);
  // The Transfer pinned nothing of its own.
  CHECK(dev.host_pool().pinned_bytes() - pinned_before == 2 * MiB);
}

CONFORMANCE_CASE("batch: bad input of batch downloads and uploads") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  const std::uint64_t n = 64 * KiB;
  DeviceBuffer src = patterned(dev, xfer, n, 9);
  std::vector<std::byte> host(4 * n, kGuard);
  std::byte* h = host.data();
  using Views = std::vector<DownloadView>;
  auto down = [&](const Views& v) { xfer.download(src, std::span<const DownloadView>(v)); };

  expect_invalid_naming([&] { down({}); }, {"empty span"}, "no views");
  expect_invalid_naming([&] { down({{0, h, 10}, {0, nullptr, 10}}); }, {"view 1", "null"}, "null destination");
  expect_invalid_naming([&] { down({{0, h, 10}, {20, nullptr, 10}}); }, {"view 1", "null", "10 bytes"},
                 "null destination of a non-empty view");
  expect_invalid_naming([&] { down({{0, h, 10}, {n + 1, nullptr, 0}}); }, {"view 1", "exceeds"}, "empty view past the end");
  expect_invalid_naming([&] { down({{n - 10, h, 11}}); }, {"view 0", "exceeds the source buffer"}, "range past the end");
  expect_invalid_naming([&] { down({{0, h, 1}, {n + 1, h + 8, 1}}); }, {"view 1", "exceeds"}, "offset past the end");
  expect_invalid_naming([&] { down({{1, h, ~std::uint64_t{0}}}); }, {"view 0", "exceeds"}, "size overflows");
  // Overlapping destinations, in any order; the indices are named.
  expect_invalid_naming([&] { down({{0, h + 100, 50}, {0, h + 1000, 10}, {0, h + 149, 10}}); }, {"views 0 and 2", "overlap"},
                 "overlapping destinations");
  expect_invalid_naming([&] { down({{0, h + 500, 10}, {0, h + 500, 10}}); }, {"overlap"}, "identical destinations");
  {
    Views too_many(max_batch_views + 1, DownloadView{0, h, 1});
    expect_invalid_naming([&] { down(too_many); }, {std::to_string(max_batch_views + 1), "exceed the limit"},
                   "more views than max_batch_views");
    std::vector<HostView> up_many(max_batch_views + 1, HostView{h, 1});
    expect_invalid_naming([&] { (void)xfer.upload(std::span<const HostView>(up_many), owner); },
                   {"exceed the limit"}, "batch upload with more views than max_batch_views");
  }
  // Nothing was written by the failed calls.
  CHECK(std::all_of(host.begin(), host.end(), [](std::byte b) { return b == kGuard; }));
  // Adjacent destinations and overlapping sources are fine.
  down({{0, h, 100}, {50, h + 100, 100}});
  CHECK(first_mismatch(std::span<const std::byte>(h, 100), 9) == -1);
  std::vector<std::byte> want(100);
  for (std::uint64_t i = 0; i < 100; ++i) want[i] = conformance::pattern_byte(9, 50 + i);
  CHECK(std::memcmp(h + 100, want.data(), 100) == 0);

  // The UploadBatch mirror: count and size mismatches.
  std::vector<std::byte> a(300), b(500);
  std::vector<HostView> views{{a.data(), a.size()}, {b.data(), b.size()}};
  UploadBatch batch = xfer.upload(std::span<const HostView>(views), owner);
  std::vector<HostSpan> one{{a.data(), a.size()}};
  expect_invalid_naming([&] { xfer.download(batch, std::span<const HostSpan>(one)); }, {"1 destinations", "2 inputs"},
                 "mirror download, count mismatch");
  std::vector<HostSpan> wrong{{a.data(), a.size()}, {b.data(), 499}};
  expect_invalid_naming([&] { xfer.download(batch, std::span<const HostSpan>(wrong)); }, {"destination 1", "499"},
                 "mirror download, size mismatch");
  std::vector<HostSpan> overlapping{{b.data(), a.size()}, {b.data(), b.size()}};
  expect_invalid_naming([&] { xfer.download(batch, std::span<const HostSpan>(overlapping)); }, {"overlap"},
                 "mirror download, overlapping destinations");
  // Released source.
  DeviceBuffer gone = dev.pool().allocate(100, owner);
  gone.release();
  expect_error(kInvalid, [&] { xfer.download(gone, std::span<const DownloadView>(Views{{0, h, 10}})); },
               "batch download from a released buffer");
  conformance::check_round_trip(dev, xfer);
}

CONFORMANCE_CASE("batch: empty views at the start, middle and end of batch uploads and downloads") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  std::vector<std::byte> a(1000), b(3000);
  fill_pattern(a, 21);
  fill_pattern(b, 22);
  std::byte one{};
  // Empty views with null and non-null data, first, between the inputs and last.
  const std::vector<HostView> views{{nullptr, 0}, {a.data(), a.size()}, {&one, 0},
                                    {nullptr, 0}, {b.data(), b.size()}, {nullptr, 0}};
  ferry_bench::ReferenceUploads uploads(dev, xfer, owner);
  for (const bool blocking : {false, true}) {
    CAPTURE(blocking);
    const std::span<const HostView> all(views);
    UploadBatch batch = blocking ? uploads.blocking(all) : xfer.upload(all, owner);
    REQUIRE(batch.offsets.size() == views.size());
    REQUIRE(batch.views.size() == views.size());
    const DeviceView base = batch.buffer.view();
    const std::uint64_t n = batch.buffer.size();
    for (std::size_t i = 0; i < views.size(); ++i) {
      CAPTURE(i);
      CHECK(batch.offsets[i] % 256 == 0);
      CHECK(batch.offsets[i] + views[i].size <= n);
      CHECK(batch.views[i].size == views[i].size);
      CHECK(batch.views[i].native == base.native);
      CHECK(batch.views[i].offset == base.offset + batch.offsets[i]);
    }
    // The mirror download, empty destinations with null data included.
    std::vector<std::byte> ra(a.size()), rb(b.size());
    const std::vector<HostSpan> spans{{nullptr, 0}, {ra.data(), ra.size()}, {&one, 0},
                                      {nullptr, 0}, {rb.data(), rb.size()}, {nullptr, 0}};
    xfer.download(batch, std::span<const HostSpan>(spans));
    CHECK(first_mismatch(ra, 21) == -1);
    CHECK(first_mismatch(rb, 22) == -1);
    // Empty ranges at offset 0, inside a non-empty destination (an empty destination overlaps
    // nothing) and at the source's very end, beside a non-empty range.
    std::vector<std::byte> host(2 * a.size(), kGuard);
    const std::vector<DownloadView> down{{0, nullptr, 0},
                                         {batch.offsets[1], host.data(), a.size()},
                                         {batch.offsets[1] + 10, host.data() + 10, 0},
                                         {n, nullptr, 0}};
    xfer.download(batch.buffer, std::span<const DownloadView>(down));
    CHECK(first_mismatch(std::span<const std::byte>(host.data(), a.size()), 21) == -1);
    CHECK(std::all_of(host.begin() + static_cast<std::ptrdiff_t>(a.size()), host.end(),
                      [](std::byte x) { return x == kGuard; }));
    // Every view empty: the call checks its arguments, reads nothing and writes nothing.
    std::fill(host.begin(), host.end(), kGuard);
    const std::vector<DownloadView> none{{0, nullptr, 0}, {n, host.data(), 0}, {7, host.data(), 0}};
    xfer.download(batch.buffer, std::span<const DownloadView>(none));
    CHECK(std::all_of(host.begin(), host.end(), [](std::byte x) { return x == kGuard; }));
    batch.buffer.release();
  }
  // Views that are all empty: a valid batch that owns a live buffer and copies nothing.
  const std::vector<HostView> empties{{nullptr, 0}, {&one, 0}, {nullptr, 0}};
  UploadBatch empty = xfer.upload(std::span<const HostView>(empties), owner);
  CHECK(empty.buffer.owner() == owner);
  CHECK(empty.buffer.size() >= 1);
  REQUIRE(empty.views.size() == empties.size());
  for (std::size_t i = 0; i < empties.size(); ++i) {
    CHECK(empty.offsets[i] == 0);
    CHECK(empty.views[i].size == 0);
  }
  empty.ready.wait();
  const std::vector<HostSpan> no_spans(empties.size());
  xfer.download(empty, std::span<const HostSpan>(no_spans));
  empty.buffer.release();
  // Empty views need no staging: they pass with staging disabled.
  TransferOptions unstaged;
  unstaged.staging = false;
  Transfer bare(dev, unstaged);
  UploadBatch bare_batch = bare.upload(std::span<const HostView>(empties), owner);
  bare.download(bare_batch, std::span<const HostSpan>(no_spans));
  // What stays refused: a null pointer with a size, an empty span of views.
  expect_invalid_naming([&] { (void)xfer.upload(std::span<const HostView>(std::vector<HostView>{{&one, 0}, {nullptr, 5}}), owner); },
                 {"view 1", "null data pointer", "5 bytes"}, "batch upload, null view with a size");
  expect_invalid_naming([&] { xfer.download(bare_batch.buffer, std::span<const DownloadView>{}); }, {"empty span"},
                 "batch download, no views");
  conformance::check_round_trip(dev, xfer);
}

CONFORMANCE_CASE("batch: packed uploads of uneven views, every byte checked, chunks and units cut through views") {
  // Staging packs many views into each chunk and cuts views at chunk and unit boundaries; one
  // DMA moves each chunk. A misplaced cut, a view packed at the wrong stream position or a
  // gap copied over would show as a wrong byte somewhere, so every byte of every destination
  // is compared: views, alignment padding and the gaps between upload_into's ranges (which
  // keep a guard). Rings of 4 KiB chunks (many laps, views spanning several chunks) and of
  // 1 MiB chunks cut into several units (cuts at 4 KiB stream positions inside views), with
  // packing by the caller alone and with helpers.
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  std::mt19937_64 rng(20261201);
  std::vector<std::vector<std::byte>> inputs;
  std::vector<HostView> views;
  for (int i = 0; i < 180; ++i) {
    std::uint64_t size = 0;
    switch (i % 6) {
      case 0: size = 0; break;                          // empty
      case 1: size = 1 + rng() % 255; break;            // shorter than the alignment
      case 2: size = 4096 + rng() % 3 - 1; break;       // about one 4 KiB chunk
      case 3: size = 1 + rng() % 40000; break;          // odd sizes across chunks
      case 4: size = (i % 36 == 4) ? MiB + 123 : 257; break;  // a few span 1 MiB chunks
      default: size = 16 * KiB; break;
    }
    inputs.emplace_back(size);
    fill_pattern(inputs.back(), 5000 + static_cast<std::uint64_t>(i));
    views.push_back({size ? inputs.back().data() : nullptr, size});
  }
  TransferOptions small_ring;
  small_ring.staging_chunk_bytes = 4 * KiB;
  small_ring.staging_chunks = 3;
  small_ring.staging_threads = 0;
  TransferOptions units = small_ring;
  units.staging_chunk_bytes = MiB;
  units.staging_chunks = 2;
  units.staging_threads = 3;
  TransferOptions helpers_small = small_ring;
  helpers_small.staging_threads = 2;
  for (const TransferOptions& topt : {small_ring, units, helpers_small}) {
    const std::uint64_t chunk_bytes = topt.staging_chunk_bytes;
    const int threads = topt.staging_threads;
    CAPTURE(chunk_bytes);
    CAPTURE(threads);
    Transfer xfer(dev, topt);

    // upload(batch): inputs packed at aligned offsets; padding is not the caller's, so only
    // the views are compared, each whole.
    UploadBatch batch = xfer.upload(std::span<const HostView>(views), owner);
    std::vector<std::byte> back(batch.buffer.size());
    xfer.download(batch.buffer, std::span<std::byte>(back));
    for (std::size_t i = 0; i < views.size(); ++i) {
      CAPTURE(i);
      const std::span<const std::byte> got(back.data() + batch.offsets[i], views[i].size);
      CHECK(first_mismatch(got, 5000 + i) == -1);
    }
    batch.buffer.release();

    // upload_into: the non-empty views in shuffled order at offsets with gaps of 0 to 300
    // bytes (adjacent ranges form one staged stream); every other byte keeps its guard.
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < views.size(); ++i) {
      if (views[i].size > 0) order.push_back(i);
    }
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<HostView> into;
    std::vector<std::uint64_t> at;
    std::uint64_t end = 0;
    for (std::size_t i : order) {
      end += (rng() % 3 == 0) ? 0 : rng() % 301;
      into.push_back(views[i]);
      at.push_back(end);
      end += views[i].size;
    }
    std::vector<std::byte> guard(end + 4096, kGuard);
    Upload dst = xfer.upload(std::span<const std::byte>(guard), owner);
    xfer.upload_into(std::span<const HostView>(into), dst.buffer, std::span<const std::uint64_t>(at)).wait();
    std::vector<std::byte> result(guard.size());
    xfer.download(dst.buffer, std::span<std::byte>(result));
    std::vector<bool> covered(result.size(), false);
    for (std::size_t j = 0; j < into.size(); ++j) {
      const std::size_t i = order[j];
      CAPTURE(i);
      const std::span<const std::byte> got(result.data() + at[j], into[j].size);
      CHECK(first_mismatch(got, 5000 + i) == -1);
      std::fill(covered.begin() + static_cast<std::ptrdiff_t>(at[j]),
                covered.begin() + static_cast<std::ptrdiff_t>(at[j] + into[j].size), true);
    }
    std::int64_t overwritten = -1;
    for (std::size_t k = 0; k < result.size() && overwritten < 0; ++k) {
      if (!covered[k] && result[k] != kGuard) overwritten = static_cast<std::int64_t>(k);
    }
    CHECK(overwritten == -1);

    // The same with overwrite_padding: gaps shorter than kPaddingLimit may change (they join
    // the staged stream); every view, every longer gap and the bytes past the last view keep
    // theirs. The layout above has gaps on both sides of the limit.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;  // destination order
    for (std::size_t j = 0; j < into.size(); ++j) ranges.emplace_back(at[j], at[j] + into[j].size);
    std::sort(ranges.begin(), ranges.end());
    std::vector<bool> may_change(result.size(), false);
    for (std::size_t j = 1; j < ranges.size(); ++j) {
      const std::uint64_t gap_begin = ranges[j - 1].second, gap_end = ranges[j].first;
      if (gap_end - gap_begin < UploadIntoOptions::kPaddingLimit) {
        std::fill(may_change.begin() + static_cast<std::ptrdiff_t>(gap_begin),
                  may_change.begin() + static_cast<std::ptrdiff_t>(gap_end), true);
      }
    }
    Upload padded = xfer.upload(std::span<const std::byte>(guard), owner);
    xfer.upload_into(std::span<const HostView>(into), padded.buffer, std::span<const std::uint64_t>(at),
                     {.overwrite_padding = true})
        .wait();
    xfer.download(padded.buffer, std::span<std::byte>(result));
    for (std::size_t j = 0; j < into.size(); ++j) {
      const std::size_t i = order[j];
      CAPTURE(i);
      const std::span<const std::byte> got(result.data() + at[j], into[j].size);
      CHECK_MESSAGE(first_mismatch(got, 5000 + i) == -1, "view " << i << " with overwrite_padding");
    }
    std::int64_t kept_broken = -1;
    for (std::size_t k = 0; k < result.size() && kept_broken < 0; ++k) {
      if (!covered[k] && !may_change[k] && result[k] != kGuard) kept_broken = static_cast<std::int64_t>(k);
    }
    CHECK_MESSAGE(kept_broken == -1, "overwrite_padding changed a byte outside the padding");
    padded.buffer.release();
    dst.buffer.release();
  }
}
