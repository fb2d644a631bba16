// SPDX-License-Identifier: MIT
// Deferred submission (transfer.hpp, "Deferred submission"): calls share submissions of the
// executor, and every wait on a point submits its work first, so nothing ever waits for work
// that was never submitted. On backends that start work when it is enqueued the same cases
// check that the options change nothing.
#include <chrono>
#include <cstring>
#include <vector>

#include "conformance.hpp"
#include "ferry/testing.hpp"

using namespace ferry;
using namespace std::chrono_literals;
using conformance::fill_pattern;
using conformance::first_mismatch;

namespace {

constexpr std::uint64_t kSmall = 64 * 1024;

/// Options that never submit on their own: only a wait, a flush or a teardown does.
TransferOptions hold_everything() { return {.submit_batch = 1u << 30, .submit_bytes = 1ull << 50}; }

struct Uploads {
  std::vector<HostBuffer> sources;
  std::vector<Upload> uploads;
};

Uploads upload_small(Device& dev, Transfer& xfer, const Queue& owner, int count, std::uint64_t seed) {
  Uploads u;
  for (int i = 0; i < count; ++i) {
    u.sources.push_back(dev.host_pool().allocate(kSmall));
    fill_pattern(u.sources.back().span(), seed + static_cast<std::uint64_t>(i));
    u.uploads.push_back(xfer.upload(u.sources.back(), owner, {.owner_waits = false}));
  }
  return u;
}

void check_contents(Device& dev, Transfer& xfer, const Uploads& u, std::uint64_t seed) {
  for (std::size_t i = 0; i < u.uploads.size(); ++i) {
    HostBuffer back = dev.host_pool().allocate(kSmall);
    xfer.download(u.uploads[i].buffer, back).wait(30s);
    CHECK_MESSAGE(first_mismatch(back.span(), seed + i) == -1, "upload " << i);
  }
}

}  // namespace

CONFORMANCE_CASE("deferred submission: a host wait submits the copies it waits for") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev, hold_everything());
  Uploads u = upload_small(dev, xfer, owner, 8, 10);
  // The last point first: its wait must submit everything before it too.
  u.uploads.back().ready.wait(10s);
  for (const Upload& up : u.uploads) CHECK(up.ready.reached());
  check_contents(dev, xfer, u, 10);
}

CONFORMANCE_CASE("deferred submission: polling reached() sees a deferred copy complete") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev, hold_everything());
  Uploads u = upload_small(dev, xfer, owner, 3, 20);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!u.uploads[1].ready.reached() && std::chrono::steady_clock::now() < deadline) {
  }
  CHECK_MESSAGE(u.uploads[1].ready.reached(), "a polled point never came: its copy was never submitted");
  check_contents(dev, xfer, u, 20);
}

CONFORMANCE_CASE("deferred submission: a queue made to wait submits the copy first") {
  Device dev = conformance::open_device();
  if (!dev.capabilities().synthetic_compute) {
    MESSAGE("not supported: no synthetic compute on " << dev.capabilities().name);
    return;
  }
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev, hold_everything());
  Uploads u = upload_small(dev, xfer, owner, 4, 30);
  // The owner waits on the device, then reads the buffer: only the owner's mark is waited
  // for on the host, so the copy's submission must come from the owner's wait.
  DeviceBuffer out = dev.pool().allocate(kSmall, owner);
  owner.wait(u.uploads[2].ready);
  run_synthetic_compute(owner, u.uploads[2].buffer, out);
  owner.mark().wait(10s);
  HostBuffer back = dev.host_pool().allocate(kSmall);
  xfer.download(out, back).wait(10s);
  CHECK(first_mismatch(back.span(), 32, 1) == -1);
  // owner_waits (the default) makes the owner wait inside the call: submitted at once.
  HostBuffer src = dev.host_pool().allocate(kSmall);
  fill_pattern(src.span(), 39);
  Upload waited = xfer.upload(src, owner);
  run_synthetic_compute(owner, waited.buffer, out);
  owner.mark().wait(10s);
  xfer.download(out, back).wait(10s);
  CHECK(first_mismatch(back.span(), 39, 1) == -1);
}

CONFORMANCE_CASE("deferred submission: flush() and teardown submit; calls share submissions") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  const std::uint64_t start = dev.submissions();
  {
    Transfer xfer(dev, {.submit_batch = 16});  // 16 calls or 1 MiB per submission
    Uploads u = upload_small(dev, xfer, owner, 32, 40);
    const std::uint64_t batched = dev.submissions() - start;
    xfer.flush();
    const std::uint64_t flushed = dev.submissions() - start;
    Transfer each(dev);  // the default: every call submitted
    const std::uint64_t before_each = dev.submissions();
    Uploads v = upload_small(dev, each, owner, 32, 80);
    const std::uint64_t one_per_call = dev.submissions() - before_each;
    if (dev.submissions() == 0) {
      MESSAGE("no submission step on " << to_string(dev.backend()) << ": work starts when enqueued");
    } else {
      MESSAGE(to_string(dev.backend()) << ": 32 small uploads took " << batched << " submissions deferred, "
                                       << one_per_call << " with submit_batch = 1");
      // 32 calls with 16 per submission: 2, plus the pool's own marks on the owner at most.
      CHECK(batched <= 4);
      CHECK(flushed >= batched);
      CHECK(one_per_call >= 32);
    }
    check_contents(dev, xfer, u, 40);
    check_contents(dev, each, v, 80);
  }
  // A Transfer destroyed with copies pending submits them: its destructor's wait needs them.
  std::vector<HostBuffer> keep;
  std::vector<Upload> pending;
  {
    Transfer xfer(dev, hold_everything());
    Uploads u = upload_small(dev, xfer, owner, 4, 120);
    keep = std::move(u.sources);
    pending = std::move(u.uploads);
  }
  for (const Upload& up : pending) CHECK(up.ready.reached());
  Transfer reader(dev);
  for (std::size_t i = 0; i < pending.size(); ++i) {
    HostBuffer back = dev.host_pool().allocate(kSmall);
    reader.download(pending[i].buffer, back).wait(30s);
    CHECK(first_mismatch(back.span(), 120 + i) == -1);
  }
}

CONFORMANCE_CASE("deferred submission: options are checked") {
  Device dev = conformance::open_device();
  conformance::expect_error(ErrorCode::invalid_argument, [&] { Transfer t(dev, {.submit_batch = 0}); },
                            "Transfer(submit_batch = 0)");
  conformance::expect_error(ErrorCode::invalid_argument, [&] { Transfer t(dev, {.submit_bytes = 0}); },
                            "Transfer(submit_bytes = 0)");
  Transfer moved(dev);
  Transfer to(std::move(moved));
  conformance::expect_error(ErrorCode::invalid_argument, [&] { moved.flush(); }, "flush() on a moved-from Transfer");
  to.flush();  // nothing pending: a no-op
}
