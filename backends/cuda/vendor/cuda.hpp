// SPDX-License-Identifier: MIT
// CUDA side of the vendor shim (see vendor.hpp for the names every shim provides).
//
// Linking: nothing. The driver API is resolved at run time from libcuda.so.1, which ships with
// the NVIDIA driver (not with the toolkit): dlopen at the first use, then cuGetProcAddress for
// every function at a stated ABI version. So libferry loads on any machine, and a machine
// without the driver sees "no CUDA device" with the library named, not a loader failure. Only
// CUDA's headers are used (<cuda.h>, <cudaTypedefs.h>); the CUDA runtime (libcudart) is
// neither linked nor included.
//
// The backend's sources are written against CUDA runtime names (cudaMalloc, cudaStream_t,
// ...). This shim provides those names in the backend's namespace, each implemented over the
// driver table below, so the sources read as before and the HIP shim maps the same names.
//
// Contexts: the driver API has no implicit current device. Every entry point of the backend
// binds the device's primary context to the calling thread for its duration (ContextGuard,
// cuda_internal.hpp), whichever thread it runs on; the functions here rely on that binding.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "check.hpp"

#if CUDA_VERSION < 12000
#error "ferry's CUDA backend needs the headers of CUDA 12 or newer"
#endif

#define FERRY_GPU_NS cuda_impl
#define FERRY_GPU_BACKEND ::ferry::Backend::cuda
#define FERRY_GPU_LABEL "cuda"
#define FERRY_GPU_VENDOR "CUDA"
#define FERRY_GPU_DESCRIPTOR cuda_backend_descriptor
#define FERRY_GPU_OPTION "-Dcuda=enabled"
#define FERRY_GPU_HAS_IMAGES 1
// cuMemcpyBatchAsync took a failure-index argument before CUDA 13; only 13's form is used, and
// only where the driver has it (vendor::has_batch_copy).
#define FERRY_GPU_HAS_BATCH_COPY (CUDA_VERSION >= 13000)

namespace ferry::detail::cuda_impl::vendor {

/// The library the backend loads, and what installs it (errors name both).
inline constexpr const char* kDefaultLibrary = "libcuda.so.1";
inline constexpr const char* kLibraryOrigin = "the NVIDIA driver";
/// Environment variable naming another path (or soname) to load instead of libcuda.so.1.
inline constexpr const char* kLibraryVariable = "FERRY_CUDA_LIBRARY";

/// The ABI every function below is asked for: CUDA 12.0's. A newer driver then never hands
/// back a changed signature, and each pointer's type (PFN_<name>_v<version>, the newest form
/// at or before 12.0) is the ABI asked for.
inline constexpr int kAbi = 12000;

// The driver functions the backend uses: X(name, pointer type).
#define FERRY_CU_FUNCTIONS(X)                                                   \
  X(cuGetErrorName, PFN_cuGetErrorName_v6000)                                   \
  X(cuGetErrorString, PFN_cuGetErrorString_v6000)                               \
  X(cuInit, PFN_cuInit_v2000)                                                   \
  X(cuDriverGetVersion, PFN_cuDriverGetVersion_v2020)                           \
  X(cuDeviceGetCount, PFN_cuDeviceGetCount_v2000)                               \
  X(cuDeviceGet, PFN_cuDeviceGet_v2000)                                         \
  X(cuDeviceGetName, PFN_cuDeviceGetName_v2000)                                 \
  X(cuDeviceTotalMem, PFN_cuDeviceTotalMem_v3020)                               \
  X(cuDeviceGetUuid, PFN_cuDeviceGetUuid_v11040)                                \
  X(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute_v2000)                       \
  X(cuDeviceCanAccessPeer, PFN_cuDeviceCanAccessPeer_v4000)                     \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000)               \
  X(cuCtxGetCurrent, PFN_cuCtxGetCurrent_v4000)                                 \
  X(cuCtxSetCurrent, PFN_cuCtxSetCurrent_v4000)                                 \
  X(cuCtxGetStreamPriorityRange, PFN_cuCtxGetStreamPriorityRange_v5050)         \
  X(cuCtxEnablePeerAccess, PFN_cuCtxEnablePeerAccess_v4000)                     \
  X(cuStreamCreateWithPriority, PFN_cuStreamCreateWithPriority_v5050)           \
  X(cuStreamDestroy, PFN_cuStreamDestroy_v4000)                                 \
  X(cuStreamSynchronize, PFN_cuStreamSynchronize_v2000)                         \
  X(cuStreamWaitEvent, PFN_cuStreamWaitEvent_v3020)                             \
  X(cuStreamWriteValue64, PFN_cuStreamWriteValue64_v11070)                      \
  X(cuStreamWaitValue64, PFN_cuStreamWaitValue64_v11070)                        \
  X(cuEventCreate, PFN_cuEventCreate_v2000)                                     \
  X(cuEventDestroy, PFN_cuEventDestroy_v4000)                                   \
  X(cuEventRecord, PFN_cuEventRecord_v2000)                                     \
  X(cuEventQuery, PFN_cuEventQuery_v2000)                                       \
  X(cuEventSynchronize, PFN_cuEventSynchronize_v2000)                           \
  X(cuMemAlloc, PFN_cuMemAlloc_v3020)                                           \
  X(cuMemFree, PFN_cuMemFree_v3020)                                             \
  X(cuMemHostAlloc, PFN_cuMemHostAlloc_v2020)                                   \
  X(cuMemFreeHost, PFN_cuMemFreeHost_v2000)                                     \
  X(cuMemHostRegister, PFN_cuMemHostRegister_v6050)                             \
  X(cuMemHostUnregister, PFN_cuMemHostUnregister_v4000)                         \
  X(cuMemHostGetFlags, PFN_cuMemHostGetFlags_v2030)                             \
  X(cuMemHostGetDevicePointer, PFN_cuMemHostGetDevicePointer_v3020)             \
  X(cuPointerGetAttributes, PFN_cuPointerGetAttributes_v7000)                   \
  X(cuMemcpyHtoDAsync, PFN_cuMemcpyHtoDAsync_v3020)                             \
  X(cuMemcpyDtoHAsync, PFN_cuMemcpyDtoHAsync_v3020)                             \
  X(cuMemcpyDtoDAsync, PFN_cuMemcpyDtoDAsync_v3020)                             \
  X(cuMemcpyPeerAsync, PFN_cuMemcpyPeerAsync_v4000)                             \
  X(cuMemcpy2DAsync, PFN_cuMemcpy2DAsync_v3020)                                 \
  X(cuMemcpy3DAsync, PFN_cuMemcpy3DAsync_v3020)                                 \
  X(cuArray3DGetDescriptor, PFN_cuArray3DGetDescriptor_v3020)                   \
  X(cuMipmappedArrayGetLevel, PFN_cuMipmappedArrayGetLevel_v5000)               \
  X(cuMipmappedArrayDestroy, PFN_cuMipmappedArrayDestroy_v5000)                 \
  X(cuImportExternalMemory, PFN_cuImportExternalMemory_v10000)                  \
  X(cuExternalMemoryGetMappedBuffer, PFN_cuExternalMemoryGetMappedBuffer_v10000) \
  X(cuExternalMemoryGetMappedMipmappedArray, PFN_cuExternalMemoryGetMappedMipmappedArray_v10000) \
  X(cuDestroyExternalMemory, PFN_cuDestroyExternalMemory_v10000)                \
  X(cuImportExternalSemaphore, PFN_cuImportExternalSemaphore_v10000)            \
  X(cuSignalExternalSemaphoresAsync, PFN_cuSignalExternalSemaphoresAsync_v10000) \
  X(cuWaitExternalSemaphoresAsync, PFN_cuWaitExternalSemaphoresAsync_v10000)    \
  X(cuDestroyExternalSemaphore, PFN_cuDestroyExternalSemaphore_v10000)          \
  X(cuModuleLoadData, PFN_cuModuleLoadData_v2000)                               \
  X(cuModuleUnload, PFN_cuModuleUnload_v2000)                                   \
  X(cuModuleGetFunction, PFN_cuModuleGetFunction_v2000)                         \
  X(cuFuncGetAttribute, PFN_cuFuncGetAttribute_v2020)                           \
  X(cuLaunchKernel, PFN_cuLaunchKernel_v4000)

/// cuStreamGetDevice (CUDA 12.8), spelled out so that headers older than 12.8 compile too.
using PFN_StreamGetDevice = CUresult(CUDAAPI*)(CUstream stream, CUdevice* device);

/// The driver, resolved once per process.
struct Driver {
#define FERRY_CU_MEMBER(name, type) type name = nullptr;
  FERRY_CU_FUNCTIONS(FERRY_CU_MEMBER)
#undef FERRY_CU_MEMBER
  /// Functions of newer drivers, asked for at the version whose signature the pointer has, and
  /// only of a driver of that version or newer: asked of an older driver, cuGetProcAddress
  /// would return that driver's older form under the same name, with another signature.
  PFN_StreamGetDevice cuStreamGetDevice = nullptr;  ///< driver >= 12.8
#if CUDA_VERSION >= 13000
  PFN_cuMemcpyBatchAsync_v13000 cuMemcpyBatchAsync = nullptr;  ///< driver >= 13.0
#endif
  int version = 0;                       ///< cuDriverGetVersion
  CUresult init = CUDA_ERROR_NOT_INITIALIZED;  ///< what cuInit(0) returned
};

/// What loading the driver found: the table, or why there is none.
struct DriverLoad {
  Driver driver;
  bool loaded = false;
  std::string failure;  ///< why not loaded: the library, the loader's reason, what installs it
};

/// The library to open: FERRY_CUDA_LIBRARY when set and not empty, else libcuda.so.1.
inline std::string library_name() {
  const char* named = std::getenv(kLibraryVariable);
  return named != nullptr && *named != '\0' ? std::string(named) : std::string(kDefaultLibrary);
}

/// Open the library and resolve every function (first call only; never throws). The library
/// stays open for the process: the pointers handed out stay valid.
inline const DriverLoad& driver_load() noexcept {
  static const DriverLoad load = []() noexcept {
    DriverLoad l;
    try {
      const std::string name = library_name();
      void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib == nullptr) {
        const char* why = dlerror();
        l.failure = "cannot load " + name + " (" + (why != nullptr ? why : "not found") + "), which " +
                    kLibraryOrigin + " installs; " + kLibraryVariable + " names another path to load";
        return l;
      }
      // cuGetProcAddress_v2 (CUDA 12.0): reports whether a symbol was found for the version.
      auto get_proc = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(lib, "cuGetProcAddress_v2"));
      if (get_proc == nullptr) {
        l.failure = name + " has no cuGetProcAddress_v2: the NVIDIA driver is older than CUDA 12, which ferry needs";
        return l;
      }
      const auto resolve = [&](const char* symbol, int version, void** out) {
        CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        // Legacy-stream forms: a stream handle means what it means to an application built
        // with CUDA's default, and the legacy default stream (handle 1) is an explicit handle.
        const CUresult r = get_proc(symbol, out, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status);
        if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || *out == nullptr) {
          *out = nullptr;
          return false;
        }
        return true;
      };
      Driver& d = l.driver;
      std::string missing;
#define FERRY_CU_RESOLVE(name, type)                                                  \
  {                                                                                     \
    void* p = nullptr;                                                                  \
    if (resolve(#name, kAbi, &p)) {                                                     \
      d.name = reinterpret_cast<type>(p);                                               \
    } else {                                                                            \
      missing += (missing.empty() ? "" : ", ") + std::string(#name);                    \
    }                                                                                   \
  }
      FERRY_CU_FUNCTIONS(FERRY_CU_RESOLVE)
#undef FERRY_CU_RESOLVE
      if (!missing.empty()) {
        l.failure = name + " does not provide " + missing + " (the NVIDIA driver is older than CUDA 12, which ferry needs)";
        return l;
      }
      if (d.cuDriverGetVersion(&d.version) != CUDA_SUCCESS) d.version = 0;
      void* p = nullptr;
      if (d.version >= 12080 && resolve("cuStreamGetDevice", 12080, &p)) {
        d.cuStreamGetDevice = reinterpret_cast<PFN_StreamGetDevice>(p);
      }
#if CUDA_VERSION >= 13000
      if (d.version >= 13000 && resolve("cuMemcpyBatchAsync", 13000, &p)) {
        d.cuMemcpyBatchAsync = reinterpret_cast<PFN_cuMemcpyBatchAsync_v13000>(p);
      }
#endif
      d.init = d.cuInit(0);
      l.loaded = true;
    } catch (...) {  // out of memory building a message
      l.loaded = false;
    }
    return l;
  }();
  return load;
}

/// Whether the driver library loads and provides what the backend needs (Device::runtime_present).
inline bool runtime_loaded() noexcept { return driver_load().loaded; }

/// The `unsupported` error of a backend whose driver library cannot be loaded.
[[noreturn]] inline void fail_runtime_missing() {
  throw Error(ErrorCode::unsupported, "cuda: " + driver_load().failure, "dlopen", std::source_location{});
}

/// The loaded driver; throws `unsupported` (naming the library) where it cannot be loaded.
inline const Driver& driver() {
  const DriverLoad& l = driver_load();
  if (!l.loaded) fail_runtime_missing();
  return l.driver;
}

/// Text for a driver error: its name, number and description, as the driver gives them.
inline std::string describe(CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  const DriverLoad& l = driver_load();
  // Both fail only for a code the driver does not know; fall back to the number then.
  if (!l.loaded || l.driver.cuGetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr) name = "CUresult";
  if (!l.loaded || l.driver.cuGetErrorString(r, &text) != CUDA_SUCCESS || text == nullptr) text = "unknown error";
  return std::string(name) + " (" + std::to_string(static_cast<int>(r)) + "): " + text;
}

inline ErrorCode classify(CUresult r) {
  switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY: return ErrorCode::out_of_memory;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
    case CUDA_ERROR_NOT_SUPPORTED: return ErrorCode::unsupported;
    // Sticky errors: the context is unusable until the process exits.
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_DEVICE_UNAVAILABLE: return ErrorCode::device_lost;
    default: return ErrorCode::backend_error;
  }
}

#define FERRY_CU_CHECK(expr) \
  FERRY_CHECK_GEN(expr, CUDA_SUCCESS, ::ferry::detail::cuda_impl::vendor::describe, \
                  ::ferry::detail::cuda_impl::vendor::classify)

/// The primary context of device `ordinal`, retained once per process and kept (as the CUDA
/// runtime keeps it): the context an engine using the runtime works in, so its streams and
/// pointers are valid in ferry's calls and the other way round.
inline CUresult primary_context(int ordinal, CUcontext* out) {
  static constexpr int kMaxDevices = 64;
  static std::array<CUcontext, kMaxDevices> contexts{};
  static std::mutex mutex;
  if (ordinal < 0 || ordinal >= kMaxDevices) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(mutex);
  if (contexts[static_cast<std::size_t>(ordinal)] == nullptr) {
    const Driver& d = driver();
    CUdevice dev = 0;
    if (const CUresult r = d.cuDeviceGet(&dev, ordinal); r != CUDA_SUCCESS) return r;
    CUcontext ctx = nullptr;
    if (const CUresult r = d.cuDevicePrimaryCtxRetain(&ctx, dev); r != CUDA_SUCCESS) return r;
    contexts[static_cast<std::size_t>(ordinal)] = ctx;
  }
  *out = contexts[static_cast<std::size_t>(ordinal)];
  return CUDA_SUCCESS;
}

/// What makes a device current on a thread: its primary context, bound with
/// cuCtxGetCurrent/cuCtxSetCurrent. Restoring a thread that had no context restores null
/// exactly, so ferry never leaves a context bound that the engine did not bind.
using DeviceContext = CUcontext;

/// The current binding of the calling thread (may be null).
inline DeviceContext current_context() {
  CUcontext c = nullptr;
  FERRY_CU_CHECK(driver().cuCtxGetCurrent(&c));
  return c;
}

/// A binding as a word and back (ThreadBinding::previous in backend.hpp).
inline std::uintptr_t context_word(DeviceContext c) noexcept { return reinterpret_cast<std::uintptr_t>(c); }
inline DeviceContext context_from_word(std::uintptr_t w) noexcept { return reinterpret_cast<DeviceContext>(w); }

/// Bind `c` to the calling thread.
inline void make_current(DeviceContext c) { FERRY_CU_CHECK(driver().cuCtxSetCurrent(c)); }

/// Bind `c` from a destructor: cannot throw; failing here means the driver is gone already.
inline void restore_current(DeviceContext c) noexcept {
  const DriverLoad& l = driver_load();
  if (l.loaded) (void)l.driver.cuCtxSetCurrent(c);
}

/// The context of device `ordinal` (its primary context). The calling thread's binding is
/// left as it was.
inline DeviceContext device_context(int ordinal) {
  CUcontext ctx = nullptr;
  FERRY_CU_CHECK(primary_context(ordinal, &ctx));
  return ctx;
}

}  // namespace ferry::detail::cuda_impl::vendor

// ---- The CUDA runtime names the backend's sources use, over the driver. Each returns the
// driver's CUresult; the error checks describe it with the driver's own names.
namespace ferry::detail::cuda_impl {

using cudaError_t = CUresult;
inline constexpr CUresult cudaSuccess = CUDA_SUCCESS;
inline constexpr CUresult cudaErrorNotReady = CUDA_ERROR_NOT_READY;
inline constexpr CUresult cudaErrorInvalidValue = CUDA_ERROR_INVALID_VALUE;
inline constexpr CUresult cudaErrorHostMemoryAlreadyRegistered = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
inline constexpr CUresult cudaErrorPeerAccessAlreadyEnabled = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;

using cudaStream_t = CUstream;
using cudaEvent_t = CUevent;
/// The legacy default stream and the per-thread default stream: the same handles in both APIs.
inline const cudaStream_t cudaStreamLegacy = CU_STREAM_LEGACY;
inline const cudaStream_t cudaStreamPerThread = CU_STREAM_PER_THREAD;
inline constexpr unsigned cudaStreamNonBlocking = CU_STREAM_NON_BLOCKING;
inline constexpr unsigned cudaEventDisableTiming = CU_EVENT_DISABLE_TIMING;
inline constexpr unsigned cudaHostAllocPortable = CU_MEMHOSTALLOC_PORTABLE;
inline constexpr unsigned cudaHostAllocMapped = CU_MEMHOSTALLOC_DEVICEMAP;
inline constexpr unsigned cudaHostRegisterPortable = CU_MEMHOSTREGISTER_PORTABLE;

/// The device facts the backend reads (the runtime's cudaDeviceProp, these fields only).
struct cudaDeviceProp {
  char name[256] = {};
  int multiProcessorCount = 0;
  std::size_t totalGlobalMem = 0;
  CUuuid uuid{};
};

/// The driver keeps no per-thread last error: nothing to consume.
inline cudaError_t cudaGetLastError() noexcept { return CUDA_SUCCESS; }

/// Devices the driver sees; cuInit's failure (no device, driver too old) when it failed.
inline cudaError_t cudaGetDeviceCount(int* count) {
  const vendor::Driver& d = vendor::driver();
  if (d.init != CUDA_SUCCESS) return d.init;
  return d.cuDeviceGetCount(count);
}

inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int ordinal) {
  const vendor::Driver& d = vendor::driver();
  CUdevice dev = 0;
  CUresult r = d.cuDeviceGet(&dev, ordinal);
  if (r == CUDA_SUCCESS) r = d.cuDeviceGetName(prop->name, static_cast<int>(sizeof prop->name) - 1, dev);
  if (r == CUDA_SUCCESS) r = d.cuDeviceTotalMem(&prop->totalGlobalMem, dev);
  if (r == CUDA_SUCCESS) r = d.cuDeviceGetAttribute(&prop->multiProcessorCount, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  if (r == CUDA_SUCCESS) r = d.cuDeviceGetUuid(&prop->uuid, dev);
  return r;
}

/// The bound context's stream priority range.
inline cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  return vendor::driver().cuCtxGetStreamPriorityRange(least, greatest);
}

inline cudaError_t cudaDeviceCanAccessPeer(int* can, int ordinal, int peer) {
  const vendor::Driver& d = vendor::driver();
  CUdevice a = 0;
  CUdevice b = 0;
  CUresult r = d.cuDeviceGet(&a, ordinal);
  if (r == CUDA_SUCCESS) r = d.cuDeviceGet(&b, peer);
  if (r == CUDA_SUCCESS) r = d.cuDeviceCanAccessPeer(can, a, b);
  return r;
}

/// Let the bound context reach `peer`'s memory (its primary context's).
inline cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags) {
  CUcontext ctx = nullptr;
  if (const CUresult r = vendor::primary_context(peer, &ctx); r != CUDA_SUCCESS) return r;
  return vendor::driver().cuCtxEnablePeerAccess(ctx, flags);
}

inline cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned flags, int priority) {
  return vendor::driver().cuStreamCreateWithPriority(stream, flags, priority);
}
inline cudaError_t cudaStreamDestroy(cudaStream_t stream) { return vendor::driver().cuStreamDestroy(stream); }
inline cudaError_t cudaStreamSynchronize(cudaStream_t stream) { return vendor::driver().cuStreamSynchronize(stream); }

inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  return vendor::driver().cuEventCreate(event, flags);
}
inline cudaError_t cudaEventDestroy(cudaEvent_t event) { return vendor::driver().cuEventDestroy(event); }
inline cudaError_t cudaEventSynchronize(cudaEvent_t event) { return vendor::driver().cuEventSynchronize(event); }

inline CUdeviceptr to_device_address(const void* p) noexcept {
  return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p));
}
inline void* from_device_address(CUdeviceptr p) noexcept {
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p));
}

inline cudaError_t cudaMalloc(void** p, std::size_t bytes) {
  CUdeviceptr d = 0;
  const CUresult r = vendor::driver().cuMemAlloc(&d, bytes);
  if (r == CUDA_SUCCESS) *p = from_device_address(d);
  return r;
}
inline cudaError_t cudaFree(void* p) { return vendor::driver().cuMemFree(to_device_address(p)); }

inline cudaError_t cudaHostAlloc(void** p, std::size_t bytes, unsigned flags) {
  return vendor::driver().cuMemHostAlloc(p, bytes, flags);
}
inline cudaError_t cudaFreeHost(void* p) { return vendor::driver().cuMemFreeHost(p); }
inline cudaError_t cudaHostRegister(void* p, std::size_t bytes, unsigned flags) {
  return vendor::driver().cuMemHostRegister(p, bytes, flags);
}
inline cudaError_t cudaHostUnregister(void* p) { return vendor::driver().cuMemHostUnregister(p); }
inline cudaError_t cudaHostGetFlags(unsigned* flags, void* p) { return vendor::driver().cuMemHostGetFlags(flags, p); }
inline cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned flags) {
  CUdeviceptr d = 0;
  const CUresult r = vendor::driver().cuMemHostGetDevicePointer(&d, host, flags);
  if (r == CUDA_SUCCESS) *device = from_device_address(d);
  return r;
}

/// A copy between the memories of two devices, with their primary contexts.
inline cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_ordinal, const void* src, int src_ordinal, std::size_t bytes,
                                       cudaStream_t stream) {
  CUcontext dst_ctx = nullptr;
  CUcontext src_ctx = nullptr;
  CUresult r = vendor::primary_context(dst_ordinal, &dst_ctx);
  if (r == CUDA_SUCCESS) r = vendor::primary_context(src_ordinal, &src_ctx);
  if (r != CUDA_SUCCESS) return r;
  return vendor::driver().cuMemcpyPeerAsync(to_device_address(dst), dst_ctx, to_device_address(src), src_ctx, bytes,
                                            stream);
}

}  // namespace ferry::detail::cuda_impl

namespace ferry::detail::cuda_impl::vendor {

/// Device facts that need vendor-specific queries.
struct Features {
  std::string uuid;              ///< "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints
  std::array<std::uint8_t, 16> uuid_bytes{};  ///< the same, raw (Capabilities::uuid)
  std::uint32_t copy_engines = 0;
  bool memory_pools = false;     ///< stream-ordered allocation (cuMemAllocAsync family) usable
  bool stream_mem_ops64 = false; ///< cuStreamWaitValue64/WriteValue64 usable
};

inline Features query_features(int ordinal, const cudaDeviceProp& prop) {
  Features f;
  char buf[48];
  const auto* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  std::snprintf(buf, sizeof buf,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  f.uuid = buf;
  std::memcpy(f.uuid_bytes.data(), u, f.uuid_bytes.size());
  const Driver& d = driver();
  CUdevice dev = 0;
  FERRY_CU_CHECK(d.cuDeviceGet(&dev, ordinal));
  int v = 0;
  FERRY_CU_CHECK(d.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, dev));
  f.copy_engines = static_cast<std::uint32_t>(v);
  FERRY_CU_CHECK(d.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev));
  f.memory_pools = v != 0;
  FERRY_CU_CHECK(d.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev));
  f.stream_mem_ops64 = v != 0;
  return f;
}

/// Signal: write `value` to `dev_ptr` after all earlier work of `s`. The default flags keep
/// the memory barrier, so the writes of earlier copies are visible before the value is.
inline void write_value64(cudaStream_t s, void* dev_ptr, std::uint64_t value) {
  FERRY_CU_CHECK(driver().cuStreamWriteValue64(s, to_device_address(dev_ptr), value, CU_STREAM_WRITE_VALUE_DEFAULT));
}

/// Wait: later work of `s` starts once `*dev_ptr >= value`. No CU_STREAM_WAIT_VALUE_FLUSH:
/// that flag orders GPUDirect RDMA writes from third-party devices, which ferry never relies
/// on (its data arrives by stream-ordered copies or by host writes made before the host's
/// release store of the counter), and it would add a flush to every wait.
inline void wait_value64_geq(cudaStream_t s, void* dev_ptr, std::uint64_t value) {
  FERRY_CU_CHECK(driver().cuStreamWaitValue64(s, to_device_address(dev_ptr), value, CU_STREAM_WAIT_VALUE_GEQ));
}

// The stream operations of the buffer copies and of every hand-off. The caller has bound the
// stream's context (ContextGuard), which the legacy default stream needs: handle 1 names the
// bound context's legacy stream.

/// Enqueue a copy of `bytes` from host memory to device memory on `s`.
inline void copy_h2d_async(void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
  FERRY_CU_CHECK(driver().cuMemcpyHtoDAsync(to_device_address(dst), src, bytes, s));
}

/// Enqueue a copy of `bytes` from device memory to host memory on `s`.
inline void copy_d2h_async(void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
  FERRY_CU_CHECK(driver().cuMemcpyDtoHAsync(dst, to_device_address(src), bytes, s));
}

/// Enqueue a copy of `bytes` between two device ranges on `s`.
inline void copy_d2d_async(void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
  FERRY_CU_CHECK(driver().cuMemcpyDtoDAsync(to_device_address(dst), to_device_address(src), bytes, s));
}

/// Whether the driver has the batched copy (cuMemcpyBatchAsync of CUDA 13).
inline bool has_batch_copy() {
#if CUDA_VERSION >= 13000
  return driver().cuMemcpyBatchAsync != nullptr;
#else
  return false;
#endif
}

#if CUDA_VERSION >= 13000
/// One batched copy of `count` ranges on `s` (has_batch_copy() is true): host and device
/// addresses alike, as the unified address space gives them. Stream-ordered source access
/// keeps the batch's ordering that of single copies on `s`.
inline void copy_batch_async(CUdeviceptr* dsts, CUdeviceptr* srcs, std::size_t* sizes, std::size_t count,
                             cudaStream_t s) {
  CUmemcpyAttributes attributes{};
  attributes.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  attributes.flags = CU_MEMCPY_FLAG_DEFAULT;
  std::size_t first = 0;  // every copy uses attributes[0]
  FERRY_CU_CHECK(driver().cuMemcpyBatchAsync(dsts, srcs, sizes, count, &attributes, &first, 1, s));
}
#endif

/// Record `e` after the work enqueued on `s` so far.
inline void record_event(cudaEvent_t e, cudaStream_t s) { FERRY_CU_CHECK(driver().cuEventRecord(e, s)); }

/// Later work of `s` waits for the last record of `e`.
inline void stream_wait_event(cudaStream_t s, cudaEvent_t e) { FERRY_CU_CHECK(driver().cuStreamWaitEvent(s, e, 0)); }

/// Whether the work before the last record of `e` is complete; a device error throws.
inline bool event_complete(cudaEvent_t e) {
  const CUresult r = driver().cuEventQuery(e);
  if (r == CUDA_ERROR_NOT_READY) return false;
  FERRY_CU_CHECK(r);
  return true;
}

/// True for handles that name an implicit stream rather than a stream object.
/// Streams adopt_queue refuses: the null handle, and the per-thread default stream, which
/// names a different stream on each thread. The legacy default stream (`cudaStreamLegacy`,
/// PyTorch's default stream) is one stream of the context: events order it like any other, and
/// its implicit synchronization with blocking streams only adds ordering (ferry's own streams
/// are non-blocking, so it adds none to them).
inline bool is_implicit_stream(cudaStream_t s) { return s == nullptr || s == CU_STREAM_PER_THREAD; }
/// The legacy default stream, which the driver cannot attribute to a device: it is the
/// current context's, which adopt_queue binds.
inline bool is_legacy_stream(cudaStream_t s) { return s == CU_STREAM_LEGACY; }

/// Device ordinal of a stream, or nullopt where the driver cannot tell (older than 12.8).
/// Throws invalid_argument when the handle is not a live stream.
inline std::optional<int> stream_device(cudaStream_t s) {
  const Driver& d = driver();
  if (d.cuStreamGetDevice == nullptr) return std::nullopt;
  CUdevice device = 0;
  const CUresult r = d.cuStreamGetDevice(s, &device);
  if (r == CUDA_ERROR_INVALID_HANDLE || r == CUDA_ERROR_CONTEXT_IS_DESTROYED || r == CUDA_ERROR_INVALID_CONTEXT) {
    throw Error(ErrorCode::invalid_argument,
                "cuda: adopt_queue: handle is not a live cudaStream_t (" + describe(r) + ")", "cuStreamGetDevice",
                std::source_location{});
  }
  FERRY_CU_CHECK(r);
  int count = 0;
  FERRY_CU_CHECK(d.cuDeviceGetCount(&count));
  for (int i = 0; i < count; ++i) {
    CUdevice di = 0;
    FERRY_CU_CHECK(d.cuDeviceGet(&di, i));
    if (di == device) return i;
  }
  return std::nullopt;
}

/// Where a pointer's memory lives (Device::adopt_memory, HostPool::adopt): device or managed
/// memory of device `device`, page-locked host memory allocated or registered for `device`,
/// or neither; and, where the driver reports it, the mapping the pointer lies in
/// (`mapping_size` 0 when unknown).
struct PointerLocation {
  bool device_memory = false;
  bool host_memory = false;
  int device = -1;
  std::uint64_t mapping_start = 0;
  std::uint64_t mapping_size = 0;

  /// Whether [p, p + bytes) lies within the one mapping reported for p: then its last byte is
  /// memory of the same kind and device, and asking for it would tell nothing new.
  bool maps(std::uint64_t p, std::uint64_t bytes) const {
    return mapping_size != 0 && p >= mapping_start && p - mapping_start <= mapping_size &&
           bytes <= mapping_size - (p - mapping_start);
  }
};

/// The location of `p`, asked in one driver call (cuPointerGetAttributes, which answers a
/// pointer CUDA does not know with null attributes rather than an error). The mapping is the
/// physical allocation the pointer is mapped to (a cuMemAlloc or cuMemHostAlloc allocation, or
/// one cuMemMap of a virtual reservation), not the reservation, so a range inside it is
/// backed to its last byte. A driver that does not know the mapping attributes is asked for
/// the others alone. Any failure is a device error naming the call.
inline PointerLocation pointer_location(const void* p) {
  unsigned int type = 0;
  unsigned int managed = 0;  // a bool attribute: the driver writes its low byte
  int device = -1;
  std::uint64_t start = 0;
  std::uint64_t size = 0;
  CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
                                      CU_POINTER_ATTRIBUTE_MAPPING_SIZE};
  void* data[] = {&type, &managed, &device, &start, &size};
  const Driver& d = driver();
  CUresult r = d.cuPointerGetAttributes(5, attributes, data, to_device_address(p));
  if (r == CUDA_ERROR_INVALID_VALUE) {
    start = size = 0;
    r = d.cuPointerGetAttributes(3, attributes, data, to_device_address(p));
  }
  FERRY_CU_CHECK(r);
  PointerLocation where;
  where.device_memory = type == CU_MEMORYTYPE_DEVICE || (managed & 0xff) != 0;
  where.host_memory = type == CU_MEMORYTYPE_HOST && (managed & 0xff) == 0;
  where.device = where.device_memory || where.host_memory ? device : -1;
  where.mapping_start = start;
  where.mapping_size = size;
  return where;
}

// ---- Interop imports (backends/pair/): a timeline semaphore and device memory of another API
// (Vulkan), exported as opaque fds. Called with the device's context bound.

using ExternalSemaphore = CUexternalSemaphore;
using ExternalMemory = CUexternalMemory;

/// Import a timeline semaphore from an opaque fd. CUDA owns the fd once the import succeeded.
inline ExternalSemaphore import_timeline_semaphore(int fd) {
  CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC desc{};
  desc.type = CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD;
  desc.handle.fd = fd;
  CUexternalSemaphore handle = nullptr;
  FERRY_CU_CHECK(driver().cuImportExternalSemaphore(&handle, &desc));
  return handle;
}

/// From a destructor: cannot throw; failing here means the context is gone already.
inline void destroy_external_semaphore(ExternalSemaphore handle) noexcept {
  const DriverLoad& l = driver_load();
  if (l.loaded) (void)l.driver.cuDestroyExternalSemaphore(handle);
}

/// Signal timeline `value` on `stream`, after its earlier work.
inline void signal_external_semaphore(ExternalSemaphore handle, cudaStream_t stream, std::uint64_t value) {
  CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS params{};
  params.params.fence.value = value;
  FERRY_CU_CHECK(driver().cuSignalExternalSemaphoresAsync(&handle, &params, 1, stream));
}

/// Later work of `stream` starts once the timeline reaches `value`.
inline void wait_external_semaphore(ExternalSemaphore handle, cudaStream_t stream, std::uint64_t value) {
  CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS params{};
  params.params.fence.value = value;
  FERRY_CU_CHECK(driver().cuWaitExternalSemaphoresAsync(&handle, &params, 1, stream));
}

/// Import `size` bytes of device memory from an opaque fd and map them whole as one buffer:
/// returns its device pointer and sets `*imported`. CUDA owns the fd once the import
/// succeeded. Freed by cudaFree (cuMemFree) of the pointer, then destroy_external_memory.
inline void* import_memory(int fd, std::uint64_t size, bool dedicated, ExternalMemory* imported) {
  const Driver& d = driver();
  CUDA_EXTERNAL_MEMORY_HANDLE_DESC desc{};
  desc.type = CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD;
  desc.handle.fd = fd;
  desc.size = size;
  desc.flags = dedicated ? CUDA_EXTERNAL_MEMORY_DEDICATED : 0;
  CUexternalMemory handle = nullptr;
  FERRY_CU_CHECK(d.cuImportExternalMemory(&handle, &desc));
  CUDA_EXTERNAL_MEMORY_BUFFER_DESC buffer{};
  buffer.offset = 0;
  buffer.size = size;
  CUdeviceptr p = 0;
  try {
    FERRY_CU_CHECK(d.cuExternalMemoryGetMappedBuffer(&p, handle, &buffer));
  } catch (...) {
    (void)d.cuDestroyExternalMemory(handle);
    throw;
  }
  *imported = handle;
  return from_device_address(p);
}

inline void destroy_external_memory(ExternalMemory handle) { FERRY_CU_CHECK(driver().cuDestroyExternalMemory(handle)); }

// ---- Kernels: the synthetic compute step's device code is no part of libferry; ferry-testkit
// supplies it as a module image (a fatbin or PTX text, see backends/backend.hpp), which is
// loaded into the device's context here.

/// The driver loads kernel images (cuModuleLoadData): run_synthetic_compute runs where
/// ferry-testkit registered one.
inline constexpr bool kLoadsKernels = true;

/// A loaded kernel module and its one function.
struct Kernels {
  CUmodule module = nullptr;
  CUfunction synthetic = nullptr;
};

/// Load `image` into the bound context and force its function loaded. Under lazy loading
/// (CUDA's default) a function loads at its first launch, and loading may wait for work
/// already queued in the context: a launch behind a stream that waits for the host would then
/// never return. Asking for an attribute loads it now.
inline Kernels load_kernels(std::span<const std::byte> image) {
  const Driver& d = driver();
  Kernels k;
  FERRY_CU_CHECK(d.cuModuleLoadData(&k.module, image.data()));
  try {
    FERRY_CU_CHECK(d.cuModuleGetFunction(&k.synthetic, k.module, "ferry_synthetic_compute"));
    int threads = 0;
    FERRY_CU_CHECK(d.cuFuncGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k.synthetic));
  } catch (...) {
    (void)d.cuModuleUnload(k.module);
    throw;
  }
  return k;
}

/// From a destructor, with the context bound.
inline void unload_kernels(Kernels& k) noexcept {
  const DriverLoad& l = driver_load();
  if (l.loaded && k.module != nullptr) (void)l.driver.cuModuleUnload(k.module);
  k = {};
}

/// Enqueue the synthetic compute step on `stream`: `units` passes (at least one) over the
/// data, each writing out[i] = in[i] + 1 (uint8, wrapping). `max_blocks` caps the grid (the
/// kernel loops grid-stride). The launch's own error is checked.
inline void launch_synthetic(const Kernels& k, const void* in, void* out, std::uint64_t bytes, std::uint32_t units,
                             int max_blocks, cudaStream_t stream) {
  constexpr unsigned threads = 256;
  const std::uint64_t work = (bytes + 15) / 16;  // threads needed for one vector pass
  const std::uint64_t wanted = (work + threads - 1) / threads;
  const auto blocks = static_cast<unsigned>(
      wanted < static_cast<std::uint64_t>(max_blocks) ? (wanted > 0 ? wanted : 1) : static_cast<std::uint64_t>(max_blocks));
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  unsigned long long n = bytes;
  unsigned passes = units > 0 ? units : 1;
  void* args[] = {&src, &dst, &n, &passes};
  FERRY_CU_CHECK(driver().cuLaunchKernel(k.synthetic, blocks, 1, 1, threads, 1, 1, 0, stream, args, nullptr));
}

// ---- The service kernels: ferry's own device code, PTX text compiled by the driver for the
// device at load (no device code is built with ferry). A driver or device that cannot load
// them leaves the backend without them, which is not an error.
//  - The yield point: an empty kernel between two copies of a stream. A copy engine serves one
//    stream's consecutive copies back to back, whatever the streams' priorities; a kernel
//    between them ends the run, and the engine then serves a copy another stream has ready.
//  - The SM copy: a grid-stride copy from page-locked host memory, read over the bus through
//    its device mapping, into device memory. It runs on the SMs, so it never waits for a copy
//    engine busy with another stream's bulk copy; a high-priority stream's blocks start as
//    soon as an SM has room. `ferry_copy16` moves 16-byte words (both ends and the size
//    16-byte aligned), `ferry_copy1` bytes.

/// PTX of the service kernels (ISA 6.3, the first with sm_75: the oldest architecture CUDA 13
/// still supports).
inline constexpr char kServicePtx[] = R"(.version 6.3
.target sm_75
.address_size 64
.visible .entry ferry_yield()
{
  ret;
}
.visible .entry ferry_copy16(.param .u64 src_param, .param .u64 dst_param, .param .u64 n_param)
{
  .reg .pred %p;
  .reg .b32 %r<5>;
  .reg .b32 %v<4>;
  .reg .b64 %rd<10>;
  ld.param.u64 %rd1, [src_param];
  ld.param.u64 %rd2, [dst_param];
  ld.param.u64 %rd3, [n_param];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mov.u32 %r4, %nctaid.x;
  cvt.u64.u32 %rd5, %r3;
  mad.wide.u32 %rd4, %r1, %r2, %rd5;
  mul.wide.u32 %rd6, %r4, %r2;
LOOP16:
  setp.ge.u64 %p, %rd4, %rd3;
  @%p bra DONE16;
  shl.b64 %rd7, %rd4, 4;
  add.u64 %rd8, %rd1, %rd7;
  add.u64 %rd9, %rd2, %rd7;
  ld.global.v4.u32 {%v0, %v1, %v2, %v3}, [%rd8];
  st.global.v4.u32 [%rd9], {%v0, %v1, %v2, %v3};
  add.u64 %rd4, %rd4, %rd6;
  bra LOOP16;
DONE16:
  ret;
}
.visible .entry ferry_copy1(.param .u64 src_param, .param .u64 dst_param, .param .u64 n_param)
{
  .reg .pred %p;
  .reg .b16 %h;
  .reg .b32 %r<5>;
  .reg .b64 %rd<10>;
  ld.param.u64 %rd1, [src_param];
  ld.param.u64 %rd2, [dst_param];
  ld.param.u64 %rd3, [n_param];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mov.u32 %r4, %nctaid.x;
  cvt.u64.u32 %rd5, %r3;
  mad.wide.u32 %rd4, %r1, %r2, %rd5;
  mul.wide.u32 %rd6, %r4, %r2;
LOOP1:
  setp.ge.u64 %p, %rd4, %rd3;
  @%p bra DONE1;
  add.u64 %rd8, %rd1, %rd4;
  add.u64 %rd9, %rd2, %rd4;
  ld.global.u8 %h, [%rd8];
  st.global.u8 [%rd9], %h;
  add.u64 %rd4, %rd4, %rd6;
  bra LOOP1;
DONE1:
  ret;
}
)";

/// The loaded service kernels; a function is null where it could not be loaded.
struct ServiceKernels {
  CUmodule module = nullptr;
  CUfunction yield = nullptr;
  CUfunction copy16 = nullptr;
  CUfunction copy1 = nullptr;
};

/// Load the service kernels into the bound context and force them loaded (as load_kernels
/// does, and for the same reason). A driver that refuses the PTX (a device older than its
/// target) gives empty ServiceKernels: the backend then has no yield point and no SM copy.
inline ServiceKernels load_service_kernels() noexcept {
  const Driver& d = driver();
  ServiceKernels k;
  if (d.cuModuleLoadData(&k.module, kServicePtx) != CUDA_SUCCESS) return {};
  const auto get = [&](CUfunction& f, const char* name) {
    int threads = 0;
    return d.cuModuleGetFunction(&f, k.module, name) == CUDA_SUCCESS &&
           d.cuFuncGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f) == CUDA_SUCCESS;
  };
  if (!get(k.yield, "ferry_yield") || !get(k.copy16, "ferry_copy16") || !get(k.copy1, "ferry_copy1")) {
    (void)d.cuModuleUnload(k.module);
    return {};
  }
  return k;
}

/// From a destructor, with the context bound.
inline void unload_service_kernels(ServiceKernels& k) noexcept {
  const DriverLoad& l = driver_load();
  if (l.loaded && k.module != nullptr) (void)l.driver.cuModuleUnload(k.module);
  k = {};
}

/// Enqueue the yield point on `stream` (k loaded).
inline void launch_yield(const ServiceKernels& k, cudaStream_t stream) {
  FERRY_CU_CHECK(driver().cuLaunchKernel(k.yield, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr));
}

/// The address through which a kernel reads the page-locked host byte at `host`, or 0 where it
/// has none (memory the driver does not know as page-locked, or registered without a device
/// mapping). One driver lookup; an address it refuses is no error.
inline CUdeviceptr host_device_alias(const void* host) noexcept {
  CUdeviceptr alias = 0;
  if (driver().cuMemHostGetDevicePointer(&alias, const_cast<void*>(host), 0) != CUDA_SUCCESS) return 0;
  return alias;
}

/// Enqueue the SM copy of `bytes` bytes from `src` (a host_device_alias) to device memory at
/// `dst` on `stream` (k loaded): 16-byte words where both ends and the size allow, else bytes.
/// At most `max_blocks` blocks of 256 threads.
inline void launch_sm_copy(const ServiceKernels& k, CUdeviceptr dst, CUdeviceptr src, std::uint64_t bytes,
                           int max_blocks, cudaStream_t stream) {
  constexpr unsigned kThreads = 256;
  const bool wide = ((dst | src | bytes) & 15u) == 0;
  unsigned long long n = wide ? bytes / 16 : bytes;
  unsigned long long from = src;
  unsigned long long to = dst;
  void* args[] = {&from, &to, &n};
  const unsigned long long blocks = std::min<unsigned long long>(
      (n + kThreads - 1) / kThreads, static_cast<unsigned long long>(std::max(1, max_blocks)));
  FERRY_CU_CHECK(driver().cuLaunchKernel(wide ? k.copy16 : k.copy1, static_cast<unsigned>(blocks), 1, 1, kThreads, 1,
                                         1, 0, stream, args, nullptr));
}

}  // namespace ferry::detail::cuda_impl::vendor
