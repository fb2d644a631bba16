// SPDX-License-Identifier: MIT
// ferry's pool segments registered with NCCL (ncclCommRegister) through the segment
// callbacks, then used by collectives on the owner stream: an all-reduce and an all-to-all in
// a one-rank communicator, whose results are downloaded and checked byte for byte.
//
// Needs a CUDA device (exit 77, "SKIPPED", when there is none). NVLink multicast (NVLS) stays
// off: NCCL_NVLS_ENABLE=0 is set before the communicator is made, and nothing here calls
// cuMulticastCreate.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"

namespace {

int g_failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "nccl-register: FAILED: %s\n", what.c_str());
    ++g_failures;
  }
}

#define NCCL_OK(call)                                                                              \
  do {                                                                                             \
    const ncclResult_t r_ = (call);                                                                \
    if (r_ != ncclSuccess) {                                                                       \
      std::fprintf(stderr, "nccl-register: %s failed: %s\n", #call, ncclGetErrorString(r_));       \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

#define CUDA_OK(call)                                                                              \
  do {                                                                                             \
    const cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "nccl-register: %s failed: %s\n", #call, cudaGetErrorString(e_));       \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

}  // namespace

int main() {
  if (ferry::Device::count(ferry::Backend::cuda) == 0) {
    std::printf("SKIPPED: nccl-register: no CUDA device\n");
    return 77;
  }
  setenv("NCCL_NVLS_ENABLE", "0", 1);  // no NVLink multicast objects
  CUDA_OK(cudaSetDevice(0));
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  ncclComm_t comm = nullptr;
  NCCL_OK(ncclCommInitRank(&comm, 1, id, 0));

  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int registered = 0, deregistered = 0, register_errors = 0;
  {
    ferry::Device dev = ferry::Device::open({.backend = ferry::Backend::cuda, .ordinal = 0});
    ferry::Queue owner = dev.adopt_queue(ferry::QueueRole::compute, {.handle = stream}, "nccl");
    ferry::DevicePool& pool = dev.pool();
    std::map<std::uint64_t, void*> handles;  // segment id -> NCCL registration
    ferry::SegmentCallbacks callbacks;
    callbacks.created = [&](const ferry::SegmentInfo& s) {
      void* handle = nullptr;
      const ncclResult_t r = ncclCommRegister(comm, reinterpret_cast<void*>(s.address), s.size, &handle);
      if (r != ncclSuccess) {
        ++register_errors;
        throw std::runtime_error(std::string("ncclCommRegister: ") + ncclGetErrorString(r));
      }
      handles[s.id] = handle;
      ++registered;
      std::printf("nccl-register: registered segment %llu at 0x%llx, %llu bytes\n",
                  static_cast<unsigned long long>(s.id), static_cast<unsigned long long>(s.address),
                  static_cast<unsigned long long>(s.size));
    };
    callbacks.destroyed = [&](const ferry::SegmentInfo& s) {
      auto it = handles.find(s.id);
      if (it == handles.end()) return;
      const ncclResult_t r = ncclCommDeregister(comm, it->second);
      handles.erase(it);
      if (r != ncclSuccess) throw std::runtime_error(std::string("ncclCommDeregister: ") + ncclGetErrorString(r));
      ++deregistered;
    };
    pool.set_segment_callbacks(callbacks);

    constexpr std::size_t count = (32u << 20) / sizeof(float);  // 32 MiB: a segment of its own
    constexpr std::uint64_t bytes = count * sizeof(float);
    ferry::Transfer xfer(dev);
    ferry::HostBuffer host = dev.host_pool().allocate(bytes);
    auto* values = reinterpret_cast<float*>(host.data());
    for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<float>(i % 4093) * 0.5f;
    ferry::Upload up = xfer.upload(host, owner);  // the owner (the NCCL stream) waits for it
    ferry::DeviceBuffer reduced = pool.allocate(bytes, owner);
    ferry::DeviceBuffer exchanged = pool.allocate(bytes, owner);
    check(registered >= 3 && register_errors == 0, "every segment registered before use");

    // Collectives on the owner stream, reading and writing registered pool memory.
    const auto ptr = [](const ferry::DeviceBuffer& b) { return reinterpret_cast<void*>(b.view().address); };
    NCCL_OK(ncclAllReduce(ptr(up.buffer), ptr(reduced), count, ncclFloat, ncclSum, comm, stream));
    // All-to-all as grouped point-to-point (every NCCL since 2.7): rank 0 sends to and receives
    // from every rank, itself here.
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclSend(ptr(reduced), count, ncclFloat, 0, comm, stream));
    NCCL_OK(ncclRecv(ptr(exchanged), count, ncclFloat, 0, comm, stream));
    NCCL_OK(ncclGroupEnd());

    // Downloads follow the owner's work enqueued before them (the collectives).
    std::vector<float> back(count), back2(count);
    xfer.download(reduced, std::as_writable_bytes(std::span(back)));
    xfer.download(exchanged, std::as_writable_bytes(std::span(back2)));
    check(std::memcmp(back.data(), values, bytes) == 0, "all-reduce over one rank returns the input");
    check(std::memcmp(back2.data(), values, bytes) == 0, "all-to-all over one rank returns the input");

    up.buffer.release();
    reduced.release();
    exchanged.release();
    owner.synchronize();
    const std::uint64_t freed = pool.trim();
    check(freed > 0 && deregistered == registered, "every segment deregistered before it was freed (" +
                                                       std::to_string(deregistered) + " of " +
                                                       std::to_string(registered) + ")");
    pool.set_segment_callbacks({});
  }
  NCCL_OK(ncclCommDestroy(comm));
  CUDA_OK(cudaStreamDestroy(stream));
  if (g_failures != 0) return 1;
  std::printf("nccl-register: OK: %d segments registered and deregistered; all-reduce and all-to-all verified\n",
              registered);
  return 0;
}
