// SPDX-License-Identifier: MIT
// The backend layer's shared definitions (backend.hpp): the default bodies of the optional
// hooks, and what the stubs of backends that were not built share.
#include "backend.hpp"

#include <array>
#include <atomic>
#include <new>

namespace ferry::detail {

// Defaults of the optional interop hooks: a backend that does not override them cannot take
// part in an interop pair, which says so when it is opened.
std::unique_ptr<BackendSemaphore> BackendDevice::create_exported_semaphore(std::uint64_t, int*) {
  throw Error(ErrorCode::unsupported, capabilities().name + ": timeline semaphore export is not supported",
              {}, std::source_location{});
}
std::unique_ptr<Segment> BackendDevice::allocate_exported_segment(std::uint64_t, ExternalMemory*) {
  throw Error(ErrorCode::unsupported, capabilities().name + ": device memory export is not supported", {},
              std::source_location{});
}
std::unique_ptr<BackendSemaphore> BackendDevice::import_semaphore(int) {
  throw Error(ErrorCode::unsupported, capabilities().name + ": timeline semaphore import is not supported",
              {}, std::source_location{});
}
std::unique_ptr<Segment> BackendDevice::import_segment(const ExternalMemory&) {
  throw Error(ErrorCode::unsupported, capabilities().name + ": device memory import is not supported", {},
              std::source_location{});
}

ExternalMemory BackendDevice::export_image_memory(const NativeImage&) {
  throw Error(ErrorCode::unsupported, capabilities().name + ": image memory export is not supported", {},
              std::source_location{});
}
std::unique_ptr<BackendImage> BackendDevice::import_image(const ExternalMemory&, std::uint64_t, const ImageDesc&, bool) {
  throw Error(ErrorCode::unsupported, capabilities().name + ": image import is not supported", {},
              std::source_location{});
}

std::unique_ptr<BackendImage> BackendDevice::adopt_image(const NativeImage&, const ImageDesc&, std::uint32_t) {
  throw Error(ErrorCode::unsupported, capabilities().name + ": images are not supported by this backend", {},
              std::source_location{});
}

namespace {
[[noreturn]] void no_image_copies() {
  throw Error(ErrorCode::unsupported, "image copies are not supported by this backend", {}, std::source_location{});
}
}  // namespace

void BackendQueue::copy_h2i(BackendImage&, HostRef, std::span<const ImageCopy>) { no_image_copies(); }
void BackendQueue::copy_i2h(HostRef, BackendImage&, std::span<const ImageCopy>) { no_image_copies(); }
void BackendQueue::copy_d2i(BackendImage&, DeviceRef, std::span<const ImageCopy>) { no_image_copies(); }
void BackendQueue::copy_i2d(DeviceRef, BackendImage&, std::span<const ImageCopy>) { no_image_copies(); }

AdoptedRange BackendDevice::adopt_memory(const NativeMemory&, std::uint64_t) {
  throw Error(ErrorCode::unsupported, capabilities().name + ": adopting device memory is not supported", {},
              std::source_location{});
}

std::unique_ptr<HostMemory> BackendDevice::adopt_host(std::byte*, std::uint64_t) {
  throw Error(ErrorCode::unsupported, capabilities().name + ": adopting page-locked host memory is not supported",
              {}, std::source_location{});
}

// Peer copies: a backend that does not override these shares neither memory nor semaphores
// between its devices (Vulkan: two VkDevices would need external memory and semaphores
// imported into each other; interop pairs: each side is one GPU already).
PeerSupport BackendDevice::peer_support(BackendDevice& /*other*/) {
  PeerSupport s;
  s.reason = capabilities().name + ": this backend copies between buffers of one device only (its devices share "
                                   "no memory or semaphores); copy through the host with a download and an upload";
  return s;
}

void BackendQueue::copy_peer(DeviceRef, BackendDevice&, DeviceRef, BackendDevice&, std::uint64_t) {
  throw Error(ErrorCode::unsupported, "copies between devices are not supported by this backend", {},
              std::source_location{});
}

/// The checks of a pointer adoption shared by the pointer backends (host, null, CUDA/HIP):
/// the pointer is set and no Vulkan field is.
void require_pointer_only(const NativeMemory& native, const char* backend) {
  if (native.vulkan_buffer != 0 || native.vulkan_offset != 0 || native.vulkan_buffer_size != 0) {
    throw Error(ErrorCode::invalid_argument,
                std::string(backend) + " memory is addressed by NativeMemory::pointer; the vulkan_* fields "
                                       "describe a VkBuffer, which this backend cannot address",
                {}, std::source_location{});
  }
  if (native.pointer == 0) {
    throw Error(ErrorCode::invalid_argument, std::string("NativeMemory::pointer is null (") + backend +
                                                 " adopts a pointer)",
                {}, std::source_location{});
  }
}

namespace {

/// One registered image per backend, published whole through one pointer.
struct KernelImage {
  std::span<const std::byte> bytes;
};
constexpr std::size_t kImageSlots = 16;
constinit std::array<std::atomic<const KernelImage*>, kImageSlots> g_kernel_images{};

}  // namespace

void set_synthetic_kernel_image(Backend backend, std::span<const std::byte> image) noexcept {
  const auto slot = static_cast<std::size_t>(backend);
  if (slot >= kImageSlots) return;
  // Leaked on purpose: a reader may hold the previous one while this one is published.
  const KernelImage* next = image.empty() ? nullptr : new (std::nothrow) KernelImage{image};
  g_kernel_images[slot].store(next, std::memory_order_release);
}

std::span<const std::byte> synthetic_kernel_image(Backend backend) noexcept {
  const auto slot = static_cast<std::size_t>(backend);
  if (slot >= kImageSlots) return {};
  const KernelImage* image = g_kernel_images[slot].load(std::memory_order_acquire);
  return image != nullptr ? image->bytes : std::span<const std::byte>{};
}

int no_devices() noexcept { return 0; }

void fail_not_built(const char* name, const char* option) {
  throw Error(ErrorCode::unsupported,
              std::string("ferry was built without the ") + name + " backend (reconfigure with meson " + option + ")",
              {}, std::source_location{});
}

}  // namespace ferry::detail
