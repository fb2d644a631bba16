// SPDX-License-Identifier: MIT
// Out of device memory at pool growth (the pool contract in pool.hpp): a request that fits the
// device's total memory but not what is left of it fails with out_of_memory from the driver
// (cudaMalloc, vkAllocateMemory, the host backend's memory limit), through the pool's one growth
// path, and leaves a pool that validates, serves smaller requests and still moves data.
#include <algorithm>
#include <string>
#include <vector>

#include "conformance.hpp"

using namespace ferry;

namespace {
constexpr std::uint64_t MiB = 1024 * 1024;
}  // namespace

CONFORMANCE_CASE("out of memory: growth past the free memory fails typed, and the pool recovers") {
  Device dev = conformance::open_device();
  const Capabilities& caps = dev.capabilities();
  const std::uint64_t total = caps.device_memory_bytes;
  // Only memory that is the device's own is filled here. The host backend's and CPU drivers'
  // device memory is the machine's, where allocations are overcommitted (they would succeed
  // and then hurt the machine), unless the host backend runs under a memory limit
  // (FERRY_HOST_MEMORY_LIMIT, which it also reports as its largest allocation).
  const bool host_limited = caps.backend == Backend::host && caps.max_allocation_bytes != 0;
  if (total == 0 || (!caps.is_gpu && !host_limited)) {
    MESSAGE("not supported: " << (total == 0 ? "the device's memory size is unknown"
                                             : "device memory is the machine's memory (the host backend "
                                               "runs this case under FERRY_HOST_MEMORY_LIMIT)"));
    return;
  }
  // Chunks of ~60% of the memory (at most the largest allocation), whole multiples of the
  // pool's 2 MiB rounding of large segments: the second one cannot fit.
  std::uint64_t chunk = total / 10 * 6;
  if (caps.max_allocation_bytes != 0) chunk = std::min(chunk, caps.max_allocation_bytes);
  chunk = chunk / (2 * MiB) * (2 * MiB);
  REQUIRE(chunk >= 2 * MiB);
  Queue owner = dev.queue(QueueRole::compute);

  std::vector<DeviceBuffer> held;
  bool out_of_memory = false;
  const std::uint64_t most = total / chunk + 1;  // this many chunks exceed the memory
  for (std::uint64_t i = 0; i < most && !out_of_memory; ++i) {
    try {
      held.push_back(dev.pool().allocate(chunk, owner));
    } catch (const Error& e) {
      CHECK_MESSAGE(e.code() == ErrorCode::out_of_memory, std::string(e.what()));
      out_of_memory = true;
      MESSAGE("allocation " << i + 1 << " of " << chunk / MiB << " MiB (device " << total / MiB
                            << " MiB): " << std::string(e.what()));
    }
  }
  CHECK_MESSAGE(out_of_memory, held.size() << " chunks of " << chunk / MiB << " MiB fit a device of "
                                           << total / MiB << " MiB");
  dev.pool().validate();
  const PoolBudget budget = dev.pool().get_budget();
  CHECK(budget.active_bytes == held.size() * chunk);
  CHECK(budget.reserved_bytes <= total);

  // Smaller requests are served and data moves, with the chunks still held.
  DeviceBuffer small = dev.pool().allocate(1 * MiB, owner);
  {
    Transfer xfer(dev);
    conformance::check_round_trip(dev, xfer);
  }
  small.release();
  // A released chunk serves the same request again without growing the pool.
  if (!held.empty()) {
    const std::uint64_t segments = dev.pool().get_budget().segment_allocations;
    held.clear();
    DeviceBuffer again = dev.pool().allocate(chunk, owner);
    CHECK(dev.pool().get_budget().segment_allocations == segments);
  }
  dev.pool().validate();
}
