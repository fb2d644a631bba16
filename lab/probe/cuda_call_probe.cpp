// SPDX-License-Identifier: MIT
// ferry-probe-cuda: an experiment, not part of ferry. Part 1 measures the host cost of the CUDA
// primitives ferry's CUDA backend issues per transfer (enqueue, events, stream memory ops,
// context queries, host functions). Part 2 measures cudaMemcpyAsync bandwidth H2D and D2H
// across pinned-host allocation kinds and copy splits (one stream / two streams), GPU-timed
// with events and host-timed. Only cudart is linked; driver functions come from
// cudaGetDriverEntryPoint(ByVersion), as in backends/cuda/vendor/cuda.hpp.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "json.hpp"
#include "probe_cuda.hpp"
#include "probe_util.hpp"
#include "write_file.hpp"

using ferry::detail::json_string;
using probe::appendf;
using probe::median;
using probe::parse_list;
using probe::parse_size;
using probe::quantile;
using probe::size_str;

namespace {

using probe::CudaFailure;
using probe::check_rt;

PFN_cuGetErrorName_v6000 p_cuGetErrorName = nullptr;
PFN_cuDeviceGetAttribute_v2000 p_cuDeviceGetAttribute = nullptr;
PFN_cuStreamWriteValue64_v11070 p_cuStreamWriteValue64 = nullptr;
PFN_cuStreamWaitValue64_v11070 p_cuStreamWaitValue64 = nullptr;
PFN_cuCtxGetCurrent_v4000 p_cuCtxGetCurrent = nullptr;

void check_cu(CUresult r, const char* call, int line) {
  if (r != CUDA_SUCCESS) {
    const char* name = "CUresult";
    if (p_cuGetErrorName) p_cuGetErrorName(r, &name);
    throw CudaFailure(std::string(call) + " failed: " + name + " (" + std::to_string(static_cast<int>(r)) + ") at line " +
                      std::to_string(line));
  }
}
#define CU(call) check_cu((call), #call, __LINE__)

template <class Fn>
bool load_entry(const char* symbol, Fn& fn, std::string* why) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
#if CUDART_VERSION >= 12050
  cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &status);
#else
  cudaError_t e = cudaGetDriverEntryPoint(symbol, &p, cudaEnableDefault, &status);
#endif
  if (e != cudaSuccess || status != cudaDriverEntryPointSuccess || p == nullptr) {
    if (why) *why = std::string("cudaGetDriverEntryPoint(") + symbol + "): " + cudaGetErrorName(e) + ", status " +
                    std::to_string(static_cast<int>(status));
    return false;
  }
  fn = reinterpret_cast<Fn>(p);
  return true;
}

// ---------------------------------------------------------------------------------------------
struct Options {
  int device = 0;
  int calls = 10000;
  int big_calls = 200;  // 64 MiB enqueues
  std::vector<std::uint64_t> sizes{16ull << 20, 64ull << 20, 256ull << 20};
  std::vector<int> splits{1, 2, 4};
  int reps = 10;
  int warmup = 2;
  bool do_calls = true, do_bw = true;
  std::string json;
};

void usage(const char* argv0) {
  std::printf(
      "usage: %s [options]\n"
      "Host cost of CUDA primitives and cudaMemcpyAsync bandwidth across pinned-memory kinds/splits.\n"
      "  --device N     CUDA device (default 0)\n"
      "  --calls N      calls per primitive for the host-cost medians (default 10000)\n"
      "  --big-calls N  calls for the 64 MiB cudaMemcpyAsync enqueue cost (default 200)\n"
      "  --sizes LIST   bandwidth sizes, suffix K/M/G (default 16M,64M,256M)\n"
      "  --splits LIST  copy splits for the bandwidth part (default 1,2,4)\n"
      "  --reps N       bandwidth repetitions (median reported; default 10)\n"
      "  --warmup N     untimed bandwidth repetitions first (default 2)\n"
      "  --only calls|bw  run one part only\n"
      "  --json PATH    also write all results as JSON\n"
      "  --help         this text\n"
      "Host cost: each call timed alone with steady_clock (~20-30 ns clock overhead included; the\n"
      "'clock' row measures it), in batches of 64 with an untimed stream sync between batches.\n"
      "Bandwidth: GB/s = 1e9 B/s; gpu = cudaEventElapsedTime(start,stop) around the copies;\n"
      "host = first enqueue -> cudaEventSynchronize(stop) returns.\n",
      argv0);
}

Options parse_options(int argc, char** argv) {
  Options o;
  probe::Args args(argc, argv);
  while (args.next()) {
    const std::string& a = args.flag();
    auto next = [&] { return args.value(); };
    if (a == "--help" || a == "-h") {
      usage(args.program());
      std::exit(0);
    } else if (a == "--device") {
      o.device = std::atoi(next().c_str());
    } else if (a == "--calls") {
      o.calls = std::max(64, std::atoi(next().c_str()));
    } else if (a == "--big-calls") {
      o.big_calls = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--sizes") {
      o.sizes = parse_list<std::uint64_t>(next(), parse_size);
    } else if (a == "--splits") {
      o.splits = parse_list<int>(next(), [](const std::string& s) { return std::max(1, std::atoi(s.c_str())); });
    } else if (a == "--reps") {
      o.reps = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--warmup") {
      o.warmup = std::max(0, std::atoi(next().c_str()));
    } else if (a == "--only") {
      std::string w = next();
      o.do_calls = w == "calls";
      o.do_bw = w == "bw";
      if (!o.do_calls && !o.do_bw) throw std::runtime_error("--only: calls or bw");
    } else if (a == "--json") {
      o.json = next();
    } else {
      throw std::runtime_error("unknown option " + a + " (see --help)");
    }
  }
  return o;
}

using Clock = std::chrono::steady_clock;
double ns_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::nano>(b - a).count();
}

// ---------------------------------------------------------------------------------------------
struct CallResult {
  std::string name, skipped;
  int calls = 0;
  double median_ns = 0, p10_ns = 0, p90_ns = 0, mean_ns = 0;
};

struct BwResult {
  std::string dir, host_kind, mode, skipped;
  std::uint64_t size = 0, bytes = 0;
  int copies = 1, streams = 1, repeat = 1;
  double gpu_med_gbps = 0, gpu_best_gbps = 0, host_med_gbps = 0, vs_base = 0;
  std::vector<double> gpu_ns, host_ns;
};

struct HostBuf {
  std::string kind;
  void* ptr = nullptr;
  bool h2d_only = false;
  std::function<void()> release;
};

std::atomic<int> g_gate{0};
void CUDART_CB host_noop(void*) {}
void CUDART_CB host_block(void*) {
  while (g_gate.load(std::memory_order_acquire) == 0) {
  }
}

class Probe {
 public:
  explicit Probe(Options o) : opt_(std::move(o)) {}
  ~Probe();
  void run();

 private:
  void setup();
  void calls();
  void bandwidth();
  CallResult time_calls(const std::string& name, int n, cudaStream_t sync_stream, const std::function<void(int)>& fn,
                        int batch = 64, const std::function<void()>& after_batch = {});
  void print_call(const CallResult& r);
  void add_call(CallResult r) {
    print_call(r);
    call_results_.push_back(std::move(r));
  }
  BwResult bw_row(bool h2d, HostBuf& host, std::uint64_t size, int copies, int streams, int repeat);
  void print_bw(const BwResult& r);
  void write_json();

  Options opt_;
  cudaDeviceProp prop_{};
  int driver_version_ = 0, runtime_version_ = 0;
  bool memops64_ = false;
  std::string memops_why_;
  cudaStream_t s1_ = nullptr, s2_ = nullptr;
  std::vector<CallResult> call_results_;
  std::vector<BwResult> bw_results_;
  std::vector<std::string> notes_;
};

Probe::~Probe() {
  if (s1_) cudaStreamDestroy(s1_);
  if (s2_) cudaStreamDestroy(s2_);
}

void Probe::setup() {
  int count = 0;
  CK(cudaGetDeviceCount(&count));
  if (opt_.device >= count) throw std::runtime_error("--device out of range (" + std::to_string(count) + " devices)");
  CK(cudaSetDevice(opt_.device));
  CK(cudaFree(nullptr));  // create the primary context now
  CK(cudaGetDeviceProperties(&prop_, opt_.device));
  CK(cudaDriverGetVersion(&driver_version_));
  CK(cudaRuntimeGetVersion(&runtime_version_));
  std::string why;
  if (!load_entry("cuGetErrorName", p_cuGetErrorName, &why)) notes_.push_back(why);
  if (!load_entry("cuCtxGetCurrent", p_cuCtxGetCurrent, &why)) notes_.push_back(why);
  if (load_entry("cuDeviceGetAttribute", p_cuDeviceGetAttribute, &why)) {
    CUdevice dev = opt_.device;  // CUdevice ordinals equal runtime ordinals without CUDA_VISIBLE_DEVICES games
    int v = 0;
    CU(p_cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev));
    memops64_ = v != 0;
    if (!memops64_) memops_why_ = "CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS = 0";
  } else {
    memops_why_ = why;
  }
  if (memops64_ && (!load_entry("cuStreamWriteValue64", p_cuStreamWriteValue64, &memops_why_) ||
                    !load_entry("cuStreamWaitValue64", p_cuStreamWaitValue64, &memops_why_))) {
    memops64_ = false;
  }
  CK(cudaStreamCreateWithFlags(&s1_, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2_, cudaStreamNonBlocking));
  std::printf("device %d: %s  sm_%d%d  %d SMs  asyncEngineCount %d  PCI %04x:%02x:%02x\n", opt_.device, prop_.name,
              prop_.major, prop_.minor, prop_.multiProcessorCount, prop_.asyncEngineCount, prop_.pciDomainID,
              prop_.pciBusID, prop_.pciDeviceID);
  std::printf("driver %d.%d, runtime %d.%d; 64-bit stream mem ops: %s%s%s\n", driver_version_ / 1000,
              (driver_version_ % 1000) / 10, runtime_version_ / 1000, (runtime_version_ % 1000) / 10,
              memops64_ ? "yes" : "no", memops64_ ? "" : " - ", memops_why_.c_str());
}

CallResult Probe::time_calls(const std::string& name, int n, cudaStream_t sync_stream,
                             const std::function<void(int)>& fn, int batch, const std::function<void()>& after_batch) {
  CallResult r;
  r.name = name;
  r.calls = n;
  std::vector<double> t;
  t.reserve(static_cast<std::size_t>(n));
  double total = 0;
  try {
    for (int i = 0; i < std::min(n, 16); ++i) fn(i);  // warm-up
    if (sync_stream) CK(cudaStreamSynchronize(sync_stream));
    if (after_batch) after_batch();
    for (int i = 0; i < n;) {
      const int end = std::min(n, i + batch);
      for (; i < end; ++i) {
        const auto a = Clock::now();
        fn(i);
        const auto b = Clock::now();
        t.push_back(ns_between(a, b));
        total += t.back();
      }
      if (sync_stream) CK(cudaStreamSynchronize(sync_stream));
      if (after_batch) after_batch();
    }
  } catch (const CudaFailure& e) {
    r.skipped = e.what();
    if (sync_stream) (void)cudaStreamSynchronize(sync_stream);
    (void)cudaGetLastError();
    return r;
  }
  r.median_ns = median(t);
  r.p10_ns = quantile(t, 0.1);
  r.p90_ns = quantile(t, 0.9);
  r.mean_ns = t.empty() ? 0 : total / static_cast<double>(t.size());
  return r;
}

void Probe::print_call(const CallResult& r) {
  if (!r.skipped.empty()) {
    std::printf("  %-52s SKIPPED: %s\n", r.name.c_str(), r.skipped.c_str());
  } else {
    std::printf("  %-52s %7d %10.0f %10.0f %10.0f %10.0f\n", r.name.c_str(), r.calls, r.median_ns, r.p10_ns, r.p90_ns,
                r.mean_ns);
  }
  std::fflush(stdout);
}

void Probe::calls() {
  const int n = opt_.calls;
  std::printf("\n== host cost per call (ns) ==\n  %-52s %7s %10s %10s %10s %10s\n", "primitive", "calls", "median",
              "p10", "p90", "mean");
  add_call(time_calls("clock (steady_clock::now pair, empty)", n, nullptr, [](int) {}));

  void* pinned = nullptr;
  void* dev = nullptr;
  const std::size_t big = 64ull << 20;
  CK(cudaMallocHost(&pinned, big));
  CK(cudaMalloc(&dev, big));
  std::memset(pinned, 1, big);
  for (std::size_t bytes : {std::size_t{64}, std::size_t{64} << 10}) {
    add_call(time_calls("cudaMemcpyAsync H2D pinned " + size_str(bytes), n, s1_,
                        [&](int) { CK(cudaMemcpyAsync(dev, pinned, bytes, cudaMemcpyHostToDevice, s1_)); }));
  }
  // 64 MiB: batch of 1 (sync after every call) so the queue never backs up.
  add_call(time_calls("cudaMemcpyAsync H2D pinned 64M", opt_.big_calls, s1_,
                      [&](int) { CK(cudaMemcpyAsync(dev, pinned, big, cudaMemcpyHostToDevice, s1_)); }, 1));
  add_call(time_calls("cudaMemcpyAsync D2H pinned 64", n, s1_,
                      [&](int) { CK(cudaMemcpyAsync(pinned, dev, 64, cudaMemcpyDeviceToHost, s1_)); }));

  cudaEvent_t ev = nullptr, ev2 = nullptr;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&ev2, cudaEventDisableTiming));
  add_call(time_calls("cudaEventRecord (DisableTiming)", n, s1_, [&](int) { CK(cudaEventRecord(ev, s1_)); }));
  CK(cudaEventRecord(ev, s1_));
  CK(cudaStreamSynchronize(s1_));
  add_call(time_calls("cudaStreamWaitEvent (other stream, event done)", n, s2_,
                      [&](int) { CK(cudaStreamWaitEvent(s2_, ev, 0)); }));
  add_call(time_calls("cudaEventRecord + cudaStreamWaitEvent (pair)", n, s2_, [&](int) {
    CK(cudaEventRecord(ev, s1_));
    CK(cudaStreamWaitEvent(s2_, ev, 0));
  }));
  CK(cudaDeviceSynchronize());
  add_call(time_calls("cudaEventQuery (completed)", n, nullptr, [&](int) { CK(cudaEventQuery(ev)); }));
  // Pending: s1 blocked by a host function spinning on g_gate, then ev2 recorded behind it.
  g_gate.store(0);
  CK(cudaLaunchHostFunc(s1_, host_block, nullptr));
  CK(cudaEventRecord(ev2, s1_));
  {
    auto r = time_calls("cudaEventQuery (pending)", n, nullptr, [&](int) {
      const cudaError_t e = cudaEventQuery(ev2);
      if (e != cudaErrorNotReady) check_rt(e == cudaSuccess ? cudaErrorUnknown : e, "cudaEventQuery(pending: not NotReady)", __LINE__);
    });
    g_gate.store(1, std::memory_order_release);
    CK(cudaStreamSynchronize(s1_));
    (void)cudaGetLastError();  // clear the NotReady left by the queries
    add_call(r);
  }
  add_call(time_calls("cudaStreamQuery (idle stream)", n, nullptr, [&](int) { CK(cudaStreamQuery(s1_)); }));

  if (memops64_) {
    CUdeviceptr word = reinterpret_cast<CUdeviceptr>(dev);
    CK(cudaMemset(dev, 0, 8));
    CK(cudaDeviceSynchronize());
    auto cs1 = reinterpret_cast<CUstream>(s1_);
    auto cs2 = reinterpret_cast<CUstream>(s2_);
    add_call(time_calls("cuStreamWriteValue64", n, s1_, [&](int i) {
      CU(p_cuStreamWriteValue64(cs1, word, static_cast<cuuint64_t>(i + 1), CU_STREAM_WRITE_VALUE_DEFAULT));
    }));
    add_call(time_calls("cuStreamWaitValue64 (GEQ, already satisfied)", n, s2_,
                        [&](int) { CU(p_cuStreamWaitValue64(cs2, word, 0, CU_STREAM_WAIT_VALUE_GEQ)); }));
    std::uint64_t v = 1000000;
    add_call(time_calls("cuStreamWriteValue64 + cuStreamWaitValue64 (pair)", n, s2_, [&](int) {
      ++v;
      CU(p_cuStreamWriteValue64(cs1, word, v, CU_STREAM_WRITE_VALUE_DEFAULT));
      CU(p_cuStreamWaitValue64(cs2, word, v, CU_STREAM_WAIT_VALUE_GEQ));
    }));
    CK(cudaDeviceSynchronize());
  } else {
    for (const char* name : {"cuStreamWriteValue64", "cuStreamWaitValue64 (GEQ, already satisfied)",
                             "cuStreamWriteValue64 + cuStreamWaitValue64 (pair)"}) {
      CallResult r;
      r.name = name;
      r.skipped = memops_why_;
      add_call(r);
    }
  }
  if (p_cuCtxGetCurrent) {
    add_call(time_calls("cuCtxGetCurrent", n, nullptr, [&](int) {
      CUcontext c = nullptr;
      CU(p_cuCtxGetCurrent(&c));
    }));
  }
  add_call(time_calls("cudaGetDevice", n, nullptr, [&](int) {
    int d = -1;
    CK(cudaGetDevice(&d));
  }));
  add_call(time_calls("cudaSetDevice (current device)", n, nullptr, [&](int) { CK(cudaSetDevice(opt_.device)); }));
  add_call(time_calls("cudaLaunchHostFunc (empty fn)", n, s1_,
                      [&](int) { CK(cudaLaunchHostFunc(s1_, host_noop, nullptr)); }));
  CK(cudaDeviceSynchronize());
  CK(cudaEventDestroy(ev));
  CK(cudaEventDestroy(ev2));
  CK(cudaFreeHost(pinned));
  CK(cudaFree(dev));
}

// ---------------------------------------------------------------------------------------------
BwResult Probe::bw_row(bool h2d, HostBuf& host, std::uint64_t size, int copies, int streams, int repeat) {
  BwResult r;
  r.dir = h2d ? "h2d" : "d2h";
  r.host_kind = host.kind;
  r.size = size;
  r.copies = copies;
  r.streams = streams;
  r.repeat = repeat;
  r.bytes = size * static_cast<std::uint64_t>(repeat);
  if (repeat > 1) r.mode = "repeat-" + std::to_string(repeat) + "x";
  else if (copies == 1) r.mode = "single";
  else r.mode = "split-" + std::to_string(copies) + "/" + std::to_string(streams) + "stream" + (streams > 1 ? "s" : "");
  return r;
}

void Probe::print_bw(const BwResult& r) {
  if (!r.skipped.empty()) {
    std::printf("%-4s %5s  %-22s %-16s SKIPPED: %s\n", r.dir.c_str(), size_str(r.size).c_str(), r.host_kind.c_str(),
                r.mode.c_str(), r.skipped.c_str());
  } else {
    std::printf("%-4s %5s  %-22s %-16s %8.2f %8.2f %8.2f  %9.1f %9.1f  %5.3f\n", r.dir.c_str(), size_str(r.size).c_str(),
                r.host_kind.c_str(), r.mode.c_str(), r.gpu_med_gbps, r.gpu_best_gbps, r.host_med_gbps,
                median(r.gpu_ns) / 1e3, median(r.host_ns) / 1e3, r.vs_base);
  }
  std::fflush(stdout);
}

void Probe::bandwidth() {
  const std::uint64_t max_size = (*std::max_element(opt_.sizes.begin(), opt_.sizes.end()) + 4095) & ~4095ull;
  void* dev = nullptr;
  CK(cudaMalloc(&dev, max_size));
  CK(cudaMemset(dev, 0, max_size));

  std::vector<HostBuf> hosts;
  auto add_host = [&](const std::string& kind, bool h2d_only, const std::function<void*(std::function<void()>&)>& alloc) {
    HostBuf h;
    h.kind = kind;
    h.h2d_only = h2d_only;
    try {
      h.ptr = alloc(h.release);
    } catch (const CudaFailure& e) {
      notes_.push_back(kind + " skipped: " + e.what());
      std::printf("host kind %s skipped: %s\n", kind.c_str(), e.what());
      return;
    }
    std::memset(h.ptr, 0x5a, max_size);
    hosts.push_back(std::move(h));
  };
  add_host("cudaMallocHost", false, [&](std::function<void()>& rel) {
    void* p = nullptr;
    CK(cudaMallocHost(&p, max_size));
    rel = [p] { cudaFreeHost(p); };
    return p;
  });
  add_host("cudaHostAllocDefault", false, [&](std::function<void()>& rel) {
    void* p = nullptr;
    CK(cudaHostAlloc(&p, max_size, cudaHostAllocDefault));
    rel = [p] { cudaFreeHost(p); };
    return p;
  });
  add_host("cudaHostAllocWC", true, [&](std::function<void()>& rel) {
    void* p = nullptr;
    CK(cudaHostAlloc(&p, max_size, cudaHostAllocWriteCombined));
    rel = [p] { cudaFreeHost(p); };
    return p;
  });
  add_host("HostRegister 4K-aligned", false, [&](std::function<void()>& rel) {
    void* p = std::aligned_alloc(4096, max_size);
    if (p == nullptr) throw CudaFailure("aligned_alloc failed");
    std::memset(p, 0, max_size);
    cudaError_t e = cudaHostRegister(p, max_size, cudaHostRegisterDefault);
    if (e != cudaSuccess) {
      std::free(p);
      check_rt(e, "cudaHostRegister", __LINE__);
    }
    rel = [p] {
      cudaHostUnregister(p);
      std::free(p);
    };
    return p;
  });
  add_host("HostRegister 2M THP", false, [&](std::function<void()>& rel) {
    const std::size_t a = 2ull << 20;
    const std::size_t len = (max_size + a - 1) / a * a;
    void* raw = mmap(nullptr, len + a, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw CudaFailure("mmap failed");
    void* p = reinterpret_cast<void*>((reinterpret_cast<std::uintptr_t>(raw) + a - 1) / a * a);
    if (madvise(p, len, MADV_HUGEPAGE) != 0) notes_.push_back("madvise(MADV_HUGEPAGE) failed");
    std::memset(p, 0, len);
    cudaError_t e = cudaHostRegister(p, len, cudaHostRegisterDefault);
    if (e != cudaSuccess) {
      munmap(raw, len + a);
      check_rt(e, "cudaHostRegister", __LINE__);
    }
    rel = [p, raw, mapped = len + a] {
      cudaHostUnregister(p);
      munmap(raw, mapped);
    };
    return p;
  });

  cudaEvent_t start = nullptr, stop = nullptr, mid = nullptr;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));
  CK(cudaEventCreateWithFlags(&mid, cudaEventDisableTiming));

  std::printf("\n== cudaMemcpyAsync bandwidth ==\nreps %d (median), warmup %d; GB/s = 1e9 B/s; vs = gpu median / "
              "(cudaHostAllocDefault single) of the same dir+size (= ferry-bench's raw reference)\n",
              opt_.reps, opt_.warmup);
  std::printf("%-4s %5s  %-22s %-16s %8s %8s %8s  %9s %9s  %5s\n", "dir", "size", "host memory", "mode", "gpu-med",
              "gpu-best", "host-med", "gpu-us", "host-us", "vs");
  for (int d = 0; d < 2; ++d) {
    const bool h2d = d == 0;
    for (std::uint64_t size : opt_.sizes) {
      double base = 0;
      std::vector<BwResult> group;
      for (auto& h : hosts) {
        struct Mode {
          int copies, streams, repeat;
        };
        std::vector<Mode> modes;
        for (int s : opt_.splits) {
          modes.push_back({s, 1, 1});
          if (s > 1) modes.push_back({s, 2, 1});
        }
        modes.push_back({1, 1, 4});
        for (Mode m : modes) {
          BwResult r = bw_row(h2d, h, size, m.copies, m.streams, m.repeat);
          if (!h2d && h.h2d_only) continue;  // write-combined memory: H2D only
          try {
            char* hp = static_cast<char*>(h.ptr);
            char* dp = static_cast<char*>(dev);
            // Chunks 4 KiB aligned; copies alternate over the streams.
            const std::uint64_t chunk = ((size + static_cast<std::uint64_t>(m.copies) - 1) / static_cast<std::uint64_t>(m.copies) + 4095) & ~4095ull;
            for (int rep = 0; rep < opt_.warmup + opt_.reps; ++rep) {
              const auto t0 = Clock::now();
              CK(cudaEventRecord(start, s1_));
              if (m.streams > 1) CK(cudaStreamWaitEvent(s2_, start, 0));
              for (int k = 0; k < m.repeat; ++k) {
                int c = 0;
                for (std::uint64_t off = 0; off < size; off += chunk, ++c) {
                  const std::uint64_t len = std::min(chunk, size - off);
                  cudaStream_t s = (m.streams > 1 && (c % 2) == 1) ? s2_ : s1_;
                  if (h2d) CK(cudaMemcpyAsync(dp + off, hp + off, len, cudaMemcpyHostToDevice, s));
                  else CK(cudaMemcpyAsync(hp + off, dp + off, len, cudaMemcpyDeviceToHost, s));
                }
              }
              if (m.streams > 1) {
                CK(cudaEventRecord(mid, s2_));
                CK(cudaStreamWaitEvent(s1_, mid, 0));
              }
              CK(cudaEventRecord(stop, s1_));
              CK(cudaEventSynchronize(stop));
              const auto t1 = Clock::now();
              if (rep < opt_.warmup) continue;
              float ms = 0;
              CK(cudaEventElapsedTime(&ms, start, stop));
              r.gpu_ns.push_back(static_cast<double>(ms) * 1e6);
              r.host_ns.push_back(ns_between(t0, t1));
            }
            const double bytes = static_cast<double>(r.bytes);
            r.gpu_med_gbps = bytes / median(r.gpu_ns);
            r.gpu_best_gbps = bytes / *std::min_element(r.gpu_ns.begin(), r.gpu_ns.end());
            r.host_med_gbps = bytes / median(r.host_ns);
            if (base == 0 && h.kind == "cudaHostAllocDefault" && r.mode == "single") base = r.gpu_med_gbps;
          } catch (const CudaFailure& e) {
            r.skipped = e.what();
            cudaDeviceSynchronize();
          }
          group.push_back(r);
        }
      }
      for (auto& r : group) {
        if (base > 0 && r.skipped.empty()) r.vs_base = r.gpu_med_gbps / base;
        print_bw(r);
        bw_results_.push_back(r);
      }
      std::printf("\n");
    }
  }
  CK(cudaEventDestroy(start));
  CK(cudaEventDestroy(stop));
  CK(cudaEventDestroy(mid));
  for (auto& h : hosts) h.release();
  CK(cudaFree(dev));
}

void Probe::write_json() {
  std::string o;
  appendf(o, "{\n  \"tool\": \"ferry-probe-cuda\",\n  \"device\": %s,\n  \"driver_version\": %d,\n",
          json_string(prop_.name).c_str(), driver_version_);
  appendf(o, "  \"runtime_version\": %d,\n  \"async_engine_count\": %d,\n  \"memops64\": %s,\n", runtime_version_,
          prop_.asyncEngineCount, memops64_ ? "true" : "false");
  appendf(o, "  \"calls\": %d,\n  \"reps\": %d,\n  \"warmup\": %d,\n  \"notes\": [", opt_.calls, opt_.reps,
          opt_.warmup);
  for (std::size_t i = 0; i < notes_.size(); ++i) {
    appendf(o, "%s\n    %s", i ? "," : "", json_string(notes_[i]).c_str());
  }
  appendf(o, "\n  ],\n  \"call_costs\": [");
  for (std::size_t i = 0; i < call_results_.size(); ++i) {
    const auto& r = call_results_[i];
    appendf(o,
            "%s\n    {\"name\": %s, \"calls\": %d, \"median_ns\": %.1f, \"p10_ns\": %.1f, \"p90_ns\": %.1f, "
            "\"mean_ns\": %.1f, \"skipped\": %s}",
            i ? "," : "", json_string(r.name).c_str(), r.calls, r.median_ns, r.p10_ns, r.p90_ns, r.mean_ns,
            json_string(r.skipped).c_str());
  }
  appendf(o, "\n  ],\n  \"bandwidth\": [");
  for (std::size_t i = 0; i < bw_results_.size(); ++i) {
    const auto& r = bw_results_[i];
    appendf(o,
            "%s\n    {\"dir\": %s, \"size\": %llu, \"bytes\": %llu, \"host_mem\": %s, \"mode\": %s, "
            "\"copies\": %d, \"streams\": %d, \"repeat\": %d, \"gpu_gbps_median\": %.4f, \"gpu_gbps_best\": %.4f, "
            "\"host_gbps_median\": %.4f, \"vs_baseline\": %.4f, \"skipped\": %s, \"gpu_ns\": [",
            i ? "," : "", json_string(r.dir).c_str(), static_cast<unsigned long long>(r.size),
            static_cast<unsigned long long>(r.bytes), json_string(r.host_kind).c_str(), json_string(r.mode).c_str(),
            r.copies, r.streams, r.repeat, r.gpu_med_gbps, r.gpu_best_gbps, r.host_med_gbps, r.vs_base,
            json_string(r.skipped).c_str());
    for (std::size_t k = 0; k < r.gpu_ns.size(); ++k) appendf(o, "%s%.0f", k ? ", " : "", r.gpu_ns[k]);
    appendf(o, "], \"host_ns\": [");
    for (std::size_t k = 0; k < r.host_ns.size(); ++k) appendf(o, "%s%.0f", k ? ", " : "", r.host_ns[k]);
    appendf(o, "]}");
  }
  appendf(o, "\n  ]\n}\n");
  ferry::detail::write_file("ferry-probe-cuda --json", o, opt_.json);
  std::printf("wrote %s\n", opt_.json.c_str());
}

void Probe::run() {
  setup();
  if (opt_.do_calls) calls();
  if (opt_.do_bw) bandwidth();
  if (!notes_.empty()) {
    std::printf("notes:\n");
    for (auto& n : notes_) std::printf("  - %s\n", n.c_str());
  }
  if (!opt_.json.empty()) write_json();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse_options(argc, argv);
    Probe p(std::move(o));
    p.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry-probe-cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
