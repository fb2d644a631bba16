// SPDX-License-Identifier: MIT
// Priorities (transfer.hpp, "Priorities"): an urgent copy overtakes a bulk copy in flight,
// and both classes keep every other ordering rule. Run with latency injection
// (conformance-host-latency), a missing wait here turns into wrong bytes.
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "conformance.hpp"

using namespace ferry;
using conformance::fill_pattern;
using conformance::first_mismatch;

namespace {
constexpr std::uint64_t KiB = 1024, MiB = 1024 * KiB;

/// A bulk copy long enough that an urgent copy enqueued after it overtakes it: many pieces of
/// 1 MiB on the host backend (its copy engine model), 256 MiB on a GPU, whose link moves a
/// piece in tens of microseconds. Small runs (FERRY_TEST_SMALL, as under a sanitizer, whose
/// instrumented yield kernels make each piece slower) take an eighth.
std::uint64_t long_bulk_bytes(const Device& dev) {
  if (dev.capabilities().is_gpu) return conformance::small() ? 32 * MiB : 256 * MiB;
  return conformance::small() ? 32 * MiB : 64 * MiB;
}

/// Whether urgent copies can overtake bulk ones here; reports why not (a visible skip).
bool priorities_supported(const Device& dev, Transfer& xfer) {
  if (!dev.capabilities().copy_priorities) {
    MESSAGE("not supported here: the backend has no yield point between copies (Capabilities::copy_priorities), "
            "so a copy engine finishes a bulk copy before it serves an urgent one");
    return false;
  }
  if (xfer.urgent_executor() == xfer.executor()) {
    MESSAGE("not supported here: the device has no queue left for urgent copies, which share the bulk executor");
    return false;
  }
  return true;
}

TransferOptions piece_options() {
  TransferOptions o;
  o.bulk_piece_bytes = 1 * MiB;
  return o;
}

/// An urgent upload submitted while a long bulk upload runs completes first, three rounds,
/// and both arrive intact. `required`: the contract promises the overtaking here; else the
/// outcome is reported.
void check_urgent_overtakes(Device& dev, Transfer& xfer, bool required) {
  Queue owner = dev.queue(QueueRole::compute);
  const std::uint64_t big = long_bulk_bytes(dev), small = 64 * KiB;
  HostBuffer first_src = dev.host_pool().allocate(small);
  HostBuffer bulk_src = dev.host_pool().allocate(big);
  HostBuffer urgent_src = dev.host_pool().allocate(small);
  HostBuffer back = dev.host_pool().allocate(big);
  std::vector<DeviceBuffer> keep;  // fresh blocks: nothing for the copies to wait for
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    fill_pattern(bulk_src.span(), 10 + static_cast<std::uint64_t>(round));
    fill_pattern(urgent_src.span(), 20 + static_cast<std::uint64_t>(round));
    // The bulk copy is under way when the urgent one is submitted: `first` and `bulk` are
    // queued behind a gate, and `first` is seen complete before the urgent call.
    TimelineSemaphore gate = dev.create_semaphore(0);
    xfer.executor().wait(gate.at(1));
    Upload first = xfer.upload(first_src, owner, {.owner_waits = false});
    Upload bulk = xfer.upload(bulk_src, owner, {.owner_waits = false});
    gate.signal(1);
    first.ready.wait();
    Upload urgent = xfer.upload(urgent_src, owner, {.owner_waits = false, .priority = Priority::urgent});
    urgent.ready.wait();
    const bool overtook = !bulk.ready.reached();
    if (required) {
      CHECK_MESSAGE(overtook,
                    "the urgent copy completed only after the " << big << "-byte bulk copy enqueued before it");
    } else {
      MESSAGE("with no bulk piece given, the urgent copy " << (overtook ? "overtook" : "did not overtake") << " the "
                                                           << big << "-byte bulk copy (not promised on this backend)");
    }
    TimelinePoint b = xfer.download(bulk.buffer, back);
    b.wait();
    CHECK(first_mismatch(back.span(), 10 + static_cast<std::uint64_t>(round)) == -1);
    TimelinePoint u = xfer.download(urgent.buffer, back, 0, {.priority = Priority::urgent});
    u.wait();
    CHECK(first_mismatch(back.span().first(small), 20 + static_cast<std::uint64_t>(round)) == -1);
    keep.push_back(std::move(first.buffer));
    keep.push_back(std::move(bulk.buffer));
    keep.push_back(std::move(urgent.buffer));
  }
  for (DeviceBuffer& b : keep) b.release();
  xfer.synchronize();
}
}  // namespace

CONFORMANCE_CASE("priority: an urgent copy submitted during a long bulk copy completes first") {
  Device dev = conformance::open_device();
  Transfer xfer(dev, piece_options());
  if (!priorities_supported(dev, xfer)) return;
  check_urgent_overtakes(dev, xfer, true);
}

CONFORMANCE_CASE("priority: with no piece given, an urgent upload overtakes where no cut is needed") {
  // The host backend cuts by its derived piece; CUDA copies a small urgent upload from
  // page-locked memory with the SMs, off the copy engine. Elsewhere the engine may serve the
  // urgent copy only after the uncut bulk copy, which is reported, not required.
  Device dev = conformance::open_device();
  Transfer xfer(dev);
  if (!priorities_supported(dev, xfer)) return;
  const Backend b = dev.backend();
  check_urgent_overtakes(dev, xfer, b == Backend::host || b == Backend::cuda);
}

CONFORMANCE_CASE("priority: urgent uploads of every size and alignment arrive intact, their neighbours untouched") {
  // Urgent uploads take their own path on some backends (CUDA: the SMs, in 16-byte words
  // where both ends and the size allow, else bytes, up to 1 MiB; the copy engine past it).
  // Every source kind, odd sizes and offsets on both sides, each checked against a model
  // of the destination, including the bytes just outside each range.
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  const std::uint64_t span = 3 * MiB;
  HostBuffer pinned = dev.host_pool().allocate(2 * MiB + 64);
  fill_pattern(pinned.span(), 61);
  std::vector<std::byte> model(span);
  fill_pattern(model, 60);
  DeviceBuffer dst = dev.pool().allocate(span, owner);
  {
    HostBuffer init = dev.host_pool().allocate(span);
    std::memcpy(init.data(), model.data(), span);
    xfer.upload_into(init, dst).wait();
  }
  std::vector<std::byte> pageable(2 * MiB + 64);
  fill_pattern(pageable, 62);
  // User memory registered with the device (page-locked by ferry), where the backend registers.
  std::vector<std::byte> user(2 * MiB + 8192);
  std::byte* user_base = user.data() + (4096 - reinterpret_cast<std::uintptr_t>(user.data()) % 4096) % 4096;
  HostBuffer registered{};
  if (dev.capabilities().host_memory_registration) {
    registered = dev.host_pool().register_memory(std::span<std::byte>(user_base, 2 * MiB + 4096));
    fill_pattern(registered.span(), 63);
  }
  struct Copy {
    std::uint64_t bytes, from, to;
  };
  const std::vector<Copy> copies{{1, 0, 0},         {3, 1, 5},           {15, 0, 16},        {16, 0, 32},
                                 {16, 16, 48},      {17, 3, 100},        {255, 7, 1000},     {4096, 0, 4096},
                                 {4099, 1, 8193},   {64 * KiB, 16, 20000}, {64 * KiB + 5, 2, 90001},
                                 {MiB, 0, MiB},     {MiB, 8, MiB + 3},   {MiB + 16, 16, 2 * MiB - 64}};
  for (std::size_t i = 0; i < copies.size(); ++i) {
    const Copy& c = copies[i];
    CAPTURE(i);
    REQUIRE(c.to + c.bytes <= span);
    const bool staged = i % 3 == 2;  // a pageable source, through the urgent lane's staging ring
    const bool user_memory = i % 3 == 1 && registered.size() > 0;
    UploadIntoOptions o;
    o.priority = Priority::urgent;
    if (user_memory) {
      xfer.upload_into(registered, c.from, c.bytes, dst, c.to, o);
      std::memcpy(model.data() + c.to, registered.data() + c.from, c.bytes);
    } else if (staged) {
      const HostView v{pageable.data() + c.from, c.bytes};
      const std::uint64_t at = c.to;
      xfer.upload_into(std::span<const HostView>(&v, 1), dst, std::span<const std::uint64_t>(&at, 1), o);
      std::memcpy(model.data() + c.to, pageable.data() + c.from, c.bytes);
    } else {
      xfer.upload_into(pinned, c.from, c.bytes, dst, c.to, o);
      std::memcpy(model.data() + c.to, pinned.data() + c.from, c.bytes);
    }
  }
  HostBuffer back = dev.host_pool().allocate(span);
  xfer.download(dst, back, 0, {.priority = Priority::urgent}).wait();
  const auto got = back.span();
  std::int64_t first_bad = -1;
  for (std::uint64_t k = 0; k < span && first_bad < 0; ++k) {
    if (got[k] != model[k]) first_bad = static_cast<std::int64_t>(k);
  }
  CHECK_MESSAGE(first_bad == -1, "byte " << first_bad << " of the destination differs from the model");
  dst.release();
  xfer.synchronize();
}

CONFORMANCE_CASE("priority: an urgent copy that waits for a bulk copy's point runs after it") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev, piece_options());
  const std::uint64_t n = conformance::small() ? 8 * MiB + 3 : 24 * MiB + 3;
  HostBuffer src = dev.host_pool().allocate(n);
  HostBuffer relay = dev.host_pool().allocate(n);
  HostBuffer back = dev.host_pool().allocate(n);
  DeviceBuffer second = dev.pool().allocate(n, owner);
  for (int round = 0; round < 4; ++round) {
    CAPTURE(round);
    const std::uint64_t seed = 30 + static_cast<std::uint64_t>(round);
    fill_pattern(src.span(), seed);
    std::memset(relay.data(), 0, relay.size());
    Upload first = xfer.upload(src, owner, {.owner_waits = false});
    // Bulk: the device's bytes come back into `relay`, a piece at a time.
    TimelinePoint relayed = xfer.download(first.buffer, relay);
    // Urgent, on another queue: it reads `relay` only after the bulk download wrote it all.
    UploadIntoOptions o;
    o.priority = Priority::urgent;
    o.wait = {relayed};
    TimelinePoint urgent = xfer.upload_into(relay, second, o);
    TimelinePoint d = xfer.download(second, back, 0, {.wait = {urgent}, .priority = Priority::urgent});
    d.wait();
    CHECK(relayed.reached());
    CHECK_MESSAGE(first_mismatch(back.span(), seed) == -1,
                  "the urgent copy read the relay before the bulk copy it waits for wrote it");
    first.buffer.release();
  }
  second.release();
  xfer.synchronize();
}

CONFORMANCE_CASE("priority: bulk copies that overwrite one region keep submission order") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev, piece_options());
  const std::uint64_t region = conformance::small() ? 3 * MiB + 5 : 6 * MiB + 5;
  const std::uint64_t shift = 512 * KiB + 1;  // copy k writes [k * shift, k * shift + region)
  constexpr int copies = 8;
  const std::uint64_t total = region + (copies - 1) * shift;
  // Copy k downloads device buffer k into one pinned host buffer: the copies touch no buffer
  // in common that ferry tracks, so only the order of the class keeps the later bytes on top.
  std::vector<DeviceBuffer> sources;
  {
    HostBuffer src = dev.host_pool().allocate(region);
    for (int k = 0; k < copies; ++k) {
      fill_pattern(src.span(), 50 + static_cast<std::uint64_t>(k));
      sources.push_back(xfer.upload(src, owner).buffer);
      xfer.synchronize();
    }
  }
  DeviceBuffer side = dev.pool().allocate(64 * KiB, owner);
  HostBuffer side_back = dev.host_pool().allocate(64 * KiB);
  HostBuffer dst = dev.host_pool().allocate(total);
  // The bytes as the copies leave them, in submission order, overlaps and all.
  std::vector<std::byte> expected(total, std::byte{0});
  for (int k = 0; k < copies; ++k) {
    HostBuffer src = dev.host_pool().allocate(region);
    fill_pattern(src.span(), 50 + static_cast<std::uint64_t>(k));
    std::memcpy(expected.data() + k * shift, src.data(), region);
  }
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    std::memset(dst.data(), 0, dst.size());
    for (int k = 0; k < copies; ++k) {
      (void)xfer.download(sources[static_cast<std::size_t>(k)], dst, k * shift);
      // Urgent copies between them: they must not reorder the bulk ones.
      (void)xfer.download(side, side_back, 0, {.priority = Priority::urgent});
    }
    xfer.synchronize();
    const int bad = std::memcmp(dst.data(), expected.data(), total);
    CHECK_MESSAGE(bad == 0, "overlapping bulk copies into one region left bytes out of submission order");
  }
  for (DeviceBuffer& b : sources) b.release();
  side.release();
  xfer.synchronize();
}

CONFORMANCE_CASE("priority: an urgent copy's owner wait and release point order the owner") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev, piece_options());
  if (!dev.capabilities().synthetic_compute) {
    MESSAGE("not supported here: no synthetic compute to read the upload on the owner");
    return;
  }
  // Above 10 MiB every request gets a segment of its own (pool.hpp): the second upload of a
  // round reuses the first one's block, released while the owner's compute still reads it.
  const std::uint64_t n = conformance::small() ? 12 * MiB : 24 * MiB;
  HostBuffer first = dev.host_pool().allocate(n);
  HostBuffer second = dev.host_pool().allocate(n);
  HostBuffer result = dev.host_pool().allocate(n);
  HostBuffer result2 = dev.host_pool().allocate(n);
  UploadOptions urgent;
  urgent.priority = Priority::urgent;
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    fill_pattern(first.span(), 60 + static_cast<std::uint64_t>(round));
    fill_pattern(second.span(), 70 + static_cast<std::uint64_t>(round));
    // owner_waits: the copy waits for a point nobody has signalled yet, so the owner's compute
    // enqueued after the call must wait for it on the device.
    TimelineSemaphore go = dev.create_semaphore(0);
    UploadOptions held = urgent;
    held.wait = {go.at(1)};
    Upload a = xfer.upload(first, owner, held);
    // The owner's own timeline, which ferry's buffer tracking does not order: with owner_waits
    // it passes the copy's point only once the copy, held by `go`, is complete.
    const TimelinePoint owner_after = owner.mark();
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    bool passed = false;
    while (!passed && std::chrono::steady_clock::now() < until) {
      passed = owner_after.reached();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK_MESSAGE(!passed, "the owner went past an urgent upload's point before the copy was complete");
    DeviceBuffer out = dev.pool().allocate(n, owner);
    conformance::Gate gate(dev, owner);  // the compute's free point stays pending until opened
    run_synthetic_compute(owner, a.buffer, out, 2);
    a.buffer.release();  // stream-ordered: the compute above still reads it
    go.signal(1);
    // The release point: this upload may take `a`'s block, and must then wait for the compute.
    Upload b = xfer.upload(second, owner, urgent);
    gate.open();
    TimelinePoint d1 = xfer.download(out, result);
    TimelinePoint d2 = xfer.download(b.buffer, result2, 0, {.priority = Priority::urgent});
    d1.wait();
    d2.wait();
    CHECK_MESSAGE(first_mismatch(result.span(), 60 + static_cast<std::uint64_t>(round), 1) == -1,
                  "the owner read the urgent upload before it was complete, or a later upload overwrote it "
                  "while the owner still read it");
    CHECK(first_mismatch(result2.span(), 70 + static_cast<std::uint64_t>(round)) == -1);
    b.buffer.release();
    out.release();
    owner.synchronize();
    xfer.synchronize();
    dev.pool().trim();
  }
}

CONFORMANCE_CASE("priority: urgent copies from another thread during bulk copies of the same buffer") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev, piece_options());
  const std::uint64_t n = conformance::small() ? 3 * MiB + 17 : 6 * MiB + 17;
  const int rounds = conformance::small() ? 12 : 30;
  DeviceBuffer shared = dev.pool().allocate(n, owner);
  const std::uint64_t at_zero = 0;
  // A staged upload of all of `shared` (a batch of one view at offset 0).
  auto fill_shared = [&](const std::vector<std::byte>& bytes) {
    const HostView view{bytes.data(), n};
    xfer.upload_into(std::span<const HostView>(&view, 1), shared, std::span<const std::uint64_t>(&at_zero, 1),
                     {.owner_waits = false});
  };
  fill_shared(std::vector<std::byte>(n, std::byte{0}));
  std::atomic<bool> done{false};
  std::atomic<int> torn{0}, wrong{0}, errors{0};
  // Bulk: staged uploads into `shared` (its bytes all one value per round), and pinned uploads.
  std::thread bulk([&] {
    try {
      std::vector<std::byte> fill(n);
      HostBuffer pinned = dev.host_pool().allocate(n);
      for (int k = 1; k <= rounds; ++k) {
        std::memset(fill.data(), k, n);
        fill_shared(fill);
        fill_pattern(pinned.span(), static_cast<std::uint64_t>(k));
        Upload up = xfer.upload(pinned, owner, {.owner_waits = false});
        std::vector<std::byte> back(n);
        xfer.download(up.buffer, back);
        if (first_mismatch(back, static_cast<std::uint64_t>(k)) != -1) wrong.fetch_add(1);
        up.buffer.release();
      }
    } catch (const std::exception& e) {
      errors.fetch_add(1);
      MESSAGE("bulk thread: " << e.what());
    }
    done.store(true);
  });
  // Urgent: downloads of `shared` while the bulk thread writes it. Calls of two threads have no
  // order between them, so a download sees one round's bytes, whole: never a mix of two.
  std::vector<std::byte> seen(n);
  HostBuffer small_src = dev.host_pool().allocate(4 * KiB);
  int downloads = 0;
  try {
    while (!done.load() || downloads == 0) {
      xfer.download(shared, seen, {.priority = Priority::urgent});
      ++downloads;
      const std::byte v = seen[0];
      for (std::uint64_t i = 1; i < n; ++i) {
        if (seen[i] != v) {
          torn.fetch_add(1);
          break;
        }
      }
      fill_pattern(small_src.span(), 90 + static_cast<std::uint64_t>(downloads));
      Upload up = xfer.upload(small_src, owner, {.owner_waits = false, .priority = Priority::urgent});
      std::vector<std::byte> back(4 * KiB);
      xfer.download(up.buffer, back, {.priority = Priority::urgent});
      if (first_mismatch(back, 90 + static_cast<std::uint64_t>(downloads)) != -1) wrong.fetch_add(1);
      up.buffer.release();
    }
  } catch (const std::exception& e) {
    errors.fetch_add(1);
    MESSAGE("urgent thread: " << e.what());
  }
  bulk.join();
  MESSAGE(downloads << " urgent downloads during " << rounds << " bulk rounds");
  CHECK(errors.load() == 0);
  CHECK_MESSAGE(torn.load() == 0, "an urgent download saw a buffer half written by a bulk copy");
  CHECK(wrong.load() == 0);
  shared.release();
  xfer.synchronize();
}

CONFORMANCE_CASE("priority: bad input names the field and the caller's line") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  HostBuffer src = dev.host_pool().allocate(4096);
  DeviceBuffer dst = dev.pool().allocate(4096, owner);
  const auto bad = static_cast<Priority>(7);
  auto check = [](auto&& fn, std::uint_least32_t line, const char* field) {
    try {
      fn();
      FAIL(field << ": nothing thrown");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::invalid_argument);
      const std::string text = e.what();
      CHECK_MESSAGE(text.find(field) != std::string::npos, text);
      if (conformance::kCallerLocations) {
        CHECK_MESSAGE(e.where().line() == line, text);
        CHECK_MESSAGE(std::string(e.where().file_name()).find("priority.cpp") != std::string::npos, text);
      }
    }
  };
  // clang-format off
  std::uint_least32_t l1 = __LINE__; check([&] { (void)xfer.upload(src, owner, {.priority = bad}); }, l1, "UploadOptions::priority");
  std::uint_least32_t l2 = __LINE__; check([&] { (void)xfer.upload_into(src, dst, {.priority = bad}); }, l2, "UploadIntoOptions::priority");
  std::uint_least32_t l3 = __LINE__; check([&] { (void)xfer.download(dst, src, 0, {.priority = bad}); }, l3, "CallOptions::priority");
  std::vector<std::byte> host(4096);
  std::uint_least32_t l4 = __LINE__; check([&] { xfer.download(dst, host, {.priority = bad}); }, l4, "CallOptions::priority");
  std::uint_least32_t l5 = __LINE__; check([&] { (void)Transfer(dev, {.bulk_piece_bytes = 4096}); }, l5, "bulk_piece_bytes");
  // clang-format on
  // Nothing was enqueued by the refused calls: the Transfer still works, in both classes.
  fill_pattern(src.span(), 7);
  xfer.upload_into(src, dst, {.owner_waits = false, .priority = Priority::urgent});
  xfer.download(dst, host, {.priority = Priority::bulk});
  CHECK(first_mismatch(host, 7) == -1);
  CHECK(to_string(Priority::urgent) == "urgent");
  CHECK(to_string(Priority::bulk) == "bulk");
  dst.release();
}

CONFORMANCE_CASE("priority: the bulk piece is the derived rule's or the one given") {
  Device dev = conformance::open_device();
  Transfer given(dev, piece_options());
  Transfer derived(dev);
  if (!dev.capabilities().copy_priorities) {
    CHECK(derived.bulk_piece_bytes() == 0);
    MESSAGE("not supported here: no yield point, so bulk copies are not cut");
    return;
  }
  CHECK(given.bulk_piece_bytes() == 1 * MiB);
  const std::uint64_t p = derived.bulk_piece_bytes();
  // Where a yield costs the engine time (CUDA), nothing is cut unless a piece is given; the
  // host backend's model yields for free and derives one.
  if (dev.backend() == Backend::host) CHECK(p != 0);
  if (p == 0) {
    MESSAGE("this backend cuts bulk copies only into a piece the caller gives");
    return;
  }
  CHECK(p >= 1 * MiB);
  CHECK(p <= 64 * MiB);
  CHECK((p & (p - 1)) == 0);
}
