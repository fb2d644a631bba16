// SPDX-License-Identifier: MIT
// The vendor's own copy, measured beside ferry in the same run (the bars of ANCHORS.md are
// relative to it). Built from vendor_cuda.cpp when ferry has CUDA, else vendor_none.cpp.
#pragma once

#include <cstdint>
#include <string>

namespace ferry_bench {

struct VendorCopy {
  bool measured = false;
  std::string what;     ///< e.g. "cudaMemcpyAsync, pinned, event-timed"
  double h2d_gbps = 0;  ///< host->device from pinned memory, host-timed like ferry's rows
  double d2h_gbps = 0;  ///< device->host into pinned memory, host-timed like ferry's rows
  double h2d_gpu_gbps = 0;  ///< the same copies, GPU-timed (event) median
  double d2h_gpu_gbps = 0;
};

/// Measure the vendor's raw pinned copy of `bytes`, `iterations` times each way: back to back
/// on one stream with one host wait at the end, host-timed (what ferry's rows are compared
/// with), and each copy GPU-timed with events (median). `measured` is false without a device.
VendorCopy measure_vendor_copy(std::uint64_t bytes, int iterations);

}  // namespace ferry_bench
