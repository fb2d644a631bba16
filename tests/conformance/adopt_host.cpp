// SPDX-License-Identifier: MIT
// Adopted host memory (HostPool::adopt): an engine's page-locked range, used by every pinned
// transfer path directly (DMA from and into it, no staging), never freed by ferry; and every
// bad input refused with a typed error naming it and the caller's line.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "conformance.hpp"

using namespace ferry;
using conformance::expect_error;
using conformance::fill_pattern;
using conformance::first_mismatch;

namespace {

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t kAlign = 64 * KiB;        // meets every backend's import alignment
constexpr std::uint64_t kBytes = 256 * KiB;       // the engine's allocation
constexpr auto kWait = std::chrono::seconds(60);

/// Host memory an engine allocated and page-locked itself. The pinning is the engine's: on
/// CUDA/HIP a registration (cudaHostRegister, what PyTorch's pin_memory may use), held for the
/// memory's life; the host and null backends need none; Vulkan imports the range on adoption,
/// so a registration there would import it a second time.
struct EngineMemory {
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> memory{static_cast<std::byte*>(std::aligned_alloc(kAlign, kBytes))};
  HostBuffer pinning{};

  explicit EngineMemory(Device& dev) {
    REQUIRE(memory);
    const Backend b = dev.backend();
    if (b == Backend::cuda || b == Backend::hip) {
      pinning = dev.host_pool().register_memory(std::span<std::byte>(memory.get(), kBytes));
    }
  }
  [[nodiscard]] std::span<std::byte> span() const { return {memory.get(), kBytes}; }
};

/// A Transfer that cannot stage: a copy that needed the staging ring would fail, so every
/// copy that succeeds on it went by DMA from or into the adopted memory itself.
Transfer direct_transfer(Device& dev) {
  TransferOptions o;
  o.staging = false;
  return Transfer(dev, o);
}

}  // namespace

CONFORMANCE_CASE("adopt host: pinned paths copy from and into adopted memory directly") {
  Device dev = conformance::open_device();
  if (!dev.capabilities().host_memory_adoption) {
    MESSAGE("not supported: " << to_string(dev.backend()) << " cannot adopt host memory");
    std::unique_ptr<std::byte, EngineMemory::Free> plain(static_cast<std::byte*>(std::aligned_alloc(kAlign, kBytes)));
    REQUIRE(plain);
    expect_error(ErrorCode::unsupported, [&] { (void)dev.host_pool().adopt(plain.get(), kBytes); },
                 "adopt without the capability");
    return;
  }
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer = direct_transfer(dev);
  EngineMemory engine(dev);
  const std::uint64_t pinned_before = dev.host_pool().pinned_bytes();

  // Two adoptions of one allocation (tensor views of one pinned storage): the source half
  // and the destination half, which may overlap other adoptions of the same memory. Adopted
  // ranges are 64 KiB multiples (Vulkan imports need its alignment); copies use odd sizes.
  const std::uint64_t half = kBytes / 2, n = half - 7;
  std::span<std::byte> src_bytes = engine.span().first(half);
  std::span<std::byte> dst_bytes = engine.span().subspan(half);
  fill_pattern(src_bytes, 41);
  std::memset(dst_bytes.data(), 0xCD, dst_bytes.size());
  HostBuffer src = dev.host_pool().adopt(src_bytes.data(), half);
  HostBuffer dst = dev.host_pool().adopt(dst_bytes.data(), half);
  HostBuffer whole = dev.host_pool().adopt(engine.span().data(), kBytes);  // overlaps both
  CHECK(src.adopted());
  CHECK_FALSE(src.registered());
  CHECK(src.data() == src_bytes.data());
  CHECK(src.size() == half);
  CHECK(whole.size() == kBytes);
  CHECK_MESSAGE(dev.host_pool().pinned_bytes() == pinned_before, "adopted memory counted as ferry's pinned memory");

  // upload (whole source, then a range of it), upload_into, download into adopted memory.
  Upload up = xfer.upload(src, 0, n, owner);
  CHECK(up.buffer.size() == n);
  Upload part = xfer.upload(src, 13, n - 13, owner);
  DeviceBuffer into = dev.pool().allocate(half, owner);
  const TimelinePoint filled = xfer.upload_into(src, into);
  CHECK_FALSE(filled.empty());
  up.ready.wait(kWait);
  part.ready.wait(kWait);
  xfer.download(up.buffer, dst, 0).wait(kWait);
  CHECK(first_mismatch(dst_bytes.first(n), 41) == -1);
  CHECK(dst_bytes[n] == std::byte{0xCD});  // the download wrote its bytes and no more

  std::memset(dst_bytes.data(), 0xCD, dst_bytes.size());
  xfer.download(part.buffer, dst, 5).wait(kWait);
  std::int64_t bad = -1;
  for (std::uint64_t i = 0; i + 13 < n && bad < 0; ++i) {
    if (dst_bytes[5 + i] != conformance::pattern_byte(41, 13 + i)) bad = static_cast<std::int64_t>(i);
  }
  CHECK_MESSAGE(bad == -1, "upload of a range of adopted memory: first wrong byte " << bad);
  CHECK(dst_bytes[4] == std::byte{0xCD});

  std::memset(dst_bytes.data(), 0xCD, dst_bytes.size());
  xfer.download(into, dst, 0).wait(kWait);
  CHECK(first_mismatch(dst_bytes.first(n), 41) == -1);
  CHECK(first_mismatch(src_bytes.first(n), 41) == -1);  // the sources are untouched

  // Ranges of adopted memory into one destination at offsets (a structure of pinned tensors
  // into one allocation): every byte outside the ranges keeps its contents.
  constexpr std::uint64_t kJoined = 1000;
  HostBuffer fill = dev.host_pool().allocate(kJoined);
  std::memset(fill.data(), 0xAB, kJoined);
  DeviceBuffer joined = dev.pool().allocate(kJoined, owner);
  (void)xfer.upload_into(fill, joined);
  (void)xfer.upload_into(src, 0, 100, joined, 10);
  const TimelinePoint joined_done = xfer.upload_into(src, 200, 50, joined, kJoined - 50);
  CHECK_FALSE(joined_done.empty());
  std::memset(dst_bytes.data(), 0, dst_bytes.size());
  xfer.download(joined, dst, 0).wait(kWait);
  std::uint64_t wrong = kJoined;
  for (std::uint64_t i = 0; i < kJoined && wrong == kJoined; ++i) {
    std::byte want{0xAB};
    if (i >= 10 && i < 110) want = conformance::pattern_byte(41, i - 10);
    if (i >= kJoined - 50) want = conformance::pattern_byte(41, 200 + i - (kJoined - 50));
    if (dst_bytes[i] != want) wrong = i;
  }
  CHECK_MESSAGE(wrong == kJoined, "upload_into(range): first wrong byte of the destination at " << wrong);
  expect_error(ErrorCode::invalid_argument, [&] { (void)xfer.upload_into(src, half - 10, 11, joined, 0); },
               "upload_into(range past the source)");
  expect_error(ErrorCode::invalid_argument, [&] { (void)xfer.upload_into(src, 0, 11, joined, kJoined - 10); },
               "upload_into(range past the destination)");
  expect_error(ErrorCode::invalid_argument, [&] { (void)xfer.upload_into(src, 0, 0, joined, 0); },
               "upload_into(0 bytes)");
  joined.release();

  // The handle may go before its copy completes: the copy keeps what it needs; the memory
  // itself is the engine's, alive here until its end.
  fill_pattern(src_bytes, 42);
  Upload late = xfer.upload(src, 0, n, owner);
  src = HostBuffer{};
  std::memset(dst_bytes.data(), 0, dst_bytes.size());
  xfer.download(late.buffer, dst, 0).wait(kWait);
  CHECK(first_mismatch(dst_bytes.first(n), 42) == -1);

  up.buffer.release();
  part.buffer.release();
  into.release();
  late.buffer.release();
  xfer.synchronize();

  // Closing the device ends every use; ferry frees nothing of the engine's, and the handles
  // are inert afterwards.
  dst = HostBuffer{};
  conformance::finish_device(dev);
  expect_error(ErrorCode::invalid_argument, [&] { (void)whole.data(); }, "HostBuffer::data after close");
  engine.pinning = HostBuffer{};
  fill_pattern(engine.span(), 43);  // still the engine's, writable
  CHECK(first_mismatch(engine.span(), 43) == -1);
}

CONFORMANCE_CASE("bad input: HostPool::adopt: null, empty, wrapping, not page-locked") {
  Device dev = conformance::open_device();
  HostPool& hp = dev.host_pool();
  std::unique_ptr<std::byte, EngineMemory::Free> plain(static_cast<std::byte*>(std::aligned_alloc(kAlign, kBytes)));
  REQUIRE(plain);
  constexpr ErrorCode kInvalid = ErrorCode::invalid_argument;
  const int line = __LINE__ + 3;
  bool named = false;
  try {
    (void)hp.adopt(nullptr, 64);
  } catch (const Error& e) {
    CHECK(e.code() == kInvalid);
    const std::string text = e.what();
    CHECK_MESSAGE(text.find("HostPool::adopt") != std::string::npos, text);
    CHECK_MESSAGE(text.find("null") != std::string::npos, text);
    if (conformance::kCallerLocations) CHECK(e.where().line() == static_cast<std::uint_least32_t>(line));
    named = true;
  }
  CHECK_MESSAGE(named, "adopt(nullptr) did not throw");
  expect_error(kInvalid, [&] { (void)hp.adopt(plain.get(), 0); }, "adopt(size 0)");
  void* near_end = reinterpret_cast<void*>(UINTPTR_MAX - 15);
  expect_error(kInvalid, [&] { (void)hp.adopt(near_end, 64); }, "adopt(wrapping range)");
  if (dev.capabilities().host_memory_adoption && dev.capabilities().is_gpu &&
      (dev.backend() == Backend::cuda || dev.backend() == Backend::hip)) {
    // Pageable memory is not DMA-able as it is: the driver reports it unregistered.
    expect_error(kInvalid, [&] { (void)hp.adopt(plain.get(), kBytes); }, "adopt(pageable memory)");
    // Device memory belongs to Device::adopt_memory.
    DeviceBuffer d = dev.pool().allocate(4096, dev.queue(QueueRole::compute));
    void* device_pointer = reinterpret_cast<void*>(static_cast<std::uintptr_t>(d.view().address));
    expect_error(kInvalid, [&] { (void)hp.adopt(device_pointer, 4096); }, "adopt(device memory)");
    // Memory ferry pinned is page-locked for the device like an engine's.
    HostBuffer pinned = hp.allocate(4096);
    CHECK_NOTHROW((void)hp.adopt(pinned.data(), 4096));
  }
  // After close: `invalid_argument`, naming the closed device.
  conformance::finish_device(dev);
  expect_error(kInvalid, [&] { (void)hp.adopt(plain.get(), 64); }, "adopt after close");
}
