// SPDX-License-Identifier: MIT
/// @file vulkan.hpp
/// @brief Adopting an engine's own Vulkan device, so an engine never has to let ferry create it,
/// and describing its `VkBuffer`s for `Device::adopt_memory` and its `VkImage`s for
/// `Device::adopt_image`.
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
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <source_location>

#include <vulkan/vulkan.h>

#include "ferry/api.hpp"
#include "ferry/device.hpp"
#include "ferry/image.hpp"
#include "ferry/pool.hpp"

// The barriers of vulkan::BasicEngineAcquire.
namespace ferry::detail {

/// A synchronization2 barrier of `Barrier` (VkBufferMemoryBarrier2, VkImageMemoryBarrier2)
/// with its sType `Type` and every other field zero.
template <class Barrier, VkStructureType Type>
[[nodiscard]] constexpr Barrier empty_barrier() noexcept {
  Barrier b{};
  b.sType = Type;
  return b;
}

/// The access masks of an acquire's Vulkan 1.0 form: none before, memory read and write after.
inline constexpr VkAccessFlags kAcquireSrcAccess = 0;
inline constexpr VkAccessFlags kAcquireDstAccess = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT;

/// The Vulkan 1.0 forms of an acquire, for `vkCmdPipelineBarrier`.
[[nodiscard]] constexpr VkBufferMemoryBarrier to_legacy(const VkBufferMemoryBarrier2& b) noexcept {
  return {VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER, nullptr, kAcquireSrcAccess, kAcquireDstAccess,
          b.srcQueueFamilyIndex, b.dstQueueFamilyIndex, b.buffer, b.offset, b.size};
}
[[nodiscard]] constexpr VkImageMemoryBarrier to_legacy(const VkImageMemoryBarrier2& b) noexcept {
  return {VK_STRUCTURE_TYPE_IMAGE_MEMORY_BARRIER, nullptr, kAcquireSrcAccess, kAcquireDstAccess, b.oldLayout,
          b.newLayout, b.srcQueueFamilyIndex, b.dstQueueFamilyIndex, b.image, b.subresourceRange};
}

}  // namespace ferry::detail

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

/// @brief The handles of `device`. On an interop pair (interop.hpp) they are its Vulkan
/// device's, on which the engine creates the images it adopts into the pair; the queues of
/// the role the pair gives CUDA are then not the pair's. Errors: `invalid_argument` for a
/// null or closed device, or a device with no Vulkan device (another backend);
/// `unsupported` in a build without the Vulkan backend. Thread-safety: like every Device
/// method.
FERRY_API NativeHandles native_handles(const Device& device,
                                       std::source_location where = std::source_location::current());

/// @brief What an engine's own submission needs to use the destination of a ferry copy made
/// with `owner_waits = false` (`UploadOptions`, `UploadIntoOptions`), so that ferry submits
/// nothing on the engine's queue (see `engine_acquire`): `EngineAcquire` for a buffer's range,
/// `EngineImageAcquire` for an image. One shape for both, as the buffer and the image hand-over follow one rule.
template <class Barrier, VkStructureType Type>
struct BasicEngineAcquire {
  /// Whether the engine must record `barrier` (a queue-family ownership acquire) in its
  /// command buffer before its first access to the range or image. False when no transfer of
  /// ownership is needed (one queue family -- for an image the executor then recorded the
  /// whole layout transition --, a `CONCURRENT` buffer or image), or when ferry already
  /// recorded the acquire on the owner.
  bool barrier_needed = false;
  /// The acquire: source family the executor's, destination family the owner's; stages
  /// ALL_COMMANDS on both sides (chaining with the semaphore wait), access none before and
  /// memory read and write after. A buffer's covers the copied range; an image's covers every
  /// level and layer, with the transition from TRANSFER_DST_OPTIMAL (after an upload) or
  /// TRANSFER_SRC_OPTIMAL (after a download) to the image's final layout. Record it with
  /// `vkCmdPipelineBarrier2` (one `VkDependencyInfo` with this one barrier).
  Barrier barrier = detail::empty_barrier<Barrier, Type>();
  /// The engine's submission waits for `semaphore` to reach `value` (a `VkSemaphoreSubmitInfo`
  /// with stage ALL_COMMANDS, or a timeline wait of `vkQueueSubmit`) before the barrier and
  /// its use of the range or image. The semaphore is ferry's (the executor's progress
  /// timeline): wait on it, never signal or destroy it. It lives until the device closes.
  VkSemaphore semaphore = VK_NULL_HANDLE;
  std::uint64_t value = 0;

  /// `barrier` as its Vulkan 1.0 form (`VkBufferMemoryBarrier`, `VkImageMemoryBarrier`), for
  /// `vkCmdPipelineBarrier` with `VK_PIPELINE_STAGE_ALL_COMMANDS_BIT` as both stage masks
  /// (devices without synchronization2).
  [[nodiscard]] constexpr auto legacy_barrier() const noexcept { return detail::to_legacy(barrier); }
};

/// @brief The acquire of a copy into or out of a buffer (`engine_acquire(const DeviceBuffer&, ...)`).
using EngineAcquire = BasicEngineAcquire<VkBufferMemoryBarrier2, VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER_2>;
/// @brief The acquire of a copy into or out of an image (`engine_acquire(const Image&, ...)`).
using EngineImageAcquire = BasicEngineAcquire<VkImageMemoryBarrier2, VK_STRUCTURE_TYPE_IMAGE_MEMORY_BARRIER_2>;

/// @brief Hand the acquire and the wait of a copy into `buffer` to the engine, which records
/// them in its own submission on the owner's `VkQueue`: ferry then submits nothing on that
/// queue for the copy.
///
/// `ready` is the point of the latest ferry call that wrote or read `buffer` (an
/// `Upload::ready`, `UploadBatch::ready`, the point `upload_into` or `copy` returned), made
/// with `owner_waits = false` (with `owner_waits` ferry already made the owner
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

/// @brief The `VkFormat` of a ferry format (VK_FORMAT_UNDEFINED for `undefined` and values
/// outside the table), for an engine creating the image it adopts, or checking one.
[[nodiscard]] constexpr VkFormat to_vk_format(ImageFormat format) noexcept {
  switch (format) {
    case ImageFormat::undefined: return VK_FORMAT_UNDEFINED;
    case ImageFormat::r8_unorm: return VK_FORMAT_R8_UNORM;
    case ImageFormat::r8_uint: return VK_FORMAT_R8_UINT;
    case ImageFormat::rg8_unorm: return VK_FORMAT_R8G8_UNORM;
    case ImageFormat::rgba8_unorm: return VK_FORMAT_R8G8B8A8_UNORM;
    case ImageFormat::rgba8_srgb: return VK_FORMAT_R8G8B8A8_SRGB;
    case ImageFormat::rgba8_uint: return VK_FORMAT_R8G8B8A8_UINT;
    case ImageFormat::bgra8_unorm: return VK_FORMAT_B8G8R8A8_UNORM;
    case ImageFormat::bgra8_srgb: return VK_FORMAT_B8G8R8A8_SRGB;
    case ImageFormat::r16_unorm: return VK_FORMAT_R16_UNORM;
    case ImageFormat::r16_uint: return VK_FORMAT_R16_UINT;
    case ImageFormat::r16_float: return VK_FORMAT_R16_SFLOAT;
    case ImageFormat::rg16_float: return VK_FORMAT_R16G16_SFLOAT;
    case ImageFormat::rgba16_unorm: return VK_FORMAT_R16G16B16A16_UNORM;
    case ImageFormat::rgba16_float: return VK_FORMAT_R16G16B16A16_SFLOAT;
    case ImageFormat::r32_uint: return VK_FORMAT_R32_UINT;
    case ImageFormat::r32_sint: return VK_FORMAT_R32_SINT;
    case ImageFormat::r32_float: return VK_FORMAT_R32_SFLOAT;
    case ImageFormat::rg32_uint: return VK_FORMAT_R32G32_UINT;
    case ImageFormat::rg32_float: return VK_FORMAT_R32G32_SFLOAT;
    case ImageFormat::rgba32_uint: return VK_FORMAT_R32G32B32A32_UINT;
    case ImageFormat::rgba32_float: return VK_FORMAT_R32G32B32A32_SFLOAT;
    case ImageFormat::rgb10a2_unorm: return VK_FORMAT_A2B10G10R10_UNORM_PACK32;
    case ImageFormat::rg11b10_float: return VK_FORMAT_B10G11R11_UFLOAT_PACK32;
    case ImageFormat::bc1_rgba_unorm: return VK_FORMAT_BC1_RGBA_UNORM_BLOCK;
    case ImageFormat::bc1_rgba_srgb: return VK_FORMAT_BC1_RGBA_SRGB_BLOCK;
    case ImageFormat::bc2_unorm: return VK_FORMAT_BC2_UNORM_BLOCK;
    case ImageFormat::bc3_unorm: return VK_FORMAT_BC3_UNORM_BLOCK;
    case ImageFormat::bc3_srgb: return VK_FORMAT_BC3_SRGB_BLOCK;
    case ImageFormat::bc4_unorm: return VK_FORMAT_BC4_UNORM_BLOCK;
    case ImageFormat::bc5_unorm: return VK_FORMAT_BC5_UNORM_BLOCK;
    case ImageFormat::bc6h_ufloat: return VK_FORMAT_BC6H_UFLOAT_BLOCK;
    case ImageFormat::bc6h_sfloat: return VK_FORMAT_BC6H_SFLOAT_BLOCK;
    case ImageFormat::bc7_unorm: return VK_FORMAT_BC7_UNORM_BLOCK;
    case ImageFormat::bc7_srgb: return VK_FORMAT_BC7_SRGB_BLOCK;
    case ImageFormat::astc_4x4_unorm: return VK_FORMAT_ASTC_4x4_UNORM_BLOCK;
    case ImageFormat::astc_4x4_srgb: return VK_FORMAT_ASTC_4x4_SRGB_BLOCK;
    case ImageFormat::astc_6x6_unorm: return VK_FORMAT_ASTC_6x6_UNORM_BLOCK;
    case ImageFormat::astc_8x8_unorm: return VK_FORMAT_ASTC_8x8_UNORM_BLOCK;
    case ImageFormat::astc_8x8_srgb: return VK_FORMAT_ASTC_8x8_SRGB_BLOCK;
  }
  return VK_FORMAT_UNDEFINED;
}

/// @brief Describe an engine's `VkImage` for `Device::adopt_image`: its layout now
/// (`current`, UNDEFINED when its contents may be discarded), the layout every ferry copy
/// leaves it in (`final_layout`), its sharing mode and, for `MemorySharing::concurrent`, the
/// families it was created with (which must include the owner's and every executor's).
/// Checked by `adopt_image`, not here.
[[nodiscard]] inline NativeImage native_image(VkImage image, VkImageLayout current, VkImageLayout final_layout,
                                              MemorySharing sharing = MemorySharing::exclusive,
                                              std::initializer_list<std::uint32_t> families = {}) {
  NativeImage n;
  static_assert(sizeof(image) <= sizeof(n.vulkan_image));
  std::memcpy(&n.vulkan_image, &image, sizeof(image));
  n.vulkan_layout = static_cast<std::uint32_t>(current);
  n.vulkan_final_layout = static_cast<std::uint32_t>(final_layout);
  n.vulkan_sharing = sharing;
  n.vulkan_queue_families.assign(families.begin(), families.end());
  return n;
}

/// @brief Add to `image` (from `native_image`) the memory an interop pair imports into CUDA
/// (image.hpp, NativeImage, "interop pairs"): the `VkDeviceMemory` the image is bound to,
/// exportable as an opaque fd, the bind offset, the allocation's `allocationSize`, whether
/// it is a dedicated allocation of the image, and the image's usage flags. Checked by
/// `adopt_image`, not here.
[[nodiscard]] inline NativeImage with_exported_memory(NativeImage image, VkDeviceMemory memory, VkDeviceSize offset,
                                                      VkDeviceSize allocation_size, bool dedicated,
                                                      VkImageUsageFlags usage) {
  static_assert(sizeof(memory) <= sizeof(image.vulkan_memory));
  std::memcpy(&image.vulkan_memory, &memory, sizeof(memory));
  image.vulkan_memory_offset = offset;
  image.vulkan_memory_size = allocation_size;
  image.vulkan_dedicated = dedicated;
  image.vulkan_usage = usage;
  return image;
}

/// @brief Hand the acquire of ferry's latest copy of `image` (layout plus ownership) and its
/// wait to the engine, which records them in its own submission on the owner's `VkQueue`.
/// The image counterpart of `engine_acquire(const DeviceBuffer&, ...)`, with the same rules:
/// `ready` is the point of the latest copy call on the image (made with `owner_waits =
/// false`), the call submits the executor's pending work, and marks the acquire as the
/// engine's, so ferry records none; call it once per copy, before the engine submits.
/// Errors (`invalid_argument`, naming the argument, at the caller's `where`): a null, released
/// or moved-from image; a device that is not a Vulkan device or is closed; an empty `ready`,
/// or one that is not the image's latest copy point. `unsupported` in a build without the
/// Vulkan backend. Thread-safety: not concurrently with another ferry call that uses `image`.
FERRY_API EngineImageAcquire engine_acquire(const Image& image, const TimelinePoint& ready,
                                            std::source_location where = std::source_location::current());

}  // namespace ferry::vulkan
