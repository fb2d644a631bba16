// SPDX-License-Identifier: MIT
// ferry-testkit: the synthetic compute step (include/ferry/testing.hpp). The kernels and the
// ordering bookkeeping are libferry's; the kit reaches them through its one entry,
// detail::testkit_enqueue_compute (src/testkit_entry.hpp), which validates the arguments
// and reports errors under this function's name.
#include "ferry/testing.hpp"

#include "testkit_entry.hpp"

namespace ferry {

void run_synthetic_compute(const Queue& queue, const DeviceBuffer& input, const DeviceBuffer& output,
                           std::uint32_t units, std::source_location where) {
  detail::testkit_enqueue_compute(queue, input, output, units, where);
}

}  // namespace ferry
