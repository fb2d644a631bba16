// SPDX-License-Identifier: MIT
// Bad input for every public entry point: each gives a typed ferry::Error, never a crash, and
// the objects involved keep working afterwards.
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "conformance.hpp"

using namespace ferry;
using conformance::check_round_trip;
using conformance::expect_error;
using conformance::expect_error_any;

namespace {
constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
constexpr auto kInvalid = ErrorCode::invalid_argument;
}  // namespace

CONFORMANCE_CASE("bad input: backend names, ordinals and backends that were not built") {
  expect_error(kInvalid, [] { (void)parse_backend("nope"); }, "parse_backend(nope)");
  expect_error(kInvalid, [] { (void)parse_backend(""); }, "parse_backend(empty)");
  for (Backend b : {Backend::host, Backend::cuda, Backend::hip, Backend::vulkan, Backend::vulkan_cuda,
                    Backend::cuda_vulkan}) {
    CHECK(parse_backend(to_string(b)) == b);
  }

  const Backend self = conformance::config().backend;
  DeviceOptions o = conformance::options();
  o.ordinal = Device::count(self) + 4;
  expect_error(kInvalid, [&] { (void)Device::open(o); }, "Device::open(ordinal out of range)");
  o.ordinal = -1;
  expect_error(kInvalid, [&] { (void)Device::open(o); }, "Device::open(ordinal -1)");

  bool tested_unbuilt = false, tested_absent = false;
  for (Backend b : {Backend::host, Backend::cuda, Backend::hip, Backend::vulkan, Backend::vulkan_cuda,
                    Backend::cuda_vulkan}) {
    CAPTURE(to_string(b));
    DeviceOptions ob;
    ob.backend = b;
    if (!Device::built_with(b)) {
      CHECK(Device::count(b) == 0);
      tested_unbuilt = true;
      try {
        (void)Device::open(ob);
        FAIL("opening a backend that was not built succeeded");
      } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::unsupported);
        const std::string what = e.what();
        CHECK_MESSAGE(what.find("-D") != std::string::npos,
                      "the error should name the meson option: " << what);
        CHECK_MESSAGE(what.find(std::string(to_string(b))) != std::string::npos, what);
      }
    } else if (Device::count(b) == 0) {
      tested_absent = true;
      expect_error(ErrorCode::unsupported, [&] { (void)Device::open(ob); },
                   "Device::open(built, no device)");
    }
  }
  if (!tested_unbuilt) MESSAGE("every backend is built here: the not-built path is untested");
  if (!tested_absent) MESSAGE("every built backend has a device here: the no-device path is untested");
}

CONFORMANCE_CASE("bad input: interop pairings that do not exist") {
  using interop::pair_backend;
  CHECK(pair_backend(Backend::vulkan, Backend::cuda) == Backend::vulkan_cuda);
  CHECK(pair_backend(Backend::cuda, Backend::vulkan) == Backend::cuda_vulkan);
  // HIP cannot import a timeline semaphore on Linux: refused with the reason, either way round.
  for (const auto& pairing : {std::pair{Backend::vulkan, Backend::hip}, std::pair{Backend::hip, Backend::vulkan}}) {
    // Named variables, not structured bindings: the lambda below captures them, which clang
    // accepts only from version 16 on.
    const Backend executor = pairing.first;
    const Backend owner = pairing.second;
    try {
      (void)pair_backend(executor, owner);
      FAIL("a HIP pairing was accepted");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::unsupported);
      CHECK_MESSAGE(std::string(e.what()).find("timeline") != std::string::npos, e.what());
    }
    expect_error(ErrorCode::unsupported,
                 [&] { (void)interop::open_pair({.executor = executor, .owner = owner}); },
                 "open_pair(HIP)");
  }
  expect_error(kInvalid, [] { (void)pair_backend(Backend::cuda, Backend::cuda); }, "pair_backend(cuda, cuda)");
  expect_error(kInvalid, [] { (void)pair_backend(Backend::vulkan, Backend::vulkan); }, "pair_backend(vulkan, vulkan)");
  expect_error(kInvalid, [] { (void)pair_backend(Backend::host, Backend::cuda); }, "pair_backend(host, cuda)");
  expect_error(kInvalid, [] { (void)pair_backend(Backend::vulkan_cuda, Backend::cuda); },
               "pair_backend(a pair, cuda)");
}

CONFORMANCE_CASE("bad input: null handles") {
  Device null_device;
  Queue null_queue;
  TimelineSemaphore null_sem;
  DeviceBuffer null_buffer;
  HostBuffer null_host;
  CHECK_FALSE(null_device.is_open());
  CHECK_FALSE(static_cast<bool>(null_queue));
  CHECK_FALSE(static_cast<bool>(null_sem));
  CHECK_FALSE(null_buffer.valid());
  CHECK_FALSE(null_host.valid());

  expect_error(kInvalid, [&] { (void)null_device.capabilities(); }, "null Device::capabilities");
  expect_error(kInvalid, [&] { (void)null_device.backend(); }, "null Device::backend");
  expect_error(kInvalid, [&] { (void)null_device.queue(QueueRole::compute); }, "null Device::queue");
  expect_error(kInvalid, [&] { (void)null_device.create_queue(QueueRole::compute); },
               "null Device::create_queue");
  expect_error(kInvalid, [&] { (void)null_device.create_semaphore(); },
               "null Device::create_semaphore");
  expect_error(kInvalid, [&] { (void)null_device.pool(); }, "null Device::pool");
  expect_error(kInvalid, [&] { (void)null_device.host_pool(); }, "null Device::host_pool");
  expect_error(kInvalid, [&] { (void)Transfer(null_device); }, "Transfer(null device)");

  expect_error(kInvalid, [&] { (void)null_queue.role(); }, "null Queue::role");
  expect_error(kInvalid, [&] { (void)null_queue.id(); }, "null Queue::id");
  expect_error(kInvalid, [&] { (void)null_queue.name(); }, "null Queue::name");
  expect_error(kInvalid, [&] { (void)null_queue.mark(); }, "null Queue::mark");
  expect_error(kInvalid, [&] { null_queue.synchronize(); }, "null Queue::synchronize");
  expect_error(kInvalid, [&] { null_queue.wait(TimelinePoint{}); }, "null Queue::wait");

  expect_error(kInvalid, [&] { (void)null_sem.value(); }, "null semaphore value");
  expect_error(kInvalid, [&] { null_sem.signal(1); }, "null semaphore signal");
  expect_error(kInvalid, [&] { null_sem.wait(1, std::chrono::milliseconds(1)); },
               "null semaphore wait");
  expect_error(kInvalid, [&] { (void)null_sem.try_wait(1, std::chrono::milliseconds(1)); },
               "null semaphore try_wait");
  expect_error(kInvalid, [&] { (void)null_sem.at(1); }, "null semaphore at");

  expect_error(kInvalid, [&] { (void)null_buffer.size(); }, "null DeviceBuffer::size");
  expect_error(kInvalid, [&] { (void)null_buffer.owner(); }, "null DeviceBuffer::owner");
  expect_error(kInvalid, [&] { (void)null_buffer.view(); }, "null DeviceBuffer::view");
  expect_error(kInvalid, [&] { (void)null_buffer.ready_after(); }, "null DeviceBuffer::ready_after");
  expect_error(kInvalid, [&] { null_buffer.release(); }, "null DeviceBuffer::release");
  expect_error(kInvalid, [&] { null_buffer.release_after(TimelinePoint{}); },
               "null DeviceBuffer::release_after");

  expect_error(kInvalid, [&] { (void)null_host.span(); }, "null HostBuffer::span");
  expect_error(kInvalid, [&] { (void)null_host.data(); }, "null HostBuffer::data");
  expect_error(kInvalid, [&] { (void)null_host.size(); }, "null HostBuffer::size");
  expect_error(kInvalid, [&] { (void)null_host.registered(); }, "null HostBuffer::registered");

  // null handles passed into a working device
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  HostBuffer host = dev.host_pool().allocate(4096);
  DeviceBuffer buf = dev.pool().allocate(4096, owner);
  expect_error(kInvalid, [&] { (void)dev.pool().allocate(16, null_queue); }, "allocate(null queue)");
  expect_error(kInvalid, [&] { (void)xfer.upload(null_host, owner); }, "upload(null source)");
  expect_error(kInvalid, [&] { (void)xfer.upload(host, null_queue); }, "upload(null owner)");
  expect_error(kInvalid, [&] { (void)xfer.upload(null_host, 0, 1, owner); },
               "upload(null source, range)");
  expect_error(kInvalid, [&] { (void)xfer.upload_into(null_host, buf); }, "upload_into(null source)");
  expect_error(kInvalid, [&] { (void)xfer.upload_into(host, null_buffer); },
               "upload_into(null destination)");
  expect_error(kInvalid, [&] { (void)xfer.download(null_buffer, host); }, "download(null source)");
  expect_error(kInvalid, [&] { (void)xfer.download(buf, null_host); }, "download(null destination)");
  std::vector<std::byte> page(4096);
  expect_error(kInvalid, [&] { xfer.download(null_buffer, std::span<std::byte>(page)); },
               "download(null source, span)");
  expect_error(kInvalid, [&] { (void)xfer.copy(null_buffer, buf); }, "copy(null source)");
  expect_error(kInvalid, [&] { (void)xfer.copy(buf, null_buffer); }, "copy(null destination)");
  expect_error(kInvalid, [&] { run_synthetic_compute(null_queue, buf, buf); },
               "run_synthetic_compute(null queue)");
  expect_error(kInvalid, [&] { run_synthetic_compute(owner, null_buffer, buf); },
               "run_synthetic_compute(null input)");
  TransferOptions topt;
  topt.executor = Queue{};  // null executor = the device's transfer queue: allowed
  CHECK_NOTHROW(Transfer(dev, topt));
  buf.release();
  check_round_trip(dev, xfer);
}

CONFORMANCE_CASE("bad input: zero and overflowing sizes") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  DevicePool& pool = dev.pool();
  const PoolBudget before = pool.get_budget();

  expect_error(kInvalid, [&] { (void)pool.allocate(0, owner); }, "allocate(0)");
  expect_error(kInvalid, [&] { (void)pool.allocate(kMax, owner); }, "allocate(UINT64_MAX)");
  expect_error(kInvalid, [&] { (void)pool.allocate(kMax - 4095, owner); }, "allocate(near max)");
  expect_error(kInvalid, [&] { (void)dev.host_pool().allocate(0); }, "host allocate(0)");
  expect_error(kInvalid, [&] { (void)dev.host_pool().allocate(kMax); }, "host allocate(UINT64_MAX)");
  expect_error(kInvalid, [&] { (void)dev.host_pool().allocate(kMax / 2 + 1); },
               "host allocate(2^63)");
  // absurd but not overflowing: beyond the device limit or really out of memory
  expect_error_any({kInvalid, ErrorCode::out_of_memory},
                   [&] { (void)pool.allocate(std::uint64_t{1} << 52, owner); }, "allocate(4 PiB)");
  const PoolBudget after = pool.get_budget();
  CHECK(after.active_bytes == before.active_bytes);
  CHECK_NOTHROW(pool.validate());

  HostBuffer src = dev.host_pool().allocate(4096);
  DeviceBuffer small_dst = pool.allocate(100, owner);
  expect_error(kInvalid, [&] { (void)xfer.upload(src, 0, 0, owner); }, "upload(bytes 0)");
  expect_error(kInvalid, [&] { (void)xfer.upload(src, 0, 4097, owner); }, "upload(bytes > size)");
  expect_error(kInvalid, [&] { (void)xfer.upload(src, 4096, 1, owner); }, "upload(offset = size)");
  expect_error(kInvalid, [&] { (void)xfer.upload(src, kMax - 2, 8, owner); },
               "upload(offset + bytes overflows)");
  expect_error(kInvalid, [&] { (void)xfer.upload(src, 8, kMax, owner); }, "upload(bytes = max)");
  expect_error(kInvalid, [&] { (void)xfer.upload(std::span<const std::byte>{}, owner); },
               "upload(empty pageable span)");
  expect_error(kInvalid, [&] { (void)xfer.upload_into(src, small_dst); },
               "upload_into(source larger than destination)");
  HostBuffer small_host = dev.host_pool().allocate(50);
  expect_error(kInvalid, [&] { (void)xfer.download(small_dst, small_host); },
               "download(destination too small)");
  expect_error(kInvalid, [&] { (void)xfer.download(small_dst, src, 4000); },
               "download(offset + size beyond destination)");
  expect_error(kInvalid, [&] { (void)xfer.download(small_dst, src, kMax - 10); },
               "download(offset overflows)");
  std::vector<std::byte> page(50);
  expect_error(kInvalid, [&] { xfer.download(small_dst, std::span<std::byte>(page)); },
               "download(span too small)");
  expect_error(kInvalid, [&] { xfer.download(small_dst, std::span<std::byte>{}); },
               "download(empty span)");
  DeviceBuffer big = pool.allocate(200, owner);
  expect_error(kInvalid, [&] { (void)xfer.copy(big, small_dst); }, "copy(source larger than destination)");
  expect_error(kInvalid, [&] { (void)xfer.copy(small_dst, big, 101); }, "copy(bytes > source)");
  expect_error(kInvalid, [&] { (void)xfer.copy(small_dst, big, kMax); }, "copy(bytes = max)");
  expect_error(kInvalid, [&] { run_synthetic_compute(owner, small_dst, big); },
               "run_synthetic_compute(size mismatch)");
  TransferOptions zero_chunk;
  zero_chunk.staging_chunk_bytes = 0;
  expect_error(kInvalid, [&] { (void)Transfer(dev, zero_chunk); }, "Transfer(staging chunk 0)");
  TransferOptions zero_chunks;
  zero_chunks.staging_chunks = 0;
  expect_error(kInvalid, [&] { (void)Transfer(dev, zero_chunks); }, "Transfer(0 staging chunks)");

  // the objects still work
  small_dst.release();
  big.release();
  check_round_trip(dev, xfer);
  CHECK_NOTHROW(pool.validate());
}

CONFORMANCE_CASE("bad input: register_memory: empty, overlapping") {
  Device dev = conformance::open_device();
  HostPool& hp = dev.host_pool();
  std::vector<std::byte> storage(256 * KiB + 64 * KiB);
  // a 64 KiB-aligned window, so page-alignment rules are met
  auto base = reinterpret_cast<std::uintptr_t>(storage.data());
  std::byte* p = storage.data() + ((64 * KiB - base % (64 * KiB)) % (64 * KiB));
  std::span<std::byte> whole(p, 256 * KiB);
  expect_error(kInvalid, [&] { (void)hp.register_memory(std::span<std::byte>{}); },
               "register_memory(empty)");
  if (!dev.capabilities().host_memory_registration) {
    MESSAGE("not supported: " << to_string(dev.backend()) << " cannot register user memory");
    expect_error(ErrorCode::unsupported, [&] { (void)hp.register_memory(whole.first(64 * KiB)); },
                 "register_memory without the capability");
    return;
  }
  HostBuffer first = hp.register_memory(whole.first(128 * KiB));
  expect_error(kInvalid, [&] { (void)hp.register_memory(whole.subspan(64 * KiB, 128 * KiB)); },
               "register_memory(overlapping)");
  expect_error(kInvalid, [&] { (void)hp.register_memory(whole.first(128 * KiB)); },
               "register_memory(same range twice)");
  expect_error(kInvalid, [&] { (void)hp.register_memory(whole.subspan(4 * KiB, 8 * KiB)); },
               "register_memory(inside a registration)");
  // adjacent is fine
  HostBuffer second = hp.register_memory(whole.subspan(128 * KiB, 128 * KiB));
  CHECK(second.registered());
  // after the first registration goes away, its range can be registered again
  first = HostBuffer{};
  HostBuffer again = hp.register_memory(whole.first(128 * KiB));
  CHECK(again.registered());
  Transfer xfer(dev);
  check_round_trip(dev, xfer);
}

CONFORMANCE_CASE("bad input: objects of another device") {
  Device a = conformance::open_device();
  Device b = conformance::open_device();
  REQUIRE_FALSE(a == b);
  Queue qa = a.queue(QueueRole::compute);
  Queue qb = b.queue(QueueRole::compute);
  Transfer xa(a);
  HostBuffer ha = a.host_pool().allocate(4096);
  HostBuffer hb = b.host_pool().allocate(4096);
  DeviceBuffer da = a.pool().allocate(4096, qa);
  DeviceBuffer db = b.pool().allocate(4096, qb);
  DeviceBuffer da2 = a.pool().allocate(4096, qa);
  TimelineSemaphore sb = b.create_semaphore();

  expect_error(kInvalid, [&] { (void)a.pool().allocate(16, qb); }, "allocate(queue of B)");
  expect_error(kInvalid, [&] { (void)xa.upload(ha, qb); }, "upload(owner of B)");
  expect_error(kInvalid, [&] { (void)xa.upload(hb, qa); }, "upload(host buffer of B)");
  expect_error(kInvalid, [&] { (void)xa.upload_into(ha, db); }, "upload_into(destination of B)");
  expect_error(kInvalid, [&] { (void)xa.download(db, ha); }, "download(source of B)");
  expect_error(kInvalid, [&] { (void)xa.download(da, hb); }, "download(destination of B)");
  // A copy between A and B is a peer copy where the backend has them (peer.cpp).
  expect_error(kInvalid, [&] { run_synthetic_compute(qa, db, da); },
               "run_synthetic_compute(input of B)");
  expect_error(kInvalid, [&] { run_synthetic_compute(qb, da, da2); },
               "run_synthetic_compute(queue of B)");
  expect_error(kInvalid, [&] { qa.wait(sb.at(1)); }, "queue of A waits on B's semaphore");
  expect_error(kInvalid, [&] { qa.signal(sb.at(1)); }, "queue of A signals B's semaphore");
  expect_error(kInvalid, [&] { da.release_after(sb.at(1)); }, "release_after(point of B)");
  TransferOptions o;
  o.executor = qb;
  expect_error(kInvalid, [&] { (void)Transfer(a, o); }, "Transfer(A, executor of B)");

  expect_error(kInvalid, [&] { run_synthetic_compute(qa, da, da); },
               "run_synthetic_compute(input and output the same buffer)");
  expect_error(kInvalid, [&] { run_synthetic_compute(qa, da, da2, 0); },
               "run_synthetic_compute(0 units)");

  // both devices still work; nothing of B was touched by A's failures
  da.release();
  da2.release();
  db.release();
  check_round_trip(a, xa);
  Transfer xb(b);
  check_round_trip(b, xb);
  CHECK(sb.value() == 0);
}

CONFORMANCE_CASE("bad input: double release, use after release") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  HostBuffer host = dev.host_pool().allocate(1024);
  DeviceBuffer buf = dev.pool().allocate(1024, owner);
  buf.release();
  CHECK_FALSE(buf.valid());
  expect_error(kInvalid, [&] { buf.release(); }, "release twice");
  expect_error(kInvalid, [&] { buf.release_after(owner.mark()); }, "release_after after release");
  expect_error(kInvalid, [&] { (void)buf.size(); }, "size after release");
  expect_error(kInvalid, [&] { (void)xfer.download(buf, host); }, "download(released buffer)");
  expect_error(kInvalid, [&] { (void)xfer.upload_into(host, buf); }, "upload_into(released buffer)");

  DeviceBuffer moved_from = dev.pool().allocate(1024, owner);
  DeviceBuffer target = std::move(moved_from);
  expect_error(kInvalid, [&] { moved_from.release(); }, "release of a moved-from buffer");  // NOLINT
  CHECK(target.valid());
  target.release_after(owner.mark());
  expect_error(kInvalid, [&] { target.release(); }, "release after release_after");

  Upload up = xfer.upload(host, owner);
  up.buffer.release();
  expect_error(kInvalid, [&] { up.buffer.release(); }, "release an upload twice");
  const PoolBudget b = dev.pool().get_budget();
  CHECK(b.requested_bytes == 0);
  CHECK_NOTHROW(dev.pool().validate());
  check_round_trip(dev, xfer);
}

CONFORMANCE_CASE("bad input: use after the device is closed") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  TimelineSemaphore sem = dev.create_semaphore();
  HostBuffer host = dev.host_pool().allocate(4096);
  DeviceBuffer buf = dev.pool().allocate(4096, owner);
  auto xfer = std::make_unique<Transfer>(dev);
  conformance::finish_device(dev);
  CHECK_FALSE(dev.is_open());
  CHECK_NOTHROW(dev.close());  // idempotent

  expect_error(kInvalid, [&] { (void)dev.pool().allocate(16, owner); }, "allocate after close");
  expect_error(kInvalid, [&] { (void)dev.host_pool().allocate(16); }, "host allocate after close");
  expect_error(kInvalid, [&] { (void)dev.create_semaphore(); }, "create_semaphore after close");
  expect_error(kInvalid, [&] { (void)dev.create_queue(QueueRole::compute); },
               "create_queue after close");
  expect_error(kInvalid, [&] { (void)xfer->upload(host, owner); }, "upload after close");
  expect_error(kInvalid, [&] { (void)Transfer(dev); }, "Transfer after close");
  expect_error(kInvalid, [&] { (void)owner.mark(); }, "queue.mark after close");
  expect_error(kInvalid, [&] { owner.synchronize(); }, "queue.synchronize after close");
  expect_error(kInvalid, [&] { sem.signal(1); }, "semaphore.signal after close");
  expect_error(kInvalid, [&] { (void)sem.value(); }, "semaphore.value after close");
  expect_error(kInvalid, [&] { (void)buf.size(); }, "buffer accessor after close");
  CHECK_NOTHROW(buf.release());  // inert: a no-op after close
  CHECK_NOTHROW(xfer.reset());   // destroying the transfer after close is safe
  // host memory of a closed device is not used by anything
  host = HostBuffer{};
}

CONFORMANCE_CASE("bad input: adopt_queue") {
  Device dev = conformance::open_device();
  if (dev.backend() != Backend::host) {
    MESSAGE("adoption on " << to_string(dev.backend()) << " is tested in tests/backends/"
                           << to_string(dev.backend()) << ".cpp");
    return;
  }
  NativeQueue native;
  int dummy = 0;
  native.handle = &dummy;
  expect_error(ErrorCode::unsupported, [&] { (void)dev.adopt_queue(QueueRole::compute, native); },
               "adopt_queue on the host backend");
  Transfer xfer(dev);
  check_round_trip(dev, xfer);
}

CONFORMANCE_CASE("bad input: errors name the caller's file and line") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  TimelineSemaphore sem = dev.create_semaphore(5);
  constexpr bool caller_locations = conformance::kCallerLocations;
  if (!caller_locations) MESSAGE("std::source_location defaults name the declaration here: only the throw is checked");
  auto check_location = [](auto&& fn, std::uint_least32_t line, const char* what) {
    try {
      fn();
      FAIL(what << ": nothing thrown");
    } catch (const Error& e) {
      if (!caller_locations) return;
      const std::string text = e.what();
      CHECK_MESSAGE(text.find("bad_input.cpp") != std::string::npos, what << ": " << text);
      CHECK_MESSAGE(std::string(e.where().file_name()).find("bad_input.cpp") != std::string::npos,
                    what << ": " << e.where().file_name());
      CHECK_MESSAGE(e.where().line() == line, what << ": " << text);
      CHECK_MESSAGE(text.find(":" + std::to_string(line)) != std::string::npos, what << ": " << text);
    }
  };
  // clang-format off
  std::uint_least32_t l1 = __LINE__; check_location([&] { (void)dev.pool().allocate(0, owner); }, l1, "allocate");
  std::uint_least32_t l2 = __LINE__; check_location([&] { sem.signal(1); }, l2, "signal");
  std::uint_least32_t l3 = __LINE__; check_location([&] { (void)parse_backend("nope"); }, l3, "parse_backend");
  std::uint_least32_t l4 = __LINE__; check_location([&] { (void)xfer.upload(std::span<const std::byte>{}, owner); }, l4, "upload");
  std::uint_least32_t l5 = __LINE__; check_location([&] { (void)dev.host_pool().allocate(0); }, l5, "host allocate");
  // clang-format on
}

CONFORMANCE_CASE("device: open_default picks a backend that is present") {
  Device best = Device::open_default();
  REQUIRE(best.is_open());
  const Backend b = best.backend();
  CHECK(Device::built_with(b));
  CHECK(Device::count(b) > 0);
  CHECK(best.capabilities().backend == b);
  if (Device::count(Backend::cuda) > 0) CHECK(b == Backend::cuda);  // CUDA ranks first
  if (Device::count(Backend::cuda) == 0 && Device::count(Backend::vulkan) == 0 &&
      Device::count(Backend::hip) == 0) {
    CHECK(b == Backend::host);
  }
  if (b == Backend::host) CHECK_FALSE(best.capabilities().is_gpu);
  MESSAGE("open_default chose " << to_string(b) << ": " << best.capabilities().name);
  best.close();
}
