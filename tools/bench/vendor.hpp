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
  double h2d_gbps = 0;  ///< host->device from pinned memory
  double d2h_gbps = 0;  ///< device->host into pinned memory
};

/// Measure the vendor's raw pinned copy of `bytes`, `iterations` times each way (median
/// GPU-timed). `measured` is false when no such device is present.
VendorCopy measure_vendor_copy(std::uint64_t bytes, int iterations);

}  // namespace ferry_bench
