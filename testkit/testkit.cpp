// SPDX-License-Identifier: MIT
// ferry-testkit: the synthetic compute step (include/ferry/testing.hpp). The launch and the
// ordering bookkeeping are libferry's; the kit reaches them through its entries
// (src/testkit_entry.hpp): testkit_enqueue_compute validates the arguments and reports errors
// under this function's name, and testkit_register_kernels takes the device code the kit
// carries for backends whose kernels are device code (CUDA: synthetic_kernel.cu, compiled by
// nvcc into a fatbin and embedded where nvcc was found at build time; Vulkan: synthetic.comp,
// compiled to SPIR-V by glslangValidator), so that libferry holds none.
#include "ferry/testing.hpp"

#include <cstddef>

#include "testkit_entry.hpp"

#if FERRY_TESTKIT_VULKAN_KERNELS
#include <stdint.h>  // the generated SPIR-V header uses ::uint32_t

#include "synthetic_spv.h"  // testkit/synthetic.comp compiled by glslangValidator
#endif

#if FERRY_TESTKIT_CUDA_KERNELS
namespace ferry::testkit_data {
extern const unsigned char synthetic_cuda_fatbin[];
extern const std::size_t synthetic_cuda_fatbin_size;
}  // namespace ferry::testkit_data
#endif

namespace ferry {

namespace {

/// Registers the kit's device code with libferry when the kit loads, before the program can
/// open a device, so that a device loads it at open (a kernel loaded later may wait behind
/// queued work: backends/cuda/vendor/cuda.hpp, load_kernels).
[[maybe_unused]] const bool registered = [] {
#if FERRY_TESTKIT_CUDA_KERNELS
  detail::testkit_register_kernels(Backend::cuda, testkit_data::synthetic_cuda_fatbin,
                                   testkit_data::synthetic_cuda_fatbin_size);
#endif
#if FERRY_TESTKIT_VULKAN_KERNELS
  detail::testkit_register_kernels(Backend::vulkan, ferry_synthetic_spv, sizeof(ferry_synthetic_spv));
#endif
  return true;
}();

}  // namespace

void run_synthetic_compute(const Queue& queue, const DeviceBuffer& input, const DeviceBuffer& output,
                           std::uint32_t units, std::source_location where) {
  detail::testkit_enqueue_compute(queue, input, output, units, where);
}

}  // namespace ferry
