// SPDX-License-Identifier: MIT
// CUDA/HIP queues: one stream each. Buffer copies (single, batched, peer), the queue side of
// semaphores, and the synthetic kernel; the image copies are in cuda_image.cpp.
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "cuda/cuda_internal.hpp"

namespace ferry::detail::FERRY_GPU_NS {

Queue::Queue(std::shared_ptr<Core> core, cudaStream_t stream, bool owned, bool urgent)
    : BackendQueue([&] {
        QueueTraits t = kTraits;
        t.yields = core->service_kernels.yield != nullptr;
        return t;
      }()),
      core_(std::move(core)),
      stream_(stream),
      owned_(owned),
      sm_copies_(urgent && core_->service_kernels.copy16 != nullptr) {
  std::lock_guard lock(core_->mutex);
  core_->streams.push_back(stream_);
}

Queue::~Queue() {
  {
    std::lock_guard lock(core_->mutex);
    std::erase(core_->streams, stream_);
  }
  // Returns at once; the stream's resources go once its pending work has completed. The
  // destroying thread may be any thread: it binds the context like every entry point.
  if (owned_) {
    const auto guard = ContextGuard::try_bind(*core_);
    if (guard) ignore_in_destructor(cudaStreamDestroy(stream_));
  }
}

// An urgent queue's small upload from page-locked memory runs on the SMs: a copy engine busy
// with another stream's bulk copy serves this stream's copy only when that copy ends, while
// the SM copy starts as soon as its high-priority blocks find room. Memory without a device
// mapping, and larger copies, go to a copy engine.
void Queue::copy_h2d(DeviceRef dst, HostRef src, std::uint64_t bytes) {
  ContextGuard guard(*core_);
  if (sm_copies_ && bytes > 0 && bytes <= kSmCopyMaxBytes) {
    // The memory's start is what the driver registered or allocated (or the engine's range):
    // the mapping of a byte is that of the start, offset alike.
    if (const auto base = vendor::host_device_alias(src.memory->ptr); base != 0) {
      vendor::launch_sm_copy(core_->service_kernels, reinterpret_cast<std::uintptr_t>(device_ptr(dst)),
                             base + src.offset, bytes, core_->max_blocks, stream_);
      return;
    }
  }
  vendor::copy_h2d_async(device_ptr(dst), host_ptr(src), bytes, stream_);
}

void Queue::copy_d2h(HostRef dst, DeviceRef src, std::uint64_t bytes) {
  ContextGuard guard(*core_);
  vendor::copy_d2h_async(host_ptr(dst), device_ptr(src), bytes, stream_);
}

void Queue::copy_d2d(DeviceRef dst, DeviceRef src, std::uint64_t bytes) {
  ContextGuard guard(*core_);
  vendor::copy_d2d_async(device_ptr(dst), device_ptr(src), bytes, stream_);
}

#if FERRY_GPU_HAS_BATCH_COPY
/// One batched copy for the whole batch: one driver call, where a loop of single copies pays
/// the per-call cost for each copy. Stream-ordered source access keeps the batch's ordering
/// that of single copies on this stream. The legacy default stream, which the batch call
/// refuses, a single copy, an urgent queue's uploads (copy_h2d may take each to the SMs) and a
/// driver without the batch call take the single-copy path.
void Queue::copy_many(std::span<const HostDeviceCopy> copies, bool to_device) {
  if (copies.empty()) return;
  if (copies.size() == 1 || (to_device && sm_copies_) || stream_ == nullptr || stream_ == cudaStreamLegacy ||
      stream_ == cudaStreamPerThread || !vendor::has_batch_copy()) {
    for (const HostDeviceCopy& c : copies) {
      if (to_device) {
        copy_h2d(c.device, c.host, c.bytes);
      } else {
        copy_d2h(c.host, c.device, c.bytes);
      }
    }
    return;
  }
  ContextGuard guard(*core_);
  std::vector<CUdeviceptr> dsts(copies.size());
  std::vector<CUdeviceptr> srcs(copies.size());
  std::vector<std::size_t> sizes(copies.size());
  for (std::size_t i = 0; i < copies.size(); ++i) {
    const CUdeviceptr device = to_device_address(device_ptr(copies[i].device));
    const CUdeviceptr host = to_device_address(host_ptr(copies[i].host));
    dsts[i] = to_device ? device : host;
    srcs[i] = to_device ? host : device;
    sizes[i] = copies[i].bytes;
  }
  vendor::copy_batch_async(dsts.data(), srcs.data(), sizes.data(), copies.size(), stream_);
}
#endif

// On the stream's copy engine. With peer access enabled (peer_support) the copy engine
// reads or writes the other device's memory over the interconnect; without it the driver
// stages the copy through pinned host memory, still ordered on this stream.
void Queue::copy_peer(DeviceRef dst, BackendDevice& dst_device, DeviceRef src, BackendDevice& src_device,
                      std::uint64_t bytes) {
  ContextGuard guard(*core_);
  FERRY_GPU_CHECK(cudaMemcpyPeerAsync(device_ptr(dst), ordinal_of(dst_device), device_ptr(src),
                                      ordinal_of(src_device), bytes, stream_));
}

void Queue::signal(BackendSemaphore& sem, std::uint64_t value) {
  ContextGuard guard(*core_);
  static_cast<GpuSemaphore&>(sem).enqueue_signal(stream_, value);  // same backend: front end checked
}

void Queue::wait(BackendSemaphore& sem, std::uint64_t value) {
  ContextGuard guard(*core_);
  static_cast<GpuSemaphore&>(sem).enqueue_wait(stream_, value);
}

// The kernel comes from the image ferry-testkit registers (synthetic_kernel_image); without
// one, or where the vendor loads no kernel images, the front end reports `unsupported`.
bool Queue::synthetic_compute(DeviceRef in, DeviceRef out, std::uint64_t bytes, std::uint32_t units) {
  if (!vendor::kLoadsKernels) return false;
  const std::span<const std::byte> image = synthetic_kernel_image(FERRY_GPU_BACKEND);
  if (image.empty()) return false;
  ContextGuard guard(*core_);
  vendor::launch_synthetic(core_->kernels(image), device_ptr(in), device_ptr(out), bytes, units, core_->max_blocks,
                           stream_);
  return true;
}

void Queue::enqueue_yield() {
  ContextGuard guard(*core_);
  vendor::launch_yield(core_->service_kernels, stream_);
}

}  // namespace ferry::detail::FERRY_GPU_NS
