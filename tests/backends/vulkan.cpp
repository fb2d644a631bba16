// SPDX-License-Identifier: MIT
// The conformance suite on the Vulkan backend, run under VK_LAYER_KHRONOS_validation with
// synchronization validation (meson sets VK_INSTANCE_LAYERS / VK_LAYER_ENABLES). Every case
// fails if the device it opened saw any validation message.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <dlfcn.h>
#include <vulkan/vulkan.h>
// Vulkan structs are written `VkFooInfo info{VK_STRUCTURE_TYPE_FOO_INFO};` (sType named, the
// rest zero), which -Wmissing-field-initializers would flag at every one.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "conformance.hpp"
#include "ferry/vulkan.hpp"
#include "vulkan_foreign_image.hpp"

using namespace ferry;

CONFORMANCE_CASE("vulkan: capabilities describe the queue families") {
  Device dev = conformance::open_device();
  const Capabilities& caps = dev.capabilities();
  CHECK(caps.backend == Backend::vulkan);
  CHECK_FALSE(caps.name.empty());
  CHECK(caps.min_alignment > 0);
  if (caps.separate_queue_families) CHECK(caps.dedicated_transfer_queue);
  if (!caps.separate_queue_families) CHECK_FALSE(caps.ownership_transfer);
  const std::string kind = caps.is_gpu ? " (GPU)" : " (CPU driver)";
  const std::string families =
      caps.separate_queue_families ? "separate transfer family" : "one queue family";
  MESSAGE(caps.name << kind << ": " << families << "; " << caps.notes);
  CHECK(dev.queue(QueueRole::compute).role() == QueueRole::compute);
  CHECK(dev.queue(QueueRole::transfer).role() == QueueRole::transfer);
}

CONFORMANCE_CASE("vulkan: adopting a queue of a family out of range is invalid_argument") {
  Device dev = conformance::open_device();
  NativeQueue bad;
  int not_a_queue = 0;
  bad.handle = &not_a_queue;
  bad.family = 9999;
  conformance::expect_error(ErrorCode::invalid_argument,
                            [&] { (void)dev.adopt_queue(QueueRole::compute, bad); },
                            "adopt_queue(family 9999)");
  NativeQueue null_queue;
  conformance::expect_error(ErrorCode::invalid_argument,
                            [&] { (void)dev.adopt_queue(QueueRole::compute, null_queue); },
                            "adopt_queue(null VkQueue)");
}

namespace {

/// Sets an environment variable for one scope and restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

void expect_override_refused(const char* variable, const char* value) {
  ScopedEnv env(variable, value);
  try {
    (void)Device::open(conformance::options());
    FAIL_CHECK(variable << "=" << value << ": the device opened");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK_MESSAGE(e.message().find(variable) != std::string::npos, e.what());
  }
}

}  // namespace

CONFORMANCE_CASE("vulkan: queue-family overrides choose the families; a family that cannot serve is refused") {
  expect_override_refused("FERRY_VULKAN_COMPUTE_FAMILY", "9999");
  expect_override_refused("FERRY_VULKAN_TRANSFER_FAMILY", "9999");
  expect_override_refused("FERRY_VULKAN_TRANSFER_FAMILY", "one");
  expect_override_refused("FERRY_VULKAN_COMPUTE_FAMILY", "-1");
  // Family 0 has compute and transfer on every driver ferry meets (graphics/compute families
  // support transfer): both roles on one family, so no ownership transfers; data intact.
  ScopedEnv compute("FERRY_VULKAN_COMPUTE_FAMILY", "0");
  ScopedEnv transfer("FERRY_VULKAN_TRANSFER_FAMILY", "0");
  Device dev = conformance::open_device();
  CHECK_FALSE(dev.capabilities().separate_queue_families);
  CHECK_FALSE(dev.capabilities().ownership_transfer);
  Transfer xfer(dev);
  conformance::check_round_trip(dev, xfer, (1u << 20) + 7);
  CHECK(dev.validation_messages() == 0);
}

namespace {

// Counts what ferry's own messenger counts: validation and performance messages and errors.
VKAPI_ATTR VkBool32 VKAPI_CALL count_engine_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                    VkDebugUtilsMessageTypeFlagsEXT types,
                                                    const VkDebugUtilsMessengerCallbackDataEXT* data,
                                                    void* user) {
  const bool counted = (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) ||
                       (types & (VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                                 VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT));
  if (counted) static_cast<std::atomic<std::uint64_t>*>(user)->fetch_add(1);
  std::fprintf(stderr, "engine-vulkan-validation%s: %s\n", counted ? "" : " (general, not counted)",
               data != nullptr && data->pMessage != nullptr ? data->pMessage : "(no message)");
  return VK_FALSE;
}

/// A stand-in for an engine: its own instance (with a validation messenger of its own, since
/// ferry adds none to an adopted device), physical device 0, and a VkDevice with timeline
/// semaphores (and synchronization2 where the device has Vulkan 1.3) and one queue of the first
/// compute family. Destroys its objects itself, after ferry is done with them.
struct Engine {
  void* lib = nullptr;
  PFN_vkGetInstanceProcAddr gipa = nullptr;
  VkInstance instance = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  std::uint32_t family = 0;
  std::uint32_t family_count = 0;
  std::uint32_t queue_count = 0;
  std::atomic<std::uint64_t> messages{0};
  PFN_vkDestroyDebugUtilsMessengerEXT destroy_messenger = nullptr;
  PFN_vkDestroyInstance destroy_instance = nullptr;
  PFN_vkDestroyDevice destroy_device = nullptr;
  PFN_vkDeviceWaitIdle device_wait_idle = nullptr;

  template <class F>
  F instance_fn(const char* name) const {
    return reinterpret_cast<F>(gipa(instance, name));
  }

  Engine() {
    lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    REQUIRE(lib != nullptr);
    gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
    REQUIRE(static_cast<bool>(gipa));
    std::uint32_t loader_version = VK_API_VERSION_1_0;
    if (auto version = instance_fn<PFN_vkEnumerateInstanceVersion>("vkEnumerateInstanceVersion")) {
      REQUIRE(version(&loader_version) == VK_SUCCESS);
    }
    REQUIRE(loader_version >= VK_API_VERSION_1_2);
    const std::uint32_t api = loader_version >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : VK_API_VERSION_1_2;

    VkDebugUtilsMessengerCreateInfoEXT mi{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                         VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    mi.pfnUserCallback = &count_engine_message;
    mi.pUserData = &messages;
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "ferry-conformance-engine";
    app.apiVersion = api;
    const char* extensions[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME};
    VkInstanceCreateInfo ii{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, &mi};
    ii.pApplicationInfo = &app;
    ii.enabledExtensionCount = 1;
    ii.ppEnabledExtensionNames = extensions;
    auto create_instance = instance_fn<PFN_vkCreateInstance>("vkCreateInstance");
    REQUIRE(create_instance(&ii, nullptr, &instance) == VK_SUCCESS);
    destroy_instance = instance_fn<PFN_vkDestroyInstance>("vkDestroyInstance");
    destroy_messenger = instance_fn<PFN_vkDestroyDebugUtilsMessengerEXT>("vkDestroyDebugUtilsMessengerEXT");
    auto create_messenger = instance_fn<PFN_vkCreateDebugUtilsMessengerEXT>("vkCreateDebugUtilsMessengerEXT");
    REQUIRE(static_cast<bool>(create_messenger));
    REQUIRE(create_messenger(instance, &mi, nullptr, &messenger) == VK_SUCCESS);

    auto enumerate = instance_fn<PFN_vkEnumeratePhysicalDevices>("vkEnumeratePhysicalDevices");
    std::uint32_t count = 0;
    REQUIRE(enumerate(instance, &count, nullptr) == VK_SUCCESS);
    REQUIRE(count > 0);
    std::vector<VkPhysicalDevice> all(count);
    REQUIRE(enumerate(instance, &count, all.data()) >= VK_SUCCESS);
    physical = all[0];

    VkPhysicalDeviceProperties props;
    instance_fn<PFN_vkGetPhysicalDeviceProperties>("vkGetPhysicalDeviceProperties")(physical, &props);
    REQUIRE(props.apiVersion >= VK_API_VERSION_1_2);
    const bool api13 = api >= VK_API_VERSION_1_3 && props.apiVersion >= VK_API_VERSION_1_3;
    auto get_families = instance_fn<PFN_vkGetPhysicalDeviceQueueFamilyProperties>(
        "vkGetPhysicalDeviceQueueFamilyProperties");
    get_families(physical, &family_count, nullptr);
    std::vector<VkQueueFamilyProperties> families(family_count);
    get_families(physical, &family_count, families.data());
    family = family_count;
    for (std::uint32_t f = 0; f < family_count && family == family_count; ++f) {
      if ((families[f].queueFlags & VK_QUEUE_COMPUTE_BIT) && families[f].queueCount > 0) family = f;
    }
    REQUIRE(family < family_count);
    queue_count = families[family].queueCount;

    VkPhysicalDeviceVulkan13Features s13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
    VkPhysicalDeviceVulkan12Features s12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    if (api13) s12.pNext = &s13;
    VkPhysicalDeviceFeatures2 supported{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &s12};
    instance_fn<PFN_vkGetPhysicalDeviceFeatures2>("vkGetPhysicalDeviceFeatures2")(physical, &supported);
    REQUIRE(s12.timelineSemaphore == VK_TRUE);

    const float priority = 1.0F;
    VkDeviceQueueCreateInfo qi{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    qi.queueFamilyIndex = family;
    qi.queueCount = 1;
    qi.pQueuePriorities = &priority;
    VkPhysicalDeviceVulkan13Features f13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
    f13.synchronization2 = VK_TRUE;
    VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    f12.timelineSemaphore = VK_TRUE;
    if (api13 && s13.synchronization2 == VK_TRUE) f12.pNext = &f13;
    VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, &f12};
    di.queueCreateInfoCount = 1;
    di.pQueueCreateInfos = &qi;
    auto create_device = instance_fn<PFN_vkCreateDevice>("vkCreateDevice");
    REQUIRE(create_device(physical, &di, nullptr, &device) == VK_SUCCESS);
    auto gdpa = instance_fn<PFN_vkGetDeviceProcAddr>("vkGetDeviceProcAddr");
    destroy_device = reinterpret_cast<PFN_vkDestroyDevice>(gdpa(device, "vkDestroyDevice"));
    device_wait_idle = reinterpret_cast<PFN_vkDeviceWaitIdle>(gdpa(device, "vkDeviceWaitIdle"));
    REQUIRE(static_cast<bool>(destroy_device));
    REQUIRE(static_cast<bool>(device_wait_idle));
  }

  /// Adoption of the engine's one queue for both roles.
  [[nodiscard]] vulkan::AdoptInfo adopt_info(std::mutex* submit_mutex = nullptr) const {
    vulkan::AdoptInfo info;
    info.instance = instance;
    info.physical_device = physical;
    info.device = device;
    info.compute_family = family;
    info.compute_index = 0;
    info.transfer_family = family;
    info.transfer_index = 0;
    info.get_instance_proc_addr = gipa;
    info.submit_mutex = submit_mutex;
    return info;
  }

  ~Engine() {
    if (device != VK_NULL_HANDLE) destroy_device(device, nullptr);
    if (messenger != VK_NULL_HANDLE) destroy_messenger(instance, messenger, nullptr);
    if (instance != VK_NULL_HANDLE) destroy_instance(instance, nullptr);
    if (lib != nullptr) dlclose(lib);
  }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
};

}  // namespace

CONFORMANCE_CASE("vulkan: adopt_device wraps an engine's device and leaves it to the engine") {
  Engine engine;
  std::mutex submit_mutex;  // the engine's queue lock, shared with ferry
  {
    Device dev = vulkan::adopt_device(engine.adopt_info(&submit_mutex));
    REQUIRE(dev.is_open());
    CHECK(dev.backend() == Backend::vulkan);
    const Capabilities& caps = dev.capabilities();
    CHECK(caps.backend == Backend::vulkan);
    CHECK(caps.synthetic_compute);
    CHECK_FALSE(caps.separate_queue_families);
    CHECK(caps.notes.find("adopted") != std::string::npos);
    MESSAGE("adopted " << caps.name << ": " << caps.notes);
    {
      Transfer xfer(dev);
      // upload -> run_synthetic_compute -> download, bytes compared
      conformance::check_round_trip(dev, xfer, 256 * 1024 + 7);
    }
    conformance::finish_device(dev);  // pool invariants, then close
    CHECK_FALSE(dev.is_open());
  }
  // ferry destroyed nothing of the engine's: its device still works, and it destroys it itself.
  {
    std::lock_guard lock(submit_mutex);
    CHECK(engine.device_wait_idle(engine.device) == VK_SUCCESS);
  }
  CHECK_MESSAGE(engine.messages.load() == 0,
                engine.messages.load() << " Vulkan validation messages on the engine's instance (see stderr)");
}

CONFORMANCE_CASE("vulkan: adopt_device refuses handles and queues that do not fit") {
  Engine engine;
  const vulkan::AdoptInfo good = engine.adopt_info();
  auto adopt = [](const vulkan::AdoptInfo& info) { (void)vulkan::adopt_device(info); };
  using conformance::expect_error;

  expect_error(ErrorCode::invalid_argument, [&] { adopt(vulkan::AdoptInfo{}); }, "adopt_device(all null)");
  vulkan::AdoptInfo bad = good;
  bad.device = VK_NULL_HANDLE;
  expect_error(ErrorCode::invalid_argument, [&] { adopt(bad); }, "adopt_device(null device)");
  bad = good;
  bad.physical_device = VK_NULL_HANDLE;
  expect_error(ErrorCode::invalid_argument, [&] { adopt(bad); }, "adopt_device(null physical device)");
  bad = good;
  bad.instance = VK_NULL_HANDLE;
  expect_error(ErrorCode::invalid_argument, [&] { adopt(bad); }, "adopt_device(null instance)");

  {
    // A physical device of another instance (a valid handle, just not this instance's).
    Engine other;
    bad = good;
    bad.physical_device = other.physical;
    if (other.physical != engine.physical) {
      expect_error(ErrorCode::invalid_argument, [&] { adopt(bad); },
                   "adopt_device(physical device of another instance)");
    }
    CHECK(other.messages.load() == 0);
  }

  bad = good;
  bad.compute_family = engine.family_count;
  expect_error(ErrorCode::invalid_argument, [&] { adopt(bad); }, "adopt_device(compute family out of range)");
  bad = good;
  bad.transfer_family = engine.family_count + 7;
  expect_error(ErrorCode::invalid_argument, [&] { adopt(bad); }, "adopt_device(transfer family out of range)");
  bad = good;
  bad.compute_index = engine.queue_count;
  expect_error(ErrorCode::invalid_argument, [&] { adopt(bad); }, "adopt_device(compute index out of range)");
  bad = good;
  bad.transfer_index = engine.queue_count;
  expect_error(ErrorCode::invalid_argument, [&] { adopt(bad); }, "adopt_device(transfer index out of range)");

  // The error names adopt_device and the caller's line.
  bad = good;
  bad.compute_index = engine.queue_count;
  const auto here = std::source_location::current();
  try {
    (void)vulkan::adopt_device(bad, here);
    FAIL_CHECK("adopt_device accepted a queue index out of range");
  } catch (const Error& e) {
    CHECK(e.message().starts_with("vulkan::adopt_device: "));
    CHECK(e.where().line() == here.line());
    CHECK(std::string(e.where().file_name()) == here.file_name());
  }

  // Refused adoptions touched nothing: the engine's device still adopts and works.
  {
    Device dev = vulkan::adopt_device(good);
    Transfer xfer(dev);
    conformance::check_round_trip(dev, xfer);
    conformance::finish_device(dev);
  }
  CHECK(engine.device_wait_idle(engine.device) == VK_SUCCESS);
  CHECK_MESSAGE(engine.messages.load() == 0,
                engine.messages.load() << " Vulkan validation messages on the engine's instance (see stderr)");
}

namespace {

/// Whether the Vulkan loader can see VK_LAYER_KHRONOS_validation (asked through the loader
/// itself, so every layer search path counts).
bool validation_layer_present() {
  void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return false;
  auto enumerate = reinterpret_cast<PFN_vkEnumerateInstanceLayerProperties>(
      dlsym(lib, "vkEnumerateInstanceLayerProperties"));
  bool found = false;
  std::uint32_t count = 0;
  if (enumerate != nullptr && enumerate(&count, nullptr) == VK_SUCCESS) {
    std::vector<VkLayerProperties> layers(count);
    if (enumerate(&count, layers.data()) == VK_SUCCESS) {
      for (const VkLayerProperties& l : layers) {
        found = found || std::strcmp(l.layerName, "VK_LAYER_KHRONOS_validation") == 0;
      }
    }
  }
  dlclose(lib);
  return found;
}

}  // namespace

namespace {

/// The engine's own VkBuffer on ferry's VkDevice, as an allocator such as VMA would make it: a
/// buffer larger than the range, bound to memory of its own, the range 256 bytes in (a
/// sub-allocation's offset). Host-visible memory when the device has a device-local type that
/// is (lavapipe: all memory), so the case can look at it as the engine would; else device-local.
std::unique_ptr<conformance::ForeignMemory> allocate_foreign(Device& dev, std::uint64_t bytes) {
  const PFN_vkGetInstanceProcAddr gipa = conformance::vulkan_loader();
  const vulkan::NativeHandles h = vulkan::native_handles(dev);
  auto gdpa = reinterpret_cast<PFN_vkGetDeviceProcAddr>(gipa(h.instance, "vkGetDeviceProcAddr"));
  auto memory_properties = reinterpret_cast<PFN_vkGetPhysicalDeviceMemoryProperties>(
      gipa(h.instance, "vkGetPhysicalDeviceMemoryProperties"));
  REQUIRE((gdpa != nullptr && memory_properties != nullptr));
  auto create_buffer = reinterpret_cast<PFN_vkCreateBuffer>(gdpa(h.device, "vkCreateBuffer"));
  auto destroy_buffer = reinterpret_cast<PFN_vkDestroyBuffer>(gdpa(h.device, "vkDestroyBuffer"));
  auto requirements = reinterpret_cast<PFN_vkGetBufferMemoryRequirements>(gdpa(h.device, "vkGetBufferMemoryRequirements"));
  auto allocate = reinterpret_cast<PFN_vkAllocateMemory>(gdpa(h.device, "vkAllocateMemory"));
  auto free_memory = reinterpret_cast<PFN_vkFreeMemory>(gdpa(h.device, "vkFreeMemory"));
  auto bind = reinterpret_cast<PFN_vkBindBufferMemory>(gdpa(h.device, "vkBindBufferMemory"));
  auto map = reinterpret_cast<PFN_vkMapMemory>(gdpa(h.device, "vkMapMemory"));
  REQUIRE((create_buffer && destroy_buffer && requirements && allocate && free_memory && bind && map));

  constexpr VkDeviceSize kOffset = 256;
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = kOffset + (bytes + 255) / 256 * 256;
  bi.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkBuffer buffer = VK_NULL_HANDLE;
  REQUIRE(create_buffer(h.device, &bi, nullptr, &buffer) == VK_SUCCESS);
  VkMemoryRequirements req{};
  requirements(h.device, buffer, &req);
  VkPhysicalDeviceMemoryProperties props{};
  memory_properties(h.physical_device, &props);
  constexpr VkMemoryPropertyFlags kLocal = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  constexpr VkMemoryPropertyFlags kMapped = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  std::uint32_t type = ~0u;
  for (const VkMemoryPropertyFlags want : {kLocal | kMapped, kLocal}) {
    for (std::uint32_t t = 0; t < props.memoryTypeCount && type == ~0u; ++t) {
      if ((req.memoryTypeBits & (1u << t)) && (props.memoryTypes[t].propertyFlags & want) == want) type = t;
    }
    if (type != ~0u) break;
  }
  REQUIRE(type != ~0u);
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = type;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  REQUIRE(allocate(h.device, &ai, nullptr, &memory) == VK_SUCCESS);
  REQUIRE(bind(h.device, buffer, memory, 0) == VK_SUCCESS);
  auto m = std::make_unique<conformance::ForeignMemory>();
  if ((props.memoryTypes[type].propertyFlags & kMapped) == kMapped) {
    void* p = nullptr;
    REQUIRE(map(h.device, memory, 0, VK_WHOLE_SIZE, 0, &p) == VK_SUCCESS);
    m->host = static_cast<std::byte*>(p) + kOffset;
  }
  m->native = vulkan::native_buffer(buffer, kOffset, bi.size, MemorySharing::exclusive);
  m->size = bi.size - kOffset;
  const VkDevice device = h.device;
  m->free = [=] {
    destroy_buffer(device, buffer, nullptr);
    free_memory(device, memory, nullptr);  // unmaps
  };
  return m;
}

/// The engine's own VkImage on ferry's VkDevice (vulkan_foreign_image.hpp), not exportable.
std::unique_ptr<conformance::ForeignImage> allocate_image(Device& dev, const ImageDesc& desc, std::string& why_not) {
  return conformance::foreign_vulkan_image(dev, desc, /*exportable=*/false, why_not);
}

}  // namespace

namespace {

/// The engine's side of `vulkan::engine_acquire`: one command buffer on ferry's compute queue,
/// recorded by `record` (given the buffer and a lookup of device functions), submitted with
/// the wait ferry handed out under ferry's submit lock; then a host wait on a fence.
template <class Record>
void engine_submit(Device& dev, VkSemaphore semaphore, std::uint64_t value, Record record) {
  const PFN_vkGetInstanceProcAddr gipa = conformance::vulkan_loader();
  const vulkan::NativeHandles h = vulkan::native_handles(dev);
  auto gdpa = reinterpret_cast<PFN_vkGetDeviceProcAddr>(gipa(h.instance, "vkGetDeviceProcAddr"));
  REQUIRE((gdpa != nullptr && h.compute_queue != VK_NULL_HANDLE && h.submit_mutex != nullptr));
  const VkDevice d = h.device;
  auto fn = [&](const char* name) {
    auto f = gdpa(d, name);
    REQUIRE_MESSAGE((f != nullptr), name);
    return f;
  };
  auto create_pool = reinterpret_cast<PFN_vkCreateCommandPool>(fn("vkCreateCommandPool"));
  auto destroy_pool = reinterpret_cast<PFN_vkDestroyCommandPool>(fn("vkDestroyCommandPool"));
  auto allocate = reinterpret_cast<PFN_vkAllocateCommandBuffers>(fn("vkAllocateCommandBuffers"));
  auto begin = reinterpret_cast<PFN_vkBeginCommandBuffer>(fn("vkBeginCommandBuffer"));
  auto end = reinterpret_cast<PFN_vkEndCommandBuffer>(fn("vkEndCommandBuffer"));
  auto create_fence = reinterpret_cast<PFN_vkCreateFence>(fn("vkCreateFence"));
  auto destroy_fence = reinterpret_cast<PFN_vkDestroyFence>(fn("vkDestroyFence"));
  auto wait_fences = reinterpret_cast<PFN_vkWaitForFences>(fn("vkWaitForFences"));
  auto submit1 = reinterpret_cast<PFN_vkQueueSubmit>(fn("vkQueueSubmit"));

  VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pi.queueFamilyIndex = h.compute_family;
  VkCommandPool pool = VK_NULL_HANDLE;
  REQUIRE(create_pool(d, &pi, nullptr, &pool) == VK_SUCCESS);
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = pool;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  REQUIRE(allocate(d, &ai, &cmd) == VK_SUCCESS);
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  REQUIRE(begin(cmd, &bi) == VK_SUCCESS);
  record(cmd, h, fn);
  REQUIRE(end(cmd) == VK_SUCCESS);
  VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VkFence fence = VK_NULL_HANDLE;
  REQUIRE(create_fence(d, &fi, nullptr, &fence) == VK_SUCCESS);
  {
    std::lock_guard lock(*h.submit_mutex);
    if (h.synchronization2) {
      auto submit2 = reinterpret_cast<PFN_vkQueueSubmit2>(fn("vkQueueSubmit2"));
      VkSemaphoreSubmitInfo wait{VK_STRUCTURE_TYPE_SEMAPHORE_SUBMIT_INFO};
      wait.semaphore = semaphore;
      wait.value = value;
      wait.stageMask = VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT;
      VkCommandBufferSubmitInfo ci{VK_STRUCTURE_TYPE_COMMAND_BUFFER_SUBMIT_INFO};
      ci.commandBuffer = cmd;
      VkSubmitInfo2 si{VK_STRUCTURE_TYPE_SUBMIT_INFO_2};
      si.waitSemaphoreInfoCount = 1;
      si.pWaitSemaphoreInfos = &wait;
      si.commandBufferInfoCount = 1;
      si.pCommandBufferInfos = &ci;
      REQUIRE(submit2(h.compute_queue, 1, &si, fence) == VK_SUCCESS);
    } else {
      VkTimelineSemaphoreSubmitInfo ti{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
      ti.waitSemaphoreValueCount = 1;
      ti.pWaitSemaphoreValues = &value;
      const VkPipelineStageFlags stage = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
      VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO, &ti};
      si.waitSemaphoreCount = 1;
      si.pWaitSemaphores = &semaphore;
      si.pWaitDstStageMask = &stage;
      si.commandBufferCount = 1;
      si.pCommandBuffers = &cmd;
      REQUIRE(submit1(h.compute_queue, 1, &si, fence) == VK_SUCCESS);
    }
  }
  CHECK(wait_fences(d, 1, &fence, VK_TRUE, 30'000'000'000ull) == VK_SUCCESS);
  destroy_fence(d, fence, nullptr);
  destroy_pool(d, pool, nullptr);
}

/// Records `acquire`'s barrier (synchronization2 where the device has it, else its Vulkan 1.0
/// form) when the engine owes it.
template <class Acquire, class Fn>
void record_acquire(VkCommandBuffer cmd, const vulkan::NativeHandles& h, Fn& fn, const Acquire& acquire) {
  if (!acquire.barrier_needed) return;
  if (h.synchronization2) {
    auto barrier2 = reinterpret_cast<PFN_vkCmdPipelineBarrier2>(fn("vkCmdPipelineBarrier2"));
    VkDependencyInfo dep{VK_STRUCTURE_TYPE_DEPENDENCY_INFO};
    if constexpr (std::is_same_v<Acquire, vulkan::EngineAcquire>) {
      dep.bufferMemoryBarrierCount = 1;
      dep.pBufferMemoryBarriers = &acquire.barrier;
    } else {
      dep.imageMemoryBarrierCount = 1;
      dep.pImageMemoryBarriers = &acquire.barrier;
    }
    barrier2(cmd, &dep);
    return;
  }
  auto barrier1 = reinterpret_cast<PFN_vkCmdPipelineBarrier>(fn("vkCmdPipelineBarrier"));
  const auto b = acquire.legacy_barrier();
  if constexpr (std::is_same_v<Acquire, vulkan::EngineAcquire>) {
    barrier1(cmd, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 0, nullptr, 1, &b, 0,
             nullptr);
  } else {
    barrier1(cmd, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 0, nullptr, 0, nullptr, 1,
             &b);
  }
}

/// The engine's acquire of a copy into a buffer, then its own copy of `range` of `src` into
/// `dst`, read back on the host.
void engine_copy(Device& dev, const vulkan::EngineAcquire& acquire, const DeviceView& src, VkBuffer dst,
                 VkDeviceSize dst_offset, VkDeviceSize bytes) {
  engine_submit(dev, acquire.semaphore, acquire.value, [&](VkCommandBuffer cmd, const vulkan::NativeHandles& h, auto& fn) {
    record_acquire(cmd, h, fn, acquire);
    auto copy = reinterpret_cast<PFN_vkCmdCopyBuffer>(fn("vkCmdCopyBuffer"));
    auto barrier1 = reinterpret_cast<PFN_vkCmdPipelineBarrier>(fn("vkCmdPipelineBarrier"));
    const VkBufferCopy region{src.offset, dst_offset, bytes};
    copy(cmd, reinterpret_cast<VkBuffer>(src.native), dst, 1, &region);
    VkMemoryBarrier to_host{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    to_host.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    to_host.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    barrier1(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &to_host, 0, nullptr, 0, nullptr);
  });
}

/// The engine's acquire of a copy into an image, alone: the image is then the engine's, in
/// its final layout, on the owner's family.
void engine_image_acquire(Device& dev, const vulkan::EngineImageAcquire& acquire) {
  engine_submit(dev, acquire.semaphore, acquire.value, [&](VkCommandBuffer cmd, const vulkan::NativeHandles& h, auto& fn) {
    record_acquire(cmd, h, fn, acquire);
  });
}

}  // namespace

CONFORMANCE_CASE("vulkan: an engine records the acquire and the wait in its own submission") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  constexpr std::uint64_t n = (1 << 20) + 12;
  auto out = allocate_foreign(dev, n);
  if (out->host == nullptr) {
    MESSAGE("not supported: no host-visible device memory to read the engine's copy back");
    return;
  }
  const VkBuffer out_buffer = reinterpret_cast<VkBuffer>(static_cast<std::uintptr_t>(out->native.vulkan_buffer));
  for (const std::uint32_t batch : {1u, 16u}) {  // submitted at once, and deferred
    CAPTURE(batch);
    Transfer xfer(dev, {.submit_batch = batch, .submit_bytes = 1ull << 40});
    HostBuffer src = dev.host_pool().allocate(n);
    for (std::uint64_t i = 0; i < n; ++i) src.data()[i] = static_cast<std::byte>(i * 13 + batch);
    Upload up = xfer.upload(src, owner, {.owner_waits = false});
    const vulkan::EngineAcquire acquire = vulkan::engine_acquire(up.buffer, up.ready);
    CHECK(acquire.semaphore != VK_NULL_HANDLE);
    CHECK(acquire.value == up.ready.value);
    CHECK(acquire.barrier_needed == dev.capabilities().ownership_transfer);
    if (acquire.barrier_needed) {
      CHECK(acquire.barrier.srcQueueFamilyIndex == vulkan::native_handles(dev).transfer_family);
      CHECK(acquire.barrier.dstQueueFamilyIndex == vulkan::native_handles(dev).compute_family);
      CHECK(acquire.barrier.size >= n);
    }
    // Handed to the engine once: a second call finds the acquire taken.
    CHECK_FALSE(vulkan::engine_acquire(up.buffer, up.ready).barrier_needed);
    engine_copy(dev, acquire, up.buffer.view(), out_buffer, out->native.vulkan_offset, n);
    std::uint64_t wrong = 0;
    for (std::uint64_t i = 0; i < n; ++i) wrong += out->host[i] != src.data()[i];
    CHECK_MESSAGE(wrong == 0, wrong << " bytes differ in the engine's copy");
    // ferry's later use of the buffer treats the range as the owner's: a download is intact.
    HostBuffer back = dev.host_pool().allocate(n);
    xfer.download(up.buffer, back).wait(std::chrono::seconds(30));
    CHECK(std::memcmp(back.data(), src.data(), n) == 0);

    // Bad input: an older point, an empty one, a released buffer.
    const TimelinePoint stale = up.ready;
    (void)xfer.upload_into(src, up.buffer, {.owner_waits = false});
    conformance::expect_error(ErrorCode::invalid_argument, [&] { (void)vulkan::engine_acquire(up.buffer, stale); },
                              "engine_acquire(an older point)");
    conformance::expect_error(ErrorCode::invalid_argument,
                              [&] { (void)vulkan::engine_acquire(up.buffer, TimelinePoint{}); },
                              "engine_acquire(empty point)");
    up.buffer.release();
    conformance::expect_error(ErrorCode::invalid_argument, [&] { (void)vulkan::engine_acquire(up.buffer, stale); },
                              "engine_acquire(released buffer)");
  }
}

CONFORMANCE_CASE("vulkan: an adopted VkImage states its layouts and sharing; engine_acquire hands over its copy") {
  Device dev = conformance::open_device();
  const ImageDesc desc{.format = ImageFormat::rgba8_unorm, .width = 20, .height = 12, .mip_levels = 2};
  std::string why_not;
  auto foreign = allocate_image(dev, desc, why_not);
  REQUIRE_MESSAGE(foreign != nullptr, why_not);
  Queue compute = dev.queue(QueueRole::compute);
  const vulkan::NativeHandles h = vulkan::native_handles(dev);
  VkImage handle = VK_NULL_HANDLE;
  std::memcpy(&handle, &foreign->native.vulkan_image, sizeof(handle));

  // Refused: no final layout, UNDEFINED or PREINITIALIZED as final, a concurrent image whose
  // families leave out the owner's, families listed for an exclusive image, a host field.
  auto refused = [&](const NativeImage& n, const char* what) {
    conformance::expect_error(ErrorCode::invalid_argument, [&] { (void)dev.adopt_image(n, desc, compute); }, what);
  };
  refused(vulkan::native_image(handle, VK_IMAGE_LAYOUT_UNDEFINED, VK_IMAGE_LAYOUT_UNDEFINED), "final layout UNDEFINED");
  refused(vulkan::native_image(handle, VK_IMAGE_LAYOUT_UNDEFINED, VK_IMAGE_LAYOUT_PREINITIALIZED),
          "final layout PREINITIALIZED");
  refused(vulkan::native_image(handle, VK_IMAGE_LAYOUT_UNDEFINED, VK_IMAGE_LAYOUT_GENERAL, MemorySharing::concurrent,
                               {h.compute_family + 1}),
          "concurrent without the owner's family");
  refused(vulkan::native_image(handle, VK_IMAGE_LAYOUT_UNDEFINED, VK_IMAGE_LAYOUT_GENERAL, MemorySharing::exclusive,
                               {h.compute_family}),
          "families for an exclusive image");
  NativeImage with_host = foreign->native;
  with_host.host_pointer = 64;
  refused(with_host, "a host field");
  refused(NativeImage::from_host(foreign.get()), "a host image on Vulkan");
  // A shape the image's memory cannot hold is not the image described.
  conformance::expect_error(ErrorCode::invalid_argument,
                            [&] {
                              (void)dev.adopt_image(foreign->native,
                                                    {.format = ImageFormat::rgba32_float, .width = 4096, .height = 4096},
                                                    compute);
                            },
                            "a shape larger than the image");

  Transfer xfer(dev);
  Image image = dev.adopt_image(foreign->native, desc, compute);
  std::vector<ImageRegion> regions;
  std::uint64_t at = 0;
  for (std::uint32_t l = 0; l < desc.mip_levels; ++l) {
    regions.push_back(ImageRegion::whole_level(desc, l, at));
    at += region_bytes(format_info(desc.format), regions.back());
  }
  HostBuffer src = dev.host_pool().allocate(at);
  conformance::fill_pattern(src.span(), 9);
  const TimelinePoint done = xfer.upload_image(src, image, regions, {.owner_waits = false});
  const vulkan::EngineImageAcquire acquire = vulkan::engine_acquire(image, done);
  CHECK(acquire.semaphore != VK_NULL_HANDLE);
  CHECK(acquire.value == done.value);
  // One queue family (lavapipe) or a family shared with the executor: the executor recorded
  // the whole transition, nothing is left for the engine to record.
  if (h.compute_family == h.transfer_family) CHECK_FALSE(acquire.barrier_needed);
  if (acquire.barrier_needed) {
    CHECK(acquire.barrier.image == handle);
    CHECK(acquire.barrier.oldLayout == VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL);
    CHECK(acquire.barrier.newLayout == VK_IMAGE_LAYOUT_SHADER_READ_ONLY_OPTIMAL);
    CHECK(acquire.barrier.subresourceRange.levelCount == desc.mip_levels);
    const VkImageMemoryBarrier legacy = acquire.legacy_barrier();
    CHECK(legacy.image == handle);
  }
  // The engine records the acquire it was handed (layout plus ownership) in a submission of
  // its own that waits for the copy; ferry then owes the owner nothing for it.
  engine_image_acquire(dev, acquire);
  std::vector<std::byte> back(at);
  xfer.download_image(image, std::span<std::byte>(back), regions);
  CHECK(std::memcmp(back.data(), src.data(), at) == 0);

  conformance::expect_error(ErrorCode::invalid_argument, [&] { (void)vulkan::engine_acquire(image, done); },
                            "engine_acquire(an older point)");
  conformance::expect_error(ErrorCode::invalid_argument, [&] { (void)vulkan::engine_acquire(image, TimelinePoint{}); },
                            "engine_acquire(empty point)");
  image.release().wait(std::chrono::seconds(30));
  conformance::expect_error(ErrorCode::invalid_argument, [&] { (void)vulkan::engine_acquire(image, done); },
                            "engine_acquire(released image)");
}

int main(int argc, char** argv) {
  const Backend backend = Backend::vulkan;
  if (int skip = conformance::presence_check(backend)) return skip;
  // The suite's claim is "clean under validation": without the layer it proves nothing.
  if (!validation_layer_present()) {
    std::printf("FAILED: vulkan: VK_LAYER_KHRONOS_validation is not installed "
                "(Debian: apt-get install vulkan-validationlayers)\n");
    return 1;
  }
  conformance::configure({.backend = backend, .validation = true});
  conformance::set_foreign_allocator(&allocate_foreign);
  conformance::set_image_allocator(&allocate_image);
  // Any validation message seen by a device fails the case that opened it.
  conformance::set_end_of_case_check([](Device& dev) {
    const std::uint64_t before_close = dev.validation_messages();
    CHECK_MESSAGE(before_close == 0, before_close << " Vulkan validation messages (see stderr)");
    dev.close();
    try {
      const std::uint64_t after_close = dev.validation_messages();
      CHECK_MESSAGE(after_close == before_close,
                    (after_close - before_close) << " Vulkan validation messages during close");
    } catch (const Error&) {
      // the count is not readable once the device is closed
    }
  });
  const char* layers = std::getenv("VK_INSTANCE_LAYERS");
  std::printf("conformance: vulkan, VK_INSTANCE_LAYERS=%s\n", layers != nullptr ? layers : "");
  return conformance::run(argc, argv);
}
