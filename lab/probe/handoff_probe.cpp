// SPDX-License-Identifier: MIT
// ferry-probe-handoff: an experiment, not part of ferry. What one hand-off between two queues
// costs on the device, raw and through ferry. A chain of N rounds is enqueued up front, each
// round one queue signalling a timeline that the other waits for and answering on the same
// timeline; the host times the chain from the first enqueue to its end, so a hand-off costs
// (wall time - enqueue time) / (2 N) at most, with no copies or kernels in the way.
//
//  - raw Vulkan -> CUDA -> Vulkan: a Vulkan timeline semaphore exported as an opaque fd and
//    imported into CUDA (cudaImportExternalSemaphore); empty vkQueueSubmits on a queue of
//    each family that can copy or compute wait for and signal it, a CUDA stream answers with
//    cudaWaitExternalSemaphoresAsync / cudaSignalExternalSemaphoresAsync. This is the hand-off
//    of the cuda_vulkan and vulkan_cuda pairs with nothing of ferry's in it.
//  - raw CUDA stream -> stream (events) and raw Vulkan queue -> queue (one timeline) as the
//    same-API references.
//  - ferry: Queue::signal / Queue::wait between the compute and the transfer queue of each
//    backend named (the pairs: one Vulkan queue, one CUDA stream).
//
//   ferry-probe-handoff [--rounds N] [--backends LIST]   (default 200; cuda,vulkan,cuda_vulkan)
#include <cuda_runtime_api.h>
#include <dlfcn.h>
// Vulkan's structures are filled by designated sType and the fields set after it.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <unistd.h>
#include <vulkan/vulkan.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"
#include "probe_util.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

void cu(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void vkc(VkResult r, const char* what) {
  if (r != VK_SUCCESS) throw std::runtime_error(std::string(what) + " failed: VkResult " + std::to_string(r));
}

struct Result {
  double enqueue_us = 0, wall_us = 0;
  int handoffs = 0;
  void print(const char* what) const {
    std::printf("%-58s %8.1f us per hand-off (chain %.0f us, enqueue %.0f us, %d hand-offs)\n", what,
                (wall_us) / handoffs, wall_us, enqueue_us, handoffs);
  }
};

/// The raw Vulkan side: an instance, the physical device that is CUDA device 0, a device with
/// one or two queues and external timeline semaphores. Destroys what it made on every path.
class RawVulkan {
 public:
  RawVulkan() {
    lib_ = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) throw std::runtime_error("libvulkan.so.1 could not be opened");
    gipa_ = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib_, "vkGetInstanceProcAddr"));
    if (gipa_ == nullptr) throw std::runtime_error("no vkGetInstanceProcAddr");
    try {
      open();
    } catch (...) {
      close();
      throw;
    }
  }
  RawVulkan(const RawVulkan&) = delete;
  RawVulkan& operator=(const RawVulkan&) = delete;
  ~RawVulkan() { close(); }

  VkSemaphore timeline(bool exportable) {
    VkExportSemaphoreCreateInfo ex{VK_STRUCTURE_TYPE_EXPORT_SEMAPHORE_CREATE_INFO};
    ex.handleTypes = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT;
    VkSemaphoreTypeCreateInfo type{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO, exportable ? &ex : nullptr};
    type.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
    VkSemaphoreCreateInfo ci{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, &type};
    VkSemaphore s = VK_NULL_HANDLE;
    vkc(create_semaphore_(device_, &ci, nullptr, &s), "vkCreateSemaphore");
    semaphores_.push_back(s);
    return s;
  }
  int export_fd(VkSemaphore s) {
    VkSemaphoreGetFdInfoKHR gi{VK_STRUCTURE_TYPE_SEMAPHORE_GET_FD_INFO_KHR};
    gi.semaphore = s;
    gi.handleType = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT;
    int fd = -1;
    vkc(get_fd_(device_, &gi, &fd), "vkGetSemaphoreFdKHR");
    return fd;
  }
  /// An empty submission on queue `q` (0 or 1): waits for `wait` (0 = none), signals `signal`.
  void submit(int q, VkSemaphore s, std::uint64_t wait, std::uint64_t signal) {
    submit_on(queues_[q], s, wait, signal);
  }
  void submit_on(VkQueue queue, VkSemaphore s, std::uint64_t wait, std::uint64_t signal) {
    submit_on(queue, s, wait, s, signal);
  }
  /// An empty submission: waits for `wait` of `ws` (0 = none), signals `signal` of `ss`.
  void submit_on(VkQueue queue, VkSemaphore ws, std::uint64_t wait, VkSemaphore ss, std::uint64_t signal) {
    VkTimelineSemaphoreSubmitInfo t{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO, &t};
    const VkPipelineStageFlags stage = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
    if (wait > 0) {
      si.waitSemaphoreCount = 1;
      si.pWaitSemaphores = &ws;
      si.pWaitDstStageMask = &stage;
      t.waitSemaphoreValueCount = 1;
      t.pWaitSemaphoreValues = &wait;
    }
    si.signalSemaphoreCount = 1;
    si.pSignalSemaphores = &ss;
    t.signalSemaphoreValueCount = 1;
    t.pSignalSemaphoreValues = &signal;
    vkc(queue_submit_(queue, 1, &si, VK_NULL_HANDLE), "vkQueueSubmit");
  }
  void host_wait(VkSemaphore s, std::uint64_t value) {
    VkSemaphoreWaitInfo wi{VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO};
    wi.semaphoreCount = 1;
    wi.pSemaphores = &s;
    wi.pValues = &value;
    vkc(wait_semaphores_(device_, &wi, 60'000'000'000ull), "vkWaitSemaphores");
  }
  [[nodiscard]] bool two_queues() const { return queues_[1] != VK_NULL_HANDLE; }
  /// The queues made, one per family that can copy or compute.
  [[nodiscard]] std::size_t families() const { return family_queues_.size(); }
  [[nodiscard]] VkQueue family_queue(std::size_t i) const { return family_queues_[i]; }
  [[nodiscard]] std::uint32_t family_index(std::size_t i) const { return family_index_[i]; }
  [[nodiscard]] std::string family_text(std::size_t i) const {
    std::string t;
    if (family_flags_[i] & VK_QUEUE_GRAPHICS_BIT) t += "graphics+";
    if (family_flags_[i] & VK_QUEUE_COMPUTE_BIT) t += "compute+";
    if (family_flags_[i] & VK_QUEUE_TRANSFER_BIT) t += "transfer+";
    if (!t.empty()) t.pop_back();
    return t;
  }
  void idle() { vkc(device_wait_idle_(device_), "vkDeviceWaitIdle"); }

 private:
  template <class F>
  F instance_fn(const char* name) {
    auto f = reinterpret_cast<F>(gipa_(instance_, name));
    if (f == nullptr) throw std::runtime_error(std::string("no ") + name);
    return f;
  }
  template <class F>
  F device_fn(const char* name) {
    auto f = reinterpret_cast<F>(get_device_proc_(device_, name));
    if (f == nullptr) throw std::runtime_error(std::string("no ") + name);
    return f;
  }

  void open() {
    auto create_instance = reinterpret_cast<PFN_vkCreateInstance>(gipa_(VK_NULL_HANDLE, "vkCreateInstance"));
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.apiVersion = VK_API_VERSION_1_2;
    VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ici.pApplicationInfo = &app;
    vkc(create_instance(&ici, nullptr, &instance_), "vkCreateInstance");
    destroy_instance_ = instance_fn<PFN_vkDestroyInstance>("vkDestroyInstance");
    auto enumerate = instance_fn<PFN_vkEnumeratePhysicalDevices>("vkEnumeratePhysicalDevices");
    auto props2 = instance_fn<PFN_vkGetPhysicalDeviceProperties2>("vkGetPhysicalDeviceProperties2");
    auto families_of =
        instance_fn<PFN_vkGetPhysicalDeviceQueueFamilyProperties>("vkGetPhysicalDeviceQueueFamilyProperties");
    auto create_device = instance_fn<PFN_vkCreateDevice>("vkCreateDevice");
    get_device_proc_ = instance_fn<PFN_vkGetDeviceProcAddr>("vkGetDeviceProcAddr");

    cudaDeviceProp prop{};
    cu(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    std::uint32_t n = 0;
    vkc(enumerate(instance_, &n, nullptr), "vkEnumeratePhysicalDevices");
    std::vector<VkPhysicalDevice> devices(n);
    vkc(enumerate(instance_, &n, devices.data()), "vkEnumeratePhysicalDevices");
    VkPhysicalDevice physical = VK_NULL_HANDLE;
    for (VkPhysicalDevice d : devices) {
      VkPhysicalDeviceIDProperties id{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES};
      VkPhysicalDeviceProperties2 p{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &id};
      props2(d, &p);
      if (std::memcmp(id.deviceUUID, prop.uuid.bytes, VK_UUID_SIZE) == 0) physical = d;
    }
    if (physical == VK_NULL_HANDLE) throw std::runtime_error("no Vulkan device is CUDA device 0");

    families_of(physical, &n, nullptr);
    std::vector<VkQueueFamilyProperties> families(n);
    families_of(physical, &n, families.data());
    // One queue of every family that can copy or compute: the first compute family's is queue
    // 0, the first other family's queue 1, every family's in families_.
    const float priority = 1.0f;
    std::vector<VkDeviceQueueCreateInfo> qi;
    for (std::uint32_t f = 0; f < n; ++f) {
      if (!(families[f].queueFlags & (VK_QUEUE_TRANSFER_BIT | VK_QUEUE_COMPUTE_BIT))) continue;
      VkDeviceQueueCreateInfo q{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
      q.queueFamilyIndex = f;
      q.queueCount = 1;
      q.pQueuePriorities = &priority;
      qi.push_back(q);
      family_flags_.push_back(families[f].queueFlags);
    }
    std::uint32_t compute = n, other = n;
    for (const auto& q : qi) {
      if ((families[q.queueFamilyIndex].queueFlags & VK_QUEUE_COMPUTE_BIT) && compute == n) compute = q.queueFamilyIndex;
    }
    for (const auto& q : qi) {
      if (q.queueFamilyIndex != compute && other == n) other = q.queueFamilyIndex;
    }
    if (compute == n) throw std::runtime_error("no compute queue family");
    VkPhysicalDeviceVulkan12Features v12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    v12.timelineSemaphore = VK_TRUE;
    const char* extensions[] = {VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME};
    VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, &v12};
    di.queueCreateInfoCount = static_cast<std::uint32_t>(qi.size());
    di.pQueueCreateInfos = qi.data();
    di.enabledExtensionCount = 1;
    di.ppEnabledExtensionNames = extensions;
    vkc(create_device(physical, &di, nullptr, &device_), "vkCreateDevice");
    destroy_device_ = device_fn<PFN_vkDestroyDevice>("vkDestroyDevice");
    auto get_queue = device_fn<PFN_vkGetDeviceQueue>("vkGetDeviceQueue");
    create_semaphore_ = device_fn<PFN_vkCreateSemaphore>("vkCreateSemaphore");
    destroy_semaphore_ = device_fn<PFN_vkDestroySemaphore>("vkDestroySemaphore");
    get_fd_ = device_fn<PFN_vkGetSemaphoreFdKHR>("vkGetSemaphoreFdKHR");
    queue_submit_ = device_fn<PFN_vkQueueSubmit>("vkQueueSubmit");
    wait_semaphores_ = device_fn<PFN_vkWaitSemaphores>("vkWaitSemaphores");
    device_wait_idle_ = device_fn<PFN_vkDeviceWaitIdle>("vkDeviceWaitIdle");
    get_queue(device_, compute, 0, &queues_[0]);
    if (other != n) get_queue(device_, other, 0, &queues_[1]);
    for (const auto& q : qi) {
      VkQueue queue = VK_NULL_HANDLE;
      get_queue(device_, q.queueFamilyIndex, 0, &queue);
      family_queues_.push_back(queue);
      family_index_.push_back(q.queueFamilyIndex);
    }
  }

  void close() noexcept {
    if (device_ != VK_NULL_HANDLE) {
      if (device_wait_idle_ != nullptr) (void)device_wait_idle_(device_);
      for (VkSemaphore s : semaphores_) destroy_semaphore_(device_, s, nullptr);
      if (destroy_device_ != nullptr) destroy_device_(device_, nullptr);
    }
    if (instance_ != VK_NULL_HANDLE && destroy_instance_ != nullptr) destroy_instance_(instance_, nullptr);
    if (lib_ != nullptr) dlclose(lib_);
  }

  void* lib_ = nullptr;
  PFN_vkGetInstanceProcAddr gipa_ = nullptr;
  PFN_vkGetDeviceProcAddr get_device_proc_ = nullptr;
  PFN_vkDestroyInstance destroy_instance_ = nullptr;
  PFN_vkDestroyDevice destroy_device_ = nullptr;
  PFN_vkCreateSemaphore create_semaphore_ = nullptr;
  PFN_vkDestroySemaphore destroy_semaphore_ = nullptr;
  PFN_vkGetSemaphoreFdKHR get_fd_ = nullptr;
  PFN_vkQueueSubmit queue_submit_ = nullptr;
  PFN_vkWaitSemaphores wait_semaphores_ = nullptr;
  PFN_vkDeviceWaitIdle device_wait_idle_ = nullptr;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queues_[2] = {VK_NULL_HANDLE, VK_NULL_HANDLE};
  std::vector<VkSemaphore> semaphores_;
  std::vector<VkQueue> family_queues_;
  std::vector<std::uint32_t> family_index_;
  std::vector<VkQueueFlags> family_flags_;
};

/// The CUDA side of an exported timeline: the import and a stream that waits for and
/// signals it. Destroys both on every path.
class CudaTimeline {
 public:
  CudaTimeline(RawVulkan& vk, VkSemaphore s) {
    cudaExternalSemaphoreHandleDesc desc{};
    desc.type = cudaExternalSemaphoreHandleTypeTimelineSemaphoreFd;
    desc.handle.fd = vk.export_fd(s);  // CUDA owns the fd once the import succeeds
    if (cudaError_t e = cudaImportExternalSemaphore(&ext_, &desc); e != cudaSuccess) {
      ::close(desc.handle.fd);
      cu(e, "cudaImportExternalSemaphore");
    }
    if (cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking); e != cudaSuccess) {
      (void)cudaDestroyExternalSemaphore(ext_);
      cu(e, "cudaStreamCreateWithFlags");
    }
  }
  CudaTimeline(const CudaTimeline&) = delete;
  CudaTimeline& operator=(const CudaTimeline&) = delete;
  // No synchronize here: on an error path the stream may wait for a value never signalled.
  ~CudaTimeline() {
    (void)cudaStreamDestroy(stream_);
    (void)cudaDestroyExternalSemaphore(ext_);
  }
  /// The stream waits for `value`, then signals `value + 1`.
  void answer(std::uint64_t value) {
    cudaExternalSemaphoreWaitParams wp{};
    wp.params.fence.value = value;
    cu(cudaWaitExternalSemaphoresAsync(&ext_, &wp, 1, stream_), "cudaWaitExternalSemaphoresAsync");
    cudaExternalSemaphoreSignalParams sp{};
    sp.params.fence.value = value + 1;
    cu(cudaSignalExternalSemaphoresAsync(&ext_, &sp, 1, stream_), "cudaSignalExternalSemaphoresAsync");
  }
  void synchronize() { cu(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  cudaExternalSemaphore_t ext_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

/// Vulkan -> CUDA -> Vulkan through one exported timeline. The chain starts and ends on the
/// Vulkan queue, so the host waits on a value Vulkan itself signals.
Result raw_cross_api(RawVulkan& vk, VkQueue queue, int rounds) {
  const VkSemaphore s = vk.timeline(true);
  CudaTimeline cuda(vk, s);
  Result r;
  const auto t0 = clock_type::now();
  std::uint64_t v = 0;
  for (int k = 0; k < rounds; ++k) {
    vk.submit_on(queue, s, v, v + 1);
    cuda.answer(v + 1);
    v += 2;
  }
  vk.submit_on(queue, s, v, v + 1);
  ++v;
  r.enqueue_us = us_since(t0);
  vk.host_wait(s, v);
  r.wall_us = us_since(t0);
  r.handoffs = 2 * rounds;
  cuda.synchronize();
  return r;
}

/// Vulkan queue `home` -> CUDA -> `home`, each crossing relayed by queue `relay`: home and
/// relay share a Vulkan-only timeline, relay and CUDA the exported one. What a relay through
/// a queue of a fast family would cost in place of home's own crossing.
Result raw_relayed(RawVulkan& vk, VkQueue home, VkQueue relay, int rounds) {
  const VkSemaphore local = vk.timeline(false), shared = vk.timeline(true);
  CudaTimeline cuda(vk, shared);
  Result r;
  const auto t0 = clock_type::now();
  std::uint64_t lv = 0, sv = 0;  // last values of the local and the shared timeline
  for (int k = 0; k < rounds; ++k) {
    vk.submit_on(home, local, lv, lv + 1);  // home's work, then hand to the relay
    ++lv;
    vk.submit_on(relay, local, lv, shared, sv + 1);  // relay: local -> shared
    ++sv;
    cuda.answer(sv);
    ++sv;
    vk.submit_on(relay, shared, sv, local, lv + 1);  // relay: shared -> local
    ++lv;
  }
  vk.submit_on(home, local, lv, lv + 1);
  ++lv;
  r.enqueue_us = us_since(t0);
  vk.host_wait(local, lv);
  r.wall_us = us_since(t0);
  r.handoffs = 2 * rounds;
  cuda.synchronize();
  return r;
}

/// Vulkan queue -> Vulkan queue (two families) through one timeline.
Result raw_vulkan(RawVulkan& vk, int rounds) {
  const VkSemaphore s = vk.timeline(false);
  const auto t0 = clock_type::now();
  std::uint64_t v = 0;
  for (int k = 0; k < 2 * rounds; ++k, ++v) vk.submit(k % 2, s, v, v + 1);
  vk.submit(0, s, v, v + 1);
  ++v;
  Result r;
  r.enqueue_us = us_since(t0);
  vk.host_wait(s, v);
  r.wall_us = us_since(t0);
  r.handoffs = 2 * rounds;
  return r;
}

/// CUDA stream -> stream through events.
Result raw_cuda(int rounds) {
  cudaStream_t st[2] = {nullptr, nullptr};
  std::vector<cudaEvent_t> events(2 * static_cast<std::size_t>(rounds), nullptr);
  Result r;
  auto cleanup = [&] {
    for (cudaEvent_t e : events) {
      if (e != nullptr) (void)cudaEventDestroy(e);
    }
    for (cudaStream_t s : st) {
      if (s != nullptr) (void)cudaStreamDestroy(s);
    }
  };
  try {
    for (cudaStream_t& s : st) cu(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    for (cudaEvent_t& e : events) cu(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    const auto t0 = clock_type::now();
    for (std::size_t k = 0; k < events.size(); ++k) {
      cudaStream_t s = st[k % 2];
      if (k > 0) cu(cudaStreamWaitEvent(s, events[k - 1], 0), "cudaStreamWaitEvent");
      cu(cudaEventRecord(events[k], s), "cudaEventRecord");
    }
    r.enqueue_us = us_since(t0);
    cu(cudaEventSynchronize(events.back()), "cudaEventSynchronize");
    r.wall_us = us_since(t0);
    r.handoffs = static_cast<int>(events.size()) - 1;
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
  return r;
}

/// The same chain through ferry: compute and transfer queue of `backend`, one ferry timeline.
Result through_ferry(ferry::Backend backend, int rounds) {
  ferry::DeviceOptions o;
  o.backend = backend;
  ferry::Device dev = ferry::Device::open(o);
  ferry::Queue a = dev.queue(ferry::QueueRole::compute);
  ferry::Queue b = dev.queue(ferry::QueueRole::transfer);
  ferry::TimelineSemaphore s = dev.create_semaphore();
  // One warm-up chain: the first waits and signals of a queue pay one-time setup.
  for (int pass = 0; pass < 2; ++pass) {
    const std::uint64_t base = s.value();
    const int n = pass == 0 ? 4 : rounds;
    const auto t0 = clock_type::now();
    std::uint64_t v = base;
    for (int k = 0; k < n; ++k) {
      if (v > base) a.wait(s.at(v));
      a.signal(s.at(v + 1));
      ++v;
      b.wait(s.at(v));
      b.signal(s.at(v + 1));
      ++v;
    }
    a.wait(s.at(v));
    a.signal(s.at(v + 1));
    ++v;
    Result r;
    r.enqueue_us = us_since(t0);
    s.wait(v, std::chrono::seconds(60));
    r.wall_us = us_since(t0);
    r.handoffs = 2 * n;
    if (pass == 1) return r;
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 200;
  std::string backends = "cuda,vulkan,cuda_vulkan";
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--rounds" && i + 1 < argc) {
        const std::uint64_t n = probe::parse_size(argv[++i]);
        if (n > 100000) throw std::runtime_error("--rounds: at most 100000");
        rounds = static_cast<int>(n);
      } else if (a == "--backends" && i + 1 < argc) {
        backends = argv[++i];
      } else {
        std::fprintf(stderr, "usage: ferry-probe-handoff [--rounds N] [--backends LIST]\n");
        return 2;
      }
    }
    std::printf("%d rounds, 2 hand-offs each; per hand-off = chain time / hand-offs\n", rounds);
    raw_cuda(rounds).print("raw CUDA stream -> stream (events)");
    {
      RawVulkan vk;
      if (vk.two_queues()) raw_vulkan(vk, rounds).print("raw Vulkan queue -> queue (one timeline)");
      for (std::size_t f = 0; f < vk.families(); ++f) {
        const std::string what = "raw Vulkan family " + std::to_string(vk.family_index(f)) + " (" +
                                 vk.family_text(f) + ") -> CUDA -> Vulkan";
        raw_cross_api(vk, vk.family_queue(f), rounds).print(what.c_str());
      }
      // The first family's crossings relayed by each other family's queue.
      for (std::size_t f = 1; f < vk.families(); ++f) {
        const std::string what = "raw Vulkan family " + std::to_string(vk.family_index(0)) + " -> CUDA -> back, via family " +
                                 std::to_string(vk.family_index(f));
        raw_relayed(vk, vk.family_queue(0), vk.family_queue(f), rounds).print(what.c_str());
      }
    }
    const std::vector<ferry::Backend> list =
        probe::parse_list<ferry::Backend>(backends, [](const std::string& n) { return ferry::parse_backend(n); });
    for (const ferry::Backend b : list) {
      const std::string name(ferry::to_string(b));
      through_ferry(b, rounds).print(("ferry " + name + ": compute queue <-> transfer queue").c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry-probe-handoff: %s\n", e.what());
    return 1;
  }
  return 0;
}
