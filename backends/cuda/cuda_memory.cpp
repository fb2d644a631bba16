// SPDX-License-Identifier: MIT
// CUDA/HIP memory: device segments (cudaMalloc, an engine's adopted range, another API's
// imported memory) and host memory (pinned, registered, an engine's adopted page-locked
// memory).
#include <cstdint>
#include <memory>
#include <string>

#include "cuda/cuda_internal.hpp"

namespace ferry::detail::FERRY_GPU_NS {

namespace {

ErrorCode classify_register(cudaError_t e) {
  return e == cudaErrorHostMemoryAlreadyRegistered ? ErrorCode::invalid_argument : vendor::classify(e);
}

/// An imported segment's vendor objects (Segment::backend_data; null for cudaMalloc segments).
struct ImportedMemory {
  vendor::ExternalMemory handle{};
};

}  // namespace

// Segments come from cudaMalloc, not cuMemCreate/cuMemMap: the front end's pool
// sub-allocates whole segments and never remaps them, so physical/virtual separation buys
// nothing here, and cudaMalloc has the same call under HIP. cudaFree synchronizes the
// device: the pool frees segments only when trimming.
// An engine's device pointer: its first and last byte must be device (or managed) memory of
// this device. Both ends are asked, so a range that runs off the device's memory into host
// memory, or starts in another device's, is refused; a range spanning two allocations of
// this device cannot be told apart from one. A range inside the one mapping the first
// byte's answer reports has its last byte in the same memory, so it is asked once.
AdoptedRange Device::adopt_memory(const NativeMemory& native, std::uint64_t bytes) {
  require_pointer_only(native, FERRY_GPU_LABEL);
  ContextGuard guard(*core_);
  for (const std::uint64_t at : {native.pointer, native.pointer + bytes - 1}) {
    const vendor::PointerLocation where = vendor::pointer_location(reinterpret_cast<const void*>(at));
    const std::string which = at == native.pointer ? "first" : "last";
    if (!where.device_memory) {
      throw Error(ErrorCode::invalid_argument,
                  FERRY_GPU_LABEL ": the range's " + which + " byte is not " FERRY_GPU_VENDOR " device memory",
                  {}, std::source_location{});
    }
    if (where.device != core_->ordinal) {
      throw Error(ErrorCode::invalid_argument,
                  FERRY_GPU_LABEL ": the range's " + which + " byte is memory of device " +
                      std::to_string(where.device) + ", not of device " + std::to_string(core_->ordinal),
                  {}, std::source_location{});
    }
    if (where.maps(native.pointer, bytes)) break;
  }
  return AdoptedRange{pointer_segment(reinterpret_cast<void*>(static_cast<std::uintptr_t>(native.pointer)), bytes), 0};
}

std::unique_ptr<Segment> Device::allocate_segment(std::uint64_t bytes) {
  ContextGuard guard(*core_);
  void* p = nullptr;
  FERRY_GPU_CHECK(cudaMalloc(&p, bytes));  // out of memory -> ErrorCode::out_of_memory
  return pointer_segment(p, bytes);
}

void Device::free_segment(std::unique_ptr<Segment> segment) {
  ContextGuard guard(*core_);
  std::unique_ptr<ImportedMemory> imported(static_cast<ImportedMemory*>(segment->backend_data));
  FERRY_GPU_CHECK(cudaFree(segment->native));  // also for a mapped import (CUDA documents so)
  if (imported) vendor::destroy_external_memory(imported->handle);
}

// Interop: Vulkan device memory exported as an opaque fd, mapped whole as one buffer.
std::unique_ptr<Segment> Device::import_segment(const ExternalMemory& memory) {
  ContextGuard guard(*core_);
  auto imported = std::make_unique<ImportedMemory>();
  void* p = vendor::import_memory(memory.fd, memory.size, memory.dedicated, &imported->handle);
  auto segment = pointer_segment(p, memory.size);
  segment->backend_data = imported.release();
  return segment;
}

std::unique_ptr<HostMemory> Device::allocate_host(std::uint64_t bytes) {
  ContextGuard guard(*core_);
  void* p = nullptr;
  // Portable: pinned for every context. Cannot pin -> ErrorCode::out_of_memory.
  FERRY_GPU_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
  auto memory = std::make_unique<HostMemory>();
  memory->ptr = static_cast<std::byte*>(p);
  memory->size = bytes;
  return memory;
}

std::unique_ptr<HostMemory> Device::register_host(std::byte* ptr, std::uint64_t bytes) {
  ContextGuard guard(*core_);
  // A range (partly) registered already, e.g. by the engine, is the caller's mistake.
  FERRY_GPU_CHECK_WITH(cudaHostRegister(ptr, bytes, cudaHostRegisterPortable), classify_register);
  auto memory = std::make_unique<HostMemory>();
  memory->ptr = ptr;
  memory->size = bytes;
  memory->registered = true;
  return memory;
}

// An engine's page-locked memory: DMA reads and writes it directly only if the driver
// knows it as page-locked for this device (else it would treat it as pageable and copy it
// through its own staging, synchronously). Both ends are asked, since an allocation ends
// where its pinning ends. Memory pinned under another device's context counts for this
// one only when portable; cudaHostGetFlags answers that for cudaHostAlloc memory, and
// fails for registered memory, whose flags the driver does not report. A range inside the
// one mapping the first byte's answer reports is asked once, as in adopt_memory.
std::unique_ptr<HostMemory> Device::adopt_host(std::byte* ptr, std::uint64_t bytes) {
  ContextGuard guard(*core_);
  for (std::byte* at : {ptr, ptr + (bytes - 1)}) {
    const vendor::PointerLocation where = vendor::pointer_location(at);
    const std::string which = at == ptr ? "first" : "last";
    if (!where.host_memory) {
      throw Error(ErrorCode::invalid_argument,
                  FERRY_GPU_LABEL ": the range's " + which + " byte is not page-locked host memory (" +
                      (where.device_memory ? "it is device memory; adopt it with Device::adopt_memory"
                                           : "pageable: pin it (cudaHostAlloc, cudaHostRegister, "
                                             "HostPool::register_memory) or upload it as pageable memory") +
                      ")",
                  {}, std::source_location{});
    }
    const bool whole = where.maps(reinterpret_cast<std::uintptr_t>(ptr), bytes);
    if (where.device == core_->ordinal) {
      if (whole) break;
      continue;
    }
    unsigned int flags = 0;
    const cudaError_t e = cudaHostGetFlags(&flags, at);
    if (e == cudaErrorInvalidValue) (void)cudaGetLastError();
    if (e != cudaSuccess && e != cudaErrorInvalidValue) {
      raise_vendor_error(vendor::classify(e), FERRY_GPU_NAME(cudaHostGetFlags), vendor::describe(e), __FILE__,
                         __LINE__);
    }
    if (e != cudaSuccess || (flags & cudaHostAllocPortable) == 0) {
      throw Error(ErrorCode::invalid_argument,
                  FERRY_GPU_LABEL ": the range's " + which + " byte is page-locked for device " +
                      std::to_string(where.device) + ", not for device " + std::to_string(core_->ordinal) +
                      ", and not portable (" +
                      (e == cudaSuccess ? std::string("cudaHostGetFlags reports no cudaHostAllocPortable")
                                        : std::string("registered memory, whose flags the driver does not report")) +
                      ")",
                  {}, std::source_location{});
    }
    if (whole) break;
  }
  return adopted_host_memory(ptr, bytes);
}

void Device::free_host(std::unique_ptr<HostMemory> memory) {
  if (memory->adopted) return;  // the engine's: nothing was pinned or registered by ferry
  ContextGuard guard(*core_);
  if (memory->registered) {
    FERRY_GPU_CHECK(cudaHostUnregister(memory->ptr));
  } else {
    FERRY_GPU_CHECK(cudaFreeHost(memory->ptr));
  }
}

}  // namespace ferry::detail::FERRY_GPU_NS
