// SPDX-License-Identifier: MIT
// Launchers for the CUDA backend's device code (kernels.cu, compiled by nvcc). Included only
// where the shim says a device compiler built kernels.cu (FERRY_GPU_HAS_KERNELS).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ferry::detail::cuda_impl {

/// Enqueue the synthetic compute step on `stream`: `units` passes (at least one) over the
/// data, each writing out[i] = in[i] + 1 (uint8, wrapping), so the result is exact whatever
/// `units` is and the run time grows linearly with it. `in` and `out` must not overlap.
/// `max_blocks` caps the grid (a few blocks per SM; the kernel loops grid-stride). Returns the
/// launch status.
cudaError_t launch_synthetic_compute(const void* in, void* out, std::uint64_t bytes,
                                     std::uint32_t units, int max_blocks, cudaStream_t stream);

/// Load the backend's kernels into the current context now. Under lazy loading (CUDA's
/// default since 12.2) a kernel's first launch loads it, and loading may wait for work already
/// queued in the context; a launch behind a stream that waits for the host (an engine's
/// semaphore the host signals after the launch) then never returns. Loading every kernel when
/// a device opens keeps each launch asynchronous. Returns the status of the load.
cudaError_t preload_kernels();

}  // namespace ferry::detail::cuda_impl
