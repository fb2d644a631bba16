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

/// An owned CUDA handle (allocation, stream, event), released on every path out.
template <class Handle, cudaError_t (*Destroy)(Handle)>
struct Owned {
  Handle handle = nullptr;
  Owned() = default;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() {
    if (handle != nullptr) Destroy(handle);
  }
};
using Stream = Owned<cudaStream_t, cudaStreamDestroy>;
using Event = Owned<cudaEvent_t, cudaEventDestroy>;

/// What both measurements copy with: `bytes` of device memory, as much pinned host memory,
/// one non-blocking stream (members: a failing constructor frees what it made).
struct CopyRig {
  Owned<void*, cudaFree> dev;
  Owned<void*, cudaFreeHost> host;
  Stream stream;
  explicit CopyRig(std::uint64_t bytes) {
    check(cudaMalloc(&dev.handle, bytes), "cudaMalloc");
    check(cudaHostAlloc(&host.handle, bytes, cudaHostAllocDefault), "cudaHostAlloc");
    check(cudaStreamCreateWithFlags(&stream.handle, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
};

/// The host-cost measurements' shape: 64 untimed calls of `one(false)`, then `calls` timed
/// ones (`one(true)`); the host waits for `sync` every `round` calls, untimed, so the command
/// queue never fills up.
template <class Fn>
void in_rounds(int calls, int round, cudaStream_t sync, Fn&& one) {
  for (int i = 0; i < 64; ++i) one(false);
  check(cudaStreamSynchronize(sync), "cudaStreamSynchronize");
  for (int i = 0; i < calls; ++i) {
    if (i > 0 && i % round == 0) check(cudaStreamSynchronize(sync), "cudaStreamSynchronize");
    one(true);
  }
  check(cudaStreamSynchronize(sync), "cudaStreamSynchronize");
}

double us_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

VendorCopy measure_vendor_copy(std::uint64_t bytes, int iterations) {
  VendorCopy r;
  if (!cuda_present()) return r;
  CopyRig rig(bytes);
  void* dev = rig.dev.handle;
  void* host = rig.host.handle;
  cudaStream_t stream = rig.stream.handle;
  Event start_event, stop_event;
  check(cudaEventCreate(&start_event.handle), "cudaEventCreate");
  check(cudaEventCreate(&stop_event.handle), "cudaEventCreate");
  cudaEvent_t start = start_event.handle, stop = stop_event.handle;
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
  return r;
}

VendorCallCost measure_vendor_call_cost(std::uint64_t bytes, int calls, int round) {
  VendorCallCost r;
  if (!cuda_present()) return r;
  CopyRig rig(bytes);
  void* dev = rig.dev.handle;
  void* host = rig.host.handle;
  cudaStream_t stream = rig.stream.handle;
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(calls));
  in_rounds(calls, round, stream, [&](bool timed) {
    const auto t0 = std::chrono::steady_clock::now();
    const cudaError_t e = cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream);
    const auto t1 = std::chrono::steady_clock::now();
    check(e, "cudaMemcpyAsync");
    if (timed) us.push_back(us_between(t0, t1));
  });
  const Percentiles p = percentiles(std::move(us));
  r.median_us = p.median;
  r.p90_us = p.p90;
  r.measured = true;
  r.what = "cudaMemcpyAsync h2d (pinned, one stream)";

  // The ordered pattern: a second (owner) stream and one event per stream. Re-recording an
  // event is legal while a wait on its previous record is pending: a wait binds the record
  // made before it.
  Stream owner;
  Event copied, released;
  check(cudaStreamCreateWithFlags(&owner.handle, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check(cudaEventCreateWithFlags(&copied.handle, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  check(cudaEventCreateWithFlags(&released.handle, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  check(cudaEventRecord(released.handle, owner.handle), "cudaEventRecord");
  std::vector<double> upload_us, pair_us;
  upload_us.reserve(static_cast<std::size_t>(calls));
  pair_us.reserve(static_cast<std::size_t>(calls));
  in_rounds(calls, round, owner.handle, [&](bool timed) {  // the owner's wait orders the copy stream too
    const auto t0 = std::chrono::steady_clock::now();
    check(cudaStreamWaitEvent(stream, released.handle, 0), "cudaStreamWaitEvent");
    check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
    check(cudaEventRecord(copied.handle, stream), "cudaEventRecord");
    check(cudaStreamWaitEvent(owner.handle, copied.handle, 0), "cudaStreamWaitEvent");
    const auto t1 = std::chrono::steady_clock::now();
    check(cudaEventRecord(released.handle, owner.handle), "cudaEventRecord");
    const auto t2 = std::chrono::steady_clock::now();
    if (timed) {
      upload_us.push_back(us_between(t0, t1));
      pair_us.push_back(us_between(t0, t2));
    }
  });
  const Percentiles up = percentiles(std::move(upload_us));
  const Percentiles pair = percentiles(std::move(pair_us));
  r.ordered_upload_median_us = up.median;
  r.ordered_upload_p90_us = up.p90;
  r.ordered_pair_median_us = pair.median;
  r.ordered_pair_p90_us = pair.p90;
  r.ordered_what = "raw CUDA side-stream copy, ordered both ways";
  return r;
}

}  // namespace ferry_bench
