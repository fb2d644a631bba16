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
}  // namespace

int main(int argc, char** argv) {
  const ferry::Backend backend = ferry::Backend::host;
  if (int skip = conformance::presence_check(backend)) return skip;
  conformance::configure({.backend = backend, .validation = false});
  conformance::set_foreign_allocator(&allocate_foreign);
  const char* latency = std::getenv("FERRY_HOST_LATENCY_US");
  std::printf("conformance: host backend, latency injection %s us\n",
              latency != nullptr ? latency : "0");
  return conformance::run(argc, argv);
}
