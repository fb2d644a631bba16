// SPDX-License-Identifier: MIT
// The conformance suite on the host (CPU reference) backend. Also run as
// conformance-host-latency with FERRY_HOST_LATENCY_US=200: every queued operation is delayed
// by a random amount, so a missing wait shows up as wrong data.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "conformance.hpp"

namespace {
/// The engine's own host memory: an aligned allocation ferry never saw.
std::unique_ptr<conformance::ForeignMemory> allocate_foreign(ferry::Device& /*device*/, std::uint64_t bytes) {
  const std::uint64_t size = (bytes + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, size);
  if (p == nullptr) throw std::bad_alloc();
  auto m = std::make_unique<conformance::ForeignMemory>();
  m->native = ferry::NativeMemory::from_pointer(p);
  m->size = size;
  m->host = static_cast<std::byte*>(p);
  m->free = [p] { std::free(p); };
  return m;
}
/// The engine's own host image: the reference layout with padded level-0 pitches (rows three
/// blocks longer, one spare row per slice), so every copy must honour the image's pitches.
std::unique_ptr<conformance::ForeignImage> allocate_image(ferry::Device& /*device*/, const ferry::ImageDesc& desc,
                                                          std::string& /*why_not*/) {
  const ferry::FormatInfo f = ferry::format_info(desc.format);
  const ferry::HostImageLevel tight = ferry::host_image_level(desc, 0);
  const std::uint64_t row_pitch = tight.row_pitch + 3 * f.block_bytes;
  const std::uint64_t slice_pitch = row_pitch * (tight.slice_pitch / tight.row_pitch + 1);
  const std::uint64_t bytes = ferry::host_image_bytes(desc, row_pitch, slice_pitch);
  auto* p = static_cast<std::byte*>(std::malloc(bytes));
  if (p == nullptr) throw std::bad_alloc();
  for (std::uint64_t i = 0; i < bytes; ++i) p[i] = std::byte{0xEE};  // what the engine had there
  auto image = std::make_unique<conformance::ForeignImage>();
  image->native = ferry::NativeImage::from_host(p, row_pitch, slice_pitch);
  image->desc = desc;
  image->free = [p] { std::free(p); };
  return image;
}
}  // namespace

// The host backend's copy engine model (backends/host/host_internal.hpp, "Copy engines"): a
// queue's consecutive copies keep the engine, so a bulk copy that is not cut holds an urgent
// copy on another queue back until it is done; cut into pieces with yields, it does not.
CONFORMANCE_CASE("host: a bulk copy that does not yield holds an urgent copy back") {
  constexpr std::uint64_t MiB = 1 << 20;
  ferry::Device dev = conformance::open_device();
  ferry::Queue owner = dev.queue(ferry::QueueRole::compute);
  const std::uint64_t big = conformance::small() ? 32 * MiB : 64 * MiB;
  ferry::HostBuffer bulk_src = dev.host_pool().allocate(big);
  ferry::HostBuffer urgent_src = dev.host_pool().allocate(64 << 10);
  ferry::HostBuffer first_src = dev.host_pool().allocate(64 << 10);
  for (const std::uint64_t piece : {std::uint64_t{1} << 40, 1 * MiB}) {
    CAPTURE(piece);
    ferry::TransferOptions options;
    options.bulk_piece_bytes = piece;  // 1 TiB: the bulk lane's copies below never yield
    ferry::Transfer xfer(dev, options);
    REQUIRE(xfer.urgent_executor() != xfer.executor());
    std::vector<ferry::DeviceBuffer> keep;  // fresh blocks: no wait for a free point between copies
    for (int round = 0; round < 3; ++round) {
      // `first` completes while the bulk queue holds the engine, with `bulk` queued behind it
      // (both wait behind `gate`, so neither runs before the other is queued): once `first` is
      // seen complete, the urgent copy asks for an engine the bulk queue holds.
      ferry::TimelineSemaphore gate = dev.create_semaphore(0);
      xfer.executor().wait(gate.at(1));
      ferry::Upload first = xfer.upload(first_src, owner, {.owner_waits = false});
      ferry::Upload bulk = xfer.upload(bulk_src, owner, {.owner_waits = false});
      gate.signal(1);
      first.ready.wait();
      ferry::Upload urgent =
          xfer.upload(urgent_src, owner, {.owner_waits = false, .priority = ferry::Priority::urgent});
      urgent.ready.wait();
      if (piece != 1 * MiB) {
        CHECK_MESSAGE(bulk.ready.reached(), "an urgent copy overtook a copy that never yields the engine");
      } else {
        CHECK_MESSAGE(!bulk.ready.reached(), "an urgent copy waited for a bulk copy that yields every 1 MiB");
      }
      keep.push_back(std::move(first.buffer));
      keep.push_back(std::move(bulk.buffer));
      keep.push_back(std::move(urgent.buffer));
    }
    for (ferry::DeviceBuffer& b : keep) b.release();
    xfer.synchronize();
  }
}

int main(int argc, char** argv) {
  const ferry::Backend backend = ferry::Backend::host;
  if (int skip = conformance::presence_check(backend)) return skip;
  conformance::configure({.backend = backend, .validation = false});
  conformance::set_foreign_allocator(&allocate_foreign);
  conformance::set_image_allocator(&allocate_image);
  const char* latency = std::getenv("FERRY_HOST_LATENCY_US");
  std::printf("conformance: host backend, latency injection %s us\n",
              latency != nullptr ? latency : "0");
  return conformance::run(argc, argv);
}
