// SPDX-License-Identifier: MIT
// HIP side of the vendor shim (see vendor.hpp for the names every shim provides): maps the
// CUDA runtime names the backend's sources use onto HIP, as ggml's vendors/hip.h does, and
// implements the vendor-specific operations with HIP calls. Host code only: compiled by the
// C++ compiler against libamdhip64, no hipcc needed.
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
#include <hip/hip_runtime_api.h>

#include <array>
#include <cstdint>
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

// Runtime names used by the backend's sources.
#define cudaDeviceGetStreamPriorityRange hipDeviceGetStreamPriorityRange
#define cudaDeviceProp hipDeviceProp_t
#define cudaErrorHostMemoryAlreadyRegistered hipErrorHostMemoryAlreadyRegistered
#define cudaErrorPeerAccessAlreadyEnabled hipErrorPeerAccessAlreadyEnabled
#define cudaErrorNotReady hipErrorNotReady
#define cudaError_t hipError_t
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventDestroy hipEventDestroy
#define cudaEventDisableTiming hipEventDisableTiming
#define cudaEventQuery hipEventQuery
#define cudaEventRecord hipEventRecord
#define cudaEventSynchronize hipEventSynchronize
#define cudaEvent_t hipEvent_t
#define cudaFree hipFree
#define cudaFreeHost hipHostFree
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaGetLastError hipGetLastError
#define cudaHostAlloc hipHostMalloc
#define cudaHostAllocMapped hipHostMallocMapped
#define cudaHostAllocPortable hipHostMallocPortable
#define cudaHostGetDevicePointer hipHostGetDevicePointer
#define cudaHostGetFlags hipHostGetFlags
#define cudaErrorInvalidValue hipErrorInvalidValue
#define cudaHostRegister hipHostRegister
#define cudaHostRegisterPortable hipHostRegisterPortable
#define cudaHostUnregister hipHostUnregister
#define cudaMalloc hipMalloc
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemcpyPeerAsync hipMemcpyPeerAsync
#define cudaDeviceCanAccessPeer hipDeviceCanAccessPeer
#define cudaDeviceEnablePeerAccess hipDeviceEnablePeerAccess
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaStreamCreateWithPriority hipStreamCreateWithPriority
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStreamWaitEvent hipStreamWaitEvent
#define cudaStream_t hipStream_t
#define cudaSuccess hipSuccess

namespace ferry::detail::hip_impl::vendor {

/// Text for a runtime error; consumes the thread's last-error slot (see the CUDA shim).
inline std::string describe(hipError_t e) {
  (void)hipGetLastError();
  return std::string(hipGetErrorName(e)) + ": " + hipGetErrorString(e);
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

/// The runtime is linked: present wherever libferry loaded.
inline bool runtime_loaded() noexcept { return true; }
[[noreturn]] inline void fail_runtime_missing() {
  throw Error(ErrorCode::unsupported, "hip: the HIP runtime is missing", {}, std::source_location{});
}

#define FERRY_HIP_CHECK(expr) \
  FERRY_CHECK_GEN(expr, hipSuccess, ::ferry::detail::hip_impl::vendor::describe, \
                  ::ferry::detail::hip_impl::vendor::classify)

/// HIP has no per-device context to save: the current device ordinal plays that role.
using DeviceContext = int;

inline DeviceContext current_context() {
  int device = 0;
  FERRY_HIP_CHECK(hipGetDevice(&device));
  return device;
}

/// A binding as a word and back (ThreadBinding::previous in backend.hpp).
inline std::uintptr_t context_word(DeviceContext device) noexcept { return static_cast<std::uintptr_t>(device); }
inline DeviceContext context_from_word(std::uintptr_t w) noexcept { return static_cast<DeviceContext>(w); }

inline void make_current(DeviceContext device) { FERRY_HIP_CHECK(hipSetDevice(device)); }

/// From a destructor: cannot throw; failing here means the runtime is gone already.
inline void restore_current(DeviceContext device) noexcept { (void)hipSetDevice(device); }

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
  FERRY_HIP_CHECK(hipDeviceGetUuid(&uuid, ordinal));
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
  FERRY_HIP_CHECK(hipDeviceGetAttribute(&v, hipDeviceAttributeMemoryPoolsSupported, ordinal));
  f.memory_pools = v != 0;
  FERRY_HIP_CHECK(hipDeviceGetAttribute(&v, hipDeviceAttributeCanUseStreamWaitValue, ordinal));
  f.stream_mem_ops64 = v != 0;
  return f;
}

/// Signal: the write runs after all earlier commands of the stream have completed.
inline void write_value64(hipStream_t s, void* dev_ptr, std::uint64_t value) {
  FERRY_HIP_CHECK(hipStreamWriteValue64(s, dev_ptr, value, 0));
}

/// Wait: later commands of `s` start once `*dev_ptr >= value` (full 64-bit mask).
inline void wait_value64_geq(hipStream_t s, void* dev_ptr, std::uint64_t value) {
  FERRY_HIP_CHECK(hipStreamWaitValue64(s, dev_ptr, value, hipStreamWaitValueGte, ~std::uint64_t{0}));
}

// The stream operations of the buffer copies and of every hand-off (the CUDA shim calls its
// driver for these; HIP's runtime is its only API).
inline void copy_h2d_async(void* dst, const void* src, std::size_t bytes, hipStream_t s) {
  FERRY_HIP_CHECK(hipMemcpyAsync(dst, src, bytes, hipMemcpyHostToDevice, s));
}
inline void copy_d2h_async(void* dst, const void* src, std::size_t bytes, hipStream_t s) {
  FERRY_HIP_CHECK(hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToHost, s));
}
inline void copy_d2d_async(void* dst, const void* src, std::size_t bytes, hipStream_t s) {
  FERRY_HIP_CHECK(hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToDevice, s));
}
inline void record_event(hipEvent_t e, hipStream_t s) { FERRY_HIP_CHECK(hipEventRecord(e, s)); }
inline void stream_wait_event(hipStream_t s, hipEvent_t e) { FERRY_HIP_CHECK(hipStreamWaitEvent(s, e, 0)); }
/// Whether the work before the last record of `e` is complete; a device error throws.
inline bool event_complete(hipEvent_t e) {
  const hipError_t r = hipEventQuery(e);
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
  FERRY_HIP_CHECK(hipStreamGetDevice(s, &device));
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
  const hipError_t e = hipPointerGetAttributes(&attr, p);
  if (e == hipErrorInvalidValue) {
    (void)hipGetLastError();
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

}  // namespace ferry::detail::hip_impl::vendor
