// SPDX-License-Identifier: MIT
// Vulkan loader access, entry-point tables, error mapping, instance creation and the device
// census behind vulkan_device_count / vulkan_device_is_gpu.
#include <dlfcn.h>

#include <algorithm>
#include <cstring>

#include "vulkan_internal.hpp"

namespace ferry::detail {

namespace {

const char* result_name(VkResult result) noexcept {
  switch (result) {
#define FERRY_VK_CASE(r) \
  case r: return #r;
    FERRY_VK_CASE(VK_SUCCESS)
    FERRY_VK_CASE(VK_NOT_READY)
    FERRY_VK_CASE(VK_TIMEOUT)
    FERRY_VK_CASE(VK_INCOMPLETE)
    FERRY_VK_CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
    FERRY_VK_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    FERRY_VK_CASE(VK_ERROR_INITIALIZATION_FAILED)
    FERRY_VK_CASE(VK_ERROR_DEVICE_LOST)
    FERRY_VK_CASE(VK_ERROR_MEMORY_MAP_FAILED)
    FERRY_VK_CASE(VK_ERROR_LAYER_NOT_PRESENT)
    FERRY_VK_CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
    FERRY_VK_CASE(VK_ERROR_FEATURE_NOT_PRESENT)
    FERRY_VK_CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
    FERRY_VK_CASE(VK_ERROR_TOO_MANY_OBJECTS)
    FERRY_VK_CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
    FERRY_VK_CASE(VK_ERROR_FRAGMENTED_POOL)
    FERRY_VK_CASE(VK_ERROR_UNKNOWN)
    FERRY_VK_CASE(VK_ERROR_OUT_OF_POOL_MEMORY)
    FERRY_VK_CASE(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    FERRY_VK_CASE(VK_ERROR_FRAGMENTATION)
    FERRY_VK_CASE(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
#undef FERRY_VK_CASE
    default: return nullptr;
  }
}

}  // namespace

std::string vk_describe(VkResult result) {
  const char* name = result_name(result);
  return name != nullptr ? name : "VkResult " + std::to_string(static_cast<int>(result));
}

ErrorCode vk_classify(VkResult result) noexcept {
  switch (result) {
    case VK_ERROR_OUT_OF_HOST_MEMORY:
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return ErrorCode::out_of_memory;
    case VK_ERROR_DEVICE_LOST: return ErrorCode::device_lost;
    case VK_ERROR_LAYER_NOT_PRESENT:
    case VK_ERROR_EXTENSION_NOT_PRESENT:
    case VK_ERROR_FEATURE_NOT_PRESENT:
    case VK_ERROR_INCOMPATIBLE_DRIVER: return ErrorCode::unsupported;
    default: return ErrorCode::backend_error;
  }
}

PFN_vkGetInstanceProcAddr loader_get_instance_proc_addr() noexcept {
  // Opened once and never closed: entry points handed out stay valid for the process.
  static const PFN_vkGetInstanceProcAddr gipa = []() -> PFN_vkGetInstanceProcAddr {
    void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return nullptr;
    return reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
  }();
  return gipa;
}

void VulkanApi::load_instance(VkInstance instance) {
  auto get = [&](const char* name) {
    auto fn = vkGetInstanceProcAddr(instance, name);
    if (fn == nullptr) {
      vk_fail(ErrorCode::unsupported, std::string("the loader does not provide ") + name);
    }
    return fn;
  };
#define FERRY_VK_LOAD(name) name = reinterpret_cast<PFN_##name>(get(#name));
  FERRY_VK_INSTANCE_FUNCTIONS(FERRY_VK_LOAD)
#undef FERRY_VK_LOAD
  vkCreateDebugUtilsMessengerEXT = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
      vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT"));
  vkDestroyDebugUtilsMessengerEXT = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
      vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"));
}

void VulkanApi::load_device(VkDevice device, bool submit2, bool host_import, bool fd_export) {
  VulkanApi api = *this;  // assigned back only when every entry point resolved
  auto get = [&](const char* name) {
    auto fn = api.vkGetDeviceProcAddr(device, name);
    if (fn == nullptr) {
      vk_fail(ErrorCode::unsupported, std::string("the device does not provide ") + name +
                                          " (ferry needs Vulkan 1.2 on instance and device)");
    }
    return fn;
  };
#define FERRY_VK_LOAD(name) api.name = reinterpret_cast<PFN_##name>(get(#name));
  FERRY_VK_DEVICE_FUNCTIONS(FERRY_VK_LOAD)
#undef FERRY_VK_LOAD
  if (submit2) api.vkQueueSubmit2 = reinterpret_cast<PFN_vkQueueSubmit2>(get("vkQueueSubmit2"));
  if (host_import) {
    api.vkGetMemoryHostPointerPropertiesEXT =
        reinterpret_cast<PFN_vkGetMemoryHostPointerPropertiesEXT>(get("vkGetMemoryHostPointerPropertiesEXT"));
  }
  if (fd_export) {
    api.vkGetMemoryFdKHR = reinterpret_cast<PFN_vkGetMemoryFdKHR>(get("vkGetMemoryFdKHR"));
    api.vkGetSemaphoreFdKHR = reinterpret_cast<PFN_vkGetSemaphoreFdKHR>(get("vkGetSemaphoreFdKHR"));
  }
  *this = api;
}

VkInstance create_instance(VulkanApi& vk, const VkDebugUtilsMessengerCreateInfoEXT* messenger) {
  vk.vkGetInstanceProcAddr = loader_get_instance_proc_addr();
  if (vk.vkGetInstanceProcAddr == nullptr) {
    vk_fail(ErrorCode::unsupported, "loader libvulkan.so.1 not found");
  }
  auto global = [&](const char* name) { return vk.vkGetInstanceProcAddr(VK_NULL_HANDLE, name); };
  auto enumerate_version =
      reinterpret_cast<PFN_vkEnumerateInstanceVersion>(global("vkEnumerateInstanceVersion"));
  auto create = reinterpret_cast<PFN_vkCreateInstance>(global("vkCreateInstance"));
  std::uint32_t loader_version = VK_API_VERSION_1_0;
  if (enumerate_version != nullptr) FERRY_VK_CHECK(enumerate_version(&loader_version));
  if (create == nullptr || loader_version < VK_API_VERSION_1_2) {
    vk_fail(ErrorCode::unsupported, "the loader is older than Vulkan 1.2");
  }

  // One instance, made on first use and never destroyed, keeps the drivers loaded for the
  // process. The loader unloads a driver when the last instance that uses it is destroyed,
  // and glibc never returns the static TLS that a driver library takes when it is loaded
  // (NVIDIA's libnvidia-tls does): a process that opens and closes devices some tens of times
  // would then fail to load the driver ("cannot allocate memory in static TLS block",
  // vkCreateInstance: VK_ERROR_INCOMPATIBLE_DRIVER). Later instances reuse the loaded driver.
  // A failure here is not reported: the instance below then fails the same way, with its
  // error checked.
  static const VkInstance resident = [create, loader_version] {
    VkApplicationInfo rapp{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    rapp.pApplicationName = "ferry (resident)";
    rapp.apiVersion = loader_version >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : VK_API_VERSION_1_2;
    VkInstanceCreateInfo rinfo{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    rinfo.pApplicationInfo = &rapp;
    VkInstance instance = VK_NULL_HANDLE;
    return create(&rinfo, nullptr, &instance) == VK_SUCCESS ? instance : VK_NULL_HANDLE;
  }();
  (void)resident;

  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "ferry";
  app.pEngineName = "ferry";
  app.apiVersion = loader_version >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : VK_API_VERSION_1_2;
  VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  info.pApplicationInfo = &app;

  static constexpr const char* kLayer = "VK_LAYER_KHRONOS_validation";
  std::uint32_t layer_version = 0;
  std::vector<const char*> extensions;
  VkValidationFeatureEnableEXT sync_validation =
      VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
  VkValidationFeaturesEXT features{VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
  if (messenger != nullptr) {
    auto enumerate_layers = reinterpret_cast<PFN_vkEnumerateInstanceLayerProperties>(
        global("vkEnumerateInstanceLayerProperties"));
    auto enumerate_extensions = reinterpret_cast<PFN_vkEnumerateInstanceExtensionProperties>(
        global("vkEnumerateInstanceExtensionProperties"));
    std::uint32_t count = 0;
    FERRY_VK_CHECK(enumerate_layers(&count, nullptr));
    std::vector<VkLayerProperties> layers(count);
    FERRY_VK_CHECK(enumerate_layers(&count, layers.data()));
    const auto layer = std::find_if(layers.begin(), layers.end(), [](const VkLayerProperties& l) {
      return std::strcmp(l.layerName, kLayer) == 0;
    });
    if (layer == layers.end()) {
      vk_fail(ErrorCode::unsupported,
              "validation requested but VK_LAYER_KHRONOS_validation is not installed "
              "(package vulkan-validationlayers)");
    }
    layer_version = layer->specVersion;
    // The layer itself provides VK_EXT_debug_utils and VK_EXT_validation_features.
    FERRY_VK_CHECK(enumerate_extensions(kLayer, &count, nullptr));
    std::vector<VkExtensionProperties> offered(count);
    FERRY_VK_CHECK(enumerate_extensions(kLayer, &count, offered.data()));
    auto has = [&](const char* name) {
      return std::any_of(offered.begin(), offered.end(), [&](const VkExtensionProperties& e) {
        return std::strcmp(e.extensionName, name) == 0;
      });
    };
    extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    if (has(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME)) {
      extensions.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
    }
    features.enabledValidationFeatureCount = 1;
    features.pEnabledValidationFeatures = &sync_validation;
    features.pNext = messenger;
    info.pNext = &features;
    info.enabledLayerCount = 1;
    info.ppEnabledLayerNames = &kLayer;
  }
  info.enabledExtensionCount = static_cast<std::uint32_t>(extensions.size());
  info.ppEnabledExtensionNames = extensions.data();

  VkInstance instance = VK_NULL_HANDLE;
  FERRY_VK_CHECK(create(&info, nullptr, &instance));
  vk.instance_version = app.apiVersion;
  vk.validation_layer_version = layer_version;
  try {
    vk.load_instance(instance);
  } catch (...) {
    auto destroy = reinterpret_cast<PFN_vkDestroyInstance>(
        vk.vkGetInstanceProcAddr(instance, "vkDestroyInstance"));
    if (destroy != nullptr) destroy(instance, nullptr);
    throw;
  }
  return instance;
}

std::vector<VkPhysicalDevice> usable_physical_devices(const VulkanApi& vk, VkInstance instance) {
  std::uint32_t count = 0;
  FERRY_VK_CHECK(vk.vkEnumeratePhysicalDevices(instance, &count, nullptr));
  std::vector<VkPhysicalDevice> all(count);
  FERRY_VK_CHECK(vk.vkEnumeratePhysicalDevices(instance, &count, all.data()));
  std::vector<VkPhysicalDevice> usable;
  for (VkPhysicalDevice pd : all) {
    VkPhysicalDeviceProperties props;
    vk.vkGetPhysicalDeviceProperties(pd, &props);
    if (props.apiVersion >= VK_API_VERSION_1_2) usable.push_back(pd);
  }
  return usable;
}

namespace {

// Which ordinals are GPUs, found once with a temporary instance; empty when Vulkan is
// unusable here (no loader, no driver, loader below 1.2).
const std::vector<bool>& census() noexcept {
  static const std::vector<bool> is_gpu = []() noexcept {
    std::vector<bool> result;
    try {
      VulkanApi vk;
      VkInstance instance = create_instance(vk, nullptr);
      try {
        for (VkPhysicalDevice pd : usable_physical_devices(vk, instance)) {
          VkPhysicalDeviceProperties props;
          vk.vkGetPhysicalDeviceProperties(pd, &props);
          result.push_back(props.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU);
        }
      } catch (...) {
        result.clear();
      }
      vk.vkDestroyInstance(instance, nullptr);
    } catch (...) {
      result.clear();
    }
    return result;
  }();
  return is_gpu;
}

}  // namespace

int vulkan_device_count() noexcept { return static_cast<int>(census().size()); }

bool vulkan_device_is_gpu(int ordinal) noexcept {
  const auto& is_gpu = census();
  return ordinal >= 0 && static_cast<std::size_t>(ordinal) < is_gpu.size() && is_gpu[ordinal];
}

}  // namespace ferry::detail
