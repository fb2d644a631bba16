// SPDX-License-Identifier: MIT
// Vulkan backend internals: entry-point table, error mapping, and the device/queue/semaphore
// classes. Every Vulkan call goes through the table (VK_NO_PROTOTYPES), loaded from the
// dlopen'ed loader or from an engine's vkGetInstanceProcAddr, and every VkResult through
// FERRY_VK_CHECK.
#pragma once

#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
#include <vulkan/vulkan.h>

// Vulkan structs are written `VkFooInfo info{VK_STRUCTURE_TYPE_FOO_INFO};`: sType named, every
// other member zero until set. -Wmissing-field-initializers flags each of them, so it is off
// in the translation units of the Vulkan backend (and on in the rest of ferry).
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend.hpp"
#include "check.hpp"
#include "vulkan_adopt.hpp"

static_assert(sizeof(void*) == 8, "ferry's Vulkan backend stores VkBuffer handles in void*");

namespace ferry::detail {

std::string vk_describe(VkResult result);
ErrorCode vk_classify(VkResult result) noexcept;

#define FERRY_VK_CHECK(expr) \
  FERRY_CHECK_GEN(expr, VK_SUCCESS, ::ferry::detail::vk_describe, ::ferry::detail::vk_classify)

/// The backend's entry points (its descriptor in vulkan_device.cpp). The census (count,
/// is_gpu) is taken once per process with a temporary instance (vulkan_loader.cpp).
int vulkan_device_count() noexcept;
/// Whether device `ordinal` is a real GPU (not a CPU driver such as lavapipe).
bool vulkan_device_is_gpu(int ordinal) noexcept;
std::unique_ptr<BackendDevice> vulkan_open(const DeviceOptions& options);

/// Throw an Error that is not a failed vendor call ("Vulkan: " + message).
[[noreturn]] inline void vk_fail(ErrorCode code, const std::string& message) {
  throw Error(code, "Vulkan: " + message, {}, std::source_location{});
}

// Entry points, resolved at instance or device level. All are required (core 1.2) except the
// ones VulkanApi lists separately.
#define FERRY_VK_INSTANCE_FUNCTIONS(X)                                                   \
  X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)   \
  X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceFeatures2)                     \
  X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkGetPhysicalDeviceMemoryProperties)    \
  X(vkEnumerateDeviceExtensionProperties) X(vkCreateDevice) X(vkGetDeviceProcAddr)       \
  X(vkGetPhysicalDeviceExternalSemaphoreProperties)

#define FERRY_VK_DEVICE_FUNCTIONS(X)                                                      \
  X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkDeviceWaitIdle) X(vkQueueSubmit)             \
  X(vkCreateSemaphore) X(vkDestroySemaphore) X(vkGetSemaphoreCounterValue)                \
  X(vkSignalSemaphore) X(vkWaitSemaphores) X(vkAllocateMemory) X(vkFreeMemory)            \
  X(vkMapMemory) X(vkUnmapMemory) X(vkCreateBuffer) X(vkDestroyBuffer)                    \
  X(vkGetBufferMemoryRequirements) X(vkBindBufferMemory) X(vkCreateCommandPool)           \
  X(vkDestroyCommandPool) X(vkAllocateCommandBuffers) X(vkFreeCommandBuffers)             \
  X(vkBeginCommandBuffer) X(vkEndCommandBuffer) X(vkCmdCopyBuffer) X(vkCmdPipelineBarrier) \
  X(vkCmdBindPipeline) X(vkCmdBindDescriptorSets) X(vkCmdPushConstants) X(vkCmdDispatch)  \
  X(vkCreateShaderModule) X(vkDestroyShaderModule) X(vkCreateDescriptorSetLayout)         \
  X(vkDestroyDescriptorSetLayout) X(vkCreatePipelineLayout) X(vkDestroyPipelineLayout)    \
  X(vkCreateComputePipelines) X(vkDestroyPipeline) X(vkCreateDescriptorPool)              \
  X(vkDestroyDescriptorPool) X(vkAllocateDescriptorSets) X(vkResetDescriptorPool)         \
  X(vkUpdateDescriptorSets) X(vkCmdCopyBufferToImage) X(vkCmdCopyImageToBuffer)            \
  X(vkGetImageMemoryRequirements)

/// The loader's vkGetInstanceProcAddr from libvulkan.so.1, opened once; null without a loader.
PFN_vkGetInstanceProcAddr loader_get_instance_proc_addr() noexcept;

struct VulkanApi {
  std::uint32_t instance_version = 0;  ///< apiVersion ferry created the instance with (0: adopted)
  /// specVersion of VK_LAYER_KHRONOS_validation when ferry enabled it (0: not enabled by ferry)
  std::uint32_t validation_layer_version = 0;
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
#define FERRY_VK_MEMBER(name) PFN_##name name = nullptr;
  FERRY_VK_INSTANCE_FUNCTIONS(FERRY_VK_MEMBER)
  FERRY_VK_DEVICE_FUNCTIONS(FERRY_VK_MEMBER)
#undef FERRY_VK_MEMBER
  // Optional: debug utils (validation), vkQueueSubmit2 (1.3 devices ferry created with
  // synchronization2), host pointer import (VK_EXT_external_memory_host).
  PFN_vkCreateDebugUtilsMessengerEXT vkCreateDebugUtilsMessengerEXT = nullptr;
  PFN_vkDestroyDebugUtilsMessengerEXT vkDestroyDebugUtilsMessengerEXT = nullptr;
  PFN_vkQueueSubmit2 vkQueueSubmit2 = nullptr;
  PFN_vkGetMemoryHostPointerPropertiesEXT vkGetMemoryHostPointerPropertiesEXT = nullptr;
  // Optional: interop export (VK_KHR_external_memory_fd, VK_KHR_external_semaphore_fd).
  PFN_vkGetMemoryFdKHR vkGetMemoryFdKHR = nullptr;
  PFN_vkGetSemaphoreFdKHR vkGetSemaphoreFdKHR = nullptr;

  /// Resolve instance-level entry points; throws `unsupported` naming a missing one.
  void load_instance(VkInstance instance);
  /// Resolve device-level entry points (optional ones as requested), all or none.
  void load_device(VkDevice device, bool submit2, bool host_import, bool fd_export = false);
};

/// Create an instance (Vulkan 1.3 when the loader has it, else 1.2; `unsupported` below 1.2).
/// With `messenger` non-null: VK_LAYER_KHRONOS_validation with synchronization validation, and
/// the messenger chained so instance creation is covered too (`unsupported` without the layer;
/// its version in `vk.validation_layer_version`).
VkInstance create_instance(VulkanApi& vk, const VkDebugUtilsMessengerCreateInfoEXT* messenger);

/// The physical devices ferry numbers: those of Vulkan 1.2 or later, in enumeration order.
std::vector<VkPhysicalDevice> usable_physical_devices(const VulkanApi& vk, VkInstance instance);

/// A VkBuffer over its own VkDeviceMemory (segment or host memory record), or an engine's
/// adopted VkBuffer (`memory` null: ferry owns neither).
struct VulkanAllocation {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  /// How the buffer is shared across queue families: as the device's segments are (`device`:
  /// VulkanDevice::concurrent_sharing), or as an engine stated for its adopted buffer.
  enum class Sharing : std::uint8_t { device, exclusive, concurrent } sharing = Sharing::device;
};

inline VkBuffer buffer_of(const Segment* segment) {
  return static_cast<const VulkanAllocation*>(segment->backend_data)->buffer;
}
inline VkBuffer buffer_of(const HostMemory* memory) {
  return static_cast<const VulkanAllocation*>(memory->backend_data)->buffer;
}

class VulkanDevice;

/// An engine's VkImage (Device::adopt_image). ferry destroys nothing of it. `engine_layout` is
/// the layout the image is in when the engine holds it, as recorded so far: the adopted
/// layout until ferry's first copy is recorded, the final layout after it (image_barrier
/// keeps it; the front end serializes the calls that use one image).
struct VulkanImage final : BackendImage {
  VkImage image = VK_NULL_HANDLE;
  VkImageLayout engine_layout = VK_IMAGE_LAYOUT_UNDEFINED;
  VkImageLayout final_layout = VK_IMAGE_LAYOUT_GENERAL;
  bool concurrent = false;
  std::uint32_t mip_levels = 1;
  std::uint32_t array_layers = 1;
  /// The layout of `use` (engine: engine_layout before a copy, `final_layout` after it).
  [[nodiscard]] VkImageLayout layout(ImageUse use, bool after) const noexcept {
    switch (use) {
      case ImageUse::copy_dst: return VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL;
      case ImageUse::copy_src: return VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL;
      case ImageUse::engine: break;
    }
    return after ? final_layout : engine_layout;
  }
  /// Whether the hand-over `h` transfers queue-family ownership: two families, an EXCLUSIVE
  /// image, and contents to keep (from an UNDEFINED layout nothing is kept, and the
  /// executor's transition alone takes the image). A hand-over to or from another API
  /// (VK_QUEUE_FAMILY_EXTERNAL, interop pairs) always transfers, from UNDEFINED too: that
  /// API records no transition of its own, so the Vulkan side's half is the whole of it.
  [[nodiscard]] bool transfers(const ImageHandOff& h) const noexcept {
    if (h.src_family == h.dst_family || concurrent) return false;
    return layout(h.from, false) != VK_IMAGE_LAYOUT_UNDEFINED || h.src_family == VK_QUEUE_FAMILY_EXTERNAL ||
           h.dst_family == VK_QUEUE_FAMILY_EXTERNAL;
  }
};

class VulkanSemaphore final : public BackendSemaphore {
 public:
  VulkanSemaphore(VulkanDevice& device, std::uint64_t initial);
  /// Wraps (and owns) a timeline semaphore made by the device (an exportable one).
  VulkanSemaphore(VulkanDevice& device, VkSemaphore semaphore);
  /// Destroys the VkSemaphore at once if no queue ever used it, else hands it to the device,
  /// which destroys it at the next wait_idle() or at close (queued work may still use it).
  ~VulkanSemaphore() override;
  std::uint64_t value() override;
  void signal(std::uint64_t value) override;
  bool wait(std::uint64_t value, std::chrono::nanoseconds timeout) override;

  [[nodiscard]] VkSemaphore handle() const noexcept { return semaphore_; }
  void mark_queued() noexcept { queued_.store(true, std::memory_order_relaxed); }

 private:
  VulkanDevice& device_;
  VkSemaphore semaphore_ = VK_NULL_HANDLE;
  std::atomic<bool> queued_{false};
};

/// One VkQueue as ferry uses it. Commands are recorded into a batch (one command buffer).
/// A wait closes the batch being recorded (a wait applies to a whole submission); a signal
/// attaches to it and submits everything recorded up to it, unless signals are held
/// (hold_signals: the front end's deferred submission), when only `flush()` submits: all
/// closed batches in one vkQueueSubmit2 call, however many waits split them. The front end decides when
/// to flush (after each call, or deferred: transfer.hpp, "Deferred submission"). Batches are
/// recycled once this queue's private progress timeline shows them complete: no allocation per
/// operation in the steady state.
///
/// Ordering inside a queue: before each command, a memory barrier is recorded if the command
/// touches a range that an earlier command of the batch wrote (or writes a range earlier
/// commands read), and always before the first command of a batch (earlier submissions, and
/// waits). Its first scope is every stage and every write, so it also covers an engine's own
/// submissions on the same VkQueue; its second scope is what ferry records after it: copies
/// and compute dispatches (transfer and shader reads and writes). Disjoint copies of one batch
/// may overlap. A signal covers every
/// command recorded before it; commands recorded after it in the same batch delay it (a
/// signal is reached later, never earlier, than its commands complete).
///
/// Thread-safety: all methods lock the queue; submissions take the device-wide submit lock
/// (several VulkanQueues may share one VkQueue: both roles on a one-queue device, adoption).
class VulkanQueue final : public BackendQueue {
 public:
  /// A wait applies to one submission; EXCLUSIVE buffers change queue family through a
  /// release and an acquire; signals are submitted at flush() (see above).
  static constexpr QueueTraits kTraits{.wait_orders_later_work = false, .acquires_ownership = true,
                                       .defers_signals = true};

  VulkanQueue(VulkanDevice& device, VkQueue queue, std::uint32_t family, std::uint32_t index,
              bool owns_index);
  /// Submits what was recorded and not flushed (a waiter of its signals must not hang), waits
  /// for everything this queue submitted, then frees its objects.
  ~VulkanQueue() override;

  void copy_h2d(DeviceRef dst, HostRef src, std::uint64_t bytes) override;
  void copy_d2h(HostRef dst, DeviceRef src, std::uint64_t bytes) override;
  void copy_d2d(DeviceRef dst, DeviceRef src, std::uint64_t bytes) override;
  void signal(BackendSemaphore& sem, std::uint64_t value) override;
  void wait(BackendSemaphore& sem, std::uint64_t value) override;
  void release_ownership(DeviceRef range, std::uint64_t bytes, BackendQueue& to) override;
  void acquire_ownership(DeviceRef range, std::uint64_t bytes, BackendQueue& from) override;
  bool synthetic_compute(DeviceRef in, DeviceRef out, std::uint64_t bytes,
                         std::uint32_t units) override;
  void copy_h2i(BackendImage& dst, HostRef src, std::span<const ImageCopy> regions) override;
  void copy_i2h(HostRef dst, BackendImage& src, std::span<const ImageCopy> regions) override;
  void copy_d2i(BackendImage& dst, DeviceRef src, std::span<const ImageCopy> regions) override;
  void copy_i2d(DeviceRef dst, BackendImage& src, std::span<const ImageCopy> regions) override;
  void image_barrier(BackendImage& image, const ImageHandOff& hand_off) override;
  void flush() override;
  void hold_signals(bool held) override;
  [[nodiscard]] std::uint32_t family() const override { return family_; }

  [[nodiscard]] VkQueue handle() const noexcept { return queue_; }
  [[nodiscard]] std::uint64_t driver_submits() const override {
    return driver_submits_.load(std::memory_order_relaxed);
  }

 private:
  struct Batch {
    VkCommandBuffer commands = VK_NULL_HANDLE;
    VkDescriptorPool descriptors = VK_NULL_HANDLE;  // created on the first synthetic_compute
    std::uint32_t sets_used = 0;
    std::uint64_t done = 0;  // progress value that marks this batch complete
  };
  using SemaphoreValue = std::pair<VkSemaphore, std::uint64_t>;
  /// One submission of the next vkQueueSubmit2 call: waits, then a batch (optional), then
  /// signals (one per semaphore, its greatest value: a timeline that reaches it has reached
  /// every smaller one).
  struct Submission {
    std::vector<SemaphoreValue> waits;
    bool has_batch = false;
    Batch batch;
    std::vector<SemaphoreValue> signals;
  };
  struct Access {
    VkBuffer buffer;
    VkDeviceSize begin, end;
    bool write;
  };
  static constexpr std::uint32_t kSetsPerBatch = 16;
  static constexpr std::size_t kMaxTrackedAccesses = 64;

  Batch& recording();
  void order(std::initializer_list<Access> next);
  void copy(VkBuffer dst, VkDeviceSize dst_offset, VkBuffer src, VkDeviceSize src_offset,
            VkDeviceSize bytes, bool dst_is_host);
  void copy_image(VulkanImage& image, VkBuffer buffer, VkDeviceSize base, std::span<const ImageCopy> regions,
                  bool to_image, bool host_dst);
  void ownership_barrier(DeviceRef range, std::uint64_t bytes, std::uint32_t src_family,
                         std::uint32_t dst_family, bool release);
  VkDescriptorSet allocate_set();
  /// Ends the batch being recorded (if any) with the open submission's waits and signals
  /// and queues it for the next flush. Waits alone stay open: they attach to what comes next.
  void close();
  /// Submits the closed submissions (caller holds mutex_).
  void submit_closed();

  VulkanDevice& device_;
  VkQueue queue_;
  std::uint32_t family_, index_;
  bool owns_index_;
  std::mutex mutex_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkSemaphore progress_ = VK_NULL_HANDLE;  // private timeline: value n = n-th submission done
  std::uint64_t submitted_ = 0;
  std::atomic<std::uint64_t> driver_submits_{0};
  bool recording_ = false;
  bool hold_ = false;  // hold_signals: signals wait for flush()
  bool batch_empty_ = true;  // no command recorded in the current batch yet
  bool writes_host_ = false;
  Batch current_;
  Submission open_;  // the waits and signals of the submission being built (batch: current_)
  std::vector<Submission> closed_;  // [0, closed_count_) await the next flush; the rest are spare
  std::size_t closed_count_ = 0;
  std::vector<Batch> idle_, in_flight_;
  std::vector<Access> accesses_;  // of the current batch since its last full barrier
  // Scratch for submit_closed(), reused.
  std::vector<VkSemaphore> sems_;
  std::vector<std::uint64_t> values_;
  std::vector<VkPipelineStageFlags> stages_;
  std::vector<VkSemaphoreSubmitInfo> infos_;
  std::vector<VkCommandBufferSubmitInfo> commands_;
  std::vector<VkSubmitInfo2> submits2_;
  std::vector<VkTimelineSemaphoreSubmitInfo> timelines_;
  std::vector<VkSubmitInfo> submits_;
  std::vector<VkCommandBuffer> buffers_;
};

/// The synthetic-compute pipeline, created on first use.
struct SyntheticPipeline {
  VkShaderModule shader = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
};

/// The debug messenger's user data (see on_validation_message in vulkan_device.cpp).
struct ValidationCounter {
  std::atomic<std::uint64_t> counted{0};
  std::atomic<bool> external_signals{false};  // interop pair: see note_external_signals
  /// The layer can hold a host signal behind another thread's host wait (kSignalBehindWait in
  /// vulkan_device.cpp): set from the layer's version when the device opens, and only then
  /// are the host signals in progress tracked (HostSignalInProgress).
  std::atomic<bool> signal_behind_wait{false};
  std::mutex signals_mutex;
  std::vector<std::chrono::steady_clock::time_point> signals_started;  // under signals_mutex
  /// Host signals that have ended, as (start, end), kept for two of the layer's waits: the
  /// layer holds one signal behind every waiting thread, and reports the second waiter's
  /// timeout after the first report let the signal finish. Under signals_mutex.
  std::vector<std::pair<std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point>> signals_ended;
};

class VulkanDevice final : public BackendDevice {
 public:
  VulkanDevice() = default;
  ~VulkanDevice() override;
  VulkanDevice(const VulkanDevice&) = delete;
  VulkanDevice& operator=(const VulkanDevice&) = delete;

  /// Create instance and device for `options.ordinal` (vulkan_open).
  void open(const DeviceOptions& options);
  /// Wrap an engine's objects (vulkan_adopt).
  void adopt(const VulkanAdoptInfo& info);

  const Capabilities& capabilities() const override { return caps_; }
  BackendQueue& default_queue(QueueRole role) override;
  std::unique_ptr<BackendQueue> create_queue(QueueRole role, int priority) override;
  std::unique_ptr<BackendQueue> adopt_queue(QueueRole role, const NativeQueue& native) override;
  std::unique_ptr<BackendSemaphore> create_semaphore(std::uint64_t initial) override;
  std::unique_ptr<Segment> allocate_segment(std::uint64_t bytes) override;
  void free_segment(std::unique_ptr<Segment> segment) override;
  std::unique_ptr<HostMemory> allocate_host(std::uint64_t bytes) override;
  std::unique_ptr<HostMemory> register_host(std::byte* ptr, std::uint64_t bytes) override;
  std::unique_ptr<HostMemory> adopt_host(std::byte* ptr, std::uint64_t bytes) override;
  void free_host(std::unique_ptr<HostMemory> memory) override;
  void wait_idle() override;
  std::uint64_t validation_messages() const override {
    return validation_.counted.load(std::memory_order_relaxed);
  }
  void note_external_signals() override { validation_.external_signals.store(true); }
  /// The messenger's counter; host signals note themselves in it (VulkanSemaphore::signal).
  [[nodiscard]] ValidationCounter& validation() noexcept { return validation_; }
  // Interop export (backends/pair/): opaque fds of a timeline semaphore and of a segment.
  std::unique_ptr<BackendSemaphore> create_exported_semaphore(std::uint64_t initial, int* fd) override;
  std::unique_ptr<Segment> allocate_exported_segment(std::uint64_t bytes, ExternalMemory* out) override;
  ExternalMemory export_image_memory(const NativeImage& native) override;
  AdoptedRange adopt_memory(const NativeMemory& native, std::uint64_t bytes) override;
  std::unique_ptr<BackendImage> adopt_image(const NativeImage& native, const ImageDesc& desc,
                                            std::uint32_t owner_family) override;
  [[nodiscard]] Extent3D image_copy_granularity(std::uint32_t family) const override {
    const VkExtent3D g = families_[family].minImageTransferGranularity;
    return {g.width, g.height, g.depth};
  }
  [[nodiscard]] bool image_hand_off_needed(const BackendImage& image, std::uint32_t src_family,
                                           std::uint32_t dst_family) const override {
    return src_family != dst_family && !static_cast<const VulkanImage&>(image).concurrent;
  }
  std::uint64_t host_registration_alignment() const override {
    return host_import_ ? host_import_alignment_ : 1;
  }

  // For queues and semaphores.
  [[nodiscard]] const VulkanApi& vk() const noexcept { return vk_; }
  [[nodiscard]] VkDevice handle() const noexcept { return device_; }
  [[nodiscard]] std::mutex& submit_mutex() noexcept { return *submit_mutex_; }
  [[nodiscard]] bool concurrent_sharing() const noexcept { return concurrent_; }
  /// Whether `segment`'s buffer is CONCURRENT (per its record; see VulkanAllocation::sharing).
  /// Whether moving `segment`'s range from `src_family` to `dst_family` needs a queue-family
  /// ownership transfer: never within a family; for a CONCURRENT buffer only to or from
  /// another API (VK_QUEUE_FAMILY_EXTERNAL, interop pairs), which is required either way.
  [[nodiscard]] bool needs_ownership_transfer(const Segment* segment, std::uint32_t src_family,
                                              std::uint32_t dst_family) const noexcept {
    if (src_family == dst_family) return false;
    return !concurrent_sharing(segment) || src_family == VK_QUEUE_FAMILY_EXTERNAL ||
           dst_family == VK_QUEUE_FAMILY_EXTERNAL;
  }
  [[nodiscard]] bool concurrent_sharing(const Segment* segment) const noexcept {
    const auto sharing = static_cast<const VulkanAllocation*>(segment->backend_data)->sharing;
    return sharing == VulkanAllocation::Sharing::device ? concurrent_
                                                        : sharing == VulkanAllocation::Sharing::concurrent;
  }
  [[nodiscard]] VkInstance instance() const noexcept { return instance_; }
  [[nodiscard]] VkPhysicalDevice physical_device() const noexcept { return physical_; }
  [[nodiscard]] std::uint32_t compute_family() const noexcept { return compute_family_; }
  [[nodiscard]] std::uint32_t transfer_family() const noexcept { return transfer_family_; }
  [[nodiscard]] bool has_compute(std::uint32_t family) const {
    return (families_[family].queueFlags & VK_QUEUE_COMPUTE_BIT) != 0;
  }
  [[nodiscard]] const VkPhysicalDeviceLimits& limits() const noexcept { return props_.limits; }
  /// The synthetic-compute pipeline (created on first call; throws on failure).
  const SyntheticPipeline& synthetic();
  void release_queue_index(std::uint32_t family, std::uint32_t index);
  void retire_semaphore(VkSemaphore semaphore);
  VkSemaphore create_timeline(std::uint64_t initial, const void* next = nullptr);

 private:
  void select_families();
  void finish_setup(std::uint32_t compute_index, std::uint32_t transfer_index,
                    bool host_import, bool fd_export = false);
  std::uint32_t pick_memory_type(std::uint32_t type_bits, VkMemoryPropertyFlags required,
                                 VkMemoryPropertyFlags preferred,
                                 VkMemoryPropertyFlags avoided) const;
  VulkanAllocation make_allocation(VkDeviceSize size, const void* buffer_next, bool host,
                                   const void* memory_next, std::uint32_t type_mask,
                                   VkDeviceSize import_size, bool dedicated = false,
                                   VkDeviceSize* allocated = nullptr);
  void destroy_allocation(const VulkanAllocation& allocation) noexcept;
  /// out_of_memory when `bytes` exceeds maxMemoryAllocationSize.
  void check_segment_size(std::uint64_t bytes) const;
  /// A Segment over `record` (owned by the segment from then on) with a synthetic address.
  std::unique_ptr<Segment> wrap_segment(std::unique_ptr<VulkanAllocation> record, std::uint64_t bytes);
  std::unique_ptr<VulkanQueue> make_queue(std::uint32_t family, std::uint32_t index,
                                          bool owns_index);

  VulkanApi vk_;
  ValidationCounter validation_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  bool owns_objects_ = false;  // false for an adopted device: nothing of the engine's is destroyed
  VkPhysicalDeviceProperties props_{};
  VkPhysicalDeviceMemoryProperties memory_{};
  std::vector<VkQueueFamilyProperties> families_;
  std::uint32_t compute_family_ = 0, transfer_family_ = 0;
  std::vector<std::vector<bool>> queue_in_use_;   // per family: index handed out (own device)
  std::vector<std::uint32_t> queues_created_;     // per family: queues the VkDevice has
  std::vector<std::uint32_t> sharing_families_;   // families a CONCURRENT buffer is shared by
  bool concurrent_ = false;                       // segments use CONCURRENT sharing
  bool urgent_on_compute_ = false;                // create_queue: urgent copy queues in the compute family
  bool host_import_ = false;
  bool fd_export_ = false;  // VK_KHR_external_{memory,semaphore}_fd enabled, timelines exportable
  VkDeviceSize host_import_alignment_ = 0;
  Capabilities caps_;
  std::mutex own_submit_mutex_;
  std::mutex* submit_mutex_ = &own_submit_mutex_;
  std::mutex mutex_;  // queue indices, retired semaphores, synthetic pipeline
  std::atomic<std::uint64_t> next_address_{std::uint64_t{1} << 40};
  std::unique_ptr<VulkanQueue> compute_queue_, transfer_queue_;  // may share one VkQueue
  std::vector<VkSemaphore> retired_;
  SyntheticPipeline synthetic_;
};

}  // namespace ferry::detail
