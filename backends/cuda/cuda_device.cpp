// SPDX-License-Identifier: MIT
// CUDA/HIP devices: opening one (capabilities, default queues), binding it to a thread,
// making and adopting queues, peer access, and the backend's descriptor. The device's
// semaphores, memory and images are in the files of those resources.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_internal.hpp"

namespace ferry::detail::FERRY_GPU_NS {

thread_local constinit const Core* t_bound = nullptr;

Device::Device(int ordinal) : core_(std::make_shared<Core>()) {
  core_->ordinal = ordinal;
  core_->context = vendor::device_context(ordinal);
  ContextGuard guard(*core_);

  cudaDeviceProp prop{};
  FERRY_GPU_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  const vendor::Features features = vendor::query_features(ordinal, prop);
  FERRY_GPU_CHECK(cudaDeviceGetStreamPriorityRange(&core_->priority_least, &core_->priority_greatest));
  core_->max_blocks = std::max(1, prop.multiProcessorCount) * 4;
  core_->stream_mem_ops64 = features.stream_mem_ops64;
  // The synthetic kernel, where ferry-testkit has registered its image: loaded before any
  // queue can wait for the host, since loading may wait behind such a queue (load_kernels).
  const std::span<const std::byte> kernel_image = synthetic_kernel_image(FERRY_GPU_BACKEND);
  const bool kernels = vendor::kLoadsKernels && !kernel_image.empty();
  if (kernels) (void)core_->kernels(kernel_image);
  core_->service_kernels = vendor::load_service_kernels();

  caps_.name = prop.name;
  caps_.backend = FERRY_GPU_BACKEND;
  caps_.is_gpu = true;
  caps_.synthetic_compute = kernels;
  caps_.device_memory_bytes = prop.totalGlobalMem;
  caps_.copy_engines = features.copy_engines;
  caps_.copy_priorities = core_->service_kernels.yield != nullptr;
  caps_.dedicated_transfer_queue = true;   // its own stream; copies go to the copy engines
  caps_.host_memory_registration = true;   // cudaHostRegister
  caps_.host_memory_adoption = true;       // cudaPointerGetAttributes says page-locked
  caps_.min_alignment = 256;               // cudaMalloc guarantees 256; keeps copies aligned
  caps_.uuid = features.uuid_bytes;
  auto yes_no = [](bool b) { return b ? "yes" : "no"; };
  caps_.notes = "uuid " + features.uuid + "; " + std::to_string(prop.multiProcessorCount) +
                " multiprocessors; memory pools: " + yes_no(features.memory_pools) +
                "; 64-bit stream memory ops: " + yes_no(features.stream_mem_ops64) +
                (features.stream_mem_ops64 ? "" : " (queue waits on values not yet signalled: unsupported)") +
                "; stream priorities " + std::to_string(core_->priority_least) + " (least) to " +
                std::to_string(core_->priority_greatest) + " (greatest)";

  compute_ = make_queue(0);
  transfer_ = make_queue(0);
}

void Device::bind_thread(ThreadBinding& binding) {
  binding.outer = t_bound;
  if (t_bound == core_.get()) return;  // nested in a call that bound this device
  const vendor::DeviceContext previous = vendor::current_context();
  if (previous != core_->context) {
    vendor::make_current(core_->context);
    binding.switched = true;
  }
  binding.previous = vendor::context_word(previous);
  t_bound = core_.get();
}

void Device::unbind_thread(ThreadBinding& binding) noexcept {
  if (binding.outer == core_.get()) return;  // nested: bind_thread changed nothing
  if (binding.switched) vendor::restore_current(vendor::context_from_word(binding.previous));
  t_bound = static_cast<const Core*>(binding.outer);
}

BackendQueue& Device::default_queue(QueueRole role) {
  return role == QueueRole::compute ? *compute_ : *transfer_;
}

std::unique_ptr<BackendQueue> Device::create_queue(QueueRole /*role*/, int priority) {
  return make_queue(priority);
}

std::unique_ptr<BackendQueue> Device::adopt_queue(QueueRole /*role*/, const NativeQueue& native) {
  auto stream = static_cast<cudaStream_t>(native.handle);
  if (vendor::is_implicit_stream(stream)) {
    throw Error(ErrorCode::invalid_argument,
                FERRY_GPU_LABEL ": adopt_queue: the null handle or the per-thread default stream cannot be "
                "adopted: the per-thread stream names a different stream on each thread, so ferry could "
                "not order work on it; pass a stream object (or the legacy default stream)",
                {}, std::source_location{});
  }
  ContextGuard guard(*core_);
  if (vendor::is_legacy_stream(stream)) return std::make_unique<Queue>(core_, stream, /*owned=*/false);
  if (const auto device = vendor::stream_device(stream); device && *device != core_->ordinal) {
    throw Error(ErrorCode::invalid_argument,
                FERRY_GPU_LABEL ": adopt_queue: stream belongs to device " + std::to_string(*device) +
                    ", not " + std::to_string(core_->ordinal),
                {}, std::source_location{});
  }
  return std::make_unique<Queue>(core_, stream, /*owned=*/false);
}

// Peer copies between two devices of this backend. The route is decided once per peer:
// peer access where the topology allows it (cudaDeviceCanAccessPeer), enabled for this
// device's context, so its copy engines reach the peer's memory directly; otherwise the
// driver stages cudaMemcpyPeerAsync through host memory. Semaphores work across devices:
// stream waits on another device's events are valid within one process, and the counter
// is portable host-mapped memory. The same GPU opened twice copies as within one device.
PeerSupport Device::peer_support(BackendDevice& other) {
  auto* peer = dynamic_cast<Device*>(&other);
  PeerSupport s;
  if (peer == nullptr) {
    s.reason = FERRY_GPU_LABEL ": the other device is not a " FERRY_GPU_LABEL " device";
    return s;
  }
  const int theirs = peer->core_->ordinal;
  std::lock_guard lock(peers_mutex_);
  for (const auto& [ordinal, known] : peers_) {
    if (ordinal == theirs) return known;
  }
  s.possible = true;
  s.path = PeerPath::direct;
  if (theirs != core_->ordinal) {
    ContextGuard guard(*core_);
    int can = 0;
    FERRY_GPU_CHECK(cudaDeviceCanAccessPeer(&can, core_->ordinal, theirs));
    if (can != 0) {
      const cudaError_t e = cudaDeviceEnablePeerAccess(theirs, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();  // enabled by the engine or an earlier open: fine
      } else {
        FERRY_GPU_CHECK(e);
      }
    } else {
      s.path = PeerPath::staged;
    }
  }
  peers_.emplace_back(theirs, s);
  return s;
}

void Device::wait_idle() {
  std::vector<cudaStream_t> streams;
  {
    std::lock_guard lock(core_->mutex);
    streams = core_->streams;
  }
  ContextGuard guard(*core_);
  for (cudaStream_t s : streams) FERRY_GPU_CHECK(cudaStreamSynchronize(s));
}

std::unique_ptr<Queue> Device::make_queue(int priority) {
  ContextGuard guard(*core_);
  cudaStream_t stream = nullptr;
  // Non-blocking: never synchronizes with the legacy default stream the engine may use.
  FERRY_GPU_CHECK(cudaStreamCreateWithPriority(
      &stream, cudaStreamNonBlocking, priority > 0 ? core_->priority_greatest : core_->priority_least));
  return std::make_unique<Queue>(core_, stream, /*owned=*/true, /*urgent=*/priority > 0);
}

int ordinal_of(BackendDevice& device) { return static_cast<Device&>(device).ordinal(); }

const vendor::Kernels& Core::kernels(std::span<const std::byte> image) {
  std::lock_guard lock(kernels_mutex);
  if (!kernels_loaded) {
    loaded_kernels = vendor::load_kernels(image);
    kernels_loaded = true;
  }
  return loaded_kernels;
}

namespace {

int device_count() noexcept {
  int count = 0;
  // Any failure (no runtime library, no driver, no device, driver too old) means "no
  // device": never throw.
  if (!vendor::runtime_loaded()) return 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::unique_ptr<BackendDevice> open_device(const DeviceOptions& options) {
  if (!vendor::runtime_loaded()) vendor::fail_runtime_missing();  // names the library
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    const std::string why = e == cudaSuccess ? std::string("the driver reports 0 devices") : vendor::describe(e);
    throw Error(ErrorCode::unsupported, std::string("no ") + FERRY_GPU_VENDOR + " device present (" + why + ")",
                e == cudaSuccess ? std::string{} : std::string(FERRY_GPU_NAME(cudaGetDeviceCount)),
                std::source_location{});
  }
  return std::make_unique<Device>(options.ordinal);
}

bool runtime_present() noexcept { return vendor::runtime_loaded(); }

}  // namespace

}  // namespace ferry::detail::FERRY_GPU_NS

namespace ferry::detail {

extern const BackendDescriptor FERRY_GPU_DESCRIPTOR;
constinit const BackendDescriptor FERRY_GPU_DESCRIPTOR{
    .id = FERRY_GPU_BACKEND,
    .name = FERRY_GPU_LABEL,
    .option = FERRY_GPU_OPTION,
    .kind = DeviceKind::gpu,
    .built = true,
    .count = &FERRY_GPU_NS::device_count,
    .open = &FERRY_GPU_NS::open_device,
    .runtime_present = &FERRY_GPU_NS::runtime_present,
};

}  // namespace ferry::detail
