// SPDX-License-Identifier: MIT
// The conformance suite on the CUDA backend (see gpu.hpp).
#define FERRY_TEST_GPU cuda
#define FERRY_TEST_GPU_NAME "cuda"
#define FERRY_TEST_GPU_FOREIGN cuda_foreign_memory
#define FERRY_TEST_GPU_IMAGES cuda_foreign_image
#include "gpu.hpp"

// ---- CUDA only: the engine's context binding ---------------------------------------------
// ferry binds its device's context for the duration of each call and restores the thread's
// binding (ContextGuard, and one binding per upload/download/copy call: BackendDevice::
// bind_thread). The driver entry points are fetched through the runtime, as the backend does,
// so that this executable does not link libcuda (absent on machines with no GPU).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstring>
#include <thread>
#include <vector>

#include "cuda_image.hpp"

namespace {

template <class F>
F driver_entry(const char* symbol) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  REQUIRE(cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &status) == cudaSuccess);
  REQUIRE(status == cudaDriverEntryPointSuccess);
  REQUIRE(p != nullptr);
  return reinterpret_cast<F>(p);
}

// The ABI of each symbol as of CUDA 12.0, the version asked for (cudaTypedefs.h).
using CtxGetCurrent = PFN_cuCtxGetCurrent_v4000;
using CtxSetCurrent = PFN_cuCtxSetCurrent_v4000;
using CtxCreate = PFN_cuCtxCreate_v11040;  // (ctx, affinity params, count, flags, device)
using CtxDestroy = PFN_cuCtxDestroy_v4000;
using DeviceGet = PFN_cuDeviceGet_v2000;

/// Upload (stream-ordered and blocking), copy and download through `dev` on this thread,
/// checking after each call that the thread's binding is still `expected`; then the data.
void calls_keep_binding(Device& dev, CUcontext expected, CtxGetCurrent get_current) {
  const auto binding = [&] {
    CUcontext c = nullptr;
    REQUIRE(get_current(&c) == CUDA_SUCCESS);
    return c;
  };
  REQUIRE(binding() == expected);
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  constexpr std::size_t n = 1 << 20;
  HostBuffer src = dev.host_pool().allocate(n);
  for (std::size_t i = 0; i < n; ++i) src.data()[i] = static_cast<std::byte>(i * 7 + 1);
  Upload up = xfer.upload(src, owner);
  CHECK(binding() == expected);
  Transfer on_owner(dev, {.executor = owner});  // a copy on the owner queue, waited for by the host
  Upload blocking = on_owner.upload(src, owner);
  blocking.ready.wait();
  CHECK(binding() == expected);
  DeviceBuffer copy = dev.pool().allocate(n, owner);
  (void)xfer.copy(up.buffer, copy);
  CHECK(binding() == expected);
  std::vector<std::byte> back(n);
  xfer.download(copy, back);  // pageable: pipelined through the staging ring
  CHECK(binding() == expected);
  HostBuffer back2 = dev.host_pool().allocate(n);
  xfer.download(blocking.buffer, back2).wait();
  CHECK(binding() == expected);
  CHECK(std::memcmp(back.data(), src.data(), n) == 0);
  CHECK(std::memcmp(back2.data(), src.data(), n) == 0);
  up.buffer.release();
  blocking.buffer.release();
  copy.release();
  CHECK(binding() == expected);
}

}  // namespace

// The synthetic kernel is ferry-testkit's device code, loaded into the device at open: a kit
// built with nvcc must make every CUDA device offer it, or the compute cases of the suite
// would pass by skipping.
CONFORMANCE_CASE("cuda: the test kit's kernel is loaded when the device opens") {
  Device dev = conformance::open_device();
  CHECK(dev.capabilities().synthetic_compute == (FERRY_TEST_CUDA_KERNELS != 0));
}

CONFORMANCE_CASE("cuda: calls leave the calling thread's context binding as they found it") {
  Device dev = conformance::open_device();
  const auto get_current = driver_entry<CtxGetCurrent>("cuCtxGetCurrent");
  const auto set_current = driver_entry<CtxSetCurrent>("cuCtxSetCurrent");
  SUBCASE("a thread with no context bound") {
    std::thread engine([&] { calls_keep_binding(dev, nullptr, get_current); });
    engine.join();
  }
  SUBCASE("a thread bound to an engine's own context (not ferry's primary context)") {
    const auto create = driver_entry<CtxCreate>("cuCtxCreate");
    const auto destroy = driver_entry<CtxDestroy>("cuCtxDestroy");
    CUcontext saved = nullptr;
    REQUIRE(get_current(&saved) == CUDA_SUCCESS);
    const auto device_get = driver_entry<DeviceGet>("cuDeviceGet");
    CUdevice device{};
    REQUIRE(device_get(&device, 0) == CUDA_SUCCESS);  // ordinal 0, as open_device()
    CUcontext engine = nullptr;
    REQUIRE(create(&engine, nullptr, 0, 0, device) == CUDA_SUCCESS);  // binds it to this thread
    REQUIRE(engine != nullptr);
    calls_keep_binding(dev, engine, get_current);
    CHECK(set_current(saved) == CUDA_SUCCESS);
    CHECK(destroy(engine) == CUDA_SUCCESS);
  }
}

// ---- The engine's own device memory (adopt.cpp): cudaMalloc on the device under test -----

std::unique_ptr<conformance::ForeignMemory> cuda_foreign_memory(Device& device, std::uint64_t bytes) {
  int previous = 0;
  REQUIRE(cudaGetDevice(&previous) == cudaSuccess);
  REQUIRE(cudaSetDevice(conformance::options().ordinal) == cudaSuccess);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  REQUIRE(cudaSetDevice(previous) == cudaSuccess);
  REQUIRE_MESSAGE(e == cudaSuccess, cudaGetErrorString(e));
  (void)device;
  auto m = std::make_unique<conformance::ForeignMemory>();
  m->native = NativeMemory::from_pointer(p);
  m->size = bytes;
  m->free = [p] { (void)cudaFree(p); };
  return m;
}

// ---- An engine's own work on an adopted stream ----------------------------------------

namespace {
void CUDART_CB sleep_on_stream(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(ms)));
}
}  // namespace

CONFORMANCE_CASE("cuda: a copy out of adopted memory waits for the engine's own work on its stream") {
  // The engine writes its memory with work ferry never saw (a memset on its stream, held back
  // by a host function): a download ordered after "the owner's work so far" must see it.
  Device dev = conformance::open_device();
  REQUIRE(cudaSetDevice(conformance::options().ordinal) == cudaSuccess);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  Queue engine = dev.adopt_queue(QueueRole::compute, NativeQueue{.handle = stream}, "engine");
  constexpr std::size_t n = 1 << 20;
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, n) == cudaSuccess);
  REQUIRE(cudaMemset(p, 0x11, n) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  {
    Transfer xfer(dev);
    DeviceBuffer adopted = dev.adopt_memory(NativeMemory::from_pointer(p), n, engine);
    for (int round = 0; round < 2; ++round) {  // before and after ferry marked the stream once
      CAPTURE(round);
      static int delay_ms = 200;
      const auto value = static_cast<int>(0x40 + round);
      REQUIRE(cudaLaunchHostFunc(stream, sleep_on_stream, &delay_ms) == cudaSuccess);
      REQUIRE(cudaMemsetAsync(p, value, n, stream) == cudaSuccess);
      HostBuffer back = dev.host_pool().allocate(n);
      xfer.download(adopted, back).wait(std::chrono::seconds(30));
      std::size_t stale = 0;
      for (std::size_t i = 0; i < n; ++i) stale += back.data()[i] != static_cast<std::byte>(value);
      CHECK_MESSAGE(stale == 0, stale << " bytes read before the engine's write on its stream");
    }
    adopted.release().wait(std::chrono::seconds(30));
  }
  dev.close();  // ferry's last use of the stream, which must outlive it
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(cudaFree(p) == cudaSuccess);
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
}

CONFORMANCE_CASE("cuda: the legacy default stream is adopted; the per-thread one is refused") {
  Device dev = conformance::open_device();
  REQUIRE(cudaSetDevice(conformance::options().ordinal) == cudaSuccess);
  conformance::expect_error(ErrorCode::invalid_argument,
                            [&] { (void)dev.adopt_queue(QueueRole::compute, NativeQueue{.handle = cudaStreamPerThread}); },
                            "adopt_queue(cudaStreamPerThread)");
  Queue legacy = dev.adopt_queue(QueueRole::compute, NativeQueue{.handle = cudaStreamLegacy}, "legacy");
  constexpr std::size_t n = (1 << 20) + 5;
  Transfer xfer(dev);
  HostBuffer src = dev.host_pool().allocate(n);
  for (std::size_t i = 0; i < n; ++i) src.data()[i] = static_cast<std::byte>(i * 5 + 3);
  Upload up = xfer.upload(src, legacy);  // the legacy stream waits for the copy
  void* out = nullptr;
  REQUIRE(cudaMalloc(&out, n) == cudaSuccess);
  // Engine work on the legacy stream, after the upload call: ordered after the copy.
  REQUIRE(cudaMemcpyAsync(out, reinterpret_cast<void*>(up.buffer.view().address), n, cudaMemcpyDeviceToDevice,
                          cudaStreamLegacy) == cudaSuccess);
  std::vector<std::byte> back(n);
  REQUIRE(cudaMemcpyAsync(back.data(), out, n, cudaMemcpyDeviceToHost, cudaStreamLegacy) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(cudaStreamLegacy) == cudaSuccess);
  CHECK(std::memcmp(back.data(), src.data(), n) == 0);
  up.buffer.release().wait(std::chrono::seconds(30));
  CHECK(cudaFree(out) == cudaSuccess);
  dev.close();
}

// ---- CUDA only: the engine's arrays for the image cases ----------------------------------

/// The engine's array (testkit/cuda_image.hpp, the maker ferry-bench's image study uses
/// too): a cudaArray_t (one level) or cudaMipmappedArray_t (several) of unsigned elements of
/// the format's size, layered for array images, 3D for volumes; for BC formats an array of
/// the format's block-compressed channel kind, its extent in texels. ASTC: null (CUDA arrays
/// have no ASTC form, and Device::adopt_image refuses it).
std::unique_ptr<conformance::ForeignImage> cuda_foreign_image(Device& /*device*/, const ImageDesc& desc,
                                                              std::string& why_not) {
  REQUIRE(cudaSetDevice(conformance::options().ordinal) == cudaSuccess);
  const cudaChannelFormatDesc channels = testkit::cuda_engine_channels(desc.format, why_not);
  if (!why_not.empty()) return nullptr;
  auto image = std::make_unique<conformance::ForeignImage>();
  image->desc = desc;
  const char* call = "";
  const cudaError_t made = testkit::make_cuda_engine_array(desc, channels, image->native, call);
  REQUIRE_MESSAGE(made == cudaSuccess, call << ": " << cudaGetErrorString(made));
  const NativeImage native = image->native;
  image->free = [native] { CHECK(testkit::free_cuda_engine_array(native) == cudaSuccess); };
  return image;
}

// ---- CUDA only: block-compressed arrays are adopted as their own format ------------------
// The check compares a BC array's channel kind, since its channels' bits (BC7 reports four
// 8-bit channels) say nothing of the block; and an uncompressed array of a block's size is
// not a block-compressed one, nor the reverse. ASTC has no CUDA array form.
CONFORMANCE_CASE("cuda: a block-compressed array is adopted only as its own BC format") {
  Device dev = conformance::open_device();
  Queue compute = dev.queue(QueueRole::compute);
  const ImageDesc bc7{.format = ImageFormat::bc7_unorm, .width = 37, .height = 19};
  std::string why_not;
  const auto array = cuda_foreign_image(dev, bc7, why_not);
  REQUIRE_MESSAGE(array != nullptr, why_not);
  const auto stated_as = [&](const conformance::ForeignImage& image, ImageFormat format) {
    ImageDesc d = image.desc;
    d.format = format;
    return [&image, &dev, &compute, d] { (void)dev.adopt_image(image.native, d, compute); };
  };
  using conformance::expect_error;
  expect_error(ErrorCode::invalid_argument, stated_as(*array, ImageFormat::bc7_srgb), "BC7 array as bc7_srgb");
  expect_error(ErrorCode::invalid_argument, stated_as(*array, ImageFormat::bc6h_ufloat), "BC7 array as bc6h_ufloat");
  expect_error(ErrorCode::invalid_argument, stated_as(*array, ImageFormat::bc1_rgba_unorm), "BC7 array as bc1");
  expect_error(ErrorCode::invalid_argument, stated_as(*array, ImageFormat::rgba8_unorm),
               "BC7 array as rgba8_unorm (its channels' 32 bits)");
  expect_error(ErrorCode::invalid_argument, stated_as(*array, ImageFormat::rgba32_uint),
               "BC7 array as rgba32_uint (its block's 16 bytes)");
  expect_error(ErrorCode::unsupported, stated_as(*array, ImageFormat::astc_4x4_unorm), "ASTC");
  const ImageDesc wide{.format = ImageFormat::rgba32_uint, .width = 37, .height = 19};
  const auto plain = cuda_foreign_image(dev, wide, why_not);
  REQUIRE(plain != nullptr);
  expect_error(ErrorCode::invalid_argument, stated_as(*plain, ImageFormat::bc7_unorm),
               "a 128-bit uncompressed array as bc7_unorm");
  try {
    stated_as(*array, ImageFormat::bc7_srgb)();
  } catch (const Error& e) {
    CHECK_MESSAGE(std::string(e.message()).find("block-compressed") != std::string::npos, e.message());
  }
  Image image = dev.adopt_image(array->native, bc7, compute);
  CHECK(image.valid());
  image.release().wait(std::chrono::seconds(30));
}
