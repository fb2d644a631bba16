// SPDX-License-Identifier: MIT
// Interop pairs (ferry/interop.hpp): one BackendDevice made of a Vulkan device and the CUDA
// device that is the same GPU. Vendor-free: it composes the two backends through their
// descriptors and interface (backend.hpp) and its optional interop hooks (export on Vulkan,
// import on CUDA). Built only with both backends (backends/pair/meson.build); stub.cpp
// stands in otherwise.
//
// Objects:
//  - PairSegment: Vulkan memory exported as an fd, imported into CUDA; a pair Segment whose
//    backend_data points to both sides. Queues translate refs to their own side's segment.
//  - PairHost: page-aligned memory registered with both (cudaHostRegister, Vulkan import).
//  - PairSemaphore: a Vulkan timeline exported as an fd, imported into CUDA. The host side
//    (value, signal, wait) is the Vulkan semaphore's.
//  - PairImage: an engine's VkImage adopted by the Vulkan side, its memory exported as an fd
//    and imported by the CUDA side as a mipmapped array; queues translate it to their side's.
//  - PairQueue: a queue of one side. family() is the Vulkan family for Vulkan queues and
//    kExternalQueueFamily (VK_QUEUE_FAMILY_EXTERNAL) for CUDA streams, so the Vulkan
//    backend's queue-family ownership transfers release to / acquire from the external API.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <unistd.h>

#include "backend.hpp"

namespace ferry::detail {

extern const BackendDescriptor vulkan_backend_descriptor;
extern const BackendDescriptor cuda_backend_descriptor;

namespace {

[[noreturn]] void pair_fail(ErrorCode code, const std::string& message) {
  throw Error(code, "interop: " + message, {}, std::source_location{});
}

std::string uuid_text(const std::array<std::uint8_t, 16>& u) {
  std::string s;
  char byte[3];
  for (std::size_t i = 0; i < u.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    std::snprintf(byte, sizeof byte, "%02x", u[i]);
    s += byte;
  }
  return s;
}

bool uuid_known(const std::array<std::uint8_t, 16>& u) {
  return std::any_of(u.begin(), u.end(), [](std::uint8_t b) { return b != 0; });
}

void close_fd(int fd) noexcept {
  if (fd >= 0) ::close(fd);
}

/// Which API a side is.
enum Side : int { kVulkan = 0, kCuda = 1 };

struct PairSegment {
  std::unique_ptr<Segment> side[2];
};

/// An engine's image as both sides address it. The CUDA import goes first (the members are
/// destroyed in reverse order); the Vulkan side owns nothing of the engine's image.
struct PairImage final : BackendImage {
  std::unique_ptr<BackendImage> side[2];
};

struct PairHost {
  std::unique_ptr<HostMemory> side[2];
  bool owns_memory = false;  // allocated here (vs. user memory registered)
};

/// A Vulkan timeline exported to CUDA, plus a CUDA-native timeline that CUDA-side signals
/// also signal. Why the third part: the Vulkan driver learns of a value signalled through the
/// imported semaphore late (measured on the H200: a host wait on a CUDA signal took ~10 ms to
/// return), so host queries and waits also consult the CUDA-native timeline, which answers
/// from CUDA events as soon as the stream got there.
class PairSemaphore final : public BackendSemaphore {
 public:
  PairSemaphore(std::unique_ptr<BackendSemaphore> vulkan, std::unique_ptr<BackendSemaphore> cuda,
                std::unique_ptr<BackendSemaphore> cuda_native)
      : side_{std::move(vulkan), std::move(cuda)}, cuda_native_(std::move(cuda_native)) {}
  ~PairSemaphore() override {
    side_[kCuda].reset();  // the import goes before the exported semaphore
    cuda_native_.reset();
  }
  std::uint64_t value() override {
    return std::max(side_[kVulkan]->value(), cuda_native_->value());
  }
  void signal(std::uint64_t value) override { side_[kVulkan]->signal(value); }
  bool wait(std::uint64_t value, std::chrono::nanoseconds timeout) override {
    // A Vulkan signal wakes the pause at once; a CUDA one is seen within 50 us.
    return poll_wait(
        timeout, [&] { return this->value() >= value; },
        [&](std::chrono::nanoseconds left) {
          return side_[kVulkan]->wait(value, std::min<std::chrono::nanoseconds>(left, std::chrono::microseconds(50)));
        });
  }
  /// What a queue of `s` signals and waits on.
  BackendSemaphore& side(Side s) { return *side_[s]; }
  /// CUDA-side signals also go here (see the class comment).
  BackendSemaphore& cuda_native() { return *cuda_native_; }

 private:
  std::unique_ptr<BackendSemaphore> side_[2];
  std::unique_ptr<BackendSemaphore> cuda_native_;
};

class PairQueue final : public BackendQueue {
 public:
  /// `inner` is owned when `owned` is set (created or adopted through the pair). The inner
  /// queue's traits are the pair queue's.
  PairQueue(Side side, BackendQueue* inner, std::unique_ptr<BackendQueue> owned)
      : BackendQueue((owned ? owned.get() : inner)->traits()),
        side_(side),
        owned_(std::move(owned)),
        inner_(owned_ ? owned_.get() : inner) {}

  void copy_h2d(DeviceRef dst, HostRef src, std::uint64_t bytes) override {
    inner_->copy_h2d(mine(dst), mine(src), bytes);
  }
  void copy_d2h(HostRef dst, DeviceRef src, std::uint64_t bytes) override {
    inner_->copy_d2h(mine(dst), mine(src), bytes);
  }
  void copy_d2d(DeviceRef dst, DeviceRef src, std::uint64_t bytes) override {
    inner_->copy_d2d(mine(dst), mine(src), bytes);
  }
  void enqueue_yield() override { inner_->enqueue_yield(); }
  void signal(BackendSemaphore& sem, std::uint64_t value) override {
    auto& pair = static_cast<PairSemaphore&>(sem);
    inner_->signal(pair.side(side_), value);
    if (side_ == kCuda) inner_->signal(pair.cuda_native(), value);  // host queries see it at once
  }
  void wait(BackendSemaphore& sem, std::uint64_t value) override {
    inner_->wait(static_cast<PairSemaphore&>(sem).side(side_), value);
  }
  // `to`/`from` are PairQueues: the Vulkan backend only asks them for family().
  void release_ownership(DeviceRef range, std::uint64_t bytes, BackendQueue& to) override {
    inner_->release_ownership(mine(range), bytes, to);
  }
  void acquire_ownership(DeviceRef range, std::uint64_t bytes, BackendQueue& from) override {
    inner_->acquire_ownership(mine(range), bytes, from);
  }
  bool synthetic_compute(DeviceRef in, DeviceRef out, std::uint64_t bytes, std::uint32_t units) override {
    return inner_->synthetic_compute(mine(in), mine(out), bytes, units);
  }
  void copy_h2i(BackendImage& dst, HostRef src, std::span<const ImageCopy> regions) override {
    inner_->copy_h2i(mine(dst), mine(src), regions);
  }
  void copy_i2h(HostRef dst, BackendImage& src, std::span<const ImageCopy> regions) override {
    inner_->copy_i2h(mine(dst), mine(src), regions);
  }
  void copy_d2i(BackendImage& dst, DeviceRef src, std::span<const ImageCopy> regions) override {
    inner_->copy_d2i(mine(dst), mine(src), regions);
  }
  void copy_i2d(DeviceRef dst, BackendImage& src, std::span<const ImageCopy> regions) override {
    inner_->copy_i2d(mine(dst), mine(src), regions);
  }
  // The hand-off's families are the pair queues' (a CUDA stream's is VK_QUEUE_FAMILY_EXTERNAL),
  // so the Vulkan side records the release to, or the acquire from, the external API; the
  // CUDA side records nothing.
  void image_barrier(BackendImage& image, const ImageHandOff& hand_off) override {
    inner_->image_barrier(mine(image), hand_off);
  }
  void flush() override { inner_->flush(); }
  void hold_signals(bool held) override { inner_->hold_signals(held); }
  [[nodiscard]] std::uint64_t driver_submits() const override { return inner_->driver_submits(); }
  [[nodiscard]] std::uint32_t family() const override {
    return side_ == kVulkan ? inner_->family() : kExternalQueueFamily;
  }

 private:
  DeviceRef mine(DeviceRef r) const {
    return DeviceRef{static_cast<const PairSegment*>(r.segment->backend_data)->side[side_].get(), r.offset};
  }
  HostRef mine(HostRef r) const {
    return HostRef{static_cast<const PairHost*>(r.memory->backend_data)->side[side_].get(), r.offset};
  }
  BackendImage& mine(BackendImage& image) const { return *static_cast<PairImage&>(image).side[side_]; }

  Side side_;
  std::unique_ptr<BackendQueue> owned_;
  BackendQueue* inner_;
};

class PairDevice final : public BackendDevice {
 public:
  PairDevice(std::unique_ptr<BackendDevice> vulkan, std::unique_ptr<BackendDevice> cuda, Side executor,
             Backend backend)
      : executor_(executor) {
    side_[kVulkan] = std::move(vulkan);
    side_[kCuda] = std::move(cuda);
    const Capabilities& vk = side_[kVulkan]->capabilities();
    const Capabilities& cu = side_[kCuda]->capabilities();
    const Capabilities& ex = side_[executor]->capabilities();
    const Capabilities& ow = side_[owner()]->capabilities();
    caps_.name = vk.name + (executor == kVulkan ? " (Vulkan copies, CUDA owners)" : " (CUDA copies, Vulkan owners)");
    caps_.backend = backend;
    caps_.is_gpu = true;
    caps_.device_memory_bytes = cu.device_memory_bytes;
    caps_.copy_engines = ex.copy_engines;
    caps_.copy_priorities = ex.copy_priorities;  // copies run on the executing side's queues
    caps_.copy_bytes_per_second = ex.copy_bytes_per_second;
    caps_.dedicated_transfer_queue = ex.dedicated_transfer_queue;
    caps_.separate_queue_families = true;
    caps_.ownership_transfer = vk.ownership_transfer || !vk.separate_queue_families;
    caps_.host_memory_registration = true;
    caps_.timeline_export = true;
    caps_.synthetic_compute = ow.synthetic_compute;
    caps_.min_alignment = std::max(vk.min_alignment, cu.min_alignment);
    caps_.max_allocation_bytes = vk.max_allocation_bytes;
    caps_.uuid = vk.uuid;
    caps_.notes = "uuid " + uuid_text(vk.uuid) + "; vulkan: " + vk.notes + "; cuda: " + cu.notes;
    host_alignment_ = std::max<std::uint64_t>({side_[kVulkan]->host_registration_alignment(),
                                               side_[kCuda]->host_registration_alignment(),
                                               static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE))});
    defaults_[0] = std::make_unique<PairQueue>(side_of(QueueRole::compute),
                                               &side_[side_of(QueueRole::compute)]->default_queue(QueueRole::compute),
                                               nullptr);
    defaults_[1] = std::make_unique<PairQueue>(side_of(QueueRole::transfer),
                                               &side_[side_of(QueueRole::transfer)]->default_queue(QueueRole::transfer),
                                               nullptr);
  }

  ~PairDevice() override {
    defaults_[0].reset();
    defaults_[1].reset();
    side_[kCuda].reset();  // imports first, then the exporting device
    side_[kVulkan].reset();
  }

  const Capabilities& capabilities() const override { return caps_; }

  BackendQueue& default_queue(QueueRole role) override {
    return *defaults_[role == QueueRole::compute ? 0 : 1];
  }

  std::unique_ptr<BackendQueue> create_queue(QueueRole role, int priority) override {
    const Side s = side_of(role);
    return std::make_unique<PairQueue>(s, nullptr, side_[s]->create_queue(role, priority));
  }

  std::unique_ptr<BackendQueue> adopt_queue(QueueRole role, const NativeQueue& native) override {
    const Side s = side_of(role);
    return std::make_unique<PairQueue>(s, nullptr, side_[s]->adopt_queue(role, native));
  }

  std::unique_ptr<BackendSemaphore> create_semaphore(std::uint64_t initial) override {
    int fd = -1;
    auto vulkan = side_[kVulkan]->create_exported_semaphore(initial, &fd);
    std::unique_ptr<BackendSemaphore> cuda;
    try {
      cuda = side_[kCuda]->import_semaphore(fd);
    } catch (...) {
      close_fd(fd);
      throw;
    }
    auto native = side_[kCuda]->create_semaphore(initial);
    return std::make_unique<PairSemaphore>(std::move(vulkan), std::move(cuda), std::move(native));
  }

  std::unique_ptr<Segment> allocate_segment(std::uint64_t bytes) override {
    auto pair = std::make_unique<PairSegment>();
    ExternalMemory exported;
    pair->side[kVulkan] = side_[kVulkan]->allocate_exported_segment(bytes, &exported);
    try {
      pair->side[kCuda] = side_[kCuda]->import_segment(exported);
    } catch (...) {
      close_fd(exported.fd);
      side_[kVulkan]->free_segment(std::move(pair->side[kVulkan]));
      throw;
    }
    auto segment = std::make_unique<Segment>();
    segment->size = bytes;
    segment->address = pair->side[kCuda]->address;  // the CUDA device address: real, distinct
    segment->native = pair->side[kCuda]->native;
    segment->backend_data = pair.release();
    return segment;
  }

  // An engine's memory seen by both APIs: its VkBuffer range for the Vulkan queues and its
  // CUDA device pointer for the CUDA streams, each checked by its own backend. A pair cannot
  // use one view alone: copies run on one API and the owner's work (and queue-family
  // hand-offs, synthetic compute) on the other, and neither API can derive the other's view.
  // The CUDA side's segment starts `offset` bytes before the pointer, so that the one block
  // offset both sides add lands on the same byte.
  AdoptedRange adopt_memory(const NativeMemory& native, std::uint64_t bytes) override {
    if (native.pointer == 0 || native.vulkan_buffer == 0) {
      pair_fail(ErrorCode::unsupported,
                std::string("adopted memory needs both views of one allocation: ") +
                    (native.pointer == 0 ? "NativeMemory::pointer (the CUDA device pointer) is missing"
                                         : "NativeMemory::vulkan_buffer (the VkBuffer) is missing") +
                    "; the Vulkan queues address it through the VkBuffer and the CUDA streams through the "
                    "pointer, and neither API can derive the other's view (import the memory into both)");
    }
    NativeMemory vulkan = native;
    vulkan.pointer = 0;
    const NativeMemory cuda = NativeMemory::from_pointer(reinterpret_cast<const void*>(native.pointer));
    auto pair = std::make_shared<PairSegment>();
    AdoptedRange vk = side_[kVulkan]->adopt_memory(vulkan, bytes);
    AdoptedRange cu = side_[kCuda]->adopt_memory(cuda, bytes);
    cu.segment->address -= vk.offset;
    cu.segment->native = static_cast<std::byte*>(cu.segment->native) - vk.offset;
    pair->side[kVulkan] = std::move(vk.segment);
    pair->side[kCuda] = std::move(cu.segment);
    auto segment = std::make_unique<Segment>();
    segment->size = pair->side[kVulkan]->size;
    segment->address = pair->side[kCuda]->address;
    segment->native = pair->side[kCuda]->native;
    segment->backend_data = pair.get();
    segment->owned_data = std::move(pair);
    return AdoptedRange{std::move(segment), vk.offset};
  }

  // An engine's VkImage seen by both APIs: the Vulkan side adopts the VkImage (its layouts and
  // fields, checked there), exports the memory it is bound to (the memory fields, checked
  // against the image's requirements there), and the CUDA side imports that memory as a
  // mipmapped array of the stated shape at the bind offset. The copies then run on the
  // executor's side and the hand-offs pass the image to and from VK_QUEUE_FAMILY_EXTERNAL, as
  // for the pair's buffers. CONCURRENT images are not offered: the front end checks the
  // executor's family against the image's list, and a CUDA executor's family is external.
  std::unique_ptr<BackendImage> adopt_image(const NativeImage& native, const ImageDesc& desc,
                                            std::uint32_t owner_family) override {
    // VkImageUsageFlagBits, fixed by the Vulkan specification (this file includes no Vulkan header).
    constexpr std::uint32_t kTransferSrc = 0x1, kTransferDst = 0x2, kColorAttachment = 0x10;
    if (native.host_pointer != 0 || native.host_row_pitch != 0 || native.host_slice_pitch != 0 ||
        native.cuda_array != 0 || native.cuda_mipmapped) {
      pair_fail(ErrorCode::invalid_argument,
                "a host or CUDA field of NativeImage is set: a pair's image is a VkImage (NativeImage::vulkan_image) "
                "whose memory ferry imports into CUDA itself");
    }
    if (native.vulkan_image == 0) pair_fail(ErrorCode::invalid_argument, "NativeImage::vulkan_image is a null VkImage");
    if (native.vulkan_sharing != MemorySharing::exclusive) {
      pair_fail(ErrorCode::unsupported,
                "a concurrent image is not supported by interop pairs: adopt an exclusive one (its hand-offs to "
                "and from CUDA are queue-family ownership transfers to VK_QUEUE_FAMILY_EXTERNAL)");
    }
    if ((native.vulkan_usage & (kTransferSrc | kTransferDst)) != (kTransferSrc | kTransferDst)) {
      pair_fail(ErrorCode::invalid_argument,
                "NativeImage::vulkan_usage " + std::to_string(native.vulkan_usage) +
                    " lacks VK_IMAGE_USAGE_TRANSFER_SRC_BIT or VK_IMAGE_USAGE_TRANSFER_DST_BIT: state the usage the "
                    "image was created with (ferry copies into and out of it)");
    }
    auto pair = std::make_unique<PairImage>();
    pair->side[kVulkan] = side_[kVulkan]->adopt_image(native, desc, owner_family);
    const ExternalMemory exported = side_[kVulkan]->export_image_memory(native);
    pair->side[kCuda] = side_[kCuda]->import_image(exported, native.vulkan_memory_offset, desc,
                                                   (native.vulkan_usage & kColorAttachment) != 0);
    return pair;
  }

  // Image copies run on the executor: a Vulkan family's granularity, or any block on CUDA.
  [[nodiscard]] Extent3D image_copy_granularity(std::uint32_t family) const override {
    if (family == kExternalQueueFamily) return {1, 1, 1};
    return side_[kVulkan]->image_copy_granularity(family);
  }

  [[nodiscard]] bool image_hand_off_needed(const BackendImage& image, std::uint32_t src_family,
                                           std::uint32_t dst_family) const override {
    return side_[kVulkan]->image_hand_off_needed(*static_cast<const PairImage&>(image).side[kVulkan], src_family,
                                                 dst_family);
  }

  [[nodiscard]] BackendDevice* part(Backend backend) override {
    if (backend == Backend::vulkan) return side_[kVulkan].get();
    if (backend == Backend::cuda) return side_[kCuda].get();
    return nullptr;
  }

  void free_segment(std::unique_ptr<Segment> segment) override {
    std::unique_ptr<PairSegment> pair(static_cast<PairSegment*>(segment->backend_data));
    side_[kCuda]->free_segment(std::move(pair->side[kCuda]));
    side_[kVulkan]->free_segment(std::move(pair->side[kVulkan]));
  }

  std::unique_ptr<HostMemory> allocate_host(std::uint64_t bytes) override {
    const std::uint64_t size = round_up(bytes, host_alignment_);
    void* ptr = std::aligned_alloc(host_alignment_, size);
    if (ptr == nullptr) pair_fail(ErrorCode::out_of_memory, "host allocation of " + std::to_string(size) + " bytes failed");
    try {
      auto memory = register_both(static_cast<std::byte*>(ptr), size);
      static_cast<PairHost*>(memory->backend_data)->owns_memory = true;
      memory->registered = false;
      memory->size = bytes;  // what was asked for; both sides registered the rounded range
      return memory;
    } catch (...) {
      std::free(ptr);
      throw;
    }
  }

  std::unique_ptr<HostMemory> register_host(std::byte* ptr, std::uint64_t bytes) override {
    if (reinterpret_cast<std::uintptr_t>(ptr) % host_alignment_ != 0 || bytes % host_alignment_ != 0) {
      pair_fail(ErrorCode::invalid_argument,
                "register_host: pointer and size (" + std::to_string(bytes) + ") must be multiples of " +
                    std::to_string(host_alignment_) + " bytes (both APIs register the range)");
    }
    return register_both(ptr, bytes);
  }

  // Not offered: the Vulkan side would import the range (VK_EXT_external_memory_host) and the
  // CUDA side check its pinning, one view per API, and a registration does that already.
  std::unique_ptr<HostMemory> adopt_host(std::byte*, std::uint64_t) override {
    pair_fail(ErrorCode::unsupported,
              "adopting host memory is not supported by interop pairs: both APIs would need the range "
              "(VK_EXT_external_memory_host on the Vulkan side); register it with HostPool::register_memory");
  }

  void free_host(std::unique_ptr<HostMemory> memory) override {
    std::unique_ptr<PairHost> pair(static_cast<PairHost*>(memory->backend_data));
    side_[kVulkan]->free_host(std::move(pair->side[kVulkan]));
    side_[kCuda]->free_host(std::move(pair->side[kCuda]));
    if (pair->owns_memory) std::free(memory->ptr);
  }

  void wait_idle() override {
    side_[kCuda]->wait_idle();
    side_[kVulkan]->wait_idle();
  }

  std::uint64_t validation_messages() const override { return side_[kVulkan]->validation_messages(); }
  std::uint64_t host_registration_alignment() const override { return host_alignment_; }

 private:
  static std::uint64_t round_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }
  Side owner() const { return executor_ == kVulkan ? kCuda : kVulkan; }
  Side side_of(QueueRole role) const { return role == QueueRole::transfer ? executor_ : owner(); }

  std::unique_ptr<HostMemory> register_both(std::byte* ptr, std::uint64_t bytes) {
    auto pair = std::make_unique<PairHost>();
    pair->side[kCuda] = side_[kCuda]->register_host(ptr, bytes);
    try {
      pair->side[kVulkan] = side_[kVulkan]->register_host(ptr, bytes);
    } catch (...) {
      side_[kCuda]->free_host(std::move(pair->side[kCuda]));
      throw;
    }
    auto memory = std::make_unique<HostMemory>();
    memory->ptr = ptr;
    memory->size = bytes;
    memory->registered = true;
    memory->backend_data = pair.release();
    return memory;
  }

  Side executor_;
  std::unique_ptr<BackendDevice> side_[2];
  std::unique_ptr<PairQueue> defaults_[2];
  Capabilities caps_;
  std::uint64_t host_alignment_ = 4096;
};

const BackendDescriptor& vulkan_side = vulkan_backend_descriptor;
const BackendDescriptor& cuda_side = cuda_backend_descriptor;

/// What an explicit peer_ordinal indexes: the CUDA devices.
int cuda_device_count() noexcept { return cuda_side.count(); }

/// A pair's ordinals are the Vulkan backend's (DeviceOptions::ordinal names the Vulkan device),
/// present once a Vulkan GPU and a CUDA device are: whether one Vulkan device has a CUDA twin
/// (the same UUID) and its driver exports what a pair needs is only known at open, which says
/// why when it has not.
/// A pair needs both sides' libraries.
bool pair_runtime_present() noexcept {
  return vulkan_side.built && cuda_side.built && (vulkan_side.runtime_present == nullptr || vulkan_side.runtime_present()) &&
         (cuda_side.runtime_present == nullptr || cuda_side.runtime_present());
}

int pair_device_count() noexcept {
  if (cuda_side.count() == 0) return 0;
  const int n = vulkan_side.count();
  for (int i = 0; i < n; ++i) {
    if (vulkan_side.is_gpu == nullptr || vulkan_side.is_gpu(i)) return n;
  }
  return 0;
}

std::unique_ptr<BackendDevice> pair_open(const DeviceOptions& options) {
  DeviceOptions vk_options = options;
  vk_options.backend = Backend::vulkan;
  auto vulkan = vulkan_side.open(vk_options);
  const auto uuid = vulkan->capabilities().uuid;
  if (!uuid_known(uuid)) {
    pair_fail(ErrorCode::unsupported, vulkan->capabilities().name + " reports no device UUID");
  }
  const int cuda_count = cuda_side.count();
  if (cuda_count == 0) pair_fail(ErrorCode::unsupported, "no CUDA device present");
  const int peer = options.peer_ordinal;  // the front end checked it against cuda_count
  std::unique_ptr<BackendDevice> cuda;
  if (peer >= 0) {
    DeviceOptions cu_options = options;
    cu_options.backend = Backend::cuda;
    cu_options.ordinal = peer;
    cuda = cuda_side.open(cu_options);
    if (cuda->capabilities().uuid != uuid) {
      pair_fail(ErrorCode::invalid_argument,
                "Vulkan device " + std::to_string(options.ordinal) + " (" + vulkan->capabilities().name +
                    ", uuid " + uuid_text(uuid) + ") and CUDA device " + std::to_string(peer) + " (" +
                    cuda->capabilities().name + ", uuid " + uuid_text(cuda->capabilities().uuid) +
                    ") are different GPUs");
    }
  } else {
    for (int i = 0; i < cuda_count && !cuda; ++i) {
      DeviceOptions cu_options = options;
      cu_options.backend = Backend::cuda;
      cu_options.ordinal = i;
      auto candidate = cuda_side.open(cu_options);
      if (candidate->capabilities().uuid == uuid) cuda = std::move(candidate);
    }
    if (!cuda) {
      pair_fail(ErrorCode::unsupported, "no CUDA device has the UUID of Vulkan device " +
                                            std::to_string(options.ordinal) + " (" +
                                            vulkan->capabilities().name + ", uuid " + uuid_text(uuid) + ")");
    }
  }
  if (!vulkan->capabilities().timeline_export) {
    pair_fail(ErrorCode::unsupported, vulkan->capabilities().name +
                                          ": the Vulkan driver cannot export timeline semaphores and "
                                          "memory as opaque fds (VK_KHR_external_semaphore_fd, "
                                          "VK_KHR_external_memory_fd)");
  }
  if (!vulkan->capabilities().host_memory_registration) {
    pair_fail(ErrorCode::unsupported, vulkan->capabilities().name +
                                          ": the Vulkan driver lacks VK_EXT_external_memory_host, "
                                          "needed to share pinned host memory with CUDA");
  }
  vulkan->note_external_signals();
  const Side executor = options.backend == Backend::vulkan_cuda ? kVulkan : kCuda;
  return std::make_unique<PairDevice>(std::move(vulkan), std::move(cuda), executor, options.backend);
}

}  // namespace

// Both pairs are one device type; DeviceOptions::backend says which API executes copies.
extern const BackendDescriptor vulkan_cuda_backend_descriptor;
constinit const BackendDescriptor vulkan_cuda_backend_descriptor{
    .id = Backend::vulkan_cuda,
    .name = "vulkan_cuda",
    .option = "-Dvulkan=enabled -Dcuda=enabled",
    .kind = DeviceKind::composite,
    .built = true,
    .count = &pair_device_count,
    .open = &pair_open,
    .peer_count = &cuda_device_count,
    .runtime_present = &pair_runtime_present,
};
extern const BackendDescriptor cuda_vulkan_backend_descriptor;
constinit const BackendDescriptor cuda_vulkan_backend_descriptor{
    .id = Backend::cuda_vulkan,
    .name = "cuda_vulkan",
    .option = "-Dvulkan=enabled -Dcuda=enabled",
    .kind = DeviceKind::composite,
    .built = true,
    .count = &pair_device_count,
    .open = &pair_open,
    .peer_count = &cuda_device_count,
    .runtime_present = &pair_runtime_present,
};

}  // namespace ferry::detail
