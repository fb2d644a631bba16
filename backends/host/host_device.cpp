// SPDX-License-Identifier: MIT
// The host backend's device: process memory as device memory (segments, host memory, adopted
// ranges and images), the memory limit, queues and semaphores, peers, and the backend's
// descriptor.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "host/fault_layer.hpp"
#include "host/host_internal.hpp"

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

namespace ferry::detail::host_impl {

namespace {

constexpr std::size_t kPageAlignment = 4096;

// ---------------------------------------------------------------------------------------------
// Helpers

void* aligned_allocate(std::uint64_t bytes) noexcept {
  const std::uint64_t rounded = (bytes + kPageAlignment - 1) / kPageAlignment * kPageAlignment;
  if (rounded < bytes || rounded > SIZE_MAX) return nullptr;
#if defined(_WIN32)
  return _aligned_malloc(static_cast<std::size_t>(rounded), kPageAlignment);
#else
  return std::aligned_alloc(kPageAlignment, static_cast<std::size_t>(rounded));
#endif
}

void aligned_free(void* p) noexcept {
#if defined(_WIN32)
  _aligned_free(p);
#else
  std::free(p);
#endif
}

// Parse an environment variable as a non-negative integer. Unset/empty -> `fallback`;
// anything else that is not a plain non-negative number is an invalid_argument error.
std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-') {
    throw Error(ErrorCode::invalid_argument,
                std::string("host: environment variable ") + name + "='" + text +
                    "' is not a non-negative integer");
  }
  return v;
}

std::uint64_t physical_memory_bytes() noexcept {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
#endif
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Device

class HostDevice final : public BackendDevice {
 public:
  explicit HostDevice(const DeviceOptions& options) {
    std::uint64_t latency = options.host_latency_us >= 0
                                ? static_cast<std::uint64_t>(options.host_latency_us)
                                : env_number("FERRY_HOST_LATENCY_US", 0);
    latency = std::min<std::uint64_t>(latency, 10'000'000);  // cap at 10 s per operation
    latency_us_ = static_cast<std::uint32_t>(latency);
    memory_limit_ = env_number("FERRY_HOST_MEMORY_LIMIT", 0);
    const FaultPlan faults = parse_faults();
    if (faults.any()) faults_ = std::make_shared<FaultState>(faults);

    caps_.name = "ferry host reference (CPU)";
    caps_.backend = Backend::host;
    caps_.is_gpu = false;
    caps_.synthetic_compute = true;
    caps_.device_memory_bytes = memory_limit_ != 0 ? memory_limit_ : physical_memory_bytes();
    caps_.copy_engines = 3;  // one per direction (host_internal.hpp, "Copy engines")
    caps_.copy_priorities = true;
    caps_.copy_bytes_per_second = 10'000'000'000;
    caps_.dedicated_transfer_queue = true;
    caps_.separate_queue_families = false;
    caps_.ownership_transfer = false;
    caps_.host_memory_registration = true;
    caps_.host_memory_adoption = true;
    caps_.timeline_export = false;
    caps_.min_alignment = 256;
    caps_.max_allocation_bytes = memory_limit_;
    caps_.notes = latency_us_ > 0
                      ? "latency injection: 0.." + std::to_string(latency_us_) + " us per queued operation"
                      : std::string("latency injection off");
    if (memory_limit_ != 0) {
      caps_.notes += "; memory limit " + std::to_string(memory_limit_) + " bytes (FERRY_HOST_MEMORY_LIMIT)";
    }
    if (faults_) caps_.notes += "; fault injection: " + faults.text + " (" + kFaultsVariable + ")";

    compute_ = std::make_unique<HostQueue>(registry_, latency_us_, faults_);
    transfer_ = std::make_unique<HostQueue>(registry_, latency_us_, faults_);
  }

  [[nodiscard]] const Capabilities& capabilities() const override { return caps_; }

  BackendQueue& default_queue(QueueRole role) override {
    return role == QueueRole::transfer ? *transfer_ : *compute_;
  }

  std::unique_ptr<BackendQueue> create_queue(QueueRole /*role*/, int /*priority*/) override {
    return std::make_unique<HostQueue>(registry_, latency_us_, faults_);
  }

  std::unique_ptr<BackendQueue> adopt_queue(QueueRole /*role*/, const NativeQueue& /*native*/) override {
    throw Error(ErrorCode::unsupported, "host backend has no native queues to adopt");
  }

  std::unique_ptr<BackendSemaphore> create_semaphore(std::uint64_t initial) override {
    if (faults_) return std::make_unique<FaultSemaphore>(initial, faults_);
    return std::make_unique<HostSemaphore>(initial);
  }

  std::unique_ptr<Segment> allocate_segment(std::uint64_t bytes) override {
    if (faults_) faults_->allocate(bytes);  // throws an injected out_of_memory
    if (memory_limit_ != 0) {
      std::uint64_t used = used_.load();
      do {
        if (bytes > memory_limit_ || used > memory_limit_ - bytes) {
          throw Error(ErrorCode::out_of_memory,
                      "host: cannot allocate " + std::to_string(bytes) + " bytes (" +
                          std::to_string(used) + " of " + std::to_string(memory_limit_) +
                          " bytes in use, FERRY_HOST_MEMORY_LIMIT)",
                      "aligned_alloc");
        }
      } while (!used_.compare_exchange_weak(used, used + bytes));
    } else {
      used_.fetch_add(bytes);
    }
    void* p = aligned_allocate(bytes);
    if (p == nullptr) {
      used_.fetch_sub(bytes);
      throw Error(ErrorCode::out_of_memory, "host: cannot allocate " + std::to_string(bytes) + " bytes",
                  "aligned_alloc");
    }
    return pointer_segment(p, bytes);
  }

  void free_segment(std::unique_ptr<Segment> segment) override {
    if (!segment) return;
    aligned_free(segment->native);
    used_.fetch_sub(segment->size);
  }

  // Adopted memory is any host memory the caller names; nothing to register or check beyond
  // the pointer (the process's memory is the device's).
  AdoptedRange adopt_memory(const NativeMemory& native, std::uint64_t bytes) override {
    require_pointer_only(native, "host");
    return AdoptedRange{pointer_segment(reinterpret_cast<void*>(static_cast<std::uintptr_t>(native.pointer)), bytes), 0};
  }

  // A host image is the engine's memory in the reference layout; only its pitches can be
  // checked against the shape.
  std::unique_ptr<BackendImage> adopt_image(const NativeImage& native, const ImageDesc& desc,
                                            std::uint32_t /*owner_family*/) override {
    if (native.vulkan_image != 0 || native.vulkan_layout != 0 || native.vulkan_final_layout != 0 ||
        !native.vulkan_queue_families.empty() || native.vulkan_memory != 0 || native.vulkan_memory_offset != 0 ||
        native.vulkan_memory_size != 0 || native.vulkan_dedicated || native.vulkan_usage != 0 ||
        native.cuda_array != 0 || native.cuda_mipmapped) {
      throw Error(ErrorCode::invalid_argument,
                  "host: a host image is described by host_pointer and its pitches only (a Vulkan or CUDA field is set)",
                  {}, std::source_location{});
    }
    if (native.host_pointer == 0) {
      throw Error(ErrorCode::invalid_argument, "host: host_pointer is null", {}, std::source_location{});
    }
    const FormatInfo f = format_info(desc.format);
    const HostImageLevel tight = host_image_level(desc, 0);
    if (native.host_row_pitch != 0 && (native.host_row_pitch < tight.row_pitch || native.host_row_pitch % f.block_bytes != 0)) {
      throw Error(ErrorCode::invalid_argument,
                  "host: host_row_pitch " + std::to_string(native.host_row_pitch) + " must be 0 or a multiple of " +
                      std::to_string(f.block_bytes) + " bytes of at least the level-0 row's " +
                      std::to_string(tight.row_pitch) + " bytes",
                  {}, std::source_location{});
    }
    const HostImageLevel pitched = host_image_level(desc, 0, native.host_row_pitch);
    if (native.host_slice_pitch != 0 &&
        (native.host_slice_pitch < pitched.slice_pitch || native.host_slice_pitch % pitched.row_pitch != 0)) {
      throw Error(ErrorCode::invalid_argument,
                  "host: host_slice_pitch " + std::to_string(native.host_slice_pitch) +
                      " must be 0 or a multiple of the row pitch " + std::to_string(pitched.row_pitch) +
                      " of at least the level-0 slice's " + std::to_string(pitched.slice_pitch) + " bytes",
                  {}, std::source_location{});
    }
    const std::uint64_t bytes = host_image_bytes(desc, native.host_row_pitch, native.host_slice_pitch);
    if (native.host_pointer > UINT64_MAX - bytes) {
      throw Error(ErrorCode::invalid_argument, "host: the image's " + std::to_string(bytes) +
                  " bytes wrap around the address space", {}, std::source_location{});
    }
    auto image = std::make_unique<HostImage>();
    image->base = reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(native.host_pointer));
    image->desc = desc;
    image->row_pitch = native.host_row_pitch;
    image->slice_pitch = native.host_slice_pitch;
    return image;
  }

  std::unique_ptr<HostMemory> allocate_host(std::uint64_t bytes) override {
    void* p = aligned_allocate(bytes);
    if (p == nullptr) {
      throw Error(ErrorCode::out_of_memory,
                  "host: cannot allocate " + std::to_string(bytes) + " bytes of host memory",
                  "aligned_alloc");
    }
    return host_memory(static_cast<std::byte*>(p), bytes, /*registered=*/false);
  }

  // Any range is accepted: there is nothing to pin. The memory stays the user's.
  std::unique_ptr<HostMemory> register_host(std::byte* ptr, std::uint64_t bytes) override {
    return host_memory(ptr, bytes, /*registered=*/true);
  }

  // Any range is adopted as it is: the process's memory is the device's, DMA-able already.
  std::unique_ptr<HostMemory> adopt_host(std::byte* ptr, std::uint64_t bytes) override {
    return adopted_host_memory(ptr, bytes);
  }

  void free_host(std::unique_ptr<HostMemory> memory) override {
    if (memory && !memory->registered) aligned_free(memory->ptr);
  }

  // Two host devices (Device::open twice) share the process: memory is addressable by both,
  // and a worker may wait on any HostSemaphore. A peer's semaphores under fault injection are
  // waited for with the plain wait, as every worker's wait is.
  PeerSupport peer_support(BackendDevice& other) override {
    PeerSupport s;
    if (dynamic_cast<HostDevice*>(&other) != nullptr) {
      s.possible = true;
      s.path = PeerPath::direct;
    } else {
      s.reason = "host: the other device is not a host device";
    }
    return s;
  }

  void wait_idle() override {
    // Holding the registry lock keeps every listed queue alive while it drains; queue
    // workers never take this lock, so draining cannot deadlock on it.
    std::lock_guard lock(registry_->mutex);
    for (HostQueue* q : registry_->queues) q->drain();
    if (faults_ && faults_->lost()) faults_->throw_lost();  // as vkDeviceWaitIdle reports a loss
  }

 private:
  Capabilities caps_;
  std::uint32_t latency_us_ = 0;
  std::uint64_t memory_limit_ = 0;  // 0 = no limit
  std::atomic<std::uint64_t> used_{0};
  std::shared_ptr<FaultState> faults_;  // null: no faults injected (FERRY_HOST_FAULTS unset)
  std::shared_ptr<QueueRegistry> registry_ = std::make_shared<QueueRegistry>();
  std::unique_ptr<HostQueue> compute_;   // declared after registry_: destroyed before it
  std::unique_ptr<HostQueue> transfer_;
};

}  // namespace

}  // namespace ferry::detail::host_impl

namespace ferry::detail {

extern const BackendDescriptor host_backend_descriptor;
constinit const BackendDescriptor host_backend_descriptor{
    .id = Backend::host,
    .name = "host",
    .option = "-Dhost=enabled",
    .kind = DeviceKind::cpu,
    .built = true,
    .count = []() noexcept { return 1; },
    .open = [](const DeviceOptions& options) -> std::unique_ptr<BackendDevice> {
      return std::make_unique<host_impl::HostDevice>(options);
    },
};

}  // namespace ferry::detail
