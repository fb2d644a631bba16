// SPDX-License-Identifier: MIT
// Wait and signal lists of Transfer calls (UploadOptions::wait/signal, CallOptions): a copy
// ordered after a point an engine signals, a copy that signals an engine's semaphore, and the
// refusal of every bad list before anything is enqueued.
//
// The host stands in for the engine: it signals the points the copies wait for, only after
// the call returned, and writes the bytes the copy must see just before signalling. A copy
// that ignored its wait list would read (or write) host memory before that, which shows as
// wrong bytes, most reliably under the host backend's latency injection.
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "conformance.hpp"
#include "reference.hpp"

using namespace ferry;
using namespace std::chrono_literals;
using conformance::expect_error;
using conformance::fill_pattern;
using conformance::first_mismatch;

namespace {

constexpr std::uint64_t kBytes = 256 * 1024 + 3;
/// How long a case gives a copy that ignored its wait list to run before the point is signalled.
constexpr auto kGrace = 20ms;

using Points = std::vector<TimelinePoint>;

/// An engine queue: another compute queue where the device has one, else the compute queue.
Queue engine_queue(Device& dev) {
  Queue q = conformance::try_create_queue(dev, QueueRole::compute, "engine");
  return q ? q : dev.queue(QueueRole::compute);
}

/// A device buffer of `owner` holding pattern `seed` (the upload complete).
DeviceBuffer device_pattern(Device& dev, Transfer& xfer, const Queue& owner, std::uint64_t seed) {
  HostBuffer h = dev.host_pool().allocate(kBytes);
  fill_pattern(h.span(), seed);
  Upload up = xfer.upload(h, owner);
  up.ready.wait(30s);
  return std::move(up.buffer);
}

/// The contents of `buffer`, downloaded into a fresh pinned buffer.
HostBuffer read_back(Device& dev, Transfer& xfer, const DeviceBuffer& buffer) {
  HostBuffer h = dev.host_pool().allocate(buffer.size());
  xfer.download(buffer, h).wait(30s);
  return h;
}

}  // namespace

CONFORMANCE_CASE("wait/signal: a copy waits for an engine-signalled point") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  TimelineSemaphore engine = dev.create_semaphore(0);

  SUBCASE("pinned upload: the source is read only after the point") {
    ferry_bench::ReferenceUploads uploads(dev, xfer, owner);
    using ferry_bench::Strategy;
    for (Strategy mode : {Strategy::owner_owned, Strategy::executor_owned}) {
      CAPTURE(ferry_bench::to_string(mode));
      const std::uint64_t v = engine.value() + 1;
      HostBuffer src = dev.host_pool().allocate(kBytes);
      fill_pattern(src.span(), 1);
      Upload up = uploads.upload(mode, src, {.wait = {engine.at(v)}});
      fill_pattern(src.span(), 2);  // the engine produces the data, then signals
      std::this_thread::sleep_for(kGrace);
      CHECK_FALSE_MESSAGE(up.ready.reached(), "the upload completed before its wait point was signalled");
      engine.signal(v);
      up.ready.wait(30s);
      HostBuffer back = read_back(dev, xfer, up.buffer);
      CHECK(first_mismatch(back.span(), 2) == -1);
      up.buffer.release();
    }
  }

  SUBCASE("pinned upload of a range, and upload_into") {
    const std::uint64_t v = engine.value() + 1;
    HostBuffer src = dev.host_pool().allocate(2 * kBytes);
    fill_pattern(src.span(), 3);
    DeviceBuffer into = dev.pool().allocate(kBytes, owner);
    HostBuffer whole = dev.host_pool().allocate(kBytes);
    fill_pattern(whole.span(), 3);
    Upload range = xfer.upload(src, kBytes, kBytes, owner, {.wait = {engine.at(v)}});
    TimelinePoint done = xfer.upload_into(whole, into, {.wait = {engine.at(v)}});
    fill_pattern(src.span().subspan(kBytes), 4);
    fill_pattern(whole.span(), 5);
    std::this_thread::sleep_for(kGrace);
    CHECK_FALSE(range.ready.reached());
    CHECK_FALSE(done.reached());
    engine.signal(v);
    HostBuffer a = read_back(dev, xfer, range.buffer);
    HostBuffer b = read_back(dev, xfer, into);
    CHECK(first_mismatch(a.span(), 4) == -1);
    CHECK(first_mismatch(b.span(), 5) == -1);
    range.buffer.release();
    into.release();
  }

  SUBCASE("download into pinned memory: the destination is written only after the point") {
    DeviceBuffer d = device_pattern(dev, xfer, owner, 6);
    HostBuffer dst = dev.host_pool().allocate(kBytes);
    const std::uint64_t v = engine.value() + 1;
    TimelinePoint done = xfer.download(d, dst, 0, {.wait = {engine.at(v)}});
    fill_pattern(dst.span(), 7);  // the engine's last use of the destination, before the point
    std::this_thread::sleep_for(kGrace);
    CHECK_FALSE(done.reached());
    engine.signal(v);
    done.wait(30s);
    CHECK(first_mismatch(dst.span(), 6) == -1);
    d.release();
  }

  SUBCASE("device-to-device copy") {
    DeviceBuffer s = device_pattern(dev, xfer, owner, 8);
    DeviceBuffer t = dev.pool().allocate(kBytes, owner);
    const std::uint64_t v = engine.value() + 1;
    TimelinePoint done = xfer.copy(s, t, 0, {.wait = {engine.at(v)}});
    std::this_thread::sleep_for(kGrace);
    CHECK_FALSE(done.reached());
    engine.signal(v);
    done.wait(30s);
    HostBuffer back = read_back(dev, xfer, t);
    CHECK(first_mismatch(back.span(), 8) == -1);
    s.release();
    t.release();
  }

  SUBCASE("pageable upload: the device copy waits; the source is read during the call") {
    std::vector<std::byte> src(kBytes);
    fill_pattern(src, 9);
    const std::uint64_t v = engine.value() + 1;
    Upload up = xfer.upload(std::span<const std::byte>(src), owner, {.wait = {engine.at(v)}});
    fill_pattern(src, 10);  // documented: the source may be reused once the call returns
    std::this_thread::sleep_for(kGrace);
    CHECK_FALSE(up.ready.reached());
    engine.signal(v);
    HostBuffer back = read_back(dev, xfer, up.buffer);
    CHECK(first_mismatch(back.span(), 9) == -1);
    up.buffer.release();
  }

  SUBCASE("blocking calls: another thread signals, the call returns after it") {
    // The calling thread is blocked, so the point can only come from another thread: a host
    // wait that another thread's host signal ends, which validation layers before 1.3.259 can
    // stall for their 10 s state timeout (the Vulkan backend prints that message uncounted;
    // see kSignalBehindWait in backends/vulkan/vulkan_device.cpp).
    // The blocking reference: the copy runs on the owner queue, after the point.
    ferry_bench::ReferenceUploads uploads(dev, xfer, owner);
    HostBuffer src = dev.host_pool().allocate(kBytes);
    fill_pattern(src.span(), 11);
    const std::uint64_t v = engine.value() + 1;
    std::thread producer([&] {
      std::this_thread::sleep_for(kGrace);
      fill_pattern(src.span(), 12);
      engine.signal(v);
    });
    Upload up = uploads.blocking(src, {.wait = {engine.at(v)}});
    CHECK(engine.at(v).reached());
    producer.join();
    HostBuffer back = read_back(dev, xfer, up.buffer);
    CHECK(first_mismatch(back.span(), 12) == -1);

    // Pageable download: blocks until the bytes are in host memory, which is after the point.
    const std::uint64_t w = v + 1;
    std::thread signaller([&] {
      std::this_thread::sleep_for(kGrace);
      engine.signal(w);
    });
    std::vector<std::byte> dst(kBytes);
    xfer.download(up.buffer, std::span<std::byte>(dst), {.wait = {engine.at(w)}});
    CHECK_MESSAGE(engine.at(w).reached(), "the pageable download returned before its wait point was signalled");
    signaller.join();
    CHECK(first_mismatch(dst, 12) == -1);
    up.buffer.release();
  }

  SUBCASE("several points, empty points, points of queues") {
    TimelineSemaphore other = dev.create_semaphore(0);
    Queue eq = engine_queue(dev);
    eq.wait(other.at(1));
    TimelinePoint eq_done = eq.mark();  // another queue's progress point, held behind `other`
    const std::uint64_t v = engine.value() + 1;
    HostBuffer src = dev.host_pool().allocate(kBytes);
    fill_pattern(src.span(), 13);
    Upload up = xfer.upload(src, owner, {.wait = {TimelinePoint{}, engine.at(v), eq_done, other.at(1)}});
    std::this_thread::sleep_for(kGrace);
    CHECK_FALSE(up.ready.reached());
    engine.signal(v);  // one of the points: not enough
    std::this_thread::sleep_for(kGrace);
    CHECK_FALSE(up.ready.reached());
    other.signal(1);
    up.ready.wait(30s);
    HostBuffer back = read_back(dev, xfer, up.buffer);
    CHECK(first_mismatch(back.span(), 13) == -1);
    up.buffer.release();
  }
}

CONFORMANCE_CASE("wait/signal: a copy signals an engine semaphore") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  TimelineSemaphore sem = dev.create_semaphore(0);

  SUBCASE("download: a host wait on the signal sees the bytes") {
    TimelineSemaphore gate = dev.create_semaphore(0);
    DeviceBuffer d = device_pattern(dev, xfer, owner, 21);
    HostBuffer dst = dev.host_pool().allocate(kBytes);
    std::memset(dst.data(), 0, kBytes);
    (void)xfer.download(d, dst, 0, {.wait = {gate.at(1)}, .signal = {sem.at(1)}});
    std::this_thread::sleep_for(kGrace);
    CHECK_FALSE(sem.at(1).reached());
    gate.signal(1);
    sem.wait(1, 30s);  // the returned point is not waited for: the signal alone orders the read
    CHECK(first_mismatch(dst.span(), 21) == -1);
    d.release();
  }

  SUBCASE("upload chained into an engine queue with no host round trip") {
    // engine point -> copy -> signal -> the engine's queue waits -> the engine's work.
    TimelineSemaphore produced = dev.create_semaphore(0);
    TimelineSemaphore consumed = dev.create_semaphore(0);
    Queue eq = engine_queue(dev);
    HostBuffer src = dev.host_pool().allocate(kBytes);
    fill_pattern(src.span(), 22);
    Upload up = xfer.upload(src, eq, {.owner_waits = false, .wait = {produced.at(1)}, .signal = {sem.at(1)}});
    eq.wait(sem.at(1));  // the engine places the wait itself
    DeviceBuffer out;
    if (dev.capabilities().synthetic_compute) {
      out = dev.pool().allocate(kBytes, eq);
      run_synthetic_compute(eq, up.buffer, out);
    }
    eq.signal(consumed.at(1));
    std::this_thread::sleep_for(kGrace);
    CHECK_FALSE(sem.at(1).reached());
    CHECK_FALSE_MESSAGE(consumed.at(1).reached(), "the engine queue ran before the copy's signal");
    const std::uint64_t host_waits = dev.host_waits();
    produced.signal(1);
    consumed.wait(1, 30s);
    CHECK(dev.host_waits() <= host_waits + 1);  // the one wait above: nothing inside the chain
    CHECK(up.ready.reached());                   // the signal follows the copy's completion
    const bool computed = static_cast<bool>(out);
    HostBuffer back = read_back(dev, xfer, computed ? out : up.buffer);
    CHECK(first_mismatch(back.span(), 22, computed ? 1 : 0) == -1);
    if (computed) out.release();
    up.buffer.release();
  }

  SUBCASE("every kind of call signals; several points; a download ordered on the signal") {
    TimelineSemaphore second = dev.create_semaphore(10);
    HostBuffer src = dev.host_pool().allocate(kBytes);
    fill_pattern(src.span(), 23);
    Upload up = xfer.upload(src, owner, {.signal = {sem.at(3), second.at(11), sem.at(5)}});
    sem.wait(5, 30s);
    second.wait(11, 30s);
    CHECK(sem.value() == 5);
    CHECK(second.value() == 11);

    // A download ordered on the upload's signal only (the engine's chain).
    HostBuffer dst = dev.host_pool().allocate(kBytes);
    (void)xfer.download(up.buffer, dst, 0, {.wait = {sem.at(5)}, .signal = {sem.at(6)}});
    sem.wait(6, 30s);
    CHECK(first_mismatch(dst.span(), 23) == -1);

    std::vector<std::byte> pageable(kBytes);
    fill_pattern(pageable, 24);
    Upload pup = xfer.upload(std::span<const std::byte>(pageable), owner, {.signal = {sem.at(7)}});
    const HostView views[2] = {{pageable.data(), 1000}, {pageable.data() + 1000, kBytes - 1000}};
    UploadBatch batch = xfer.upload(std::span<const HostView>(views), owner, {.signal = {sem.at(8)}});
    // A Transfer over the owner queue (the blocking reference) signals there: a semaphore of
    // its own, since values of one semaphore signalled from two queues must be reached in
    // increasing order.
    ferry_bench::ReferenceUploads uploads(dev, xfer, owner);
    TimelineSemaphore on_owner = dev.create_semaphore(0);
    Upload blocking = uploads.blocking(src, {.signal = {on_owner.at(1)}});
    on_owner.wait(1, 30s);
    DeviceBuffer into = dev.pool().allocate(kBytes, owner);
    (void)xfer.upload_into(src, into, {.signal = {sem.at(9)}});
    DeviceBuffer copied = dev.pool().allocate(kBytes, owner);
    (void)xfer.copy(up.buffer, copied, 0, {.signal = {sem.at(10)}});
    sem.wait(10, 30s);
    for (const DeviceBuffer* b : {&pup.buffer, &blocking.buffer, &into, &copied}) {
      HostBuffer back = read_back(dev, xfer, *b);
      CHECK(first_mismatch(back.span(), b == &pup.buffer ? 24 : 23) == -1);
    }
    std::vector<std::byte> whole(kBytes);
    xfer.download(pup.buffer, std::span<std::byte>(whole), {.signal = {sem.at(12)}});
    CHECK(first_mismatch(whole, 24) == -1);
    std::vector<std::byte> a(1000), b(kBytes - 1000);
    const HostSpan spans[2] = {{a.data(), a.size()}, {b.data(), b.size()}};
    xfer.download(batch, std::span<const HostSpan>(spans), {.signal = {sem.at(13)}});
    const DownloadView dv[1] = {{0, whole.data(), 1000}};
    xfer.download(batch.buffer, std::span<const DownloadView>(dv), {.signal = {sem.at(14)}});
    sem.wait(14, 30s);
    CHECK(std::memcmp(a.data(), pageable.data(), a.size()) == 0);
    CHECK(std::memcmp(b.data(), pageable.data() + 1000, b.size()) == 0);
    for (auto* b2 : {&up.buffer, &pup.buffer, &batch.buffer, &blocking.buffer, &into, &copied}) b2->release();
  }
}

CONFORMANCE_CASE("wait/signal: bad lists are refused and enqueue nothing") {
  Device dev = conformance::open_device();
  Device other = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  Queue exec = xfer.executor();
  TimelineSemaphore s = dev.create_semaphore(5);
  TimelineSemaphore foreign = other.create_semaphore(0);
  TimelineSemaphore held = dev.create_semaphore(0);
  TimelineSemaphore gate = dev.create_semaphore(0);

  HostBuffer src = dev.host_pool().allocate(kBytes);
  fill_pattern(src.span(), 31);
  Upload prior = xfer.upload(src, owner);
  prior.ready.wait(30s);
  DeviceBuffer dst = dev.pool().allocate(kBytes, owner);
  HostBuffer hdst = dev.host_pool().allocate(kBytes);
  std::vector<std::byte> pageable(kBytes);
  const HostView views[1] = {{pageable.data(), pageable.size()}};
  const UploadBatch batch = xfer.upload(std::span<const HostView>(views), owner);
  batch.ready.wait(30s);
  const HostSpan spans[1] = {{pageable.data(), pageable.size()}};
  const DownloadView dviews[1] = {{0, pageable.data(), kBytes}};

  // A signal enqueued but not reached yet counts: `held` is to reach 10 once `gate` opens.
  Queue eq = engine_queue(dev);
  eq.wait(gate.at(1));
  eq.signal(held.at(10));

  struct Bad {
    const char* what;
    Points wait;
    Points signal;
  };
  const std::vector<Bad> bad = {
      {"an empty signal point", {}, {TimelinePoint{}}},
      {"a signal on a queue's private timeline (mark)", {}, {owner.mark()}},
      {"a signal on a queue's private timeline (ready point)", {}, {prior.ready}},
      {"a signal at the semaphore's value", {}, {s.at(5)}},
      {"a signal below the semaphore's value", {}, {s.at(3)}},
      {"a signal at a value enqueued for signal", {}, {held.at(10)}},
      {"a repeated signal value", {}, {s.at(7), s.at(7)}},
      {"decreasing signal values", {}, {s.at(8), s.at(7)}},
      {"a valid signal, then a bad one", {}, {s.at(6), TimelinePoint{}}},
      {"a signal on another device's semaphore", {}, {foreign.at(1)}},
      {"a wait on another device's semaphore", {foreign.at(1)}, {}},
      {"a wait after a valid one on another device's semaphore", {s.at(1), foreign.at(1)}, {}},
      {"a wait at the value of a signal", {s.at(7)}, {s.at(7)}},
      {"a wait above the value of a signal", {s.at(9)}, {s.at(8)}},
  };

  using CallFn = std::function<void(const Points&, const Points&)>;
  const std::vector<std::pair<const char*, CallFn>> calls = {
      {"upload(HostBuffer)", [&](const Points& w, const Points& g) { (void)xfer.upload(src, owner, {.wait = w, .signal = g}); }},
      {"upload(HostBuffer range)",
       [&](const Points& w, const Points& g) { (void)xfer.upload(src, 1, 100, owner, {.wait = w, .signal = g}); }},
      {"upload(span)",
       [&](const Points& w, const Points& g) {
         (void)xfer.upload(std::span<const std::byte>(pageable), owner, {.wait = w, .signal = g});
       }},
      {"upload(batch)",
       [&](const Points& w, const Points& g) {
         (void)xfer.upload(std::span<const HostView>(views), owner, {.wait = w, .signal = g});
       }},
      {"upload_into", [&](const Points& w, const Points& g) { (void)xfer.upload_into(src, dst, {.wait = w, .signal = g}); }},
      {"download(HostBuffer)",
       [&](const Points& w, const Points& g) { (void)xfer.download(prior.buffer, hdst, 0, {.wait = w, .signal = g}); }},
      {"download(span)",
       [&](const Points& w, const Points& g) {
         xfer.download(prior.buffer, std::span<std::byte>(pageable), {.wait = w, .signal = g});
       }},
      {"download(DownloadView batch)",
       [&](const Points& w, const Points& g) {
         xfer.download(batch.buffer, std::span<const DownloadView>(dviews), {.wait = w, .signal = g});
       }},
      {"download(UploadBatch)",
       [&](const Points& w, const Points& g) { xfer.download(batch, std::span<const HostSpan>(spans), {.wait = w, .signal = g}); }},
      {"copy", [&](const Points& w, const Points& g) { (void)xfer.copy(prior.buffer, dst, 0, {.wait = w, .signal = g}); }},
  };

  const std::uint64_t exec_mark = exec.mark().value;
  const std::uint64_t owner_mark = owner.mark().value;
  const std::uint64_t engine_mark = eq.mark().value;
  const std::uint64_t allocations = dev.pool().get_budget().allocations;
  for (const auto& [name, call] : calls) {
    for (const Bad& b : bad) {
      const std::string label = std::string(name) + " with " + b.what;
      try {
        call(b.wait, b.signal);
        FAIL_CHECK("expected ferry::Error(invalid_argument) from " << label << ", nothing was thrown");
      } catch (const Error& e) {
        CHECK_MESSAGE(e.code() == ErrorCode::invalid_argument, label << ": " << e.what());
        CHECK_MESSAGE(e.message().find("Transfer::") == 0, label << ": " << e.what());
        CHECK_MESSAGE(e.message().find(" point ") != std::string::npos, label << ": " << e.what());
        CHECK_MESSAGE((!conformance::kCallerLocations ||
                       std::string(e.where().file_name()).find("wait_signal.cpp") != std::string::npos),
                      label << ": " << e.what());
      }
    }
  }
  // Nothing was enqueued or allocated, and no value was taken from the semaphores.
  CHECK(exec.mark().value == exec_mark);
  CHECK(owner.mark().value == owner_mark);
  CHECK(eq.mark().value == engine_mark);
  CHECK(dev.pool().get_budget().allocations == allocations);
  CHECK(s.value() == 5);
  CHECK(foreign.value() == 0);
  CHECK_NOTHROW(s.signal(6));  // the refused signal of 6 reserved nothing
  gate.signal(1);
  held.wait(10, 30s);
  eq.synchronize();

  // The calls still work with good lists, on the same objects.
  (void)xfer.download(prior.buffer, hdst, 0, {.wait = {s.at(6), TimelinePoint{}}, .signal = {s.at(7), held.at(11)}});
  s.wait(7, 30s);
  held.wait(11, 30s);
  CHECK(first_mismatch(hdst.span(), 31) == -1);
  prior.buffer.release();
  dst.release();
  conformance::check_round_trip(dev, xfer);
}

CONFORMANCE_CASE("wait/signal: a semaphore may be dropped while queued work still waits for or signals it") {
  // The caller's TimelineSemaphore may go as soon as it signalled it (or saw it signalled):
  // the queues' pending operations on it keep it alive until they ran. Under the host
  // backend's latency injection the queue's worker reaches the wait after the drop, so a
  // semaphore freed with the handle shows as a use after free under AddressSanitizer.
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  HostBuffer src = dev.host_pool().allocate(kBytes);
  HostBuffer back = dev.host_pool().allocate(kBytes);
  for (int round = 0; round < 20; ++round) {
    CAPTURE(round);
    fill_pattern(src.span(), 900 + static_cast<std::uint64_t>(round));
    TimelinePoint copied;
    Upload up;
    {
      TimelineSemaphore gate = dev.create_semaphore(0);
      TimelineSemaphore told = dev.create_semaphore(0);
      owner.wait(gate.at(1));                             // a queue's wait
      up = xfer.upload(src, owner, {.wait = {gate.at(1)}, .signal = {told.at(1)}});  // a call's lists
      owner.signal(told.at(2));                           // a queue's signal
      gate.signal(1);
    }  // both handles dropped with the waits and signals possibly still queued
    xfer.download(up.buffer, back).wait(30s);
    CHECK(first_mismatch(back.span(), 900 + static_cast<std::uint64_t>(round)) == -1);
    owner.synchronize(30s);
    up.buffer.release();
  }
}
