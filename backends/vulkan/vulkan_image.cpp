// SPDX-License-Identifier: MIT
// Vulkan images: an engine's adopted VkImage, the export of its memory to another API
// (interop), and the queue's image copies and hand-over barriers.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "vulkan_internal.hpp"

namespace ferry::detail {

namespace {

// Barrier stages on both sides, as the queue's own barriers (vulkan_queue.cpp): hand-overs
// chain with the ALL_COMMANDS semaphore waits and signals around them.
constexpr VkPipelineStageFlags kAllCommands = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;

}  // namespace

// An engine's VkImage: Vulkan has no query of an image's shape, format or layout, so the
// stated ones are taken on trust, except that its memory requirements must hold the stated
// shape's texel data (an image smaller than that is not the image described).
std::unique_ptr<BackendImage> VulkanDevice::adopt_image(const NativeImage& native, const ImageDesc& desc,
                                                        std::uint32_t owner_family) {
  if (native.host_pointer != 0 || native.host_row_pitch != 0 || native.host_slice_pitch != 0 ||
      native.cuda_array != 0 || native.cuda_mipmapped) {
    vk_fail(ErrorCode::invalid_argument,
            "a host or CUDA field of NativeImage is set, but a Vulkan device addresses images through a VkImage "
            "(NativeImage::vulkan_image; see ferry::vulkan::native_image)");
  }
  if (native.vulkan_image == 0) vk_fail(ErrorCode::invalid_argument, "NativeImage::vulkan_image is a null VkImage");
  const auto final_layout = static_cast<VkImageLayout>(native.vulkan_final_layout);
  if (final_layout == VK_IMAGE_LAYOUT_UNDEFINED || final_layout == VK_IMAGE_LAYOUT_PREINITIALIZED) {
    vk_fail(ErrorCode::invalid_argument,
            "NativeImage::vulkan_final_layout " + std::to_string(native.vulkan_final_layout) +
                " is UNDEFINED or PREINITIALIZED: state the layout the engine uses the image in after a copy");
  }
  const bool concurrent = native.vulkan_sharing == MemorySharing::concurrent;
  if (concurrent) {
    const auto& f = native.vulkan_queue_families;
    if (std::find(f.begin(), f.end(), owner_family) == f.end()) {
      vk_fail(ErrorCode::invalid_argument, "a concurrent image's vulkan_queue_families do not include the owner queue's "
                                           "family " + std::to_string(owner_family));
    }
  } else if (!native.vulkan_queue_families.empty()) {
    vk_fail(ErrorCode::invalid_argument, "vulkan_queue_families is set for an exclusive image (it lists the families of "
                                         "a concurrent one)");
  }
  auto image = std::make_unique<VulkanImage>();
  static_assert(sizeof(image->image) <= sizeof(native.vulkan_image));
  std::memcpy(&image->image, &native.vulkan_image, sizeof(image->image));
  VkMemoryRequirements req{};
  vk_.vkGetImageMemoryRequirements(device_, image->image, &req);
  const std::uint64_t texels = host_image_bytes(desc);
  if (req.size < texels) {
    vk_fail(ErrorCode::invalid_argument,
            "the VkImage's memory requirements (" + std::to_string(req.size) + " bytes) cannot hold the " +
                std::to_string(texels) + " bytes of the stated shape: not the image described");
  }
  image->engine_layout = static_cast<VkImageLayout>(native.vulkan_layout);
  image->final_layout = final_layout;
  image->concurrent = concurrent;
  image->mip_levels = desc.mip_levels;
  image->array_layers = desc.array_layers;
  return image;
}

// Interop (images): the engine's VkDeviceMemory under an adopted VkImage, exported as an
// opaque fd. Vulkan reports neither an allocation's size nor the memory an image is bound to,
// so the stated ones are checked only against what the image needs: its memory requirements
// (size and alignment) within the stated allocation from the stated offset. An fd of memory
// allocated without VkExportMemoryAllocateInfo is refused by the driver (vkGetMemoryFdKHR).
ExternalMemory VulkanDevice::export_image_memory(const NativeImage& native) {
  if (!fd_export_) {
    vk_fail(ErrorCode::unsupported, caps_.name + ": memory cannot be exported as opaque fds "
                                                 "(VK_KHR_external_memory_fd missing)");
  }
  if (native.vulkan_memory == 0) {
    vk_fail(ErrorCode::invalid_argument,
            "NativeImage::vulkan_memory is null: an interop pair imports the image's memory into CUDA "
            "(see ferry::vulkan::with_exported_memory)");
  }
  VkImage image = VK_NULL_HANDLE;
  std::memcpy(&image, &native.vulkan_image, sizeof(image));
  VkMemoryRequirements req{};
  vk_.vkGetImageMemoryRequirements(device_, image, &req);
  if (native.vulkan_memory_size == 0 || native.vulkan_memory_offset > native.vulkan_memory_size ||
      req.size > native.vulkan_memory_size - native.vulkan_memory_offset) {
    vk_fail(ErrorCode::invalid_argument,
            "NativeImage::vulkan_memory_size " + std::to_string(native.vulkan_memory_size) + " from vulkan_memory_offset " +
                std::to_string(native.vulkan_memory_offset) + " cannot hold the image's " + std::to_string(req.size) +
                " bytes (vkGetImageMemoryRequirements): state the allocation's allocationSize and the bind offset");
  }
  if (req.alignment != 0 && native.vulkan_memory_offset % req.alignment != 0) {
    vk_fail(ErrorCode::invalid_argument,
            "NativeImage::vulkan_memory_offset " + std::to_string(native.vulkan_memory_offset) +
                " is not a multiple of the image's alignment " + std::to_string(req.alignment) + ": not its bind offset");
  }
  if (native.vulkan_dedicated && native.vulkan_memory_offset != 0) {
    vk_fail(ErrorCode::invalid_argument, "NativeImage::vulkan_dedicated is set with vulkan_memory_offset " +
                                             std::to_string(native.vulkan_memory_offset) +
                                             ": a dedicated allocation binds its image at offset 0");
  }
  VkMemoryGetFdInfoKHR info{VK_STRUCTURE_TYPE_MEMORY_GET_FD_INFO_KHR};
  std::memcpy(&info.memory, &native.vulkan_memory, sizeof(info.memory));
  info.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
  int fd = -1;
  // A failure other than running out of memory is the engine's memory: not exportable
  // (allocated without VkExportMemoryAllocateInfo for VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT).
  const auto classify = [](VkResult r) {
    return r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_TOO_MANY_OBJECTS ? vk_classify(r)
                                                                              : ErrorCode::invalid_argument;
  };
  FERRY_CHECK_GEN(vk_.vkGetMemoryFdKHR(device_, &info, &fd), VK_SUCCESS, vk_describe, classify);
  ExternalMemory out;
  out.fd = fd;
  out.size = native.vulkan_memory_size;
  out.dedicated = native.vulkan_dedicated;
  return out;
}

// Image copies: one vkCmdCopyBufferToImage / vkCmdCopyImageToBuffer of all regions, the
// image in the transfer layout its hand-over (image_barrier) put it in. The buffer side is
// tracked like a buffer copy's, over the span of the regions' footprints.
void VulkanQueue::copy_image(VulkanImage& image, VkBuffer buffer, VkDeviceSize base,
                             std::span<const ImageCopy> regions, bool to_image, bool host_dst) {
  std::lock_guard lock(mutex_);
  VkDeviceSize lo = ~VkDeviceSize{0}, hi = 0;
  std::vector<VkBufferImageCopy> copies;
  copies.reserve(regions.size());
  for (const ImageCopy& c : regions) {
    const std::uint64_t slices = std::uint64_t{c.depth} * c.layers;
    lo = std::min<VkDeviceSize>(lo, base + c.buffer_offset);
    hi = std::max<VkDeviceSize>(hi, base + c.buffer_offset + (slices - 1) * c.slice_pitch +
                                        std::uint64_t{c.rows - 1} * c.row_pitch + c.row_bytes);
    VkBufferImageCopy r{};
    r.bufferOffset = base + c.buffer_offset;
    r.bufferRowLength = c.row_length;
    r.bufferImageHeight = c.image_height;
    r.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, c.mip, c.base_layer, c.layers};
    r.imageOffset = {static_cast<std::int32_t>(c.x), static_cast<std::int32_t>(c.y), static_cast<std::int32_t>(c.z)};
    r.imageExtent = {c.width, c.height, c.depth};
    copies.push_back(r);
  }
  order({{buffer, lo, hi, !to_image}});
  const auto n = static_cast<std::uint32_t>(copies.size());
  if (to_image) {
    device_.vk().vkCmdCopyBufferToImage(current_.commands, buffer, image.image, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL,
                                        n, copies.data());
  } else {
    device_.vk().vkCmdCopyImageToBuffer(current_.commands, image.image, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, buffer,
                                        n, copies.data());
  }
  writes_host_ = writes_host_ || host_dst;
}

void VulkanQueue::copy_h2i(BackendImage& dst, HostRef src, std::span<const ImageCopy> regions) {
  copy_image(static_cast<VulkanImage&>(dst), buffer_of(src.memory), src.offset, regions, true, false);
}
void VulkanQueue::copy_i2h(HostRef dst, BackendImage& src, std::span<const ImageCopy> regions) {
  copy_image(static_cast<VulkanImage&>(src), buffer_of(dst.memory), dst.offset, regions, false, true);
}
void VulkanQueue::copy_d2i(BackendImage& dst, DeviceRef src, std::span<const ImageCopy> regions) {
  copy_image(static_cast<VulkanImage&>(dst), buffer_of(src.segment), src.offset, regions, true, false);
}
void VulkanQueue::copy_i2d(DeviceRef dst, BackendImage& src, std::span<const ImageCopy> regions) {
  copy_image(static_cast<VulkanImage&>(src), buffer_of(dst.segment), dst.offset, regions, false, false);
}

// One half of an image hand-over (ImageHandOff), over every level and layer: with a queue-
// family ownership transfer, the release (on the source family) or the acquire (on the
// destination family), both stating the same layouts; without one, the executor records the
// whole transition and the owner nothing. The first scope is every stage's writes (the
// engine's use before, the copy after); the second scope is what follows: the copy (transfer
// reads or writes), or the engine's use (any access) after the semaphore it waits on.
void VulkanQueue::image_barrier(BackendImage& image, const ImageHandOff& h) {
  auto& img = static_cast<VulkanImage&>(image);
  const bool transfer = img.transfers(h);
  if (!transfer && !h.executor) return;
  std::lock_guard lock(mutex_);
  recording();
  VkImageMemoryBarrier b{VK_STRUCTURE_TYPE_IMAGE_MEMORY_BARRIER};
  b.oldLayout = img.layout(h.from, false);
  b.newLayout = img.layout(h.to, true);
  b.srcQueueFamilyIndex = transfer ? h.src_family : VK_QUEUE_FAMILY_IGNORED;
  b.dstQueueFamilyIndex = transfer ? h.dst_family : VK_QUEUE_FAMILY_IGNORED;
  b.image = img.image;
  b.subresourceRange = {VK_IMAGE_ASPECT_COLOR_BIT, 0, img.mip_levels, 0, img.array_layers};
  const auto access = [](ImageUse use, bool before) -> VkAccessFlags {
    switch (use) {
      case ImageUse::copy_dst: return VK_ACCESS_TRANSFER_WRITE_BIT;
      case ImageUse::copy_src: return before ? VkAccessFlags{0} : VkAccessFlags{VK_ACCESS_TRANSFER_READ_BIT};
      case ImageUse::engine: break;
    }
    return before ? VkAccessFlags{VK_ACCESS_MEMORY_WRITE_BIT}
                  : VkAccessFlags{VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT};
  };
  const VkAccessFlags src_access = access(h.from, true);
  const VkAccessFlags dst_access = access(h.to, false);
  // A release makes the writes available and a matching acquire visible: each half carries
  // only its own side's access (the other is ignored by the queue that does not own it).
  b.srcAccessMask = transfer && !h.release ? 0 : src_access;
  b.dstAccessMask = transfer && h.release ? 0 : dst_access;
  device_.vk().vkCmdPipelineBarrier(current_.commands, kAllCommands, kAllCommands, 0, 0, nullptr, 0, nullptr, 1, &b);
  if (h.to == ImageUse::engine) img.engine_layout = img.final_layout;
}

}  // namespace ferry::detail
