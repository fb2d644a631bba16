// SPDX-License-Identifier: MIT
// The conformance suite on the CUDA or HIP backend (one source, as the backends share theirs),
// plus stream cases. Included by cuda.cpp and hip.cpp with FERRY_TEST_GPU set. With no GPU (CI)
// the executable reports SKIPPED and exits 77.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "conformance.hpp"

using namespace ferry;

#ifdef FERRY_TEST_GPU_FOREIGN
/// The engine's own device memory for the adopted-memory cases, allocated with the vendor's
/// calls by the including file (which has the vendor's headers and library).
std::unique_ptr<conformance::ForeignMemory> FERRY_TEST_GPU_FOREIGN(Device& device, std::uint64_t bytes);
#endif
#ifdef FERRY_TEST_GPU_IMAGES
/// The engine's own arrays for the image cases, made with the vendor's calls by the including
/// file; null, with the reason, for a shape or format it cannot make.
std::unique_ptr<conformance::ForeignImage> FERRY_TEST_GPU_IMAGES(Device& device, const ImageDesc& desc,
                                                                 std::string& why_not);
#endif

CONFORMANCE_CASE(FERRY_TEST_GPU_NAME ": capabilities describe a GPU") {
  Device dev = conformance::open_device();
  const Capabilities& caps = dev.capabilities();
  CHECK(caps.backend == Backend::FERRY_TEST_GPU);
  CHECK(caps.is_gpu);
  CHECK(caps.device_memory_bytes > 0);
  // HIP 5.2 has no asyncEngineCount: copy_engines may be 0 there
  if (Backend::FERRY_TEST_GPU == Backend::cuda) CHECK(caps.copy_engines >= 1);
  CHECK_FALSE(caps.name.empty());
  MESSAGE(caps.name << ": " << caps.copy_engines << " copy engines; " << caps.notes);
}

CONFORMANCE_CASE(FERRY_TEST_GPU_NAME ": adopting the legacy default stream is refused") {
  Device dev = conformance::open_device();
  NativeQueue legacy;  // handle 0 = the legacy default stream
  conformance::expect_error(ErrorCode::invalid_argument,
                            [&] { (void)dev.adopt_queue(QueueRole::compute, legacy); },
                            "adopt_queue(legacy default stream)");
}

int main(int argc, char** argv) {
  const Backend backend = Backend::FERRY_TEST_GPU;
  if (int skip = conformance::presence_check(backend)) return skip;
  conformance::configure({.backend = backend, .validation = false});
#ifdef FERRY_TEST_GPU_FOREIGN
  conformance::set_foreign_allocator(&FERRY_TEST_GPU_FOREIGN);
#endif
#ifdef FERRY_TEST_GPU_IMAGES
  conformance::set_image_allocator(&FERRY_TEST_GPU_IMAGES);
#endif
  return conformance::run(argc, argv);
}
