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
