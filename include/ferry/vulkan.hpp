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
#include "ferry/pool.hpp"

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
  VkQueue compute_queue = VK_NULL_HANDLE;   ///< the default compute queue
  VkQueue transfer_queue = VK_NULL_HANDLE;  ///< the default transfer queue (may equal compute_queue)
  /// ferry's queue-submission lock for this device's `VkQueue`s (the engine's
  /// `AdoptInfo::submit_mutex` on an adopted device): hold it around every vkQueueSubmit* the
  /// engine makes on `compute_queue` or `transfer_queue` (Vulkan requires external
  /// synchronization of a queue). Valid until the device closes.
  std::mutex* submit_mutex = nullptr;
  /// The device was created with `synchronization2` (Vulkan 1.3): `vkCmdPipelineBarrier2`
  /// records an `EngineAcquire::barrier` as is; without it, use
  /// `EngineAcquire::legacy_barrier()` with `vkCmdPipelineBarrier`.
  bool synchronization2 = false;
};

/// @brief The handles of `device`. Errors: `invalid_argument` for a null or closed device, or
/// a device of another backend (interop pairs included); `unsupported` in a build without the
/// Vulkan backend. Thread-safety: like every Device method.
FERRY_API NativeHandles native_handles(const Device& device,
                                       std::source_location where = std::source_location::current());

/// @brief What an engine's own submission needs to use an upload's destination, so that
/// ferry submits nothing on the engine's queue (see `engine_acquire`).
struct EngineAcquire {
  /// Whether the engine must record `barrier` (a queue-family ownership acquire) in its
  /// command buffer before its first access to the range. False when no transfer of
  /// ownership is needed (one queue family, a `CONCURRENT` buffer, or ferry already recorded
  /// the acquire on the owner).
  bool barrier_needed = false;
  /// The acquire: source family the executor's, destination family the owner's, the range of
  /// the buffer; stages ALL_COMMANDS on both sides (chaining with the semaphore wait), access
  /// none before and memory read and write after. Record it with `vkCmdPipelineBarrier2`
  /// (one `VkDependencyInfo` with this one buffer barrier).
  VkBufferMemoryBarrier2 barrier{VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER_2, nullptr, 0, 0, 0, 0, 0, 0,
                                 VK_NULL_HANDLE, 0, 0};
  /// The engine's submission waits for `semaphore` to reach `value` (a `VkSemaphoreSubmitInfo`
  /// with stage ALL_COMMANDS, or a timeline wait of `vkQueueSubmit`) before the barrier and
  /// its use of the range. The semaphore is ferry's (the executor's progress timeline): wait on
  /// it, never signal or destroy it. It lives until the device closes.
  VkSemaphore semaphore = VK_NULL_HANDLE;
  std::uint64_t value = 0;

  /// `barrier` as a Vulkan 1.0 `VkBufferMemoryBarrier`, for `vkCmdPipelineBarrier` with
  /// `VK_PIPELINE_STAGE_ALL_COMMANDS_BIT` as both stage masks (devices without
  /// synchronization2).
  [[nodiscard]] VkBufferMemoryBarrier legacy_barrier() const noexcept {
    return VkBufferMemoryBarrier{VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER,
                                 nullptr,
                                 0,
                                 VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT,
                                 barrier.srcQueueFamilyIndex,
                                 barrier.dstQueueFamilyIndex,
                                 barrier.buffer,
                                 barrier.offset,
                                 barrier.size};
  }
};

/// @brief Hand the acquire and the wait of a copy into `buffer` to the engine, which records
/// them in its own submission on the owner's `VkQueue`: ferry then submits nothing on that
/// queue for the copy.
///
/// `ready` is the point of the latest ferry call that wrote or read `buffer` (an
/// `Upload::ready`, `UploadBatch::ready`, the point `upload_into` or `copy` returned), made
/// with `UploadOptions::owner_waits = false` (with `owner_waits` ferry already made the owner
/// wait and recorded the acquire: `barrier_needed` is then false, and waiting again is
/// harmless). The call submits the executor's pending work (deferred submission,
/// transfer.hpp), so the engine's wait is on a signal already submitted, and records that the
/// engine performs the acquire: ferry's later operations on the buffer treat the range as the
/// owner family's, as after its own acquire. Call it once per copy, before the engine submits;
/// when `barrier_needed`, the engine must record the barrier exactly once, in a submission on
/// a queue of the owner's family that waits for `semaphore` / `value`.
///
/// Ownership of the result: plain values; nothing to free.
/// Thread-safety: not concurrently with another ferry call that uses `buffer`.
/// Errors (`invalid_argument`, naming the argument, at the caller's `where`): a null,
/// released or moved-from buffer; a device that is not a Vulkan device (interop pairs
/// included) or is closed; an empty `ready`, or one that is not the buffer's latest copy
/// point. `unsupported` in a build without the Vulkan backend.
FERRY_API EngineAcquire engine_acquire(const DeviceBuffer& buffer, const TimelinePoint& ready,
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
