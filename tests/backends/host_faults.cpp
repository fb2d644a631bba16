// SPDX-License-Identifier: MIT
// Fault injection on the host backend (FERRY_HOST_FAULTS, see backends/host/fault_layer.hpp):
// a lost device, a failed segment allocation and a failed copy each surface as a typed
// ferry::Error at the call or at the next wait -- never a hang, a crash or wrong data -- and
// leave a pool that validates and a device that closes. Also run with FERRY_HOST_LATENCY_US
// and under AddressSanitizer (leaks included).
//
// The variable is read when a device opens, so each case sets it around its open only; the
// cases run one after another in one process (doctest runs them sequentially).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "conformance.hpp"
#include "reference.hpp"

using namespace ferry;
using conformance::expect_error;

namespace {

constexpr std::uint64_t KiB = 1024, MiB = 1024 * KiB;
constexpr const char* kFaults = "FERRY_HOST_FAULTS";
// Far longer than any step here takes: a wait that runs into it is a hang, reported as a
// timeout error, which no case accepts.
constexpr auto kWait = std::chrono::seconds(20);

/// Sets FERRY_HOST_FAULTS for the devices opened in its scope.
class ScopedFaults {
 public:
  explicit ScopedFaults(const std::string& value) { REQUIRE(::setenv(kFaults, value.c_str(), 1) == 0); }
  ~ScopedFaults() {
    const int rc = ::unsetenv(kFaults);
    CHECK(rc == 0);
  }
  ScopedFaults(const ScopedFaults&) = delete;
  ScopedFaults& operator=(const ScopedFaults&) = delete;
};

Device open_with_faults(const std::string& faults) {
  const ScopedFaults env(faults);
  return conformance::open_device();
}

/// A small staging ring (2 x 1 MiB), so that a batch of a few MiB laps it.
TransferOptions small_staging() {
  TransferOptions o;
  o.staging_chunk_bytes = 1 * MiB;
  o.staging_chunks = 2;
  return o;
}

void expect_pattern(std::span<const std::byte> bytes, std::uint64_t seed, int add, const char* what) {
  const std::int64_t at = conformance::first_mismatch(bytes, seed, add);
  CHECK_MESSAGE(at == -1, what << ": first wrong byte at " << at);
}

/// Every transfer path once, each checked as soon as its wait returns: pinned uploads by
/// ferry and by the bench's blocking and executor_owned references, a staged batch upload and its batch
/// download, a pageable upload and download, a device-to-device copy and upload_into.
/// Throws the first ferry::Error; whatever completes before it must hold the right data.
void transfer_paths(Device& dev, Transfer& xfer) {
  Queue owner = dev.queue(QueueRole::compute);
  const std::uint64_t n = 64 * KiB + 7;
  HostBuffer src = dev.host_pool().allocate(n);
  HostBuffer dst = dev.host_pool().allocate(n);
  conformance::fill_pattern(src.span(), 1);
  {
    Upload up = xfer.upload(src, owner);
    DeviceBuffer out = dev.pool().allocate(n, owner);
    run_synthetic_compute(owner, up.buffer, out);
    xfer.download(out, dst).wait(kWait);
    expect_pattern(dst.span(), 1, 1, "owner_owned upload, compute");
  }
  ferry_bench::ReferenceUploads uploads(dev, xfer, owner);
  {
    Upload up = uploads.blocking(src);
    xfer.download(up.buffer, dst).wait(kWait);
    expect_pattern(dst.span(), 1, 0, "blocking upload");
  }
  {
    Upload up = uploads.executor_owned(src);
    DeviceBuffer out = dev.pool().allocate(n, owner);
    run_synthetic_compute(owner, up.buffer, out);
    xfer.download(out, dst).wait(kWait);
    expect_pattern(dst.span(), 1, 1, "executor_owned upload, compute");
  }
  {
    std::vector<std::byte> a(1 * MiB + 3 * KiB + 1), b(1 * MiB + 5);
    conformance::fill_pattern(a, 2);
    conformance::fill_pattern(b, 3);
    const HostView views[] = {{a.data(), a.size()}, {b.data(), b.size()}};
    UploadBatch batch = xfer.upload(std::span<const HostView>(views), owner);
    std::vector<std::byte> a2(a.size()), b2(b.size());
    const HostSpan spans[] = {{a2.data(), a2.size()}, {b2.data(), b2.size()}};
    xfer.download(batch, std::span<const HostSpan>(spans));  // returns once the bytes are here
    expect_pattern(a2, 2, 0, "batch upload, batch download: input 0");
    expect_pattern(b2, 3, 0, "batch upload, batch download: input 1");
  }
  {
    std::vector<std::byte> p(n), q(n);
    conformance::fill_pattern(p, 4);
    Upload up = xfer.upload(std::span<const std::byte>(p), owner);
    xfer.download(up.buffer, std::span<std::byte>(q));
    expect_pattern(q, 4, 0, "pageable upload, pageable download");
  }
  {
    Upload up = xfer.upload(src, owner);
    DeviceBuffer other = dev.pool().allocate(n, owner);
    xfer.copy(up.buffer, other).wait(kWait);
    xfer.download(other, dst).wait(kWait);
    expect_pattern(dst.span(), 1, 0, "device-to-device copy");
    conformance::fill_pattern(src.span(), 5);  // the copies that read `src` are complete
    xfer.upload_into(src, other).wait(kWait);
    xfer.download(other, dst).wait(kWait);
    expect_pattern(dst.span(), 5, 0, "upload_into");
  }
}

/// Sweep a one-shot fault over every position of `transfer_paths`: `fault(n)` is the
/// FERRY_HOST_FAULTS value that trips it at the n-th operation counted. `after(dev, xfer,
/// error)` checks the device after the error. Stops at the first n past the scenario's end
/// (a clean run, which must pass); returns how many positions failed.
template <class After>
int sweep(const std::string& what, std::string (*fault)(int), ErrorCode expected, After&& after) {
  constexpr int kMaxPositions = 400;  // far more operations than the scenario enqueues
  int faulted = 0;
  for (int n = 1; n <= kMaxPositions; ++n) {
    Device dev = open_with_faults(fault(n));
    bool failed = false;
    {
      Transfer xfer(dev, small_staging());
      try {
        transfer_paths(dev, xfer);
      } catch (const Error& e) {
        failed = true;
        CHECK_MESSAGE(e.code() == expected, what << " at " << n << ": " << std::string(e.what()));
        CHECK_MESSAGE(!e.message().empty(), what << " at " << n);
      }
      if (failed) {
        ++faulted;
        try {
          dev.pool().validate();
        } catch (const std::exception& e) {
          FAIL_CHECK(what << " at " << n << ": pool broken after the fault: " << std::string(e.what()));
        }
        after(dev, xfer, n);
      }
    }  // the Transfer goes first: its destructor waits (or gives up on a lost device)
    conformance::finish_device(dev);  // pool check, then close: must return
    if (!failed) {
      MESSAGE(what << ": " << faulted << " positions faulted, position " << n << " is past the end");
      return faulted;
    }
  }
  FAIL_CHECK(what << ": the scenario still faulted at position " << kMaxPositions);
  return faulted;
}

}  // namespace

// ---- parsing ---------------------------------------------------------------------------------

CONFORMANCE_CASE("faults: FERRY_HOST_FAULTS is parsed strictly at open") {
  const char* bad[] = {
      "device_lost_at",       "device_lost_at=",        "device_lost_at=0",
      "device_lost_at=-1",    "device_lost_at=+3",      "device_lost_at=3x",
      "device_lost_at= 3",    "device_lost_at=3 ",      "device_lost_at=99999999999999999999",
      "bogus=1",              "Device_Lost_At=1",       "device_lost_at=1,,copy_fail_at=2",
      "device_lost_at=1,",    ",",                      "device_lost_at=1,device_lost_at=2",
      "alloc_fail_count=2",   "copy_fail_at=1;alloc_fail_at=2", "=1",
  };
  for (const std::string value : bad) {
    const ScopedFaults env(value);
    try {
      Device dev = Device::open(conformance::options());
      FAIL_CHECK("FERRY_HOST_FAULTS='" << value << "' was accepted");
      dev.close();
    } catch (const Error& e) {
      CHECK_MESSAGE(e.code() == ErrorCode::invalid_argument, value << ": " << std::string(e.what()));
      CHECK_MESSAGE(e.message().find(kFaults) != std::string::npos, value << ": " << std::string(e.what()));
    }
  }
  const char* good[] = {"device_lost_at=7", "alloc_fail_at=2,alloc_fail_count=3",
                        "copy_fail_at=1,device_lost_at=100,alloc_fail_at=5"};
  for (const std::string value : good) {
    Device dev = open_with_faults(value);
    CHECK_MESSAGE(dev.capabilities().notes.find(value) != std::string::npos, dev.capabilities().notes);
    conformance::finish_device(dev);
  }
  Device plain = open_with_faults("");  // empty: no faults
  CHECK(plain.capabilities().notes.find("fault injection") == std::string::npos);
  Transfer xfer(plain);
  conformance::check_round_trip(plain, xfer);
}

// ---- device lost -----------------------------------------------------------------------------

CONFORMANCE_CASE("faults: a device lost at any queued operation surfaces as device_lost") {
  const auto fault = [](int n) { return "device_lost_at=" + std::to_string(n); };
  const int faulted = sweep("device_lost_at", +fault, ErrorCode::device_lost, [](Device& dev, Transfer& xfer, int n) {
    // Every later queue operation reports the loss, and so does a wait for a point that the
    // lost work would have reached.
    Queue owner = dev.queue(QueueRole::compute);
    HostBuffer src = dev.host_pool().allocate(4096);
    expect_error(ErrorCode::device_lost, [&] { (void)xfer.upload(src, owner); }, "upload after the loss");
    TimelineSemaphore never = dev.create_semaphore(0);
    expect_error(ErrorCode::device_lost, [&] { owner.wait(never.at(1)); }, "queue wait after the loss");
    expect_error(ErrorCode::device_lost, [&] { owner.signal(never.at(1)); }, "queue signal after the loss");
    expect_error(ErrorCode::device_lost, [&] { never.wait(1, kWait); }, "host wait after the loss");
    try {
      xfer.synchronize(kWait);  // nothing left to wait for is fine; a hang or timeout is not
    } catch (const Error& e) {
      CHECK_MESSAGE(e.code() == ErrorCode::device_lost, "Transfer::synchronize at " << n << ": " << std::string(e.what()));
    }
  });
  CHECK(faulted > 20);
}

CONFORMANCE_CASE("faults: a lost device ends the waits nobody will satisfy, and closes") {
  // Operations: 1 = the owner's wait for `never`, 2 = the compute, 3 = its mark: lost there.
  Device dev = open_with_faults("device_lost_at=3");
  Queue owner = dev.queue(QueueRole::compute);
  TimelineSemaphore never = dev.create_semaphore(0);
  DeviceBuffer in = dev.pool().allocate(4096, owner);
  DeviceBuffer out = dev.pool().allocate(4096, owner);
  owner.wait(never.at(1));
  expect_error(ErrorCode::device_lost, [&] { run_synthetic_compute(owner, in, out); }, "the lost operation");
  const auto start = std::chrono::steady_clock::now();
  expect_error(ErrorCode::device_lost, [&] { never.wait(1, kWait); }, "host wait");
  expect_error(ErrorCode::device_lost, [&] { owner.synchronize(kWait); }, "synchronize");
  expect_error(ErrorCode::device_lost, [&] { dev.queue(QueueRole::transfer).wait(never.at(1)); }, "queue wait");
  // The free point cannot be enqueued: the block stays the pool's (never handed out again
  // while the lost work might use it) and the handle becomes inert.
  const std::uint64_t active = dev.pool().get_budget().active_bytes;
  const DeviceView kept = in.view();
  expect_error(ErrorCode::device_lost, [&] { in.release(); }, "release");
  CHECK_FALSE(in.valid());
  CHECK(dev.pool().get_budget().active_bytes == active);
  DeviceBuffer again = dev.pool().allocate(4096, owner);
  const DeviceView fresh = again.view();
  CHECK((fresh.native != kept.native || fresh.offset != kept.offset));
  dev.pool().validate();
  conformance::finish_device(dev);  // the owner's wait for `never` is abandoned: close returns
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  CHECK_FALSE(out.valid());
}

// ---- copy failures ---------------------------------------------------------------------------

CONFORMANCE_CASE("faults: a copy failing at any point surfaces at the call, and the device goes on") {
  const auto fault = [](int n) { return "copy_fail_at=" + std::to_string(n); };
  const int faulted = sweep("copy_fail_at", +fault, ErrorCode::backend_error, [](Device& dev, Transfer& xfer, int) {
    // One copy failed; everything after it works and moves the right bytes.
    conformance::check_round_trip(dev, xfer);
    transfer_paths(dev, xfer);
  });
  CHECK(faulted > 10);
}

CONFORMANCE_CASE("faults: a staged upload failing midway frees its block only after the copies it issued") {
  // Copies: 1 = the input's upload; then the batch, one per 1 MiB chunk: copy 4, its third
  // chunk, fails while chunks 0 and 1 wait behind `gate` on the executor.
  Device dev = open_with_faults("copy_fail_at=4");
  TransferOptions to;
  to.staging_chunk_bytes = 1 * MiB;
  to.staging_chunks = 4;
  to.bulk_piece_bytes = 64 * MiB;  // the input's upload is one copy, not cut into pieces
  Transfer xfer(dev, to);
  Queue owner = dev.queue(QueueRole::compute);
  const std::uint64_t n = 12 * MiB;  // a large request: its own segment, reused by the same size
  HostBuffer src = dev.host_pool().allocate(n);
  conformance::fill_pattern(src.span(), 7);
  Upload input = xfer.upload(src, owner);
  input.ready.wait(kWait);
  TimelineSemaphore gate = dev.create_semaphore(0);
  xfer.executor().wait(gate.at(1));
  std::vector<std::byte> pageable(n);
  conformance::fill_pattern(pageable, 8);
  expect_error(ErrorCode::backend_error, [&] { (void)xfer.upload(std::span<const std::byte>(pageable), owner); },
               "the staged upload");
  dev.pool().validate();
  // The next request of that size gets the failed upload's block; the chunks it issued still
  // write into it once the gate opens, so the new user must come after them.
  DeviceBuffer out = dev.pool().allocate(n, owner);
  run_synthetic_compute(owner, input.buffer, out);
  gate.signal(1);
  HostBuffer check = dev.host_pool().allocate(n);
  xfer.download(out, check).wait(kWait);
  expect_pattern(check.span(), 7, 1, "compute into the reused block");
}

// ---- allocation failures ---------------------------------------------------------------------

CONFORMANCE_CASE("faults: one failed segment allocation is absorbed by the pool's retry") {
  Device dev = open_with_faults("alloc_fail_at=1");
  Queue owner = dev.queue(QueueRole::compute);
  DeviceBuffer a = dev.pool().allocate(4096, owner);  // call 1 fails, the retry (call 2) succeeds
  CHECK(dev.pool().get_budget().segment_allocations == 1);
  dev.pool().validate();
  a.release();
  Transfer xfer(dev);
  conformance::check_round_trip(dev, xfer);
}

CONFORMANCE_CASE("faults: the out-of-memory retry returns idle segments first") {
  Device dev = open_with_faults("alloc_fail_at=2");
  Queue owner = dev.queue(QueueRole::compute);
  DeviceBuffer a = dev.pool().allocate(4096, owner);  // call 1: a small segment
  a.release();
  owner.synchronize(kWait);  // the small segment is idle now
  DeviceBuffer b = dev.pool().allocate(16 * MiB, owner);  // call 2 fails: trim, call 3
  const PoolBudget budget = dev.pool().get_budget();
  CHECK(budget.segment_count == 1);
  CHECK(budget.reserved_bytes == 16 * MiB);
  dev.pool().validate();
}

CONFORMANCE_CASE("faults: a pool that cannot grow reports out_of_memory and keeps working") {
  // Calls 2 and 3 (the growth and its retry) fail.
  Device dev = open_with_faults("alloc_fail_at=2,alloc_fail_count=2");
  Queue owner = dev.queue(QueueRole::compute);
  DeviceBuffer a = dev.pool().allocate(4096, owner);  // call 1
  const PoolBudget before = dev.pool().get_budget();
  expect_error(ErrorCode::out_of_memory, [&] { (void)dev.pool().allocate(16 * MiB, owner); }, "growth");
  const PoolBudget after = dev.pool().get_budget();
  CHECK(after.reserved_bytes == before.reserved_bytes);
  CHECK(after.active_bytes == before.active_bytes);
  dev.pool().validate();
  DeviceBuffer c = dev.pool().allocate(8192, owner);  // fits the small segment: no growth
  DeviceBuffer d = dev.pool().allocate(16 * MiB, owner);  // call 4 succeeds
  dev.pool().validate();
  Transfer xfer(dev);
  conformance::check_round_trip(dev, xfer);
}

CONFORMANCE_CASE("faults: an upload whose destination cannot be allocated reports out_of_memory") {
  Device dev = open_with_faults("alloc_fail_at=1,alloc_fail_count=2");
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev, small_staging());
  HostBuffer src = dev.host_pool().allocate(64 * KiB);
  conformance::fill_pattern(src.span(), 9);
  expect_error(ErrorCode::out_of_memory, [&] { (void)xfer.upload(src, owner); }, "pinned upload");
  std::vector<std::byte> pageable(3 * MiB);
  conformance::fill_pattern(pageable, 10);
  Upload up = xfer.upload(std::span<const std::byte>(pageable), owner);  // call 3 succeeds
  std::vector<std::byte> back(pageable.size());
  xfer.download(up.buffer, std::span<std::byte>(back));
  expect_pattern(back, 10, 0, "upload after the failed one");
  dev.pool().validate();
  conformance::check_round_trip(dev, xfer);
}

int main(int argc, char** argv) {
  const Backend backend = Backend::host;
  if (int skip = conformance::presence_check(backend)) return skip;
  if (::unsetenv(kFaults) != 0) {  // only the cases set it, each around its own open
    std::perror("unsetenv FERRY_HOST_FAULTS");
    return 1;
  }
  conformance::configure({.backend = backend, .validation = false});
  const char* latency = std::getenv("FERRY_HOST_LATENCY_US");
  std::printf("host fault injection, latency injection %s us\n", latency != nullptr ? latency : "0");
  return conformance::run(argc, argv);
}
