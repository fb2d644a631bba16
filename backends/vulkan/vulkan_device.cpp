// SPDX-License-Identifier: MIT
// Vulkan device: open or adopt, queue families and queues, memory (segments, host memory,
// host pointer import), timeline semaphores, the synthetic-compute pipeline, teardown.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>

#include "vulkan_internal.hpp"

#include <stdint.h>  // the generated SPIR-V header uses ::uint32_t

#include "synthetic_spv.h"  // generated from synthetic.comp by glslangValidator

namespace ferry::detail {

namespace {

constexpr std::uint32_t kMaxQueuesPerFamily = 8;
constexpr std::uint32_t kSharedQueue = ~std::uint32_t{0};  // transfer uses the compute VkQueue

std::uint64_t round_up(std::uint64_t x, std::uint64_t to) { return (x + to - 1) / to * to; }

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

// Whether a host signal of the device has been in progress for the layer's whole wait. The
// signal a waiter holds up was applied by the driver before that wait began, so a younger one
// is not the cause.
bool signal_held_by_wait(ValidationCounter& counter) {
  const auto began_before = std::chrono::steady_clock::now() - kLayerStateWait;
  std::lock_guard lock(counter.signals_mutex);
  return std::any_of(counter.signals_started.begin(), counter.signals_started.end(),
                     [&](std::chrono::steady_clock::time_point t) { return t <= began_before; });
}

// Notes a host signal in the device's counter while it is in progress (see kSignalBehindWait).
class HostSignalInProgress {
 public:
  explicit HostSignalInProgress(ValidationCounter& counter)
      : counter_(counter.signal_behind_wait.load() ? &counter : nullptr) {
    if (counter_ == nullptr) return;
    std::lock_guard lock(counter_->signals_mutex);
    counter_->signals_started.push_back(started_);
  }
  ~HostSignalInProgress() {
    if (counter_ == nullptr) return;
    std::lock_guard lock(counter_->signals_mutex);
    auto& started = counter_->signals_started;
    started.erase(std::find(started.begin(), started.end(), started_));
  }
  HostSignalInProgress(const HostSignalInProgress&) = delete;
  HostSignalInProgress& operator=(const HostSignalInProgress&) = delete;

 private:
  ValidationCounter* counter_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

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
  caps_.synthetic_compute = true;
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

// ---- queues -----------------------------------------------------------------------------------

std::unique_ptr<VulkanQueue> VulkanDevice::make_queue(std::uint32_t family, std::uint32_t index,
                                                      bool owns_index) {
  VkQueue queue = VK_NULL_HANDLE;
  vk_.vkGetDeviceQueue(device_, family, index, &queue);
  if (queue == VK_NULL_HANDLE) {
    vk_fail(ErrorCode::invalid_argument, "queue " + std::to_string(index) + " of family " +
                                             std::to_string(family) + " is not part of the VkDevice");
  }
  auto result = std::make_unique<VulkanQueue>(*this, queue, family, index, owns_index);
  if (owns_index) {
    std::lock_guard lock(mutex_);
    queue_in_use_[family][index] = true;
  }
  return result;
}

BackendQueue& VulkanDevice::default_queue(QueueRole role) {
  return role == QueueRole::transfer ? *transfer_queue_ : *compute_queue_;
}

std::unique_ptr<BackendQueue> VulkanDevice::create_queue(QueueRole role, int /*priority*/) {
  // Vulkan fixes queue priorities at device creation; `priority` cannot be honoured.
  if (!owns_objects_) {
    vk_fail(ErrorCode::unsupported, "create_queue on an adopted device: which queues the engine "
                                    "created is unknown; adopt them with adopt_queue");
  }
  const std::uint32_t family = role == QueueRole::compute ? compute_family_ : transfer_family_;
  std::uint32_t index = 0;
  {
    std::lock_guard lock(mutex_);
    auto& used = queue_in_use_[family];
    const auto it = std::find(used.begin(), used.end(), false);
    if (it == used.end()) {
      vk_fail(ErrorCode::unsupported, "no free queue left in family " + std::to_string(family) +
                                          " (" + std::to_string(used.size()) + " created, all in use)");
    }
    index = static_cast<std::uint32_t>(it - used.begin());
  }
  return make_queue(family, index, true);
}

std::unique_ptr<BackendQueue> VulkanDevice::adopt_queue(QueueRole role, const NativeQueue& native) {
  const auto family = native.family, index = native.index;
  const std::string which = "queue (family " + std::to_string(family) + ", index " + std::to_string(index) + ")";
  if (native.handle == nullptr) vk_fail(ErrorCode::invalid_argument, "adopt_queue: null VkQueue");
  if (family >= families_.size()) {
    vk_fail(ErrorCode::invalid_argument, "adopt_queue: " + which + ": family out of range (" +
                                             std::to_string(families_.size()) + " families)");
  }
  if (index >= families_[family].queueCount) {
    vk_fail(ErrorCode::invalid_argument, "adopt_queue: " + which + ": index out of range (family has " +
                                             std::to_string(families_[family].queueCount) + " queues)");
  }
  if (index >= queues_created_[family]) {
    vk_fail(ErrorCode::invalid_argument, "adopt_queue: " + which + ": queue does not belong to this VkDevice");
  }
  if (role == QueueRole::compute && !has_compute(family)) {
    vk_fail(ErrorCode::invalid_argument, "adopt_queue: " + which + ": family has no COMPUTE capability");
  }
  if (std::find(sharing_families_.begin(), sharing_families_.end(), family) == sharing_families_.end()) {
    vk_fail(ErrorCode::unsupported, "adopt_queue: " + which + ": ferry's buffers are shared by families " +
                                        std::to_string(compute_family_) + " and " +
                                        std::to_string(transfer_family_) + " only");
  }
  VkQueue expected = VK_NULL_HANDLE;
  vk_.vkGetDeviceQueue(device_, family, index, &expected);
  if (expected != static_cast<VkQueue>(native.handle)) {
    vk_fail(ErrorCode::invalid_argument, "adopt_queue: " + which + ": queue does not belong to this VkDevice");
  }
  return make_queue(family, index, false);
}

void VulkanDevice::release_queue_index(std::uint32_t family, std::uint32_t index) {
  std::lock_guard lock(mutex_);
  queue_in_use_[family][index] = false;
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

// ---- semaphores ---------------------------------------------------------------------------------

VkSemaphore VulkanDevice::create_timeline(std::uint64_t initial, const void* next) {
  VkSemaphoreTypeCreateInfo type{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO, next};
  type.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  type.initialValue = initial;
  VkSemaphoreCreateInfo info{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, &type};
  VkSemaphore semaphore = VK_NULL_HANDLE;
  FERRY_VK_CHECK(vk_.vkCreateSemaphore(device_, &info, nullptr, &semaphore));
  return semaphore;
}

void VulkanDevice::retire_semaphore(VkSemaphore semaphore) {
  std::lock_guard lock(mutex_);
  retired_.push_back(semaphore);
}

std::unique_ptr<BackendSemaphore> VulkanDevice::create_semaphore(std::uint64_t initial) {
  return std::make_unique<VulkanSemaphore>(*this, initial);
}

VulkanSemaphore::VulkanSemaphore(VulkanDevice& device, std::uint64_t initial)
    : device_(device), semaphore_(device.create_timeline(initial)) {}

VulkanSemaphore::VulkanSemaphore(VulkanDevice& device, VkSemaphore semaphore)
    : device_(device), semaphore_(semaphore) {}

std::unique_ptr<BackendSemaphore> VulkanDevice::create_exported_semaphore(std::uint64_t initial, int* fd) {
  if (!fd_export_) {
    vk_fail(ErrorCode::unsupported, caps_.name + ": timeline semaphores cannot be exported as opaque fds "
                                                 "(VK_KHR_external_semaphore_fd missing or not exportable)");
  }
  VkExportSemaphoreCreateInfo exported{VK_STRUCTURE_TYPE_EXPORT_SEMAPHORE_CREATE_INFO};
  exported.handleTypes = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT;
  auto semaphore = std::make_unique<VulkanSemaphore>(*this, create_timeline(initial, &exported));
  VkSemaphoreGetFdInfoKHR info{VK_STRUCTURE_TYPE_SEMAPHORE_GET_FD_INFO_KHR};
  info.semaphore = semaphore->handle();
  info.handleType = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT;
  FERRY_VK_CHECK(vk_.vkGetSemaphoreFdKHR(device_, &info, fd));
  return semaphore;
}

VulkanSemaphore::~VulkanSemaphore() {
  if (queued_.load(std::memory_order_relaxed)) {
    device_.retire_semaphore(semaphore_);
  } else {
    device_.vk().vkDestroySemaphore(device_.handle(), semaphore_, nullptr);
  }
}

std::uint64_t VulkanSemaphore::value() {
  std::uint64_t v = 0;
  FERRY_VK_CHECK(device_.vk().vkGetSemaphoreCounterValue(device_.handle(), semaphore_, &v));
  return v;
}

void VulkanSemaphore::signal(std::uint64_t value) {
  VkSemaphoreSignalInfo info{VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO};
  info.semaphore = semaphore_;
  info.value = value;
  const HostSignalInProgress in_progress(device_.validation());
  FERRY_VK_CHECK(device_.vk().vkSignalSemaphore(device_.handle(), &info));
}

bool VulkanSemaphore::wait(std::uint64_t value, std::chrono::nanoseconds timeout) {
  VkSemaphoreWaitInfo info{VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO};
  info.semaphoreCount = 1;
  info.pSemaphores = &semaphore_;
  info.pValues = &value;
  const auto ns = static_cast<std::uint64_t>(std::max<std::int64_t>(timeout.count(), 0));
  const VkResult result = device_.vk().vkWaitSemaphores(device_.handle(), &info, ns);
  if (result == VK_TIMEOUT) return false;
  FERRY_VK_CHECK(result);
  return true;
}

// ---- memory -------------------------------------------------------------------------------------

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

// Interop (images): the engine's VkDeviceMemory under an adopted VkImage, exported as an
// opaque fd. Vulkan reports neither an allocation's size nor the memory an image is bound to,
// so the stated ones are checked only against what the image needs: its memory requirements
// (size and alignment) within the stated allocation from the stated offset. An fd of memory
// allocated without VkExportMemoryAllocateInfo is refused by the driver (vkGetMemoryFdKHR).
ExternalMemory VulkanDevice::export_image_memory(const NativeImage& native) {
  if (!fd_export_) {
    vk_fail(ErrorCode::unsupported, caps_.name + ": memory cannot be exported as opaque fds "
                                                 "(VK_KHR_external_memory_fd missing)");
  }
  if (native.vulkan_memory == 0) {
    vk_fail(ErrorCode::invalid_argument,
            "NativeImage::vulkan_memory is null: an interop pair imports the image's memory into CUDA "
            "(see ferry::vulkan::with_exported_memory)");
  }
  VkImage image = VK_NULL_HANDLE;
  std::memcpy(&image, &native.vulkan_image, sizeof(image));
  VkMemoryRequirements req{};
  vk_.vkGetImageMemoryRequirements(device_, image, &req);
  if (native.vulkan_memory_size == 0 || native.vulkan_memory_offset > native.vulkan_memory_size ||
      req.size > native.vulkan_memory_size - native.vulkan_memory_offset) {
    vk_fail(ErrorCode::invalid_argument,
            "NativeImage::vulkan_memory_size " + std::to_string(native.vulkan_memory_size) + " from vulkan_memory_offset " +
                std::to_string(native.vulkan_memory_offset) + " cannot hold the image's " + std::to_string(req.size) +
                " bytes (vkGetImageMemoryRequirements): state the allocation's allocationSize and the bind offset");
  }
  if (req.alignment != 0 && native.vulkan_memory_offset % req.alignment != 0) {
    vk_fail(ErrorCode::invalid_argument,
            "NativeImage::vulkan_memory_offset " + std::to_string(native.vulkan_memory_offset) +
                " is not a multiple of the image's alignment " + std::to_string(req.alignment) + ": not its bind offset");
  }
  if (native.vulkan_dedicated && native.vulkan_memory_offset != 0) {
    vk_fail(ErrorCode::invalid_argument, "NativeImage::vulkan_dedicated is set with vulkan_memory_offset " +
                                             std::to_string(native.vulkan_memory_offset) +
                                             ": a dedicated allocation binds its image at offset 0");
  }
  VkMemoryGetFdInfoKHR info{VK_STRUCTURE_TYPE_MEMORY_GET_FD_INFO_KHR};
  std::memcpy(&info.memory, &native.vulkan_memory, sizeof(info.memory));
  info.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
  int fd = -1;
  // A failure other than running out of memory is the engine's memory: not exportable
  // (allocated without VkExportMemoryAllocateInfo for VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT).
  const auto classify = [](VkResult r) {
    return r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_TOO_MANY_OBJECTS ? vk_classify(r)
                                                                              : ErrorCode::invalid_argument;
  };
  FERRY_CHECK_GEN(vk_.vkGetMemoryFdKHR(device_, &info, &fd), VK_SUCCESS, vk_describe, classify);
  ExternalMemory out;
  out.fd = fd;
  out.size = native.vulkan_memory_size;
  out.dedicated = native.vulkan_dedicated;
  return out;
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

// An engine's VkImage: Vulkan has no query of an image's shape, format or layout, so the
// stated ones are taken on trust, except that its memory requirements must hold the stated
// shape's texel data (an image smaller than that is not the image described).
std::unique_ptr<BackendImage> VulkanDevice::adopt_image(const NativeImage& native, const ImageDesc& desc,
                                                        std::uint32_t owner_family) {
  if (native.host_pointer != 0 || native.host_row_pitch != 0 || native.host_slice_pitch != 0 ||
      native.cuda_array != 0 || native.cuda_mipmapped) {
    vk_fail(ErrorCode::invalid_argument,
            "a host or CUDA field of NativeImage is set, but a Vulkan device addresses images through a VkImage "
            "(NativeImage::vulkan_image; see ferry::vulkan::native_image)");
  }
  if (native.vulkan_image == 0) vk_fail(ErrorCode::invalid_argument, "NativeImage::vulkan_image is a null VkImage");
  const auto final_layout = static_cast<VkImageLayout>(native.vulkan_final_layout);
  if (final_layout == VK_IMAGE_LAYOUT_UNDEFINED || final_layout == VK_IMAGE_LAYOUT_PREINITIALIZED) {
    vk_fail(ErrorCode::invalid_argument,
            "NativeImage::vulkan_final_layout " + std::to_string(native.vulkan_final_layout) +
                " is UNDEFINED or PREINITIALIZED: state the layout the engine uses the image in after a copy");
  }
  const bool concurrent = native.vulkan_sharing == MemorySharing::concurrent;
  if (concurrent) {
    const auto& f = native.vulkan_queue_families;
    if (std::find(f.begin(), f.end(), owner_family) == f.end()) {
      vk_fail(ErrorCode::invalid_argument, "a concurrent image's vulkan_queue_families do not include the owner queue's "
                                           "family " + std::to_string(owner_family));
    }
  } else if (!native.vulkan_queue_families.empty()) {
    vk_fail(ErrorCode::invalid_argument, "vulkan_queue_families is set for an exclusive image (it lists the families of "
                                         "a concurrent one)");
  }
  auto image = std::make_unique<VulkanImage>();
  static_assert(sizeof(image->image) <= sizeof(native.vulkan_image));
  std::memcpy(&image->image, &native.vulkan_image, sizeof(image->image));
  VkMemoryRequirements req{};
  vk_.vkGetImageMemoryRequirements(device_, image->image, &req);
  const std::uint64_t texels = host_image_bytes(desc);
  if (req.size < texels) {
    vk_fail(ErrorCode::invalid_argument,
            "the VkImage's memory requirements (" + std::to_string(req.size) + " bytes) cannot hold the " +
                std::to_string(texels) + " bytes of the stated shape: not the image described");
  }
  image->engine_layout = static_cast<VkImageLayout>(native.vulkan_layout);
  image->final_layout = final_layout;
  image->concurrent = concurrent;
  image->mip_levels = desc.mip_levels;
  image->array_layers = desc.array_layers;
  return image;
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

// ---- synthetic compute pipeline ----------------------------------------------------------------

const SyntheticPipeline& VulkanDevice::synthetic() {
  std::lock_guard lock(mutex_);
  if (synthetic_.pipeline != VK_NULL_HANDLE) return synthetic_;
  // Partially created objects stay in synthetic_ and are destroyed with the device.
  VkShaderModuleCreateInfo si{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  si.codeSize = sizeof(ferry_synthetic_spv);
  si.pCode = ferry_synthetic_spv;
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
};

}  // namespace ferry::detail
