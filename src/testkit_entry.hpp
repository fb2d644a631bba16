// SPDX-License-Identifier: MIT
// The test kit's two entries into libferry (ferry-testkit, include/ferry/testing.hpp). Not
// installed. Launching a kernel needs each backend's internals, and enqueueing one needs the
// ordering bookkeeping of src/access.hpp; both stay inside libferry. Device code that needs a
// device compiler (CUDA's) is the kit's own: it registers it with libferry when it loads, so
// libferry holds none. These functions are exported for the test kit
// (tests/symbols/allowed-detail.txt lists them), so test kernels stay out of the product API
// while the kit links the shared libferry like any consumer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <source_location>

#include "ferry/api.hpp"
#include "ferry/device.hpp"
#include "ferry/pool.hpp"

namespace ferry::detail {

/// What `ferry::run_synthetic_compute` does (testing.hpp has the contract): validates every
/// argument (errors name run_synthetic_compute and the caller's `where`), orders the step
/// after the buffers' earlier users, runs the backend's kernel on `queue` and books the
/// buffers' access.
FERRY_API void testkit_enqueue_compute(const Queue& queue, const DeviceBuffer& input,
                                       const DeviceBuffer& output, std::uint32_t units,
                                       const std::source_location& where);

/// Register the device code of the synthetic compute step for `backend` (CUDA: a fatbin or
/// PTX text defining `extern "C" ferry_synthetic_compute`), `bytes` bytes at `image`, which
/// must stay valid for the process. Devices opened afterwards load it at open; a device
/// opened before loads it at its first step. Thread-safe; a null image or a backend that loads
/// no images is ignored.
FERRY_API void testkit_register_kernels(Backend backend, const void* image, std::size_t bytes) noexcept;

}  // namespace ferry::detail
