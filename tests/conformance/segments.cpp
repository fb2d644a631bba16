// SPDX-License-Identifier: MIT
// Conformance: segment callbacks (DevicePool::set_segment_callbacks), what an engine uses to
// register ferry's pool memory with NCCL, NIXL or UCX. Every segment is reported before any
// block of it is handed out and again before it is freed, with the same description; the
// blocks handed out lie inside the segment reported; failing or re-entrant callbacks leave the
// pool consistent.
#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "conformance.hpp"

using namespace ferry;

namespace {

constexpr std::uint64_t MiB = 1024 * 1024;

/// What the callbacks saw, in order.
struct Recorder {
  struct Event {
    bool created = false;
    SegmentInfo info{};
  };
  std::mutex mutex;
  std::vector<Event> events;
  std::map<std::uint64_t, SegmentInfo> live;  // id -> the info `created` reported
  std::vector<std::string> problems;

  SegmentCallbacks callbacks() {
    SegmentCallbacks c;
    c.created = [this](const SegmentInfo& s) {
      std::lock_guard lock(mutex);
      events.push_back({true, s});
      if (!live.emplace(s.id, s).second) problems.push_back("created twice: segment " + std::to_string(s.id));
    };
    c.destroyed = [this](const SegmentInfo& s) {
      std::lock_guard lock(mutex);
      events.push_back({false, s});
      auto it = live.find(s.id);
      if (it == live.end()) {
        problems.push_back("destroyed but never created: segment " + std::to_string(s.id));
        return;
      }
      const SegmentInfo& was = it->second;
      if (was.address != s.address || was.size != s.size || was.native != s.native ||
          was.vulkan_memory != s.vulkan_memory || was.pointer != s.pointer) {
        problems.push_back("segment " + std::to_string(s.id) + " destroyed with another description");
      }
      live.erase(it);
    };
    return c;
  }
  std::size_t created() {
    std::lock_guard lock(mutex);
    return static_cast<std::size_t>(std::count_if(events.begin(), events.end(), [](const Event& e) { return e.created; }));
  }
  std::size_t destroyed() {
    std::lock_guard lock(mutex);
    return events.size() - static_cast<std::size_t>(std::count_if(events.begin(), events.end(), [](const Event& e) { return e.created; }));
  }
};

/// Whether `buffer` lies inside the segment `s` as the segment's description says.
bool inside(const DeviceBuffer& buffer, const SegmentInfo& s) {
  const DeviceView v = buffer.view();
  if (v.native != s.native) return false;
  if (s.pointer) return v.address >= s.address && v.address + v.size <= s.address + s.size;
  return v.offset + v.size <= s.size;
}

/// The live segment that holds `buffer` (an id), or 0.
std::uint64_t holder(Recorder& r, const DeviceBuffer& buffer) {
  std::lock_guard lock(r.mutex);
  for (const auto& [id, s] : r.live) {
    if (inside(buffer, s)) return id;
  }
  return 0;
}

}  // namespace

CONFORMANCE_CASE("segments: reported before use, with the blocks inside, and again before trim and close") {
  Device dev = conformance::open_device();
  DevicePool& pool = dev.pool();
  Queue owner = dev.queue(QueueRole::compute);
  Recorder r;
  pool.trim();
  REQUIRE(pool.get_budget().segment_count == 0);
  pool.set_segment_callbacks(r.callbacks());
  CHECK(r.created() == 0);  // nothing existed

  DeviceBuffer small = pool.allocate(4096, owner);
  REQUIRE(r.created() == 1);  // before allocate returned
  DeviceBuffer large = pool.allocate(24 * MiB, owner);  // a segment of its own
  REQUIRE(r.created() == 2);
  {
    std::lock_guard lock(r.mutex);
    for (const auto& entry : r.live) {
      const std::uint64_t id = entry.first;
      const SegmentInfo& s = entry.second;
      CAPTURE(id);
      CHECK(s.backend == dev.backend());
      CHECK(s.size > 0);
      CHECK(s.native != nullptr);
      CHECK(s.pointer == (dev.backend() != Backend::vulkan));
      CHECK((s.vulkan_memory != nullptr) == (dev.backend() == Backend::vulkan));
    }
  }
  const std::uint64_t small_id = holder(r, small);
  const std::uint64_t large_id = holder(r, large);
  CHECK(small_id != 0);
  CHECK(large_id != 0);
  CHECK(small_id != large_id);
  // The pool's own account agrees with what the callbacks were told.
  const std::vector<SegmentInfo> listed = pool.segments();
  REQUIRE(listed.size() == 2);
  std::uint64_t reported_bytes = 0;
  for (const SegmentInfo& s : listed) {
    std::lock_guard lock(r.mutex);
    REQUIRE(r.live.count(s.id) == 1);
    CHECK(r.live.at(s.id).address == s.address);
    CHECK(r.live.at(s.id).size == s.size);
    reported_bytes += s.size;
  }
  CHECK(pool.get_budget().reserved_bytes == reported_bytes);
  const MemorySnapshot snap = pool.snapshot();
  REQUIRE(snap.segments.size() == 2);
  for (const SnapshotSegment& seg : snap.segments) {
    CHECK(std::any_of(listed.begin(), listed.end(), [&](const SegmentInfo& s) {
      return s.address == seg.address && s.size == seg.total_size;
    }));
  }

  // A second small block shares the small segment: no new report.
  DeviceBuffer small2 = pool.allocate(8192, owner);
  CHECK(r.created() == 2);
  CHECK(holder(r, small2) == small_id);

  small.release();
  small2.release();
  large.release();
  owner.synchronize();
  CHECK(r.destroyed() == 0);  // cached, not freed
  CHECK(pool.trim() == reported_bytes);
  CHECK(r.destroyed() == 2);
  {
    std::lock_guard lock(r.mutex);
    CHECK(r.live.empty());
    CHECK(r.problems.empty());
  }

  // What close frees is reported too, before the memory goes.
  DeviceBuffer kept = pool.allocate(1000, owner);
  CHECK(r.created() == 3);
  conformance::finish_device(dev);
  CHECK(r.destroyed() == 3);
  CHECK_FALSE(kept.valid());
  std::lock_guard lock(r.mutex);
  CHECK(r.live.empty());
  for (const std::string& p : r.problems) FAIL_CHECK(p);
}

CONFORMANCE_CASE("segments: installing reports existing segments; replaced callbacks hear nothing more") {
  Device dev = conformance::open_device();
  DevicePool& pool = dev.pool();
  Queue owner = dev.queue(QueueRole::compute);
  pool.trim();
  DeviceBuffer a = pool.allocate(4096, owner);
  DeviceBuffer b = pool.allocate(12 * MiB, owner);
  Recorder first;
  pool.set_segment_callbacks(first.callbacks());
  CHECK(first.created() == 2);  // the segments made before the call
  CHECK(holder(first, a) != 0);
  CHECK(holder(first, b) != 0);
  {
    std::lock_guard lock(first.mutex);
    REQUIRE(first.events.size() == 2);
    CHECK(first.events[0].info.id < first.events[1].info.id);  // increasing id order
  }

  Recorder second;
  pool.set_segment_callbacks(second.callbacks());
  CHECK(second.created() == 2);
  DeviceBuffer c = pool.allocate(30 * MiB, owner);
  CHECK(first.created() == 2);  // replaced: told nothing more
  CHECK(second.created() == 3);

  pool.set_segment_callbacks({});  // uninstall
  DeviceBuffer d = pool.allocate(40 * MiB, owner);
  CHECK(second.created() == 3);
  a.release();
  b.release();
  c.release();
  d.release();
  owner.synchronize();
  pool.trim();
  CHECK(first.destroyed() == 0);
  CHECK(second.destroyed() == 0);
}

CONFORMANCE_CASE("segments: a failing created callback undoes the growth and reaches the caller") {
  Device dev = conformance::open_device();
  DevicePool& pool = dev.pool();
  Queue owner = dev.queue(QueueRole::compute);
  pool.trim();
  int calls = 0;
  SegmentCallbacks failing;
  failing.created = [&](const SegmentInfo&) {
    ++calls;
    throw std::runtime_error("registration refused");
  };
  int destroyed = 0;
  failing.destroyed = [&](const SegmentInfo&) { ++destroyed; };
  pool.set_segment_callbacks(failing);
  const PoolBudget before = pool.get_budget();
  CHECK_THROWS_AS(pool.allocate(4096, owner), std::runtime_error);
  CHECK(calls == 1);
  CHECK(destroyed == 0);  // never created, never destroyed
  const PoolBudget after = pool.get_budget();
  CHECK(after.reserved_bytes == before.reserved_bytes);
  CHECK(after.segment_count == before.segment_count);
  CHECK(after.active_bytes == 0);
  CHECK(pool.segments().empty());
  CHECK_NOTHROW(pool.validate());

  // An upload that must grow the pool fails the same way, with nothing enqueued that matters.
  Transfer xfer(dev);
  HostBuffer src = dev.host_pool().allocate(4096);
  CHECK_THROWS_AS(xfer.upload(src, owner), std::runtime_error);
  CHECK(pool.get_budget().reserved_bytes == before.reserved_bytes);

  // Installing over existing segments: a created that fails on the second undoes the first.
  pool.set_segment_callbacks({});
  DeviceBuffer x = pool.allocate(4096, owner);
  DeviceBuffer y = pool.allocate(12 * MiB, owner);
  Recorder kept;
  pool.set_segment_callbacks(kept.callbacks());
  REQUIRE(kept.created() == 2);
  int seen = 0;
  std::vector<std::uint64_t> undone;
  SegmentCallbacks second_fails;
  second_fails.created = [&](const SegmentInfo&) {
    if (++seen == 2) throw std::runtime_error("second refused");
  };
  second_fails.destroyed = [&](const SegmentInfo& s) { undone.push_back(s.id); };
  CHECK_THROWS_AS(pool.set_segment_callbacks(second_fails), std::runtime_error);
  CHECK(seen == 2);
  REQUIRE(undone.size() == 1);  // the one reported before the failure
  // The previous callbacks stay installed.
  DeviceBuffer z = pool.allocate(30 * MiB, owner);
  CHECK(kept.created() == 3);
  x.release();
  y.release();
  z.release();
  owner.synchronize();
  pool.trim();
  CHECK(kept.destroyed() == 3);
  std::lock_guard lock(kept.mutex);
  CHECK(kept.problems.empty());
}

CONFORMANCE_CASE("segments: a failing destroyed callback: trim frees everything, then reports it") {
  Device dev = conformance::open_device();
  DevicePool& pool = dev.pool();
  Queue owner = dev.queue(QueueRole::compute);
  pool.trim();
  int destroyed = 0;
  SegmentCallbacks c;
  c.destroyed = [&](const SegmentInfo&) {
    ++destroyed;
    throw std::runtime_error("deregistration failed");
  };
  pool.set_segment_callbacks(c);
  DeviceBuffer a = pool.allocate(4096, owner);
  DeviceBuffer b = pool.allocate(12 * MiB, owner);
  a.release();
  b.release();
  owner.synchronize();
  CHECK_THROWS_AS(pool.trim(), std::runtime_error);
  CHECK(destroyed == 2);  // every idle segment was still reported
  CHECK(pool.get_budget().reserved_bytes == 0);
  CHECK(pool.get_budget().segment_count == 0);
  CHECK_NOTHROW(pool.validate());
  // close drops the exception.
  DeviceBuffer kept = pool.allocate(4096, owner);
  conformance::finish_device(dev);
  CHECK(destroyed == 3);
}

CONFORMANCE_CASE("segments: a callback calling ferry on its device is refused, not deadlocked") {
  Device dev = conformance::open_device();
  DevicePool& pool = dev.pool();
  Queue owner = dev.queue(QueueRole::compute);
  pool.trim();
  std::vector<ErrorCode> codes;
  Transfer xfer(dev);
  HostBuffer src = dev.host_pool().allocate(64);
  SegmentCallbacks c;
  c.created = [&](const SegmentInfo&) {
    try {
      (void)pool.get_budget();
    } catch (const Error& e) {
      codes.push_back(e.code());
    }
    try {
      (void)pool.allocate(64, owner);
    } catch (const Error& e) {
      codes.push_back(e.code());
    }
    try {
      (void)xfer.upload(src, owner);
    } catch (const Error& e) {
      codes.push_back(e.code());
    }
  };
  pool.set_segment_callbacks(c);
  DeviceBuffer a = pool.allocate(4096, owner);
  REQUIRE(codes.size() == 3);
  for (ErrorCode code : codes) CHECK(code == ErrorCode::invalid_argument);
  CHECK(a.valid());
  CHECK(pool.get_budget().active_bytes > 0);
  CHECK_NOTHROW(pool.validate());
}

CONFORMANCE_CASE("segments: bad input") {
  Device dev = conformance::open_device();
  DevicePool& pool = dev.pool();
  conformance::finish_device(dev);
  conformance::expect_error(ErrorCode::invalid_argument, [&] { pool.set_segment_callbacks({}); },
                            "set_segment_callbacks on a closed device");
  conformance::expect_error(ErrorCode::invalid_argument, [&] { (void)pool.segments(); },
                            "segments on a closed device");
}
