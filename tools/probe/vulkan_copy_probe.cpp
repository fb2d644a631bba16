// SPDX-License-Identifier: MIT
// ferry-probe-vulkan: an experiment, not part of ferry. It measures raw vkCmdCopyBuffer
// bandwidth host<->device across queue families, queue splits, region / command-buffer /
// submit splits, host memory types (incl. VK_EXT_external_memory_host imports) and device
// memory allocation styles, GPU-timed (vkCmdWriteTimestamp) and host-timed (submit -> fence).
// Self-contained: the loader is dlopen'ed here (VK_NO_PROTOTYPES); ferry itself is not used.
#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
#include <vulkan/vulkan.h>
// Vulkan structs are written `VkFooInfo info{VK_STRUCTURE_TYPE_FOO_INFO};` (sType named, the
// rest zero), which -Wmissing-field-initializers would flag at every one.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include <dlfcn.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "json.hpp"
#include "probe_util.hpp"
#include "write_file.hpp"

using ferry::detail::json_string;
using probe::appendf;
using probe::median;
using probe::parse_list;
using probe::parse_size;
using probe::size_str;

namespace {

// ---------------------------------------------------------------------------------------------
// Entry points
#define PROBE_INSTANCE_FNS(X)                  \
  X(vkDestroyInstance)                         \
  X(vkEnumeratePhysicalDevices)                \
  X(vkGetPhysicalDeviceProperties)             \
  X(vkGetPhysicalDeviceProperties2)            \
  X(vkGetPhysicalDeviceFeatures2)              \
  X(vkGetPhysicalDeviceQueueFamilyProperties)  \
  X(vkGetPhysicalDeviceMemoryProperties)       \
  X(vkEnumerateDeviceExtensionProperties)      \
  X(vkCreateDevice)                            \
  X(vkGetDeviceProcAddr)

#define PROBE_DEVICE_FNS(X)                  \
  X(vkDestroyDevice)                         \
  X(vkGetDeviceQueue)                        \
  X(vkDeviceWaitIdle)                        \
  X(vkCreateBuffer)                          \
  X(vkDestroyBuffer)                         \
  X(vkGetBufferMemoryRequirements2)          \
  X(vkAllocateMemory)                        \
  X(vkFreeMemory)                            \
  X(vkBindBufferMemory)                      \
  X(vkMapMemory)                             \
  X(vkUnmapMemory)                           \
  X(vkInvalidateMappedMemoryRanges)          \
  X(vkFlushMappedMemoryRanges)               \
  X(vkCreateCommandPool)                     \
  X(vkDestroyCommandPool)                    \
  X(vkAllocateCommandBuffers)                \
  X(vkFreeCommandBuffers)                    \
  X(vkBeginCommandBuffer)                    \
  X(vkEndCommandBuffer)                      \
  X(vkCmdCopyBuffer)                         \
  X(vkCmdPipelineBarrier)                    \
  X(vkCmdWriteTimestamp)                     \
  X(vkCreateFence)                           \
  X(vkDestroyFence)                          \
  X(vkResetFences)                           \
  X(vkWaitForFences)                         \
  X(vkQueueSubmit)                           \
  X(vkCreateQueryPool)                       \
  X(vkDestroyQueryPool)                      \
  X(vkResetQueryPool)                        \
  X(vkGetQueryPoolResults)

PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
PFN_vkCreateInstance vkCreateInstance = nullptr;
PFN_vkEnumerateInstanceVersion vkEnumerateInstanceVersion = nullptr;
#define PROBE_DECL(name) PFN_##name name = nullptr;
PROBE_INSTANCE_FNS(PROBE_DECL)
PROBE_DEVICE_FNS(PROBE_DECL)
#undef PROBE_DECL
PFN_vkGetMemoryHostPointerPropertiesEXT vkGetMemoryHostPointerPropertiesEXT = nullptr;

const char* vk_name(VkResult r) {
  switch (r) {
#define C(x) \
  case x: return #x;
    C(VK_SUCCESS) C(VK_NOT_READY) C(VK_TIMEOUT) C(VK_INCOMPLETE) C(VK_ERROR_OUT_OF_HOST_MEMORY)
    C(VK_ERROR_OUT_OF_DEVICE_MEMORY) C(VK_ERROR_INITIALIZATION_FAILED) C(VK_ERROR_DEVICE_LOST)
    C(VK_ERROR_MEMORY_MAP_FAILED) C(VK_ERROR_LAYER_NOT_PRESENT) C(VK_ERROR_EXTENSION_NOT_PRESENT)
    C(VK_ERROR_FEATURE_NOT_PRESENT) C(VK_ERROR_INCOMPATIBLE_DRIVER) C(VK_ERROR_TOO_MANY_OBJECTS)
    C(VK_ERROR_FORMAT_NOT_SUPPORTED) C(VK_ERROR_FRAGMENTED_POOL) C(VK_ERROR_UNKNOWN)
    C(VK_ERROR_OUT_OF_POOL_MEMORY) C(VK_ERROR_INVALID_EXTERNAL_HANDLE) C(VK_ERROR_FRAGMENTATION)
#undef C
    default: return "VkResult(?)";
  }
}

struct VkFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

#define VKC(call)                                                                              \
  do {                                                                                         \
    VkResult probe_r_ = (call);                                                                \
    if (probe_r_ != VK_SUCCESS) {                                                              \
      throw VkFailure(std::string(#call).substr(0, std::string(#call).find('(')) + " failed: " + \
                      vk_name(probe_r_) + " (" + std::to_string(static_cast<int>(probe_r_)) +   \
                      ") at line " + std::to_string(__LINE__));                                \
    }                                                                                          \
  } while (0)

// ---------------------------------------------------------------------------------------------
// Options
struct Options {
  std::vector<std::uint64_t> sizes{16ull << 20, 64ull << 20, 256ull << 20};
  int reps = 10;
  int warmup = 2;
  int device = -1;
  std::string json;
  bool h2d = true, d2h = true;
};

void usage(const char* argv0) {
  std::printf(
      "usage: %s [options]\n"
      "Raw Vulkan host<->device copy bandwidth across queues, splits and memory types.\n"
      "  --sizes LIST   comma-separated sizes, suffix K/M/G (binary); default 16M,64M,256M\n"
      "  --reps N       timed repetitions per variant (median reported); default 10\n"
      "  --warmup N     untimed repetitions per variant first; default 2\n"
      "  --device N     physical device index; default: first discrete GPU, else 0\n"
      "  --dir D        h2d, d2h or both (default both)\n"
      "  --json PATH    also write all results as JSON\n"
      "  --help         this text\n"
      "GB/s = 1e9 bytes/s. gpu = last end timestamp - first start timestamp (vkCmdWriteTimestamp,\n"
      "TOP/BOTTOM_OF_PIPE, x timestampPeriod); host = vkQueueSubmit start -> all fences signalled.\n",
      argv0);
}

Options parse_options(int argc, char** argv) {
  Options o;
  probe::Args args(argc, argv);
  while (args.next()) {
    const std::string& a = args.flag();
    auto next = [&] { return args.value(); };
    if (a == "--help" || a == "-h") {
      usage(args.program());
      std::exit(0);
    } else if (a == "--sizes") {
      o.sizes = parse_list<std::uint64_t>(next(), parse_size);
    } else if (a == "--reps") {
      o.reps = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--warmup") {
      o.warmup = std::max(0, std::atoi(next().c_str()));
    } else if (a == "--device") {
      o.device = std::atoi(next().c_str());
    } else if (a == "--json") {
      o.json = next();
    } else if (a == "--dir") {
      std::string d = next();
      o.h2d = d == "h2d" || d == "both";
      o.d2h = d == "d2h" || d == "both";
      if (!o.h2d && !o.d2h) throw std::runtime_error("--dir: h2d, d2h or both");
    } else {
      throw std::runtime_error("unknown option " + a + " (see --help)");
    }
  }
  return o;
}

std::string queue_flags_str(VkQueueFlags f) {
  std::string s;
  auto add = [&](VkQueueFlags bit, const char* n) {
    if (f & bit) s += s.empty() ? n : std::string("|") + n;
  };
  add(VK_QUEUE_GRAPHICS_BIT, "GRAPHICS");
  add(VK_QUEUE_COMPUTE_BIT, "COMPUTE");
  add(VK_QUEUE_TRANSFER_BIT, "TRANSFER");
  add(VK_QUEUE_SPARSE_BINDING_BIT, "SPARSE");
  add(VK_QUEUE_PROTECTED_BIT, "PROTECTED");
  add(0x20 /*VIDEO_DECODE*/, "VIDEO_DECODE");
  add(0x40 /*VIDEO_ENCODE*/, "VIDEO_ENCODE");
  add(0x100 /*OPTICAL_FLOW*/, "OPTICAL_FLOW");
  return s.empty() ? "0" : s;
}

std::string mem_flags_str(VkMemoryPropertyFlags f) {
  std::string s;
  auto add = [&](VkMemoryPropertyFlags bit, const char* n) {
    if (f & bit) s += s.empty() ? n : std::string("|") + n;
  };
  add(VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, "DEVICE_LOCAL");
  add(VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT, "HOST_VISIBLE");
  add(VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, "HOST_COHERENT");
  add(VK_MEMORY_PROPERTY_HOST_CACHED_BIT, "HOST_CACHED");
  add(VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT, "LAZY");
  add(VK_MEMORY_PROPERTY_PROTECTED_BIT, "PROTECTED");
  return s.empty() ? "0" : s;
}

std::string mem_short(VkMemoryPropertyFlags f) {
  std::string s;
  if (f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) s += "DL";
  if (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) s += s.empty() ? "HV" : "|HV";
  if (f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) s += s.empty() ? "HCo" : "|HCo";
  if (f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) s += s.empty() ? "HCa" : "|HCa";
  return s.empty() ? "0" : s;
}

// ---------------------------------------------------------------------------------------------
// Probe state
struct Family {
  std::uint32_t index = 0;
  VkQueueFamilyProperties props{};
  std::uint32_t created = 0;  // queues created
  std::vector<VkQueue> queues;
  VkCommandPool pool = VK_NULL_HANDLE;
  std::string label;
};

struct Buffer {
  std::string label;        // e.g. "t2 HV|HCo|HCa", "import t2 aligned", "dedicated"
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  std::uint32_t type = 0;
  void* mapped = nullptr;
  void* host_ptr = nullptr;  // imported allocation, freed by free_fn
  std::function<void()> free_fn;
};

struct Result {
  std::string dir, variant, queue, host_mem, dev_mem, skipped;
  std::uint64_t size = 0, bytes = 0;
  int regions = 1, cbs = 1, submits = 1, lanes = 1, repeat = 1;
  bool gpu_timed = false;
  std::vector<double> gpu_ns, host_ns;
  double gpu_med_gbps = 0, gpu_best_gbps = 0, host_med_gbps = 0, vs_base = 0;
};

// One queue's share of a variant: command buffers, each a list of regions, submitted either
// together (one vkQueueSubmit) or each on its own.
struct LaneSpec {
  Family* family = nullptr;
  std::uint32_t queue = 0;
  std::vector<std::vector<VkBufferCopy>> cbs;
  bool separate_submits = false;
  int cmds_per_cb = 1;  // vkCmdCopyBuffer recorded this many times per command buffer
};

class Probe {
 public:
  explicit Probe(Options o) : opt_(std::move(o)) {}
  ~Probe() { teardown(); }
  void run();

 private:
  void load_loader();
  void create_instance();
  void pick_device();
  void print_device();
  void create_device();
  void create_buffers();
  bool make_buffer(Buffer& b, VkDeviceSize size, std::uint32_t type_bits_wanted, bool dedicated,
                   const std::vector<std::uint32_t>& families, void* import_ptr,
                   VkDeviceSize import_size, std::string* why);
  void destroy_buffer(Buffer& b);
  void sanity_check();
  Result measure(const std::string& dir, const std::string& variant, std::uint64_t size,
                 std::vector<LaneSpec> lanes, Buffer& host, Buffer& dev, int repeat);
  void run_direction(bool h2d, std::uint64_t size);
  void print_result(const Result& r);
  void write_json();
  void teardown();

  Options opt_;
  void* lib_ = nullptr;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkPhysicalDevice phys_ = VK_NULL_HANDLE;
  VkPhysicalDeviceProperties props_{};
  VkPhysicalDeviceDriverProperties driver_props_{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDeviceExternalMemoryHostPropertiesEXT ext_host_props_{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
  VkPhysicalDeviceMemoryProperties mem_{};
  std::vector<VkQueueFamilyProperties> qf_;
  bool have_ext_host_ = false;
  bool host_query_reset_ = false;
  VkDevice device_ = VK_NULL_HANDLE;
  std::vector<std::unique_ptr<Family>> families_;  // transfer-capable families only
  Family* transfer_only_ = nullptr;
  Family* compute_ = nullptr;   // COMPUTE without GRAPHICS
  Family* graphics_ = nullptr;
  Family* primary_ = nullptr;
  std::vector<std::uint32_t> family_indices_;
  VkQueryPool query_pool_ = VK_NULL_HANDLE;
  static constexpr std::uint32_t kMaxLanes = 4;

  std::uint64_t max_size_ = 0;
  Buffer dev_;             // DEVICE_LOCAL, concurrent over all families
  Buffer dev_dedicated_;   // same, VkMemoryDedicatedAllocateInfo
  Buffer dev_exclusive_;   // DEVICE_LOCAL, EXCLUSIVE (primary family only)
  Buffer host_base_;       // ferry's choice: HV|HCo preferring HCa avoiding DL, concurrent
  Buffer host_exclusive_;  // same type, EXCLUSIVE
  std::vector<Buffer> host_types_;  // every other HOST_VISIBLE type
  std::vector<Buffer> host_imports_;
  std::vector<std::string> notes_;
  std::vector<Result> results_;
  std::uint32_t base_host_type_ = ~0u, dev_type_ = ~0u;
};

void Probe::load_loader() {
  lib_ = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib_ == nullptr) lib_ = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
  if (lib_ == nullptr) throw std::runtime_error(std::string("dlopen libvulkan.so.1: ") + dlerror());
  vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib_, "vkGetInstanceProcAddr"));
  if (vkGetInstanceProcAddr == nullptr) throw std::runtime_error("no vkGetInstanceProcAddr in the loader");
  vkCreateInstance = reinterpret_cast<PFN_vkCreateInstance>(vkGetInstanceProcAddr(nullptr, "vkCreateInstance"));
  vkEnumerateInstanceVersion = reinterpret_cast<PFN_vkEnumerateInstanceVersion>(
      vkGetInstanceProcAddr(nullptr, "vkEnumerateInstanceVersion"));
  if (vkCreateInstance == nullptr) throw std::runtime_error("the loader has no vkCreateInstance");
}

void Probe::create_instance() {
  std::uint32_t loader_version = VK_API_VERSION_1_0;
  if (vkEnumerateInstanceVersion != nullptr) VKC(vkEnumerateInstanceVersion(&loader_version));
  if (loader_version < VK_API_VERSION_1_2) throw std::runtime_error("the loader is older than Vulkan 1.2");
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "ferry-probe-vulkan";
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &app;
  VKC(vkCreateInstance(&ci, nullptr, &instance_));
#define PROBE_LOAD(name)                                                                   \
  name = reinterpret_cast<PFN_##name>(vkGetInstanceProcAddr(instance_, #name));            \
  if (name == nullptr) throw std::runtime_error("vkGetInstanceProcAddr: no " #name);
  PROBE_INSTANCE_FNS(PROBE_LOAD)
#undef PROBE_LOAD
}

void Probe::pick_device() {
  std::uint32_t n = 0;
  VKC(vkEnumeratePhysicalDevices(instance_, &n, nullptr));
  if (n == 0) throw std::runtime_error("no Vulkan physical device");
  std::vector<VkPhysicalDevice> devs(n);
  VKC(vkEnumeratePhysicalDevices(instance_, &n, devs.data()));
  std::printf("physical devices: %u\n", n);
  int pick = opt_.device;
  for (std::uint32_t i = 0; i < n; ++i) {
    VkPhysicalDeviceProperties p{};
    vkGetPhysicalDeviceProperties(devs[i], &p);
    std::printf("  [%u] %s (type %d)\n", i, p.deviceName, static_cast<int>(p.deviceType));
    if (pick < 0 && p.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU) pick = static_cast<int>(i);
  }
  if (pick < 0) pick = 0;
  if (pick >= static_cast<int>(n)) throw std::runtime_error("--device out of range");
  phys_ = devs[static_cast<std::size_t>(pick)];
  vkGetPhysicalDeviceProperties(phys_, &props_);
  if (props_.apiVersion < VK_API_VERSION_1_2) throw std::runtime_error("the device is older than Vulkan 1.2");

  std::uint32_t ne = 0;
  VKC(vkEnumerateDeviceExtensionProperties(phys_, nullptr, &ne, nullptr));
  std::vector<VkExtensionProperties> exts(ne);
  VKC(vkEnumerateDeviceExtensionProperties(phys_, nullptr, &ne, exts.data()));
  for (auto& e : exts) {
    if (std::strcmp(e.extensionName, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME) == 0) have_ext_host_ = true;
  }
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  p2.pNext = &driver_props_;
  if (have_ext_host_) driver_props_.pNext = &ext_host_props_;
  vkGetPhysicalDeviceProperties2(phys_, &p2);

  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  f2.pNext = &f12;
  vkGetPhysicalDeviceFeatures2(phys_, &f2);
  host_query_reset_ = f12.hostQueryReset == VK_TRUE;

  std::uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nq, nullptr);
  qf_.resize(nq);
  vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nq, qf_.data());
  vkGetPhysicalDeviceMemoryProperties(phys_, &mem_);
}

void Probe::print_device() {
  const std::uint32_t v = props_.driverVersion;
  char drv[64];
  if (props_.vendorID == 0x10DE) {
    std::snprintf(drv, sizeof drv, "%u.%u.%u.%u", (v >> 22) & 0x3ff, (v >> 14) & 0xff, (v >> 6) & 0xff, v & 0x3f);
  } else {
    std::snprintf(drv, sizeof drv, "%u.%u.%u", VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v), VK_API_VERSION_PATCH(v));
  }
  std::printf("\ndevice: %s  vendor 0x%04x device 0x%04x\n", props_.deviceName, props_.vendorID, props_.deviceID);
  std::printf("driver: %s  %s  version %s (raw 0x%08x)  api %u.%u.%u\n", driver_props_.driverName,
              driver_props_.driverInfo, drv, v, VK_API_VERSION_MAJOR(props_.apiVersion),
              VK_API_VERSION_MINOR(props_.apiVersion), VK_API_VERSION_PATCH(props_.apiVersion));
  std::printf("timestampPeriod %.4f ns, timestampComputeAndGraphics %u, hostQueryReset %s\n",
              props_.limits.timestampPeriod, props_.limits.timestampComputeAndGraphics,
              host_query_reset_ ? "yes" : "no");
  std::printf("optimalBufferCopyOffsetAlignment %llu, nonCoherentAtomSize %llu\n",
              static_cast<unsigned long long>(props_.limits.optimalBufferCopyOffsetAlignment),
              static_cast<unsigned long long>(props_.limits.nonCoherentAtomSize));
  if (have_ext_host_) {
    std::printf("VK_EXT_external_memory_host: yes, minImportedHostPointerAlignment %llu\n",
                static_cast<unsigned long long>(ext_host_props_.minImportedHostPointerAlignment));
  } else {
    std::printf("VK_EXT_external_memory_host: not supported\n");
  }
  std::printf("\nqueue families:\n");
  for (std::uint32_t i = 0; i < qf_.size(); ++i) {
    const auto& q = qf_[i];
    std::printf("  family %u: %-40s count %2u  timestampValidBits %2u  minImageTransferGranularity %ux%ux%u\n", i,
                queue_flags_str(q.queueFlags).c_str(), q.queueCount, q.timestampValidBits,
                q.minImageTransferGranularity.width, q.minImageTransferGranularity.height,
                q.minImageTransferGranularity.depth);
  }
  std::printf("\nmemory heaps:\n");
  for (std::uint32_t h = 0; h < mem_.memoryHeapCount; ++h) {
    std::printf("  heap %u: %8.2f GiB  %s\n", h, static_cast<double>(mem_.memoryHeaps[h].size) / (1ull << 30),
                (mem_.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) ? "DEVICE_LOCAL" : "");
  }
  std::printf("memory types:\n");
  for (std::uint32_t t = 0; t < mem_.memoryTypeCount; ++t) {
    std::printf("  type %2u: heap %u  %s\n", t, mem_.memoryTypes[t].heapIndex,
                mem_flags_str(mem_.memoryTypes[t].propertyFlags).c_str());
  }
}

void Probe::create_device() {
  std::vector<VkDeviceQueueCreateInfo> qcis;
  static const float prio[2] = {1.0f, 1.0f};
  for (std::uint32_t i = 0; i < qf_.size(); ++i) {
    const VkQueueFlags f = qf_[i].queueFlags;
    if (!(f & (VK_QUEUE_TRANSFER_BIT | VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT))) continue;
    if (qf_[i].queueCount == 0) continue;
    if (f & VK_QUEUE_PROTECTED_BIT) continue;
    auto fam = std::make_unique<Family>();
    fam->index = i;
    fam->props = qf_[i];
    fam->created = std::min<std::uint32_t>(qf_[i].queueCount, 2);
    const bool video = f & (0x20 | 0x40 | 0x100);
    if (f & VK_QUEUE_GRAPHICS_BIT) {
      fam->label = "graphics";
      if (!graphics_) graphics_ = fam.get();
    } else if (f & VK_QUEUE_COMPUTE_BIT) {
      fam->label = "compute";
      if (!compute_) compute_ = fam.get();
    } else if (!video) {
      fam->label = "transfer";
      if (!transfer_only_) transfer_only_ = fam.get();
    } else {
      fam->label = "video+transfer";
    }
    fam->label = "f" + std::to_string(i) + ":" + fam->label;
    VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    qci.queueFamilyIndex = i;
    qci.queueCount = fam->created;
    qci.pQueuePriorities = prio;
    qcis.push_back(qci);
    family_indices_.push_back(i);
    families_.push_back(std::move(fam));
  }
  if (families_.empty()) throw std::runtime_error("no queue family supports transfers");
  primary_ = transfer_only_ ? transfer_only_ : (compute_ ? compute_ : families_.front().get());

  std::vector<const char*> exts;
  if (have_ext_host_) {
    exts.push_back(VK_KHR_EXTERNAL_MEMORY_EXTENSION_NAME);  // core in 1.1; harmless if listed
    exts.push_back(VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
  }
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  f12.hostQueryReset = host_query_reset_ ? VK_TRUE : VK_FALSE;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.pNext = &f12;
  dci.queueCreateInfoCount = static_cast<std::uint32_t>(qcis.size());
  dci.pQueueCreateInfos = qcis.data();
  dci.enabledExtensionCount = static_cast<std::uint32_t>(exts.size());
  dci.ppEnabledExtensionNames = exts.data();
  VkResult r = vkCreateDevice(phys_, &dci, nullptr, &device_);
  if (r == VK_ERROR_EXTENSION_NOT_PRESENT && have_ext_host_) {
    std::printf("vkCreateDevice with VK_KHR_external_memory failed; retrying with only VK_EXT_external_memory_host\n");
    exts = {VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME};
    dci.enabledExtensionCount = 1;
    dci.ppEnabledExtensionNames = exts.data();
    r = vkCreateDevice(phys_, &dci, nullptr, &device_);
  }
  VKC(r);
#define PROBE_LOAD(name)                                                              \
  name = reinterpret_cast<PFN_##name>(vkGetDeviceProcAddr(device_, #name));           \
  if (name == nullptr) throw std::runtime_error("vkGetDeviceProcAddr: no " #name);
  PROBE_DEVICE_FNS(PROBE_LOAD)
#undef PROBE_LOAD
  if (have_ext_host_) {
    vkGetMemoryHostPointerPropertiesEXT = reinterpret_cast<PFN_vkGetMemoryHostPointerPropertiesEXT>(
        vkGetDeviceProcAddr(device_, "vkGetMemoryHostPointerPropertiesEXT"));
    if (vkGetMemoryHostPointerPropertiesEXT == nullptr) {
      notes_.push_back("vkGetMemoryHostPointerPropertiesEXT missing: host imports skipped");
      have_ext_host_ = false;
    }
  }
  for (auto& fam : families_) {
    fam->queues.resize(fam->created);
    for (std::uint32_t q = 0; q < fam->created; ++q) vkGetDeviceQueue(device_, fam->index, q, &fam->queues[q]);
    VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pci.queueFamilyIndex = fam->index;
    VKC(vkCreateCommandPool(device_, &pci, nullptr, &fam->pool));
  }
  if (host_query_reset_) {
    VkQueryPoolCreateInfo qpi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qpi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qpi.queryCount = 2 * kMaxLanes;
    VKC(vkCreateQueryPool(device_, &qpi, nullptr, &query_pool_));
  } else {
    notes_.push_back("hostQueryReset unsupported: no GPU timestamps (host times only)");
  }
  std::printf("\nprimary queue: %s queue 0 (baseline of every comparison)\n", primary_->label.c_str());
}

// Allocates a buffer of `size` with TRANSFER_SRC|DST usage in the first memory type allowed by
// both the buffer and `type_bits_wanted`. `families` > 1: CONCURRENT sharing.
bool Probe::make_buffer(Buffer& b, VkDeviceSize size, std::uint32_t type_bits_wanted, bool dedicated,
                        const std::vector<std::uint32_t>& families, void* import_ptr,
                        VkDeviceSize import_size, std::string* why) {
  VkExternalMemoryBufferCreateInfo ext{VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO};
  ext.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  if (import_ptr != nullptr) bi.pNext = &ext;
  bi.size = size;
  bi.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  if (families.size() > 1) {
    bi.sharingMode = VK_SHARING_MODE_CONCURRENT;
    bi.queueFamilyIndexCount = static_cast<std::uint32_t>(families.size());
    bi.pQueueFamilyIndices = families.data();
  } else {
    bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  }
  try {
    VKC(vkCreateBuffer(device_, &bi, nullptr, &b.buffer));
    VkBufferMemoryRequirementsInfo2 ri{VK_STRUCTURE_TYPE_BUFFER_MEMORY_REQUIREMENTS_INFO_2};
    ri.buffer = b.buffer;
    VkMemoryDedicatedRequirements dr{VK_STRUCTURE_TYPE_MEMORY_DEDICATED_REQUIREMENTS};
    VkMemoryRequirements2 req{VK_STRUCTURE_TYPE_MEMORY_REQUIREMENTS_2};
    req.pNext = &dr;
    vkGetBufferMemoryRequirements2(device_, &ri, &req);
    const std::uint32_t bits = req.memoryRequirements.memoryTypeBits & type_bits_wanted;
    if (bits == 0) {
      if (why) *why = "no memory type allowed by the buffer matches";
      destroy_buffer(b);
      return false;
    }
    b.type = static_cast<std::uint32_t>(__builtin_ctz(bits));
    if (dr.prefersDedicatedAllocation || dr.requiresDedicatedAllocation) {
      b.label += dr.requiresDedicatedAllocation ? " (driver requires dedicated)" : " (driver prefers dedicated)";
    }
    VkMemoryDedicatedAllocateInfo dai{VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO};
    dai.buffer = b.buffer;
    VkImportMemoryHostPointerInfoEXT imp{VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT};
    imp.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
    imp.pHostPointer = import_ptr;
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.allocationSize = req.memoryRequirements.size;
    ai.memoryTypeIndex = b.type;
    if (import_ptr != nullptr) {
      if (req.memoryRequirements.size > import_size) {
        if (why) *why = "buffer needs " + std::to_string(req.memoryRequirements.size) + " > import size";
        destroy_buffer(b);
        return false;
      }
      ai.allocationSize = import_size;
      ai.pNext = &imp;
    } else if (dedicated) {
      ai.pNext = &dai;
    }
    VKC(vkAllocateMemory(device_, &ai, nullptr, &b.memory));
    VKC(vkBindBufferMemory(device_, b.buffer, b.memory, 0));
    if (mem_.memoryTypes[b.type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) {
      if (import_ptr != nullptr) {
        b.mapped = import_ptr;
      } else {
        VKC(vkMapMemory(device_, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped));
      }
      std::memset(b.mapped, 0x5a, size);  // fault every page in before timing
    }
    return true;
  } catch (const VkFailure& e) {
    if (why) *why = e.what();
    destroy_buffer(b);
    return false;
  }
}

void Probe::destroy_buffer(Buffer& b) {
  if (device_ == VK_NULL_HANDLE) return;
  if (b.buffer) vkDestroyBuffer(device_, b.buffer, nullptr);
  if (b.memory) vkFreeMemory(device_, b.memory, nullptr);
  b.buffer = VK_NULL_HANDLE;
  b.memory = VK_NULL_HANDLE;
  b.mapped = nullptr;
  if (b.free_fn) b.free_fn();
  b.free_fn = nullptr;
}

void Probe::create_buffers() {
  max_size_ = *std::max_element(opt_.sizes.begin(), opt_.sizes.end());
  // Sizes rounded up so every region split stays 256-byte aligned.
  max_size_ = (max_size_ + 4095) & ~4095ull;

  // Memory type choices: ferry's (vulkan_device.cpp make_allocation): host = HV|HCo preferring
  // HCa, avoiding DL; device = DL avoiding HV.
  auto pick = [&](VkMemoryPropertyFlags req, VkMemoryPropertyFlags pref, VkMemoryPropertyFlags avoid) {
    std::uint32_t best = ~0u;
    int score_best = -1;
    for (std::uint32_t t = 0; t < mem_.memoryTypeCount; ++t) {
      const auto f = mem_.memoryTypes[t].propertyFlags;
      if ((f & req) != req) continue;
      const int score = ((f & avoid) == 0 ? 2 : 0) + ((f & pref) == pref ? 1 : 0);
      if (score > score_best) best = t, score_best = score;
    }
    return best;
  };
  base_host_type_ = pick(VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                         VK_MEMORY_PROPERTY_HOST_CACHED_BIT, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  dev_type_ = pick(VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
  if (base_host_type_ == ~0u) throw std::runtime_error("no HOST_VISIBLE|HOST_COHERENT memory type");
  if (dev_type_ == ~0u) throw std::runtime_error("no DEVICE_LOCAL memory type");

  std::string why;
  const std::vector<std::uint32_t> primary_only{primary_->index};
  auto type_label = [&](std::uint32_t t) {
    return "t" + std::to_string(t) + "/h" + std::to_string(mem_.memoryTypes[t].heapIndex) + " " +
           mem_short(mem_.memoryTypes[t].propertyFlags);
  };
  dev_.label = type_label(dev_type_);
  if (!make_buffer(dev_, max_size_, 1u << dev_type_, false, family_indices_, nullptr, 0, &why)) {
    throw std::runtime_error("device buffer: " + why);
  }
  host_base_.label = type_label(base_host_type_);
  if (!make_buffer(host_base_, max_size_, 1u << base_host_type_, false, family_indices_, nullptr, 0, &why)) {
    throw std::runtime_error("host buffer: " + why);
  }
  dev_dedicated_.label = dev_.label + " dedicated";
  if (!make_buffer(dev_dedicated_, max_size_, 1u << dev_type_, true, family_indices_, nullptr, 0, &why)) {
    notes_.push_back("dedicated device allocation skipped: " + why);
  }
  if (family_indices_.size() > 1) {
    dev_exclusive_.label = dev_.label + " exclusive";
    host_exclusive_.label = host_base_.label + " exclusive";
    if (!make_buffer(dev_exclusive_, max_size_, 1u << dev_type_, false, primary_only, nullptr, 0, &why) ||
        !make_buffer(host_exclusive_, max_size_, 1u << base_host_type_, false, primary_only, nullptr, 0, &why)) {
      notes_.push_back("EXCLUSIVE-sharing buffers skipped: " + why);
      destroy_buffer(dev_exclusive_);
      destroy_buffer(host_exclusive_);
    }
  }
  for (std::uint32_t t = 0; t < mem_.memoryTypeCount; ++t) {
    const auto f = mem_.memoryTypes[t].propertyFlags;
    if (!(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) || t == base_host_type_) continue;
    Buffer b;
    b.label = type_label(t);
    const VkDeviceSize heap = mem_.memoryHeaps[mem_.memoryTypes[t].heapIndex].size;
    if (heap < max_size_ + max_size_ / 4) {
      notes_.push_back("host type " + std::to_string(t) + " skipped: heap " + std::to_string(heap >> 20) +
                       " MiB too small for " + size_str(max_size_));
      continue;
    }
    if (make_buffer(b, max_size_, 1u << t, false, family_indices_, nullptr, 0, &why)) {
      host_types_.push_back(std::move(b));
    } else {
      notes_.push_back("host type " + std::to_string(t) + " skipped: " + why);
    }
  }
  if (!have_ext_host_) {
    notes_.push_back("host-pointer imports skipped: VK_EXT_external_memory_host not supported");
  } else {
    const VkDeviceSize align = std::max<VkDeviceSize>(ext_host_props_.minImportedHostPointerAlignment, 4096);
    struct Kind {
      const char* name;
      bool thp;
    };
    for (Kind k : {Kind{"aligned_alloc", false}, Kind{"mmap+THP", true}}) {
      const VkDeviceSize a = k.thp ? std::max<VkDeviceSize>(align, 2ull << 20) : align;
      const VkDeviceSize bytes = (max_size_ + a - 1) / a * a;
      // A fresh host range per buffer: one range is imported once.
      auto alloc = [&](std::function<void()>& free_fn) -> void* {
        void* p = nullptr;
        if (k.thp) {
          // Over-map by one alignment and align the start so THP can back it with 2 MiB pages.
          void* raw = mmap(nullptr, bytes + a, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
          if (raw == MAP_FAILED) return nullptr;
          p = reinterpret_cast<void*>((reinterpret_cast<std::uintptr_t>(raw) + a - 1) / a * a);
          if (madvise(p, bytes, MADV_HUGEPAGE) != 0) notes_.push_back("madvise(MADV_HUGEPAGE) failed (no THP?)");
          free_fn = [raw, len = bytes + a] { munmap(raw, len); };
        } else {
          p = std::aligned_alloc(a, bytes);
          if (p == nullptr) return nullptr;
          free_fn = [p] { std::free(p); };
        }
        std::memset(p, 0x5a, bytes);
        return p;
      };
      std::uint32_t allowed = 0;
      bool first = true;
      for (std::uint32_t t = 0; t < mem_.memoryTypeCount; ++t) {
        if (!first && !(allowed & (1u << t))) continue;
        std::function<void()> free_fn;
        void* p = alloc(free_fn);
        if (p == nullptr) {
          notes_.push_back(std::string("import ") + k.name + ": host allocation failed");
          break;
        }
        VkMemoryHostPointerPropertiesEXT hp{VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
        const VkResult r = vkGetMemoryHostPointerPropertiesEXT(
            device_, VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT, p, &hp);
        if (first) {
          first = false;
          allowed = hp.memoryTypeBits;
          std::printf("import %s (align %llu): vkGetMemoryHostPointerPropertiesEXT %s, memoryTypeBits 0x%x\n",
                      k.name, static_cast<unsigned long long>(a), vk_name(r), hp.memoryTypeBits);
          if (r != VK_SUCCESS || allowed == 0) {
            notes_.push_back(std::string("import ") + k.name + " skipped: vkGetMemoryHostPointerPropertiesEXT " +
                             vk_name(r) + ", memoryTypeBits " + std::to_string(allowed));
            free_fn();
            break;
          }
          if (!(allowed & (1u << t))) {  // t was only the probe; start over at the allowed types
            free_fn();
            t = static_cast<std::uint32_t>(-1);
            continue;
          }
        }
        Buffer b;
        b.label = std::string("import ") + k.name + " " + type_label(t);
        b.free_fn = free_fn;
        if (make_buffer(b, max_size_, 1u << t, false, family_indices_, p, bytes, &why)) {
          host_imports_.push_back(std::move(b));
        } else {
          notes_.push_back(b.label + " skipped: " + why);
        }
        if (k.thp) break;  // THP: the first allowed type only
      }
    }
  }
}

// Round trip through the baseline path: H2D then D2H into another part of the host buffer.
void Probe::sanity_check() {
  const VkDeviceSize n = std::min<VkDeviceSize>(max_size_ / 2, 1u << 20);
  auto* h = static_cast<unsigned char*>(host_base_.mapped);
  for (VkDeviceSize i = 0; i < n; ++i) h[i] = static_cast<unsigned char>(i * 7 + 3);
  std::memset(h + max_size_ / 2, 0, n);
  VkCommandBuffer cb;
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = primary_->pool;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VKC(vkAllocateCommandBuffers(device_, &ai, &cb));
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  VKC(vkBeginCommandBuffer(cb, &bi));
  VkBufferCopy up{0, 0, n};
  vkCmdCopyBuffer(cb, host_base_.buffer, dev_.buffer, 1, &up);
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
  vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
  VkBufferCopy down{0, max_size_ / 2, n};
  vkCmdCopyBuffer(cb, dev_.buffer, host_base_.buffer, 1, &down);
  VKC(vkEndCommandBuffer(cb));
  VkFence fence;
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VKC(vkCreateFence(device_, &fci, nullptr, &fence));
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  VKC(vkQueueSubmit(primary_->queues[0], 1, &si, fence));
  VKC(vkWaitForFences(device_, 1, &fence, VK_TRUE, UINT64_MAX));
  vkDestroyFence(device_, fence, nullptr);
  vkFreeCommandBuffers(device_, primary_->pool, 1, &cb);
  if (std::memcmp(h, h + max_size_ / 2, n) != 0) throw std::runtime_error("sanity round trip: data mismatch");
  std::printf("sanity round trip (%s, %s): ok\n", size_str(n).c_str(), primary_->label.c_str());
}

Result Probe::measure(const std::string& dir, const std::string& variant, std::uint64_t size,
                      std::vector<LaneSpec> lanes, Buffer& host, Buffer& dev, int repeat) {
  Result res;
  res.dir = dir;
  res.variant = variant;
  res.size = size;
  res.bytes = size * static_cast<std::uint64_t>(repeat);
  res.repeat = repeat;
  res.host_mem = host.label;
  res.dev_mem = dev.label;
  res.lanes = static_cast<int>(lanes.size());
  std::string q;
  for (auto& l : lanes) {
    if (!q.empty()) q += "+";
    q += l.family->label + "/q" + std::to_string(l.queue);
  }
  res.queue = q;
  if (lanes.size() > kMaxLanes) throw std::runtime_error("too many lanes");
  std::size_t ncb = 0, nreg = 0;
  for (auto& l : lanes) {
    ncb += l.cbs.size();
    for (auto& c : l.cbs) nreg += c.size();
  }
  res.cbs = static_cast<int>(ncb);
  res.regions = static_cast<int>(nreg);
  res.submits = 0;
  for (auto& l : lanes) res.submits += l.separate_submits ? static_cast<int>(l.cbs.size()) : 1;

  bool gpu = query_pool_ != VK_NULL_HANDLE;
  for (auto& l : lanes) {
    if (l.family->props.timestampValidBits == 0) gpu = false;
  }
  res.gpu_timed = gpu;
  const bool h2d = dir == "h2d";
  const VkBuffer src = h2d ? host.buffer : dev.buffer;
  const VkBuffer dst = h2d ? dev.buffer : host.buffer;

  struct LaneRt {
    std::vector<VkCommandBuffer> cbs;
    VkFence fence = VK_NULL_HANDLE;
    VkQueue queue = VK_NULL_HANDLE;
    VkCommandPool pool = VK_NULL_HANDLE;
    std::uint64_t mask = ~0ull;
    bool separate = false;
  };
  std::vector<LaneRt> rt(lanes.size());
  auto cleanup = [&] {
    for (auto& r : rt) {
      if (!r.cbs.empty()) vkFreeCommandBuffers(device_, r.pool, static_cast<std::uint32_t>(r.cbs.size()), r.cbs.data());
      if (r.fence) vkDestroyFence(device_, r.fence, nullptr);
    }
  };
  try {
    for (std::size_t li = 0; li < lanes.size(); ++li) {
      auto& l = lanes[li];
      auto& r = rt[li];
      r.queue = l.family->queues.at(l.queue);
      r.pool = l.family->pool;
      r.separate = l.separate_submits;
      const std::uint32_t bits = l.family->props.timestampValidBits;
      r.mask = bits >= 64 ? ~0ull : ((1ull << bits) - 1);
      std::vector<VkCommandBuffer> cbs(l.cbs.size());
      VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
      ai.commandPool = r.pool;
      ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
      ai.commandBufferCount = static_cast<std::uint32_t>(cbs.size());
      VKC(vkAllocateCommandBuffers(device_, &ai, cbs.data()));
      r.cbs = cbs;
      for (std::size_t c = 0; c < cbs.size(); ++c) {
        VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
        VKC(vkBeginCommandBuffer(cbs[c], &bi));
        if (gpu && c == 0) {
          vkCmdWriteTimestamp(cbs[c], VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, query_pool_, static_cast<std::uint32_t>(2 * li));
        }
        for (int k = 0; k < l.cmds_per_cb; ++k) {
          vkCmdCopyBuffer(cbs[c], src, dst, static_cast<std::uint32_t>(l.cbs[c].size()), l.cbs[c].data());
        }
        if (gpu && c + 1 == cbs.size()) {
          vkCmdWriteTimestamp(cbs[c], VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, query_pool_,
                              static_cast<std::uint32_t>(2 * li + 1));
        }
        VKC(vkEndCommandBuffer(cbs[c]));
      }
      VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
      VKC(vkCreateFence(device_, &fci, nullptr, &r.fence));
    }
    std::vector<VkFence> fences;
    for (auto& r : rt) fences.push_back(r.fence);
    const std::uint32_t nq = static_cast<std::uint32_t>(2 * lanes.size());
    std::vector<std::uint64_t> ts(nq);
    for (int rep = 0; rep < opt_.warmup + opt_.reps; ++rep) {
      if (gpu) vkResetQueryPool(device_, query_pool_, 0, nq);
      VKC(vkResetFences(device_, static_cast<std::uint32_t>(fences.size()), fences.data()));
      const auto t0 = std::chrono::steady_clock::now();
      for (auto& r : rt) {
        if (r.separate) {
          for (std::size_t c = 0; c < r.cbs.size(); ++c) {
            VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
            si.commandBufferCount = 1;
            si.pCommandBuffers = &r.cbs[c];
            VKC(vkQueueSubmit(r.queue, 1, &si, c + 1 == r.cbs.size() ? r.fence : VK_NULL_HANDLE));
          }
        } else {
          VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
          si.commandBufferCount = static_cast<std::uint32_t>(r.cbs.size());
          si.pCommandBuffers = r.cbs.data();
          VKC(vkQueueSubmit(r.queue, 1, &si, r.fence));
        }
      }
      VKC(vkWaitForFences(device_, static_cast<std::uint32_t>(fences.size()), fences.data(), VK_TRUE, UINT64_MAX));
      const auto t1 = std::chrono::steady_clock::now();
      if (rep < opt_.warmup) continue;
      res.host_ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
      if (gpu) {
        VKC(vkGetQueryPoolResults(device_, query_pool_, 0, nq, nq * sizeof(std::uint64_t), ts.data(),
                                  sizeof(std::uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
        // Relative to lane 0's start, each masked to its family's valid bits.
        const std::uint64_t base = ts[0];
        std::int64_t lo = 0, hi = 0;
        for (std::size_t li = 0; li < lanes.size(); ++li) {
          const std::uint64_t m = rt[li].mask;
          auto rel = [&](std::uint64_t v) {
            std::uint64_t d = (v - base) & m;
            // Values before base wrap to the top of the range: treat as negative.
            if (m != ~0ull && d > m / 2) return static_cast<std::int64_t>(d) - static_cast<std::int64_t>(m) - 1;
            return static_cast<std::int64_t>(d);
          };
          lo = std::min(lo, rel(ts[2 * li]));
          hi = std::max(hi, rel(ts[2 * li + 1]));
        }
        res.gpu_ns.push_back(static_cast<double>(hi - lo) * props_.limits.timestampPeriod);
      }
    }
  } catch (const VkFailure& e) {
    res.skipped = e.what();
  }
  cleanup();
  const double bytes = static_cast<double>(res.bytes);
  if (!res.host_ns.empty()) res.host_med_gbps = bytes / median(res.host_ns);
  if (!res.gpu_ns.empty()) {
    res.gpu_med_gbps = bytes / median(res.gpu_ns);
    res.gpu_best_gbps = bytes / *std::min_element(res.gpu_ns.begin(), res.gpu_ns.end());
  }
  return res;
}

std::vector<VkBufferCopy> split_regions(VkDeviceSize offset, VkDeviceSize size, int n) {
  std::vector<VkBufferCopy> v;
  const VkDeviceSize chunk = (size / static_cast<VkDeviceSize>(n) + 255) & ~255ull;
  for (VkDeviceSize o = 0; o < size; o += chunk) {
    const VkDeviceSize len = std::min(chunk, size - o);
    v.push_back({offset + o, offset + o, len});
  }
  return v;
}

void Probe::run_direction(bool h2d, std::uint64_t size) {
  const std::string dir = h2d ? "h2d" : "d2h";
  const VkBufferCopy whole{0, 0, size};
  auto one = [&](Family* f, std::uint32_t q) {
    LaneSpec l;
    l.family = f;
    l.queue = q;
    l.cbs = {{whole}};
    return std::vector<LaneSpec>{l};
  };
  double base_gpu = 0, base_host = 0;
  auto add = [&](Result r) {
    if (base_host == 0 && r.skipped.empty()) {
      base_gpu = r.gpu_timed ? r.gpu_med_gbps : 0;
      base_host = r.host_med_gbps;
    }
    // GPU-timed against the GPU-timed baseline; otherwise host time against host time.
    if (r.skipped.empty() && r.gpu_timed && base_gpu > 0) r.vs_base = r.gpu_med_gbps / base_gpu;
    else if (r.skipped.empty() && base_host > 0) r.vs_base = r.host_med_gbps / base_host;
    print_result(r);
    results_.push_back(std::move(r));
  };
  auto skip = [&](const std::string& variant, const std::string& why) {
    Result r;
    r.dir = dir;
    r.variant = variant;
    r.size = size;
    r.skipped = why;
    print_result(r);
    results_.push_back(std::move(r));
  };

  // 1. baseline, then every transfer-capable family's queue 0.
  add(measure(dir, "baseline", size, one(primary_, 0), host_base_, dev_, 1));
  for (auto& f : families_) {
    if (f.get() == primary_) continue;
    add(measure(dir, "queue-family", size, one(f.get(), 0), host_base_, dev_, 1));
  }
  // 2. halves across 2 queues.
  if (transfer_only_ && transfer_only_->created >= 2) {
    std::vector<LaneSpec> lanes(2);
    for (std::uint32_t q = 0; q < 2; ++q) {
      lanes[q].family = transfer_only_;
      lanes[q].queue = q;
      const VkDeviceSize half = (size / 2 + 255) & ~255ull;
      lanes[q].cbs = {{q == 0 ? VkBufferCopy{0, 0, half} : VkBufferCopy{half, half, size - half}}};
    }
    add(measure(dir, "split-2queues", size, lanes, host_base_, dev_, 1));
  } else {
    skip("split-2queues", "no transfer-only family with 2 queues");
    // Same two-lane path (two submits, two fences, timestamps merged) on the primary queue alone.
    std::vector<LaneSpec> lanes(2);
    const VkDeviceSize half = (size / 2 + 255) & ~255ull;
    for (std::uint32_t q = 0; q < 2; ++q) {
      lanes[q].family = primary_;
      lanes[q].cbs = {{q == 0 ? VkBufferCopy{0, 0, half} : VkBufferCopy{half, half, size - half}}};
    }
    add(measure(dir, "split-2lanes-1queue", size, lanes, host_base_, dev_, 1));
  }
  // Halves across two families (transfer-only q0 + compute-only q0, or with graphics).
  {
    Family* other = compute_ ? compute_ : graphics_;
    if (other && other != primary_) {
      std::vector<LaneSpec> lanes(2);
      const VkDeviceSize half = (size / 2 + 255) & ~255ull;
      lanes[0].family = primary_;
      lanes[0].cbs = {{VkBufferCopy{0, 0, half}}};
      lanes[1].family = other;
      lanes[1].cbs = {{VkBufferCopy{half, half, size - half}}};
      add(measure(dir, "split-2families", size, lanes, host_base_, dev_, 1));
    } else {
      skip("split-2families", "no second family beside the primary");
    }
  }
  // 3. regions / command buffers / submits on the primary queue.
  for (int n : {4, 16}) {
    auto regs = split_regions(0, size, n);
    LaneSpec l;
    l.family = primary_;
    l.cbs = {regs};
    add(measure(dir, "regions-" + std::to_string(n) + "-1cb", size, {l}, host_base_, dev_, 1));
    l.cbs.clear();
    for (auto& r : regs) l.cbs.push_back({r});
    add(measure(dir, "cbs-" + std::to_string(n) + "-1submit", size, {l}, host_base_, dev_, 1));
    l.separate_submits = true;
    add(measure(dir, "cbs-" + std::to_string(n) + "-nsubmits", size, {l}, host_base_, dev_, 1));
  }
  // Steady state: the same copy 4x in one command buffer (bytes counted 4x).
  {
    LaneSpec l;
    l.family = primary_;
    l.cbs = {{whole}};
    l.cmds_per_cb = 4;  // four vkCmdCopyBuffer commands, no barriers between them
    add(measure(dir, "repeat-4x-1cb", size, {l}, host_base_, dev_, 4));
  }
  // 4. host memory types and imports.
  for (auto& b : host_types_) add(measure(dir, "host-type", size, one(primary_, 0), b, dev_, 1));
  for (auto& b : host_imports_) add(measure(dir, "host-import", size, one(primary_, 0), b, dev_, 1));
  if (host_exclusive_.buffer) {
    add(measure(dir, "exclusive-sharing", size, one(primary_, 0), host_exclusive_, dev_exclusive_, 1));
  }
  // 5. device memory.
  if (dev_dedicated_.buffer) {
    add(measure(dir, "dev-dedicated", size, one(primary_, 0), host_base_, dev_dedicated_, 1));
  } else {
    skip("dev-dedicated", "allocation failed (see notes)");
  }
}

void Probe::print_result(const Result& r) {
  if (!r.skipped.empty()) {
    std::printf("%-4s %5s  %-20s SKIPPED: %s\n", r.dir.c_str(), size_str(r.size).c_str(), r.variant.c_str(),
                r.skipped.c_str());
    std::fflush(stdout);
    return;
  }
  char gpu[64], best[32];
  if (r.gpu_timed) {
    std::snprintf(gpu, sizeof gpu, "%8.2f", r.gpu_med_gbps);
    std::snprintf(best, sizeof best, "%8.2f", r.gpu_best_gbps);
  } else {
    std::snprintf(gpu, sizeof gpu, "%8s", "n/a");
    std::snprintf(best, sizeof best, "%8s", "n/a");
  }
  const double gus = r.gpu_ns.empty() ? 0 : median(r.gpu_ns) / 1e3;
  const double hus = median(r.host_ns) / 1e3;
  std::printf("%-4s %5s  %-20s %-28s %-38s %-24s %3d %3d %3d  %s %s %8.2f  %9.1f %9.1f  %5.3f\n", r.dir.c_str(),
              size_str(r.size).c_str(), r.variant.c_str(), r.queue.c_str(), r.host_mem.c_str(), r.dev_mem.c_str(),
              r.regions, r.cbs, r.submits, gpu, best, r.host_med_gbps, gus, hus, r.vs_base);
  std::fflush(stdout);
}

void Probe::write_json() {
  std::string o;
  appendf(o, "{\n  \"tool\": \"ferry-probe-vulkan\",\n  \"device\": %s,\n  \"vendor_id\": %u,\n",
          json_string(props_.deviceName).c_str(), props_.vendorID);
  appendf(o, "  \"driver_name\": %s,\n  \"driver_info\": %s,\n  \"driver_version_raw\": %u,\n",
          json_string(driver_props_.driverName).c_str(), json_string(driver_props_.driverInfo).c_str(),
          props_.driverVersion);
  appendf(o, "  \"timestamp_period_ns\": %.6f,\n  \"reps\": %d,\n  \"warmup\": %d,\n", props_.limits.timestampPeriod,
          opt_.reps, opt_.warmup);
  appendf(o, "  \"queue_families\": [");
  for (std::size_t i = 0; i < qf_.size(); ++i) {
    appendf(o, "%s\n    {\"index\": %zu, \"flags\": %s, \"count\": %u, \"timestamp_valid_bits\": %u}", i ? "," : "", i,
            json_string(queue_flags_str(qf_[i].queueFlags)).c_str(), qf_[i].queueCount, qf_[i].timestampValidBits);
  }
  appendf(o, "\n  ],\n  \"memory_types\": [");
  for (std::uint32_t t = 0; t < mem_.memoryTypeCount; ++t) {
    appendf(o, "%s\n    {\"index\": %u, \"heap\": %u, \"heap_bytes\": %llu, \"flags\": %s}", t ? "," : "", t,
            mem_.memoryTypes[t].heapIndex,
            static_cast<unsigned long long>(mem_.memoryHeaps[mem_.memoryTypes[t].heapIndex].size),
            json_string(mem_flags_str(mem_.memoryTypes[t].propertyFlags)).c_str());
  }
  appendf(o, "\n  ],\n  \"notes\": [");
  for (std::size_t i = 0; i < notes_.size(); ++i) {
    appendf(o, "%s\n    %s", i ? "," : "", json_string(notes_[i]).c_str());
  }
  appendf(o, "\n  ],\n  \"results\": [");
  for (std::size_t i = 0; i < results_.size(); ++i) {
    const auto& r = results_[i];
    appendf(o,
            "%s\n    {\"dir\": %s, \"size\": %llu, \"bytes\": %llu, \"variant\": %s, \"queue\": %s, "
            "\"host_mem\": %s, \"dev_mem\": %s, \"regions\": %d, \"cbs\": %d, \"submits\": %d, "
            "\"lanes\": %d, \"repeat\": %d, \"gpu_timed\": %s, \"gpu_gbps_median\": %.4f, "
            "\"gpu_gbps_best\": %.4f, \"host_gbps_median\": %.4f, \"vs_baseline\": %.4f, \"skipped\": %s, "
            "\"gpu_ns\": [",
            i ? "," : "", json_string(r.dir).c_str(), static_cast<unsigned long long>(r.size),
            static_cast<unsigned long long>(r.bytes), json_string(r.variant).c_str(), json_string(r.queue).c_str(),
            json_string(r.host_mem).c_str(), json_string(r.dev_mem).c_str(), r.regions, r.cbs, r.submits, r.lanes,
            r.repeat, r.gpu_timed ? "true" : "false", r.gpu_med_gbps, r.gpu_best_gbps, r.host_med_gbps, r.vs_base,
            json_string(r.skipped).c_str());
    for (std::size_t k = 0; k < r.gpu_ns.size(); ++k) appendf(o, "%s%.0f", k ? ", " : "", r.gpu_ns[k]);
    appendf(o, "], \"host_ns\": [");
    for (std::size_t k = 0; k < r.host_ns.size(); ++k) appendf(o, "%s%.0f", k ? ", " : "", r.host_ns[k]);
    appendf(o, "]}");
  }
  appendf(o, "\n  ]\n}\n");
  ferry::detail::write_file("ferry-probe-vulkan --json", o, opt_.json);
  std::printf("\nwrote %s\n", opt_.json.c_str());
}

void Probe::run() {
  load_loader();
  create_instance();
  pick_device();
  print_device();
  create_device();
  create_buffers();
  std::printf("buffers: device %s; host baseline %s (ferry's choice, CONCURRENT over %zu families)\n",
              dev_.label.c_str(), host_base_.label.c_str(), family_indices_.size());
  for (auto& b : host_types_) std::printf("  extra host type: %s\n", b.label.c_str());
  for (auto& b : host_imports_) std::printf("  host import: %s\n", b.label.c_str());
  sanity_check();
  if (!notes_.empty()) {
    std::printf("notes:\n");
    for (auto& n : notes_) std::printf("  - %s\n", n.c_str());
  }
  std::printf("\nreps %d (median), warmup %d; GB/s = 1e9 B/s; vs = gpu-med / baseline gpu-med (host-med / host-med where a row has no timestamps)\n",
              opt_.reps, opt_.warmup);
  std::printf("%-4s %5s  %-20s %-28s %-38s %-24s %3s %3s %3s  %8s %8s %8s  %9s %9s  %5s\n", "dir", "size",
              "variant", "queue", "host mem", "dev mem", "reg", "cbs", "sub", "gpu-med", "gpu-best", "host-med",
              "gpu-us", "host-us", "vs");
  for (int d = 0; d < 2; ++d) {
    const bool h2d = d == 0;
    if ((h2d && !opt_.h2d) || (!h2d && !opt_.d2h)) continue;
    for (auto s : opt_.sizes) {
      run_direction(h2d, s);
      std::printf("\n");
    }
  }
  if (!opt_.json.empty()) write_json();
}

void Probe::teardown() {
  if (device_) {
    vkDeviceWaitIdle(device_);
    destroy_buffer(dev_);
    destroy_buffer(dev_dedicated_);
    destroy_buffer(dev_exclusive_);
    destroy_buffer(host_base_);
    destroy_buffer(host_exclusive_);
    for (auto& b : host_types_) destroy_buffer(b);
    for (auto& b : host_imports_) destroy_buffer(b);
    if (query_pool_) vkDestroyQueryPool(device_, query_pool_, nullptr);
    for (auto& f : families_) {
      if (f->pool) vkDestroyCommandPool(device_, f->pool, nullptr);
    }
    vkDestroyDevice(device_, nullptr);
    device_ = VK_NULL_HANDLE;
  }
  if (instance_) {
    vkDestroyInstance(instance_, nullptr);
    instance_ = VK_NULL_HANDLE;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse_options(argc, argv);
    Probe p(std::move(o));
    p.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry-probe-vulkan: %s\n", e.what());
    return 1;
  }
  return 0;
}
