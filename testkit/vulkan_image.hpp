// SPDX-License-Identifier: MIT
// An engine's VkImage, made with Vulkan's own calls as an engine makes the images it has ferry
// adopt (Device::adopt_image): one maker for the Vulkan conformance suite's images
// (tests/backends/vulkan.cpp) and ferry-bench's image study (tools/bench/vendor_vulkan.cpp),
// so that the suite checks the images the bench measures. Header-only and not installed: it
// needs the Vulkan headers, which ferry-testkit does not. Entry points come from the caller's
// loader (vkGetInstanceProcAddr), as ferry's own do.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <vulkan/vulkan.h>

#include "ferry/image.hpp"
#include "ferry/vulkan.hpp"

namespace ferry::testkit {

/// The entry points that making, binding and destroying an image needs, on one VkDevice.
struct VulkanImageFns {
  PFN_vkGetPhysicalDeviceFormatProperties format_properties = nullptr;
  PFN_vkGetPhysicalDeviceImageFormatProperties image_format_properties = nullptr;
  PFN_vkGetPhysicalDeviceMemoryProperties memory_properties = nullptr;
  PFN_vkCreateImage create_image = nullptr;
  PFN_vkDestroyImage destroy_image = nullptr;
  PFN_vkGetImageMemoryRequirements requirements = nullptr;
  PFN_vkAllocateMemory allocate = nullptr;
  PFN_vkFreeMemory free_memory = nullptr;
  PFN_vkBindImageMemory bind = nullptr;
};

/// The entry points of `device` (of `instance`) through `gipa`; throws std::runtime_error
/// naming one the loader lacks.
inline VulkanImageFns load_vulkan_image_fns(PFN_vkGetInstanceProcAddr gipa, VkInstance instance, VkDevice device) {
  const auto need = [](PFN_vkVoidFunction fn, const char* name) {
    if (fn == nullptr) throw std::runtime_error(std::string("Vulkan loader: no ") + name);
    return fn;
  };
  const auto gdpa = reinterpret_cast<PFN_vkGetDeviceProcAddr>(
      need(gipa(instance, "vkGetDeviceProcAddr"), "vkGetDeviceProcAddr"));
  const auto inst = [&](const char* name) { return need(gipa(instance, name), name); };
  const auto dev = [&](const char* name) { return need(gdpa(device, name), name); };
  VulkanImageFns f;
  f.format_properties = reinterpret_cast<PFN_vkGetPhysicalDeviceFormatProperties>(
      inst("vkGetPhysicalDeviceFormatProperties"));
  f.image_format_properties = reinterpret_cast<PFN_vkGetPhysicalDeviceImageFormatProperties>(
      inst("vkGetPhysicalDeviceImageFormatProperties"));
  f.memory_properties = reinterpret_cast<PFN_vkGetPhysicalDeviceMemoryProperties>(
      inst("vkGetPhysicalDeviceMemoryProperties"));
  f.create_image = reinterpret_cast<PFN_vkCreateImage>(dev("vkCreateImage"));
  f.destroy_image = reinterpret_cast<PFN_vkDestroyImage>(dev("vkDestroyImage"));
  f.requirements = reinterpret_cast<PFN_vkGetImageMemoryRequirements>(dev("vkGetImageMemoryRequirements"));
  f.allocate = reinterpret_cast<PFN_vkAllocateMemory>(dev("vkAllocateMemory"));
  f.free_memory = reinterpret_cast<PFN_vkFreeMemory>(dev("vkFreeMemory"));
  f.bind = reinterpret_cast<PFN_vkBindImageMemory>(dev("vkBindImageMemory"));
  return f;
}

/// The usage and the layout after every ferry copy of an engine's image: the engine samples
/// it, ferry copies into and out of it.
inline constexpr VkImageUsageFlags kEngineImageUsage =
    VK_IMAGE_USAGE_TRANSFER_SRC_BIT | VK_IMAGE_USAGE_TRANSFER_DST_BIT | VK_IMAGE_USAGE_SAMPLED_BIT;
inline constexpr VkImageLayout kEngineImageLayout = VK_IMAGE_LAYOUT_SHADER_READ_ONLY_OPTIMAL;

/// An engine's image and its memory, or why the device cannot make one (`skipped`).
struct VulkanEngineImage {
  VkImage image = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkDeviceSize allocation_size = 0;  ///< the memory's allocationSize
  bool exportable = false;           ///< made for an interop pair (see make_vulkan_engine_image)
  std::string skipped;
  /// What ferry's Device::adopt_image is given: UNDEFINED now, kEngineImageLayout after copies;
  /// for an exportable image also its memory (a dedicated allocation bound at offset 0).
  [[nodiscard]] NativeImage native() const {
    const NativeImage n = vulkan::native_image(image, VK_IMAGE_LAYOUT_UNDEFINED, kEngineImageLayout);
    return exportable ? vulkan::with_exported_memory(n, memory, 0, allocation_size, true, kEngineImageUsage) : n;
  }
  /// Destroy the image and free its memory (nothing when none was made).
  void destroy(const VulkanImageFns& f, VkDevice device) const {
    if (image != VK_NULL_HANDLE) f.destroy_image(device, image, nullptr);
    if (memory != VK_NULL_HANDLE) f.free_memory(device, memory, nullptr);
  }
};

/// An engine's image of `desc` on `device`: optimal tiling, device-local memory of its own,
/// kEngineImageUsage, EXCLUSIVE, in UNDEFINED layout. `exportable` (interop pairs): the image
/// is created for, and its memory dedicated to it and allocated for, export as an opaque fd
/// (VkExternalMemoryImageCreateInfo, VkMemoryDedicatedAllocateInfo, VkExportMemoryAllocateInfo),
/// which the device must have VK_KHR_external_memory_fd for. None, with the reason in
/// `skipped`, when the format lacks optimal-tiling transfer and sampling support or the shape
/// exceeds the device's limits for it. A failing Vulkan call throws std::runtime_error naming
/// it, after destroying what the call left.
inline VulkanEngineImage make_vulkan_engine_image(const VulkanImageFns& f, VkPhysicalDevice physical, VkDevice device,
                                                  const ImageDesc& desc, bool exportable = false) {
  const auto check = [](VkResult r, const char* call) {
    if (r != VK_SUCCESS) throw std::runtime_error(std::string(call) + " failed: VkResult " + std::to_string(r));
  };
  VulkanEngineImage out;
  const VkFormat format = vulkan::to_vk_format(desc.format);
  if (format == VK_FORMAT_UNDEFINED) {
    out.skipped = "the format has no VkFormat";
    return out;
  }
  VkFormatProperties fp{};
  f.format_properties(physical, format, &fp);
  constexpr VkFormatFeatureFlags kNeeded =
      VK_FORMAT_FEATURE_TRANSFER_SRC_BIT | VK_FORMAT_FEATURE_TRANSFER_DST_BIT | VK_FORMAT_FEATURE_SAMPLED_IMAGE_BIT;
  if ((fp.optimalTilingFeatures & kNeeded) != kNeeded) {
    out.skipped = "the device has no optimal-tiling transfer and sampling support for this format";
    return out;
  }
  const VkImageType type = desc.depth > 1 ? VK_IMAGE_TYPE_3D : VK_IMAGE_TYPE_2D;
  VkImageFormatProperties ifp{};
  const VkResult supported =
      f.image_format_properties(physical, format, type, VK_IMAGE_TILING_OPTIMAL, kEngineImageUsage, 0, &ifp);
  if (supported == VK_ERROR_FORMAT_NOT_SUPPORTED) {
    out.skipped = "the device makes no optimal-tiling images of this format";
    return out;
  }
  check(supported, "vkGetPhysicalDeviceImageFormatProperties");
  if (ifp.maxMipLevels < desc.mip_levels || ifp.maxArrayLayers < desc.array_layers ||
      ifp.maxExtent.width < desc.width || ifp.maxExtent.height < desc.height || ifp.maxExtent.depth < desc.depth) {
    out.skipped = "the device cannot make an image of this shape in this format (at most " +
                  std::to_string(ifp.maxExtent.width) + "x" + std::to_string(ifp.maxExtent.height) + "x" +
                  std::to_string(ifp.maxExtent.depth) + ", " + std::to_string(ifp.maxMipLevels) + " levels, " +
                  std::to_string(ifp.maxArrayLayers) + " layers)";
    return out;
  }
  VkImageCreateInfo ci{};
  ci.sType = VK_STRUCTURE_TYPE_IMAGE_CREATE_INFO;
  ci.imageType = type;
  ci.format = format;
  ci.extent = {desc.width, desc.height, desc.depth};
  ci.mipLevels = desc.mip_levels;
  ci.arrayLayers = desc.array_layers;
  ci.samples = VK_SAMPLE_COUNT_1_BIT;
  ci.tiling = VK_IMAGE_TILING_OPTIMAL;
  ci.usage = kEngineImageUsage;
  ci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  ci.initialLayout = VK_IMAGE_LAYOUT_UNDEFINED;
  constexpr auto kOpaqueFd = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
  VkExternalMemoryImageCreateInfo external{};
  external.sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_IMAGE_CREATE_INFO;
  external.handleTypes = kOpaqueFd;
  if (exportable) ci.pNext = &external;
  out.exportable = exportable;
  check(f.create_image(device, &ci, nullptr, &out.image), "vkCreateImage");
  try {
    VkMemoryRequirements req{};
    f.requirements(device, out.image, &req);
    VkPhysicalDeviceMemoryProperties mp{};
    f.memory_properties(physical, &mp);
    std::uint32_t type_index = ~0u;
    for (std::uint32_t t = 0; t < mp.memoryTypeCount && type_index == ~0u; ++t) {
      if ((req.memoryTypeBits & (1u << t)) != 0 &&
          (mp.memoryTypes[t].propertyFlags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) != 0) {
        type_index = t;
      }
    }
    if (type_index == ~0u) throw std::runtime_error("no device-local memory type for the image");
    VkMemoryAllocateInfo ai{};
    ai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
    ai.allocationSize = req.size;
    ai.memoryTypeIndex = type_index;
    VkMemoryDedicatedAllocateInfo dedicated{};
    dedicated.sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO;
    dedicated.image = out.image;
    VkExportMemoryAllocateInfo exported{};
    exported.sType = VK_STRUCTURE_TYPE_EXPORT_MEMORY_ALLOCATE_INFO;
    exported.pNext = &dedicated;
    exported.handleTypes = kOpaqueFd;
    if (exportable) ai.pNext = &exported;
    out.allocation_size = req.size;
    check(f.allocate(device, &ai, nullptr, &out.memory), "vkAllocateMemory");
    check(f.bind(device, out.image, out.memory, 0), "vkBindImageMemory");
  } catch (...) {
    out.destroy(f, device);
    throw;
  }
  return out;
}

}  // namespace ferry::testkit
