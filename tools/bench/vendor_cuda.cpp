// SPDX-License-Identifier: MIT
// Raw cudaMemcpyAsync from/to pinned memory on a non-blocking stream, event-timed: the
// reference the CUDA and Vulkan bandwidth bars are measured against. Also the image study's
// CUDA side: the engine's arrays, and the raw array copies beside ferry's image copies; and the
// contention section's raw references: small copies on a stream of the greatest priority while
// a bulk copy runs, as one copy and in chunks with an empty kernel between them.
//
// Built as a module of its own (ferry-bench-cuda), the one part of the bench that links the
// CUDA runtime: ferry-bench opens it at run time (vendor_cuda_loader.cpp), so the bench runs
// where libcudart is absent and reports these references as not measured there.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench.hpp"  // percentiles(), ferry/ferry.hpp
#include "contention_loop.hpp"
#include "cuda_image.hpp"
#include "vendor.hpp"

namespace ferry_bench::cuda_module {
namespace {

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(e));
}

/// A failure on a path that must not throw (a destructor's): reported on stderr.
void report_failure(cudaError_t e, const char* call) {
  if (e != cudaSuccess) std::fprintf(stderr, "ferry-bench: %s: %s\n", call, cudaGetErrorString(e));
}

/// Whether a CUDA device is present (never throws: no driver means none).
bool cuda_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

/// An owned CUDA handle (allocation, stream, event), released on every path out.
template <class Handle, cudaError_t (*Destroy)(Handle)>
struct Owned {
  Handle handle = nullptr;
  Owned() = default;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() {
    if (handle != nullptr) Destroy(handle);
  }
};
using Stream = Owned<cudaStream_t, cudaStreamDestroy>;
using Event = Owned<cudaEvent_t, cudaEventDestroy>;

/// What both measurements copy with: `bytes` of device memory, as much pinned host memory,
/// one non-blocking stream (members: a failing constructor frees what it made).
struct CopyRig {
  Owned<void*, cudaFree> dev;
  Owned<void*, cudaFreeHost> host;
  Stream stream;
  explicit CopyRig(std::uint64_t bytes) {
    check(cudaMalloc(&dev.handle, bytes), "cudaMalloc");
    check(cudaHostAlloc(&host.handle, bytes, cudaHostAllocDefault), "cudaHostAlloc");
    check(cudaStreamCreateWithFlags(&stream.handle, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
};

/// The host-cost measurements' shape: 64 untimed calls of `one(false)`, then `calls` timed
/// ones (`one(true)`); the host waits for `sync` every `round` calls, untimed, so the command
/// queue never fills up.
template <class Fn>
void in_rounds(int calls, int round, cudaStream_t sync, Fn&& one) {
  for (int i = 0; i < 64; ++i) one(false);
  check(cudaStreamSynchronize(sync), "cudaStreamSynchronize");
  for (int i = 0; i < calls; ++i) {
    if (i > 0 && i % round == 0) check(cudaStreamSynchronize(sync), "cudaStreamSynchronize");
    one(true);
  }
  check(cudaStreamSynchronize(sync), "cudaStreamSynchronize");
}

double us_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

/// Make `device`'s GPU the current CUDA device: the one whose UUID the ferry device reports,
/// so that the engine's arrays live where ferry copies. Throws when none matches.
void use_device_of(const ferry::Device& device) {
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  const auto& want = device.capabilities().uuid;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, i), "cudaGetDeviceProperties");
    static_assert(sizeof(prop.uuid.bytes) == sizeof(want));
    if (std::memcmp(prop.uuid.bytes, want.data(), want.size()) == 0) {
      check(cudaSetDevice(i), "cudaSetDevice");
      return;
    }
  }
  throw std::runtime_error("no CUDA device has the UUID of the ferry device '" + device.capabilities().name + "'");
}

}  // namespace

VendorCopy measure_vendor_copy(std::uint64_t bytes, int iterations) {
  VendorCopy r;
  if (!cuda_present()) return r;
  CopyRig rig(bytes);
  void* dev = rig.dev.handle;
  void* host = rig.host.handle;
  cudaStream_t stream = rig.stream.handle;
  Event start_event, stop_event;
  check(cudaEventCreate(&start_event.handle), "cudaEventCreate");
  check(cudaEventCreate(&stop_event.handle), "cudaEventCreate");
  cudaEvent_t start = start_event.handle, stop = stop_event.handle;
  auto timed = [&](cudaMemcpyKind kind) {
    std::vector<double> gbps;
    for (int i = 0; i <= iterations; ++i) {
      void* dst = kind == cudaMemcpyHostToDevice ? dev : host;
      const void* src = kind == cudaMemcpyHostToDevice ? host : dev;
      check(cudaEventRecord(start, stream), "cudaEventRecord");
      check(cudaMemcpyAsync(dst, src, bytes, kind, stream), "cudaMemcpyAsync");
      check(cudaEventRecord(stop, stream), "cudaEventRecord");
      check(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      if (i > 0) gbps.push_back(static_cast<double>(bytes) / (ms * 1e6));  // first is warm-up
    }
    return median(gbps);
  };
  auto back_to_back = [&](cudaMemcpyKind kind) {
    void* dst = kind == cudaMemcpyHostToDevice ? dev : host;
    const void* src = kind == cudaMemcpyHostToDevice ? host : dev;
    check(cudaMemcpyAsync(dst, src, bytes, kind, stream), "cudaMemcpyAsync");  // warm-up
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) check(cudaMemcpyAsync(dst, src, bytes, kind, stream), "cudaMemcpyAsync");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return static_cast<double>(bytes) * iterations / s / 1e9;
  };
  r.h2d_gpu_gbps = timed(cudaMemcpyHostToDevice);
  r.d2h_gpu_gbps = timed(cudaMemcpyDeviceToHost);
  r.h2d_gbps = back_to_back(cudaMemcpyHostToDevice);
  r.d2h_gbps = back_to_back(cudaMemcpyDeviceToHost);
  r.measured = true;
  r.what = "cudaMemcpyAsync (pinned, back to back, host-timed)";
  return r;
}

VendorCallCost measure_vendor_call_cost(std::uint64_t bytes, int calls, int round) {
  VendorCallCost r;
  if (!cuda_present()) return r;
  CopyRig rig(bytes);
  void* dev = rig.dev.handle;
  void* host = rig.host.handle;
  cudaStream_t stream = rig.stream.handle;
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(calls));
  in_rounds(calls, round, stream, [&](bool timed) {
    const auto t0 = std::chrono::steady_clock::now();
    const cudaError_t e = cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream);
    const auto t1 = std::chrono::steady_clock::now();
    check(e, "cudaMemcpyAsync");
    if (timed) us.push_back(us_between(t0, t1));
  });
  const Percentiles p = percentiles(std::move(us));
  r.median_us = p.median;
  r.p90_us = p.p90;
  r.measured = true;
  r.what = "cudaMemcpyAsync h2d (pinned, one stream)";

  // The ordered pattern: a second (owner) stream and one event per stream. Re-recording an
  // event is legal while a wait on its previous record is pending: a wait binds the record
  // made before it.
  Stream owner;
  Event copied, released;
  check(cudaStreamCreateWithFlags(&owner.handle, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check(cudaEventCreateWithFlags(&copied.handle, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  check(cudaEventCreateWithFlags(&released.handle, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  check(cudaEventRecord(released.handle, owner.handle), "cudaEventRecord");
  std::vector<double> upload_us, pair_us;
  upload_us.reserve(static_cast<std::size_t>(calls));
  pair_us.reserve(static_cast<std::size_t>(calls));
  in_rounds(calls, round, owner.handle, [&](bool timed) {  // the owner's wait orders the copy stream too
    const auto t0 = std::chrono::steady_clock::now();
    check(cudaStreamWaitEvent(stream, released.handle, 0), "cudaStreamWaitEvent");
    check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
    check(cudaEventRecord(copied.handle, stream), "cudaEventRecord");
    check(cudaStreamWaitEvent(owner.handle, copied.handle, 0), "cudaStreamWaitEvent");
    const auto t1 = std::chrono::steady_clock::now();
    check(cudaEventRecord(released.handle, owner.handle), "cudaEventRecord");
    const auto t2 = std::chrono::steady_clock::now();
    if (timed) {
      upload_us.push_back(us_between(t0, t1));
      pair_us.push_back(us_between(t0, t2));
    }
  });
  const Percentiles up = percentiles(std::move(upload_us));
  const Percentiles pair = percentiles(std::move(pair_us));
  r.ordered_upload_median_us = up.median;
  r.ordered_upload_p90_us = up.p90;
  r.ordered_pair_median_us = pair.median;
  r.ordered_pair_p90_us = pair.p90;
  r.ordered_what = "raw CUDA side-stream copy, ordered both ways";
  return r;
}

std::unique_ptr<VendorImage> make_cuda_image(const ferry::Device& device, const ferry::ImageDesc& desc) {
  auto image = std::make_unique<VendorImage>();
  if (!cuda_present()) {
    image->skipped = "no CUDA device";
    return image;
  }
  use_device_of(device);
  const cudaChannelFormatDesc channels = ferry::testkit::cuda_engine_channels(desc.format, image->skipped);
  if (!image->made()) return image;
  const char* call = "";
  check(ferry::testkit::make_cuda_engine_array(desc, channels, image->native, call), call);
  const ferry::NativeImage native = image->native;
  image->free = [native] { report_failure(ferry::testkit::free_cuda_engine_array(native), "cudaFree*Array"); };
  image->what = native.cuda_mipmapped ? "cudaMipmappedArray_t"
                                      : (desc.array_layers > 1 ? "cudaArray_t, layered" : "cudaArray_t");
  return image;
}

VendorImageCopy measure_cuda_image_copy(const ferry::Device& device, const VendorImage& image,
                                        const ferry::ImageDesc& desc, std::span<const ferry::ImageRegion> regions,
                                        std::uint64_t bytes, int reps) {
  VendorImageCopy r;
  const ferry::FormatInfo f = ferry::format_info(desc.format);
  if (!image.made() || image.native.cuda_array == 0) {
    r.skipped = "no CUDA array";
    return r;
  }
  if (f.compressed() || desc.depth > 1) {
    r.skipped = "the raw loop copies uncompressed 2D levels and layers only";
    return r;
  }
  use_device_of(device);
  Owned<void*, cudaFreeHost> host;
  check(cudaHostAlloc(&host.handle, bytes, cudaHostAllocDefault), "cudaHostAlloc");
  std::memset(host.handle, 0x5a, bytes);
  Stream stream;
  check(cudaStreamCreateWithFlags(&stream.handle, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  const bool layered = desc.array_layers > 1;
  std::vector<cudaArray_t> levels(desc.mip_levels);
  for (std::uint32_t l = 0; l < desc.mip_levels; ++l) {
    if (image.native.cuda_mipmapped) {
      const auto handle = static_cast<std::uintptr_t>(image.native.cuda_array);
      const auto mipmapped = reinterpret_cast<cudaMipmappedArray_t>(handle);
      check(cudaGetMipmappedArrayLevel(&levels[l], mipmapped, l), "cudaGetMipmappedArrayLevel");
    } else {
      levels[l] = reinterpret_cast<cudaArray_t>(static_cast<std::uintptr_t>(image.native.cuda_array));
    }
  }
  // Every region, tight on the host side: a plain 2D level with the 2D calls, layers with
  // cudaMemcpy3DAsync (the host side's layers one after another).
  auto enqueue = [&](bool to_image) {
    for (const ferry::ImageRegion& g : regions) {
      auto* at = static_cast<std::byte*>(host.handle) + g.buffer_offset;
      const std::size_t row = std::size_t{g.width} * f.block_bytes;
      const std::size_t pitch = g.row_pitch != 0 ? g.row_pitch : row;
      const cudaArray_t a = levels[g.mip_level];
      const cudaMemcpyKind kind = to_image ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
      if (!layered) {
        if (to_image) {
          check(cudaMemcpy2DToArrayAsync(a, std::size_t{g.x} * f.block_bytes, g.y, at, pitch, row, g.height, kind,
                                         stream.handle),
                "cudaMemcpy2DToArrayAsync");
        } else {
          check(cudaMemcpy2DFromArrayAsync(at, pitch, a, std::size_t{g.x} * f.block_bytes, g.y, row, g.height, kind,
                                           stream.handle),
                "cudaMemcpy2DFromArrayAsync");
        }
        continue;
      }
      cudaMemcpy3DParms p{};
      cudaPitchedPtr linear{};
      linear.ptr = at;
      linear.pitch = pitch;
      linear.xsize = g.width;
      linear.ysize = g.image_height != 0 ? g.image_height : g.height;
      cudaPos pos{};
      pos.x = g.x;
      pos.y = g.y;
      pos.z = g.base_layer;
      if (to_image) {
        p.srcPtr = linear;
        p.dstArray = a;
        p.dstPos = pos;
      } else {
        p.srcArray = a;
        p.srcPos = pos;
        p.dstPtr = linear;
      }
      p.extent.width = g.width;
      p.extent.height = g.height;
      p.extent.depth = g.layer_count;
      p.kind = kind;
      check(cudaMemcpy3DAsync(&p, stream.handle), "cudaMemcpy3DAsync");
    }
  };
  // Each copy: every region enqueued, then the stream's synchronization.
  auto timed = [&](bool to_image) {
    const auto issue = [&] {
      enqueue(to_image);
      return 0;
    };
    const auto wait = [&](int) { check(cudaStreamSynchronize(stream.handle), "cudaStreamSynchronize"); };
    return time_copies(bytes, reps, issue, wait);
  };
  const CopyTimes up = timed(true);
  r.upload_gbps = up.gbps;
  r.upload_call_us = up.call_us;
  r.download_gbps = timed(false).gbps;
  r.what = layered ? "raw CUDA: cudaMemcpy3DAsync (pinned, one stream)"
                   : "raw CUDA: cudaMemcpy2DToArrayAsync / cudaMemcpy2DFromArrayAsync (pinned, one stream)";
  r.measured = true;
  return r;
}


// ---------------------------------------------------------------------------------------------
// Contention references.

/// An empty kernel in PTX, loaded with cuModuleLoadData: the chunked reference launches it
/// between two chunks of the bulk on the bulk stream, as TorchRec does, so that the copy engine
/// leaves the bulk between chunks for a copy ready on another stream. Driver functions come
/// from cudaGetDriverEntryPointByVersion, so the module links the runtime only.
constexpr const char* kEmptyKernelPtx = R"(
.version 7.0
.target sm_52
.address_size 64

.visible .entry ferry_bench_empty()
{
  ret;
}
)";

/// The driver entry points the empty kernel needs, and the kernel, unloaded on every path out.
class EmptyKernel {
 public:
  EmptyKernel() {
    load("cuGetErrorName", get_error_name_);
    load("cuModuleLoadData", module_load_data_);
    load("cuModuleGetFunction", module_get_function_);
    load("cuModuleUnload", module_unload_);
    load("cuLaunchKernel", launch_kernel_);
    check_cu(module_load_data_(&module_, kEmptyKernelPtx), "cuModuleLoadData");
    try {
      check_cu(module_get_function_(&function_, module_, "ferry_bench_empty"), "cuModuleGetFunction");
    } catch (...) {
      (void)module_unload_(module_);  // the destructor of a failed constructor does not run
      throw;
    }
  }
  EmptyKernel(const EmptyKernel&) = delete;
  EmptyKernel& operator=(const EmptyKernel&) = delete;
  ~EmptyKernel() {
    if (module_ != nullptr) {
      const CUresult r = module_unload_(module_);
      if (r != CUDA_SUCCESS) std::fprintf(stderr, "ferry-bench: cuModuleUnload: %s\n", error_name(r));
    }
  }
  /// One block of one thread on `stream`.
  void launch(cudaStream_t stream) const {
    check_cu(launch_kernel_(function_, 1, 1, 1, 1, 1, 1, 0, reinterpret_cast<CUstream>(stream), nullptr, nullptr),
             "cuLaunchKernel");
  }

 private:
  template <class Fn>
  static void load(const char* symbol, Fn& fn) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status{};
    // The ABI of CUDA 12.0, as ferry's backend asks for; runtimes before 12.5 have only the
    // call without a version (deprecated since), which gives the runtime's own.
#if CUDART_VERSION >= 12050
    const char* call = "cudaGetDriverEntryPointByVersion";
    check(cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &status), call);
#else
    const char* call = "cudaGetDriverEntryPoint";
    check(cudaGetDriverEntryPoint(symbol, &p, cudaEnableDefault, &status), call);
#endif
    if (status != cudaDriverEntryPointSuccess || p == nullptr) {
      throw std::runtime_error(std::string(call) + "(" + symbol + "): status " +
                               std::to_string(static_cast<int>(status)));
    }
    fn = reinterpret_cast<Fn>(p);
  }
  const char* error_name(CUresult r) const {
    const char* name = nullptr;
    if (get_error_name_ == nullptr || get_error_name_(r, &name) != CUDA_SUCCESS || name == nullptr) return "CUresult";
    return name;
  }
  void check_cu(CUresult r, const char* call) const {
    if (r != CUDA_SUCCESS) {
      throw std::runtime_error(std::string(call) + ": " + error_name(r) + " (" + std::to_string(static_cast<int>(r)) +
                               ")");
    }
  }

  PFN_cuGetErrorName_v6000 get_error_name_ = nullptr;
  PFN_cuModuleLoadData_v2000 module_load_data_ = nullptr;
  PFN_cuModuleGetFunction_v2000 module_get_function_ = nullptr;
  PFN_cuModuleUnload_v2000 module_unload_ = nullptr;
  PFN_cuLaunchKernel_v4000 launch_kernel_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction function_ = nullptr;
};

/// One event per urgent slot (contention_loop.hpp): an event is recorded again only once the
/// poller has seen its previous record complete.
struct EventPool {
  std::vector<cudaEvent_t> events;
  explicit EventPool(std::size_t n) {
    events.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      cudaEvent_t e = nullptr;
      check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
      events.push_back(e);
    }
  }
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  ~EventPool() {
    for (cudaEvent_t e : events) report_failure(cudaEventDestroy(e), "cudaEventDestroy");
  }
};

/// The contention references' buffers, streams and kernel.
struct ContentionRig {
  const ContentionConfig& config;
  Owned<void*, cudaFree> dev_bulk, dev_urgent;
  Owned<void*, cudaFreeHost> host_bulk, host_urgent;
  Stream bulk, urgent;
  Event bulk_end;
  EventPool pool{kUrgentSlots};
  EmptyKernel kernel;
  int priority_greatest = 0;

  explicit ContentionRig(const ContentionConfig& c) : config(c) {
    int least = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &priority_greatest), "cudaDeviceGetStreamPriorityRange");
    check(cudaStreamCreateWithPriority(&urgent.handle, cudaStreamNonBlocking, priority_greatest),
          "cudaStreamCreateWithPriority");
    check(cudaStreamCreateWithFlags(&bulk.handle, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cudaEventCreateWithFlags(&bulk_end.handle, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check(cudaMalloc(&dev_bulk.handle, c.bulk_bytes), "cudaMalloc");
    check(cudaMalloc(&dev_urgent.handle, c.urgent_bytes), "cudaMalloc");
    check(cudaHostAlloc(&host_bulk.handle, c.bulk_bytes, cudaHostAllocDefault), "cudaHostAlloc");
    check(cudaHostAlloc(&host_urgent.handle, c.urgent_bytes, cudaHostAllocDefault), "cudaHostAlloc");
    std::memset(host_bulk.handle, 0x5a, c.bulk_bytes);
    std::memset(host_urgent.handle, 0x3c, c.urgent_bytes);
    check(cudaMemset(dev_bulk.handle, 0, c.bulk_bytes), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

  /// The whole bulk on the bulk stream, one copy or chunks with the empty kernel between two
  /// chunks, then the end event.
  void enqueue_bulk(bool to_device, bool chunked) {
    auto* dev = static_cast<char*>(dev_bulk.handle);
    auto* host = static_cast<char*>(host_bulk.handle);
    const cudaMemcpyKind kind = to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    const std::uint64_t piece = chunked ? config.chunk_bytes : config.bulk_bytes;
    for (std::uint64_t off = 0; off < config.bulk_bytes; off += piece) {
      const std::uint64_t len = std::min(piece, config.bulk_bytes - off);
      if (off > 0) kernel.launch(bulk.handle);
      check(cudaMemcpyAsync(to_device ? dev + off : host + off, to_device ? host + off : dev + off, len, kind,
                            bulk.handle),
            "cudaMemcpyAsync");
    }
    check(cudaEventRecord(bulk_end.handle, bulk.handle), "cudaEventRecord");
  }

  /// Urgent copies on the high-priority stream: `count` of them, or until `stop()`.
  template <class Stop>
  std::vector<double> urgent_copies(std::uint64_t count, Stop&& stop) {
    const auto issue = [&](std::size_t slot) {
      check(cudaMemcpyAsync(dev_urgent.handle, host_urgent.handle, config.urgent_bytes, cudaMemcpyHostToDevice,
                            urgent.handle),
            "cudaMemcpyAsync");
      check(cudaEventRecord(pool.events[slot], urgent.handle), "cudaEventRecord");
      return pool.events[slot];
    };
    const auto done = [](cudaEvent_t e) {
      const cudaError_t r = cudaEventQuery(e);
      if (r == cudaErrorNotReady) return false;
      check(r, "cudaEventQuery");
      return true;
    };
    return run_urgent_copies<cudaEvent_t>(std::chrono::microseconds(config.period_us), count, issue, done, stop);
  }

  /// One row: the bulk (none for "none") as one copy or in chunks, beside the urgent copies
  /// when `with_urgent`; the host waits for the bulk with cudaEventSynchronize.
  ContentionRow row(const std::string& name, const std::string& dir, bool chunked, bool with_urgent,
                    const std::string& how) {
    ContentionRow r{.path = "cuda", .name = name, .bulk = dir, .urgent = with_urgent, .how = how};
    measure_contention_row(
        r, config,
        [&] {
          enqueue_bulk(dir == "h2d", chunked);
          check(cudaEventSynchronize(bulk_end.handle), "cudaEventSynchronize");
        },
        [&](std::uint64_t count, auto&& stop) { return urgent_copies(count, stop); },
        [] { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); });
    return r;
  }
};

VendorContention measure_cuda_contention(const ferry::Device& device, const ContentionConfig& config) {
  VendorContention out;
  if (!cuda_present()) {
    out.skipped = "no CUDA device";
    return out;
  }
  use_device_of(device);
  check(cudaFree(nullptr), "cudaFree");  // the primary context, before the timed rows
  ContentionRig rig(config);
  // Warm-up: one bulk each way, chunked (the kernel's first launch), and a few urgent copies.
  rig.enqueue_bulk(true, true);
  rig.enqueue_bulk(false, false);
  (void)rig.urgent_copies(8, [] { return false; });
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

  const std::string urgent_how = "cudaMemcpyAsync on a stream of priority " + std::to_string(rig.priority_greatest) +
                                 " (the greatest)";
  const std::string one = "one cudaMemcpyAsync on a stream of default priority";
  const std::string chunks = std::to_string(config.chunk_bytes >> 20) + " MiB chunks, an empty kernel between chunks (TorchRec)";
  out.rows.push_back(rig.row("urgent alone", "none", false, true, urgent_how));
  for (const char* dir : {"h2d", "d2h"}) {
    const std::string d = dir;
    out.rows.push_back(rig.row(d + " bulk alone", d, false, false, one));
    out.rows.push_back(rig.row(d + " bulk + urgent", d, false, true, one));
    out.rows.push_back(rig.row(d + " chunked bulk + urgent", d, true, true, chunks));
  }
  out.measured = true;
  return out;
}

}  // namespace ferry_bench::cuda_module

/// The module's one entry (vendor.hpp, VendorCudaApi).
extern "C" __attribute__((visibility("default"))) const ferry_bench::VendorCudaApi* ferry_bench_cuda_api() {
  using namespace ferry_bench::cuda_module;
  static const ferry_bench::VendorCudaApi api{&measure_vendor_copy, &measure_vendor_call_cost, &make_cuda_image,
                                              &measure_cuda_image_copy, &measure_cuda_contention};
  return &api;
}
