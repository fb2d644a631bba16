// SPDX-License-Identifier: MIT
// The Vulkan backend's public entry points (include/ferry/vulkan.hpp): adoption of an
// engine's device, its native handles, and the hand-over of a copy to the engine. The
// backend-neutral part of each (handle checks, points, owed acquires, wrapping a device) is
// the core's, reached through core_access.hpp; what is left here is Vulkan's.
#include "ferry/vulkan.hpp"

#include <string>

#include "core_access.hpp"
#include "vulkan_adopt.hpp"
#include "vulkan_internal.hpp"

namespace ferry::vulkan {

Device adopt_device(const AdoptInfo& info, std::source_location where) {
  detail::VulkanAdoptInfo adopt;
  adopt.instance = info.instance;
  adopt.physical_device = info.physical_device;
  adopt.device = info.device;
  adopt.compute_family = info.compute_family;
  adopt.compute_index = info.compute_index;
  adopt.transfer_family = info.transfer_family;
  adopt.transfer_index = info.transfer_index;
  adopt.get_instance_proc_addr = info.get_instance_proc_addr;
  adopt.host_pointer_import = info.host_pointer_import;
  adopt.submit_mutex = info.submit_mutex;
  std::unique_ptr<detail::BackendDevice> backend;
  try {
    backend = detail::vulkan_adopt(adopt);
  } catch (const Error& err) {
    // The backend's messages name its internal function; the caller called adopt_device.
    std::string message = err.message();
    if (message.starts_with("vulkan_adopt: ")) message.erase(0, std::string("vulkan_adopt: ").size());
    throw Error(err.code(), "vulkan::adopt_device: " + message, err.call(), where);
  }
  return detail::core::wrap_backend_device(std::move(backend), DeviceOptions{.backend = Backend::vulkan},
                                           where);
}

NativeHandles native_handles(const Device& device, std::source_location where) {
  // A device that states Backend::vulkan is a VulkanDevice (an interop pair's Vulkan side too).
  auto& vk = static_cast<detail::VulkanDevice&>(
      detail::core::backend_device(device, Backend::vulkan, "vulkan::native_handles", where));
  NativeHandles h;
  h.instance = vk.instance();
  h.physical_device = vk.physical_device();
  h.device = vk.handle();
  h.compute_family = vk.compute_family();
  h.transfer_family = vk.transfer_family();
  // The queues are the device's own.
  h.compute_queue = static_cast<detail::VulkanQueue&>(vk.default_queue(QueueRole::compute)).handle();
  h.transfer_queue = static_cast<detail::VulkanQueue&>(vk.default_queue(QueueRole::transfer)).handle();
  h.submit_mutex = &vk.submit_mutex();
  h.synchronization2 = vk.vk().vkQueueSubmit2 != nullptr;  // loaded only with the feature on
  return h;
}

namespace {

/// The core's reader of the ready point's semaphore: its VkSemaphore into `out`.
detail::core::SemaphoreReader semaphore_into(VkSemaphore& out) {
  return [&out](detail::BackendSemaphore& s) { out = static_cast<detail::VulkanSemaphore&>(s).handle(); };
}

}  // namespace

EngineAcquire engine_acquire(const DeviceBuffer& buffer, const TimelinePoint& ready, std::source_location where) {
  EngineAcquire out;
  const detail::core::EngineHandOver h = detail::core::hand_over_to_engine(
      buffer, ready, Backend::vulkan, "vulkan::engine_acquire", where, semaphore_into(out.semaphore));
  out.value = h.value;
  if (!h.acquire) return out;
  // An acquire the buffer does not need (one family, a CONCURRENT buffer) is taken all the
  // same: the one ferry would record is empty too.
  const auto& vk = static_cast<const detail::VulkanDevice&>(*h.device);
  if (!vk.needs_ownership_transfer(h.range.segment, h.src_family, h.dst_family)) return out;
  out.barrier_needed = true;
  out.barrier.srcStageMask = VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT;
  out.barrier.srcAccessMask = VK_ACCESS_2_NONE;
  out.barrier.dstStageMask = VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT;
  out.barrier.dstAccessMask = VK_ACCESS_2_MEMORY_READ_BIT | VK_ACCESS_2_MEMORY_WRITE_BIT;
  out.barrier.srcQueueFamilyIndex = h.src_family;
  out.barrier.dstQueueFamilyIndex = h.dst_family;
  out.barrier.buffer = detail::buffer_of(h.range.segment);
  out.barrier.offset = h.range.offset;
  out.barrier.size = h.bytes;
  return out;
}

EngineImageAcquire engine_acquire(const Image& image, const TimelinePoint& ready, std::source_location where) {
  EngineImageAcquire out;
  const detail::core::EngineHandOver h = detail::core::hand_over_to_engine(
      image, ready, Backend::vulkan, "vulkan::engine_acquire(image)", where, semaphore_into(out.semaphore));
  out.value = h.value;
  if (!h.acquire) return out;
  const auto& vi = static_cast<const detail::VulkanImage&>(*h.image);
  out.barrier_needed = true;
  out.barrier.srcStageMask = VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT;
  out.barrier.srcAccessMask = VK_ACCESS_2_NONE;
  out.barrier.dstStageMask = VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT;
  out.barrier.dstAccessMask = VK_ACCESS_2_MEMORY_READ_BIT | VK_ACCESS_2_MEMORY_WRITE_BIT;
  out.barrier.oldLayout = vi.layout(h.image_use, false);
  out.barrier.newLayout = vi.final_layout;
  out.barrier.srcQueueFamilyIndex = h.src_family;
  out.barrier.dstQueueFamilyIndex = h.dst_family;
  out.barrier.image = vi.image;
  out.barrier.subresourceRange = {VK_IMAGE_ASPECT_COLOR_BIT, 0, vi.mip_levels, 0, vi.array_layers};
  return out;
}

}  // namespace ferry::vulkan
