// SPDX-License-Identifier: MIT
// Data integrity: every copy direction, size class and copy mode moves the right bytes to the
// right place and nothing else.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "conformance.hpp"
#include "reference.hpp"

using namespace ferry;
using conformance::fill_pattern;
using conformance::first_mismatch;

namespace {

constexpr std::uint64_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;

/// Upload `n` bytes from an unaligned offset of a pinned buffer, copy device-to-device, then
/// download both device buffers at unaligned offsets and compare; guard bytes around the
/// downloaded range must stay untouched.
void round_trip(Device& dev, Transfer& xfer, std::uint64_t n, std::uint64_t seed) {
  CAPTURE(n);
  Queue owner = dev.queue(QueueRole::compute);
  constexpr std::uint64_t src_off = 3, dst_off = 5, guard = 64;
  HostBuffer src = dev.host_pool().allocate(src_off + n + guard);
  HostBuffer dst = dev.host_pool().allocate(dst_off + n + guard);
  HostBuffer dst2 = dev.host_pool().allocate(dst_off + n + guard);
  std::memset(src.data(), 0xEE, src.size());
  fill_pattern(src.span().subspan(src_off, n), seed);
  std::memset(dst.data(), 0xCD, dst.size());
  std::memset(dst2.data(), 0xCD, dst2.size());

  Upload up = xfer.upload(src, src_off, n, owner);
  CHECK(up.buffer.size() == n);
  CHECK(up.buffer.owner() == owner);
  DeviceBuffer copy = dev.pool().allocate(n, owner);
  TimelinePoint copied = xfer.copy(up.buffer, copy);
  TimelinePoint down1 = xfer.download(up.buffer, dst, dst_off);
  TimelinePoint down2 = xfer.download(copy, dst2, dst_off);
  down1.wait();
  down2.wait();
  CHECK(copied.reached());
  CHECK(first_mismatch(dst.span().subspan(dst_off, n), seed) == -1);
  CHECK(first_mismatch(dst2.span().subspan(dst_off, n), seed) == -1);
  for (const HostBuffer* d : {&dst, &dst2}) {
    auto s = d->span();
    bool before = std::all_of(s.begin(), s.begin() + dst_off,
                              [](std::byte b) { return b == std::byte{0xCD}; });
    bool after = std::all_of(s.begin() + static_cast<std::ptrdiff_t>(dst_off + n), s.end(),
                             [](std::byte b) { return b == std::byte{0xCD}; });
    CHECK_MESSAGE(before, "download wrote before its offset");
    CHECK_MESSAGE(after, "download wrote past its range");
  }
  up.buffer.release();
  copy.release();
}

}  // namespace

CONFORMANCE_CASE("data: upload, device copy and download round trips, small to 64 MiB") {
  Device dev = conformance::open_device();
  Transfer xfer(dev);
  std::uint64_t seed = 1;
  for (std::uint64_t n : {std::uint64_t{1}, std::uint64_t{3}, std::uint64_t{255}, std::uint64_t{4096 + 7},
                          MiB + 13, 64 * MiB}) {
    round_trip(dev, xfer, n, seed++);
  }
}

CONFORMANCE_CASE("data: round trip larger than 1 GiB (GPUs with more than 8 GiB)") {
  Device dev = conformance::open_device();
  const Capabilities& caps = dev.capabilities();
  if (!caps.is_gpu || caps.device_memory_bytes <= 8 * GiB) {
    MESSAGE("not supported here: the > 1 GiB size class runs only on a GPU with > 8 GiB ("
            << caps.name << ")");
    return;
  }
  Transfer xfer(dev);
  round_trip(dev, xfer, GiB + 4099, 77);
}

CONFORMANCE_CASE("data: pageable upload larger than the staging ring, pageable download") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  TransferOptions topt;
  topt.staging_chunk_bytes = 8 * MiB;  // a 32 MiB ring
  topt.staging_chunks = 4;
  Transfer xfer(dev, topt);
  const std::uint64_t n = 40 * MiB + 13;
  CHECK(n > topt.staging_chunk_bytes * topt.staging_chunks);
  std::vector<std::byte> source(n);
  fill_pattern(source, 5);
  Upload up = xfer.upload(std::span<const std::byte>(source), owner);
  // The source may be reused as soon as the call returns: scribble over it.
  std::fill(source.begin(), source.end(), std::byte{0});
  CHECK(up.buffer.size() == n);
  std::vector<std::byte> back(n);
  xfer.download(up.buffer, std::span<std::byte>(back));
  CHECK(first_mismatch(back, 5) == -1);
  up.buffer.release();

  SUBCASE("small pageable source") {
    std::vector<std::byte> tiny(7);
    fill_pattern(tiny, 6);
    Upload u = xfer.upload(std::span<const std::byte>(tiny), owner);
    std::vector<std::byte> out(7);
    xfer.download(u.buffer, std::span<std::byte>(out));
    CHECK(first_mismatch(out, 6) == -1);
  }
}

CONFORMANCE_CASE("data: registered user memory") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  const std::uint64_t n = 4 * MiB;
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> a(static_cast<std::byte*>(std::aligned_alloc(64 * KiB, n)));
  std::unique_ptr<std::byte, Free> b(static_cast<std::byte*>(std::aligned_alloc(64 * KiB, n)));
  REQUIRE(a);
  REQUIRE(b);
  std::span<std::byte> user_src(a.get(), n), user_dst(b.get(), n);
  fill_pattern(user_src, 11);
  std::memset(user_dst.data(), 0, n);
  if (!dev.capabilities().host_memory_registration) {
    MESSAGE("not supported: " << to_string(dev.backend()) << " cannot register user memory");
    conformance::expect_error(ErrorCode::unsupported,
                              [&] { (void)dev.host_pool().register_memory(user_src); },
                              "register_memory without the capability");
    return;
  }
  HostBuffer src = dev.host_pool().register_memory(user_src);
  HostBuffer dst = dev.host_pool().register_memory(user_dst);
  CHECK(src.registered());
  CHECK(src.data() == user_src.data());
  CHECK(src.size() == n);
  Upload up = xfer.upload(src, 17, n - 17, owner);
  DeviceBuffer out = dev.pool().allocate(n - 17, owner);
  run_synthetic_compute(owner, up.buffer, out);
  xfer.download(out, dst, 0).wait();
  CHECK(first_mismatch(user_src, 11) == -1);  // the source is untouched
  // out[i] = src[17 + i] + 1
  std::int64_t bad = -1;
  for (std::uint64_t i = 0; i + 17 < n && bad < 0; ++i) {
    auto want = static_cast<std::byte>(static_cast<unsigned>(conformance::pattern_byte(11, i + 17)) + 1);
    if (user_dst[i] != want) bad = static_cast<std::int64_t>(i);
  }
  CHECK(bad == -1);
  up.buffer.release();
  out.release();
}

CONFORMANCE_CASE("data: every copy mode delivers the bytes to the owner") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  const std::uint64_t n = 3 * MiB + 5;
  HostBuffer src = dev.host_pool().allocate(n);
  HostBuffer dst = dev.host_pool().allocate(n);
  std::uint64_t seed = 20;
  ferry_bench::ReferenceUploads uploads(dev, xfer, owner);
  using ferry_bench::Strategy;
  for (Strategy mode : {Strategy::blocking, Strategy::executor_owned, Strategy::owner_owned}) {
    CAPTURE(ferry_bench::to_string(mode));
    fill_pattern(src.span(), seed);
    UploadOptions o;
    o.tag = "mode-test";
    Upload up = uploads.upload(mode, src, o);
    if (mode == Strategy::blocking) {
      CHECK_MESSAGE(up.ready.reached(), "blocking upload returned before the copy completed");
    }
    if (mode == Strategy::executor_owned) {
      CHECK(up.buffer.owner() == xfer.executor());
    } else {
      CHECK(up.buffer.owner() == owner);
    }
    DeviceBuffer out = dev.pool().allocate(n, owner);
    run_synthetic_compute(owner, up.buffer, out);
    TimelinePoint done = xfer.download(out, dst);
    up.buffer.release();
    out.release();
    done.wait();
    CHECK(first_mismatch(dst.span(), seed, 1) == -1);
    ++seed;
  }

  SUBCASE("preallocated: upload_into a caller-supplied destination") {
    DeviceBuffer dest = dev.pool().allocate(n + 100, owner);
    // Initialize all n + 100 bytes, then overwrite the first n: the tail must keep its bytes.
    HostBuffer full = dev.host_pool().allocate(n + 100);
    fill_pattern(full.span(), 39);
    xfer.upload_into(full, dest);
    fill_pattern(src.span(), 40);
    TimelinePoint ready = xfer.upload_into(src, dest);
    DeviceBuffer out = dev.pool().allocate(n + 100, owner);
    run_synthetic_compute(owner, dest, out);  // the owner waited for the copy (owner_waits)
    HostBuffer whole = dev.host_pool().allocate(n + 100);
    TimelinePoint done = xfer.download(out, whole);
    done.wait();
    CHECK(ready.reached());
    CHECK(first_mismatch(whole.span().first(n), 40, 1) == -1);
    std::int64_t tail_bad = -1;
    for (std::uint64_t i = n; i < n + 100; ++i) {
      const auto want = static_cast<std::byte>(static_cast<unsigned>(conformance::pattern_byte(39, i)) + 1);
      if (whole.span()[i] != want) tail_bad = static_cast<std::int64_t>(i);
    }
    CHECK_MESSAGE(tail_bad == -1, "upload_into of a smaller source changed bytes past its end");
    // a second upload_into the same destination, after the compute that read it
    fill_pattern(src.span(), 41);
    xfer.upload_into(src, dest);
    xfer.download(dest, whole).wait();
    CHECK(first_mismatch(whole.span().first(n), 41) == -1);
  }

  SUBCASE("overwrite_padding outside the batch upload_into is invalid_argument") {
    std::vector<DeviceBuffer> dests;
    dests.push_back(dev.pool().allocate(n, owner));
    const DeviceBuffer& dest = dests[0];
    const std::vector<std::uint64_t> at{0};
    UploadIntoOptions o;
    o.overwrite_padding = true;
    conformance::expect_error(ErrorCode::invalid_argument, [&] { (void)xfer.upload_into(src, dest, o); },
                              "upload_into(whole, overwrite_padding)");
    conformance::expect_error(ErrorCode::invalid_argument, [&] { (void)xfer.upload_into(src, 0, n, dest, 0, o); },
                              "upload_into(range, overwrite_padding)");
    const auto buffers = [&] {
      (void)xfer.upload_into(src, std::span<const std::uint64_t>(at), std::span<const DeviceBuffer>(dests), o);
    };
    conformance::expect_error(ErrorCode::invalid_argument, buffers, "upload_into(buffers, overwrite_padding)");
    conformance::check_round_trip(dev, xfer);
  }

  SUBCASE("owner_waits = false: the caller places the wait") {
    fill_pattern(src.span(), 50);
    UploadOptions o;
    o.owner_waits = false;
    Upload up = xfer.upload(src, owner, o);
    owner.wait(up.ready);
    DeviceBuffer out = dev.pool().allocate(n, owner);
    run_synthetic_compute(owner, up.buffer, out);
    TimelinePoint done = xfer.download(out, dst);
    done.wait();
    CHECK(first_mismatch(dst.span(), 50, 1) == -1);
  }
}

CONFORMANCE_CASE("data: uploads on a second owner queue and download from it") {
  Device dev = conformance::open_device();
  Queue owner2 = conformance::try_create_queue(dev, QueueRole::compute, "second-compute");
  if (!owner2) return;
  CHECK(owner2.role() == QueueRole::compute);
  CHECK(owner2.name() == "second-compute");
  CHECK(owner2.id() != dev.queue(QueueRole::compute).id());
  Transfer xfer(dev);
  HostBuffer src = dev.host_pool().allocate(MiB);
  HostBuffer dst = dev.host_pool().allocate(MiB);
  fill_pattern(src.span(), 60);
  Upload up = xfer.upload(src, owner2);
  CHECK(up.buffer.owner() == owner2);
  DeviceBuffer out = dev.pool().allocate(MiB, owner2);
  run_synthetic_compute(owner2, up.buffer, out, 3);
  xfer.download(out, dst).wait();
  // `units` only repeats the work: output[i] = input[i] + 1 whatever the number of passes.
  CHECK(first_mismatch(dst.span(), 60, 1) == -1);
}

CONFORMANCE_CASE("data: pageable upload with the default ring and with packing on the caller") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  TransferOptions defaults;
  TransferOptions inline_packing;
  inline_packing.staging_threads = 0;
  inline_packing.staging_chunk_bytes = 1 * MiB;
  inline_packing.staging_chunks = 2;
  for (const TransferOptions& topt : {defaults, inline_packing}) {
    Transfer xfer(dev, topt);
    const std::uint64_t n = topt.staging_chunk_bytes * topt.staging_chunks + MiB + 1;
    std::vector<std::byte> source(n);
    fill_pattern(source, 9);
    Upload up = xfer.upload(std::span<const std::byte>(source), owner);
    std::vector<std::byte> back(n);
    xfer.download(up.buffer, std::span<std::byte>(back));
    CHECK(first_mismatch(back, 9) == -1);
  }
}

namespace {

/// A KeyedJaggedTensor-like input: a few named buffers of different sizes.
struct Jagged {
  std::vector<std::vector<std::byte>> parts;
};
struct DeviceJagged {
  std::vector<DeviceView> parts;
};
template <maybe_const<Jagged> J, class Leaf>
DeviceJagged ferry_leaves(J& j, Leaf&& leaf) {
  DeviceJagged d;
  for (auto& p : j.parts) d.parts.push_back(leaf(p));
  return d;
}
static_assert(Uploadable<Jagged>);

/// The host views of `j`'s parts, in ferry_leaves order.
std::vector<HostView> host_views(const Jagged& j) {
  std::vector<HostView> v;
  for (const auto& p : j.parts) v.push_back({p.data(), p.size()});
  return v;
}

}  // namespace

CONFORMANCE_CASE("data: batch upload of many scattered host ranges") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  Jagged input;
  std::uint64_t total = 0;
  for (int i = 0; i < 300; ++i) {
    const std::uint64_t size = 1 + (static_cast<std::uint64_t>(i) * 7919) % 20000;
    input.parts.emplace_back(size);
    fill_pattern(input.parts.back(), 1000 + static_cast<std::uint64_t>(i));
    total += size;
  }
  HostBuffer pinned = dev.host_pool().allocate(5000);  // pinned and pageable views mix
  fill_pattern(pinned.span(), 999);
  std::vector<HostView> views = host_views(input);
  views.push_back({pinned.data(), pinned.size()});

  ferry_bench::ReferenceUploads uploads(dev, xfer, owner);
  for (const bool blocking : {false, true}) {
    CAPTURE(blocking);
    const std::span<const HostView> all(views);
    UploadBatch batch = blocking ? uploads.blocking(all) : xfer.upload(all, owner);
    REQUIRE(batch.offsets.size() == views.size());
    REQUIRE(batch.views.size() == views.size());
    CHECK(batch.buffer.owner() == owner);
    CHECK(batch.buffer.size() >= total + pinned.size());
    for (std::size_t i = 0; i < views.size(); ++i) {
      CHECK(batch.offsets[i] % 256 == 0);
      if (i > 0) CHECK(batch.offsets[i] >= batch.offsets[i - 1] + views[i - 1].size);
      CHECK(batch.views[i].size == views[i].size);
    }
    // the sources may be reused once the call returns
    for (auto& p : input.parts) std::fill(p.begin(), p.end(), std::byte{0});
    std::vector<std::byte> back(batch.buffer.size());
    xfer.download(batch.buffer, std::span<std::byte>(back));
    int bad = 0;
    for (std::size_t i = 0; i < views.size(); ++i) {
      const std::uint64_t seed = i < input.parts.size() ? 1000 + i : 999;
      std::span<const std::byte> got(back.data() + batch.offsets[i], views[i].size);
      if (first_mismatch(got, seed) != -1) ++bad;
    }
    CHECK_MESSAGE(bad == 0, bad << " of " << views.size() << " inputs arrived wrong");
    for (std::size_t i = 0; i < input.parts.size(); ++i) {
      fill_pattern(input.parts[i], 1000 + i);  // restore for the next mode
    }
  }

  SUBCASE("structured upload") {
    auto [batch, shape] = upload_structured(xfer, input, owner);
    REQUIRE(shape.parts.size() == input.parts.size());
    DeviceBuffer out = dev.pool().allocate(batch.buffer.size(), owner);
    run_synthetic_compute(owner, batch.buffer, out);
    std::vector<std::byte> back(batch.buffer.size());
    xfer.download(out, std::span<std::byte>(back));
    std::span<const std::byte> last(back.data() + batch.offsets[5], input.parts[5].size());
    CHECK(first_mismatch(last, 1005, 1) == -1);
  }

  SUBCASE("bad input") {
    std::byte one{1};
    std::vector<HostView> null_view{{nullptr, 10}};
    std::vector<HostView> empty_view{{&one, 0}};
    std::vector<HostView> overflow{{&one, ~std::uint64_t{0}}, {&one, 2}};
    conformance::expect_error(ErrorCode::invalid_argument,
                              [&] { (void)xfer.upload(std::span<const HostView>{}, owner); },
                              "batch upload(no views)");
    conformance::expect_error(ErrorCode::invalid_argument,
                              [&] { (void)xfer.upload(std::span<const HostView>(null_view), owner); },
                              "batch upload(null view)");
    // An empty view is valid (its data may be null); a null pointer with a size is not.
    CHECK(xfer.upload(std::span<const HostView>(empty_view), owner).views.at(0).size == 0);
    conformance::expect_error(ErrorCode::invalid_argument,
                              [&] { (void)xfer.upload(std::span<const HostView>(overflow), owner); },
                              "batch upload(total size overflows)");
    conformance::expect_error(ErrorCode::invalid_argument,
                              [&] { (void)xfer.upload(std::span<const HostView>(views), Queue{}); },
                              "batch upload(null owner)");
    conformance::check_round_trip(dev, xfer);
  }
}
