// SPDX-License-Identifier: MIT
// Adoption of an engine's own Vulkan objects ("an engine never has to let ferry
// create its device"). The lead exposes this publicly; until then it is reachable through the
// internal include path ("vulkan/vulkan_adopt.hpp").
#pragma once

#include <memory>
#include <mutex>

#include <vulkan/vulkan.h>

#include "backend.hpp"

namespace ferry::detail {

/// @brief What an engine hands ferry to share its Vulkan device.
///
/// Ownership: ferry never destroys any of these objects; the engine destroys them only after
/// the ferry device is closed.
///
/// Promises the caller makes (Vulkan offers no query for them; ferry checks what it can):
///  - `instance` was created with apiVersion >= 1.2, and `device` with the
///    `timelineSemaphore` feature enabled (ferry checks the physical device *supports* it);
///  - `device` was created with queue (compute_family, compute_index) and
///    (transfer_family, transfer_index), and with any queue later passed to adopt_queue;
///  - if `host_pointer_import` is set, VK_EXT_external_memory_host was enabled on `device`.
/// ferry records and submits with core 1.2 entry points only (vkQueueSubmit with timeline
/// semaphores, vkCmdPipelineBarrier), so no other feature or extension is needed.
///
/// Thread-safety: ferry serializes its vkQueueSubmit/vkQueueWaitIdle/vkDeviceWaitIdle calls with
/// `submit_mutex` when given (share the engine's queue lock here), else with a lock of its own;
/// the engine must then not use the same VkQueues concurrently with ferry.
struct VulkanAdoptInfo {
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice physical_device = VK_NULL_HANDLE;  ///< must be one of `instance`'s devices
  VkDevice device = VK_NULL_HANDLE;                   ///< created from `physical_device`
  std::uint32_t compute_family = 0;   ///< owner queue's family (must support COMPUTE)
  std::uint32_t compute_index = 0;    ///< owner queue's index within its family
  std::uint32_t transfer_family = 0;  ///< executing queue's family (may equal compute_family)
  std::uint32_t transfer_index = 0;   ///< may equal compute_index: one queue for both roles
  /// The engine's loader entry point (volk, a static loader, ...); null = ferry opens
  /// libvulkan.so.1 itself.
  PFN_vkGetInstanceProcAddr get_instance_proc_addr = nullptr;
  bool host_pointer_import = false;   ///< VK_EXT_external_memory_host enabled on `device`
  std::mutex* submit_mutex = nullptr; ///< the engine's queue-submission lock (optional)
};

/// @brief Wrap an engine's device. Throws `invalid_argument` for objects that do not belong
/// together (physical device not of the instance, family or index out of range, a queue not
/// retrievable) and `unsupported` for a device below Vulkan 1.2 or without timeline semaphores.
std::unique_ptr<BackendDevice> vulkan_adopt(const VulkanAdoptInfo& info);

}  // namespace ferry::detail
