// SPDX-License-Identifier: MIT
// ferry-probe-contention: an experiment, not part of ferry. On one GPU it measures how long a
// small urgent host->device copy waits while a bulk copy is in flight, under several ways of
// issuing the bulk, to choose how copies get a priority. A separate host thread issues one urgent
// copy (pinned H2D, default 64 KiB) every period (default 0.5 ms) on its own highest-priority
// stream while the bulk (default 4 GiB pinned H2D) runs; each row reports the urgent latency
// (p50/p99/max, us) and the bulk's GB/s. Rows (--rows, comma list; --help lists the names):
//   alone, sm-copy-alone         urgent copies with no bulk (copy engine / SM kernel)
//   raw[-alone]                  bulk as one cudaMemcpyAsync (-alone: no urgent copies)
//   chunks-M-N[-alone]           bulk in N MiB chunks on one stream, between chunks M =
//                                kernel (empty kernel), none, event (record + wait on the same
//                                stream), writevalue (cuStreamWriteValue32 to a pinned word),
//                                2streams (chunks alternate over two streams, chained by events)
//   fed-N-K                      a feeder thread keeps at most K chunks of N MiB in flight and
//                                the urgent copies go on the bulk's own stream
//   sm-copy                      the urgent copy done by a kernel reading mapped pinned memory,
//                                beside the one-piece bulk
//   d2h-bulk                     the one-piece bulk device->host, urgent copies H2D beside it
// Latency: host steady_clock just before the urgent enqueue -> a cudaEventQuery (on the thread
// that issued it, spinning) first reports the event recorded after it complete. Bulk GB/s: bytes
// over cudaEventElapsedTime between events around the bulk (1e9 B/s). Each bulk row runs --reps
// times (default 3); urgent samples are pooled, GB/s is the median. Kernels are inline PTX
// loaded with cuModuleLoadData; driver functions come from cudaGetDriverEntryPointByVersion, as
// in backends/cuda/vendor/cuda.hpp, so only cudart is linked.
// Run: ferry-probe-contention [--bulk-mib 4096] [--urgent-kib 64] [--period-us 500]
//      [--rows LIST] [--reps 3] [--json FILE]
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "json.hpp"
#include "probe_cuda.hpp"
#include "probe_util.hpp"
#include "write_file.hpp"

using ferry::detail::json_string;
using probe::appendf;
using probe::median;
using probe::parse_list;
using probe::quantile;

namespace {

using probe::CudaFailure;
using probe::check_rt;

PFN_cuGetErrorName_v6000 p_cuGetErrorName = nullptr;
PFN_cuGetErrorString_v6000 p_cuGetErrorString = nullptr;
PFN_cuModuleLoadData_v2000 p_cuModuleLoadData = nullptr;
PFN_cuModuleGetFunction_v2000 p_cuModuleGetFunction = nullptr;
PFN_cuLaunchKernel_v4000 p_cuLaunchKernel = nullptr;
PFN_cuStreamWriteValue32_v11070 p_cuStreamWriteValue32 = nullptr;

void check_cu(CUresult r, const char* call, int line) {
  if (r != CUDA_SUCCESS) {
    const char* name = "CUresult";
    const char* text = "";
    if (p_cuGetErrorName) p_cuGetErrorName(r, &name);
    if (p_cuGetErrorString) p_cuGetErrorString(r, &text);
    throw CudaFailure(std::string(call) + " failed: " + name + " (" + std::to_string(static_cast<int>(r)) + "): " + text +
                      " at line " + std::to_string(line));
  }
}
#define CU(call) check_cu((call), #call, __LINE__)

template <class Fn>
void load_entry(const char* symbol, Fn& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  CK(cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &status));
  if (status != cudaDriverEntryPointSuccess || p == nullptr) {
    throw CudaFailure(std::string("cudaGetDriverEntryPointByVersion(") + symbol + "): status " +
                      std::to_string(static_cast<int>(status)));
  }
  fn = reinterpret_cast<Fn>(p);
}

// An empty kernel, and a grid-stride copy of n 16-byte words from src to dst (global addresses;
// mapped pinned host memory included).
constexpr const char* kPtx = R"(
.version 7.0
.target sm_75
.address_size 64

.visible .entry ferry_probe_empty()
{
  ret;
}

.visible .entry ferry_probe_copy16(
  .param .u64 src_param,
  .param .u64 dst_param,
  .param .u64 n_param)
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
LOOP:
  setp.ge.u64 %p, %rd4, %rd3;
  @%p bra DONE;
  shl.b64 %rd7, %rd4, 4;
  add.u64 %rd8, %rd1, %rd7;
  add.u64 %rd9, %rd2, %rd7;
  ld.global.v4.u32 {%v0, %v1, %v2, %v3}, [%rd8];
  st.global.v4.u32 [%rd9], {%v0, %v1, %v2, %v3};
  add.u64 %rd4, %rd4, %rd6;
  bra LOOP;
DONE:
  ret;
}
)";

using Clock = std::chrono::steady_clock;
double us_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// ---------------------------------------------------------------------------------------------
struct Options {
  int device = 0;
  std::uint64_t bulk = 4096ull << 20;
  std::uint64_t urgent = 64ull << 10;
  int period_us = 500;
  int reps = 3;
  int alone_copies = 200;
  std::vector<int> chunks_mib{32, 8, 2};
  std::vector<int> ks{2, 3};
  std::string rows;  // empty: the default set
  std::string json;
};

void usage(const char* argv0) {
  std::printf(
      "usage: %s [options]\n"
      "Latency of a small urgent H2D copy (own highest-priority stream) while a bulk copy runs.\n"
      "  --device N         CUDA device (default 0)\n"
      "  --bulk-mib N       bulk size in MiB (default 4096)\n"
      "  --urgent-kib N     urgent copy size in KiB (default 64)\n"
      "  --period-us N      one urgent copy every N us (default 500)\n"
      "  --reps N           bulk repetitions per row, urgent samples pooled (default 3)\n"
      "  --alone-copies N   urgent copies in the alone rows (default 200)\n"
      "  --chunks-mib LIST  chunk sizes of the default rows (default 32,8,2)\n"
      "  --ks LIST          in-flight limits of the default fed rows (default 2,3)\n"
      "  --rows LIST        rows to run, e.g. alone,raw,chunks-kernel-8,fed-8-2 (default: alone,\n"
      "                     sm-copy-alone, raw-alone, raw, chunks-kernel-N-alone, chunks-{kernel,\n"
      "                     none,event,writevalue,2streams}-N, fed-N-K, sm-copy, d2h-bulk)\n"
      "                     any chunks-M-N or raw row takes an -alone suffix (no urgent copies)\n"
      "  --json PATH        also write the rows as JSON\n"
      "Latency: steady_clock before the urgent cudaMemcpyAsync -> cudaEventQuery of the event\n"
      "recorded after it reports done (spun on the issuing thread). GB/s = 1e9 B/s over\n"
      "cudaEventElapsedTime around the bulk; vs = GB/s / raw-alone.\n",
      argv0);
}

int parse_int(const std::string& s) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != '\0' || v <= 0 || v > (1L << 30)) throw std::runtime_error("bad number '" + s + "'");
  return static_cast<int>(v);
}

Options parse_options(int argc, char** argv) {
  Options o;
  probe::Args args(argc, argv);
  while (args.next()) {
    const std::string& a = args.flag();
    if (a == "--help" || a == "-h") {
      usage(args.program());
      std::exit(0);
    } else if (a == "--device") {
      o.device = std::atoi(args.value().c_str());
    } else if (a == "--bulk-mib") {
      o.bulk = static_cast<std::uint64_t>(parse_int(args.value())) << 20;
    } else if (a == "--urgent-kib") {
      o.urgent = static_cast<std::uint64_t>(parse_int(args.value())) << 10;
    } else if (a == "--period-us") {
      o.period_us = parse_int(args.value());
    } else if (a == "--reps") {
      o.reps = parse_int(args.value());
    } else if (a == "--alone-copies") {
      o.alone_copies = parse_int(args.value());
    } else if (a == "--chunks-mib") {
      o.chunks_mib = parse_list<int>(args.value(), parse_int);
    } else if (a == "--ks") {
      o.ks = parse_list<int>(args.value(), parse_int);
    } else if (a == "--rows") {
      o.rows = args.value();
    } else if (a == "--json") {
      o.json = args.value();
    } else {
      throw std::runtime_error("unknown option " + a + " (see --help)");
    }
  }
  return o;
}

// ---------------------------------------------------------------------------------------------
enum class Kind { Alone, SmAlone, Raw, Chunks, Fed, SmCopy, D2h };
enum class Between { Kernel, None, Event, WriteValue, TwoStreams };

struct RowSpec {
  std::string name;
  Kind kind = Kind::Raw;
  Between between = Between::None;
  std::uint64_t chunk = 0;
  int k = 0;
  bool urgent = true;
};

RowSpec parse_row(const std::string& name) {
  RowSpec r;
  r.name = name;
  std::string s = name;
  const std::string alone = "-alone";
  if (s == "alone") {
    r.kind = Kind::Alone;
    return r;
  }
  if (s == "sm-copy-alone") {
    r.kind = Kind::SmAlone;
    return r;
  }
  if (s == "sm-copy") {
    r.kind = Kind::SmCopy;
    return r;
  }
  if (s == "d2h-bulk") {
    r.kind = Kind::D2h;
    return r;
  }
  if (s.size() > alone.size() && s.compare(s.size() - alone.size(), alone.size(), alone) == 0) {
    r.urgent = false;
    s.resize(s.size() - alone.size());
  }
  if (s == "raw") {
    r.kind = Kind::Raw;
    return r;
  }
  auto chunk_of = [&](const std::string& n) { return static_cast<std::uint64_t>(parse_int(n)) << 20; };
  if (s.rfind("chunks-", 0) == 0) {
    const std::string rest = s.substr(7);
    const std::size_t dash = rest.rfind('-');
    if (dash == std::string::npos) throw std::runtime_error("bad row '" + name + "'");
    const std::string m = rest.substr(0, dash);
    r.kind = Kind::Chunks;
    r.chunk = chunk_of(rest.substr(dash + 1));
    if (m == "kernel") r.between = Between::Kernel;
    else if (m == "none") r.between = Between::None;
    else if (m == "event") r.between = Between::Event;
    else if (m == "writevalue") r.between = Between::WriteValue;
    else if (m == "2streams") r.between = Between::TwoStreams;
    else throw std::runtime_error("bad row '" + name + "': kernel, none, event, writevalue or 2streams");
    return r;
  }
  if (s.rfind("fed-", 0) == 0 && r.urgent) {
    const std::string rest = s.substr(4);
    const std::size_t dash = rest.find('-');
    if (dash == std::string::npos) throw std::runtime_error("bad row '" + name + "': fed-N-K");
    r.kind = Kind::Fed;
    r.chunk = chunk_of(rest.substr(0, dash));
    r.k = parse_int(rest.substr(dash + 1));
    return r;
  }
  throw std::runtime_error("unknown row '" + name + "' (see --help)");
}

std::vector<RowSpec> default_rows(const Options& o) {
  std::vector<std::string> names{"alone", "sm-copy-alone", "raw-alone", "raw"};
  for (int n : o.chunks_mib) names.push_back("chunks-kernel-" + std::to_string(n) + "-alone");
  for (const char* m : {"kernel", "none", "event", "writevalue", "2streams"}) {
    for (int n : o.chunks_mib) names.push_back(std::string("chunks-") + m + "-" + std::to_string(n));
  }
  for (int n : o.chunks_mib) {
    for (int k : o.ks) names.push_back("fed-" + std::to_string(n) + "-" + std::to_string(k));
  }
  names.emplace_back("sm-copy");
  names.emplace_back("d2h-bulk");
  std::vector<RowSpec> rows;
  for (auto& n : names) rows.push_back(parse_row(n));
  return rows;
}

struct RowResult {
  RowSpec spec;
  std::string skipped;
  std::vector<double> lat_us;  // pooled urgent latencies
  std::vector<double> gbps;    // per bulk repetition
  std::vector<double> feeder_cpu_ms, bulk_ms;
  double p50 = 0, p99 = 0, max = 0, gbps_med = 0, vs_raw = 0;
};

class Probe {
 public:
  explicit Probe(Options o) : opt_(std::move(o)) {}
  ~Probe();
  void run();

 private:
  void setup();
  RowResult run_row(const RowSpec& spec);
  void urgent_loop(const RowSpec& spec, cudaEvent_t bulk_start, cudaEvent_t bulk_end,
                   const std::atomic<bool>* end_recorded, cudaStream_t stream, int count, std::vector<double>& out);
  void issue_urgent(bool sm, cudaStream_t stream);
  void launch_empty(cudaStream_t s) {
    CU(p_cuLaunchKernel(empty_, 1, 1, 1, 1, 1, 1, 0, reinterpret_cast<CUstream>(s), nullptr, nullptr));
  }
  void enqueue_bulk(const RowSpec& spec, cudaEvent_t end);
  void print_row(const RowResult& r);
  void write_json();

  Options opt_;
  cudaDeviceProp prop_{};
  int driver_version_ = 0, runtime_version_ = 0, prio_least_ = 0, prio_greatest_ = 0;
  CUmodule module_ = nullptr;
  CUfunction empty_ = nullptr, copy16_ = nullptr;
  cudaStream_t urgent_s_ = nullptr, bulk_s_[2] = {nullptr, nullptr};
  cudaEvent_t link_[2] = {nullptr, nullptr};
  std::vector<cudaEvent_t> pool_;  // one per urgent copy in flight
  void* host_bulk_ = nullptr;
  void* dev_bulk_ = nullptr;
  void* host_urgent_ = nullptr;  // pinned, mapped
  void* host_urgent_dev_ = nullptr;
  void* dev_urgent_ = nullptr;
  std::uint32_t* host_word_ = nullptr;  // pinned, mapped: cuStreamWriteValue32's target
  CUdeviceptr host_word_dev_ = 0;
  double raw_alone_gbps_ = 0;
  std::vector<RowResult> results_;
};

Probe::~Probe() {
  cudaDeviceSynchronize();
  for (cudaStream_t s : {urgent_s_, bulk_s_[0], bulk_s_[1]}) {
    if (s) cudaStreamDestroy(s);
  }
  for (cudaEvent_t e : {link_[0], link_[1]}) {
    if (e) cudaEventDestroy(e);
  }
  for (cudaEvent_t e : pool_) {
    if (e) cudaEventDestroy(e);
  }
  if (host_bulk_) cudaFreeHost(host_bulk_);
  if (host_urgent_) cudaFreeHost(host_urgent_);
  if (host_word_) cudaFreeHost(host_word_);
  if (dev_bulk_) cudaFree(dev_bulk_);
  if (dev_urgent_) cudaFree(dev_urgent_);
}

void Probe::setup() {
  int count = 0;
  CK(cudaGetDeviceCount(&count));
  if (opt_.device >= count) throw std::runtime_error("--device out of range (" + std::to_string(count) + " devices)");
  if (opt_.urgent % 16 != 0) throw std::runtime_error("--urgent-kib: the size must be a multiple of 16 bytes");
  CK(cudaSetDevice(opt_.device));
  CK(cudaFree(nullptr));  // create the primary context now
  CK(cudaGetDeviceProperties(&prop_, opt_.device));
  CK(cudaDriverGetVersion(&driver_version_));
  CK(cudaRuntimeGetVersion(&runtime_version_));
  load_entry("cuGetErrorName", p_cuGetErrorName);
  load_entry("cuGetErrorString", p_cuGetErrorString);
  load_entry("cuModuleLoadData", p_cuModuleLoadData);
  load_entry("cuModuleGetFunction", p_cuModuleGetFunction);
  load_entry("cuLaunchKernel", p_cuLaunchKernel);
  load_entry("cuStreamWriteValue32", p_cuStreamWriteValue32);
  CU(p_cuModuleLoadData(&module_, kPtx));
  CU(p_cuModuleGetFunction(&empty_, module_, "ferry_probe_empty"));
  CU(p_cuModuleGetFunction(&copy16_, module_, "ferry_probe_copy16"));
  CK(cudaDeviceGetStreamPriorityRange(&prio_least_, &prio_greatest_));
  CK(cudaStreamCreateWithPriority(&urgent_s_, cudaStreamNonBlocking, prio_greatest_));
  CK(cudaStreamCreateWithFlags(&bulk_s_[0], cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&bulk_s_[1], cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&link_[0], cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&link_[1], cudaEventDisableTiming));
  pool_.resize(1024);
  for (auto& e : pool_) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  std::printf("device %d: %s  sm_%d%d  %d SMs  asyncEngineCount %d\n", opt_.device, prop_.name, prop_.major,
              prop_.minor, prop_.multiProcessorCount, prop_.asyncEngineCount);
  std::printf("driver %d.%d, runtime %d.%d; stream priorities %d (least) .. %d (greatest, the urgent stream's)\n",
              driver_version_ / 1000, (driver_version_ % 1000) / 10, runtime_version_ / 1000,
              (runtime_version_ % 1000) / 10, prio_least_, prio_greatest_);
  std::printf("bulk %llu MiB pinned, urgent %llu KiB pinned every %d us, %d reps per row\n",
              static_cast<unsigned long long>(opt_.bulk >> 20), static_cast<unsigned long long>(opt_.urgent >> 10),
              opt_.period_us, opt_.reps);
  std::fflush(stdout);

  CK(cudaHostAlloc(&host_bulk_, opt_.bulk, cudaHostAllocDefault));
  std::memset(host_bulk_, 0x5a, opt_.bulk);
  CK(cudaMalloc(&dev_bulk_, opt_.bulk));
  CK(cudaMemset(dev_bulk_, 0, opt_.bulk));
  CK(cudaHostAlloc(&host_urgent_, opt_.urgent, cudaHostAllocMapped));
  std::memset(host_urgent_, 0x3c, opt_.urgent);
  CK(cudaHostGetDevicePointer(&host_urgent_dev_, host_urgent_, 0));
  CK(cudaMalloc(&dev_urgent_, opt_.urgent));
  void* word = nullptr;
  CK(cudaHostAlloc(&word, 64, cudaHostAllocMapped));
  host_word_ = static_cast<std::uint32_t*>(word);
  *host_word_ = 0;
  void* word_dev = nullptr;
  CK(cudaHostGetDevicePointer(&word_dev, word, 0));
  host_word_dev_ = reinterpret_cast<CUdeviceptr>(word_dev);
  CK(cudaDeviceSynchronize());
  // Warm up: one bulk copy, one empty kernel, a few urgent copies of each kind.
  CK(cudaMemcpyAsync(dev_bulk_, host_bulk_, opt_.bulk, cudaMemcpyHostToDevice, bulk_s_[0]));
  launch_empty(bulk_s_[0]);
  for (int i = 0; i < 4; ++i) {
    issue_urgent(false, urgent_s_);
    issue_urgent(true, urgent_s_);
  }
  CK(cudaDeviceSynchronize());
}

void Probe::issue_urgent(bool sm, cudaStream_t stream) {
  if (sm) {
    unsigned long long src = reinterpret_cast<std::uintptr_t>(host_urgent_dev_);
    unsigned long long dst = reinterpret_cast<std::uintptr_t>(dev_urgent_);
    unsigned long long n = opt_.urgent / 16;
    void* params[] = {&src, &dst, &n};
    const unsigned threads = 256;
    const unsigned blocks = static_cast<unsigned>(std::min<unsigned long long>((n + threads - 1) / threads, 1024));
    CU(p_cuLaunchKernel(copy16_, blocks, 1, 1, threads, 1, 1, 0, reinterpret_cast<CUstream>(stream), params, nullptr));
  } else {
    CK(cudaMemcpyAsync(dev_urgent_, host_urgent_, opt_.urgent, cudaMemcpyHostToDevice, stream));
  }
}

// Issues urgent copies every period on this thread: `count` of them when bulk_end is null,
// else from when bulk_start completes until `end_recorded` is set and bulk_end has completed.
// Each copy is followed by an event from a pool; a poller thread spins on cudaEventQuery of the
// oldest outstanding one (the copies complete in order: one stream) and stamps its completion.
void Probe::urgent_loop(const RowSpec& spec, cudaEvent_t bulk_start, cudaEvent_t bulk_end,
                        const std::atomic<bool>* end_recorded, cudaStream_t stream, int count,
                        std::vector<double>& out) {
  const bool sm = spec.kind == Kind::SmAlone || spec.kind == Kind::SmCopy;
  auto done = [](cudaEvent_t e) {
    const cudaError_t r = cudaEventQuery(e);
    if (r == cudaSuccess) return true;
    if (r != cudaErrorNotReady) check_rt(r, "cudaEventQuery", __LINE__);
    return false;
  };
  const std::uint64_t pool = pool_.size();
  std::vector<Clock::time_point> t0(pool);
  std::atomic<std::uint64_t> issued{0}, completed{0};
  std::atomic<bool> issuing_done{false}, abort{false};
  std::exception_ptr poll_error;
  std::thread poller([&] {
    try {
      std::uint64_t c = 0;
      while (!abort.load(std::memory_order_acquire)) {
        if (c < issued.load(std::memory_order_acquire)) {
          while (!done(pool_[c % pool])) {
          }
          const auto t1 = Clock::now();
          out.push_back(us_between(t0[c % pool], t1));
          completed.store(++c, std::memory_order_release);
        } else if (issuing_done.load(std::memory_order_acquire) && c == issued.load(std::memory_order_acquire)) {
          break;
        }
      }
    } catch (...) {
      poll_error = std::current_exception();
      abort.store(true, std::memory_order_release);
    }
  });
  try {
    if (bulk_start) {
      while (!done(bulk_start) && !abort.load(std::memory_order_acquire)) {
      }
    }
    const auto period = std::chrono::microseconds(opt_.period_us);
    auto next = Clock::now();
    for (std::uint64_t i = 0; bulk_end ? true : i < static_cast<std::uint64_t>(count); ++i) {
      std::this_thread::sleep_until(next);
      if (abort.load(std::memory_order_acquire)) break;
      if (bulk_end && end_recorded->load(std::memory_order_acquire) && done(bulk_end)) break;
      while (i - completed.load(std::memory_order_acquire) >= pool && !abort.load(std::memory_order_acquire)) {
      }
      const std::uint64_t slot = i % pool;
      t0[slot] = Clock::now();
      next = t0[slot] + period;
      issue_urgent(sm, stream);
      CK(cudaEventRecord(pool_[slot], stream));
      issued.store(i + 1, std::memory_order_release);
    }
  } catch (...) {
    abort.store(true, std::memory_order_release);
    poller.join();
    throw;
  }
  issuing_done.store(true, std::memory_order_release);
  poller.join();
  if (poll_error) std::rethrow_exception(poll_error);
}

// Enqueues the bulk (all but the fed rows) on bulk_s_[0] (2streams: alternating with bulk_s_[1],
// joined back at the end), then records `end` on bulk_s_[0]; the caller recorded the start.
void Probe::enqueue_bulk(const RowSpec& spec, cudaEvent_t end) {
  char* hp = static_cast<char*>(host_bulk_);
  char* dp = static_cast<char*>(dev_bulk_);
  cudaStream_t s0 = bulk_s_[0];
  if (spec.kind == Kind::Raw || spec.kind == Kind::SmCopy) {
    CK(cudaMemcpyAsync(dp, hp, opt_.bulk, cudaMemcpyHostToDevice, s0));
  } else if (spec.kind == Kind::D2h) {
    CK(cudaMemcpyAsync(hp, dp, opt_.bulk, cudaMemcpyDeviceToHost, s0));
  } else {
    const CUstream cs0 = reinterpret_cast<CUstream>(s0);
    std::uint32_t value = 0;
    int c = 0;
    cudaStream_t last = s0;
    for (std::uint64_t off = 0; off < opt_.bulk; off += spec.chunk, ++c) {
      const std::uint64_t len = std::min(spec.chunk, opt_.bulk - off);
      if (c > 0) {
        switch (spec.between) {
          case Between::Kernel:
            launch_empty(s0);
            break;
          case Between::None:
            break;
          case Between::Event:
            CK(cudaEventRecord(link_[0], s0));
            CK(cudaStreamWaitEvent(s0, link_[0], 0));
            break;
          case Between::WriteValue:
            CU(p_cuStreamWriteValue32(cs0, host_word_dev_, ++value, CU_STREAM_WRITE_VALUE_DEFAULT));
            break;
          case Between::TwoStreams:
            CK(cudaEventRecord(link_[(c - 1) % 2], bulk_s_[(c - 1) % 2]));
            CK(cudaStreamWaitEvent(bulk_s_[c % 2], link_[(c - 1) % 2], 0));
            break;
        }
      }
      last = spec.between == Between::TwoStreams ? bulk_s_[c % 2] : s0;
      CK(cudaMemcpyAsync(dp + off, hp + off, len, cudaMemcpyHostToDevice, last));
    }
    if (last != s0) {
      CK(cudaEventRecord(link_[1], last));
      CK(cudaStreamWaitEvent(s0, link_[1], 0));
    }
  }
  CK(cudaEventRecord(end, s0));
}

RowResult Probe::run_row(const RowSpec& spec) {
  RowResult r;
  r.spec = spec;
  if (spec.kind == Kind::Alone || spec.kind == Kind::SmAlone) {
    urgent_loop(spec, nullptr, nullptr, nullptr, urgent_s_, opt_.alone_copies, r.lat_us);
    CK(cudaDeviceSynchronize());
    return r;
  }
  cudaEvent_t start = nullptr, end = nullptr;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&end));
  std::vector<cudaEvent_t> ring;
  try {
    if (spec.kind == Kind::Fed) {
      ring.resize(static_cast<std::size_t>(spec.k));
      for (auto& e : ring) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    for (int rep = 0; rep < opt_.reps; ++rep) {
      CK(cudaDeviceSynchronize());
      // `start` is recorded before the urgent thread starts (it waits for it to complete) and
      // before the rest of the bulk is enqueued (enqueueing thousands of chunks can block).
      CK(cudaEventRecord(start, bulk_s_[0]));
      std::atomic<bool> end_recorded{false};
      std::exception_ptr urgent_error, bulk_error;
      std::thread urgent;
      if (spec.urgent) {
        const cudaStream_t s = spec.kind == Kind::Fed ? bulk_s_[0] : urgent_s_;
        urgent = std::thread([&, s] {
          try {
            urgent_loop(spec, start, end, &end_recorded, s, 0, r.lat_us);
          } catch (...) {
            urgent_error = std::current_exception();
          }
        });
      }
      double cpu_ms = 0;
      try {
        if (spec.kind == Kind::Fed) {
          // The feeder: at most K chunks in flight, spinning on cudaEventQuery of the chunk K back.
          std::thread feeder([&] {
            try {
              const double c0 = thread_cpu_ms();
              char* hp = static_cast<char*>(host_bulk_);
              char* dp = static_cast<char*>(dev_bulk_);
              std::uint64_t c = 0;
              for (std::uint64_t off = 0; off < opt_.bulk; off += spec.chunk, ++c) {
                cudaEvent_t slot = ring[c % ring.size()];
                if (c >= ring.size()) {
                  for (;;) {
                    const cudaError_t q = cudaEventQuery(slot);
                    if (q == cudaSuccess) break;
                    if (q != cudaErrorNotReady) check_rt(q, "cudaEventQuery(feeder)", __LINE__);
                  }
                }
                const std::uint64_t len = std::min(spec.chunk, opt_.bulk - off);
                CK(cudaMemcpyAsync(dp + off, hp + off, len, cudaMemcpyHostToDevice, bulk_s_[0]));
                CK(cudaEventRecord(slot, bulk_s_[0]));
              }
              CK(cudaEventRecord(end, bulk_s_[0]));
              cpu_ms = thread_cpu_ms() - c0;
            } catch (...) {
              bulk_error = std::current_exception();
            }
          });
          feeder.join();
        } else {
          enqueue_bulk(spec, end);
        }
      } catch (...) {
        bulk_error = std::current_exception();
      }
      end_recorded.store(true, std::memory_order_release);
      if (urgent.joinable()) urgent.join();
      if (bulk_error) std::rethrow_exception(bulk_error);
      if (spec.kind == Kind::Fed) r.feeder_cpu_ms.push_back(cpu_ms);
      if (urgent_error) std::rethrow_exception(urgent_error);
      CK(cudaEventSynchronize(end));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, start, end));
      r.bulk_ms.push_back(static_cast<double>(ms));
      r.gbps.push_back(static_cast<double>(opt_.bulk) / (static_cast<double>(ms) * 1e6));
    }
  } catch (const CudaFailure& e) {
    r.skipped = e.what();
    (void)cudaDeviceSynchronize();
    (void)cudaGetLastError();
  }
  CK(cudaDeviceSynchronize());
  for (auto e : ring) CK(cudaEventDestroy(e));
  CK(cudaEventDestroy(start));
  CK(cudaEventDestroy(end));
  return r;
}

void Probe::print_row(const RowResult& r) {
  if (!r.skipped.empty()) {
    std::printf("%-24s SKIPPED: %s\n", r.spec.name.c_str(), r.skipped.c_str());
  } else {
    std::printf("%-24s %6zu %10.1f %10.1f %10.1f", r.spec.name.c_str(), r.lat_us.size(), r.p50, r.p99, r.max);
    if (r.gbps.empty()) std::printf(" %8s %6s", "-", "-");
    else std::printf(" %8.2f %6.3f", r.gbps_med, r.vs_raw);
    if (!r.feeder_cpu_ms.empty()) {
      std::printf("  feeder cpu %.1f ms/rep (%.0f%% of bulk time)", median(r.feeder_cpu_ms),
                  100.0 * median(r.feeder_cpu_ms) / median(r.bulk_ms));
    }
    std::printf("\n");
  }
  std::fflush(stdout);
}

void Probe::write_json() {
  std::string o;
  appendf(o, "{\n  \"tool\": \"ferry-probe-contention\",\n  \"device\": %s,\n  \"driver_version\": %d,\n",
          json_string(prop_.name).c_str(), driver_version_);
  appendf(o, "  \"runtime_version\": %d,\n  \"async_engine_count\": %d,\n  \"stream_priority_greatest\": %d,\n",
          runtime_version_, prop_.asyncEngineCount, prio_greatest_);
  appendf(o, "  \"bulk_bytes\": %llu,\n  \"urgent_bytes\": %llu,\n  \"period_us\": %d,\n  \"reps\": %d,\n",
          static_cast<unsigned long long>(opt_.bulk), static_cast<unsigned long long>(opt_.urgent), opt_.period_us,
          opt_.reps);
  appendf(o, "  \"latency_clock\": %s,\n  \"raw_alone_gbps\": %.4f,\n  \"rows\": [",
          json_string("steady_clock before urgent enqueue -> cudaEventQuery spin on the issuing thread").c_str(),
          raw_alone_gbps_);
  for (std::size_t i = 0; i < results_.size(); ++i) {
    const auto& r = results_[i];
    appendf(o,
            "%s\n    {\"name\": %s, \"urgent\": %s, \"chunk_bytes\": %llu, \"k\": %d, \"skipped\": %s, "
            "\"samples\": %zu, \"p50_us\": %.2f, \"p99_us\": %.2f, \"max_us\": %.2f, \"bulk_gbps_median\": %.4f, "
            "\"vs_raw_alone\": %.4f, \"bulk_gbps\": [",
            i ? "," : "", json_string(r.spec.name).c_str(), r.spec.urgent ? "true" : "false",
            static_cast<unsigned long long>(r.spec.chunk), r.spec.k, json_string(r.skipped).c_str(), r.lat_us.size(),
            r.p50, r.p99, r.max, r.gbps_med, r.vs_raw);
    for (std::size_t k = 0; k < r.gbps.size(); ++k) appendf(o, "%s%.4f", k ? ", " : "", r.gbps[k]);
    appendf(o, "], \"feeder_cpu_ms\": [");
    for (std::size_t k = 0; k < r.feeder_cpu_ms.size(); ++k) appendf(o, "%s%.3f", k ? ", " : "", r.feeder_cpu_ms[k]);
    appendf(o, "], \"latency_us\": [");
    for (std::size_t k = 0; k < r.lat_us.size(); ++k) appendf(o, "%s%.1f", k ? ", " : "", r.lat_us[k]);
    appendf(o, "]}");
  }
  appendf(o, "\n  ]\n}\n");
  ferry::detail::write_file("ferry-probe-contention --json", o, opt_.json);
  std::printf("wrote %s\n", opt_.json.c_str());
}

void Probe::run() {
  std::vector<RowSpec> rows;
  if (opt_.rows.empty()) rows = default_rows(opt_);
  else rows = parse_list<RowSpec>(opt_.rows, parse_row);
  setup();
  std::printf("%-24s %6s %10s %10s %10s %8s %6s\n", "row", "n", "p50-us", "p99-us", "max-us", "GB/s", "vs");
  const auto t0 = Clock::now();
  for (const auto& spec : rows) {
    RowResult r = run_row(spec);
    if (r.skipped.empty()) {
      r.p50 = quantile(r.lat_us, 0.50);
      r.p99 = quantile(r.lat_us, 0.99);
      r.max = r.lat_us.empty() ? 0 : *std::max_element(r.lat_us.begin(), r.lat_us.end());
      if (!r.gbps.empty()) r.gbps_med = median(r.gbps);
      if (spec.kind == Kind::Raw && !spec.urgent && raw_alone_gbps_ == 0) raw_alone_gbps_ = r.gbps_med;
      if (raw_alone_gbps_ > 0) r.vs_raw = r.gbps_med / raw_alone_gbps_;
    }
    print_row(r);
    results_.push_back(std::move(r));
  }
  std::printf("%.1f s; vs = GB/s / raw-alone (0 until raw-alone has run)\n", us_between(t0, Clock::now()) / 1e6);
  if (!opt_.json.empty()) write_json();
}

}  // namespace

int main(int argc, char** argv) {
  return probe::guarded_main(
      "ferry-probe-contention",
      [](int c, char** v) {
        Probe p(parse_options(c, v));
        p.run();
        return 0;
      },
      argc, argv);
}
