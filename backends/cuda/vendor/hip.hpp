// SPDX-License-Identifier: MIT
// HIP side of the vendor shim (see vendor.hpp for the names every shim provides): maps the
// CUDA runtime names the backend's sources use onto HIP, as ggml's vendors/hip.h does, and
// implements the vendor-specific operations with HIP calls. Host code only: compiled by the
// C++ compiler against HIP's headers, no hipcc needed, and nothing of HIP linked: the runtime
// (libamdhip64) is opened at the backend's first use.
//
// Known limits of HIP 5.2 (Debian's libamdhip64-dev), handled here:
//  - hipDeviceProp_t has no asyncEngineCount and the attribute is CUDA-only: copy_engines = 0
//    (unknown).
//  - no hipStreamGetDevice before ROCm 6: adopt_queue cannot tell a stream's device there.
//  - no hipStreamLegacy: the null stream and hipStreamPerThread are the implicit streams.
#pragma once

// Only the AMD platform: HIP's NVIDIA-platform headers do not build against CUDA 13, and on
// NVIDIA the CUDA backend is the one to use.
#if !defined(__HIP_PLATFORM_AMD__) && !defined(__HIP_PLATFORM_NVIDIA__)
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <dlfcn.h>
#include <hip/hip_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <optional>
#include <span>
#include <string>

#include "check.hpp"

#define FERRY_GPU_NS hip_impl
#define FERRY_GPU_BACKEND ::ferry::Backend::hip
#define FERRY_GPU_LABEL "hip"
#define FERRY_GPU_VENDOR "HIP"
#define FERRY_GPU_DESCRIPTOR hip_backend_descriptor
#define FERRY_GPU_OPTION "-Dhip=enabled"
// Image copies are written against the CUDA runtime's array API only; HIP has no mapping yet.
#define FERRY_GPU_HAS_IMAGES 0
#define FERRY_GPU_HAS_BATCH_COPY 0  // hipMemcpyBatchAsync is not mapped: one copy call per copy

// ---- The HIP runtime, opened at run time (libamdhip64), never linked: HIP's headers give the
// types and the signatures, and every function the backend calls is a pointer of the table
// below, resolved with dlsym. The names are those of the headers after their own macros (ROCm
// 6 renames hipGetDeviceProperties to hipGetDevicePropertiesR0600, for one), so the symbol
// looked up is the one the headers' ABI names.

namespace ferry::detail::hip_impl::vendor {

using PFN_hipDeviceGetStreamPriorityRange = hipError_t (*)(int*, int*);
using PFN_hipEventCreateWithFlags = hipError_t (*)(hipEvent_t*, unsigned);
using PFN_hipEventDestroy = hipError_t (*)(hipEvent_t);
using PFN_hipEventQuery = hipError_t (*)(hipEvent_t);
using PFN_hipEventRecord = hipError_t (*)(hipEvent_t, hipStream_t);
using PFN_hipEventSynchronize = hipError_t (*)(hipEvent_t);
using PFN_hipFree = hipError_t (*)(void*);
using PFN_hipHostFree = hipError_t (*)(void*);
using PFN_hipGetDeviceCount = hipError_t (*)(int*);
using PFN_hipGetDeviceProperties = hipError_t (*)(hipDeviceProp_t*, int);
using PFN_hipGetLastError = hipError_t (*)();
using PFN_hipHostMalloc = hipError_t (*)(void**, std::size_t, unsigned);
using PFN_hipHostGetDevicePointer = hipError_t (*)(void**, void*, unsigned);
using PFN_hipHostGetFlags = hipError_t (*)(unsigned*, void*);
using PFN_hipHostRegister = hipError_t (*)(void*, std::size_t, unsigned);
using PFN_hipHostUnregister = hipError_t (*)(void*);
using PFN_hipMalloc = hipError_t (*)(void**, std::size_t);
using PFN_hipMemcpyAsync = hipError_t (*)(void*, const void*, std::size_t, hipMemcpyKind, hipStream_t);
using PFN_hipMemcpyPeerAsync = hipError_t (*)(void*, int, const void*, int, std::size_t, hipStream_t);
using PFN_hipDeviceCanAccessPeer = hipError_t (*)(int*, int, int);
using PFN_hipDeviceEnablePeerAccess = hipError_t (*)(int, unsigned);
using PFN_hipStreamCreateWithPriority = hipError_t (*)(hipStream_t*, unsigned, int);
using PFN_hipStreamDestroy = hipError_t (*)(hipStream_t);
using PFN_hipStreamSynchronize = hipError_t (*)(hipStream_t);
using PFN_hipStreamWaitEvent = hipError_t (*)(hipStream_t, hipEvent_t, unsigned);
using PFN_hipGetErrorName = const char* (*)(hipError_t);
using PFN_hipGetErrorString = const char* (*)(hipError_t);
using PFN_hipGetDevice = hipError_t (*)(int*);
using PFN_hipSetDevice = hipError_t (*)(int);
using PFN_hipDeviceGetUuid = hipError_t (*)(hipUUID*, hipDevice_t);
using PFN_hipDeviceGetAttribute = hipError_t (*)(int*, hipDeviceAttribute_t, int);
using PFN_hipStreamWriteValue64 = hipError_t (*)(hipStream_t, void*, std::uint64_t, unsigned);
using PFN_hipStreamWaitValue64 = hipError_t (*)(hipStream_t, void*, std::uint64_t, unsigned, std::uint64_t);
using PFN_hipPointerGetAttributes = hipError_t (*)(hipPointerAttribute_t*, const void*);
#if HIP_VERSION_MAJOR >= 6
using PFN_hipStreamGetDevice = hipError_t (*)(hipStream_t, hipDevice_t*);
#endif

// X(name, pointer type): every HIP function the backend calls.
#define FERRY_HIP_FUNCTIONS_BASE(X)                                            \
  X(hipDeviceGetStreamPriorityRange, PFN_hipDeviceGetStreamPriorityRange)      \
  X(hipEventCreateWithFlags, PFN_hipEventCreateWithFlags)                      \
  X(hipEventDestroy, PFN_hipEventDestroy)                                      \
  X(hipEventQuery, PFN_hipEventQuery)                                          \
  X(hipEventRecord, PFN_hipEventRecord)                                        \
  X(hipEventSynchronize, PFN_hipEventSynchronize)                              \
  X(hipFree, PFN_hipFree)                                                      \
  X(hipHostFree, PFN_hipHostFree)                                              \
  X(hipGetDeviceCount, PFN_hipGetDeviceCount)                                  \
  X(hipGetDeviceProperties, PFN_hipGetDeviceProperties)                        \
  X(hipGetLastError, PFN_hipGetLastError)                                      \
  X(hipHostMalloc, PFN_hipHostMalloc)                                          \
  X(hipHostGetDevicePointer, PFN_hipHostGetDevicePointer)                      \
  X(hipHostGetFlags, PFN_hipHostGetFlags)                                      \
  X(hipHostRegister, PFN_hipHostRegister)                                      \
  X(hipHostUnregister, PFN_hipHostUnregister)                                  \
  X(hipMalloc, PFN_hipMalloc)                                                  \
  X(hipMemcpyAsync, PFN_hipMemcpyAsync)                                        \
  X(hipMemcpyPeerAsync, PFN_hipMemcpyPeerAsync)                                \
  X(hipDeviceCanAccessPeer, PFN_hipDeviceCanAccessPeer)                        \
  X(hipDeviceEnablePeerAccess, PFN_hipDeviceEnablePeerAccess)                  \
  X(hipStreamCreateWithPriority, PFN_hipStreamCreateWithPriority)              \
  X(hipStreamDestroy, PFN_hipStreamDestroy)                                    \
  X(hipStreamSynchronize, PFN_hipStreamSynchronize)                            \
  X(hipStreamWaitEvent, PFN_hipStreamWaitEvent)                                \
  X(hipGetErrorName, PFN_hipGetErrorName)                                      \
  X(hipGetErrorString, PFN_hipGetErrorString)                                  \
  X(hipGetDevice, PFN_hipGetDevice)                                            \
  X(hipSetDevice, PFN_hipSetDevice)                                            \
  X(hipDeviceGetUuid, PFN_hipDeviceGetUuid)                                    \
  X(hipDeviceGetAttribute, PFN_hipDeviceGetAttribute)                          \
  X(hipStreamWriteValue64, PFN_hipStreamWriteValue64)                          \
  X(hipStreamWaitValue64, PFN_hipStreamWaitValue64)                            \
  X(hipPointerGetAttributes, PFN_hipPointerGetAttributes)
#if HIP_VERSION_MAJOR >= 6
#define FERRY_HIP_FUNCTIONS(X) FERRY_HIP_FUNCTIONS_BASE(X) X(hipStreamGetDevice, PFN_hipStreamGetDevice)
#else
#define FERRY_HIP_FUNCTIONS(X) FERRY_HIP_FUNCTIONS_BASE(X)
#endif

/// The runtime's functions, resolved once per process.
struct HipApi {
#define FERRY_HIP_MEMBER(name, type) type name = nullptr;
  FERRY_HIP_FUNCTIONS(FERRY_HIP_MEMBER)
#undef FERRY_HIP_MEMBER
};

struct HipLoad {
  HipApi api;
  bool loaded = false;
  std::string failure;  ///< why not loaded: the library, the loader's reason, what installs it
};

#define FERRY_HIP_STR(x) FERRY_HIP_STR_(x)
#define FERRY_HIP_STR_(x) #x

/// The soname of the runtime whose headers the backend was built with (libamdhip64.so.5 for
/// HIP 5.x): another major version has another ABI (ROCm 6 changed hipDeviceProp_t). The
/// development symlink libamdhip64.so comes second.
inline constexpr const char* kDefaultLibrary = "libamdhip64.so." FERRY_HIP_STR(HIP_VERSION_MAJOR);
inline constexpr const char* kLibraryOrigin =
    "ROCm's HIP runtime (Debian: libamdhip64-" FERRY_HIP_STR(HIP_VERSION_MAJOR) ")";
/// Environment variable naming another path (or soname) to load instead.
inline constexpr const char* kLibraryVariable = "FERRY_HIP_LIBRARY";

/// Open the runtime and resolve every function (first call only; never throws). The library
/// stays open for the process.
inline const HipLoad& hip_load() noexcept {
  static const HipLoad load = []() noexcept {
    HipLoad l;
    try {
      const char* named = std::getenv(kLibraryVariable);
      const bool explicit_name = named != nullptr && *named != '\0';
      std::string tried;
      void* lib = nullptr;
      for (const char* name : {explicit_name ? named : kDefaultLibrary, explicit_name ? nullptr : "libamdhip64.so"}) {
        if (name == nullptr) break;
        lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (lib != nullptr) break;
        const char* why = dlerror();
        tried += (tried.empty() ? "" : "; ") + std::string(why != nullptr ? why : name);
      }
      if (lib == nullptr) {
        l.failure = "cannot load " + std::string(explicit_name ? named : kDefaultLibrary) + " (" + tried +
                    "), which " + kLibraryOrigin + " installs; " + kLibraryVariable + " names another path to load";
        return l;
      }
      std::string missing;
#define FERRY_HIP_RESOLVE(name, type)                                                    \
  l.api.name = reinterpret_cast<type>(dlsym(lib, FERRY_HIP_STR(name)));                  \
  if (l.api.name == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(FERRY_HIP_STR(name));
      FERRY_HIP_FUNCTIONS(FERRY_HIP_RESOLVE)
#undef FERRY_HIP_RESOLVE
      if (!missing.empty()) {
        l.failure = "the HIP runtime does not provide " + missing;
        return l;
      }
      l.loaded = true;
    } catch (...) {  // out of memory building a message
      l.loaded = false;
    }
    return l;
  }();
  return load;
}

/// Whether the runtime loads and provides what the backend needs (Device::runtime_present).
inline bool runtime_loaded() noexcept { return hip_load().loaded; }

/// The `unsupported` error of a backend whose runtime cannot be loaded.
[[noreturn]] inline void fail_runtime_missing() {
  throw Error(ErrorCode::unsupported, "hip: " + hip_load().failure, "dlopen", std::source_location{});
}

}  // namespace ferry::detail::hip_impl::vendor

namespace ferry::detail::hip_impl {

/// The loaded runtime's functions; throws `unsupported` (naming the library) where it cannot
/// be loaded. Device::open checks first, so the backend's calls never throw here.
inline const vendor::HipApi& hip_api() {
  const vendor::HipLoad& l = vendor::hip_load();
  if (!l.loaded) vendor::fail_runtime_missing();
  return l.api;
}

}  // namespace ferry::detail::hip_impl

// Runtime names used by the backend's sources: types and constants are HIP's, calls go
// through the table (error messages show them as hip_api().hipMalloc(...)).
#define cudaDeviceGetStreamPriorityRange hip_api().hipDeviceGetStreamPriorityRange
#define cudaDeviceProp hipDeviceProp_t
#define cudaErrorHostMemoryAlreadyRegistered hipErrorHostMemoryAlreadyRegistered
#define cudaErrorPeerAccessAlreadyEnabled hipErrorPeerAccessAlreadyEnabled
#define cudaErrorNotReady hipErrorNotReady
#define cudaError_t hipError_t
#define cudaEventCreateWithFlags hip_api().hipEventCreateWithFlags
#define cudaEventDestroy hip_api().hipEventDestroy
#define cudaEventDisableTiming hipEventDisableTiming
#define cudaEventQuery hip_api().hipEventQuery
#define cudaEventRecord hip_api().hipEventRecord
#define cudaEventSynchronize hip_api().hipEventSynchronize
#define cudaEvent_t hipEvent_t
#define cudaFree hip_api().hipFree
#define cudaFreeHost hip_api().hipHostFree
#define cudaGetDeviceCount hip_api().hipGetDeviceCount
#define cudaGetDeviceProperties hip_api().hipGetDeviceProperties
#define cudaGetLastError hip_api().hipGetLastError
#define cudaHostAlloc hip_api().hipHostMalloc
#define cudaHostAllocMapped hipHostMallocMapped
#define cudaHostAllocPortable hipHostMallocPortable
#define cudaHostGetDevicePointer hip_api().hipHostGetDevicePointer
#define cudaHostGetFlags hip_api().hipHostGetFlags
#define cudaErrorInvalidValue hipErrorInvalidValue
#define cudaHostRegister hip_api().hipHostRegister
#define cudaHostRegisterPortable hipHostRegisterPortable
#define cudaHostUnregister hip_api().hipHostUnregister
#define cudaMalloc hip_api().hipMalloc
#define cudaMemcpyAsync hip_api().hipMemcpyAsync
#define cudaMemcpyPeerAsync hip_api().hipMemcpyPeerAsync
#define cudaDeviceCanAccessPeer hip_api().hipDeviceCanAccessPeer
#define cudaDeviceEnablePeerAccess hip_api().hipDeviceEnablePeerAccess
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaStreamCreateWithPriority hip_api().hipStreamCreateWithPriority
#define cudaStreamDestroy hip_api().hipStreamDestroy
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaStreamSynchronize hip_api().hipStreamSynchronize
#define cudaStreamWaitEvent hip_api().hipStreamWaitEvent
#define cudaStream_t hipStream_t
#define cudaSuccess hipSuccess

namespace ferry::detail::hip_impl::vendor {

/// Text for a runtime error; consumes the thread's last-error slot (see the CUDA shim).
inline std::string describe(hipError_t e) {
  (void)hip_api().hipGetLastError();
  return std::string(hip_api().hipGetErrorName(e)) + ": " + hip_api().hipGetErrorString(e);
}

inline ErrorCode classify(hipError_t e) {
  switch (e) {
    case hipErrorOutOfMemory: return ErrorCode::out_of_memory;
    case hipErrorNoDevice:
    case hipErrorInsufficientDriver:
    case hipErrorNotSupported: return ErrorCode::unsupported;
    case hipErrorLaunchFailure:
    case hipErrorIllegalAddress:
    case hipErrorECCNotCorrectable:
    case hipErrorLaunchTimeOut:
    case hipErrorAssert: return ErrorCode::device_lost;
    default: return ErrorCode::backend_error;
  }
}

#define FERRY_HIP_CHECK(expr) \
  FERRY_CHECK_GEN(expr, hipSuccess, ::ferry::detail::hip_impl::vendor::describe, \
                  ::ferry::detail::hip_impl::vendor::classify)

/// HIP has no per-device context to save: the current device ordinal plays that role.
using DeviceContext = int;

inline DeviceContext current_context() {
  int device = 0;
  FERRY_HIP_CHECK(hip_api().hipGetDevice(&device));
  return device;
}

/// A binding as a word and back (ThreadBinding::previous in backend.hpp).
inline std::uintptr_t context_word(DeviceContext device) noexcept { return static_cast<std::uintptr_t>(device); }
inline DeviceContext context_from_word(std::uintptr_t w) noexcept { return static_cast<DeviceContext>(w); }

inline void make_current(DeviceContext device) { FERRY_HIP_CHECK(hip_api().hipSetDevice(device)); }

/// From a destructor: cannot throw; failing here means the runtime is gone already.
inline void restore_current(DeviceContext device) noexcept {
  if (hip_load().loaded) (void)hip_load().api.hipSetDevice(device);
}

inline DeviceContext device_context(int ordinal) { return ordinal; }

struct Features {
  std::string uuid;
  std::array<std::uint8_t, 16> uuid_bytes{};
  std::uint32_t copy_engines = 0;  ///< unknown on HIP 5.2 (see the file comment)
  bool memory_pools = false;
  bool stream_mem_ops64 = false;
};

inline Features query_features(int ordinal, const hipDeviceProp_t& /*prop*/) {
  Features f;
  hipUUID uuid{};
  FERRY_HIP_CHECK(hip_api().hipDeviceGetUuid(&uuid, ordinal));
  std::string text = "GPU-";
  for (int i = 0; i < 16; ++i) {
    char byte[3];
    std::snprintf(byte, sizeof byte, "%02x", static_cast<unsigned char>(uuid.bytes[i]));
    text += byte;
    if (i == 3 || i == 5 || i == 7 || i == 9) text += '-';
  }
  f.uuid = text;
  std::memcpy(f.uuid_bytes.data(), uuid.bytes, f.uuid_bytes.size());
  int v = 0;
  FERRY_HIP_CHECK(hip_api().hipDeviceGetAttribute(&v, hipDeviceAttributeMemoryPoolsSupported, ordinal));
  f.memory_pools = v != 0;
  FERRY_HIP_CHECK(hip_api().hipDeviceGetAttribute(&v, hipDeviceAttributeCanUseStreamWaitValue, ordinal));
  f.stream_mem_ops64 = v != 0;
  return f;
}

/// Signal: the write runs after all earlier commands of the stream have completed.
inline void write_value64(hipStream_t s, void* dev_ptr, std::uint64_t value) {
  FERRY_HIP_CHECK(hip_api().hipStreamWriteValue64(s, dev_ptr, value, 0));
}

/// Wait: later commands of `s` start once `*dev_ptr >= value` (full 64-bit mask).
inline void wait_value64_geq(hipStream_t s, void* dev_ptr, std::uint64_t value) {
  FERRY_HIP_CHECK(hip_api().hipStreamWaitValue64(s, dev_ptr, value, hipStreamWaitValueGte, ~std::uint64_t{0}));
}

// The stream operations of the buffer copies and of every hand-off (the CUDA shim calls its
// driver for these; HIP's runtime is its only API).
inline void copy_h2d_async(void* dst, const void* src, std::size_t bytes, hipStream_t s) {
  FERRY_HIP_CHECK(hip_api().hipMemcpyAsync(dst, src, bytes, hipMemcpyHostToDevice, s));
}
inline void copy_d2h_async(void* dst, const void* src, std::size_t bytes, hipStream_t s) {
  FERRY_HIP_CHECK(hip_api().hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToHost, s));
}
inline void copy_d2d_async(void* dst, const void* src, std::size_t bytes, hipStream_t s) {
  FERRY_HIP_CHECK(hip_api().hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToDevice, s));
}
inline void record_event(hipEvent_t e, hipStream_t s) { FERRY_HIP_CHECK(hip_api().hipEventRecord(e, s)); }
inline void stream_wait_event(hipStream_t s, hipEvent_t e) { FERRY_HIP_CHECK(hip_api().hipStreamWaitEvent(s, e, 0)); }
/// Whether the work before the last record of `e` is complete; a device error throws.
inline bool event_complete(hipEvent_t e) {
  const hipError_t r = hip_api().hipEventQuery(e);
  if (r == hipErrorNotReady) return false;
  FERRY_HIP_CHECK(r);
  return true;
}

inline bool is_implicit_stream(hipStream_t s) { return s == nullptr || s == hipStreamPerThread; }
inline bool is_legacy_stream(hipStream_t /*s*/) { return false; }

/// Device ordinal of a stream, or nullopt where HIP cannot tell (before ROCm 6).
inline std::optional<int> stream_device(hipStream_t s) {
#if HIP_VERSION_MAJOR >= 6
  hipDevice_t device = 0;
  FERRY_HIP_CHECK(hip_api().hipStreamGetDevice(s, &device));
  return static_cast<int>(device);
#else
  (void)s;
  return std::nullopt;
#endif
}

/// See the CUDA shim. HIP answers a pointer it does not know with hipErrorInvalidValue.
struct PointerLocation {
  bool device_memory = false;
  bool host_memory = false;
  int device = -1;

  /// HIP reports no mapping with the pointer's attributes: every range has both ends asked.
  bool maps(std::uint64_t /*p*/, std::uint64_t /*bytes*/) const { return false; }
};

inline PointerLocation pointer_location(const void* p) {
  hipPointerAttribute_t attr{};
  const hipError_t e = hip_api().hipPointerGetAttributes(&attr, p);
  if (e == hipErrorInvalidValue) {
    (void)hip_api().hipGetLastError();
    return {};
  }
  if (e != hipSuccess) {
    raise_vendor_error(classify(e), "hipPointerGetAttributes", describe(e), __FILE__, __LINE__);
  }
#if HIP_VERSION_MAJOR >= 6
  const bool device_memory = attr.type == hipMemoryTypeDevice || attr.type == hipMemoryTypeManaged;
  const bool host_memory = attr.type == hipMemoryTypeHost;
#else
  const bool device_memory = attr.memoryType == hipMemoryTypeDevice || attr.isManaged != 0;
  const bool host_memory = attr.memoryType == hipMemoryTypeHost && attr.isManaged == 0;
#endif
  return {device_memory, host_memory, attr.device};
}

// ---- Interop imports (see the CUDA shim): refused. On Linux hipImportExternalSemaphore has
// no timeline fd type, so a HIP stream cannot wait on another API's queue on the GPU, and
// interop::pair_backend pairs no HIP device; memory import alone would serve no pair.

using ExternalSemaphore = void*;  // never made: import_timeline_semaphore refuses
using ExternalMemory = void*;     // never made: import_memory refuses

[[noreturn]] inline void refuse_import(const char* what) {
  throw Error(ErrorCode::unsupported,
              std::string("hip: ") + what +
                  " is not supported on Linux (hipImportExternalSemaphore has no timeline fd type, so HIP "
                  "takes part in no interop pair)",
              {}, std::source_location{});
}

inline ExternalSemaphore import_timeline_semaphore(int /*fd*/) { refuse_import("timeline semaphore import"); }
inline void destroy_external_semaphore(ExternalSemaphore /*handle*/) noexcept {}
inline void signal_external_semaphore(ExternalSemaphore /*handle*/, hipStream_t /*stream*/, std::uint64_t /*value*/) {
  refuse_import("timeline semaphore import");
}
inline void wait_external_semaphore(ExternalSemaphore /*handle*/, hipStream_t /*stream*/, std::uint64_t /*value*/) {
  refuse_import("timeline semaphore import");
}
inline void* import_memory(int /*fd*/, std::uint64_t /*size*/, bool /*dedicated*/, ExternalMemory* /*imported*/) {
  refuse_import("device memory import");
}
inline void destroy_external_memory(ExternalMemory /*handle*/) {}

// ---- Kernels: HIP's device code would need hipcc, which this build does not use, so the
// synthetic compute step reports `unsupported` on HIP.
inline constexpr bool kLoadsKernels = false;
struct Kernels {};
[[noreturn]] inline Kernels load_kernels(std::span<const std::byte> /*image*/) {
  throw Error(ErrorCode::unsupported, "hip: no kernel images are loaded on HIP", {}, std::source_location{});
}
inline void unload_kernels(Kernels& /*k*/) noexcept {}
[[noreturn]] inline void launch_synthetic(const Kernels& /*k*/, const void* /*in*/, void* /*out*/, std::uint64_t /*bytes*/,
                                          std::uint32_t /*units*/, int /*max_blocks*/, hipStream_t /*stream*/) {
  throw Error(ErrorCode::unsupported, "hip: no synthetic compute kernel on HIP", {}, std::source_location{});
}

// ---- The service kernels (the yield point, the SM copy) need device code: HIP has none, so
// the backend has no yield point, does not cut bulk copies, and copies with the DMA engines only.
struct ServiceKernels {
  void* module = nullptr;  ///< always null: nothing is loaded
  void* yield = nullptr;   ///< always null
  void* copy16 = nullptr;  ///< always null
  void* copy1 = nullptr;   ///< always null
};
inline ServiceKernels load_service_kernels() noexcept { return {}; }
inline void unload_service_kernels(ServiceKernels& /*k*/) noexcept {}
[[noreturn]] inline void launch_yield(const ServiceKernels& /*k*/, hipStream_t /*stream*/) {
  throw Error(ErrorCode::unsupported, "hip: no yield point on HIP", {}, std::source_location{});
}
inline std::uintptr_t host_device_alias(const void* /*host*/) noexcept { return 0; }
[[noreturn]] inline void launch_sm_copy(const ServiceKernels& /*k*/, std::uintptr_t /*dst*/, std::uintptr_t /*src*/,
                                        std::uint64_t /*bytes*/, int /*max_blocks*/, hipStream_t /*stream*/) {
  throw Error(ErrorCode::unsupported, "hip: no SM copy on HIP", {}, std::source_location{});
}

}  // namespace ferry::detail::hip_impl::vendor
