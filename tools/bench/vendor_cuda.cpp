// SPDX-License-Identifier: MIT
// Raw cudaMemcpyAsync from/to pinned memory on a non-blocking stream, event-timed: the
// reference the CUDA and Vulkan bandwidth bars are measured against.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench.hpp"  // percentiles()
#include "vendor.hpp"

namespace ferry_bench {
namespace {

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(e));
}

/// Whether a CUDA device is present (never throws: no driver means none).
bool cuda_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

/// What both measurements copy with: `bytes` of device memory, as much pinned host memory,
/// one non-blocking stream. Freed on every path out.
struct CopyRig {
  void* dev = nullptr;
  void* host = nullptr;
  cudaStream_t stream = nullptr;
  explicit CopyRig(std::uint64_t bytes) {
    try {
      check(cudaMalloc(&dev, bytes), "cudaMalloc");
      check(cudaHostAlloc(&host, bytes, cudaHostAllocDefault), "cudaHostAlloc");
      check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    } catch (...) {
      release();
      throw;
    }
  }
  ~CopyRig() { release(); }
  CopyRig(const CopyRig&) = delete;
  CopyRig& operator=(const CopyRig&) = delete;

 private:
  void release() noexcept {
    if (stream != nullptr) cudaStreamDestroy(stream);
    if (host != nullptr) cudaFreeHost(host);
    if (dev != nullptr) cudaFree(dev);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

VendorCopy measure_vendor_copy(std::uint64_t bytes, int iterations) {
  VendorCopy r;
  if (!cuda_present()) return r;
  CopyRig rig(bytes);
  void* dev = rig.dev;
  void* host = rig.host;
  cudaStream_t stream = rig.stream;
  cudaEvent_t start = nullptr, stop = nullptr;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  auto timed = [&](cudaMemcpyKind kind) {
    std::vector<double> gbps;
    for (int i = 0; i <= iterations; ++i) {
      void* dst = kind == cudaMemcpyHostToDevice ? dev : host;
      const void* src = kind == cudaMemcpyHostToDevice ? host : dev;
      check(cudaEventRecord(start, stream), "cudaEventRecord");
      check(cudaMemcpyAsync(dst, src, bytes, kind, stream), "cudaMemcpyAsync");
      check(cudaEventRecord(stop, stream), "cudaEventRecord");
      check(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      if (i > 0) gbps.push_back(static_cast<double>(bytes) / (ms * 1e6));  // first is warm-up
    }
    return median(gbps);
  };
  auto back_to_back = [&](cudaMemcpyKind kind) {
    void* dst = kind == cudaMemcpyHostToDevice ? dev : host;
    const void* src = kind == cudaMemcpyHostToDevice ? host : dev;
    check(cudaMemcpyAsync(dst, src, bytes, kind, stream), "cudaMemcpyAsync");  // warm-up
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) check(cudaMemcpyAsync(dst, src, bytes, kind, stream), "cudaMemcpyAsync");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return static_cast<double>(bytes) * iterations / s / 1e9;
  };
  r.h2d_gpu_gbps = timed(cudaMemcpyHostToDevice);
  r.d2h_gpu_gbps = timed(cudaMemcpyDeviceToHost);
  r.h2d_gbps = back_to_back(cudaMemcpyHostToDevice);
  r.d2h_gbps = back_to_back(cudaMemcpyDeviceToHost);
  r.measured = true;
  r.what = "cudaMemcpyAsync (pinned, back to back, host-timed)";
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return r;
}

VendorCallCost measure_vendor_call_cost(std::uint64_t bytes, int calls, int round) {
  VendorCallCost r;
  if (!cuda_present()) return r;
  CopyRig rig(bytes);
  void* dev = rig.dev;
  void* host = rig.host;
  cudaStream_t stream = rig.stream;
  for (int i = 0; i < 64; ++i) {  // warm-up
    check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(calls));
  for (int i = 0; i < calls; ++i) {
    if (i > 0 && i % round == 0) check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");  // untimed
    const auto t0 = std::chrono::steady_clock::now();
    const cudaError_t e = cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream);
    const auto t1 = std::chrono::steady_clock::now();
    check(e, "cudaMemcpyAsync");
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const Percentiles p = percentiles(std::move(us));
  r.median_us = p.median;
  r.p90_us = p.p90;
  r.measured = true;
  r.what = "cudaMemcpyAsync h2d (pinned, one stream)";
  return r;
}

}  // namespace ferry_bench
