// SPDX-License-Identifier: MIT
// The front end on the null backend (Backend::null: every operation accepted, no work done):
// what ferry itself keeps track of, with no driver underneath: ordering bookkeeping, pool
// statistics, error paths. Its own cases only, with the conformance fixture (pool invariants
// checked at the end of every case): the backend-neutral cases check bytes, or ordering that
// only a device doing work can show, and the null device moves no bytes and runs no work.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "conformance.hpp"

using namespace ferry;

namespace {

constexpr std::uint64_t kMiB = 1 << 20;

/// A null device whose queue signals are seen reached `lag` signals late (FERRY_NULL_LAG).
Device open_lagging(int lag) {
  const std::string value = std::to_string(lag);
  REQUIRE(::setenv("FERRY_NULL_LAG", value.c_str(), 1) == 0);
  Device dev = conformance::open_device();
  REQUIRE(::unsetenv("FERRY_NULL_LAG") == 0);
  return dev;
}

}  // namespace

CONFORMANCE_CASE("null: a device of its own backend, neither host nor GPU") {
  Device dev = conformance::open_device();
  const Capabilities& caps = dev.capabilities();
  CHECK(dev.backend() == Backend::null);
  CHECK(caps.backend == Backend::null);
  CHECK_FALSE(caps.is_gpu);
  CHECK(Device::built_with(Backend::null));
  CHECK(Device::count(Backend::null) == 1);
  try {
    (void)Device::open({.backend = Backend::null, .ordinal = 1});
    FAIL("ordinal 1 of one device was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK_MESSAGE(e.message().find("ordinal 1 out of range (1 device)") != std::string::npos, e.message());
  }
  MESSAGE(caps.name << ": " << caps.notes);
}

CONFORMANCE_CASE("null: device and pinned memory are real host memory") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  DeviceBuffer buffer = dev.pool().allocate(kMiB + 3, owner);
  const DeviceView view = buffer.view();
  REQUIRE(view.address != 0);
  std::memset(reinterpret_cast<void*>(view.address), 0x5a, view.size);  // valid for its size
  HostBuffer host = dev.host_pool().allocate(kMiB);
  std::memset(host.data(), 0xa5, host.size());
  buffer.release();
}

CONFORMANCE_CASE("null: queue signals are reached at once; marks, waits and signals are booked") {
  Device dev = conformance::open_device();
  Queue compute = dev.queue(QueueRole::compute);
  Queue transfer = dev.queue(QueueRole::transfer);
  TimelineSemaphore user = dev.create_semaphore(1);
  const TimelinePoint a = compute.mark();
  compute.signal(user.at(2));  // work on the queue: its next mark is a new point
  const TimelinePoint b = compute.mark();
  CHECK(b.value > a.value);
  CHECK(a.reached());
  CHECK(b.reached());
  CHECK(user.value() == 2);
  transfer.wait(b);
  transfer.signal(user.at(5));
  CHECK(user.value() == 5);
  user.signal(7);
  CHECK(user.value() == 7);
  conformance::expect_error(ErrorCode::invalid_argument, [&] { user.signal(7); },
                            "a host signal not above the value");
  conformance::expect_error(ErrorCode::invalid_argument, [&] { compute.signal(user.at(6)); },
                            "a queue signal below the value");
  conformance::expect_error(ErrorCode::invalid_argument, [&] { transfer.signal(b); },
                            "a signal of a queue's private timeline");
  CHECK_FALSE(user.try_wait(8, std::chrono::milliseconds(1)));  // nobody signals 8
  conformance::expect_error(ErrorCode::timeout, [&] { user.wait(9, std::chrono::milliseconds(1)); },
                            "wait for a value nobody signals");
  CHECK(user.at(7).reached());
  CHECK_FALSE(user.at(8).reached());
  CHECK(TimelinePoint{}.reached());
  compute.synchronize();
  transfer.synchronize();
}

CONFORMANCE_CASE("null: adopt_queue takes any handle but none") {
  Device dev = conformance::open_device();
  int engine_queue = 0;
  Queue adopted = dev.adopt_queue(QueueRole::compute, {.handle = &engine_queue}, "engine");
  CHECK(adopted.name() == "engine");
  CHECK(adopted.role() == QueueRole::compute);
  DeviceBuffer buffer = dev.pool().allocate(4096, adopted);
  CHECK(buffer.owner() == adopted);
  buffer.release();
  adopted.synchronize();
  conformance::expect_error(ErrorCode::invalid_argument,
                            [&] { (void)dev.adopt_queue(QueueRole::compute, NativeQueue{}); },
                            "adopt_queue(null handle)");
}

CONFORMANCE_CASE("null: images are not supported, and say so with a typed error") {
  Device dev = conformance::open_device();
  std::vector<std::byte> memory(4096);
  const ImageDesc desc{.format = ImageFormat::rgba8_unorm, .width = 16, .height = 16};
  conformance::expect_error(ErrorCode::unsupported,
                            [&] { (void)dev.adopt_image(NativeImage::from_host(memory.data()), desc,
                                                        dev.queue(QueueRole::compute)); },
                            "adopt_image on the null backend");
  // The front end's own checks come first, as on every backend.
  conformance::expect_error(ErrorCode::invalid_argument,
                            [&] { (void)dev.adopt_image(NativeImage::from_host(memory.data()), ImageDesc{},
                                                        dev.queue(QueueRole::compute)); },
                            "adopt_image with no format");
}

CONFORMANCE_CASE("null: error paths: sizes, ranges, foreign and released objects, a closed device") {
  Device dev = conformance::open_device();
  Device other = Device::open({.backend = Backend::null});
  Queue owner = dev.queue(QueueRole::compute);
  Queue foreign = other.queue(QueueRole::compute);
  Transfer xfer(dev);
  HostBuffer host = dev.host_pool().allocate(4096);
  constexpr auto kInvalid = ErrorCode::invalid_argument;
  conformance::expect_error(kInvalid, [&] { (void)dev.pool().allocate(0, owner); }, "allocate(0)");
  conformance::expect_error(kInvalid, [&] { (void)dev.pool().allocate(16, foreign); },
                            "allocate(foreign owner)");
  conformance::expect_error(kInvalid, [&] { (void)xfer.upload(host, 4000, 200, owner); },
                            "upload(range past the end)");
  conformance::expect_error(kInvalid, [&] { (void)xfer.upload(host, foreign); }, "upload(foreign owner)");
  conformance::expect_error(kInvalid, [&] { owner.wait(foreign.mark()); }, "wait(point of another device)");
  DeviceBuffer buffer = dev.pool().allocate(4096, owner);
  buffer.release();
  conformance::expect_error(kInvalid, [&] { buffer.release(); }, "release twice");
  conformance::expect_error(kInvalid, [&] { (void)buffer.size(); }, "size after release");
  CHECK(dev.pool().get_budget().requested_bytes == 0);
  other.close();
  conformance::expect_error(kInvalid, [&] { (void)foreign.mark(); }, "mark on a closed device");
  conformance::expect_error(kInvalid, [&] { (void)other.pool().allocate(16, foreign); },
                            "allocate on a closed device");
}

CONFORMANCE_CASE("null: a device that runs behind: pending points and pending free blocks") {
  Device dev = open_lagging(4);
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  HostBuffer host = dev.host_pool().allocate(kMiB);
  Upload up = xfer.upload(host, owner);
  CHECK_FALSE(up.ready.reached());         // four signals behind
  up.ready.wait(std::chrono::seconds(5));  // an enqueued value: the device gets there
  CHECK(up.ready.reached());

  Upload second = xfer.upload(host, owner);
  second.buffer.release();  // stream-ordered: its free point is not reached yet
  up.buffer.release();
  const PoolDetailedStatistics stats = dev.pool().calculate_statistics();
  CHECK(stats.allocated_blocks == 0);
  CHECK(stats.pending_free_blocks >= 1);
  owner.synchronize();
  CHECK(dev.pool().calculate_statistics().pending_free_blocks == 0);
}

CONFORMANCE_CASE("null: pool statistics follow allocation, reuse, release and trim") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  DevicePool& pool = dev.pool();
  pool.reset_peaks();
  std::vector<DeviceBuffer> buffers;
  for (int i = 0; i < 4; ++i) buffers.push_back(pool.allocate(kMiB, owner, {.tag = "null stats"}));
  PoolBudget budget = pool.get_budget();
  CHECK(budget.allocations == 4);
  CHECK(budget.requested_bytes == 4 * kMiB);
  CHECK(budget.active_bytes >= 4 * kMiB);
  CHECK(budget.reserved_bytes >= budget.active_bytes);
  CHECK(budget.peak_active_bytes == budget.active_bytes);
  const std::uint64_t segments = budget.segment_allocations;
  const std::uint64_t first = buffers[0].view().address;
  buffers[0].release();
  DeviceBuffer reused = pool.allocate(kMiB, owner);  // the same owner: its own free block
  CHECK(reused.view().address == first);
  budget = pool.get_budget();
  CHECK(budget.segment_allocations == segments);
  CHECK(budget.allocations == 5);
  reused.release();
  for (auto& b : buffers) {
    if (b) b.release();
  }
  owner.synchronize();
  budget = pool.get_budget();
  CHECK(budget.active_bytes == 0);
  CHECK(budget.requested_bytes == 0);
  CHECK(budget.peak_active_bytes >= 4 * kMiB);
  CHECK(pool.trim() > 0);
  budget = pool.get_budget();
  CHECK(budget.segment_count == 0);
  CHECK(budget.reserved_bytes == 0);
}

CONFORMANCE_CASE("null: uploads, downloads and batches run through the whole front end") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  HostBuffer pinned = dev.host_pool().allocate(64 * 1024);
  std::vector<std::byte> pageable(3 * kMiB + 5);
  for (int i = 0; i < 16; ++i) {
    Upload a = xfer.upload(pinned, owner);
    Upload b = xfer.upload(std::span<const std::byte>(pageable), owner);
    CHECK(a.ready.reached());
    (void)xfer.download(a.buffer, pinned);
    xfer.download(b.buffer, std::span<std::byte>(pageable));
    a.buffer.release();
    b.buffer.release();
  }
  // A batch: inputs packed at 256-byte aligned offsets, and its mirror download.
  const std::vector<HostView> views = {{pageable.data(), 100}, {pageable.data() + 100, 3000}, {pinned.data(), 7}};
  UploadBatch batch = xfer.upload(std::span<const HostView>(views), owner);
  REQUIRE(batch.offsets.size() == views.size());
  CHECK(batch.offsets[0] == 0);
  CHECK(batch.offsets[1] == 256);
  CHECK(batch.offsets[2] == 256 + 3072);
  std::vector<DownloadView> back;
  for (std::size_t i = 0; i < views.size(); ++i) {
    back.push_back({.offset = batch.offsets[i], .data = pageable.data() + 4096 * i, .size = views[i].size});
  }
  xfer.download(batch.buffer, std::span<const DownloadView>(back));
  batch.buffer.release();
  owner.synchronize();
  CHECK(dev.pool().get_budget().active_bytes == 0);
}

int main(int argc, char** argv) {
  const Backend backend = Backend::null;
  if (int skip = conformance::presence_check(backend)) return skip;
  conformance::configure({.backend = backend, .validation = false});
  return conformance::run(argc, argv);
}
