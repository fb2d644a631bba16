// SPDX-License-Identifier: MIT
// The vendor's own copy, measured beside ferry in the same run (the bars in docs/benchmarks.md are
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

/// Host time of issuing one bare vendor copy (the anchor of ferry's per-upload host cost).
struct VendorCallCost {
  bool measured = false;
  std::string what;      ///< e.g. "cudaMemcpyAsync h2d, pinned, one stream"
  double median_us = 0;  ///< per call, host-timed around the enqueue only
  double p90_us = 0;
  /// The same copy issued the way a side-queue copy must be ordered with raw CUDA (what
  /// PyTorch's side stream + wait_stream does, and what ferry's owner_owned upload + release
  /// issues): the copy stream waits for the owner's last event, copies, records; the owner
  /// stream waits for that record (the "upload"), then records its own event (the "release").
  std::string ordered_what;
  double ordered_upload_median_us = 0;  ///< wait + copy + record + owner wait
  double ordered_upload_p90_us = 0;
  double ordered_pair_median_us = 0;    ///< ... + the owner's record
  double ordered_pair_p90_us = 0;
};

/// Issue `calls` async copies of `bytes` from pinned memory to the device on one stream, each
/// host-timed on its own; the host waits for the stream every `round` calls, untimed, so the
/// command queue never fills. `measured` is false without a device.
VendorCallCost measure_vendor_call_cost(std::uint64_t bytes, int calls, int round);

}  // namespace ferry_bench
