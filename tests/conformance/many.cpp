// SPDX-License-Identifier: MIT
// Many-buffer copies: Transfer::download of several device buffers into one HostBuffer and
// Transfer::upload_into of one HostBuffer's ranges into several buffers. Every byte and
// every guard byte, the ordering after and before owner compute with one completion point,
// and every bad input (named by index, nothing enqueued).
#include <algorithm>
#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "conformance.hpp"

using namespace ferry;
using conformance::expect_error;
using conformance::expect_invalid_naming;
using conformance::fill_pattern;
using conformance::first_mismatch;

namespace {

constexpr std::uint64_t KiB = 1024;
constexpr std::byte kGuard{0x5A};


/// `count` device buffers of random sizes owned by `owner`, buffer i holding pattern seed + i.
std::vector<DeviceBuffer> patterned_buffers(Device& dev, Transfer& xfer, const Queue& owner, std::mt19937_64& rng,
                                            std::size_t count, std::uint64_t seed) {
  std::vector<DeviceBuffer> out;
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t n = 1 + rng() % (96 * KiB);
    HostBuffer h = dev.host_pool().allocate(n);
    fill_pattern(h.span(), seed + i);
    DeviceBuffer b = dev.pool().allocate(n, owner);
    xfer.upload_into(h, b);
    out.push_back(std::move(b));
  }
  return out;
}

/// Host offsets for `buffers` in one arena, in a shuffled order with guard gaps of 1..300
/// bytes; returns the arena size.
std::uint64_t scattered_offsets(const std::vector<DeviceBuffer>& buffers, std::mt19937_64& rng,
                                std::vector<std::uint64_t>& offsets) {
  std::vector<std::size_t> order(buffers.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  offsets.assign(buffers.size(), 0);
  std::uint64_t at = 0;
  for (std::size_t i : order) {
    at += 1 + rng() % 300;
    offsets[i] = at;
    at += buffers[i].size();
  }
  return at + 1 + rng() % 300;
}

/// A queue of its own for a case's observer, or nothing after a visible skip.
std::optional<Queue> observer_queue(Device& dev, QueueRole role) {
  try {
    return dev.create_queue(role, "observer");
  } catch (const Error& e) {
    if (e.code() != ErrorCode::unsupported) throw;
    MESSAGE("not run here: no queue left for the observer (" << e.message() << ")");
    return std::nullopt;
  }
}

/// The end of a gated several-destination upload `up` into `dst` (sources patterned `seed`
/// and `seed + 1`): `seen`, a download of destination 0 into `back0` on `look`, completes while
/// the gate is closed, `up` does not; then the gate opens and both destinations hold their
/// bytes.
void check_first_before_gate(Transfer& look, TimelineSemaphore& gate, const TimelinePoint& up,
                             const TimelinePoint& seen, const HostBuffer& back0, const std::vector<DeviceBuffer>& dst,
                             std::uint64_t seed, Device& dev) {
  bool early = false;
  try {
    seen.wait(std::chrono::seconds(10));
    early = true;
  } catch (const Error& e) {
    if (e.code() != ErrorCode::timeout) throw;
  }
  CHECK_MESSAGE(early, "the copy into destination 0 waited for destination 1's previous use");
  CHECK_FALSE(up.reached());  // destination 1's copy still waits for the gate
  gate.signal(1);
  up.wait();
  seen.wait();
  CHECK(first_mismatch(back0.span(), seed) == -1);
  HostBuffer back1 = dev.host_pool().allocate(dst[1].size());
  look.download(dst[1], back1).wait();
  CHECK(first_mismatch(back1.span(), seed + 1) == -1);
}

}  // namespace

CONFORMANCE_CASE("many: buffers down into one HostBuffer and back up, every byte, guards kept") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  std::mt19937_64 rng(11);
  for (std::size_t count : {std::size_t{1}, std::size_t{2}, std::size_t{conformance::small() ? 23u : 67u}}) {
    CAPTURE(count);
    std::vector<DeviceBuffer> src = patterned_buffers(dev, xfer, owner, rng, count, 1000);
    std::vector<std::uint64_t> offsets;
    const std::uint64_t arena = scattered_offsets(src, rng, offsets);
    HostBuffer host = dev.host_pool().allocate(arena);
    std::fill(host.span().begin(), host.span().end(), kGuard);
    const TimelinePoint done = xfer.download(std::span<const DeviceBuffer>(src), host, offsets);
    done.wait();
    std::vector<bool> covered(arena, false);
    int bad = 0;
    for (std::size_t i = 0; i < count; ++i) {
      bad += first_mismatch(host.span().subspan(offsets[i], src[i].size()), 1000 + i) != -1;
      std::fill(covered.begin() + static_cast<std::ptrdiff_t>(offsets[i]),
                covered.begin() + static_cast<std::ptrdiff_t>(offsets[i] + src[i].size()), true);
    }
    CHECK_MESSAGE(bad == 0, bad << " of " << count << " buffers came down wrong");
    std::int64_t stray = -1;
    for (std::uint64_t i = 0; i < arena; ++i) {
      if (!covered[i] && host.span()[i] != kGuard) stray = static_cast<std::int64_t>(i);
    }
    CHECK_MESSAGE(stray == -1, "the download wrote outside its ranges at byte " << stray);

    // Back up into fresh buffers of the same sizes, then each one down alone.
    std::vector<DeviceBuffer> back;
    for (const DeviceBuffer& b : src) back.push_back(dev.pool().allocate(b.size(), owner));
    const TimelinePoint up = xfer.upload_into(host, offsets, std::span<const DeviceBuffer>(back));
    CHECK_FALSE(up.empty());
    bad = 0;
    for (std::size_t i = 0; i < count; ++i) {
      HostBuffer one = dev.host_pool().allocate(back[i].size());
      xfer.download(back[i], one).wait();
      bad += first_mismatch(one.span(), 1000 + i) != -1;
    }
    CHECK_MESSAGE(bad == 0, bad << " of " << count << " buffers came back up wrong");
    for (DeviceBuffer& b : src) b.release();
    for (DeviceBuffer& b : back) b.release();
  }
  conformance::check_round_trip(dev, xfer);
}

CONFORMANCE_CASE("many: one call follows each owner's compute and orders the owners after it") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  std::mt19937_64 rng(5);
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    const std::size_t count = 9;
    std::vector<DeviceBuffer> in = patterned_buffers(dev, xfer, owner, rng, count, 2000 + 100 * round);
    // Compute writes in + 1 into `out`, enough passes that a copy not ordered after it would
    // read stale bytes; the many-buffer download must follow it.
    std::vector<DeviceBuffer> out;
    for (std::size_t i = 0; i < count; ++i) {
      out.push_back(dev.pool().allocate(in[i].size(), owner));
      run_synthetic_compute(owner, in[i], out[i], 20);
    }
    std::vector<std::uint64_t> offsets;
    HostBuffer host = dev.host_pool().allocate(scattered_offsets(out, rng, offsets));
    xfer.download(std::span<const DeviceBuffer>(out), host, offsets).wait();
    int bad = 0;
    for (std::size_t i = 0; i < count; ++i) {
      bad += first_mismatch(host.span().subspan(offsets[i], out[i].size()), 2000 + 100 * round + i, 1) != -1;
    }
    CHECK_MESSAGE(bad == 0, bad << " of " << count << " buffers missed the compute's result");

    // Up into `in` (owner_waits), held back by a gate the host opens only after the owner's
    // compute is enqueued: that compute reads what the one call wrote only if the owner
    // waits for the call.
    for (std::size_t i = 0; i < count; ++i) {
      fill_pattern(host.span().subspan(offsets[i], out[i].size()), 7000 + i);
    }
    TimelineSemaphore gate = dev.create_semaphore(0);
    const TimelinePoint up =
        xfer.upload_into(host, offsets, std::span<const DeviceBuffer>(in), {.wait = {gate.at(1)}});
    // The owner waits for the call: its work enqueued now cannot complete while the gate is shut.
    const TimelinePoint owner_after = owner.mark();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK_FALSE(owner_after.reached());
    for (std::size_t i = 0; i < count; ++i) run_synthetic_compute(owner, in[i], out[i], 1);
    gate.signal(1);
    owner_after.wait();
    CHECK(up.reached());
    bad = 0;
    for (std::size_t i = 0; i < count; ++i) {
      HostBuffer one = dev.host_pool().allocate(out[i].size());
      xfer.download(out[i], one).wait();
      bad += first_mismatch(one.span(), 7000 + i, 1) != -1;
    }
    CHECK_MESSAGE(bad == 0, bad << " of " << count << " buffers: the owner's compute ran before the upload");
    for (DeviceBuffer& b : in) b.release();  // stream-ordered after the calls' reads and writes
    for (DeviceBuffer& b : out) b.release();
  }
}

CONFORMANCE_CASE("many: bad input of many-buffer downloads and uploads") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  std::mt19937_64 rng(3);
  std::vector<DeviceBuffer> b = patterned_buffers(dev, xfer, owner, rng, 3, 40);
  const std::uint64_t n = b[0].size() + b[1].size() + b[2].size();
  HostBuffer host = dev.host_pool().allocate(n + 64);
  std::fill(host.span().begin(), host.span().end(), kGuard);
  const std::vector<std::uint64_t> fine{0, b[0].size(), b[0].size() + b[1].size()};
  using Offsets = std::vector<std::uint64_t>;
  auto down = [&](const std::vector<DeviceBuffer>& s, const Offsets& o) {
    (void)xfer.download(std::span<const DeviceBuffer>(s), host, o);
  };
  auto up = [&](const std::vector<DeviceBuffer>& d, const Offsets& o, UploadIntoOptions opt = {}) {
    (void)xfer.upload_into(host, o, std::span<const DeviceBuffer>(d), std::move(opt));
  };

  expect_invalid_naming([&] { down({}, {}); }, {"empty span of sources"}, "no sources");
  expect_invalid_naming([&] { up({}, {}); }, {"empty span of destinations"}, "no destinations");
  expect_invalid_naming([&] { down(b, {0, 1}); }, {"2 offsets for 3 sources"}, "count mismatch (download)");
  expect_invalid_naming([&] { up(b, {0}); }, {"1 offsets for 3 destinations"}, "count mismatch (upload)");
  {
    // DeviceBuffer is move-only: a list is built by moving a buffer in and out of it.
    std::vector<DeviceBuffer> holes(2);
    holes[0] = std::move(b[0]);
    expect_invalid_naming([&] { down(holes, {0, 100000}); }, {"source 1", "null"}, "null source");
    b[0] = std::move(holes[0]);
  }
  expect_invalid_naming([&] { down(b, {0, b[0].size(), n}); }, {"source 2", "exceeds the host buffer"}, "range past the end");
  expect_invalid_naming([&] { down(b, {0, b[0].size() - 1, b[0].size() + b[1].size()}); },
                 {"sources 0 and 1", "overlap"}, "overlapping destinations");
  expect_invalid_naming([&] { up(b, {0, ~std::uint64_t{0}, 0}); }, {"destination 1", "exceeds the host buffer"},
                 "source offset past the end");
  {
    Device other = conformance::open_device();
    Queue other_owner = other.queue(QueueRole::compute);
    std::vector<DeviceBuffer> mixed;
    mixed.push_back(std::move(b[0]));
    mixed.push_back(other.pool().allocate(64, other_owner));
    expect_invalid_naming([&] { down(mixed, {0, 100000}); }, {"source 1", "another device"}, "another device's buffer");
    mixed[1].release();
    b[0] = std::move(mixed[0]);
  }
  // Nothing was written by the failed calls.
  CHECK(std::all_of(host.span().begin(), host.span().end(), [](std::byte x) { return x == kGuard; }));
  {
    std::vector<DeviceBuffer> with_gone;
    with_gone.push_back(std::move(b[0]));
    with_gone.push_back(dev.pool().allocate(100, owner));
    with_gone[1].release();
    expect_invalid_naming([&] { down(with_gone, {0, 100000}); }, {"source 1", "released"},
                   "many-buffer download with a released source");
    b[0] = std::move(with_gone[0]);
  }
  // The buffers are unharmed: the good call works.
  down(b, fine);
  xfer.synchronize();
  for (int i = 0; i < 3; ++i) CHECK(first_mismatch(host.span().subspan(fine[i], b[i].size()), 40 + i) == -1);
  for (DeviceBuffer& x : b) x.release();
  conformance::check_round_trip(dev, xfer);
}

CONFORMANCE_CASE("many: several pinned sources, each whole into its own destination, tails kept") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  std::mt19937_64 rng(17);
  for (std::size_t count : {std::size_t{1}, std::size_t{2}, std::size_t{conformance::small() ? 23u : 67u}}) {
    CAPTURE(count);
    // Destinations hold a guard pattern; about half are larger than their source, so that the
    // copy must keep their tails.
    std::vector<HostBuffer> sources;
    std::vector<const HostBuffer*> pointers;
    std::vector<DeviceBuffer> dst;
    std::vector<std::uint64_t> tails;
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint64_t n = 1 + rng() % (96 * KiB);
      const std::uint64_t tail = rng() % 2 == 0 ? 0 : 1 + rng() % 300;
      sources.push_back(dev.host_pool().allocate(n));
      fill_pattern(sources.back().span(), 5000 + i);
      HostBuffer guard = dev.host_pool().allocate(n + tail);
      std::fill(guard.span().begin(), guard.span().end(), kGuard);
      dst.push_back(dev.pool().allocate(n + tail, owner));
      xfer.upload_into(guard, dst.back());
      tails.push_back(tail);
    }
    for (const HostBuffer& h : sources) pointers.push_back(&h);
    const TimelinePoint up = xfer.upload_into(std::span<const HostBuffer* const>(pointers),
                                              std::span<const DeviceBuffer>(dst), {.owner_waits = true});
    CHECK_FALSE(up.empty());
    int bad = 0;
    int stray = 0;
    for (std::size_t i = 0; i < count; ++i) {
      HostBuffer back = dev.host_pool().allocate(dst[i].size());
      xfer.download(dst[i], back).wait();
      const std::uint64_t n = sources[i].size();
      bad += first_mismatch(back.span().first(n), 5000 + i) != -1;
      stray += !std::all_of(back.span().begin() + static_cast<std::ptrdiff_t>(n), back.span().end(),
                            [](std::byte x) { return x == kGuard; });
    }
    CHECK_MESSAGE(bad == 0, bad << " of " << count << " destinations did not get their source");
    CHECK_MESSAGE(stray == 0, stray << " of " << count << " destinations lost bytes past their source");
    for (DeviceBuffer& b : dst) b.release();
  }
  conformance::check_round_trip(dev, xfer);
}

CONFORMANCE_CASE("many: bad input of uploads from several sources names the element, copies nothing") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  std::vector<HostBuffer> src;
  std::vector<DeviceBuffer> dst;
  for (std::size_t i = 0; i < 3; ++i) {
    src.push_back(dev.host_pool().allocate(100));
    fill_pattern(src.back().span(), 60 + i);
    HostBuffer guard = dev.host_pool().allocate(128);
    std::fill(guard.span().begin(), guard.span().end(), kGuard);
    dst.push_back(dev.pool().allocate(128, owner));
    xfer.upload_into(guard, dst.back());
  }
  using Ptrs = std::vector<const HostBuffer*>;
  const Ptrs fine{&src[0], &src[1], &src[2]};
  auto up = [&](const Ptrs& s, const std::vector<DeviceBuffer>& d) {
    (void)xfer.upload_into(std::span<const HostBuffer* const>(s), std::span<const DeviceBuffer>(d));
  };
  expect_invalid_naming([&] { up({}, {}); }, {"empty span of destinations"}, "no destinations");
  expect_invalid_naming([&] { up({&src[0], &src[1]}, dst); }, {"2 sources for 3 destinations"}, "count mismatch");
  expect_invalid_naming([&] { up({&src[0], nullptr, &src[2]}, dst); }, {"source 1", "null"}, "null source");
  HostBuffer moved_from = dev.host_pool().allocate(10);
  HostBuffer taker = std::move(moved_from);
  expect_invalid_naming([&] { up({&src[0], &src[1], &moved_from}, dst); }, {"source 2", "moved-from"},
                        "moved-from source");
  HostBuffer big = dev.host_pool().allocate(129);
  expect_invalid_naming([&] { up({&src[0], &big, &src[2]}, dst); }, {"source 1", "larger than destination 1"},
                        "source larger than its destination");
  {
    Device other = conformance::open_device();
    HostBuffer foreign = other.host_pool().allocate(10);
    expect_invalid_naming([&] { up({&foreign, &src[1], &src[2]}, dst); }, {"source 0", "another device"},
                          "another device's source");
  }
  // Nothing was written by the failed calls.
  for (std::size_t i = 0; i < 3; ++i) {
    HostBuffer back = dev.host_pool().allocate(128);
    xfer.download(dst[i], back).wait();
    CHECK(std::all_of(back.span().begin(), back.span().end(), [](std::byte x) { return x == kGuard; }));
  }
  // The good call works.
  up(fine, dst);
  for (std::size_t i = 0; i < 3; ++i) {
    HostBuffer back = dev.host_pool().allocate(128);
    xfer.download(dst[i], back).wait();
    CHECK(first_mismatch(back.span().first(100), 60 + i) == -1);
  }
  for (DeviceBuffer& b : dst) b.release();
  conformance::check_round_trip(dev, xfer);
}

CONFORMANCE_CASE("many: uploads into several destinations fill each as it comes free, not after a later one") {
  // Destination 1's owner is held back by a gate; destination 0 is free. Both forms of the
  // several-destination upload_into must copy into destination 0 at once, and make its owner
  // wait for that copy alone (`owner_waits`): a download of it on that owner completes while
  // the gate is closed. Destination 1 is filled once the gate opens.
  Device dev = conformance::open_device();
  Queue held = dev.queue(QueueRole::compute);
  if (held == dev.queue(QueueRole::transfer)) {
    MESSAGE("not run here: the compute queue is the transfer queue (a one-queue device)");
    return;
  }
  const std::optional<Queue> observer = observer_queue(dev, QueueRole::compute);
  if (!observer) return;
  Transfer xfer(dev);
  Transfer look(dev, {.executor = *observer});
  constexpr std::uint64_t n = 48 * KiB;
  for (const bool ranges : {false, true}) {
    CAPTURE(ranges);
    HostBuffer one = dev.host_pool().allocate(2 * n);
    fill_pattern(one.span().first(n), 70);
    fill_pattern(one.span().subspan(n), 71);
    HostBuffer s0 = dev.host_pool().allocate(n);
    HostBuffer s1 = dev.host_pool().allocate(n);
    fill_pattern(s0.span(), 70);
    fill_pattern(s1.span(), 71);
    std::vector<DeviceBuffer> dst;
    dst.push_back(dev.pool().allocate(n, *observer));
    dst.push_back(dev.pool().allocate(n, held));
    TimelineSemaphore gate = dev.create_semaphore(0);
    held.wait(gate.at(1));
    const std::vector<const HostBuffer*> sources{&s0, &s1};
    const std::vector<std::uint64_t> offsets{0, n};
    const TimelinePoint up =
        ranges ? xfer.upload_into(one, std::span<const std::uint64_t>(offsets), std::span<const DeviceBuffer>(dst))
               : xfer.upload_into(std::span<const HostBuffer* const>(sources), std::span<const DeviceBuffer>(dst));
    HostBuffer back0 = dev.host_pool().allocate(n);
    const TimelinePoint seen = look.download(dst[0], back0);
    check_first_before_gate(look, gate, up, seen, back0, dst, 70, dev);
    for (DeviceBuffer& b : dst) b.release();
  }
  xfer.synchronize();
  look.synchronize();
}

CONFORMANCE_CASE("many: adopted destinations unused since their release are filled as each is ready") {
  // The in-place pipeline's shape: engine memory adopted with the point of its release
  // (`ready_after`), filled with `destination_unused` and no owner wait. Destination 1's point
  // is a gate; destination 0's copy must not wait for it.
  Device dev = conformance::open_device();
  auto m0 = conformance::allocate_foreign(dev, 48 * KiB);
  auto m1 = conformance::allocate_foreign(dev, 48 * KiB);
  if (!m0 || !m1) return;
  const std::optional<Queue> observer = observer_queue(dev, QueueRole::transfer);
  if (!observer) return;
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  Transfer look(dev, {.executor = *observer});
  constexpr std::uint64_t n = 48 * KiB;
  HostBuffer s0 = dev.host_pool().allocate(n);
  HostBuffer s1 = dev.host_pool().allocate(n);
  fill_pattern(s0.span(), 80);
  fill_pattern(s1.span(), 81);
  TimelineSemaphore gate = dev.create_semaphore(0);
  std::vector<DeviceBuffer> dst;
  dst.push_back(dev.adopt_memory(m0->native, n, owner));
  dst.push_back(dev.adopt_memory(m1->native, n, owner, {.ready_after = gate.at(1)}));
  const std::vector<const HostBuffer*> sources{&s0, &s1};
  const TimelinePoint up = xfer.upload_into(std::span<const HostBuffer* const>(sources),
                                            std::span<const DeviceBuffer>(dst),
                                            {.owner_waits = false, .destination_unused = true});
  HostBuffer back0 = dev.host_pool().allocate(n);
  const TimelinePoint seen = look.download(dst[0], back0);
  check_first_before_gate(look, gate, up, seen, back0, dst, 80, dev);
  for (DeviceBuffer& b : dst) b.release().wait();
  xfer.synchronize();
  look.synchronize();
}
