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
std::unique_ptr<VendorImage> make_vulkan_image(const ferry::Device&, const ferry::ImageDesc&) {
  auto image = std::make_unique<VendorImage>();
  image->skipped = "built without the Vulkan backend";
  return image;
}
VendorImageCopy measure_vulkan_image_copy(const ferry::Device&, const ferry::ImageDesc&,
                                          std::span<const ferry::ImageRegion>, std::uint64_t, int) {
  VendorImageCopy r;
  r.skipped = "built without the Vulkan backend";
  return r;
}
VendorContention measure_vulkan_contention(const ferry::Device&, const ContentionConfig&) {
  VendorContention r;
  r.skipped = "built without the Vulkan backend";
  return r;
}
}  // namespace ferry_bench
