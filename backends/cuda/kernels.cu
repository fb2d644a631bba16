// SPDX-License-Identifier: MIT
// Device code of the CUDA backend: the synthetic compute step (transfer.hpp,
// run_synthetic_compute) that benchmarks and tests use as a stand-in for a model's work.
#include "kernels.hpp"

namespace ferry::detail::cuda_impl {
namespace {

// Each pass re-reads `in` and rewrites `out`, so a pass costs one read and one write of the
// buffer: the step time is proportional to `units` and the result is always in[i] + 1.
// `in` and `out` are deliberately not __restrict__: the compiler must not fold the passes.
__global__ void synthetic_compute_kernel(const unsigned char* in, unsigned char* out,
                                         unsigned long long bytes, unsigned units) {
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  const unsigned long long first = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool vector = ((reinterpret_cast<unsigned long long>(in) |
                        reinterpret_cast<unsigned long long>(out)) & 15u) == 0;
  const unsigned long long words = vector ? bytes / 16 : 0;
  for (unsigned pass = 0; pass < units; ++pass) {
    // 16-byte path: __vadd4 adds per byte with wrap-around, 4 lanes per 32-bit word.
    for (unsigned long long i = first; i < words; i += stride) {
      uint4 v = reinterpret_cast<const uint4*>(in)[i];
      v.x = __vadd4(v.x, 0x01010101u);
      v.y = __vadd4(v.y, 0x01010101u);
      v.z = __vadd4(v.z, 0x01010101u);
      v.w = __vadd4(v.w, 0x01010101u);
      reinterpret_cast<uint4*>(out)[i] = v;
    }
    for (unsigned long long i = words * 16 + first; i < bytes; i += stride) {
      out[i] = static_cast<unsigned char>(in[i] + 1u);
    }
  }
}

}  // namespace

cudaError_t preload_kernels() {
  // Asking for a kernel's attributes loads it (CUDA programming guide, "Lazy Loading").
  cudaFuncAttributes attributes{};
  return cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(&synthetic_compute_kernel));
}

cudaError_t launch_synthetic_compute(const void* in, void* out, std::uint64_t bytes,
                                     std::uint32_t units, int max_blocks, cudaStream_t stream) {
  constexpr unsigned threads = 256;
  const std::uint64_t work = (bytes + 15) / 16;  // threads needed for one vector pass
  const std::uint64_t wanted = (work + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(
      wanted < static_cast<std::uint64_t>(max_blocks) ? (wanted > 0 ? wanted : 1) : max_blocks);
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  unsigned long long n = bytes;
  unsigned passes = units > 0 ? units : 1;
  void* args[] = {&src, &dst, &n, &passes};
  // cudaLaunchKernel reports this launch's own error, unlike <<<>>> + cudaGetLastError().
  return cudaLaunchKernel(reinterpret_cast<const void*>(&synthetic_compute_kernel), dim3(blocks),
                          dim3(threads), args, 0, stream);
}

}  // namespace ferry::detail::cuda_impl
