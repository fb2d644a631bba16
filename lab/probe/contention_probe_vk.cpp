// SPDX-License-Identifier: MIT
// ferry-probe-contention-vk: an experiment, not part of ferry; the Vulkan counterpart of
// ferry-probe-contention. It lists the device's queue families, then measures how long a small
// urgent host->device copy (vkCmdCopyBuffer from host-visible coherent memory, default 64 KiB,
// one every --period-us) waits while a bulk copy (default 4 GiB, host-visible -> device-local)
// runs on queue 0 of the transfer-only family. Rows (--rows, comma list) are BULK-URGENT:
//   BULK   = whole (one region, one submit) or split-N (N MiB regions, one submit each)
//   URGENT = same (the bulk's queue), tq1 (transfer family queue 1, if it has two), compute (a
//            compute-only family's queue), graphics (the graphics family's queue), or alone
//            (no urgent copies: the bulk's bandwidth)
// plus alone-QUEUE: urgent copies with no bulk. Latency: steady_clock before vkQueueSubmit ->
// a poller thread's vkGetFenceStatus spin first sees that submit's fence signaled. Bulk GB/s:
// bytes over host time from the first bulk submit to its last fence seen signaled (1e9 B/s).
// The loader is opened at run time (libvulkan.so.1); nothing is linked.
// Run: ferry-probe-contention-vk [--device N] [--bulk-mib 4096] [--urgent-kib 64]
//      [--period-us 500] [--reps 3] [--rows LIST]
#include <dlfcn.h>
#include <vulkan/vulkan.h>
// Vulkan create-info structs are brace-initialized with their sType only, the rest zeroed.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "probe_util.hpp"

using probe::median;
using probe::parse_list;
using probe::quantile;

namespace {

void vkc(VkResult r, const char* what) {
  if (r != VK_SUCCESS) throw std::runtime_error(std::string(what) + " failed: VkResult " + std::to_string(static_cast<int>(r)));
}

using Clock = std::chrono::steady_clock;
double us_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

int parse_int(const std::string& s) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != '\0' || v < 0 || v > (1L << 30)) throw std::runtime_error("bad number '" + s + "'");
  return static_cast<int>(v);
}

struct Options {
  int device = -1;  // the first non-CPU device
  std::uint64_t bulk = 4096ull << 20;
  std::uint64_t urgent = 64ull << 10;
  int period_us = 500;
  int reps = 3;
  int alone_copies = 200;
  std::string rows =
      "alone-same,alone-compute,whole-alone,split-8-alone,whole-same,whole-tq1,whole-compute,whole-graphics,"
      "split-8-same,split-8-tq1,split-8-compute,split-8-graphics,split-2-tq1,split-2-compute";
};

// The queues the probe uses; the urgent side names one of them.
enum Q { kSame = 0, kTq1, kCompute, kGraphics, kQueues };
const char* const kQueueNames[kQueues] = {"same", "tq1", "compute", "graphics"};

struct Queue {
  VkQueue queue = VK_NULL_HANDLE;
  std::uint32_t family = 0, index = 0;
  bool present = false;
  std::mutex* lock = nullptr;  // queues are externally synchronized; shared when aliased
};

class Probe {
 public:
  explicit Probe(Options o) : opt_(std::move(o)) {}
  ~Probe() { close(); }
  void run();

 private:
  template <class F>
  F dfn(const char* name) {
    auto f = reinterpret_cast<F>(get_device_proc_(device_, name));
    if (f == nullptr) throw std::runtime_error(std::string("no ") + name);
    return f;
  }
  void open();
  void close();
  VkCommandBuffer record(std::uint32_t family, VkBuffer src, VkBuffer dst, std::uint64_t src_off, std::uint64_t dst_off,
                         std::uint64_t len, bool simultaneous);
  VkFence fence();
  void submit(Queue& q, VkCommandBuffer cb, VkFence f);
  bool signaled(VkFence f) {
    const VkResult r = get_fence_status_(device_, f);
    if (r == VK_SUCCESS) return true;
    if (r != VK_NOT_READY) vkc(r, "vkGetFenceStatus");
    return false;
  }
  void urgent_loop(Queue& q, const std::atomic<bool>* bulk_done, int count, std::vector<double>& out);
  void row(const std::string& name);

  Options opt_;
  void* lib_ = nullptr;
  PFN_vkGetInstanceProcAddr gipa_ = nullptr;
  PFN_vkGetDeviceProcAddr get_device_proc_ = nullptr;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  PFN_vkDestroyInstance destroy_instance_ = nullptr;
  PFN_vkDestroyDevice destroy_device_ = nullptr;
  PFN_vkDeviceWaitIdle wait_idle_ = nullptr;
  PFN_vkQueueSubmit queue_submit_ = nullptr;
  PFN_vkGetFenceStatus get_fence_status_ = nullptr;
  PFN_vkResetFences reset_fences_ = nullptr;
  PFN_vkCreateFence create_fence_ = nullptr;
  PFN_vkDestroyFence destroy_fence_ = nullptr;
  PFN_vkAllocateCommandBuffers alloc_cbs_ = nullptr;
  PFN_vkBeginCommandBuffer begin_cb_ = nullptr;
  PFN_vkEndCommandBuffer end_cb_ = nullptr;
  PFN_vkCmdCopyBuffer cmd_copy_ = nullptr;
  PFN_vkFreeCommandBuffers free_cbs_ = nullptr;
  PFN_vkDestroyCommandPool destroy_pool_ = nullptr;
  PFN_vkDestroyBuffer destroy_buffer_ = nullptr;
  PFN_vkFreeMemory free_memory_ = nullptr;
  Queue queues_[kQueues];
  std::mutex locks_[kQueues];
  std::vector<std::pair<std::uint32_t, VkCommandPool>> pools_;  // family -> pool
  std::vector<VkFence> fences_;
  std::vector<VkBuffer> buffers_;
  std::vector<VkDeviceMemory> memories_;
  VkBuffer host_bulk_ = VK_NULL_HANDLE, dev_bulk_ = VK_NULL_HANDLE, host_urgent_ = VK_NULL_HANDLE,
           dev_urgent_ = VK_NULL_HANDLE;
  VkCommandBuffer urgent_cb_[kQueues] = {};
  std::vector<VkFence> urgent_fences_;
  double whole_alone_gbps_ = 0;
};

void Probe::close() {
  // Every function is loaded before anything it destroys is made (open() fails before making any).
  if (device_ != VK_NULL_HANDLE && free_memory_ != nullptr) {
    wait_idle_(device_);
    for (VkFence f : fences_) destroy_fence_(device_, f, nullptr);
    for (auto& p : pools_) destroy_pool_(device_, p.second, nullptr);
    for (VkBuffer b : buffers_) destroy_buffer_(device_, b, nullptr);
    for (VkDeviceMemory m : memories_) free_memory_(device_, m, nullptr);
  }
  if (device_ != VK_NULL_HANDLE && destroy_device_ != nullptr) {
    destroy_device_(device_, nullptr);
    device_ = VK_NULL_HANDLE;
  }
  if (instance_ != VK_NULL_HANDLE && destroy_instance_ != nullptr) {
    destroy_instance_(instance_, nullptr);
    instance_ = VK_NULL_HANDLE;
  }
  if (lib_ != nullptr) {
    dlclose(lib_);
    lib_ = nullptr;
  }
}

void Probe::open() {
  lib_ = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib_ == nullptr) throw std::runtime_error("libvulkan.so.1 could not be opened");
  gipa_ = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib_, "vkGetInstanceProcAddr"));
  if (gipa_ == nullptr) throw std::runtime_error("no vkGetInstanceProcAddr");
  auto create_instance = reinterpret_cast<PFN_vkCreateInstance>(gipa_(VK_NULL_HANDLE, "vkCreateInstance"));
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ici.pApplicationInfo = &app;
  vkc(create_instance(&ici, nullptr, &instance_), "vkCreateInstance");
  auto ifn = [&](const char* name) {
    auto f = gipa_(instance_, name);
    if (f == nullptr) throw std::runtime_error(std::string("no ") + name);
    return f;
  };
  destroy_instance_ = reinterpret_cast<PFN_vkDestroyInstance>(ifn("vkDestroyInstance"));
  auto enumerate = reinterpret_cast<PFN_vkEnumeratePhysicalDevices>(ifn("vkEnumeratePhysicalDevices"));
  auto props_of = reinterpret_cast<PFN_vkGetPhysicalDeviceProperties>(ifn("vkGetPhysicalDeviceProperties"));
  auto mem_props_of =
      reinterpret_cast<PFN_vkGetPhysicalDeviceMemoryProperties>(ifn("vkGetPhysicalDeviceMemoryProperties"));
  auto families_of =
      reinterpret_cast<PFN_vkGetPhysicalDeviceQueueFamilyProperties>(ifn("vkGetPhysicalDeviceQueueFamilyProperties"));
  auto create_device = reinterpret_cast<PFN_vkCreateDevice>(ifn("vkCreateDevice"));
  get_device_proc_ = reinterpret_cast<PFN_vkGetDeviceProcAddr>(ifn("vkGetDeviceProcAddr"));

  std::uint32_t n = 0;
  vkc(enumerate(instance_, &n, nullptr), "vkEnumeratePhysicalDevices");
  std::vector<VkPhysicalDevice> devices(n);
  vkc(enumerate(instance_, &n, devices.data()), "vkEnumeratePhysicalDevices");
  if (n == 0) throw std::runtime_error("no Vulkan device");
  if (opt_.device < 0) {  // the first that is not a CPU implementation (llvmpipe), else 0
    opt_.device = 0;
    for (std::uint32_t d = n; d-- > 0;) {
      VkPhysicalDeviceProperties p{};
      props_of(devices[d], &p);
      if (p.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU) opt_.device = static_cast<int>(d);
    }
  }
  if (static_cast<std::uint32_t>(opt_.device) >= n) {
    throw std::runtime_error("no Vulkan device " + std::to_string(opt_.device) + " (" + std::to_string(n) + " devices)");
  }
  VkPhysicalDevice physical = devices[static_cast<std::size_t>(opt_.device)];
  VkPhysicalDeviceProperties props{};
  props_of(physical, &props);
  std::printf("device %d: %s  driver version 0x%x  api %u.%u.%u\n", opt_.device, props.deviceName, props.driverVersion,
              VK_API_VERSION_MAJOR(props.apiVersion), VK_API_VERSION_MINOR(props.apiVersion),
              VK_API_VERSION_PATCH(props.apiVersion));

  families_of(physical, &n, nullptr);
  std::vector<VkQueueFamilyProperties> families(n);
  families_of(physical, &n, families.data());
  std::uint32_t transfer = n, compute = n, graphics = n;
  for (std::uint32_t f = 0; f < n; ++f) {
    const VkQueueFlags fl = families[f].queueFlags;
    std::printf("queue family %u: %u queue(s)%s%s%s%s  timestampValidBits %u\n", f, families[f].queueCount,
                fl & VK_QUEUE_GRAPHICS_BIT ? " graphics" : "", fl & VK_QUEUE_COMPUTE_BIT ? " compute" : "",
                fl & VK_QUEUE_TRANSFER_BIT ? " transfer" : "", fl & VK_QUEUE_SPARSE_BINDING_BIT ? " sparse" : "",
                families[f].timestampValidBits);
    const bool gc = fl & (VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT);
    if (!gc && (fl & VK_QUEUE_TRANSFER_BIT) && transfer == n) transfer = f;
    if ((fl & VK_QUEUE_COMPUTE_BIT) && !(fl & VK_QUEUE_GRAPHICS_BIT) && compute == n) compute = f;
    if ((fl & VK_QUEUE_GRAPHICS_BIT) && graphics == n) graphics = f;
  }
  if (transfer == n) {  // no transfer-only family: the bulk goes on the first family that copies
    for (std::uint32_t f = 0; f < n && transfer == n; ++f) {
      if (families[f].queueFlags & (VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT | VK_QUEUE_TRANSFER_BIT)) transfer = f;
    }
    if (transfer == n) throw std::runtime_error("no queue family that copies");
    std::printf("no transfer-only queue family: the bulk's family is %u\n", transfer);
  }
  const float priorities[2] = {1.0f, 1.0f};
  std::vector<VkDeviceQueueCreateInfo> qi;
  auto want = [&](std::uint32_t f, std::uint32_t count) {
    VkDeviceQueueCreateInfo q{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    q.queueFamilyIndex = f;
    q.queueCount = std::min(count, families[f].queueCount);
    q.pQueuePriorities = priorities;
    qi.push_back(q);
    return q.queueCount;
  };
  const std::uint32_t transfer_queues = want(transfer, 2);
  if (compute != n && compute != transfer) want(compute, 1);
  if (graphics != n && graphics != transfer && graphics != compute) want(graphics, 1);
  VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  di.queueCreateInfoCount = static_cast<std::uint32_t>(qi.size());
  di.pQueueCreateInfos = qi.data();
  vkc(create_device(physical, &di, nullptr, &device_), "vkCreateDevice");
  destroy_device_ = dfn<PFN_vkDestroyDevice>("vkDestroyDevice");
  wait_idle_ = dfn<PFN_vkDeviceWaitIdle>("vkDeviceWaitIdle");
  queue_submit_ = dfn<PFN_vkQueueSubmit>("vkQueueSubmit");
  get_fence_status_ = dfn<PFN_vkGetFenceStatus>("vkGetFenceStatus");
  reset_fences_ = dfn<PFN_vkResetFences>("vkResetFences");
  create_fence_ = dfn<PFN_vkCreateFence>("vkCreateFence");
  destroy_fence_ = dfn<PFN_vkDestroyFence>("vkDestroyFence");
  alloc_cbs_ = dfn<PFN_vkAllocateCommandBuffers>("vkAllocateCommandBuffers");
  begin_cb_ = dfn<PFN_vkBeginCommandBuffer>("vkBeginCommandBuffer");
  end_cb_ = dfn<PFN_vkEndCommandBuffer>("vkEndCommandBuffer");
  cmd_copy_ = dfn<PFN_vkCmdCopyBuffer>("vkCmdCopyBuffer");
  free_cbs_ = dfn<PFN_vkFreeCommandBuffers>("vkFreeCommandBuffers");
  destroy_pool_ = dfn<PFN_vkDestroyCommandPool>("vkDestroyCommandPool");
  destroy_buffer_ = dfn<PFN_vkDestroyBuffer>("vkDestroyBuffer");
  free_memory_ = dfn<PFN_vkFreeMemory>("vkFreeMemory");
  auto get_queue = dfn<PFN_vkGetDeviceQueue>("vkGetDeviceQueue");
  auto create_pool = dfn<PFN_vkCreateCommandPool>("vkCreateCommandPool");
  auto create_buffer = dfn<PFN_vkCreateBuffer>("vkCreateBuffer");
  auto requirements = dfn<PFN_vkGetBufferMemoryRequirements>("vkGetBufferMemoryRequirements");
  auto allocate = dfn<PFN_vkAllocateMemory>("vkAllocateMemory");
  auto bind = dfn<PFN_vkBindBufferMemory>("vkBindBufferMemory");
  auto map = dfn<PFN_vkMapMemory>("vkMapMemory");

  auto set_queue = [&](Q which, std::uint32_t f, std::uint32_t index) {
    Queue& q = queues_[which];
    q.family = f;
    q.index = index;
    q.present = true;
    // A family that is the bulk's own gets the bulk's queue, and its lock.
    q.lock = f == transfer && index == 0 ? &locks_[kSame] : &locks_[which];
    get_queue(device_, f, index, &q.queue);
  };
  set_queue(kSame, transfer, 0);
  if (transfer_queues >= 2) set_queue(kTq1, transfer, 1);
  if (compute != n) set_queue(kCompute, compute, 0);
  if (graphics != n) set_queue(kGraphics, graphics, 0);
  for (const Queue& q : queues_) {
    if (!q.present || std::any_of(pools_.begin(), pools_.end(), [&](auto& p) { return p.first == q.family; })) continue;
    VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pci.queueFamilyIndex = q.family;
    VkCommandPool pool = VK_NULL_HANDLE;
    vkc(create_pool(device_, &pci, nullptr, &pool), "vkCreateCommandPool");
    pools_.emplace_back(q.family, pool);
  }
  std::printf("bulk on family %u queue 0; tq1: %s; compute family: %s; graphics family: %s\n", transfer,
              queues_[kTq1].present ? "yes" : "no (one transfer queue)",
              compute != n ? std::to_string(compute).c_str() : "none",
              graphics != n ? std::to_string(graphics).c_str() : "none");

  VkPhysicalDeviceMemoryProperties mp{};
  mem_props_of(physical, &mp);
  auto make = [&](std::uint64_t size, VkBufferUsageFlags usage, bool host, void** mapped) {
    VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    bci.size = size;
    bci.usage = usage;
    bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;  // no ownership transfers: contents do not matter
    VkBuffer b = VK_NULL_HANDLE;
    vkc(create_buffer(device_, &bci, nullptr, &b), "vkCreateBuffer");
    buffers_.push_back(b);
    VkMemoryRequirements req{};
    requirements(device_, b, &req);
    // Host: host-visible coherent system memory (not device-local); device: device-local.
    std::uint32_t type = mp.memoryTypeCount;
    for (int pass = 0; pass < 2 && type == mp.memoryTypeCount; ++pass) {
      for (std::uint32_t t = 0; t < mp.memoryTypeCount; ++t) {
        const VkMemoryPropertyFlags fl = mp.memoryTypes[t].propertyFlags;
        const bool ok = host ? (fl & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) && (fl & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) &&
                                   (pass == 1 || !(fl & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT))
                             : (fl & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) != 0;
        if (ok && (req.memoryTypeBits & (1u << t))) {
          type = t;
          break;
        }
      }
    }
    if (type == mp.memoryTypeCount) throw std::runtime_error("no suitable memory type");
    VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    ai.allocationSize = req.size;
    ai.memoryTypeIndex = type;
    VkDeviceMemory m = VK_NULL_HANDLE;
    vkc(allocate(device_, &ai, nullptr, &m), "vkAllocateMemory");
    memories_.push_back(m);
    vkc(bind(device_, b, m, 0), "vkBindBufferMemory");
    if (mapped) vkc(map(device_, m, 0, VK_WHOLE_SIZE, 0, mapped), "vkMapMemory");
    return b;
  };
  void* p = nullptr;
  host_bulk_ = make(opt_.bulk, VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, true, &p);
  std::memset(p, 0x5a, opt_.bulk);
  dev_bulk_ = make(opt_.bulk, VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, false, nullptr);
  host_urgent_ = make(opt_.urgent, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, true, &p);
  std::memset(p, 0x3c, opt_.urgent);
  dev_urgent_ = make(opt_.urgent, VK_BUFFER_USAGE_TRANSFER_DST_BIT, false, nullptr);
  for (int q = 0; q < kQueues; ++q) {
    if (queues_[q].present) {
      urgent_cb_[q] = record(queues_[q].family, host_urgent_, dev_urgent_, 0, 0, opt_.urgent, true);
    }
  }
  urgent_fences_.resize(1024);
  for (auto& f : urgent_fences_) f = fence();
}

VkCommandBuffer Probe::record(std::uint32_t family, VkBuffer src, VkBuffer dst, std::uint64_t src_off,
                              std::uint64_t dst_off, std::uint64_t len, bool simultaneous) {
  VkCommandPool pool = VK_NULL_HANDLE;
  for (auto& p : pools_) {
    if (p.first == family) pool = p.second;
  }
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = pool;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VkCommandBuffer cb = VK_NULL_HANDLE;
  vkc(alloc_cbs_(device_, &ai, &cb), "vkAllocateCommandBuffers");
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = simultaneous ? VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT : 0;
  vkc(begin_cb_(cb, &bi), "vkBeginCommandBuffer");
  VkBufferCopy region{src_off, dst_off, len};
  cmd_copy_(cb, src, dst, 1, &region);
  vkc(end_cb_(cb), "vkEndCommandBuffer");
  return cb;
}

VkFence Probe::fence() {
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VkFence f = VK_NULL_HANDLE;
  vkc(create_fence_(device_, &fci, nullptr, &f), "vkCreateFence");
  fences_.push_back(f);
  return f;
}

void Probe::submit(Queue& q, VkCommandBuffer cb, VkFence f) {
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  std::lock_guard<std::mutex> g(*q.lock);
  vkc(queue_submit_(q.queue, 1, &si, f), "vkQueueSubmit");
}

// Issues urgent copies on `q` every period: `count` of them without a bulk, else until
// *bulk_done. A poller thread spins on the oldest outstanding fence (one queue: in order).
void Probe::urgent_loop(Queue& q, const std::atomic<bool>* bulk_done, int count, std::vector<double>& out) {
  const std::uint64_t pool = urgent_fences_.size();
  std::vector<Clock::time_point> t0(pool);
  std::atomic<std::uint64_t> issued{0}, completed{0};
  std::atomic<bool> issuing_done{false}, abort{false};
  std::exception_ptr poll_error;
  const VkCommandBuffer cb = urgent_cb_[&q - queues_];
  std::thread poller([&] {
    try {
      std::uint64_t c = 0;
      while (!abort.load(std::memory_order_acquire)) {
        if (c < issued.load(std::memory_order_acquire)) {
          while (!signaled(urgent_fences_[c % pool])) {
          }
          const auto t1 = Clock::now();
          out.push_back(us_between(t0[c % pool], t1));
          completed.store(++c, std::memory_order_release);
        } else if (issuing_done.load(std::memory_order_acquire) && c == issued.load(std::memory_order_acquire)) {
          break;
        }
      }
    } catch (...) {
      poll_error = std::current_exception();
      abort.store(true, std::memory_order_release);
    }
  });
  try {
    const auto period = std::chrono::microseconds(opt_.period_us);
    auto next = Clock::now();
    for (std::uint64_t i = 0; bulk_done ? true : i < static_cast<std::uint64_t>(count); ++i) {
      std::this_thread::sleep_until(next);
      if (abort.load(std::memory_order_acquire)) break;
      if (bulk_done && bulk_done->load(std::memory_order_acquire)) break;
      while (i - completed.load(std::memory_order_acquire) >= pool && !abort.load(std::memory_order_acquire)) {
      }
      const std::uint64_t slot = i % pool;
      vkc(reset_fences_(device_, 1, &urgent_fences_[slot]), "vkResetFences");
      t0[slot] = Clock::now();
      next = t0[slot] + period;
      submit(q, cb, urgent_fences_[slot]);
      issued.store(i + 1, std::memory_order_release);
    }
  } catch (...) {
    abort.store(true, std::memory_order_release);
    poller.join();
    throw;
  }
  issuing_done.store(true, std::memory_order_release);
  poller.join();
  if (poll_error) std::rethrow_exception(poll_error);
}

void Probe::row(const std::string& name) {
  // BULK-URGENT or alone-QUEUE.
  const std::size_t dash = name.rfind('-');
  if (dash == std::string::npos) throw std::runtime_error("bad row '" + name + "'");
  const std::string bulk = name.substr(0, dash), urgent = name.substr(dash + 1);
  int uq = -1;
  for (int q = 0; q < kQueues; ++q) {
    if (urgent == kQueueNames[q]) uq = q;
  }
  if (uq < 0 && urgent != "alone") throw std::runtime_error("bad row '" + name + "': same, tq1, compute, graphics or alone");
  std::uint64_t chunk = opt_.bulk;
  if (bulk == "split" || (bulk != "whole" && bulk != "alone" && bulk.rfind("split-", 0) != 0)) {
    throw std::runtime_error("bad row '" + name + "': whole, split-N or alone");
  }
  if (bulk.rfind("split-", 0) == 0) chunk = static_cast<std::uint64_t>(std::max(1, parse_int(bulk.substr(6)))) << 20;
  if (uq >= 0 && !queues_[uq].present) {
    std::printf("%-22s SKIPPED: no %s queue\n", name.c_str(), urgent.c_str());
    return;
  }
  std::vector<double> lat, gbps;
  if (bulk == "alone") {
    if (uq < 0) throw std::runtime_error("bad row '" + name + "'");
    urgent_loop(queues_[uq], nullptr, opt_.alone_copies, lat);
  } else {
    Queue& bq = queues_[kSame];
    std::vector<VkCommandBuffer> cbs;
    std::vector<VkFence> fs;
    for (std::uint64_t off = 0; off < opt_.bulk; off += chunk) {
      cbs.push_back(record(bq.family, host_bulk_, dev_bulk_, off, off, std::min(chunk, opt_.bulk - off), false));
      fs.push_back(VK_NULL_HANDLE);
    }
    VkFence last = fence();
    fs.back() = last;
    for (int rep = 0; rep < opt_.reps; ++rep) {
      vkc(wait_idle_(device_), "vkDeviceWaitIdle");
      vkc(reset_fences_(device_, 1, &last), "vkResetFences");
      std::atomic<bool> done{false};
      std::exception_ptr urgent_error;
      std::thread ut;
      const auto t0 = Clock::now();
      for (std::size_t i = 0; i < cbs.size(); ++i) {
        submit(bq, cbs[i], fs[i]);
        if (i == 0 && uq >= 0) {
          ut = std::thread([&] {
            try {
              urgent_loop(queues_[uq], &done, 0, lat);
            } catch (...) {
              urgent_error = std::current_exception();
            }
          });
        }
      }
      try {
        while (!signaled(last)) {
        }
      } catch (...) {
        done.store(true);
        if (ut.joinable()) ut.join();
        throw;
      }
      const auto t1 = Clock::now();
      done.store(true, std::memory_order_release);
      if (ut.joinable()) ut.join();
      if (urgent_error) std::rethrow_exception(urgent_error);
      gbps.push_back(static_cast<double>(opt_.bulk) / (us_between(t0, t1) * 1e3));
    }
    vkc(wait_idle_(device_), "vkDeviceWaitIdle");
    VkCommandPool pool = VK_NULL_HANDLE;
    for (auto& p : pools_) {
      if (p.first == bq.family) pool = p.second;
    }
    free_cbs_(device_, pool, static_cast<std::uint32_t>(cbs.size()), cbs.data());
  }
  const double g = median(gbps);
  if (name == "whole-alone" && whole_alone_gbps_ == 0) whole_alone_gbps_ = g;
  std::printf("%-22s %6zu %10.1f %10.1f %10.1f", name.c_str(), lat.size(), quantile(lat, 0.5), quantile(lat, 0.99),
              lat.empty() ? 0.0 : *std::max_element(lat.begin(), lat.end()));
  if (gbps.empty()) std::printf(" %8s %6s\n", "-", "-");
  else std::printf(" %8.2f %6.3f\n", g, whole_alone_gbps_ > 0 ? g / whole_alone_gbps_ : 0.0);
  std::fflush(stdout);
}

void Probe::run() {
  const std::vector<std::string> rows = parse_list<std::string>(opt_.rows, [](const std::string& s) { return s; });
  open();
  std::printf("bulk %llu MiB, urgent %llu KiB every %d us, %d reps per row\n",
              static_cast<unsigned long long>(opt_.bulk >> 20), static_cast<unsigned long long>(opt_.urgent >> 10),
              opt_.period_us, opt_.reps);
  std::printf("%-22s %6s %10s %10s %10s %8s %6s\n", "row", "n", "p50-us", "p99-us", "max-us", "GB/s", "vs");
  for (const auto& r : rows) row(r);
  std::printf("vs = GB/s / whole-alone (0 until whole-alone has run)\n");
}

void usage(const char* argv0) {
  std::printf(
      "usage: %s [options]\n"
      "Latency of a small urgent Vulkan copy while a bulk copy runs on the transfer family's queue 0.\n"
      "  --device N         Vulkan physical device index (default: the first that is not a CPU)\n"
      "  --bulk-mib N       bulk size in MiB (default 4096)\n"
      "  --urgent-kib N     urgent copy size in KiB (default 64)\n"
      "  --period-us N      one urgent copy every N us (default 500)\n"
      "  --reps N           bulk repetitions per row, urgent samples pooled (default 3)\n"
      "  --alone-copies N   urgent copies in the alone rows (default 200)\n"
      "  --rows LIST        BULK-URGENT rows: BULK whole|split-N|alone, URGENT same|tq1|compute|\n"
      "                     graphics|alone (default %s)\n"
      "A family that is the bulk's own (say, graphics on a device with no transfer-only family)\n"
      "still gets its own queue index 0, shared with the bulk: the row then measures the same queue.\n",
      argv0, Options{}.rows.c_str());
}

Options parse_options(int argc, char** argv) {
  Options o;
  probe::Args args(argc, argv);
  auto positive = [](const std::string& s) { return std::max(1, parse_int(s)); };
  while (args.next()) {
    const std::string& a = args.flag();
    if (a == "--help" || a == "-h") {
      usage(args.program());
      std::exit(0);
    } else if (a == "--device") {
      o.device = parse_int(args.value());
    } else if (a == "--bulk-mib") {
      o.bulk = static_cast<std::uint64_t>(positive(args.value())) << 20;
    } else if (a == "--urgent-kib") {
      o.urgent = static_cast<std::uint64_t>(positive(args.value())) << 10;
    } else if (a == "--period-us") {
      o.period_us = positive(args.value());
    } else if (a == "--reps") {
      o.reps = positive(args.value());
    } else if (a == "--alone-copies") {
      o.alone_copies = positive(args.value());
    } else if (a == "--rows") {
      o.rows = args.value();
    } else {
      throw std::runtime_error("unknown option " + a + " (see --help)");
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  return probe::guarded_main(
      "ferry-probe-contention-vk",
      [](int c, char** v) {
        Probe p(parse_options(c, v));
        p.run();
        return 0;
      },
      argc, argv);
}
