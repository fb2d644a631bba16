// SPDX-License-Identifier: MIT
// Vulkan device: open or adopt (instance, validation messenger, queue families, features),
// teardown, the synthetic-compute pipeline, and the backend's descriptor. The device's queues,
// semaphores, memory and images are in the files of those resources.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>

#include "vulkan_internal.hpp"

namespace ferry::detail {

namespace {

constexpr std::uint32_t kMaxQueuesPerFamily = 8;
constexpr std::uint32_t kSharedQueue = ~std::uint32_t{0};  // transfer uses the compute VkQueue

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, value) == 0;
}

// Messages whose premise an interop pair breaks: the validation layer tracks a timeline
// semaphore's value from the Vulkan operations it sees. In a pair CUDA streams also signal
// ferry's timelines (cudaSignalExternalSemaphoresAsync), so to the layer a Vulkan submission
// that waits on a CUDA signal never completes, its semaphore signals stay "pending" and every
// object it used stays "in use". These IDs are that consequence; they are printed, not
// counted, on pair devices only. Every other message still counts.
constexpr const char* kExternalSignalBlindSpots[] = {
    "VUID-VkSemaphoreSignalInfo-value-03258",  "VUID-VkSemaphoreSignalInfo-value-03259",
    "VUID-vkDestroyBuffer-buffer-00922",       "VUID-vkFreeMemory-memory-00677",
    "VUID-vkDestroyImage-image-01000",
    "VUID-vkDestroySemaphore-semaphore-05149", "VUID-vkDestroySemaphore-semaphore-01137",
    "VUID-vkBeginCommandBuffer-commandBuffer-00049", "VUID-vkResetDescriptorPool-descriptorPool-00313",
    "VUID-vkDestroyCommandPool-commandPool-00041", "VUID-vkFreeCommandBuffers-pCommandBuffers-00047",
    "VUID-vkQueueSubmit-pCommandBuffers-00071", "VUID-vkQueueSubmit2-commandBuffer-03875",
    "VUID-vkDestroyDescriptorPool-descriptorPool-00303",
    // The layer waits for a timeline value that the other API signalled; it learns of such a
    // signal only when the semaphore is next queried, and reports its own wait as timing out.
    "UNASSIGNED-VkSemaphore-state-timeout",
};

// A message the layer raises against itself when a host signal and a host wait meet across
// threads. Layers before 1.3.259 (Debian 12 ships 1.3.239) record vkWaitSemaphores and
// vkGetSemaphoreCounterValue under a device-wide lock of their synchronization validation and,
// still holding it, wait up to 10 s for their own record of the values the driver returned. A
// vkSignalSemaphore on another thread that the driver has applied (and the waiter has seen)
// takes the same lock to record itself, so the two wait for each other until the layer gives
// up and reports this ID; nothing else is wrong. A host wait for a point that another thread
// signals is valid Vulkan and part of ferry's contract (a blocking call returns once the
// engine's thread signals its wait point), so with such a layer the message is printed, not
// counted, while a host signal of the device has been in progress for the layer's whole wait.
// At any other time, and with later layers, it counts.
constexpr const char* kSignalBehindWait = "UNASSIGNED-VkSemaphore-state-timeout";
constexpr std::uint32_t kSignalBehindWaitFixed = VK_MAKE_API_VERSION(0, 1, 3, 259);
constexpr auto kLayerStateWait = std::chrono::seconds(10);

// Whether a host signal of the device was in progress when the layer's wait began and lasted
// until the wait's end came near: still in progress, or ended since that wait began. The
// signal a waiter holds up was applied by the driver before that wait began, so a younger one
// is not the cause; and one signal holds up every waiting thread, whose reports come one after
// another, the later ones after the first let the signal finish.
bool signal_held_by_wait(ValidationCounter& counter) {
  const auto began_before = std::chrono::steady_clock::now() - kLayerStateWait;
  std::lock_guard lock(counter.signals_mutex);
  return std::any_of(counter.signals_started.begin(), counter.signals_started.end(),
                     [&](std::chrono::steady_clock::time_point t) { return t <= began_before; }) ||
         std::any_of(counter.signals_ended.begin(), counter.signals_ended.end(), [&](const auto& span) {
           return span.first <= began_before && span.second >= began_before;
         });
}


// Counts validation and performance warnings and all errors. General warnings (the loader's
// "env var VK_INSTANCE_LAYERS defined ...") are printed but not counted.
VKAPI_ATTR VkBool32 VKAPI_CALL on_validation_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                     VkDebugUtilsMessageTypeFlagsEXT types,
                                                     const VkDebugUtilsMessengerCallbackDataEXT* data,
                                                     void* user) {
  auto& counter = *static_cast<ValidationCounter*>(user);
  bool counted = (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) ||
                 (types & (VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT));
  const char* note = counted ? "" : " (general, not counted)";
  if (counted && counter.external_signals.load() && data != nullptr && data->pMessageIdName != nullptr) {
    for (const char* id : kExternalSignalBlindSpots) {
      if (std::strcmp(id, data->pMessageIdName) == 0) {
        counted = false;
        note = " (not counted: the layer cannot see the other API's semaphore signals)";
      }
    }
  }
  if (counted && counter.signal_behind_wait.load() && data != nullptr && data->pMessageIdName != nullptr &&
      std::strcmp(data->pMessageIdName, kSignalBehindWait) == 0 && signal_held_by_wait(counter)) {
    counted = false;
    note = " (not counted: the layer held a host signal behind another thread's host wait)";
  }
  if (counted) counter.counted.fetch_add(1, std::memory_order_relaxed);
  std::fprintf(stderr, "ferry-vulkan-validation%s: %s\n", note,
               data != nullptr && data->pMessage != nullptr ? data->pMessage : "(no message)");
  return VK_FALSE;
}

struct Features {
  bool timeline = false;
  bool synchronization2 = false;  // only looked at on 1.3 devices
};

// Fills the physical device's properties, memory types and queue families; returns the
// features ferry cares for.
Features query_physical(const VulkanApi& vk, VkPhysicalDevice pd, bool api13,
                               VkPhysicalDeviceProperties& props,
                               VkPhysicalDeviceMemoryProperties& memory,
                               std::vector<VkQueueFamilyProperties>& families) {
  vk.vkGetPhysicalDeviceProperties(pd, &props);
  vk.vkGetPhysicalDeviceMemoryProperties(pd, &memory);
  std::uint32_t count = 0;
  vk.vkGetPhysicalDeviceQueueFamilyProperties(pd, &count, nullptr);
  families.resize(count);
  vk.vkGetPhysicalDeviceQueueFamilyProperties(pd, &count, families.data());
  VkPhysicalDeviceVulkan13Features f13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  if (api13) f12.pNext = &f13;
  VkPhysicalDeviceFeatures2 f{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f12};
  vk.vkGetPhysicalDeviceFeatures2(pd, &f);
  return {f12.timelineSemaphore == VK_TRUE, api13 && f13.synchronization2 == VK_TRUE};
}

}  // namespace

// ---- open / adopt ---------------------------------------------------------------------------

void VulkanDevice::open(const DeviceOptions& options) {
  owns_objects_ = true;
  const bool validation = options.validation || env_is("FERRY_VULKAN_VALIDATION", "1");
  VkDebugUtilsMessengerCreateInfoEXT messenger{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
  messenger.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                              VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  messenger.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  messenger.pfnUserCallback = &on_validation_message;
  messenger.pUserData = &validation_;
  instance_ = create_instance(vk_, validation ? &messenger : nullptr);
  validation_.signal_behind_wait.store(validation && vk_.validation_layer_version < kSignalBehindWaitFixed);
  if (validation) {
    if (vk_.vkCreateDebugUtilsMessengerEXT == nullptr) {
      vk_fail(ErrorCode::unsupported, "validation layer present but VK_EXT_debug_utils missing");
    }
    FERRY_VK_CHECK(vk_.vkCreateDebugUtilsMessengerEXT(instance_, &messenger, nullptr, &messenger_));
  }

  const auto devices = usable_physical_devices(vk_, instance_);
  if (devices.empty()) vk_fail(ErrorCode::unsupported, "no Vulkan 1.2 device present");
  // The front end checked the ordinal against the census (vulkan_device_count), which lists
  // the same usable devices.
  physical_ = devices[static_cast<std::size_t>(options.ordinal)];
  VkPhysicalDeviceProperties pd_props;
  vk_.vkGetPhysicalDeviceProperties(physical_, &pd_props);
  const bool api13 = pd_props.apiVersion >= VK_API_VERSION_1_3 && vk_.instance_version >= VK_API_VERSION_1_3;
  const Features features = query_physical(vk_, physical_, api13, props_, memory_, families_);
  if (!features.timeline) {
    vk_fail(ErrorCode::unsupported,
            std::string(props_.deviceName) + " lacks the timelineSemaphore feature");
  }
  select_families();

  std::uint32_t ext_count = 0;
  FERRY_VK_CHECK(vk_.vkEnumerateDeviceExtensionProperties(physical_, nullptr, &ext_count, nullptr));
  std::vector<VkExtensionProperties> offered(ext_count);
  FERRY_VK_CHECK(vk_.vkEnumerateDeviceExtensionProperties(physical_, nullptr, &ext_count, offered.data()));
  const bool host_import = std::any_of(offered.begin(), offered.end(), [](const auto& e) {
    return std::strcmp(e.extensionName, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME) == 0;
  });
  auto offers = [&](const char* name) {
    return std::any_of(offered.begin(), offered.end(),
                       [&](const auto& e) { return std::strcmp(e.extensionName, name) == 0; });
  };
  std::vector<const char*> extensions;
  if (host_import) extensions.push_back(VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
  // Interop (ferry/interop.hpp): opaque-fd export of memory and timeline semaphores, when the
  // driver offers both and can export a timeline semaphore.
  bool fd_export = offers(VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME) &&
                   offers(VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME);
  if (fd_export) {
    VkSemaphoreTypeCreateInfo type{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO};
    type.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
    VkPhysicalDeviceExternalSemaphoreInfo info{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_SEMAPHORE_INFO, &type};
    info.handleType = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT;
    VkExternalSemaphoreProperties props{VK_STRUCTURE_TYPE_EXTERNAL_SEMAPHORE_PROPERTIES};
    vk_.vkGetPhysicalDeviceExternalSemaphoreProperties(physical_, &info, &props);
    fd_export = (props.externalSemaphoreFeatures & VK_EXTERNAL_SEMAPHORE_FEATURE_EXPORTABLE_BIT) != 0;
  }
  if (fd_export) {
    extensions.push_back(VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME);
    extensions.push_back(VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME);
  }

  // All queues (up to kMaxQueuesPerFamily) of the compute and transfer families, so that
  // create_queue can hand out the rest later. Vulkan fixes priorities at creation: all 1.0.
  static constexpr float kPriorities[kMaxQueuesPerFamily] = {1, 1, 1, 1, 1, 1, 1, 1};
  queues_created_.assign(families_.size(), 0);
  std::vector<VkDeviceQueueCreateInfo> queue_infos;
  for (std::uint32_t f : sharing_families_) {
    queues_created_[f] = std::min(families_[f].queueCount, kMaxQueuesPerFamily);
    VkDeviceQueueCreateInfo qi{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    qi.queueFamilyIndex = f;
    qi.queueCount = queues_created_[f];
    qi.pQueuePriorities = kPriorities;
    queue_infos.push_back(qi);
  }
  VkPhysicalDeviceVulkan13Features f13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
  f13.synchronization2 = VK_TRUE;
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  f12.timelineSemaphore = VK_TRUE;
  if (features.synchronization2) f12.pNext = &f13;
  VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, &f12};
  di.queueCreateInfoCount = static_cast<std::uint32_t>(queue_infos.size());
  di.pQueueCreateInfos = queue_infos.data();
  di.enabledExtensionCount = static_cast<std::uint32_t>(extensions.size());
  di.ppEnabledExtensionNames = extensions.data();
  FERRY_VK_CHECK(vk_.vkCreateDevice(physical_, &di, nullptr, &device_));
  vk_.load_device(device_, features.synchronization2, host_import, fd_export);

  // Transfer queue: a transfer-only family's first queue, else a second compute queue, else
  // the compute queue itself.
  std::uint32_t transfer_index = 0;
  if (transfer_family_ == compute_family_) {
    transfer_index = queues_created_[compute_family_] > 1 ? 1 : kSharedQueue;
  }
  finish_setup(0, transfer_index, host_import, fd_export);
  if (validation) caps_.notes += "; validation on";
}

void VulkanDevice::adopt(const VulkanAdoptInfo& info) {
  owns_objects_ = false;
  if (info.instance == VK_NULL_HANDLE || info.physical_device == VK_NULL_HANDLE ||
      info.device == VK_NULL_HANDLE) {
    vk_fail(ErrorCode::invalid_argument, "vulkan_adopt: instance, physical device and device are required");
  }
  vk_.vkGetInstanceProcAddr = info.get_instance_proc_addr != nullptr
                                  ? info.get_instance_proc_addr
                                  : loader_get_instance_proc_addr();
  if (vk_.vkGetInstanceProcAddr == nullptr) {
    vk_fail(ErrorCode::unsupported, "vulkan_adopt: no get_instance_proc_addr given and libvulkan.so.1 not found");
  }
  instance_ = info.instance;
  vk_.load_instance(instance_);

  std::uint32_t count = 0;
  FERRY_VK_CHECK(vk_.vkEnumeratePhysicalDevices(instance_, &count, nullptr));
  std::vector<VkPhysicalDevice> all(count);
  FERRY_VK_CHECK(vk_.vkEnumeratePhysicalDevices(instance_, &count, all.data()));
  if (std::find(all.begin(), all.end(), info.physical_device) == all.end()) {
    vk_fail(ErrorCode::invalid_argument, "vulkan_adopt: the physical device is not one of the instance's devices");
  }
  physical_ = info.physical_device;
  VkPhysicalDeviceProperties pd_props;
  vk_.vkGetPhysicalDeviceProperties(physical_, &pd_props);
  if (pd_props.apiVersion < VK_API_VERSION_1_2) {
    vk_fail(ErrorCode::unsupported, std::string("vulkan_adopt: ") + pd_props.deviceName + " is below Vulkan 1.2");
  }
  const Features features = query_physical(vk_, physical_, false, props_, memory_, families_);
  if (!features.timeline) {
    vk_fail(ErrorCode::unsupported,
            std::string("vulkan_adopt: ") + props_.deviceName + " lacks the timelineSemaphore feature");
  }
  const auto n = static_cast<std::uint32_t>(families_.size());
  for (auto [family, index, what] : {std::tuple{info.compute_family, info.compute_index, "compute"},
                                     std::tuple{info.transfer_family, info.transfer_index, "transfer"}}) {
    if (family >= n) {
      vk_fail(ErrorCode::invalid_argument, std::string("vulkan_adopt: ") + what + " family " +
                                               std::to_string(family) + " out of range (" +
                                               std::to_string(n) + " families)");
    }
    if (index >= families_[family].queueCount) {
      vk_fail(ErrorCode::invalid_argument,
              std::string("vulkan_adopt: ") + what + " queue index " + std::to_string(index) +
                  " out of range (family " + std::to_string(family) + " has " +
                  std::to_string(families_[family].queueCount) + " queues)");
    }
  }
  if (!has_compute(info.compute_family)) {
    vk_fail(ErrorCode::invalid_argument, "vulkan_adopt: compute family " +
                                             std::to_string(info.compute_family) + " has no COMPUTE capability");
  }
  compute_family_ = info.compute_family;
  transfer_family_ = info.transfer_family;
  sharing_families_ = {compute_family_};
  if (transfer_family_ != compute_family_) sharing_families_.push_back(transfer_family_);
  // Which queues the engine created is not queryable: every index is taken on trust.
  queues_created_.resize(n);
  for (std::uint32_t f = 0; f < n; ++f) queues_created_[f] = families_[f].queueCount;
  device_ = info.device;
  vk_.load_device(device_, /*submit2=*/false, info.host_pointer_import);
  if (info.submit_mutex != nullptr) submit_mutex_ = info.submit_mutex;
  const bool shared = info.transfer_family == info.compute_family && info.transfer_index == info.compute_index;
  finish_setup(info.compute_index, shared ? kSharedQueue : info.transfer_index, info.host_pointer_import);
  caps_.notes += "; adopted";
}

void VulkanDevice::select_families() {
  const auto n = static_cast<std::uint32_t>(families_.size());
  constexpr VkQueueFlags kGraphicsCompute = VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT;
  compute_family_ = n;
  transfer_family_ = n;
  for (std::uint32_t f = 0; f < n; ++f) {
    const VkQueueFlags flags = families_[f].queueFlags;
    if (families_[f].queueCount == 0) continue;
    if (compute_family_ == n && (flags & VK_QUEUE_COMPUTE_BIT)) compute_family_ = f;
    if (transfer_family_ == n && (flags & VK_QUEUE_TRANSFER_BIT) && !(flags & kGraphicsCompute)) {
      transfer_family_ = f;
    }
  }
  if (compute_family_ == n) {
    vk_fail(ErrorCode::unsupported, std::string(props_.deviceName) + " has no compute queue family");
  }
  if (transfer_family_ == n) transfer_family_ = compute_family_;
  // Overrides for experiments and for drivers whose first families are not their best:
  // FERRY_VULKAN_COMPUTE_FAMILY / FERRY_VULKAN_TRANSFER_FAMILY = a family index.
  auto override_family = [&](const char* variable, VkQueueFlags needed, std::uint32_t& family) {
    const char* v = std::getenv(variable);
    if (v == nullptr || *v == '\0') return;
    char* end = nullptr;
    const unsigned long f = std::strtoul(v, &end, 10);
    if (*end != '\0' || f >= n || families_[f].queueCount == 0 || (families_[f].queueFlags & needed) != needed) {
      vk_fail(ErrorCode::invalid_argument, std::string(variable) + "=" + v + ": not a queue family of " +
                                               props_.deviceName + " with " +
                                               (needed == VK_QUEUE_COMPUTE_BIT ? "compute" : "transfer") +
                                               " support (it has " + std::to_string(n) + (n == 1 ? " family)" : " families)"));
    }
    family = static_cast<std::uint32_t>(f);
  };
  override_family("FERRY_VULKAN_COMPUTE_FAMILY", VK_QUEUE_COMPUTE_BIT, compute_family_);
  override_family("FERRY_VULKAN_TRANSFER_FAMILY", VK_QUEUE_TRANSFER_BIT, transfer_family_);
  sharing_families_ = {compute_family_};
  if (transfer_family_ != compute_family_) sharing_families_.push_back(transfer_family_);
}

// Common to open and adopt: capabilities, sharing mode, default queues.
void VulkanDevice::finish_setup(std::uint32_t compute_index, std::uint32_t transfer_index,
                                bool host_import, bool fd_export) {
  host_import_ = host_import;
  fd_export_ = fd_export;
  VkPhysicalDeviceExternalMemoryHostPropertiesEXT host_props{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
  VkPhysicalDeviceIDProperties id{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES,
                                  host_import ? &host_props : nullptr};
  VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, &id};
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &m3};
  vk_.vkGetPhysicalDeviceProperties2(physical_, &p2);
  host_import_alignment_ = host_props.minImportedHostPointerAlignment;
  concurrent_ = sharing_families_.size() > 1 && env_is("FERRY_VULKAN_SHARING", "concurrent");
  // An experiment's override: FERRY_VULKAN_URGENT_FAMILY=compute puts urgent copy queues in
  // the compute family (see create_queue).
  urgent_on_compute_ = env_is("FERRY_VULKAN_URGENT_FAMILY", "compute");

  queue_in_use_.assign(families_.size(), {});
  for (std::size_t f = 0; f < families_.size(); ++f) queue_in_use_[f].assign(queues_created_[f], false);
  // On a one-queue device both roles get their own VulkanQueue (own batches, own progress
  // timeline) over the same VkQueue; submissions to it are serialized by the device's lock.
  const bool shared = transfer_index == kSharedQueue;
  compute_queue_ = make_queue(compute_family_, compute_index, true);
  transfer_queue_ = make_queue(transfer_family_, shared ? compute_index : transfer_index, !shared);

  const auto& limits = props_.limits;
  caps_.name = props_.deviceName;
  caps_.backend = Backend::vulkan;
  caps_.is_gpu = props_.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU;
  // The shader is ferry-testkit's (synthetic_kernel_image): libferry holds no device code.
  caps_.synthetic_compute = !synthetic_kernel_image(Backend::vulkan).empty();
  for (std::uint32_t h = 0; h < memory_.memoryHeapCount; ++h) {
    if (memory_.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) {
      caps_.device_memory_bytes = std::max(caps_.device_memory_bytes, memory_.memoryHeaps[h].size);
    }
  }
  const bool separate = transfer_family_ != compute_family_;
  caps_.copy_engines = separate ? families_[transfer_family_].queueCount : 0;
  caps_.dedicated_transfer_queue = !shared;
  caps_.separate_queue_families = separate;
  caps_.ownership_transfer = separate && !concurrent_;
  caps_.host_memory_registration = host_import_;
  caps_.host_memory_adoption = host_import_;
  caps_.timeline_export = fd_export_;
  static_assert(sizeof(caps_.uuid) == VK_UUID_SIZE);
  std::memcpy(caps_.uuid.data(), id.deviceUUID, VK_UUID_SIZE);
  caps_.min_alignment = std::max<std::uint64_t>({256, limits.minStorageBufferOffsetAlignment,
                                                 limits.optimalBufferCopyOffsetAlignment});
  caps_.max_allocation_bytes = m3.maxMemoryAllocationSize;
  caps_.notes = "compute family " + std::to_string(compute_family_) + " queue " +
                std::to_string(compute_index) + "; ";
  if (shared) {
    caps_.notes += "transfer shares the compute VkQueue";
  } else {
    caps_.notes += "transfer family " + std::to_string(transfer_family_) + " x" +
                   std::to_string(families_[transfer_family_].queueCount) + " queue " +
                   std::to_string(transfer_index);
  }
  if (separate) caps_.notes += concurrent_ ? "; sharing concurrent" : "; sharing exclusive (ownership transfers)";
  caps_.notes += vk_.vkQueueSubmit2 != nullptr ? "; vkQueueSubmit2" : "; vkQueueSubmit";
  if (host_import_) caps_.notes += "; host import alignment " + std::to_string(host_import_alignment_);
  if (fd_export_) caps_.notes += "; opaque-fd export of memory and timelines";
}

VulkanDevice::~VulkanDevice() {
  if (device_ != VK_NULL_HANDLE && vk_.vkDestroyDevice == nullptr && owns_objects_) {
    // Created, but its entry points did not resolve: nothing else was made on it.
    auto destroy = reinterpret_cast<PFN_vkDestroyDevice>(vk_.vkGetDeviceProcAddr(device_, "vkDestroyDevice"));
    if (destroy != nullptr) destroy(device_, nullptr);
  } else if (device_ != VK_NULL_HANDLE && vk_.vkDestroyDevice != nullptr) {
    try {
      wait_idle();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ferry: Vulkan device teardown: %s\n", e.what());
    }
    compute_queue_.reset();
    transfer_queue_.reset();
    for (VkSemaphore s : retired_) vk_.vkDestroySemaphore(device_, s, nullptr);
    vk_.vkDestroyPipeline(device_, synthetic_.pipeline, nullptr);
    vk_.vkDestroyPipelineLayout(device_, synthetic_.layout, nullptr);
    vk_.vkDestroyDescriptorSetLayout(device_, synthetic_.set_layout, nullptr);
    vk_.vkDestroyShaderModule(device_, synthetic_.shader, nullptr);
    if (owns_objects_) vk_.vkDestroyDevice(device_, nullptr);
  }
  if (owns_objects_ && instance_ != VK_NULL_HANDLE) {
    if (messenger_ != VK_NULL_HANDLE) vk_.vkDestroyDebugUtilsMessengerEXT(instance_, messenger_, nullptr);
    vk_.vkDestroyInstance(instance_, nullptr);
  }
}

void VulkanDevice::wait_idle() {
  {
    std::lock_guard lock(submit_mutex());  // vkDeviceWaitIdle needs every queue to itself
    FERRY_VK_CHECK(vk_.vkDeviceWaitIdle(device_));
  }
  std::lock_guard lock(mutex_);
  for (VkSemaphore s : retired_) vk_.vkDestroySemaphore(device_, s, nullptr);
  retired_.clear();
}

// ---- synthetic compute pipeline ----------------------------------------------------------------

const SyntheticPipeline& VulkanDevice::synthetic() {
  std::lock_guard lock(mutex_);
  if (synthetic_.pipeline != VK_NULL_HANDLE) return synthetic_;
  // Partially created objects stay in synthetic_ and are destroyed with the device. The SPIR-V
  // is the test kit's (synthetic.comp, registered when the kit loads: an array of 32-bit
  // words, so aligned for pCode); the queue checks that there is one before asking.
  const std::span<const std::byte> spirv = synthetic_kernel_image(Backend::vulkan);
  VkShaderModuleCreateInfo si{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  si.codeSize = spirv.size();
  si.pCode = reinterpret_cast<const std::uint32_t*>(spirv.data());
  if (synthetic_.shader == VK_NULL_HANDLE) {
    FERRY_VK_CHECK(vk_.vkCreateShaderModule(device_, &si, nullptr, &synthetic_.shader));
  }
  if (synthetic_.set_layout == VK_NULL_HANDLE) {
    VkDescriptorSetLayoutBinding bindings[2] = {};
    for (std::uint32_t b = 0; b < 2; ++b) {
      bindings[b].binding = b;
      bindings[b].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      bindings[b].descriptorCount = 1;
      bindings[b].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    }
    VkDescriptorSetLayoutCreateInfo li{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    li.bindingCount = 2;
    li.pBindings = bindings;
    FERRY_VK_CHECK(vk_.vkCreateDescriptorSetLayout(device_, &li, nullptr, &synthetic_.set_layout));
  }
  if (synthetic_.layout == VK_NULL_HANDLE) {
    VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, 4 * sizeof(std::uint32_t)};
    VkPipelineLayoutCreateInfo pi{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    pi.setLayoutCount = 1;
    pi.pSetLayouts = &synthetic_.set_layout;
    pi.pushConstantRangeCount = 1;
    pi.pPushConstantRanges = &range;
    FERRY_VK_CHECK(vk_.vkCreatePipelineLayout(device_, &pi, nullptr, &synthetic_.layout));
  }
  VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = synthetic_.shader;
  ci.stage.pName = "main";
  ci.layout = synthetic_.layout;
  FERRY_VK_CHECK(vk_.vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &ci, nullptr, &synthetic_.pipeline));
  return synthetic_;
}

// ---- entry points -------------------------------------------------------------------------------

std::unique_ptr<BackendDevice> vulkan_open(const DeviceOptions& options) {
  auto device = std::make_unique<VulkanDevice>();
  device->open(options);
  return device;
}

std::unique_ptr<BackendDevice> vulkan_adopt(const VulkanAdoptInfo& info) {
  auto device = std::make_unique<VulkanDevice>();
  device->adopt(info);
  return device;
}

extern const BackendDescriptor vulkan_backend_descriptor;
constinit const BackendDescriptor vulkan_backend_descriptor{
    .id = Backend::vulkan,
    .name = "vulkan",
    .option = "-Dvulkan=enabled",
    .kind = DeviceKind::gpu,
    .built = true,
    .count = &vulkan_device_count,
    .open = &vulkan_open,
    .is_gpu = &vulkan_device_is_gpu,  // CPU drivers (lavapipe) rank among the CPU devices
    .runtime_present = [] () noexcept { return loader_get_instance_proc_addr() != nullptr; },
};

}  // namespace ferry::detail
