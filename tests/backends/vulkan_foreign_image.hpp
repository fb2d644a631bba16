// SPDX-License-Identifier: MIT
// The engine's VkImage on ferry's VkDevice for the image cases of the Vulkan and pair suites
// (conformance/image.cpp): made by testkit/vulkan_image.hpp, the maker ferry-bench's image
// study uses too, and wrapped as the suite's ForeignImage.
#pragma once

#include <doctest/doctest.h>

#include <dlfcn.h>
#include <vulkan/vulkan.h>

#include <memory>
#include <string>

#include "conformance.hpp"
#include "ferry/vulkan.hpp"
#include "vulkan_image.hpp"

namespace conformance {

/// The loader's vkGetInstanceProcAddr (libvulkan.so.1, which ferry's Vulkan backend opens too).
inline PFN_vkGetInstanceProcAddr vulkan_loader() {
  static void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != nullptr);
  auto gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
  REQUIRE((gipa != nullptr));
  return gipa;
}

/// An engine's VkImage of `desc` on `dev`'s VkDevice: optimal tiling, device-local memory of
/// its own (with `exportable`, a dedicated allocation exportable as an opaque fd, the image
/// created for external memory), in UNDEFINED layout, sampled after every copy, EXCLUSIVE.
/// Destroyed when the ForeignImage goes. Null, with the reason, when the device cannot make it.
inline std::unique_ptr<ForeignImage> foreign_vulkan_image(ferry::Device& dev, const ferry::ImageDesc& desc,
                                                          bool exportable, std::string& why_not) {
  const ferry::vulkan::NativeHandles h = ferry::vulkan::native_handles(dev);
  const ferry::testkit::VulkanImageFns f = ferry::testkit::load_vulkan_image_fns(vulkan_loader(), h.instance, h.device);
  const ferry::testkit::VulkanEngineImage made =
      ferry::testkit::make_vulkan_engine_image(f, h.physical_device, h.device, desc, exportable);
  if (!made.skipped.empty()) {
    why_not = made.skipped;
    return nullptr;
  }
  auto out = std::make_unique<ForeignImage>();
  out->native = made.native();
  out->desc = desc;
  const VkDevice device = h.device;
  out->free = [f, device, made] { made.destroy(f, device); };
  return out;
}

}  // namespace conformance
