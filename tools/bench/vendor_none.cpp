// SPDX-License-Identifier: MIT
#include "vendor.hpp"

namespace ferry_bench {
VendorCopy measure_vendor_copy(std::uint64_t, int) { return {}; }
VendorCallCost measure_vendor_call_cost(std::uint64_t, int, int) { return {}; }
std::unique_ptr<VendorImage> make_cuda_image(const ferry::Device&, const ferry::ImageDesc&) {
  auto image = std::make_unique<VendorImage>();
  image->skipped = "built without CUDA";
  return image;
}
VendorImageCopy measure_cuda_image_copy(const ferry::Device&, const VendorImage&, const ferry::ImageDesc&,
                                        std::span<const ferry::ImageRegion>, std::uint64_t, int) {
  VendorImageCopy r;
  r.skipped = "built without CUDA";
  return r;
}
VendorContention measure_cuda_contention(const ferry::Device&, const ContentionConfig&) {
  VendorContention r;
  r.skipped = "built without CUDA";
  return r;
}
}  // namespace ferry_bench
