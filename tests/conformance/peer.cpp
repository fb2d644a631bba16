// SPDX-License-Identifier: MIT
// Conformance: copies between two devices (Transfer::copy across devices, Transfer::copy_to,
// Transfer::peer_path). The two devices are two opens of the backend under test: two host
// devices, or one GPU opened twice where only one is present, which exercises the same
// cross-device ordering (semaphores of one device waited on by queues of the other). Backends
// without peer copies (Vulkan, interop pairs) must refuse with `unsupported`, visibly.
//
// Ordering is checked with gates that hold one device's owner queue: a copy that does not
// wait for the source owner's writes, or for the destination owner's last read, produces
// wrong bytes, and latency injection (conformance-host-latency) makes a missing wait on the
// destination owner show up as well.
#include <algorithm>
#include <chrono>
#include <span>
#include <thread>
#include <cstdint>
#include <vector>

#include "conformance.hpp"

using namespace ferry;
using namespace std::chrono_literals;
using conformance::fill_pattern;
using conformance::first_mismatch;
using conformance::check_round_trip;
using conformance::Gate;

namespace {

constexpr std::uint64_t kBytes = 256 * 1024 + 12;

/// Whether `xfer` copies to `other`; reports "not supported" and checks that the copy calls
/// refuse with `unsupported` when it does not.
bool peer_supported(Transfer& xfer, Device& other, DeviceBuffer& local, Queue& other_owner) {
  try {
    const PeerPath path = xfer.peer_path(other);
    MESSAGE("peer path: " << to_string(path));
    CHECK(path != PeerPath::same_device);
    return true;
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::unsupported);
    MESSAGE("not supported: peer copies: " << std::string(e.what()));
    DeviceBuffer far = other.pool().allocate(local.size(), other_owner);
    conformance::expect_error(ErrorCode::unsupported, [&] { (void)xfer.copy(local, far); }, "copy to the other device");
    conformance::expect_error(ErrorCode::unsupported, [&] { (void)xfer.copy(far, local); },
                              "copy from the other device");
    conformance::expect_error(ErrorCode::unsupported, [&] { (void)xfer.copy_to(local, other_owner); },
                              "copy_to the other device");
    return false;
  }
}

std::vector<std::byte> download(Transfer& xfer, const DeviceBuffer& b) {
  std::vector<std::byte> out(b.size());
  xfer.download(b, std::span<std::byte>(out));
  return out;
}

}  // namespace

CONFORMANCE_CASE("peer: copy_to waits for the source owner and orders the destination owner") {
  Device a = conformance::open_device();
  Device b = conformance::open_device();
  Queue qa = a.queue(QueueRole::compute);
  Queue qb = b.queue(QueueRole::compute);
  Transfer xa(a);
  Transfer xb(b);
  HostBuffer src = a.host_pool().allocate(kBytes);
  fill_pattern(src.span(), 41);
  Upload up = xa.upload(src, qa);
  if (!peer_supported(xa, b, up.buffer, qb)) return;
  if (!a.capabilities().synthetic_compute || !b.capabilities().synthetic_compute) {
    MESSAGE("not supported: synthetic compute, which the ordering checks use");
    return;
  }

  // A's owner writes the source (+1) behind a gate: the copy must wait for that write.
  DeviceBuffer written = a.pool().allocate(kBytes, qa);
  Gate gate(a, qa);
  run_synthetic_compute(qa, up.buffer, written);
  const PoolBudget a_before = a.pool().get_budget();
  const PoolBudget b_before = b.pool().get_budget();
  PeerCopy pc = xa.copy_to(written, qb);
  CHECK(pc.path == xa.peer_path(b));
  CHECK(pc.buffer.owner() == qb);
  CHECK(pc.buffer.size() == kBytes);
  // Budgets: the destination is B's, nothing new on A.
  CHECK(b.pool().get_budget().active_bytes >= b_before.active_bytes + kBytes);
  CHECK(a.pool().get_budget().active_bytes == a_before.active_bytes);
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(pc.ready.reached());  // held behind A's gated write
  CHECK_FALSE(qb.mark().reached());  // B's owner waits for the copy (owner_waits)

  // B's owner is ordered after the copy without an explicit wait: its compute reads the copy.
  DeviceBuffer twice = b.pool().allocate(kBytes, qb);
  run_synthetic_compute(qb, pc.buffer, twice);
  gate.open();
  CHECK(first_mismatch(download(xb, pc.buffer), 41, 1) == -1);
  CHECK(first_mismatch(download(xb, twice), 41, 2) == -1);

  // The pull direction: a Transfer of B copies A's buffer into B's pool.
  PeerCopy pulled = xb.copy_to(written, qb);
  CHECK(pulled.path == xb.peer_path(a));
  CHECK(first_mismatch(download(xb, pulled.buffer), 41, 1) == -1);
  pc.buffer.release();
  twice.release();
  pulled.buffer.release();
}

CONFORMANCE_CASE("peer: copy into a buffer of another device waits for its owner's last read") {
  Device a = conformance::open_device();
  Device b = conformance::open_device();
  Queue qa = a.queue(QueueRole::compute);
  Queue qb = b.queue(QueueRole::compute);
  Transfer xa(a);
  Transfer xb(b);
  HostBuffer src_a = a.host_pool().allocate(kBytes);
  fill_pattern(src_a.span(), 51);
  HostBuffer src_b = b.host_pool().allocate(kBytes);
  fill_pattern(src_b.span(), 52);
  Upload ua = xa.upload(src_a, qa);
  if (!peer_supported(xa, b, ua.buffer, qb)) return;
  if (!b.capabilities().synthetic_compute) {
    MESSAGE("not supported: synthetic compute, which the ordering checks use");
    return;
  }
  Upload ub = xb.upload(src_b, qb);
  // B's owner still reads the old contents (behind a gate) when the copy is issued.
  DeviceBuffer read = b.pool().allocate(kBytes, qb);
  Gate gate(b, qb);
  run_synthetic_compute(qb, ub.buffer, read);
  // A wait on a point of B and a signal on A ride along.
  TimelineSemaphore extra = b.create_semaphore(0);
  TimelineSemaphore done_a = a.create_semaphore(0);
  CallOptions o;
  o.wait = {extra.at(1)};
  o.signal = {done_a.at(1)};
  const TimelinePoint done = xa.copy(ua.buffer, ub.buffer, 0, o);
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(done.reached());
  CHECK(done_a.value() == 0);
  gate.open();
  extra.signal(1);
  done.wait(30s);
  done_a.wait(1, 30s);
  CHECK(first_mismatch(download(xb, read), 52, 1) == -1);    // read before the overwrite
  CHECK(first_mismatch(download(xb, ub.buffer), 51) == -1);  // then overwritten by A's bytes
  // A partial copy keeps the rest.
  fill_pattern(src_b.span(), 53);
  Upload ub2 = xb.upload(src_b, qb);
  xa.copy(ua.buffer, ub2.buffer, 4096).wait(30s);
  const std::vector<std::byte> partial = download(xb, ub2.buffer);
  CHECK(first_mismatch(std::span(partial).first(4096), 51) == -1);
  std::vector<std::byte> expect(kBytes);
  fill_pattern(expect, 53);
  CHECK(std::equal(partial.begin() + 4096, partial.end(), expect.begin() + 4096));
}

CONFORMANCE_CASE("peer: closing either device after a peer copy is safe") {
  for (const bool close_source_first : {true, false}) {
    CAPTURE(close_source_first);
    Device a = conformance::open_device();
    Device b = conformance::open_device();
    Queue qa = a.queue(QueueRole::compute);
    Queue qb = b.queue(QueueRole::compute);
    Transfer xa(a);
    HostBuffer src = a.host_pool().allocate(kBytes);
    fill_pattern(src.span(), 61);
    Upload up = xa.upload(src, qa);
    if (!peer_supported(xa, b, up.buffer, qb)) return;
    PeerCopy pc = xa.copy_to(up.buffer, qb);
    if (close_source_first) {
      Transfer xb(b);
      xa.synchronize();
      conformance::finish_device(a);
      CHECK(first_mismatch(download(xb, pc.buffer), 61) == -1);
      pc.buffer.release();
      qb.synchronize();
    } else {
      up.buffer.release();
      pc.buffer.release();  // inert after b's close
      conformance::finish_device(b);
      CHECK_NOTHROW(qa.synchronize());
      check_round_trip(a, xa);
    }
  }
}

CONFORMANCE_CASE("peer: bad input") {
  Device a = conformance::open_device();
  Device b = conformance::open_device();
  Device c = conformance::open_device();
  Queue qa = a.queue(QueueRole::compute);
  Queue qb = b.queue(QueueRole::compute);
  Transfer xa(a);
  Transfer xc(c);
  DeviceBuffer da = a.pool().allocate(4096, qa);
  DeviceBuffer db = b.pool().allocate(4096, qb);
  CHECK(xa.peer_path(a) == PeerPath::same_device);
  if (!peer_supported(xa, b, da, qb)) return;
  constexpr ErrorCode kInvalid = ErrorCode::invalid_argument;
  conformance::expect_error(kInvalid, [&] { (void)xc.copy(da, db); }, "copy with neither buffer on the Transfer's device");
  conformance::expect_error(kInvalid, [&] { (void)xc.copy_to(da, qb); }, "copy_to with neither on the Transfer's device");
  conformance::expect_error(kInvalid, [&] { (void)xa.copy_to(da, Queue{}); }, "copy_to a null owner");
  conformance::expect_error(kInvalid, [&] { (void)xa.copy(da, db, 8192); }, "copy of more bytes than the buffers hold");
  TimelineSemaphore sb = b.create_semaphore(0);
  TimelineSemaphore sc = c.create_semaphore(0);
  conformance::expect_error(kInvalid, [&] { (void)xa.copy(da, db, 0, {.signal = {sb.at(1)}}); },
                            "a signal on the other device's semaphore");
  conformance::expect_error(kInvalid, [&] { (void)xa.copy(da, db, 0, {.wait = {sc.at(1)}}); },
                            "a wait on a third device's semaphore");
  conformance::expect_error(kInvalid, [&] { (void)xa.peer_path(Device{}); }, "peer_path of a null device");
  conformance::finish_device(b);
  conformance::expect_error(kInvalid, [&] { (void)xa.copy(da, db); }, "copy into a buffer of a closed device");
  conformance::expect_error(kInvalid, [&] { (void)xa.copy_to(da, qb); }, "copy_to an owner of a closed device");
  conformance::expect_error(kInvalid, [&] { (void)xa.peer_path(b); }, "peer_path of a closed device");
  check_round_trip(a, xa);
}
