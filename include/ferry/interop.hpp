// SPDX-License-Identifier: MIT
/// @file interop.hpp
/// @brief Vulkan <-> CUDA interop: copies executed by one API's queue into memory owned by
/// the other API's queue, ordered on the GPU by shared timeline semaphores.
///
/// An interop pair is one ferry `Device` that sees one GPU through two APIs:
///  - **pool memory** is Vulkan device memory exported as an opaque POSIX fd
///    (`VK_KHR_external_memory_fd`, dedicated allocations) and imported into CUDA
///    (`cudaImportExternalMemory` + `cudaExternalMemoryGetMappedBuffer`): every block is a
///    `VkBuffer` range for Vulkan queues and a device pointer for CUDA streams;
///  - **timeline semaphores** (the queues' private timelines and `create_semaphore`) are Vulkan
///    timeline semaphores exported as opaque fds (`VK_KHR_external_semaphore_fd`) and imported
///    into CUDA as `cudaExternalSemaphoreHandleTypeTimelineSemaphoreFd`: a CUDA stream waits on
///    a Vulkan queue's signal (and the reverse) on the GPU, without a host wait. Host queries
///    and waits also consult a CUDA-native timeline that CUDA-side signals update, because
///    the Vulkan driver learns of a signal made through the import late (~10 ms measured);
///  - **pinned host memory** is page-aligned memory registered with both APIs
///    (`cudaHostRegister` and `VK_EXT_external_memory_host`);
///  - **queues**: in `Backend::vulkan_cuda` transfer-role queues are Vulkan queues (the default
///    transfer queue is a transfer-only family's queue) and compute-role queues are CUDA
///    streams (`adopt_queue(QueueRole::compute, {stream})` adopts an engine's `cudaStream_t`,
///    e.g. PyTorch's current stream); `Backend::cuda_vulkan` is the other way round.
///  - **ownership**: pool buffers are EXCLUSIVE (unless FERRY_VULKAN_SHARING=concurrent); a
///    Vulkan queue releases a range to `VK_QUEUE_FAMILY_EXTERNAL` when a CUDA stream uses it
///    next and acquires it back from there, in the same protocol as between Vulkan families.
///
///  - **adopted memory** (`Device::adopt_memory`): a pair addresses a range from both APIs, so
///    `NativeMemory` gives both views of one allocation the engine imported into both: the
///    `VkBuffer` range (`vulkan_buffer`, `vulkan_offset`, `vulkan_buffer_size`,
///    `vulkan_sharing`) and the CUDA device pointer of its first byte (`pointer`), each checked
///    by its API's backend. One view alone is `unsupported` (neither API can derive the
///    other's). The buffer must allow the hand-off to `VK_QUEUE_FAMILY_EXTERNAL` that ferry
///    records for it, as pool buffers do (created for external memory).
///  - **images** (`Device::adopt_image`): an engine's EXCLUSIVE `VkImage` of the pair's
///    `VkDevice` (`vulkan::native_handles` gives it), created for external memory and bound to
///    memory exportable as an opaque fd, which the engine states beside the image
///    (`vulkan::with_exported_memory`; image.hpp, `NativeImage`). ferry exports that memory
///    and imports it into CUDA as a mipmapped array of the stated shape, so a Vulkan executor
///    copies into the `VkImage` and a CUDA executor into the array; around each copy the
///    Vulkan side releases the image to, or acquires it from, `VK_QUEUE_FAMILY_EXTERNAL`. A
///    frame uploaded on the executor reaches a consumer of the other API with no host wait.
///
/// **Validation.** The Vulkan validation layer tracks a timeline's value from the Vulkan
/// operations it sees, and a pair's CUDA streams signal the same timelines. To the layer a
/// Vulkan submission that waits on a CUDA signal never completes, so every object it used
/// stays "in use": destroying a buffer or image, or freeing its memory, after its release
/// point is reported (`VUID-vkDestroyBuffer-buffer-00922`, `VUID-vkDestroyImage-image-01000`,
/// `VUID-vkFreeMemory-memory-00677`) although the point has passed. With
/// `PairOptions::validation` ferry prints these (and the semaphore-value IDs of the same
/// cause) without counting them; an engine with its own messenger on the pair's `VkDevice`
/// sees them too, and should filter the same IDs on pair devices only.
///
/// Everything else (the pool, upload modes, batches, staging, snapshots) is the same front end
/// as on one API; `Device::host_waits()` shows that a steady-state loop never blocks the host.
///
/// Devices are matched by UUID (`Capabilities::uuid`): a pair is always one physical GPU.
///
/// Not supported (typed `unsupported` errors): HIP pairings (HIP on Linux does not import
/// timeline semaphores: `hipImportExternalSemaphore` documents no timeline fd type there, so a
/// HIP stream cannot wait on a Vulkan timeline without a host round trip, which ferry does not
/// hide behind this API); adopting an engine's `VkDevice` into a pair; CONCURRENT images and
/// ASTC images (CUDA arrays have no ASTC form); Vulkan drivers without
/// `VK_KHR_external_memory_fd`, `VK_KHR_external_semaphore_fd` (timeline export) or
/// `VK_EXT_external_memory_host`.
///
/// Thread-safety and handle semantics: those of `Device` (device.hpp).
#pragma once

#include <source_location>

#include "ferry/api.hpp"
#include "ferry/device.hpp"

namespace ferry::interop {

/// @brief Which two APIs to pair, and the devices.
struct PairOptions {
  Backend executor = Backend::vulkan;  ///< the API whose queues execute copies (transfer role)
  Backend owner = Backend::cuda;       ///< the API whose queues own the memory (compute role)
  int vulkan_ordinal = 0;              ///< the Vulkan device (ordinal within that backend)
  int cuda_ordinal = -1;               ///< the CUDA device; -1 = the one with the same UUID
  bool validation = false;             ///< Vulkan validation (see DeviceOptions::validation)
  bool record_events = true;           ///< see DeviceOptions::record_events
};

/// @brief The pair backend for two APIs: `vulkan_cuda` for (vulkan, cuda), `cuda_vulkan` for
/// (cuda, vulkan). Errors: any pairing with HIP: `unsupported` (see the file comment); the
/// same API twice, or a pairing without Vulkan: `invalid_argument`.
FERRY_API Backend pair_backend(Backend executor, Backend owner,
                               std::source_location where = std::source_location::current());

/// @brief Open an interop pair: `Device::open` with `pair_backend(executor, owner)`,
/// `ordinal = vulkan_ordinal` and `peer_ordinal = cuda_ordinal`.
/// Errors: those of `pair_backend`; `unsupported` when either backend was not built, no such
/// device is present or the driver lacks an extension listed above; `invalid_argument` when
/// the two devices are different GPUs (UUIDs differ; both are named) or an ordinal is out of
/// range.
FERRY_API Device open_pair(const PairOptions& options = {},
                           std::source_location where = std::source_location::current());

}  // namespace ferry::interop
