// SPDX-License-Identifier: MIT
// The test kit's single entry into libferry (ferry-testkit, include/ferry/testing.hpp). Not
// installed. The synthetic kernels live in the backends, which need each backend's internals,
// and enqueueing one needs the ordering bookkeeping of src/access.hpp; both stay inside
// libferry. This one function is exported for the test kit (tests/symbols/allowed-detail.txt
// lists it), so test kernels stay out of the product API while the kit links the shared
// libferry like any consumer.
#pragma once

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

}  // namespace ferry::detail
