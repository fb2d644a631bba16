// SPDX-License-Identifier: MIT
/// @file vulkan.hpp
/// @brief Adopting an engine's own Vulkan device, so an engine never has to let ferry create it,
/// and describing its `VkBuffer`s for `Device::adopt_memory`.
///
/// This header includes `<vulkan/vulkan.h>` (Vulkan 1.2 or newer); the rest of ferry's public
/// headers are vendor-free. Check `FERRY_HAVE_VULKAN` (ferry/config.hpp) or
/// `Device::built_with(Backend::vulkan)`: in a build of ferry without the Vulkan backend
/// `adopt_device` exists but always throws `unsupported`.
///
/// Ownership: ferry never destroys an adopted object (instance, physical device, device,
/// queues). The returned `Device` owns only what ferry creates on top of it (pool memory,
/// semaphores, command buffers, the synthetic-compute pipeline); `close()` -- or the last
/// handle going away -- frees exactly those, after a `vkDeviceWaitIdle` (which also waits for
/// the engine's own submitted work). The engine destroys its `VkDevice` (and instance) only
/// after the ferry device is closed, and may keep using it after that.
///
/// Thread-safety: the returned `Device` is like any other (see device.hpp). Vulkan requires
/// external synchronization of a `VkQueue`: ferry serializes its vkQueueSubmit /
/// vkQueueWaitIdle / vkDeviceWaitIdle calls with `AdoptInfo::submit_mutex` when one is given,
/// so the engine may keep submitting to the same `VkQueue`s as long as it does so only while
/// holding that mutex. Without a `submit_mutex`, ferry uses a lock of its own and the engine
/// must not use the adopted `VkQueue`s concurrently with ferry.
#pragma once

#include <cstdint>
#include <mutex>
#include <cstring>
#include <source_location>

#include <vulkan/vulkan.h>

#include "ferry/api.hpp"
#include "ferry/device.hpp"

namespace ferry::vulkan {

/// @brief What an engine hands ferry to share its Vulkan device.
///
/// Promises the caller makes (Vulkan offers no query for them, so ferry takes them on trust):
///  - `instance` was created with apiVersion >= 1.2, and `device` was created from
///    `physical_device` with the `timelineSemaphore` feature enabled
///    (`VkPhysicalDeviceVulkan12Features::timelineSemaphore`);
///  - `device` was created with the queues (compute_family, compute_index) and
///    (transfer_family, transfer_index), and with any queue later passed to
///    `Device::adopt_queue`;
///  - if `host_pointer_import` is set, VK_EXT_external_memory_host was enabled on `device`.
///
/// What ferry checks: the three handles are non-null; `physical_device` is one of
/// `instance`'s physical devices; it reports Vulkan 1.2+ and *supports* timeline semaphores;
/// both families exist and both indices are below their family's queue count; the compute
/// family has VK_QUEUE_COMPUTE_BIT. ferry records and submits with core 1.2 entry points only,
/// so no other feature or extension is needed.
///
/// Transfer and compute may name the same queue (one-queue devices such as lavapipe): both
/// roles then submit to that one `VkQueue`.
struct AdoptInfo {
  VkInstance instance = VK_NULL_HANDLE;               ///< the engine's instance (API >= 1.2)
  VkPhysicalDevice physical_device = VK_NULL_HANDLE;  ///< one of `instance`'s devices
  VkDevice device = VK_NULL_HANDLE;                   ///< created from `physical_device`
  std::uint32_t compute_family = 0;   ///< owner queue's family (must support COMPUTE)
  std::uint32_t compute_index = 0;    ///< owner queue's index within its family
  std::uint32_t transfer_family = 0;  ///< executing queue's family (may equal compute_family)
  std::uint32_t transfer_index = 0;   ///< may equal compute_index: one queue for both roles
  /// The engine's loader entry point (volk, a statically linked loader, ...); null = ferry
  /// opens libvulkan.so.1 itself.
  PFN_vkGetInstanceProcAddr get_instance_proc_addr = nullptr;
  /// VK_EXT_external_memory_host was enabled on `device`: `HostPool::register_memory` may
  /// import user memory.
  bool host_pointer_import = false;
  /// The engine's queue-submission lock (optional; see the file comment). Must outlive the
  /// ferry device.
  std::mutex* submit_mutex = nullptr;
};

/// @brief Wrap an engine's Vulkan device as a ferry `Device` (backend `Backend::vulkan`).
///
/// The result behaves like a device from `Device::open`: default compute and transfer queues
/// (the VkQueues named in `info`), pools, semaphores, `adopt_queue` for more of the engine's
/// queues. `validation_messages()` is always 0: validation is the engine's (its instance, its
/// messenger).
///
/// Errors (the message starts with "vulkan::adopt_device: "; `where` is the caller's line):
///  - `invalid_argument`: a null handle; a physical device that is not one of the instance's;
///    a family or queue index out of range; a compute family without COMPUTE;
///  - `unsupported`: a device below Vulkan 1.2 or without timeline semaphore support, a
///    loader without the needed entry points, or a ferry built without the Vulkan backend.
/// On error nothing was created and the engine's objects are untouched.
FERRY_API Device adopt_device(const AdoptInfo& info,
                              std::source_location where = std::source_location::current());

/// @brief The Vulkan objects of a ferry device (opened or adopted), for an engine or a test
/// that creates its own objects on the same `VkDevice` (buffers to adopt with
/// `Device::adopt_memory`, a VMA allocator). ferry owns what it created: never destroy them.
struct NativeHandles {
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice physical_device = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  std::uint32_t compute_family = 0;   ///< the default compute (owner) queue's family
  std::uint32_t transfer_family = 0;  ///< the default transfer (executor) queue's family
};

/// @brief The handles of `device`. Errors: `invalid_argument` for a null or closed device, or
/// a device of another backend (interop pairs included); `unsupported` in a build without the
/// Vulkan backend. Thread-safety: like every Device method.
FERRY_API NativeHandles native_handles(const Device& device,
                                       std::source_location where = std::source_location::current());

/// @brief Describe a range of an engine's `VkBuffer` for `Device::adopt_memory`: `offset`
/// into `buffer`, which was created with `buffer_size` bytes (`VkBufferCreateInfo::size`)
/// and `sharing` (its `sharingMode`; for `MemorySharing::concurrent`, with the families of the
/// owner queue and of every executing queue). A VMA allocation is
/// `native_buffer(info.buffer-of-its-block, info.offset, block size, ...)`; for a dedicated
/// buffer, offset 0 and the buffer's size. Checked by `adopt_memory`, not here.
[[nodiscard]] inline NativeMemory native_buffer(VkBuffer buffer, VkDeviceSize offset, VkDeviceSize buffer_size,
                                                MemorySharing sharing = MemorySharing::exclusive) noexcept {
  NativeMemory m;
  static_assert(sizeof(buffer) <= sizeof(m.vulkan_buffer));
  // A pointer on 64-bit ABIs, a 64-bit integer elsewhere: its bytes either way.
  std::memcpy(&m.vulkan_buffer, &buffer, sizeof(buffer));
  m.vulkan_offset = offset;
  m.vulkan_buffer_size = buffer_size;
  m.vulkan_sharing = sharing;
  return m;
}

}  // namespace ferry::vulkan
