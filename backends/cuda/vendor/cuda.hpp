// SPDX-License-Identifier: MIT
// CUDA side of the vendor shim (see vendor.hpp for the names every shim provides).
//
// Linking: only the runtime (libcudart) is linked. Driver API functions (stream memory
// operations, attributes the runtime does not expose) are fetched at run time through
// cudaGetDriverEntryPointByVersion. Linking libcuda directly would record a dependency on
// libcuda.so.1, which exists only where the NVIDIA driver is installed: libferry would then
// fail to load on CPU-only machines instead of reporting "no CUDA device". <cuda.h> is
// included for types and enums only.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>

#include "check.hpp"

#if CUDART_VERSION < 12000
#error "ferry's CUDA backend needs CUDA 12 or newer"
#endif

#define FERRY_GPU_NS cuda_impl
#define FERRY_GPU_BACKEND ::ferry::Backend::cuda
#define FERRY_GPU_LABEL "cuda"
#define FERRY_GPU_VENDOR "CUDA"
#define FERRY_GPU_DESCRIPTOR cuda_backend_descriptor
#define FERRY_GPU_OPTION "-Dcuda=enabled"
#define FERRY_GPU_HAS_KERNELS 1
#define FERRY_GPU_HAS_IMAGES 1
// cudaMemcpyBatchAsync took a failure-index argument before CUDA 13; only 13's form is used.
#define FERRY_GPU_HAS_BATCH_COPY (CUDART_VERSION >= 13000)

namespace ferry::detail::cuda_impl::vendor {

/// Text for a runtime error. Also consumes the thread's last-error slot: a failure ferry has
/// reported must not resurface in the engine's next cudaGetLastError() after its own launch.
inline std::string describe(cudaError_t e) {
  (void)cudaGetLastError();
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

inline ErrorCode classify(cudaError_t e) {
  switch (e) {
    case cudaErrorMemoryAllocation: return ErrorCode::out_of_memory;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNotSupported: return ErrorCode::unsupported;
    // Sticky errors: the context is unusable until the process exits.
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalAddress:
    case cudaErrorECCUncorrectable:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorDevicesUnavailable: return ErrorCode::device_lost;
    default: return ErrorCode::backend_error;
  }
}

/// The driver functions ferry uses, resolved once per process.
struct Driver {
  PFN_cuGetErrorName_v6000 cuGetErrorName = nullptr;
  PFN_cuGetErrorString_v6000 cuGetErrorString = nullptr;
  PFN_cuDeviceGet_v2000 cuDeviceGet = nullptr;
  PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute = nullptr;
  PFN_cuStreamWriteValue64_v11070 cuStreamWriteValue64 = nullptr;
  PFN_cuStreamWaitValue64_v11070 cuStreamWaitValue64 = nullptr;
  PFN_cuCtxGetCurrent_v4000 cuCtxGetCurrent = nullptr;
  PFN_cuCtxSetCurrent_v4000 cuCtxSetCurrent = nullptr;
  PFN_cuPointerGetAttributes_v7000 cuPointerGetAttributes = nullptr;
  PFN_cuMemcpyHtoDAsync_v3020 cuMemcpyHtoDAsync = nullptr;
  PFN_cuMemcpyDtoHAsync_v3020 cuMemcpyDtoHAsync = nullptr;
  PFN_cuMemcpyDtoDAsync_v3020 cuMemcpyDtoDAsync = nullptr;
  PFN_cuEventRecord_v2000 cuEventRecord = nullptr;
  PFN_cuEventQuery_v2000 cuEventQuery = nullptr;
  PFN_cuStreamWaitEvent_v3020 cuStreamWaitEvent = nullptr;
};

inline std::string describe_driver(CUresult r);

inline ErrorCode classify_driver(CUresult r) {
  switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY: return ErrorCode::out_of_memory;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NOT_SUPPORTED: return ErrorCode::unsupported;
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT: return ErrorCode::device_lost;
    default: return ErrorCode::backend_error;
  }
}

template <class Fn>
void load_entry_point(const char* symbol, Fn& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  // Ask for the ABI of CUDA 12.0 so a newer driver never hands back a changed signature.
#if CUDART_VERSION >= 12050
  FERRY_CHECK_GEN(cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &status),
                  cudaSuccess, describe, classify);
#else
  FERRY_CHECK_GEN(cudaGetDriverEntryPoint(symbol, &p, cudaEnableDefault, &status), cudaSuccess,
                  describe, classify);
#endif
  if (status != cudaDriverEntryPointSuccess || p == nullptr) {
    throw Error(ErrorCode::unsupported, std::string("cuda: the driver does not provide ") + symbol,
                symbol, std::source_location{});
  }
  fn = reinterpret_cast<Fn>(p);
}

/// Resolve the driver functions (first call only; needs a working driver: call after a device
/// was found). Throws on failure; a later call retries.
inline const Driver& driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    Driver t;
    load_entry_point("cuGetErrorName", t.cuGetErrorName);
    load_entry_point("cuGetErrorString", t.cuGetErrorString);
    load_entry_point("cuDeviceGet", t.cuDeviceGet);
    load_entry_point("cuDeviceGetAttribute", t.cuDeviceGetAttribute);
    load_entry_point("cuStreamWriteValue64", t.cuStreamWriteValue64);
    load_entry_point("cuStreamWaitValue64", t.cuStreamWaitValue64);
    load_entry_point("cuCtxGetCurrent", t.cuCtxGetCurrent);
    load_entry_point("cuCtxSetCurrent", t.cuCtxSetCurrent);
    load_entry_point("cuPointerGetAttributes", t.cuPointerGetAttributes);
    load_entry_point("cuMemcpyHtoDAsync", t.cuMemcpyHtoDAsync);
    load_entry_point("cuMemcpyDtoHAsync", t.cuMemcpyDtoHAsync);
    load_entry_point("cuMemcpyDtoDAsync", t.cuMemcpyDtoDAsync);
    load_entry_point("cuEventRecord", t.cuEventRecord);
    load_entry_point("cuEventQuery", t.cuEventQuery);
    load_entry_point("cuStreamWaitEvent", t.cuStreamWaitEvent);
    d = t;
  });
  return d;
}

inline std::string describe_driver(CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  // Both fail only for a code the driver does not know; fall back to the number then.
  if (driver().cuGetErrorName(r, &name) != CUDA_SUCCESS) name = "CUresult";
  if (driver().cuGetErrorString(r, &text) != CUDA_SUCCESS) text = "unknown error";
  return std::string(name) + " (" + std::to_string(static_cast<int>(r)) + "): " + text;
}

#define FERRY_CU_CHECK(expr) \
  FERRY_CHECK_GEN(expr, CUDA_SUCCESS, ::ferry::detail::cuda_impl::vendor::describe_driver, \
                  ::ferry::detail::cuda_impl::vendor::classify_driver)

/// What makes a device current on a thread. CUDA: the device's primary context, handled with
/// cuCtxGetCurrent/cuCtxSetCurrent rather than cudaGetDevice/cudaSetDevice, because restoring
/// a thread that had no context with cudaSetDevice(0) would create a context on device 0
/// (hundreds of MB) that the engine never asked for. Restoring a null context is exact.
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
inline void restore_current(DeviceContext c) noexcept { (void)driver().cuCtxSetCurrent(c); }

/// The context of device `ordinal` (its primary context, initialized by cudaSetDevice). Leaves
/// the calling thread's binding as it found it.
inline DeviceContext device_context(int ordinal) {
  const CUcontext saved = current_context();
  FERRY_CHECK_GEN(cudaSetDevice(ordinal), cudaSuccess, describe, classify);  // binding unchanged on failure
  const CUcontext ctx = current_context();
  make_current(saved);
  return ctx;
}

/// Device facts that need vendor-specific queries.
struct Features {
  std::string uuid;              ///< "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints
  std::array<std::uint8_t, 16> uuid_bytes{};  ///< the same, raw (Capabilities::uuid)
  std::uint32_t copy_engines = 0;
  bool memory_pools = false;     ///< cudaMallocAsync family usable
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
  int v = 0;
  FERRY_CHECK_GEN(cudaDeviceGetAttribute(&v, cudaDevAttrAsyncEngineCount, ordinal), cudaSuccess,
                  describe, classify);
  f.copy_engines = static_cast<std::uint32_t>(v);
  FERRY_CHECK_GEN(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, ordinal), cudaSuccess,
                  describe, classify);
  f.memory_pools = v != 0;
  CUdevice dev = 0;
  FERRY_CU_CHECK(driver().cuDeviceGet(&dev, ordinal));
  FERRY_CU_CHECK(driver().cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev));
  f.stream_mem_ops64 = v != 0;
  return f;
}

/// Signal: write `value` to `dev_ptr` after all earlier work of `s`. The default flags keep
/// the memory barrier, so the writes of earlier copies are visible before the value is.
inline void write_value64(cudaStream_t s, void* dev_ptr, std::uint64_t value) {
  FERRY_CU_CHECK(driver().cuStreamWriteValue64(reinterpret_cast<CUstream>(s),
                                               reinterpret_cast<CUdeviceptr>(dev_ptr), value,
                                               CU_STREAM_WRITE_VALUE_DEFAULT));
}

/// Wait: later work of `s` starts once `*dev_ptr >= value`. No CU_STREAM_WAIT_VALUE_FLUSH:
/// that flag orders GPUDirect RDMA writes from third-party devices, which ferry never relies
/// on (its data arrives by stream-ordered copies or by host writes made before the host's
/// release store of the counter), and it would add a flush to every wait.
inline void wait_value64_geq(cudaStream_t s, void* dev_ptr, std::uint64_t value) {
  FERRY_CU_CHECK(driver().cuStreamWaitValue64(reinterpret_cast<CUstream>(s),
                                              reinterpret_cast<CUdeviceptr>(dev_ptr), value,
                                              CU_STREAM_WAIT_VALUE_GEQ));
}

// The stream operations of the buffer copies and of every hand-off, called on the driver
// directly: the runtime's entry points add their own per-call layer (lazy initialization,
// context and stream checks, the last-error slot) to each, and an ordered copy makes five of
// them. Peer and image copies, one call per copy, keep the runtime's entry points. The caller
// has bound the stream's context (ContextGuard), which is all the driver needs. Stream
// handles mean the same in both APIs (the legacy and per-thread default streams included).

/// Enqueue a copy of `bytes` from host memory to device memory on `s`.
inline void copy_h2d_async(void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
  FERRY_CU_CHECK(driver().cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(dst), src, bytes, reinterpret_cast<CUstream>(s)));
}

/// Enqueue a copy of `bytes` from device memory to host memory on `s`.
inline void copy_d2h_async(void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
  FERRY_CU_CHECK(driver().cuMemcpyDtoHAsync(dst, reinterpret_cast<CUdeviceptr>(src), bytes, reinterpret_cast<CUstream>(s)));
}

/// Enqueue a copy of `bytes` between two device ranges on `s`.
inline void copy_d2d_async(void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
  FERRY_CU_CHECK(driver().cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src),
                                            bytes, reinterpret_cast<CUstream>(s)));
}

/// Record `e` after the work enqueued on `s` so far.
inline void record_event(cudaEvent_t e, cudaStream_t s) {
  FERRY_CU_CHECK(driver().cuEventRecord(reinterpret_cast<CUevent>(e), reinterpret_cast<CUstream>(s)));
}

/// Later work of `s` waits for the last record of `e`.
inline void stream_wait_event(cudaStream_t s, cudaEvent_t e) {
  FERRY_CU_CHECK(driver().cuStreamWaitEvent(reinterpret_cast<CUstream>(s), reinterpret_cast<CUevent>(e), 0));
}

/// Whether the work before the last record of `e` is complete; a device error throws.
inline bool event_complete(cudaEvent_t e) {
  const CUresult r = driver().cuEventQuery(reinterpret_cast<CUevent>(e));
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
inline bool is_implicit_stream(cudaStream_t s) { return s == nullptr || s == cudaStreamPerThread; }
/// The legacy default stream, which the driver cannot attribute to a device: it is the
/// current context's, which adopt_queue binds.
inline bool is_legacy_stream(cudaStream_t s) { return s == cudaStreamLegacy; }

/// Device ordinal of a stream, or nullopt where the vendor API cannot tell. Throws
/// invalid_argument when the handle is not a live stream.
inline std::optional<int> stream_device(cudaStream_t s) {
#if CUDART_VERSION >= 12080
  int device = -1;
  const cudaError_t e = cudaStreamGetDevice(s, &device);
  if (e == cudaErrorInvalidResourceHandle || e == cudaErrorContextIsDestroyed) {
    throw Error(ErrorCode::invalid_argument,
                "cuda: adopt_queue: handle is not a live cudaStream_t (" + describe(e) + ")",
                "cudaStreamGetDevice", std::source_location{});
  }
  FERRY_CHECK_GEN(e, cudaSuccess, describe, classify);
  return device;
#else
  (void)s;  // CUDA < 12.8 has no cudaStreamGetDevice; the front end documents the limit.
  return std::nullopt;
#endif
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
/// physical allocation the pointer is mapped to (a cudaMalloc or cudaHostAlloc allocation, or
/// one cuMemMap of a virtual reservation), not the reservation, so a range inside it is
/// backed to its last byte. Any failure is a device error naming the call.
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
  const CUresult r = driver().cuPointerGetAttributes(5, attributes, data,
                                                     static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)));
  if (r == CUDA_ERROR_INVALID_VALUE) {
    // A driver that does not know the mapping attributes: the runtime's answer, without them.
    cudaPointerAttributes attr{};
    const cudaError_t e = cudaPointerGetAttributes(&attr, p);
    if (e == cudaErrorInvalidValue) {
      (void)cudaGetLastError();
      return {};
    }
    FERRY_CHECK_GEN(e, cudaSuccess, describe, classify);
    return {attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged, attr.type == cudaMemoryTypeHost,
            attr.device};
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
// (Vulkan), exported as opaque fds.

using ExternalSemaphore = cudaExternalSemaphore_t;
using ExternalMemory = cudaExternalMemory_t;

/// Import a timeline semaphore from an opaque fd. CUDA owns the fd once the import succeeded.
inline ExternalSemaphore import_timeline_semaphore(int fd) {
  cudaExternalSemaphoreHandleDesc desc{};
  desc.type = cudaExternalSemaphoreHandleTypeTimelineSemaphoreFd;
  desc.handle.fd = fd;
  cudaExternalSemaphore_t handle = nullptr;
  FERRY_CHECK_GEN(cudaImportExternalSemaphore(&handle, &desc), cudaSuccess, describe, classify);
  return handle;
}

/// From a destructor: cannot throw; failing here means the context is gone already.
inline void destroy_external_semaphore(ExternalSemaphore handle) noexcept {
  if (cudaDestroyExternalSemaphore(handle) != cudaSuccess) (void)cudaGetLastError();
}

/// Signal timeline `value` on `stream`, after its earlier work.
inline void signal_external_semaphore(ExternalSemaphore handle, cudaStream_t stream, std::uint64_t value) {
  cudaExternalSemaphoreSignalParams params{};
  params.params.fence.value = value;
  FERRY_CHECK_GEN(cudaSignalExternalSemaphoresAsync(&handle, &params, 1, stream), cudaSuccess, describe, classify);
}

/// Later work of `stream` starts once the timeline reaches `value`.
inline void wait_external_semaphore(ExternalSemaphore handle, cudaStream_t stream, std::uint64_t value) {
  cudaExternalSemaphoreWaitParams params{};
  params.params.fence.value = value;
  FERRY_CHECK_GEN(cudaWaitExternalSemaphoresAsync(&handle, &params, 1, stream), cudaSuccess, describe, classify);
}

/// Import `size` bytes of device memory from an opaque fd and map them whole as one buffer:
/// returns its device pointer and sets `*imported`. CUDA owns the fd once the import
/// succeeded. Freed by cudaFree of the pointer, then destroy_external_memory.
inline void* import_memory(int fd, std::uint64_t size, bool dedicated, ExternalMemory* imported) {
  cudaExternalMemoryHandleDesc desc{};
  desc.type = cudaExternalMemoryHandleTypeOpaqueFd;
  desc.handle.fd = fd;
  desc.size = size;
  desc.flags = dedicated ? cudaExternalMemoryDedicated : 0;
  cudaExternalMemory_t handle = nullptr;
  FERRY_CHECK_GEN(cudaImportExternalMemory(&handle, &desc), cudaSuccess, describe, classify);
  cudaExternalMemoryBufferDesc buffer{};
  buffer.offset = 0;
  buffer.size = size;
  void* p = nullptr;
  try {
    FERRY_CHECK_GEN(cudaExternalMemoryGetMappedBuffer(&p, handle, &buffer), cudaSuccess, describe, classify);
  } catch (...) {
    if (cudaDestroyExternalMemory(handle) != cudaSuccess) (void)cudaGetLastError();
    throw;
  }
  *imported = handle;
  return p;
}

inline void destroy_external_memory(ExternalMemory handle) {
  FERRY_CHECK_GEN(cudaDestroyExternalMemory(handle), cudaSuccess, describe, classify);
}

}  // namespace ferry::detail::cuda_impl::vendor
