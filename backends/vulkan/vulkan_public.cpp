// SPDX-License-Identifier: MIT
// The public adoption entry point (include/ferry/vulkan.hpp): AdoptInfo -> VulkanAdoptInfo,
// then the front end's wrap_backend_device, so an adopted device is set up like an opened one.
#include "ferry/vulkan.hpp"

#include <string>

#include "device_state.hpp"
#include "handle_access.hpp"
#include "image_state.hpp"
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
  return detail::wrap_backend_device(std::move(backend), DeviceOptions{.backend = Backend::vulkan},
                                     where);
}

NativeHandles native_handles(const Device& device, std::source_location where) {
  constexpr const char* fn = "vulkan::native_handles";
  FERRY_REQUIRE(static_cast<bool>(device) && device.is_open(), fn, "null or closed device", where);
  detail::BackendDevice* base = detail::access::state(device)->backend.get();
  if (detail::BackendDevice* part = base->part(Backend::vulkan)) base = part;  // an interop pair's Vulkan side
  const auto* vk = dynamic_cast<const detail::VulkanDevice*>(base);
  FERRY_REQUIRE(vk != nullptr, fn,
                "the device is not a Vulkan device (backend " + std::string(to_string(device.backend())) + ")",
                where);
  NativeHandles h;
  h.instance = vk->instance();
  h.physical_device = vk->physical_device();
  h.device = vk->handle();
  h.compute_family = vk->compute_family();
  h.transfer_family = vk->transfer_family();
  auto* backend = const_cast<detail::VulkanDevice*>(vk);  // the queues are the device's own
  h.compute_queue = static_cast<detail::VulkanQueue&>(backend->default_queue(QueueRole::compute)).handle();
  h.transfer_queue = static_cast<detail::VulkanQueue&>(backend->default_queue(QueueRole::transfer)).handle();
  h.submit_mutex = &backend->submit_mutex();
  h.synchronization2 = vk->vk().vkQueueSubmit2 != nullptr;  // loaded only with the feature on
  return h;
}

EngineAcquire engine_acquire(const DeviceBuffer& buffer, const TimelinePoint& ready, std::source_location where) {
  constexpr const char* fn = "vulkan::engine_acquire";
  FERRY_REQUIRE(static_cast<bool>(detail::access::state(buffer)), fn, "null or moved-from device buffer", where);
  detail::BlockState& b = *detail::access::state(buffer);
  const auto device = detail::lock_device(b.device, fn, where);
  FERRY_REQUIRE(!b.released, fn, "the device buffer was released", where);
  auto* vk = dynamic_cast<detail::VulkanDevice*>(device->backend.get());
  FERRY_REQUIRE(vk != nullptr, fn,
                "the buffer's device is not a Vulkan device (backend " + std::string(to_string(device->options.backend)) +
                    ")",
                where);
  FERRY_REQUIRE(!ready.empty(), fn, "empty ready point: pass the point of the buffer's latest copy", where);
  const TimelinePoint& latest = b.last_access;
  FERRY_REQUIRE(detail::access::semaphore(ready) == detail::access::semaphore(latest) && ready.value == latest.value,
                fn,
                "the ready point (value " + std::to_string(ready.value) +
                    ") is not the point of the buffer's latest copy (value " + std::to_string(latest.value) +
                    "): pass the point that call returned",
                where);
  detail::SemaphoreState& s = *detail::access::semaphore(ready);
  detail::ensure_submitted(s, ready.value);  // the engine waits for it where ferry cannot see
  EngineAcquire out;
  {
    std::lock_guard lock(s.mutex);
    FERRY_REQUIRE(s.backend != nullptr, fn, "the device is closed", where);
    out.semaphore = static_cast<detail::VulkanSemaphore&>(*s.backend).handle();
  }
  out.value = ready.value;
  const std::shared_ptr<detail::OwedAcquire>& owed = b.owed;
  if (!owed || owed->to != b.owner->backend || owed->taken.load(std::memory_order_acquire)) return out;
  const std::uint32_t src = owed->from->family(), dst = owed->to->family();
  if (!vk->needs_ownership_transfer(owed->range.segment, src, dst)) return out;
  if (owed->taken.exchange(true, std::memory_order_acq_rel)) return out;  // ferry took it meanwhile
  out.barrier_needed = true;
  out.barrier.srcStageMask = VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT;
  out.barrier.srcAccessMask = VK_ACCESS_2_NONE;
  out.barrier.dstStageMask = VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT;
  out.barrier.dstAccessMask = VK_ACCESS_2_MEMORY_READ_BIT | VK_ACCESS_2_MEMORY_WRITE_BIT;
  out.barrier.srcQueueFamilyIndex = src;
  out.barrier.dstQueueFamilyIndex = dst;
  out.barrier.buffer = detail::buffer_of(owed->range.segment);
  out.barrier.offset = owed->range.offset;
  out.barrier.size = owed->bytes;
  return out;
}

EngineImageAcquire engine_acquire(const Image& image, const TimelinePoint& ready, std::source_location where) {
  constexpr const char* fn = "vulkan::engine_acquire(image)";
  const auto& state = detail::access::state(image);
  FERRY_REQUIRE(state != nullptr, fn, "null or moved-from image", where);
  detail::ImageState& img = *state;
  const auto device = detail::lock_device(img.device, fn, where);
  FERRY_REQUIRE(!img.released, fn, "the image was released", where);
  auto* vk = dynamic_cast<detail::VulkanDevice*>(device->backend.get());
  FERRY_REQUIRE(vk != nullptr, fn,
                "the image's device is not a Vulkan device (backend " + std::string(to_string(device->options.backend)) +
                    ")",
                where);
  FERRY_REQUIRE(!ready.empty(), fn, "empty ready point: pass the point of the image's latest copy", where);
  const TimelinePoint& latest = img.last_access;
  FERRY_REQUIRE(detail::access::semaphore(ready) == detail::access::semaphore(latest) && ready.value == latest.value,
                fn,
                "the ready point (value " + std::to_string(ready.value) +
                    ") is not the point of the image's latest copy (value " + std::to_string(latest.value) +
                    "): pass the point that call returned",
                where);
  detail::SemaphoreState& s = *detail::access::semaphore(ready);
  detail::ensure_submitted(s, ready.value);  // the engine waits for it where ferry cannot see
  EngineImageAcquire out;
  {
    std::lock_guard lock(s.mutex);
    FERRY_REQUIRE(s.backend != nullptr, fn, "the device is closed", where);
    out.semaphore = static_cast<detail::VulkanSemaphore&>(*s.backend).handle();
  }
  out.value = ready.value;
  const std::shared_ptr<detail::OwedAcquire>& owed = img.owed;
  if (!owed || owed->taken.load(std::memory_order_acquire)) return out;
  if (owed->taken.exchange(true, std::memory_order_acq_rel)) return out;  // ferry took it meanwhile
  const auto& vi = static_cast<const detail::VulkanImage&>(*img.backend);
  out.barrier_needed = true;
  out.barrier.srcStageMask = VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT;
  out.barrier.srcAccessMask = VK_ACCESS_2_NONE;
  out.barrier.dstStageMask = VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT;
  out.barrier.dstAccessMask = VK_ACCESS_2_MEMORY_READ_BIT | VK_ACCESS_2_MEMORY_WRITE_BIT;
  out.barrier.oldLayout = vi.layout(owed->hand_off.from, false);
  out.barrier.newLayout = vi.final_layout;
  out.barrier.srcQueueFamilyIndex = owed->hand_off.src_family;
  out.barrier.dstQueueFamilyIndex = owed->hand_off.dst_family;
  out.barrier.image = vi.image;
  out.barrier.subresourceRange = {VK_IMAGE_ASPECT_COLOR_BIT, 0, vi.mip_levels, 0, vi.array_layers};
  return out;
}

}  // namespace ferry::vulkan
