// SPDX-License-Identifier: MIT
// The public adoption entry point (include/ferry/vulkan.hpp): AdoptInfo -> VulkanAdoptInfo,
// then the front end's wrap_backend_device, so an adopted device is set up like an opened one.
#include "ferry/vulkan.hpp"

#include <string>

#include "device_state.hpp"
#include "handle_access.hpp"
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
  const auto* vk = dynamic_cast<const detail::VulkanDevice*>(detail::access::state(device)->backend.get());
  FERRY_REQUIRE(vk != nullptr, fn,
                "the device is not a Vulkan device (backend " + std::string(to_string(device.backend())) + ")",
                where);
  NativeHandles h;
  h.instance = vk->instance();
  h.physical_device = vk->physical_device();
  h.device = vk->handle();
  h.compute_family = vk->compute_family();
  h.transfer_family = vk->transfer_family();
  return h;
}

}  // namespace ferry::vulkan
