// SPDX-License-Identifier: MIT
/// @file testing.hpp
/// @brief ferry's test kit (library `ferry-testkit`, `ferry-testkit.pc`): a synthetic compute
/// step that stands in for a model's work in tests, benchmarks and examples.
///
/// Not part of ferry's core API: a product links libferry (`ferry.pc`) and runs its own
/// kernels on the owner queue. The test kit exists so that ferry's suite, `ferry-bench` and the
/// examples can put real device work between an upload and a download, on every backend that
/// has a kernel for it (`Capabilities::synthetic_compute`), and check the bytes it produced.
///
/// Ownership: the step owns nothing; the buffers stay the caller's. Thread-safety: as any work
/// enqueued on a queue (see device.hpp): calls may come from several threads, and work on one
/// queue is ordered by the order of the calls.
#pragma once

#include <cstdint>
#include <source_location>

#include "ferry/api.hpp"
#include "ferry/device.hpp"
#include "ferry/pool.hpp"

namespace ferry {

/// @brief Enqueue a synthetic compute step on `queue`: it reads `input` and writes
/// `output[i] = input[i] + 1` (bytes, wrapping), making `units` passes over the data.
///
/// Contract: `queue` is a live queue, `input` and `output` are two different live buffers of
/// the queue's device with the same requested size, and `units` is in [1, 1000000]; anything
/// else is `invalid_argument`, naming `run_synthetic_compute`. `unsupported` where the backend
/// has no kernel for it (`Capabilities::synthetic_compute` is false; HIP, for one). On CUDA the
/// kernel is the test kit's own device code, built by nvcc with the kit and loaded into each
/// device when it opens, so libferry carries no device code: a kit built where nvcc was absent
/// has none, and the step is `unsupported` there too.
///
/// Ordering: the step runs after the work enqueued on `queue` so far and after every other
/// queue's access to the two buffers that ferry ordered (a copy into them, for one); a later
/// copy, download or release of either buffer is ordered after the step. A buffer owned by
/// another queue (a block allocated for a Transfer's executor) is recorded as used by
/// `queue`, so its release waits for `queue` (PyTorch's `record_stream`). The call returns once the step is enqueued;
/// `queue.mark()` after it gives a point reached when the step has completed.
FERRY_TESTKIT_API void run_synthetic_compute(const Queue& queue, const DeviceBuffer& input,
                                             const DeviceBuffer& output, std::uint32_t units = 1,
                                             std::source_location where = std::source_location::current());

}  // namespace ferry
