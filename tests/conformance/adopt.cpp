// SPDX-License-Identifier: MIT
// Adopted device memory (Device::adopt_memory): an engine's own allocation, made with its
// vendor's calls by the backend's test main (conformance::allocate_foreign), used by every
// transfer entry point under the pool's ordering protocol, released at a point after which
// the engine owns it again; and every bad input refused with a typed error.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "conformance.hpp"

using namespace ferry;
using conformance::fill_pattern;
using conformance::first_mismatch;
using conformance::expect_error;

namespace {

constexpr std::uint64_t kBytes = (64u << 10) + 12;  // a multiple of 4 (synthetic compute), not of 256
constexpr auto kWait = std::chrono::seconds(60);

std::vector<std::byte> pattern(std::uint64_t bytes, std::uint64_t seed) {
  std::vector<std::byte> v(bytes);
  fill_pattern(v, seed);
  return v;
}

HostBuffer pinned_pattern(Device& dev, std::uint64_t bytes, std::uint64_t seed) {
  HostBuffer h = dev.host_pool().allocate(bytes);
  fill_pattern(h.span(), seed);
  return h;
}

/// The bytes of `buffer`, read through a pageable download (blocking).
std::vector<std::byte> read_back(Transfer& xfer, const DeviceBuffer& buffer) {
  std::vector<std::byte> out(buffer.size());
  xfer.download(buffer, std::span<std::byte>(out));
  return out;
}

bool same_budget(const PoolBudget& a, const PoolBudget& b) {
  return a.reserved_bytes == b.reserved_bytes && a.active_bytes == b.active_bytes &&
         a.requested_bytes == b.requested_bytes && a.allocations == b.allocations &&
         a.segment_count == b.segment_count;
}

}  // namespace

CONFORMANCE_CASE("adopt: every transfer entry point moves the bytes of adopted memory") {
  Device dev = conformance::open_device();
  auto foreign = conformance::allocate_foreign(dev, kBytes);
  if (!foreign) return;
  Queue compute = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  xfer.synchronize();
  const PoolBudget before = dev.pool().get_budget();
  DeviceBuffer a = dev.adopt_memory(foreign->native, kBytes, compute, {.tag = "engine"});
  CHECK(a.adopted());
  CHECK(a.size() == kBytes);
  CHECK(a.owner() == compute);
  CHECK(same_budget(before, dev.pool().get_budget()));  // adopted memory is not pool memory
  const std::uint64_t tracked = [&] {
    std::uint64_t sum = 0;
    for (const auto& seg : dev.pool().snapshot().segments) sum += seg.total_size;
    return sum;
  }();
  CHECK(tracked == before.reserved_bytes);

  // upload_into, then every download.
  HostBuffer x = pinned_pattern(dev, kBytes, 11);
  xfer.upload_into(x, a).wait(kWait);
  HostBuffer h = dev.host_pool().allocate(kBytes);
  xfer.download(a, h).wait(kWait);
  CHECK(first_mismatch(h.span(), 11) == -1);
  CHECK(first_mismatch(read_back(xfer, a), 11) == -1);
  std::vector<std::byte> part1(1000), part2(4096);
  const DownloadView views[] = {{4, part1.data(), part1.size()}, {kBytes - 4096, part2.data(), part2.size()}};
  xfer.download(a, std::span<const DownloadView>(views));
  std::vector<std::byte> whole = pattern(kBytes, 11);
  CHECK(std::memcmp(part1.data(), whole.data() + 4, part1.size()) == 0);
  CHECK(std::memcmp(part2.data(), whole.data() + kBytes - 4096, part2.size()) == 0);

  // Batch upload into the adopted range at given offsets: the bytes between keep their value.
  const std::vector<std::byte> v0 = pattern(3000, 21), v1 = pattern(500, 22), v2 = pattern(7, 23);
  const HostView in[] = {{v0.data(), v0.size()}, {v1.data(), v1.size()}, {v2.data(), v2.size()}};
  const std::uint64_t at[] = {100, 3100, 9000};  // views 0 and 1 are contiguous: one run
  xfer.upload_into(std::span<const HostView>(in), a, std::span<const std::uint64_t>(at)).wait(kWait);
  std::vector<std::byte> expect = whole;
  std::memcpy(expect.data() + 100, v0.data(), v0.size());
  std::memcpy(expect.data() + 3100, v1.data(), v1.size());
  std::memcpy(expect.data() + 9000, v2.data(), v2.size());
  CHECK(read_back(xfer, a) == expect);

  // Device-to-device both ways.
  DeviceBuffer p = dev.pool().allocate(kBytes, compute);
  HostBuffer y = pinned_pattern(dev, kBytes, 31);
  xfer.upload_into(y, p).wait(kWait);
  xfer.copy(p, a).wait(kWait);
  CHECK(first_mismatch(read_back(xfer, a), 31) == -1);
  DeviceBuffer q = dev.pool().allocate(kBytes, compute);
  xfer.upload_into(x, a).wait(kWait);
  xfer.copy(a, q).wait(kWait);
  CHECK(first_mismatch(read_back(xfer, q), 11) == -1);

  // The owner's compute reads the adopted range.
  if (dev.capabilities().synthetic_compute) {
    run_synthetic_compute(compute, a, q);
    CHECK(first_mismatch(read_back(xfer, q), 11, 1) == -1);
    run_synthetic_compute(compute, p, a);
    CHECK(first_mismatch(read_back(xfer, a), 31, 1) == -1);
  } else {
    MESSAGE("not supported: synthetic compute on " << dev.capabilities().name);
  }

  const TimelinePoint released = a.release();
  released.wait(kWait);
  CHECK_FALSE(a.valid());
  if (foreign->host != nullptr) {  // the engine sees what ferry wrote last
    const std::int64_t bad = first_mismatch(std::span<const std::byte>(foreign->host, kBytes), 31,
                                            dev.capabilities().synthetic_compute ? 1 : 0);
    CHECK(bad == -1);
  }
  dev.pool().validate();
}

CONFORMANCE_CASE("adopt: the executor waits for the owner's work on the adopted range") {
  // The owner's compute writes the adopted range, held behind a gate; an upload_into enqueued
  // after it must land after it. Without the executor's wait on the owner the copy runs first
  // and the compute, released later, overwrites it: wrong bytes, whatever the device's speed.
  Device dev = conformance::open_device();
  if (!dev.capabilities().synthetic_compute) {
    MESSAGE("not supported: synthetic compute on " << dev.capabilities().name);
    return;
  }
  auto foreign = conformance::allocate_foreign(dev, kBytes);
  if (!foreign) return;
  Queue compute = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  DeviceBuffer a = dev.adopt_memory(foreign->native, kBytes, compute);
  DeviceBuffer src = dev.pool().allocate(kBytes, compute);
  xfer.upload_into(pinned_pattern(dev, kBytes, 41), src).wait(kWait);
  if (dev.capabilities().dedicated_transfer_queue || xfer.executor() != compute) {
    conformance::Gate gate(dev, compute);
    run_synthetic_compute(compute, src, a);  // a = 41 + 1, once the gate opens
    const TimelinePoint done = xfer.upload_into(pinned_pattern(dev, kBytes, 42), a);
    CHECK_FALSE(done.reached());  // the copy follows the gated compute
    gate.open();
    done.wait(kWait);
  } else {
    MESSAGE("not supported: one queue for both roles; the order is the queue's own");
    run_synthetic_compute(compute, src, a);
    xfer.upload_into(pinned_pattern(dev, kBytes, 42), a).wait(kWait);
  }
  CHECK(first_mismatch(read_back(xfer, a), 42) == -1);
  a.release().wait(kWait);
}

CONFORMANCE_CASE("adopt: the first access waits for AdoptOptions::ready_after") {
  Device dev = conformance::open_device();
  auto foreign = conformance::allocate_foreign(dev, kBytes);
  if (!foreign) return;
  Queue compute = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  TimelineSemaphore engine = dev.create_semaphore(0);
  DeviceBuffer a = dev.adopt_memory(foreign->native, kBytes, compute, {.ready_after = engine.at(1)});
  const TimelinePoint done = xfer.upload_into(pinned_pattern(dev, kBytes, 51), a);
  CHECK_FALSE(done.reached());  // held by the engine's point
  if (foreign->host != nullptr) fill_pattern(std::span<std::byte>(foreign->host, kBytes), 52);  // its last use
  engine.signal(1);
  done.wait(kWait);
  CHECK(first_mismatch(read_back(xfer, a), 51) == -1);
  a.release().wait(kWait);
}

CONFORMANCE_CASE("adopt: the owner is ordered after a copy into adopted memory") {
  Device dev = conformance::open_device();
  if (!dev.capabilities().synthetic_compute) {
    MESSAGE("not supported: synthetic compute on " << dev.capabilities().name);
    return;
  }
  auto foreign = conformance::allocate_foreign(dev, kBytes);
  if (!foreign) return;
  Queue compute = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  DeviceBuffer a = dev.adopt_memory(foreign->native, kBytes, compute);
  DeviceBuffer out = dev.pool().allocate(kBytes, compute);
  for (std::uint64_t round = 0; round < 8; ++round) {
    const std::vector<std::byte> v = pattern(kBytes, 60 + round);
    const HostView view{v.data(), v.size()};
    const std::uint64_t at = 0;
    if (round % 2 == 0) {
      (void)xfer.upload_into(pinned_pattern(dev, kBytes, 60 + round), a);  // owner_waits
    } else {
      (void)xfer.upload_into(std::span<const HostView>(&view, 1), a, std::span<const std::uint64_t>(&at, 1));
    }
    run_synthetic_compute(compute, a, out);  // enqueued at once: only the owner's wait orders it
    CHECK(first_mismatch(read_back(xfer, out), 60 + round, 1) == -1);
  }
  a.release().wait(kWait);
}

CONFORMANCE_CASE("adopt: the release point follows every ferry access") {
  Device dev = conformance::open_device();
  auto foreign = conformance::allocate_foreign(dev, kBytes);
  if (!foreign) return;
  Queue compute = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  DeviceBuffer a = dev.adopt_memory(foreign->native, kBytes, compute);
  HostBuffer h = dev.host_pool().allocate(kBytes);
  TimelinePoint copied, read;
  TimelinePoint released;
  {
    conformance::Gate gate(dev, compute);
    copied = xfer.upload_into(pinned_pattern(dev, kBytes, 71), a);
    read = xfer.download(a, h);
    released = a.release();
    CHECK_FALSE(released.reached());  // the owner is held: its release point cannot be reached
    expect_error(ErrorCode::invalid_argument, [&] { (void)xfer.download(a, h); }, "download after release");
    gate.open();
  }
  released.wait(kWait);
  CHECK(copied.reached());
  CHECK(read.reached());
  CHECK(first_mismatch(h.span(), 71) == -1);
  if (foreign->host != nullptr) {
    // The engine owns the memory again: its writes stay, ferry touches nothing.
    CHECK(first_mismatch(std::span<const std::byte>(foreign->host, kBytes), 71) == -1);
    fill_pattern(std::span<std::byte>(foreign->host, kBytes), 72);
    xfer.synchronize();
    compute.synchronize();
    CHECK(first_mismatch(std::span<const std::byte>(foreign->host, kBytes), 72) == -1);
  }
  // A buffer dropped without release() ends the use too; owner.mark() after it covers it.
  {
    DeviceBuffer b = dev.adopt_memory(foreign->native, kBytes, compute);
    (void)xfer.upload_into(pinned_pattern(dev, kBytes, 73), b);
  }
  compute.mark().wait(kWait);
  if (foreign->host != nullptr) CHECK(first_mismatch(std::span<const std::byte>(foreign->host, kBytes), 73) == -1);
}

CONFORMANCE_CASE("adopt: release_unordered ends the use without ordering the owner") {
  Device dev = conformance::open_device();
  auto foreign = conformance::allocate_foreign(dev, kBytes);
  if (!foreign) return;
  Queue compute = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  HostBuffer src = pinned_pattern(dev, kBytes, 81);
  TimelinePoint copied, released;
  bool refused = false;
  {
    // The owner is held for the whole copy: a release point on the owner could not be
    // reached, so a reached point shows that nothing was enqueued on it.
    conformance::Gate gate(dev, compute);
    DeviceBuffer a = dev.adopt_memory(foreign->native, kBytes, compute);
    copied = xfer.upload_into(src, a, {.owner_waits = false, .destination_unused = true});
    if (dev.capabilities().ownership_transfer) {
      // The owner's family must acquire the range before anything else: refused, and the
      // buffer stays usable for a plain release.
      expect_error(ErrorCode::invalid_argument, [&] { (void)a.release_unordered(); },
                   "release_unordered with the owner's acquire owed");
      CHECK(a.valid());
      refused = true;
      gate.open();
      a.release().wait(kWait);
    } else {
      released = a.release_unordered();
      CHECK_FALSE(a.valid());
      expect_error(ErrorCode::invalid_argument, [&] { (void)a.release_unordered(); }, "release_unordered twice");
      expect_error(ErrorCode::invalid_argument, [&] { (void)a.release(); }, "release after release_unordered");
      CHECK(released.value >= copied.value);
      released.wait(kWait);  // reached while the owner is still held
      CHECK(copied.reached());
      CHECK_FALSE(compute.mark().reached());
      gate.open();
    }
  }
  compute.synchronize();
  if (!refused && foreign->host != nullptr) {
    CHECK(first_mismatch(std::span<const std::byte>(foreign->host, kBytes), 81) == -1);
  }
  // A pool block is reused in the owner's order, which must follow the copy: refused.
  DeviceBuffer block = dev.pool().allocate(kBytes, compute);
  expect_error(ErrorCode::invalid_argument, [&] { (void)block.release_unordered(); }, "release_unordered(pool block)");
  CHECK(block.valid());
  block.release();
  expect_error(ErrorCode::invalid_argument, [&] { (void)DeviceBuffer{}.release_unordered(); },
               "release_unordered(null buffer)");
}

CONFORMANCE_CASE("adopt: bad input is a typed error naming the value") {
  Device dev = conformance::open_device();
  auto foreign = conformance::allocate_foreign(dev, kBytes);
  if (!foreign) return;
  Queue compute = dev.queue(QueueRole::compute);
  const NativeMemory good = foreign->native;
  const bool vulkan = good.vulkan_buffer != 0;
  auto expect_invalid = [&](const NativeMemory& native, std::uint64_t size, const Queue& owner, AdoptOptions options,
                            const char* what, const char* mention, std::source_location loc = std::source_location::current()) {
    try {
      (void)dev.adopt_memory(native, size, owner, std::move(options));
      ADD_FAIL_CHECK_AT(loc.file_name(), static_cast<int>(loc.line()), "expected invalid_argument from " << what);
    } catch (const Error& e) {
      CHECK_MESSAGE(e.code() == ErrorCode::invalid_argument, what << ": " << e.what());
      CHECK_MESSAGE(e.message().find("Device::adopt_memory") != std::string::npos, what << ": " << e.message());
      CHECK_MESSAGE(e.message().find(mention) != std::string::npos, what << ": " << e.message());
      CHECK_MESSAGE((!conformance::kCallerLocations ||
                       std::string(e.where().file_name()).find("adopt.cpp") != std::string::npos), what);
    }
  };
  NativeMemory null_memory = good;
  if (vulkan) {
    null_memory.vulkan_buffer = 0;
  } else {
    null_memory.pointer = 0;
  }
  expect_invalid(null_memory, kBytes, compute, {}, "null memory", "null");
  NativeMemory misaligned = good;
  if (vulkan) {
    misaligned.vulkan_offset += 2;
  } else {
    misaligned.pointer += 2;
  }
  expect_invalid(misaligned, kBytes - 4, compute, {}, "misaligned start", "multiple of 4");
  expect_invalid(good, 0, compute, {}, "size 0", "size 0");
  NativeMemory wraps = good;
  wraps.pointer = vulkan ? 0 : UINT64_MAX - 3;
  if (!vulkan) expect_invalid(wraps, kBytes, compute, {}, "range wrapping around", "wraps");
  if (vulkan) {
    expect_invalid(good, good.vulkan_buffer_size - good.vulkan_offset + 4, compute, {}, "range past the VkBuffer",
                   "exceeds the VkBuffer");
    NativeMemory overstated = good;
    overstated.vulkan_buffer_size = good.vulkan_buffer_size + (1u << 20);
    expect_invalid(overstated, kBytes, compute, {}, "overstated VkBuffer size", "memory requirements");
    NativeMemory no_size = good;
    no_size.vulkan_buffer_size = 0;
    expect_invalid(no_size, kBytes, compute, {}, "VkBuffer size not stated", "vulkan_buffer_size");
    NativeMemory with_pointer = good;
    with_pointer.pointer = 4096;
    expect_invalid(with_pointer, kBytes, compute, {}, "a pointer given to Vulkan", "VkBuffer");
  } else if (dev.backend() == Backend::host || dev.backend() == Backend::null) {
    NativeMemory with_buffer = good;
    with_buffer.vulkan_buffer = 4096;
    expect_invalid(with_buffer, kBytes, compute, {}, "a VkBuffer given to a pointer backend", "VkBuffer");
  } else {
    // A GPU pointer backend: host memory is not device memory of this device.
    void* host = std::malloc(kBytes);
    expect_invalid(NativeMemory::from_pointer(host), kBytes, compute, {}, "host memory given as device memory",
                   "device memory");
    std::free(host);
  }
  expect_invalid(good, kBytes, Queue{}, {}, "null owner queue", "null");
  Device other = conformance::open_device();
  expect_invalid(good, kBytes, other.queue(QueueRole::compute), {}, "owner of another device", "another device");
  TimelineSemaphore foreign_sem = other.create_semaphore(0);
  expect_invalid(good, kBytes, compute, {.ready_after = foreign_sem.at(1)}, "ready_after of another device",
                 "another device");

  // Use after release: every entry point refuses the released buffer.
  Transfer xfer(dev);
  DeviceBuffer a = dev.adopt_memory(good, kBytes, compute);
  DeviceBuffer p = dev.pool().allocate(kBytes, compute);
  HostBuffer h = dev.host_pool().allocate(kBytes);
  a.release().wait(kWait);
  const ErrorCode kInvalid = ErrorCode::invalid_argument;
  using conformance::expect_error;
  expect_error(kInvalid, [&] { (void)a.release(); }, "release twice");
  expect_error(kInvalid, [&] { (void)a.size(); }, "size after release");
  expect_error(kInvalid, [&] { (void)a.adopted(); }, "adopted after release");
  expect_error(kInvalid, [&] { (void)xfer.upload_into(h, a); }, "upload_into after release");
  expect_error(kInvalid, [&] { (void)xfer.download(a, h); }, "download after release");
  std::vector<std::byte> out(kBytes);
  expect_error(kInvalid, [&] { xfer.download(a, std::span<std::byte>(out)); }, "pageable download after release");
  expect_error(kInvalid, [&] { (void)xfer.copy(a, p); }, "copy from after release");
  expect_error(kInvalid, [&] { (void)xfer.copy(p, a); }, "copy into after release");
  const HostView view{out.data(), 16};
  const std::uint64_t at = 0;
  expect_error(kInvalid,
               [&] { (void)xfer.upload_into(std::span<const HostView>(&view, 1), a, std::span<const std::uint64_t>(&at, 1)); },
               "batch upload_into after release");
  if (dev.capabilities().synthetic_compute) {
    expect_error(kInvalid, [&] { run_synthetic_compute(compute, a, p); }, "compute after release");
  }

  // The batch upload_into's own checks, on a live adopted buffer.
  DeviceBuffer b = dev.adopt_memory(good, kBytes, compute);
  const std::uint64_t past = kBytes - 8;
  expect_error(kInvalid,
               [&] { (void)xfer.upload_into(std::span<const HostView>(&view, 1), b, std::span<const std::uint64_t>(&past, 1)); },
               "batch view past the destination");
  const HostView two[] = {{out.data(), 64}, {out.data() + 64, 64}};
  const std::uint64_t overlapping[] = {0, 32};
  expect_error(kInvalid,
               [&] { (void)xfer.upload_into(std::span<const HostView>(two), b, std::span<const std::uint64_t>(overlapping)); },
               "overlapping batch destinations");
  expect_error(kInvalid,
               [&] { (void)xfer.upload_into(std::span<const HostView>(two), b, std::span<const std::uint64_t>(&at, 1)); },
               "batch offsets count");
  b.release().wait(kWait);
  conformance::check_round_trip(dev, xfer);
}
