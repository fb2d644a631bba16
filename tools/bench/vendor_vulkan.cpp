// SPDX-License-Identifier: MIT
// The raw Vulkan anchor: a hand-written loop doing by hand what an engine would do, beside
// which ferry's Vulkan rows are judged. It runs on its own VkDevice, created on the physical
// device and queue families of the ferry device it is given, and touches no ferry object
// after reading those handles.
//
//  - copies: vkCmdCopyBuffer on the transfer family, from a host-visible (system memory where
//    the device has such a type) staging buffer into a device-local buffer;
//  - queue-family ownership: EXCLUSIVE buffers; when the families differ, the copy releases
//    the batch to the compute family and the compute acquires it. The way back is no
//    ownership transfer: the next copy overwrites the whole batch, whose contents need not
//    survive (the specification's "discard" case);
//  - ordering: two timeline semaphores, the copy waiting for compute's free point of its
//    buffer and compute waiting for the copy;
//  - compute: ferry's synthetic shader (backends/vulkan/synthetic.comp, compiled by glslang as
//    the backend compiles it), one dispatch per pass with a barrier between passes.
//
// The image study's Vulkan side lives here too: the engine's VkImage on ferry's own VkDevice
// (which ferry adopts), and the raw image copy on the loop's own VkDevice, as the anchor's;
// and the contention section's raw references on the loop's own VkDevice: the bulk as one
// vkCmdCopyBuffer on the transfer queue, small copies on another queue beside it.
//
// The Vulkan loader is opened at run time (libvulkan.so.1), as ferry opens it.
#define VK_NO_PROTOTYPES
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench.hpp"  // percentiles()
#include "bench_synthetic_spv.h"
#include "contention_loop.hpp"
#include "ferry/vulkan.hpp"
#include "vendor.hpp"
#include "vulkan_image.hpp"

// Vulkan structures are initialized as `VkX info{VK_STRUCTURE_TYPE_X}`: sType set, every
// other member zero until set. -Wmissing-field-initializers flags each of them, so it is off
// in this file.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace ferry_bench {
namespace {

using clock_type = std::chrono::steady_clock;

double us_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void check(VkResult r, const char* call) {
  if (r != VK_SUCCESS) {
    throw std::runtime_error(std::string("raw Vulkan: ") + call + " failed: VkResult " + std::to_string(r));
  }
}

#define ANCHOR_INSTANCE_FNS(X)                   \
  X(vkGetPhysicalDeviceMemoryProperties)         \
  X(vkGetPhysicalDeviceProperties)               \
  X(vkGetPhysicalDeviceQueueFamilyProperties)    \
  X(vkCreateDevice)                              \
  X(vkGetDeviceProcAddr)

#define ANCHOR_DEVICE_FNS(X)      \
  X(vkDestroyDevice)              \
  X(vkGetDeviceQueue)             \
  X(vkDeviceWaitIdle)             \
  X(vkCreateBuffer)               \
  X(vkDestroyBuffer)              \
  X(vkGetBufferMemoryRequirements) \
  X(vkAllocateMemory)             \
  X(vkFreeMemory)                 \
  X(vkBindBufferMemory)           \
  X(vkDestroyImage)               \
  X(vkMapMemory)                  \
  X(vkCreateCommandPool)          \
  X(vkDestroyCommandPool)         \
  X(vkAllocateCommandBuffers)     \
  X(vkResetCommandBuffer)         \
  X(vkBeginCommandBuffer)         \
  X(vkEndCommandBuffer)           \
  X(vkCmdCopyBuffer)              \
  X(vkCmdCopyBufferToImage)       \
  X(vkCmdCopyImageToBuffer)       \
  X(vkCmdPipelineBarrier)         \
  X(vkCmdBindPipeline)            \
  X(vkCmdBindDescriptorSets)      \
  X(vkCmdPushConstants)           \
  X(vkCmdDispatch)                \
  X(vkQueueSubmit)                \
  X(vkCreateSemaphore)            \
  X(vkDestroySemaphore)           \
  X(vkWaitSemaphores)             \
  X(vkGetSemaphoreCounterValue)   \
  X(vkCreateShaderModule)         \
  X(vkDestroyShaderModule)        \
  X(vkCreateDescriptorSetLayout)  \
  X(vkDestroyDescriptorSetLayout) \
  X(vkCreatePipelineLayout)       \
  X(vkDestroyPipelineLayout)      \
  X(vkCreateComputePipelines)     \
  X(vkDestroyPipeline)            \
  X(vkCreateDescriptorPool)       \
  X(vkDestroyDescriptorPool)      \
  X(vkAllocateDescriptorSets)     \
  X(vkUpdateDescriptorSets)

struct Fns {
#define ANCHOR_DECLARE(name) PFN_##name name = nullptr;
  ANCHOR_INSTANCE_FNS(ANCHOR_DECLARE)
  ANCHOR_DEVICE_FNS(ANCHOR_DECLARE)
#undef ANCHOR_DECLARE
};

PFN_vkGetInstanceProcAddr loader() {
  static const PFN_vkGetInstanceProcAddr gipa = []() -> PFN_vkGetInstanceProcAddr {
    void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return nullptr;
    return reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
  }();
  if (gipa == nullptr) throw std::runtime_error("raw Vulkan anchor: libvulkan.so.1 could not be opened");
  return gipa;
}

struct Buffer {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  void* mapped = nullptr;
};

constexpr VkCommandBufferUsageFlags kReusable = VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT;

/// The layout the study's images are in after every copy (testkit/vulkan_image.hpp).
constexpr VkImageLayout kImageFinalLayout = ferry::testkit::kEngineImageLayout;

/// One VkDevice with a transfer and a compute queue on the ferry device's families, the
/// synthetic pipeline, and the buffers of one batch size. Destroys everything on every path.
class Rig {
 public:
  /// What the rig is for: the staging buffer alone (the image copies), staging and one
  /// device-local batch (the buffer copies), or all the step loops need.
  enum class Use { staging, copies, compute };
  Rig(const ferry::Device& device, std::uint64_t bytes, Use use) : bytes_(bytes) {
    const ferry::vulkan::NativeHandles h = ferry::vulkan::native_handles(device);
    compute_family = h.compute_family;
    transfer_family = h.transfer_family;
    physical_ = h.physical_device;
    instance_ = h.instance;
    const PFN_vkGetInstanceProcAddr gipa = loader();
#define ANCHOR_LOAD_INSTANCE(name)                                                       \
  vk.name = reinterpret_cast<PFN_##name>(gipa(h.instance, #name));                       \
  if (vk.name == nullptr) throw std::runtime_error("raw Vulkan anchor: no " #name);
    ANCHOR_INSTANCE_FNS(ANCHOR_LOAD_INSTANCE)
#undef ANCHOR_LOAD_INSTANCE
    create_device();
    try {
      setup(use);
    } catch (...) {
      destroy();
      throw;
    }
  }
  Rig(const Rig&) = delete;
  Rig& operator=(const Rig&) = delete;
  ~Rig() { destroy(); }

  bool families_differ() const { return compute_family != transfer_family; }

  /// A command buffer of the family's pool, begun for reuse (simultaneous use).
  VkCommandBuffer begin(bool on_transfer) {
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = on_transfer ? transfer_pool_ : compute_pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    check(vk.vkAllocateCommandBuffers(device_, &ai, &cmd), "vkAllocateCommandBuffers");
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = kReusable;
    check(vk.vkBeginCommandBuffer(cmd, &bi), "vkBeginCommandBuffer");
    return cmd;
  }
  void end(VkCommandBuffer cmd) { check(vk.vkEndCommandBuffer(cmd), "vkEndCommandBuffer"); }

  /// A buffer of the rig's beside its own, destroyed with the rig: host-visible (mapped) or
  /// device-local.
  Buffer extra_buffer(std::uint64_t size, bool host_visible) { return make_buffer(size, host_visible); }
  /// Whether the transfer and compute queues are one VkQueue (one family with one queue).
  bool one_queue() const { return transfer == compute; }

  void copy(VkCommandBuffer cmd, VkBuffer src, VkBuffer dst, std::uint64_t size) {
    const VkBufferCopy region{0, 0, size};
    vk.vkCmdCopyBuffer(cmd, src, dst, 1, &region);
  }

  /// Queue-family ownership transfer of `buffer` from the transfer to the compute family: the
  /// release half (on the transfer queue, after the copy) or the acquire half (on compute).
  void ownership(VkCommandBuffer cmd, VkBuffer buffer, bool release) {
    if (!families_differ()) return;
    VkBufferMemoryBarrier b{VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER};
    b.srcAccessMask = release ? VK_ACCESS_TRANSFER_WRITE_BIT : 0;
    b.dstAccessMask = release ? 0 : VK_ACCESS_SHADER_READ_BIT;
    b.srcQueueFamilyIndex = transfer_family;
    b.dstQueueFamilyIndex = compute_family;
    b.buffer = buffer;
    b.offset = 0;
    b.size = VK_WHOLE_SIZE;
    vk.vkCmdPipelineBarrier(cmd, release ? VK_PIPELINE_STAGE_TRANSFER_BIT : VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT,
                            release ? VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT : VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 0,
                            nullptr, 1, &b, 0, nullptr);
  }

  /// `passes` passes of the synthetic shader, `in` -> `out` (whole buffers, in chunks the
  /// device can bind), each after a barrier against the queue's earlier shader writes.
  void passes(VkCommandBuffer cmd, int in, std::uint32_t passes) {
    for (std::uint32_t p = 0; p < passes; ++p) {
      VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
      mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
      vk.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                              VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
      vk.vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline_);
      for (std::size_t c = 0; c < chunks_.size(); ++c) {
        vk.vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, layout_, 0, 1, &sets_[in][c], 0, nullptr);
        const std::uint32_t params[4] = {0, 0, static_cast<std::uint32_t>(chunks_[c].second / 4),
                                         static_cast<std::uint32_t>(chunks_[c].second % 4)};
        vk.vkCmdPushConstants(cmd, layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(params), params);
        const auto groups = static_cast<std::uint32_t>(std::clamp<std::uint64_t>((chunks_[c].second / 4 + 255) / 256, 1, 65535));
        vk.vkCmdDispatch(cmd, groups, 1, 1);
      }
    }
  }

  struct Wait {
    VkSemaphore semaphore = VK_NULL_HANDLE;
    std::uint64_t value = 0;  ///< 0 = no wait
  };
  /// One batch of a vkQueueSubmit: command buffers, at most one wait, one signal.
  struct Batch {
    std::vector<VkCommandBuffer> cmds;
    Wait wait;
    VkSemaphore signal = VK_NULL_HANDLE;
    std::uint64_t signal_value = 0;
  };
  void submit(VkQueue queue, const std::vector<Batch>& batches) {
    std::vector<VkSubmitInfo> infos(batches.size());
    std::vector<VkTimelineSemaphoreSubmitInfo> timeline(batches.size());
    const VkPipelineStageFlags stage = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
    for (std::size_t i = 0; i < batches.size(); ++i) {
      const Batch& b = batches[i];
      VkTimelineSemaphoreSubmitInfo& t = timeline[i];
      t = {VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
      VkSubmitInfo& s = infos[i];
      s = {VK_STRUCTURE_TYPE_SUBMIT_INFO};
      s.pNext = &t;
      s.commandBufferCount = static_cast<std::uint32_t>(b.cmds.size());
      s.pCommandBuffers = b.cmds.data();
      if (b.wait.value > 0) {
        s.waitSemaphoreCount = 1;
        s.pWaitSemaphores = &b.wait.semaphore;
        s.pWaitDstStageMask = &stage;
        t.waitSemaphoreValueCount = 1;
        t.pWaitSemaphoreValues = &b.wait.value;
      }
      if (b.signal != VK_NULL_HANDLE) {
        s.signalSemaphoreCount = 1;
        s.pSignalSemaphores = &b.signal;
        t.signalSemaphoreValueCount = 1;
        t.pSignalSemaphoreValues = &b.signal_value;
      }
    }
    check(vk.vkQueueSubmit(queue, static_cast<std::uint32_t>(infos.size()), infos.data(), VK_NULL_HANDLE),
          "vkQueueSubmit");
  }
  void host_wait(VkSemaphore s, std::uint64_t value) {
    VkSemaphoreWaitInfo wi{VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO};
    wi.semaphoreCount = 1;
    wi.pSemaphores = &s;
    wi.pValues = &value;
    check(vk.vkWaitSemaphores(device_, &wi, 600'000'000'000ull), "vkWaitSemaphores");
  }
  void idle() { check(vk.vkDeviceWaitIdle(device_), "vkDeviceWaitIdle"); }
  std::uint64_t counter(VkSemaphore s) const {
    std::uint64_t value = 0;
    check(vk.vkGetSemaphoreCounterValue(device_, s, &value), "vkGetSemaphoreCounterValue");
    return value;
  }

  /// An engine's image of `desc` on the rig's device (testkit/vulkan_image.hpp), destroyed
  /// with the rig; none, with the reason in `skipped`, when the device cannot make it.
  ferry::testkit::VulkanEngineImage make_image(const ferry::ImageDesc& desc) {
    const ferry::testkit::VulkanImageFns f = ferry::testkit::load_vulkan_image_fns(loader(), instance_, device_);
    ferry::testkit::VulkanEngineImage image = ferry::testkit::make_vulkan_engine_image(f, physical_, device_, desc);
    if (image.skipped.empty()) {
      images_.push_back(image.image);
      memories_.push_back(image.memory);
    }
    return image;
  }

  Fns vk;
  std::uint32_t compute_family = 0, transfer_family = 0;
  VkQueue compute = VK_NULL_HANDLE, transfer = VK_NULL_HANDLE;
  VkSemaphore copied = VK_NULL_HANDLE, freed = VK_NULL_HANDLE;  ///< the copy's and compute's timelines
  Buffer staging;                 ///< host-visible source / destination of every copy
  Buffer batch[2];                ///< device-local batches (two: the pipeline's double buffer)
  Buffer weights, out;            ///< the seed's unrelated input; every pass's output
  enum Input { kBatch0 = 0, kBatch1 = 1, kWeights = 2 };
  bool system_staging = false;    ///< staging in a memory type that is not device-local

 private:
  void create_device() {
    VkPhysicalDeviceProperties props{};
    vk.vkGetPhysicalDeviceProperties(physical_, &props);
    limits_ = props.limits;
    std::uint32_t n = 0;
    vk.vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n, nullptr);
    std::vector<VkQueueFamilyProperties> families(n);
    vk.vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n, families.data());
    const float priorities[2] = {1.0f, 1.0f};
    VkDeviceQueueCreateInfo queues[2] = {{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO},
                                         {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO}};
    std::uint32_t queue_infos = 1;
    bool two_queues_one_family = false;
    queues[0].queueFamilyIndex = compute_family;
    queues[0].queueCount = 1;
    queues[0].pQueuePriorities = priorities;
    if (families_differ()) {
      queues[1].queueFamilyIndex = transfer_family;
      queues[1].queueCount = 1;
      queues[1].pQueuePriorities = priorities;
      queue_infos = 2;
    } else if (compute_family < n && families[compute_family].queueCount >= 2) {
      queues[0].queueCount = 2;
      two_queues_one_family = true;
    }
    VkPhysicalDeviceVulkan12Features v12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    v12.timelineSemaphore = VK_TRUE;
    VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    di.pNext = &v12;
    di.queueCreateInfoCount = queue_infos;
    di.pQueueCreateInfos = queues;
    check(vk.vkCreateDevice(physical_, &di, nullptr, &device_), "vkCreateDevice");
#define ANCHOR_LOAD_DEVICE(name)                                                          \
  vk.name = reinterpret_cast<PFN_##name>(vk.vkGetDeviceProcAddr(device_, #name));         \
  if (vk.name == nullptr) {                                                               \
    destroy();                                                                            \
    throw std::runtime_error("raw Vulkan anchor: no " #name);                             \
  }
    ANCHOR_DEVICE_FNS(ANCHOR_LOAD_DEVICE)
#undef ANCHOR_LOAD_DEVICE
    vk.vkGetDeviceQueue(device_, compute_family, 0, &compute);
    vk.vkGetDeviceQueue(device_, transfer_family, two_queues_one_family ? 1 : 0, &transfer);
  }

  std::uint32_t memory_type(std::uint32_t bits, bool host_visible) {
    VkPhysicalDeviceMemoryProperties mp{};
    vk.vkGetPhysicalDeviceMemoryProperties(physical_, &mp);
    const VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    // Staging: host-visible and coherent, preferring system memory (not device-local), the
    // memory a pinned host buffer is. Device buffers: device-local, preferring one the host
    // cannot map (video memory rather than a BAR window).
    for (int pass = 0; pass < 2; ++pass) {
      for (std::uint32_t i = 0; i < mp.memoryTypeCount; ++i) {
        if ((bits & (1u << i)) == 0) continue;
        const VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;
        const bool local = (f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) != 0;
        const bool mappable = (f & host) == host;
        if (host_visible) {
          if (mappable && (pass == 1 || !local)) {
            system_staging = !local;
            return i;
          }
        } else if (local && (pass == 1 || (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) == 0)) {
          return i;
        }
      }
    }
    throw std::runtime_error(std::string("raw Vulkan anchor: no ") + (host_visible ? "host-visible" : "device-local") +
                             " memory type for a buffer");
  }

  Buffer make_buffer(std::uint64_t size, bool host_visible) {
    Buffer b;
    VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    bi.size = size;
    bi.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT |
               (host_visible ? 0 : VK_BUFFER_USAGE_STORAGE_BUFFER_BIT);
    bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    check(vk.vkCreateBuffer(device_, &bi, nullptr, &b.buffer), "vkCreateBuffer");
    buffers_.push_back(b.buffer);
    VkMemoryRequirements req{};
    vk.vkGetBufferMemoryRequirements(device_, b.buffer, &req);
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.allocationSize = req.size;
    ai.memoryTypeIndex = memory_type(req.memoryTypeBits, host_visible);
    check(vk.vkAllocateMemory(device_, &ai, nullptr, &b.memory), "vkAllocateMemory");
    memories_.push_back(b.memory);
    check(vk.vkBindBufferMemory(device_, b.buffer, b.memory, 0), "vkBindBufferMemory");
    if (host_visible) check(vk.vkMapMemory(device_, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped), "vkMapMemory");
    return b;
  }

  void setup(Use use) {
    for (auto [family, pool] : {std::pair{compute_family, &compute_pool_}, std::pair{transfer_family, &transfer_pool_}}) {
      VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
      pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
      pi.queueFamilyIndex = family;
      check(vk.vkCreateCommandPool(device_, &pi, nullptr, pool), "vkCreateCommandPool");
    }
    for (VkSemaphore* s : {&copied, &freed}) {
      VkSemaphoreTypeCreateInfo ti{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO};
      ti.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
      VkSemaphoreCreateInfo si{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
      si.pNext = &ti;
      check(vk.vkCreateSemaphore(device_, &si, nullptr, s), "vkCreateSemaphore");
    }
    staging = make_buffer(bytes_, true);
    std::memset(staging.mapped, 0x5a, bytes_);
    if (use == Use::staging) return;
    batch[0] = make_buffer(bytes_, false);
    if (use != Use::compute) return;
    batch[1] = make_buffer(bytes_, false);
    weights = make_buffer(bytes_, false);
    out = make_buffer(bytes_, false);

    // Chunks the device can bind as one storage range (offsets aligned for any device).
    const std::uint64_t max_range = std::min<std::uint64_t>(limits_.maxStorageBufferRange, 1ull << 30) & ~0xffull;
    for (std::uint64_t done = 0; done < bytes_; done += max_range) {
      chunks_.push_back({done, std::min(max_range, bytes_ - done)});
    }
    VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    mi.codeSize = sizeof(bench_synthetic_spv);
    mi.pCode = bench_synthetic_spv;
    check(vk.vkCreateShaderModule(device_, &mi, nullptr, &shader_), "vkCreateShaderModule");
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
    check(vk.vkCreateDescriptorSetLayout(device_, &li, nullptr, &set_layout_), "vkCreateDescriptorSetLayout");
    const VkPushConstantRange push{VK_SHADER_STAGE_COMPUTE_BIT, 0, 16};
    VkPipelineLayoutCreateInfo pli{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    pli.setLayoutCount = 1;
    pli.pSetLayouts = &set_layout_;
    pli.pushConstantRangeCount = 1;
    pli.pPushConstantRanges = &push;
    check(vk.vkCreatePipelineLayout(device_, &pli, nullptr, &layout_), "vkCreatePipelineLayout");
    VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    ci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
    ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    ci.stage.module = shader_;
    ci.stage.pName = "main";
    ci.layout = layout_;
    check(vk.vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &ci, nullptr, &pipeline_),
          "vkCreateComputePipelines");

    const auto sets = static_cast<std::uint32_t>(3 * chunks_.size());
    const VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 2 * sets};
    VkDescriptorPoolCreateInfo dpi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    dpi.maxSets = sets;
    dpi.poolSizeCount = 1;
    dpi.pPoolSizes = &size;
    check(vk.vkCreateDescriptorPool(device_, &dpi, nullptr, &descriptors_), "vkCreateDescriptorPool");
    const VkBuffer inputs[3] = {batch[0].buffer, batch[1].buffer, weights.buffer};
    for (int in = 0; in < 3; ++in) {
      for (const auto& [offset, size_bytes] : chunks_) {
        VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
        ai.descriptorPool = descriptors_;
        ai.descriptorSetCount = 1;
        ai.pSetLayouts = &set_layout_;
        VkDescriptorSet set = VK_NULL_HANDLE;
        check(vk.vkAllocateDescriptorSets(device_, &ai, &set), "vkAllocateDescriptorSets");
        const VkDeviceSize range = (size_bytes + 3) / 4 * 4;
        const VkDescriptorBufferInfo infos[2] = {{inputs[in], offset, range}, {out.buffer, offset, range}};
        VkWriteDescriptorSet writes[2] = {};
        for (std::uint32_t b = 0; b < 2; ++b) {
          writes[b].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
          writes[b].dstSet = set;
          writes[b].dstBinding = b;
          writes[b].descriptorCount = 1;
          writes[b].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
          writes[b].pBufferInfo = &infos[b];
        }
        vk.vkUpdateDescriptorSets(device_, 2, writes, 0, nullptr);
        sets_[in].push_back(set);
      }
    }
  }

  void destroy() {
    if (device_ == VK_NULL_HANDLE) return;
    if (vk.vkDeviceWaitIdle != nullptr) (void)vk.vkDeviceWaitIdle(device_);
    if (vk.vkDestroyDescriptorPool != nullptr) {
      if (descriptors_ != VK_NULL_HANDLE) vk.vkDestroyDescriptorPool(device_, descriptors_, nullptr);
      if (pipeline_ != VK_NULL_HANDLE) vk.vkDestroyPipeline(device_, pipeline_, nullptr);
      if (layout_ != VK_NULL_HANDLE) vk.vkDestroyPipelineLayout(device_, layout_, nullptr);
      if (set_layout_ != VK_NULL_HANDLE) vk.vkDestroyDescriptorSetLayout(device_, set_layout_, nullptr);
      if (shader_ != VK_NULL_HANDLE) vk.vkDestroyShaderModule(device_, shader_, nullptr);
      for (VkBuffer b : buffers_) vk.vkDestroyBuffer(device_, b, nullptr);
      for (VkImage i : images_) vk.vkDestroyImage(device_, i, nullptr);
      for (VkDeviceMemory m : memories_) vk.vkFreeMemory(device_, m, nullptr);
      for (VkSemaphore s : {copied, freed}) {
        if (s != VK_NULL_HANDLE) vk.vkDestroySemaphore(device_, s, nullptr);
      }
      for (VkCommandPool p : {compute_pool_, transfer_pool_}) {
        if (p != VK_NULL_HANDLE) vk.vkDestroyCommandPool(device_, p, nullptr);
      }
    }
    if (vk.vkDestroyDevice != nullptr) vk.vkDestroyDevice(device_, nullptr);
    device_ = VK_NULL_HANDLE;
  }

  std::uint64_t bytes_ = 0;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkPhysicalDeviceLimits limits_{};
  VkDevice device_ = VK_NULL_HANDLE;
  VkCommandPool compute_pool_ = VK_NULL_HANDLE, transfer_pool_ = VK_NULL_HANDLE;
  std::vector<VkBuffer> buffers_;
  std::vector<VkImage> images_;
  std::vector<VkDeviceMemory> memories_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> chunks_;  ///< (offset, bytes) per bound range
  VkShaderModule shader_ = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkPipeline pipeline_ = VK_NULL_HANDLE;
  VkDescriptorPool descriptors_ = VK_NULL_HANDLE;
  std::vector<VkDescriptorSet> sets_[3];
};

std::string families_text(const Rig& rig) {
  return "compute family " + std::to_string(rig.compute_family) + ", transfer family " +
         std::to_string(rig.transfer_family) +
         (rig.families_differ() ? ", ownership release/acquire" : ", one family: no ownership transfer");
}

/// A timeline value the next signal of `s` uses.
struct Counters {
  std::uint64_t copied = 0, freed = 0;
};

/// Submit `cmd` `n` times on `queue` (each signalling `sem` at the next value of `value`),
/// one host wait at the end. Returns the wall time per submission (ms); `submit_us` gets each
/// vkQueueSubmit's host time.
double back_to_back(Rig& rig, VkQueue queue, VkCommandBuffer cmd, VkSemaphore sem, std::uint64_t& value, int n,
                    std::vector<double>* submit_us) {
  rig.submit(queue, {{{cmd}, {}, sem, ++value}});  // warm-up
  rig.host_wait(sem, value);
  const auto t0 = clock_type::now();
  for (int i = 0; i < n; ++i) {
    const auto s0 = clock_type::now();
    rig.submit(queue, {{{cmd}, {}, sem, ++value}});
    if (submit_us != nullptr) submit_us->push_back(us_between(s0, clock_type::now()));
  }
  rig.host_wait(sem, value);
  return us_between(t0, clock_type::now()) / 1e3 / n;
}

/// The step loop of one workload: `steps` steps, the host at most `inflight` steps ahead, as
/// ferry-bench's footprint run. `copy_ms` is one back-to-back copy of the batch.
VulkanAnchor::Loop step_loop(Rig& rig, Counters& v, Workload workload, std::uint64_t bytes, int steps,
                             std::uint32_t units, int inflight, double copy_ms, bool trace) {
  const int buffers = workload == Workload::pipeline ? 2 : 1;
  VkCommandBuffer copy_cmd[2] = {}, use_cmd[2] = {};
  for (int b = 0; b < buffers; ++b) {
    copy_cmd[b] = rig.begin(true);
    rig.copy(copy_cmd[b], rig.staging.buffer, rig.batch[b].buffer, bytes);
    rig.ownership(copy_cmd[b], rig.batch[b].buffer, true);
    rig.end(copy_cmd[b]);
    use_cmd[b] = rig.begin(false);
    rig.ownership(use_cmd[b], rig.batch[b].buffer, false);
    rig.passes(use_cmd[b], b, workload == Workload::pipeline ? units : 1);
    rig.end(use_cmd[b]);
  }
  VkCommandBuffer unrelated = VK_NULL_HANDLE;  // the seed's compute that does not read the batch
  if (workload == Workload::seed) {
    unrelated = rig.begin(false);
    rig.passes(unrelated, Rig::kWeights, units);
    rig.end(unrelated);
  }
  // Compute only: the step's dispatches, no copy.
  VkCommandBuffer only = rig.begin(false);
  if (workload == Workload::seed) rig.passes(only, Rig::kWeights, units);
  rig.passes(only, Rig::kBatch0, workload == Workload::pipeline ? units : 1);
  rig.end(only);

  VulkanAnchor::Loop loop;
  loop.compute_ms = back_to_back(rig, rig.compute, only, rig.freed, v.freed, std::clamp(steps, 3, 20), nullptr);

  const std::uint64_t freed0 = v.freed, copied0 = v.copied;
  std::optional<StepTrace> traced;
  if (trace) {
    traced.emplace(static_cast<std::size_t>(steps), [&rig, freed0, copied0](int kind, std::size_t i) {
      return rig.counter(kind == 0 ? rig.copied : rig.freed) >= (kind == 0 ? copied0 : freed0) + i + 1;
    });
  }
  StepClock clock(steps, inflight);
  for (int i = 0; i < steps; ++i) {
    if (i >= inflight) {
      rig.host_wait(rig.freed, freed0 + static_cast<std::uint64_t>(i - inflight + 1));
      clock.waited(i);
    }
    const auto issued_at = clock_type::now();
    const int b = i % buffers;
    // The copy into buffer b waits for the step that last read it.
    Rig::Wait free_point;
    if (i >= buffers) free_point = {rig.freed, freed0 + static_cast<std::uint64_t>(i - buffers + 1)};
    rig.submit(rig.transfer, {{{copy_cmd[b]}, free_point, rig.copied, copied0 + static_cast<std::uint64_t>(i + 1)}});
    const Rig::Wait copied{rig.copied, copied0 + static_cast<std::uint64_t>(i + 1)};
    Rig::Batch use{{use_cmd[b]}, copied, rig.freed, freed0 + static_cast<std::uint64_t>(i + 1)};
    if (workload == Workload::seed) {
      rig.submit(rig.compute, {{{unrelated}, {}, VK_NULL_HANDLE, 0}, use});
    } else {
      rig.submit(rig.compute, {use});
    }
    if (traced) traced->issued(static_cast<std::size_t>(i), issued_at);
  }
  rig.host_wait(rig.freed, freed0 + static_cast<std::uint64_t>(steps));
  loop.step_ms = clock.step_ms(&loop.step_ms_with_warmup);
  if (traced) {
    traced->stop();
    loop.times = traced->summary();
  }
  v.freed = freed0 + static_cast<std::uint64_t>(steps);
  v.copied = copied0 + static_cast<std::uint64_t>(steps);
  const double bound = std::max(loop.compute_ms, copy_ms);
  loop.overlap = bound > 0 ? loop.step_ms / bound : 0;
  return loop;
}

bool vulkan_device(const ferry::Device& device) { return device.backend() == ferry::Backend::vulkan; }

}  // namespace

VulkanAnchor measure_vulkan_anchor(const ferry::Device& device, std::uint64_t bytes, int iterations, int steps,
                                   std::uint32_t units, int inflight, bool trace) {
  VulkanAnchor r;
  r.bytes = bytes;
  if (!vulkan_device(device)) {
    r.skipped = "not a Vulkan device";
    return r;
  }
  Rig rig(device, bytes, Rig::Use::compute);
  r.compute_family = rig.compute_family;
  r.transfer_family = rig.transfer_family;
  Counters v;

  VkCommandBuffer h2d = rig.begin(true);
  rig.copy(h2d, rig.staging.buffer, rig.batch[0].buffer, bytes);
  rig.end(h2d);
  VkCommandBuffer d2h = rig.begin(true);
  rig.copy(d2h, rig.batch[0].buffer, rig.staging.buffer, bytes);
  rig.end(d2h);
  std::vector<double> submit_us;
  const double h2d_ms = back_to_back(rig, rig.transfer, h2d, rig.copied, v.copied, iterations, &submit_us);
  r.h2d_gbps = static_cast<double>(bytes) / (h2d_ms * 1e6);
  r.d2h_gbps = static_cast<double>(bytes) / (back_to_back(rig, rig.transfer, d2h, rig.copied, v.copied, iterations, nullptr) * 1e6);
  r.submit_us = median(submit_us);

  // Per copy as an engine issues it: record a command buffer, then submit it.
  std::vector<double> copy_us;
  for (int i = 0; i < iterations; ++i) {
    const auto t0 = clock_type::now();
    VkCommandBuffer cmd = rig.begin(true);
    rig.copy(cmd, rig.staging.buffer, rig.batch[0].buffer, bytes);
    rig.end(cmd);
    rig.submit(rig.transfer, {{{cmd}, {}, rig.copied, ++v.copied}});
    copy_us.push_back(us_between(t0, clock_type::now()));
  }
  rig.host_wait(rig.copied, v.copied);
  r.copy_us = median(copy_us);

  r.seed = step_loop(rig, v, Workload::seed, bytes, steps, units, inflight, h2d_ms, trace);
  r.pipeline = step_loop(rig, v, Workload::pipeline, bytes, steps, units, inflight, h2d_ms, trace);
  rig.idle();
  r.what = "raw Vulkan loop (vkCmdCopyBuffer from " +
           std::string(rig.system_staging ? "host-visible system memory" : "host-visible device memory") + ", " +
           families_text(rig) + ", timeline semaphores both ways)";
  r.measured = true;
  return r;
}

VendorContention measure_vulkan_contention(const ferry::Device& device, const ContentionConfig& config) {
  VendorContention out;
  if (!vulkan_device(device)) {
    out.skipped = "not a Vulkan device";
    return out;
  }
  // The bulk: staging (host-visible system memory where the device has it, as a pinned
  // buffer) <-> batch[0], on the transfer queue, signalling `copied`. The urgent copies: a
  // small host-visible buffer -> a small device-local one, on the compute queue (another queue
  // wherever the device gives one), each signalling `freed` at the next value.
  Rig rig(device, config.bulk_bytes, Rig::Use::copies);
  const Buffer urgent_src = rig.extra_buffer(config.urgent_bytes, true);
  const Buffer urgent_dst = rig.extra_buffer(config.urgent_bytes, false);
  std::memset(urgent_src.mapped, 0x3c, config.urgent_bytes);
  VkCommandBuffer h2d = rig.begin(true);
  rig.copy(h2d, rig.staging.buffer, rig.batch[0].buffer, config.bulk_bytes);
  rig.end(h2d);
  VkCommandBuffer d2h = rig.begin(true);
  rig.copy(d2h, rig.batch[0].buffer, rig.staging.buffer, config.bulk_bytes);
  rig.end(d2h);
  VkCommandBuffer small = rig.begin(false);
  rig.copy(small, urgent_src.buffer, urgent_dst.buffer, config.urgent_bytes);
  rig.end(small);
  // One VkQueue for both (a device with a single queue): submissions from the two threads are
  // serialized, as Vulkan requires of one queue.
  std::mutex queue_lock;
  const auto submit = [&](VkQueue queue, const std::vector<Rig::Batch>& batches) {
    std::unique_lock<std::mutex> lock(queue_lock, std::defer_lock);
    if (rig.one_queue()) lock.lock();
    rig.submit(queue, batches);
  };
  std::uint64_t copied = 0;
  std::atomic<std::uint64_t> urgent_value{0};
  const auto bulk = [&](bool to_device) {
    const std::uint64_t value = ++copied;
    submit(rig.transfer, {{{to_device ? h2d : d2h}, {}, rig.copied, value}});
    rig.host_wait(rig.copied, value);
  };
  // The poller reads the timeline's value (vkGetSemaphoreCounterValue).
  const auto urgent = [&](std::uint64_t count, auto&& stop) {
    const auto issue = [&](std::size_t) {
      const std::uint64_t value = urgent_value.fetch_add(1) + 1;
      submit(rig.compute, {{{small}, {}, rig.freed, value}});
      return value;
    };
    const auto done = [&](std::uint64_t value) { return rig.counter(rig.freed) >= value; };
    return run_urgent_copies<std::uint64_t>(std::chrono::microseconds(config.period_us), count, issue, done, stop);
  };
  const auto idle = [&] { rig.idle(); };
  // Warm-up: one bulk each way and a few urgent copies.
  bulk(true);
  bulk(false);
  (void)urgent(8, [] { return false; });
  rig.idle();

  const std::string queues = rig.one_queue() ? "the transfer queue (the device's only queue)"
                             : rig.families_differ()
                                 ? "the compute family's queue " + std::to_string(rig.compute_family)
                                 : "a second queue of family " + std::to_string(rig.compute_family);
  const std::string urgent_how = "vkCmdCopyBuffer, one vkQueueSubmit each, on " + queues;
  const std::string one = "one vkCmdCopyBuffer on the transfer family's queue (family " +
                          std::to_string(rig.transfer_family) + ", " +
                          (rig.system_staging ? "host-visible system memory" : "host-visible device memory") + ")";
  const auto row = [&](const std::string& name, const std::string& dir, bool with_urgent, const std::string& how) {
    ContentionRow r{.path = "vulkan", .name = name, .bulk = dir, .urgent = with_urgent, .how = how};
    measure_contention_row(r, config, [&] { bulk(dir == "h2d"); }, urgent, idle);
    out.rows.push_back(std::move(r));
  };
  row("urgent alone", "none", true, urgent_how);
  for (const char* dir : {"h2d", "d2h"}) {
    const std::string d = dir;
    row(d + " bulk alone", d, false, one);
    row(d + " bulk + urgent", d, true, one);
  }
  out.measured = true;
  return out;
}

VulkanCallCost measure_vulkan_call_cost(const ferry::Device& device, std::uint64_t bytes, int calls, int round) {
  VulkanCallCost r;
  if (!vulkan_device(device)) return r;
  Rig rig(device, bytes, Rig::Use::copies);
  VkCommandBuffer cmd = rig.begin(true);
  rig.copy(cmd, rig.staging.buffer, rig.batch[0].buffer, bytes);
  rig.end(cmd);
  std::uint64_t value = 0;
  for (int i = 0; i < 64; ++i) rig.submit(rig.transfer, {{{cmd}, {}, rig.copied, ++value}});
  rig.host_wait(rig.copied, value);
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(calls));
  for (int i = 0; i < calls; ++i) {
    if (i > 0 && i % round == 0) rig.host_wait(rig.copied, value);  // untimed
    const auto t0 = clock_type::now();
    rig.submit(rig.transfer, {{{cmd}, {}, rig.copied, ++value}});
    us.push_back(us_between(t0, clock_type::now()));
  }
  rig.host_wait(rig.copied, value);
  const Percentiles p = percentiles(std::move(us));
  r.median_us = p.median;
  r.p90_us = p.p90;
  r.what = "raw vkQueueSubmit per copy (copy + timeline signal)";
  r.measured = true;
  return r;
}

std::unique_ptr<VendorImage> make_vulkan_image(const ferry::Device& device, const ferry::ImageDesc& desc) {
  auto out = std::make_unique<VendorImage>();
  if (!vulkan_device(device)) {
    out->skipped = "not a Vulkan device";
    return out;
  }
  const ferry::vulkan::NativeHandles h = ferry::vulkan::native_handles(device);
  const ferry::testkit::VulkanImageFns f = ferry::testkit::load_vulkan_image_fns(loader(), h.instance, h.device);
  const ferry::testkit::VulkanEngineImage made =
      ferry::testkit::make_vulkan_engine_image(f, h.physical_device, h.device, desc);
  if (!made.skipped.empty()) {
    out->skipped = made.skipped;
    return out;
  }
  out->native = made.native();
  out->what = "VkImage (optimal tiling, device-local, EXCLUSIVE, SHADER_READ_ONLY_OPTIMAL after copies)";
  const VkDevice on = h.device;
  out->free = [f, on, made] { made.destroy(f, on); };
  return out;
}

VendorImageCopy measure_vulkan_image_copy(const ferry::Device& device, const ferry::ImageDesc& desc,
                                          std::span<const ferry::ImageRegion> regions, std::uint64_t bytes, int reps) {
  VendorImageCopy r;
  if (!vulkan_device(device)) {
    r.skipped = "not a Vulkan device";
    return r;
  }
  Rig rig(device, bytes, Rig::Use::staging);
  const ferry::testkit::VulkanEngineImage made = rig.make_image(desc);
  if (!made.skipped.empty()) {
    r.skipped = made.skipped;
    return r;
  }
  const ferry::FormatInfo f = ferry::format_info(desc.format);
  std::vector<VkBufferImageCopy> copies;
  for (const ferry::ImageRegion& g : regions) {
    VkBufferImageCopy c{};
    c.bufferOffset = g.buffer_offset;
    c.bufferRowLength = g.row_pitch == 0 ? 0 : static_cast<std::uint32_t>(g.row_pitch / f.block_bytes * f.block_width);
    c.bufferImageHeight = g.image_height;
    c.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, g.mip_level, g.base_layer, g.layer_count};
    c.imageOffset = {static_cast<std::int32_t>(g.x), static_cast<std::int32_t>(g.y), static_cast<std::int32_t>(g.z)};
    c.imageExtent = {g.width, g.height, g.depth};
    copies.push_back(c);
  }
  const auto count = static_cast<std::uint32_t>(copies.size());
  // Layout transitions over every level and layer, ALL_COMMANDS on both sides (as ferry's).
  auto transition = [&](VkCommandBuffer cmd, VkImageLayout from, VkImageLayout to, VkAccessFlags src,
                        VkAccessFlags dst) {
    VkImageMemoryBarrier b{VK_STRUCTURE_TYPE_IMAGE_MEMORY_BARRIER};
    b.srcAccessMask = src;
    b.dstAccessMask = dst;
    b.oldLayout = from;
    b.newLayout = to;
    b.srcQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
    b.dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
    b.image = made.image;
    b.subresourceRange = {VK_IMAGE_ASPECT_COLOR_BIT, 0, desc.mip_levels, 0, desc.array_layers};
    rig.vk.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 0,
                                nullptr, 0, nullptr, 1, &b);
  };
  constexpr VkAccessFlags kAny = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT;
  // One copy as an engine issues it: record the command buffer, then submit it.
  auto issue = [&](bool to_image, std::uint64_t& value) {
    VkCommandBuffer cmd = rig.begin(true);
    if (to_image) {
      transition(cmd, kImageFinalLayout, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, VK_ACCESS_MEMORY_WRITE_BIT,
                 VK_ACCESS_TRANSFER_WRITE_BIT);
      rig.vk.vkCmdCopyBufferToImage(cmd, rig.staging.buffer, made.image, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, count,
                                    copies.data());
      transition(cmd, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, kImageFinalLayout, VK_ACCESS_TRANSFER_WRITE_BIT, kAny);
    } else {
      transition(cmd, kImageFinalLayout, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, VK_ACCESS_MEMORY_WRITE_BIT,
                 VK_ACCESS_TRANSFER_READ_BIT);
      rig.vk.vkCmdCopyImageToBuffer(cmd, made.image, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, rig.staging.buffer, count,
                                    copies.data());
      transition(cmd, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, kImageFinalLayout, 0, kAny);
    }
    rig.end(cmd);
    rig.submit(rig.transfer, {{{cmd}, {}, rig.copied, ++value}});
  };
  std::uint64_t value = 0;
  {
    VkCommandBuffer init = rig.begin(true);  // the image's first layout, as an engine leaves it
    transition(init, VK_IMAGE_LAYOUT_UNDEFINED, kImageFinalLayout, 0, kAny);
    rig.end(init);
    rig.submit(rig.transfer, {{{init}, {}, rig.copied, ++value}});
  }
  // Each copy: recorded and submitted, then the host's wait for its signal.
  auto timed = [&](bool to_image) {
    const auto record_and_submit = [&] {
      issue(to_image, value);
      return value;
    };
    const auto wait = [&](std::uint64_t v) { rig.host_wait(rig.copied, v); };
    return time_copies(bytes, reps, record_and_submit, wait);
  };
  const CopyTimes up = timed(true);
  r.upload_gbps = up.gbps;
  r.upload_call_us = up.call_us;
  r.download_gbps = timed(false).gbps;
  rig.idle();
  r.what = "raw Vulkan: vkCmdCopyBufferToImage / vkCmdCopyImageToBuffer on family " +
           std::to_string(rig.transfer_family) + " from host-visible " +
           (rig.system_staging ? "system" : "device") + " memory, recorded and submitted per copy";
  r.measured = true;
  return r;
}

}  // namespace ferry_bench
