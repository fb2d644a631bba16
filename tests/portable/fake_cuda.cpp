// SPDX-License-Identifier: MIT
// A stand-in for libcuda.so.1 that checks how the CUDA backend resolves the driver, for a
// machine without one (suite `portable`, cases fake-driver-*). It exports cuGetProcAddress_v2
// only, as a real driver does for symbols asked for by name, and aborts the process on any
// request the backend must not make: another flag than the legacy-stream forms, a function at
// another ABI version than the one its pointer type has in the backend, or a function of a
// driver newer than the one this fake reports (FERRY_FAKE_CUDA_VERSION, default 12040). cuInit
// reports no device, so the backend must count none and say why when opened.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

int fake_version() {
  const char* v = std::getenv("FERRY_FAKE_CUDA_VERSION");
  return v != nullptr ? std::atoi(v) : 12040;
}

[[noreturn]] void misuse(const char* what, const char* symbol, int version) {
  std::fprintf(stderr, "fake libcuda: %s: %s at version %d\n", what, symbol, version);
  std::abort();
}

CUresult CUDAAPI init(unsigned) { return CUDA_ERROR_NO_DEVICE; }
CUresult CUDAAPI driver_version(int* v) {
  *v = fake_version();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI error_name(CUresult r, const char** s) {
  *s = r == CUDA_ERROR_NO_DEVICE ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN";
  return CUDA_SUCCESS;
}
CUresult CUDAAPI error_string(CUresult r, const char** s) {
  *s = r == CUDA_ERROR_NO_DEVICE ? "no CUDA-capable device is detected" : "unknown error";
  return CUDA_SUCCESS;
}
// Every other function: never called while cuInit reports no device.
CUresult CUDAAPI not_called() {
  std::fprintf(stderr, "fake libcuda: a driver function was called after cuInit failed\n");
  std::abort();
}

struct Known {
  const char* name;
  int version;  ///< the version the backend must ask for
  int since;    ///< the driver version that has it
};
// The backend's table (backends/cuda/vendor/cuda.hpp): CUDA 12.0's ABI for all but the two
// functions of newer drivers, asked for at their own version.
constexpr Known kKnown[] = {
    {"cuGetErrorName", 12000, 0}, {"cuGetErrorString", 12000, 0}, {"cuInit", 12000, 0},
    {"cuDriverGetVersion", 12000, 0}, {"cuDeviceGetCount", 12000, 0}, {"cuDeviceGet", 12000, 0},
    {"cuDeviceGetName", 12000, 0}, {"cuDeviceTotalMem", 12000, 0}, {"cuDeviceGetUuid", 12000, 0},
    {"cuDeviceGetAttribute", 12000, 0}, {"cuDeviceCanAccessPeer", 12000, 0},
    {"cuDevicePrimaryCtxRetain", 12000, 0}, {"cuCtxGetCurrent", 12000, 0}, {"cuCtxSetCurrent", 12000, 0},
    {"cuCtxGetStreamPriorityRange", 12000, 0}, {"cuCtxEnablePeerAccess", 12000, 0},
    {"cuStreamCreateWithPriority", 12000, 0}, {"cuStreamDestroy", 12000, 0}, {"cuStreamSynchronize", 12000, 0},
    {"cuStreamWaitEvent", 12000, 0}, {"cuStreamWriteValue64", 12000, 0}, {"cuStreamWaitValue64", 12000, 0},
    {"cuEventCreate", 12000, 0}, {"cuEventDestroy", 12000, 0}, {"cuEventRecord", 12000, 0},
    {"cuEventQuery", 12000, 0}, {"cuEventSynchronize", 12000, 0}, {"cuMemAlloc", 12000, 0},
    {"cuMemFree", 12000, 0}, {"cuMemHostAlloc", 12000, 0}, {"cuMemFreeHost", 12000, 0},
    {"cuMemHostRegister", 12000, 0}, {"cuMemHostUnregister", 12000, 0}, {"cuMemHostGetFlags", 12000, 0},
    {"cuMemHostGetDevicePointer", 12000, 0}, {"cuPointerGetAttributes", 12000, 0},
    {"cuMemcpyHtoDAsync", 12000, 0}, {"cuMemcpyDtoHAsync", 12000, 0}, {"cuMemcpyDtoDAsync", 12000, 0},
    {"cuMemcpyPeerAsync", 12000, 0}, {"cuMemcpy2DAsync", 12000, 0}, {"cuMemcpy3DAsync", 12000, 0},
    {"cuArray3DGetDescriptor", 12000, 0}, {"cuMipmappedArrayGetLevel", 12000, 0},
    {"cuMipmappedArrayDestroy", 12000, 0}, {"cuImportExternalMemory", 12000, 0},
    {"cuExternalMemoryGetMappedBuffer", 12000, 0}, {"cuExternalMemoryGetMappedMipmappedArray", 12000, 0},
    {"cuDestroyExternalMemory", 12000, 0}, {"cuImportExternalSemaphore", 12000, 0},
    {"cuSignalExternalSemaphoresAsync", 12000, 0}, {"cuWaitExternalSemaphoresAsync", 12000, 0},
    {"cuDestroyExternalSemaphore", 12000, 0}, {"cuModuleLoadData", 12000, 0}, {"cuModuleUnload", 12000, 0},
    {"cuModuleGetFunction", 12000, 0}, {"cuFuncGetAttribute", 12000, 0}, {"cuLaunchKernel", 12000, 0},
    {"cuStreamGetDevice", 12080, 12080}, {"cuMemcpyBatchAsync", 13000, 13000},
};

}  // namespace

extern "C" __attribute__((visibility("default"))) CUresult CUDAAPI cuGetProcAddress_v2(
    const char* symbol, void** pfn, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  if (flags != CU_GET_PROC_ADDRESS_LEGACY_STREAM) misuse("not the legacy-stream forms", symbol, version);
  for (const Known& k : kKnown) {
    if (std::strcmp(k.name, symbol) != 0) continue;
    if (version != k.version) misuse("another ABI version than the pointer's", symbol, version);
    if (fake_version() < k.since) misuse("a function this driver version does not have", symbol, version);
    void* f = reinterpret_cast<void*>(&not_called);
    if (std::strcmp(symbol, "cuInit") == 0) f = reinterpret_cast<void*>(&init);
    if (std::strcmp(symbol, "cuDriverGetVersion") == 0) f = reinterpret_cast<void*>(&driver_version);
    if (std::strcmp(symbol, "cuGetErrorName") == 0) f = reinterpret_cast<void*>(&error_name);
    if (std::strcmp(symbol, "cuGetErrorString") == 0) f = reinterpret_cast<void*>(&error_string);
    *pfn = f;
    *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  misuse("a function the backend's table does not list", symbol, version);
}
