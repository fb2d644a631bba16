// SPDX-License-Identifier: MIT
// Conformance: contracts a misusing caller meets. Each case pins one documented behaviour:
// the call is refused with a typed error naming the caller, or does what the header says,
// and the device keeps working afterwards.
#include <cstdint>
#include <string>

#include "conformance.hpp"

using namespace ferry;
using conformance::check_round_trip;
using conformance::expect_error;

namespace {

using conformance::kCallerLocations;

/// Runs `fn`, which must throw `code` from a call on line `line` of this file.
template <class Fn>
void expect_at(ErrorCode code, Fn&& fn, std::uint_least32_t line, const char* what) {
  try {
    fn();
    FAIL(what << ": nothing thrown");
  } catch (const Error& e) {
    const std::string text = e.what();
    CHECK_MESSAGE(e.code() == code, what << ": " << text);
    if (!kCallerLocations) return;
    CHECK_MESSAGE(std::string(e.where().file_name()).find("misuse.cpp") != std::string::npos,
                  what << ": " << text);
    CHECK_MESSAGE(e.where().line() == line, what << ": " << text);
    CHECK_MESSAGE(text.find("misuse.cpp:" + std::to_string(line)) != std::string::npos, what << ": " << text);
  }
}

}  // namespace

CONFORMANCE_CASE("misuse: release_after an empty point is a release") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  DevicePool& pool = dev.pool();
  const std::uint64_t active = pool.get_budget().active_bytes;
  DeviceBuffer b = pool.allocate(4096, owner);
  CHECK(pool.get_budget().active_bytes > active);
  CHECK_NOTHROW(b.release_after(TimelinePoint{}));
  CHECK_FALSE(b.valid());
  CHECK(pool.get_budget().active_bytes == active);
  expect_error(ErrorCode::invalid_argument, [&] { b.release(); }, "release after release_after({})");
  Transfer xfer(dev);
  check_round_trip(dev, xfer);
}

CONFORMANCE_CASE("misuse: staging_threads other than -1 or >= 0 is refused") {
  Device dev = conformance::open_device();
  for (const int bad : {-2, -5, -1000}) {
    CAPTURE(bad);
    TransferOptions o;
    o.staging_threads = bad;
    expect_error(ErrorCode::invalid_argument, [&] { Transfer t(dev, o); }, "Transfer with staging_threads < -1");
  }
  for (const int good : {-1, 0, 1}) {
    CAPTURE(good);
    TransferOptions o;
    o.staging_threads = good;
    Transfer t(dev, o);
    check_round_trip(dev, t);
  }
}

CONFORMANCE_CASE("misuse: accessor errors name the caller's line") {
  Device null_device;
  HostBuffer null_host;
  DeviceBuffer null_buffer;
  Queue null_queue;
  TimelineSemaphore null_semaphore;
  // clang-format off
  std::uint_least32_t l1 = __LINE__; expect_at(ErrorCode::invalid_argument, [&] { (void)null_device.capabilities(); }, l1, "capabilities");
  std::uint_least32_t l2 = __LINE__; expect_at(ErrorCode::invalid_argument, [&] { (void)null_host.data(); }, l2, "HostBuffer::data");
  std::uint_least32_t l3 = __LINE__; expect_at(ErrorCode::invalid_argument, [&] { (void)null_buffer.size(); }, l3, "DeviceBuffer::size");
  std::uint_least32_t l4 = __LINE__; expect_at(ErrorCode::invalid_argument, [&] { (void)null_queue.name(); }, l4, "Queue::name");
  std::uint_least32_t l5 = __LINE__; expect_at(ErrorCode::invalid_argument, [&] { (void)null_semaphore.value(); }, l5, "TimelineSemaphore::value");
  std::uint_least32_t l6 = __LINE__; expect_at(ErrorCode::invalid_argument, [&] { (void)null_device.pool(); }, l6, "Device::pool");
  // clang-format on

  Device dev = conformance::open_device();
  HostBuffer host = dev.host_pool().allocate(4096);
  DeviceBuffer buffer = dev.pool().allocate(4096, dev.queue(QueueRole::compute));
  TimelineSemaphore sem = dev.create_semaphore(0);
  conformance::finish_device(dev);  // closes it: every handle of it is inert now
  // clang-format off
  std::uint_least32_t l7 = __LINE__; expect_at(ErrorCode::invalid_argument, [&] { (void)host.data(); }, l7, "HostBuffer::data after close");
  std::uint_least32_t l8 = __LINE__; expect_at(ErrorCode::invalid_argument, [&] { (void)host.span(); }, l8, "HostBuffer::span after close");
  std::uint_least32_t l9 = __LINE__; expect_at(ErrorCode::invalid_argument, [&] { (void)dev.capabilities(); }, l9, "capabilities after close");
  std::uint_least32_t l10 = __LINE__; expect_at(ErrorCode::invalid_argument, [&] { (void)buffer.view(); }, l10, "DeviceBuffer::view after close");
  std::uint_least32_t l11 = __LINE__; expect_at(ErrorCode::invalid_argument, [&] { (void)sem.value(); }, l11, "TimelineSemaphore::value after close");
  // clang-format on
}

CONFORMANCE_CASE("misuse: create_queue on a device with no queue left names the call and the caller") {
  Device dev = conformance::open_device();
  std::vector<Queue> made;
  // Ask until the device refuses (lavapipe refuses the first; others give a bounded number).
  for (int i = 0; i < 40; ++i) {
    try {
      made.push_back(dev.create_queue(QueueRole::compute));
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::unsupported);
      CHECK_MESSAGE(std::string(e.message()).find("Device::create_queue") != std::string::npos, e.what());
      if (kCallerLocations) {
        CHECK_MESSAGE(std::string(e.where().file_name()).find("misuse.cpp") != std::string::npos, e.what());
      }
      break;
    }
  }
  MESSAGE(made.size() << " compute queues created before the device refused (or 40, the case's bound)");
  made.clear();
  Transfer xfer(dev);
  check_round_trip(dev, xfer);
}

CONFORMANCE_CASE("misuse: a queue's private timeline cannot be signalled by the user") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Queue other = dev.queue(QueueRole::transfer);
  // A gate keeps the owner's mark pending, so a forged signal would be visible as "reached".
  TimelineSemaphore gate = dev.create_semaphore(0);
  owner.wait(gate.at(1));
  const TimelinePoint mark = owner.mark();
  // A caller cannot name the mark's semaphore (no TimelineSemaphore handle of a queue's
  // private timeline exists outside ferry), so the points a caller holds are the only way in.
  TimelinePoint ahead = mark;
  ahead.value += 10;
  // clang-format off
  std::uint_least32_t l2 = __LINE__; expect_at(ErrorCode::invalid_argument, [&] { other.signal(ahead); }, l2, "queue signal of a private timeline");
  std::uint_least32_t l3 = __LINE__; expect_at(ErrorCode::invalid_argument, [&] { owner.signal(mark); }, l3, "queue signal of its own timeline");
  // clang-format on
  CHECK_FALSE(mark.reached());  // the owner is still behind its gate
  gate.signal(1);
  mark.wait(std::chrono::seconds(30));
  CHECK(mark.reached());
  Transfer xfer(dev);
  check_round_trip(dev, xfer);
}
