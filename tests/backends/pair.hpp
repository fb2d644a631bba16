// SPDX-License-Identifier: MIT
// The conformance suite on an interop pair (ferry/interop.hpp), plus interop-only cases.
// Included by vulkan_cuda.cpp and cuda_vulkan.cpp with FERRY_TEST_PAIR set to the backend.
// Without both backends built, or without a GPU seen through both APIs (CI), the executable
// reports SKIPPED and exits 77.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>
#include <vulkan/vulkan.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "conformance.hpp"
#include "ferry/vulkan.hpp"
#include "vulkan_foreign_image.hpp"

using namespace ferry;

namespace {

constexpr Backend kPair = Backend::FERRY_TEST_PAIR;

/// An engine's CUDA stream (what PyTorch's current stream is), destroyed with the object.
struct EngineStream {
  cudaStream_t stream = nullptr;
  EngineStream() { REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess); }
  ~EngineStream() { (void)cudaStreamDestroy(stream); }
};

/// The engine's VkImage on the pair's VkDevice (vulkan_foreign_image.hpp), made for export:
/// created for external memory and bound to a dedicated allocation exportable as an opaque fd,
/// for the pair's import into CUDA. Null, with the reason, for ASTC (no CUDA array form) and
/// for what the device cannot make. The image cases of the suite run on it
/// (conformance/image.cpp).
std::unique_ptr<conformance::ForeignImage> pair_image(Device& dev, const ImageDesc& desc, std::string& why_not) {
  if (static_cast<std::uint16_t>(desc.format) >= static_cast<std::uint16_t>(ImageFormat::astc_4x4_unorm)) {
    why_not = "CUDA arrays have no ASTC form, so a pair cannot import the image";
    return nullptr;
  }
  return conformance::foreign_vulkan_image(dev, desc, /*exportable=*/true, why_not);
}

/// The owner of the interop cases: on vulkan_cuda the engine's own CUDA stream, adopted (the
/// consumer of the other API), on cuda_vulkan the device's compute queue (a Vulkan queue).
struct InteropOwner {
  std::unique_ptr<EngineStream> engine;
  Queue owner;
  explicit InteropOwner(Device& dev) : owner(dev.queue(QueueRole::compute)) {
    if (kPair == Backend::vulkan_cuda) {
      engine = std::make_unique<EngineStream>();
      owner = dev.adopt_queue(QueueRole::compute, NativeQueue{.handle = engine->stream}, "engine");
    }
  }
};

/// The engine's own CUDA view of an exported image's memory: its import and the mipmapped
/// array of the image's shape, as the engine's CUDA kernels would read it.
struct EngineCudaView {
  cudaExternalMemory_t memory = nullptr;
  cudaMipmappedArray_t levels = nullptr;
  EngineCudaView(Device& dev, const NativeImage& native, const ImageDesc& desc, cudaChannelFormatDesc channels) {
    const vulkan::NativeHandles h = vulkan::native_handles(dev);
    const auto gdpa =
        reinterpret_cast<PFN_vkGetDeviceProcAddr>(conformance::vulkan_loader()(h.instance, "vkGetDeviceProcAddr"));
    const auto get_fd = reinterpret_cast<PFN_vkGetMemoryFdKHR>(gdpa(h.device, "vkGetMemoryFdKHR"));
    REQUIRE((get_fd != nullptr));
    VkMemoryGetFdInfoKHR info{};
    info.sType = VK_STRUCTURE_TYPE_MEMORY_GET_FD_INFO_KHR;
    std::memcpy(&info.memory, &native.vulkan_memory, sizeof(info.memory));
    info.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
    int fd = -1;
    REQUIRE(get_fd(h.device, &info, &fd) == VK_SUCCESS);
    cudaExternalMemoryHandleDesc handle{};
    handle.type = cudaExternalMemoryHandleTypeOpaqueFd;
    handle.handle.fd = fd;
    handle.size = native.vulkan_memory_size;
    handle.flags = native.vulkan_dedicated ? cudaExternalMemoryDedicated : 0;
    REQUIRE(cudaImportExternalMemory(&memory, &handle) == cudaSuccess);
    cudaExternalMemoryMipmappedArrayDesc shape{};
    shape.offset = native.vulkan_memory_offset;
    shape.formatDesc = channels;
    shape.extent.width = desc.width;
    shape.extent.height = desc.height;
    shape.numLevels = desc.mip_levels;
    REQUIRE(cudaExternalMemoryGetMappedMipmappedArray(&levels, memory, &shape) == cudaSuccess);
  }
  ~EngineCudaView() {
    if (levels != nullptr) CHECK(cudaFreeMipmappedArray(levels) == cudaSuccess);
    if (memory != nullptr) CHECK(cudaDestroyExternalMemory(memory) == cudaSuccess);
  }
  EngineCudaView(const EngineCudaView&) = delete;
  EngineCudaView& operator=(const EngineCudaView&) = delete;
};

}  // namespace

CONFORMANCE_CASE("interop: capabilities describe one GPU seen through both APIs") {
  Device dev = conformance::open_device();
  const Capabilities& caps = dev.capabilities();
  CHECK(caps.backend == kPair);
  CHECK(dev.backend() == kPair);
  CHECK(caps.is_gpu);
  CHECK(caps.timeline_export);
  CHECK(caps.host_memory_registration);
  CHECK(std::any_of(caps.uuid.begin(), caps.uuid.end(), [](std::uint8_t b) { return b != 0; }));
  // The same UUID as the Vulkan device and the CUDA device the pair was made of.
  Device vk = Device::open({.backend = Backend::vulkan, .ordinal = 0});
  CHECK(vk.capabilities().uuid == caps.uuid);
  bool cuda_match = false;
  for (int i = 0; i < Device::count(Backend::cuda); ++i) {
    cuda_match = cuda_match || Device::open({.backend = Backend::cuda, .ordinal = i}).capabilities().uuid == caps.uuid;
  }
  CHECK(cuda_match);
  MESSAGE(caps.name << ": " << caps.notes);
}

CONFORMANCE_CASE("interop: a CUDA ordinal of another or no GPU is a typed error") {
  const int n = Device::count(Backend::cuda);
  DeviceOptions o = conformance::options();
  o.peer_ordinal = n;  // one past the last CUDA device
  conformance::expect_error(ErrorCode::invalid_argument, [&] { (void)Device::open(o); },
                            "open(pair, peer_ordinal out of range)");
  Device vk = Device::open({.backend = Backend::vulkan, .ordinal = o.ordinal});
  int other = -1;
  for (int i = 0; i < n && other < 0; ++i) {
    if (Device::open({.backend = Backend::cuda, .ordinal = i}).capabilities().uuid != vk.capabilities().uuid) other = i;
  }
  if (other < 0) {
    MESSAGE("not supported here: a UUID mismatch needs a second GPU (" << n << " CUDA device(s))");
  } else {
    o.peer_ordinal = other;
    conformance::expect_error(ErrorCode::invalid_argument, [&] { (void)Device::open(o); },
                              "open(pair, CUDA device of another GPU)");
  }
}

// The steady-state loop of a loader feeding a consumer of the other API: random sizes and
// offsets, upload (owner_owned) -> consumer compute -> download of the result, with no host
// wait anywhere until the final check; the consumer waits for each copy on the GPU.
CONFORMANCE_CASE("interop: many random uploads consumed by the other API, no host waits") {
  Device dev = conformance::open_device();
  InteropOwner interop(dev);
  Queue& owner = interop.owner;
  Transfer transfer(dev);
  const int iterations = conformance::small() ? 40 : 300;
  constexpr std::uint64_t kMax = 192 * 1024;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::uint64_t> size_of(1, kMax);
  HostBuffer src = dev.host_pool().allocate(kMax + 4096);
  conformance::fill_pattern(src.span(), 5);
  HostBuffer dst = dev.host_pool().allocate(static_cast<std::uint64_t>(iterations) * kMax);
  struct Step {
    std::uint64_t offset, bytes;
  };
  std::vector<Step> steps;
  TimelinePoint last;
  const std::uint64_t waits_before = dev.host_waits();
  for (int i = 0; i < iterations; ++i) {
    const Step s{rng() % 4096, size_of(rng)};
    Upload up = transfer.upload(src, s.offset, s.bytes, owner);
    DeviceBuffer out = dev.pool().allocate(s.bytes, owner, {.tag = "consumer output"});
    run_synthetic_compute(owner, up.buffer, out, 1 + static_cast<std::uint32_t>(i % 3));
    up.buffer.release();
    last = transfer.download(out, dst, static_cast<std::uint64_t>(i) * kMax);
    out.release();
    steps.push_back(s);
  }
  const std::uint64_t waits_in_loop = dev.host_waits() - waits_before;
  CHECK_MESSAGE(waits_in_loop == 0, waits_in_loop << " host waits in the steady-state loop");
  last.wait(std::chrono::minutes(2));
  for (int i = 0; i < iterations; ++i) {
    const Step& s = steps[static_cast<std::size_t>(i)];
    const auto got = dst.span().subspan(static_cast<std::size_t>(i) * kMax, s.bytes);
    std::int64_t bad = -1;
    const int add = 1;  // out = in + 1, whatever the number of passes
    for (std::uint64_t k = 0; k < s.bytes && bad < 0; ++k) {
      const auto want = static_cast<std::byte>(static_cast<unsigned>(conformance::pattern_byte(5, s.offset + k)) + add);
      if (got[k] != want) bad = static_cast<std::int64_t>(k);
    }
    CHECK_MESSAGE(bad == -1, "iteration " << i << " (" << s.bytes << " bytes at " << s.offset
                                          << "): first wrong byte at " << bad);
    if (bad != -1) break;
  }
  // The footprint claim holds across APIs: released uploads went back to the owner.
  CHECK(dev.pool().get_budget().peak_reserved_bytes <= 64ull << 20);
  conformance::finish_device(dev);  // before the engine's stream goes
}

// A frame from a Vulkan image to a CUDA consumer, the engine's bar for the pair's images: the
// upload runs on the executor's API, the consumer on the CUDA side reads the image through a
// CUDA array of its memory, ordered after the copy on the GPU (the owner's wait), and no
// ferry call waits on the host from the upload to the consumer's enqueued read. On
// vulkan_cuda the consumer is the engine's stream (the adopted owner), reading its own import
// of the memory; on cuda_vulkan the owner is a Vulkan queue and the CUDA side is the
// executor, whose download reads ferry's import after the owner's hand-back.
CONFORMANCE_CASE("interop: a frame in a Vulkan image reaches the CUDA side with no host wait") {
  Device dev = conformance::open_device();
  InteropOwner interop(dev);
  std::unique_ptr<EngineStream>& engine = interop.engine;
  Queue& owner = interop.owner;
  Transfer transfer(dev);
  const ImageDesc desc{.format = ImageFormat::rgba8_unorm, .width = 301, .height = 157, .mip_levels = 3};
  std::string why_not;
  auto foreign = pair_image(dev, desc, why_not);
  REQUIRE_MESSAGE(foreign != nullptr, why_not);
  std::vector<ImageRegion> regions;
  std::uint64_t bytes = 0;
  for (std::uint32_t l = 0; l < desc.mip_levels; ++l) {
    regions.push_back(ImageRegion::whole_level(desc, l, bytes));
    bytes += (region_bytes(format_info(desc.format), regions.back()) + 15) / 16 * 16;
  }
  HostBuffer frame = dev.host_pool().allocate(bytes);
  conformance::fill_pattern(frame.span(), 41);
  HostBuffer back = dev.host_pool().allocate(bytes);
  std::memset(back.data(), 0, bytes);
  {
    Image image = dev.adopt_image(foreign->native, desc, owner, {.tag = "frame"});
    std::unique_ptr<EngineCudaView> view;
    if (kPair == Backend::vulkan_cuda) {
      view = std::make_unique<EngineCudaView>(dev, foreign->native, desc, cudaCreateChannelDesc(8, 8, 8, 8, cudaChannelFormatKindUnsigned));
    }
    const std::uint64_t waits_before = dev.host_waits();
    const TimelinePoint uploaded = transfer.upload_image(frame, image, regions);  // the owner waits on the GPU
    TimelinePoint consumed;
    if (kPair == Backend::vulkan_cuda) {
      for (const ImageRegion& r : regions) {  // the engine's reads, on its stream after the upload call
        cudaArray_t level = nullptr;
        REQUIRE(cudaGetMipmappedArrayLevel(&level, view->levels, r.mip_level) == cudaSuccess);
        const std::size_t row = std::size_t{r.width} * 4;
        REQUIRE(cudaMemcpy2DFromArrayAsync(back.data() + r.buffer_offset, row, level, 0, 0, row, r.height,
                                           cudaMemcpyDeviceToHost, engine->stream) == cudaSuccess);
      }
    } else {
      consumed = transfer.download_image(image, back, regions);  // the CUDA executor, through ferry's import
    }
    const std::uint64_t waits = dev.host_waits() - waits_before;
    CHECK_MESSAGE(waits == 0, waits << " host waits between the upload and the consumer's read");
    if (kPair == Backend::vulkan_cuda) {
      REQUIRE(cudaStreamSynchronize(engine->stream) == cudaSuccess);  // the engine's own wait
    } else {
      consumed.wait(std::chrono::minutes(1));
    }
    CHECK(uploaded.reached());
    image.release().wait(std::chrono::minutes(1));
  }
  for (const ImageRegion& r : regions) {
    const std::size_t n = region_bytes(format_info(desc.format), r);
    CHECK_MESSAGE(std::memcmp(back.data() + r.buffer_offset, frame.data() + r.buffer_offset, n) == 0,
                  "mip level " << r.mip_level << " read on the CUDA side differs from the frame uploaded");
  }
  foreign.reset();                  // the engine's image goes before the VkDevice it was made on
  conformance::finish_device(dev);  // before the engine's stream goes
}

CONFORMANCE_CASE("interop: an image without its exportable memory, or concurrent, is refused") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  const ImageDesc desc{.format = ImageFormat::rgba8_unorm, .width = 64, .height = 32};
  std::string why_not;
  auto foreign = pair_image(dev, desc, why_not);
  REQUIRE_MESSAGE(foreign != nullptr, why_not);
  using conformance::expect_error;
  const auto refused = [&](ErrorCode code, NativeImage n, const char* what) {
    expect_error(code, [&] { (void)dev.adopt_image(n, desc, owner); }, what);
  };
  NativeImage n = foreign->native;
  n.vulkan_memory = 0;
  refused(ErrorCode::invalid_argument, n, "no vulkan_memory");
  n = foreign->native;
  n.vulkan_memory_size = 0;
  refused(ErrorCode::invalid_argument, n, "no vulkan_memory_size");
  n = foreign->native;
  n.vulkan_memory_offset = 256;
  refused(ErrorCode::invalid_argument, n, "an offset into a dedicated allocation");
  n = foreign->native;
  n.vulkan_usage = VK_IMAGE_USAGE_SAMPLED_BIT;
  refused(ErrorCode::invalid_argument, n, "a usage without the transfer bits");
  n = foreign->native;
  n.cuda_array = 1;
  refused(ErrorCode::invalid_argument, n, "a CUDA field");
  n = foreign->native;
  n.vulkan_sharing = MemorySharing::concurrent;
  refused(ErrorCode::unsupported, n, "a concurrent image");
  const ImageDesc astc{.format = ImageFormat::astc_4x4_unorm, .width = 64, .height = 32};
  expect_error(ErrorCode::unsupported, [&] { (void)dev.adopt_image(foreign->native, astc, owner); },
               "ASTC (no CUDA array form)");
  foreign.reset();  // the engine's image goes before the VkDevice it was made on
  conformance::finish_device(dev);
}

int main(int argc, char** argv) {
  if (int skip = conformance::presence_check(kPair)) return skip;
  // The Vulkan side runs under validation when the layer is there (CI has no pair device).
  const char* layers = std::getenv("VK_INSTANCE_LAYERS");
  const bool validation = layers != nullptr && std::string(layers).find("VK_LAYER_KHRONOS_validation") != std::string::npos;
  try {
    Device probe = Device::open({.backend = kPair, .validation = validation});
  } catch (const Error& e) {
    if (e.code() != ErrorCode::unsupported) throw;
    std::printf("SKIPPED: %s: %s\n", std::string(to_string(kPair)).c_str(), e.what());
    return 77;
  }
  conformance::configure({.backend = kPair, .validation = validation});
  conformance::set_image_allocator(&pair_image);
  if (validation) {
    conformance::set_end_of_case_check([](Device& dev) {
      const std::uint64_t n = dev.validation_messages();
      CHECK_MESSAGE(n == 0, n << " Vulkan validation messages (see stderr)");
    });
  }
  std::printf("conformance: %s, validation %s\n", std::string(to_string(kPair)).c_str(), validation ? "on" : "off");
  return conformance::run(argc, argv);
}
