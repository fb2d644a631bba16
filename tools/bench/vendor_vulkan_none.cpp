// SPDX-License-Identifier: MIT
#include "vendor.hpp"

namespace ferry_bench {
VulkanAnchor measure_vulkan_anchor(const ferry::Device&, std::uint64_t bytes, int, int, std::uint32_t, int, bool) {
  VulkanAnchor r;
  r.bytes = bytes;
  r.skipped = "built without the Vulkan backend";
  return r;
}
VulkanCallCost measure_vulkan_call_cost(const ferry::Device&, std::uint64_t, int, int) { return {}; }
}  // namespace ferry_bench
