// SPDX-License-Identifier: MIT
// Device code of the synthetic compute step (include/ferry/testing.hpp, run_synthetic_compute)
// that benchmarks and tests use as a stand-in for a model's work. Compiled by nvcc into a
// fatbin that ferry-testkit embeds and registers with libferry, whose CUDA backend loads it
// with the driver's module API and launches ferry_synthetic_compute on the queue's stream
// (backends/cuda/vendor/cuda.hpp: load_kernels, launch_synthetic). libferry itself holds no
// device code. Device code only: no host code, no CUDA runtime.

// Each pass re-reads `in` and rewrites `out`, so a pass costs one read and one write of the
// buffer: the step time is proportional to `units` and the result is always in[i] + 1.
// `in` and `out` are deliberately not __restrict__: the compiler must not fold the passes.
// The launcher's arguments, in order: in, out, bytes, units (pointers, unsigned long long,
// unsigned). extern "C": the launcher finds the kernel by this unmangled name.
extern "C" __global__ void ferry_synthetic_compute(const unsigned char* in, unsigned char* out,
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
