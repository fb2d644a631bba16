// SPDX-License-Identifier: MIT
// Vulkan memory: memory types and allocations, segments (own, exported as an opaque fd, an
// engine's adopted VkBuffer range) and host memory (mapped allocations, imported host pointers,
// an engine's adopted range).
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "vulkan_internal.hpp"

namespace ferry::detail {

namespace {

std::uint64_t round_up(std::uint64_t x, std::uint64_t to) { return (x + to - 1) / to * to; }

}  // namespace

std::uint32_t VulkanDevice::pick_memory_type(std::uint32_t type_bits, VkMemoryPropertyFlags required,
                                             VkMemoryPropertyFlags preferred,
                                             VkMemoryPropertyFlags avoided) const {
  std::uint32_t best = ~0u;
  int best_score = -1;
  for (std::uint32_t t = 0; t < memory_.memoryTypeCount; ++t) {
    const VkMemoryPropertyFlags flags = memory_.memoryTypes[t].propertyFlags;
    if (!(type_bits & (1u << t)) || (flags & required) != required) continue;
    const int score = ((flags & avoided) == 0 ? 2 : 0) + ((flags & preferred) == preferred ? 1 : 0);
    if (score > best_score) best = t, best_score = score;
  }
  return best;
}

// A buffer (usable for copies and storage) bound to memory of its own. `host`: host-visible
// coherent memory, CONCURRENT across ferry's families (host buffers are read and written by
// both without ownership transfers); else device-local, sharing per concurrent_.
// `import_size` != 0: host pointer import of exactly that size (memory_next chains it).
VulkanAllocation VulkanDevice::make_allocation(VkDeviceSize size, const void* buffer_next, bool host,
                                               const void* memory_next, std::uint32_t type_mask,
                                               VkDeviceSize import_size, bool dedicated,
                                               VkDeviceSize* allocated) {
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, buffer_next};
  bi.size = size;
  bi.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT |
             VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  if ((host || concurrent_) && sharing_families_.size() > 1) {
    bi.sharingMode = VK_SHARING_MODE_CONCURRENT;
    bi.queueFamilyIndexCount = static_cast<std::uint32_t>(sharing_families_.size());
    bi.pQueueFamilyIndices = sharing_families_.data();
  }
  VulkanAllocation a;
  FERRY_VK_CHECK(vk_.vkCreateBuffer(device_, &bi, nullptr, &a.buffer));
  try {
    VkMemoryRequirements req;
    vk_.vkGetBufferMemoryRequirements(device_, a.buffer, &req);
    constexpr VkMemoryPropertyFlags kHost = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    const std::uint32_t type =
        host ? pick_memory_type(req.memoryTypeBits & type_mask, kHost, VK_MEMORY_PROPERTY_HOST_CACHED_BIT,
                                VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)
             : pick_memory_type(req.memoryTypeBits & type_mask, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0,
                                VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
    if (type == ~0u) {
      vk_fail(ErrorCode::unsupported, std::string("no ") +
                                          (host ? "host-visible coherent" : "device-local") +
                                          " memory type fits the buffer");
    }
    if (import_size != 0 && req.size > import_size) {
      vk_fail(ErrorCode::unsupported, "host import of " + std::to_string(import_size) +
                                          " bytes: the buffer needs " + std::to_string(req.size));
    }
    VkMemoryDedicatedAllocateInfo dedicated_info{VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO, memory_next};
    dedicated_info.buffer = a.buffer;
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, dedicated ? &dedicated_info : memory_next};
    ai.allocationSize = import_size != 0 ? import_size : req.size;
    ai.memoryTypeIndex = type;
    FERRY_VK_CHECK(vk_.vkAllocateMemory(device_, &ai, nullptr, &a.memory));
    if (allocated != nullptr) *allocated = ai.allocationSize;
    FERRY_VK_CHECK(vk_.vkBindBufferMemory(device_, a.buffer, a.memory, 0));
  } catch (...) {
    destroy_allocation(a);
    throw;
  }
  return a;
}

void VulkanDevice::destroy_allocation(const VulkanAllocation& a) noexcept {
  vk_.vkDestroyBuffer(device_, a.buffer, nullptr);
  vk_.vkFreeMemory(device_, a.memory, nullptr);
}

void VulkanDevice::check_segment_size(std::uint64_t bytes) const {
  if (caps_.max_allocation_bytes != 0 && bytes > caps_.max_allocation_bytes) {
    vk_fail(ErrorCode::out_of_memory, "segment of " + std::to_string(bytes) +
                                          " bytes exceeds maxMemoryAllocationSize " +
                                          std::to_string(caps_.max_allocation_bytes));
  }
}

std::unique_ptr<Segment> VulkanDevice::allocate_segment(std::uint64_t bytes) {
  check_segment_size(bytes);
  // The buffer is rounded up to whole words so synthetic_compute may bind a range's last word.
  return wrap_segment(std::make_unique<VulkanAllocation>(
                          make_allocation(round_up(bytes, 256), nullptr, false, nullptr, ~0u, 0)),
                      bytes);
}

std::unique_ptr<Segment> VulkanDevice::wrap_segment(std::unique_ptr<VulkanAllocation> record, std::uint64_t bytes) {
  auto segment = std::make_unique<Segment>();
  segment->size = bytes;
  segment->native = record->buffer;
  // Vulkan buffers have no address without bufferDeviceAddress; snapshots still need distinct,
  // stable addresses, so segments get synthetic ones from a 2 MiB-aligned range starting at
  // 1 TiB (never dereferenced).
  segment->address = next_address_.fetch_add(round_up(bytes, 2u << 20), std::memory_order_relaxed);
  segment->synthetic_address = true;
  segment->native_memory = reinterpret_cast<void*>(record->memory);  // a handle: pointer or integer
  segment->backend_data = record.release();
  return segment;
}

// Interop: a dedicated, exportable allocation (opaque fd) with an EXCLUSIVE (or CONCURRENT,
// per concurrent_) buffer created for external memory, so queue-family ownership can be
// released to and acquired from VK_QUEUE_FAMILY_EXTERNAL (the importing API).
std::unique_ptr<Segment> VulkanDevice::allocate_exported_segment(std::uint64_t bytes, ExternalMemory* out) {
  if (!fd_export_) {
    vk_fail(ErrorCode::unsupported, caps_.name + ": memory cannot be exported as opaque fds "
                                                 "(VK_KHR_external_memory_fd missing)");
  }
  check_segment_size(bytes);
  constexpr auto kHandle = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
  VkExternalMemoryBufferCreateInfo external{VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO};
  external.handleTypes = kHandle;
  VkExportMemoryAllocateInfo exported{VK_STRUCTURE_TYPE_EXPORT_MEMORY_ALLOCATE_INFO};
  exported.handleTypes = kHandle;
  VkDeviceSize allocated = 0;
  auto record = std::make_unique<VulkanAllocation>(
      make_allocation(round_up(bytes, 256), &external, false, &exported, ~0u, 0, true, &allocated));
  VkMemoryGetFdInfoKHR info{VK_STRUCTURE_TYPE_MEMORY_GET_FD_INFO_KHR};
  info.memory = record->memory;
  info.handleType = kHandle;
  int fd = -1;
  try {
    FERRY_VK_CHECK(vk_.vkGetMemoryFdKHR(device_, &info, &fd));
  } catch (...) {
    destroy_allocation(*record);
    throw;
  }
  out->fd = fd;
  out->size = allocated;
  out->dedicated = true;
  return wrap_segment(std::move(record), bytes);
}

// An engine's VkBuffer range. The front end checked the neutral rules; here: the fields a
// Vulkan device addresses, the range against the stated buffer size, and that size against
// what the buffer's memory requirements report (vkGetBufferMemoryRequirements reports at least
// the size the buffer was created with, so a larger stated size cannot be right). The record
// belongs to the segment (Segment::owned_data) and destroys nothing: the buffer is the
// engine's.
AdoptedRange VulkanDevice::adopt_memory(const NativeMemory& native, std::uint64_t bytes) {
  if (native.pointer != 0) {
    vk_fail(ErrorCode::invalid_argument,
            "NativeMemory::pointer is set, but a Vulkan device addresses memory through a VkBuffer "
            "(NativeMemory::vulkan_buffer; see ferry::vulkan::native_buffer)");
  }
  if (native.vulkan_buffer == 0) {
    vk_fail(ErrorCode::invalid_argument, "NativeMemory::vulkan_buffer is a null VkBuffer");
  }
  if (native.vulkan_buffer_size == 0) {
    vk_fail(ErrorCode::invalid_argument,
            "NativeMemory::vulkan_buffer_size is 0: state the size the VkBuffer was created with");
  }
  if (native.vulkan_offset > native.vulkan_buffer_size || bytes > native.vulkan_buffer_size - native.vulkan_offset) {
    vk_fail(ErrorCode::invalid_argument,
            "range [" + std::to_string(native.vulkan_offset) + ", +" + std::to_string(bytes) +
                ") exceeds the VkBuffer's " + std::to_string(native.vulkan_buffer_size) + " bytes");
  }
  VkBuffer buffer = VK_NULL_HANDLE;
  static_assert(sizeof(buffer) <= sizeof(native.vulkan_buffer));
  std::memcpy(&buffer, &native.vulkan_buffer, sizeof(buffer));
  VkMemoryRequirements req{};
  vk_.vkGetBufferMemoryRequirements(device_, buffer, &req);
  if (native.vulkan_buffer_size > req.size) {
    vk_fail(ErrorCode::invalid_argument,
            "NativeMemory::vulkan_buffer_size " + std::to_string(native.vulkan_buffer_size) +
                " exceeds the VkBuffer's memory requirements (" + std::to_string(req.size) +
                " bytes, vkGetBufferMemoryRequirements): not the size it was created with");
  }
  auto record = std::make_shared<VulkanAllocation>();
  record->buffer = buffer;
  record->sharing = native.vulkan_sharing == MemorySharing::concurrent ? VulkanAllocation::Sharing::concurrent
                                                                       : VulkanAllocation::Sharing::exclusive;
  auto segment = std::make_unique<Segment>();
  segment->size = native.vulkan_buffer_size;
  segment->native = record->buffer;
  segment->backend_data = record.get();
  segment->owned_data = std::move(record);
  return AdoptedRange{std::move(segment), native.vulkan_offset};
}

void VulkanDevice::free_segment(std::unique_ptr<Segment> segment) {
  std::unique_ptr<VulkanAllocation> record(static_cast<VulkanAllocation*>(segment->backend_data));
  destroy_allocation(*record);
}

std::unique_ptr<HostMemory> VulkanDevice::allocate_host(std::uint64_t bytes) {
  auto record = std::make_unique<VulkanAllocation>(make_allocation(bytes, nullptr, true, nullptr, ~0u, 0));
  void* ptr = nullptr;
  const VkResult mapped = vk_.vkMapMemory(device_, record->memory, 0, VK_WHOLE_SIZE, 0, &ptr);
  if (mapped != VK_SUCCESS) destroy_allocation(*record);
  FERRY_VK_CHECK(mapped);
  auto memory = std::make_unique<HostMemory>();
  memory->ptr = static_cast<std::byte*>(ptr);
  memory->size = bytes;
  memory->backend_data = record.release();
  return memory;
}

std::unique_ptr<HostMemory> VulkanDevice::register_host(std::byte* ptr, std::uint64_t bytes) {
  if (!host_import_) {
    vk_fail(ErrorCode::unsupported, "register_host needs VK_EXT_external_memory_host, which " +
                                        caps_.name + (owns_objects_ ? " lacks" : " was not adopted with"));
  }
  const auto align = host_import_alignment_;
  if (reinterpret_cast<std::uintptr_t>(ptr) % align != 0 || bytes % align != 0) {
    vk_fail(ErrorCode::invalid_argument, "register_host: pointer and size (" + std::to_string(bytes) +
                                             ") must be multiples of minImportedHostPointerAlignment (" +
                                             std::to_string(align) + " bytes)");
  }
  constexpr auto kHandle = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
  VkMemoryHostPointerPropertiesEXT props{VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
  FERRY_VK_CHECK(vk_.vkGetMemoryHostPointerPropertiesEXT(device_, kHandle, ptr, &props));
  VkExternalMemoryBufferCreateInfo external{VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO};
  external.handleTypes = kHandle;
  VkImportMemoryHostPointerInfoEXT import{VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT};
  import.handleType = kHandle;
  import.pHostPointer = ptr;
  auto record = std::make_unique<VulkanAllocation>(
      make_allocation(bytes, &external, true, &import, props.memoryTypeBits, bytes));
  auto memory = std::make_unique<HostMemory>();
  memory->ptr = ptr;
  memory->size = bytes;
  memory->backend_data = record.release();
  memory->registered = true;
  return memory;
}

// A Vulkan queue addresses host memory only through a VkDeviceMemory: an engine's range is
// imported exactly as a registration imports it (which, unlike CUDA's registration, pins
// nothing the engine would have to undo), and free_host destroys the import alone.
std::unique_ptr<HostMemory> VulkanDevice::adopt_host(std::byte* ptr, std::uint64_t bytes) {
  if (!host_import_) {
    vk_fail(ErrorCode::unsupported, "adopting host memory needs VK_EXT_external_memory_host (a Vulkan queue "
                                    "addresses host memory that ferry did not allocate only through an import), "
                                    "which " + caps_.name + (owns_objects_ ? " lacks" : " was not adopted with"));
  }
  const auto align = host_import_alignment_;
  if (reinterpret_cast<std::uintptr_t>(ptr) % align != 0 || bytes % align != 0) {
    vk_fail(ErrorCode::invalid_argument, "adopted host memory: pointer and size (" + std::to_string(bytes) +
                                             ") must be multiples of minImportedHostPointerAlignment (" +
                                             std::to_string(align) + " bytes), which the import needs");
  }
  auto memory = register_host(ptr, bytes);
  memory->adopted = true;
  return memory;
}

void VulkanDevice::free_host(std::unique_ptr<HostMemory> memory) {
  std::unique_ptr<VulkanAllocation> record(static_cast<VulkanAllocation*>(memory->backend_data));
  if (!memory->registered) vk_.vkUnmapMemory(device_, record->memory);
  destroy_allocation(*record);
}

}  // namespace ferry::detail
