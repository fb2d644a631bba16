// SPDX-License-Identifier: MIT
// ferry-probe-adopted-copy: an experiment, not part of ferry. The host cost of each step of
// an upload from an engine's pinned memory into an engine's device memory on CUDA, in the
// order ferry.torch's binding takes them (HostPool::adopt, Device::adopt_memory,
// Transfer::upload_into, DeviceBuffer::release, the HostBuffer's drop), beside the CUDA
// primitives those steps issue, timed alone in the same run, and the ordered copy's five
// stream operations through the runtime and through the driver, timed in turns.
//
//   ferry-probe-adopted-copy [--calls N (2000)] [--size SIZE (64M)] [--sync-every N (32)] [--null]
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <algorithm>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ferry/ferry.hpp"
#include "probe_util.hpp"

namespace {

using namespace ferry;
using clock_type = std::chrono::steady_clock;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// The driver entry points the ordered side copy needs, through the runtime's lookup (no link
/// against libcuda): the same sequence without the runtime's per-call layer.
struct DriverCalls {
  decltype(&cuStreamWaitEvent) wait = nullptr;
  decltype(&cuMemcpyHtoDAsync) copy = nullptr;
  decltype(&cuEventRecord) record = nullptr;
  decltype(&cuCtxGetCurrent) current = nullptr;
  decltype(&cuPointerGetAttributes) attributes = nullptr;

  DriverCalls() {
    lookup("cuCtxGetCurrent", current);
    lookup("cuPointerGetAttributes", attributes);
    lookup("cuStreamWaitEvent", wait);
    lookup("cuMemcpyHtoDAsync", copy);
    lookup("cuEventRecord", record);
  }
  template <class F>
  static void lookup(const char* symbol, F& out) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status{};
    check(cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &status), symbol);
    if (status != cudaDriverEntryPointSuccess || p == nullptr) throw std::runtime_error(std::string("no ") + symbol);
    out = reinterpret_cast<F>(p);
  }
  static void ok(CUresult r, const char* what) {
    if (r != CUDA_SUCCESS) throw std::runtime_error(std::string(what) + " failed: " + std::to_string(r));
  }
};

double us(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

struct Row {
  std::string name;
  std::vector<double> samples;
};

void print(const std::vector<Row>& rows) {
  for (const Row& r : rows) {
    std::vector<double> s = r.samples;
    std::printf("%-52s %8.2f  p90 %8.2f\n", r.name.c_str(), probe::median(s), probe::quantile(s, 0.9));
  }
}

/// Time each of `ways` `calls` times after a warm-up, in turns within one loop (call i runs
/// them in rotated order), so that all see the same queue depth and host speed; `sync` runs
/// every `every` calls, outside the timing.
std::vector<Row> time_in_turns(const std::vector<std::pair<std::string, std::function<void()>>>& ways, int calls,
                               int every, const std::function<void()>& sync) {
  std::vector<Row> rows;
  for (const auto& w : ways) rows.push_back({w.first, {}});
  const int n = static_cast<int>(ways.size());
  for (int i = -32; i < calls; ++i) {
    if (i % every == 0) sync();
    for (int j = 0; j < n; ++j) {
      const auto k = static_cast<std::size_t>((i % n + n + j) % n);
      const auto t0 = clock_type::now();
      ways[k].second();
      const auto t1 = clock_type::now();
      if (i >= 0) rows[k].samples.push_back(us(t0, t1));
    }
  }
  sync();
  return rows;
}

/// Time `fn` alone `calls` times after a warm-up; `sync` runs every `every` calls, outside the timing.
Row time_alone(const std::string& name, int calls, int every, const std::function<void()>& fn,
               const std::function<void()>& sync) {
  return time_in_turns({{name, fn}}, calls, every, sync).front();
}

/// The five steps in ferry.torch's order, each timed; `chained`: each adoption is ready after
/// the previous one's release point, as a block handed back and taken again is.
void ferry_steps(Backend backend, NativeQueue target, void* dptr, void* hptr, std::uint64_t bytes, bool record_events,
                 bool chained, int calls, int every) {
  Device dev = Device::open({.backend = backend, .record_events = record_events});
  Queue owner = dev.adopt_queue(QueueRole::compute, target, "probe target");
  Transfer xfer(dev);
  std::vector<Row> rows{{"HostPool::adopt", {}},           {"Device::adopt_memory", {}},
                        {"Transfer::upload_into (owner waits)", {}}, {"DeviceBuffer::release", {}},
                        {"HostBuffer drop", {}},           {"all five", {}}};
  const auto sync = [&] {
    owner.synchronize(std::chrono::minutes(1));
    xfer.synchronize(std::chrono::minutes(1));
  };
  TimelinePoint released;
  for (int i = -32; i < calls; ++i) {
    if (i % every == 0) sync();
    const auto t0 = clock_type::now();
    std::optional<HostBuffer> hb = dev.host_pool().adopt(hptr, bytes);
    const auto t1 = clock_type::now();
    DeviceBuffer b = dev.adopt_memory(NativeMemory{.pointer = reinterpret_cast<std::uint64_t>(dptr)}, bytes, owner,
                                      AdoptOptions{.ready_after = chained ? released : TimelinePoint{}});
    const auto t2 = clock_type::now();
    (void)xfer.upload_into(*hb, 0, bytes, b, 0, UploadIntoOptions{.destination_unused = true});
    const auto t3 = clock_type::now();
    released = b.release();
    const auto t4 = clock_type::now();
    hb.reset();
    const auto t5 = clock_type::now();
    if (i >= 0) {
      rows[0].samples.push_back(us(t0, t1));
      rows[1].samples.push_back(us(t1, t2));
      rows[2].samples.push_back(us(t2, t3));
      rows[3].samples.push_back(us(t3, t4));
      rows[4].samples.push_back(us(t4, t5));
      rows[5].samples.push_back(us(t0, t5));
    }
  }
  sync();
  std::printf("-- ferry steps on %s, record_events = %s, %s\n", std::string(to_string(backend)).c_str(),
              record_events ? "true" : "false",
              chained ? "each adoption ready after the previous release" : "no ready_after");
  print(rows);
  std::vector<Row> more;
  more.push_back(time_alone("Queue::mark", calls, every, [&] { (void)owner.mark(); }, sync));
  more.push_back(time_alone("Queue::mark().reached()", calls, every, [&] { (void)owner.mark().reached(); }, sync));
  print(more);
}

/// What a per-call adoption costs beside one long-lived adoption of the range, both on the
/// null backend: adopt + upload_into + release, against upload_into into the long-lived
/// adoption with the range's last release point as a wait and Queue::mark as its release
/// (what a core entry point copying into unadopted memory would do), timed in turns.
void adoption_share(void* dptr, void* hptr, std::uint64_t bytes, int calls, int every) {
  Device dev = Device::open({.backend = Backend::null, .record_events = false});
  Queue owner = dev.adopt_queue(QueueRole::compute, NativeQueue{.handle = dptr}, "probe target");
  Transfer xfer(dev);
  HostBuffer hb = dev.host_pool().adopt(hptr, bytes);
  const NativeMemory range{.pointer = reinterpret_cast<std::uint64_t>(dptr)};
  DeviceBuffer kept = dev.adopt_memory(range, bytes, owner, {});
  TimelinePoint released_per_call, released_kept;
  const auto sync = [&] {
    owner.synchronize(std::chrono::minutes(1));
    xfer.synchronize(std::chrono::minutes(1));
  };
  std::printf("-- a per-call adoption beside one long-lived adoption, null backend\n");
  print(time_in_turns(
      {{"adopt_memory + upload_into + release",
        [&] {
          DeviceBuffer b = dev.adopt_memory(range, bytes, owner, AdoptOptions{.ready_after = released_per_call});
          (void)xfer.upload_into(hb, 0, bytes, b, 0,
                                 UploadIntoOptions{.destination_unused = true});
          released_per_call = b.release();
        }},
       {"upload_into (long-lived adoption, wait) + Queue::mark",
        [&] {
          UploadIntoOptions o{.destination_unused = true};
          if (!released_kept.empty()) o.wait.push_back(released_kept);
          (void)xfer.upload_into(hb, 0, bytes, kept, 0, std::move(o));
          released_kept = owner.mark();
        }}},
      calls, every, sync));
}

/// The stash's shape: `n` ranges of one device allocation downloaded into one pinned host
/// buffer and restored from it, each range adopted, copied and released, timed per call (all
/// ranges) and split by step. `executor_owned`: the ranges are adopted as the executor's, ready
/// after one mark of the target, and the target waits once for the last copy.
void stash_steps(NativeQueue target, std::byte* dptr, std::byte* hptr, std::uint64_t range, int n, int rounds,
                 bool executor_owned) {
  Device dev = Device::open({.backend = Backend::cuda});
  Queue owner = dev.adopt_queue(QueueRole::compute, target, "probe target");
  Transfer xfer(dev);
  const Queue exec = xfer.executor();
  HostBuffer host = dev.host_pool().adopt(hptr, range * static_cast<std::uint64_t>(n));
  std::vector<Row> rows{{"stash: adopt (all ranges)", {}},   {"stash: download (all ranges)", {}},
                        {"stash: release (all ranges)", {}}, {"stash: the call", {}},
                        {"restore: adopt (all ranges)", {}}, {"restore: upload_into (all ranges)", {}},
                        {"restore: release (all ranges)", {}}, {"restore: the call", {}}};
  const auto sync = [&] {
    owner.synchronize(std::chrono::minutes(1));
    xfer.synchronize(std::chrono::minutes(1));
  };
  for (int r = -2; r < rounds; ++r) {
    sync();
    for (int dir = 0; dir < 2; ++dir) {
      double adopt = 0, copy = 0, release = 0;
      const auto c0 = clock_type::now();
      const TimelinePoint after = owner.mark();
      TimelinePoint last;
      std::vector<DeviceBuffer> held;
      held.reserve(n);
      for (int i = 0; i < n; ++i) {
        const auto t0 = clock_type::now();
        DeviceBuffer b = dev.adopt_memory(NativeMemory{.pointer = reinterpret_cast<std::uint64_t>(dptr + range * i)},
                                          range, executor_owned ? exec : owner, AdoptOptions{.ready_after = after});
        const auto t1 = clock_type::now();
        if (dir == 0) {
          last = xfer.download(b, host, range * i);
        } else {
          last = xfer.upload_into(host, range * i, range, b, 0,
                                  UploadIntoOptions{.owner_waits = false,
                                                .destination_unused = true});
        }
        const auto t2 = clock_type::now();
        if (dir == 0) {
          (void)b.release();
        } else {
          held.push_back(std::move(b));
        }
        adopt += us(t0, t1);
        copy += us(t1, t2);
        release += us(t2, clock_type::now());
      }
      const auto t3 = clock_type::now();
      for (DeviceBuffer& b : held) (void)b.release();
      if (executor_owned) owner.wait(last);
      const auto c1 = clock_type::now();
      release += us(t3, c1);
      if (r >= 0) {
        rows[4 * dir + 0].samples.push_back(adopt);
        rows[4 * dir + 1].samples.push_back(copy);
        rows[4 * dir + 2].samples.push_back(release);
        rows[4 * dir + 3].samples.push_back(us(c0, c1));
      }
    }
  }
  sync();
  std::printf("-- the stash's shape: %d ranges of %s, adopted as the %s's (us per call of all ranges)\n", n,
              probe::size_str(range).c_str(), executor_owned ? "executor" : "target");
  print(rows);
}

int run(int argc, char** argv) {
  int calls = 2000, every = 32, stash = 0;
  bool null = false;
  std::uint64_t stash_range = 32ull << 20;
  std::uint64_t bytes = 64ull << 20;
  probe::Args args(argc, argv);
  while (args.next()) {
    if (args.flag() == "--calls") calls = std::stoi(args.value());
    else if (args.flag() == "--size") bytes = probe::parse_size(args.value());
    else if (args.flag() == "--sync-every") every = std::stoi(args.value());
    else if (args.flag() == "--null") null = true;
    else if (args.flag() == "--stash") stash = std::stoi(args.value());
    else if (args.flag() == "--stash-size") stash_range = probe::parse_size(args.value());
    else if (args.flag() == "--help") {
      std::printf("usage: %s [--calls N (2000)] [--size SIZE (64M)] [--sync-every N (32)] [--null]\n"
                  "          [--stash N [--stash-size SIZE (32M)]]\n"
                  "  --null: only ferry's steps, on the null backend (no driver: the front end's share), and a\n"
                  "          per-call adoption beside one long-lived adoption\n"
                  "  --stash: only the stash's shape, N ranges adopted, copied and released per call, beside\n"
                  "           the raw D2H copies with an event per range\n",
                  args.program());
      return 0;
    } else {
      throw std::runtime_error("unknown option " + args.flag());
    }
  }
  if (calls < 1 || every < 1) throw std::runtime_error("--calls and --sync-every must be >= 1");
  if (null) {
    std::vector<std::byte> memory(2 * bytes);
    for (const bool record_events : {true, false}) {
      for (const bool chained : {false, true}) {
        ferry_steps(Backend::null, NativeQueue{.handle = memory.data()}, memory.data(), memory.data() + bytes, bytes,
                    record_events, chained, calls, every);
      }
    }
    adoption_share(memory.data(), memory.data() + bytes, bytes, calls, every);
    return 0;
  }
  void* dptr = nullptr;
  void* hptr = nullptr;
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaMalloc(&dptr, bytes), "cudaMalloc");
  check(cudaHostAlloc(&hptr, bytes, cudaHostAllocDefault), "cudaHostAlloc");
  cudaStream_t target = nullptr, side = nullptr;
  check(cudaStreamCreateWithFlags(&target, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaEvent_t ev = nullptr;
  check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
  const auto dev_sync = [&] { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); };

  if (stash > 0) {
    const std::uint64_t total = stash_range * static_cast<std::uint64_t>(stash);
    std::byte* sd = nullptr;
    std::byte* sh = nullptr;
    check(cudaMalloc(reinterpret_cast<void**>(&sd), total), "cudaMalloc");
    check(cudaHostAlloc(reinterpret_cast<void**>(&sh), total, cudaHostAllocDefault), "cudaHostAlloc");
    const int rounds = std::max(3, calls / 100);
    std::vector<Row> raw{{"raw: D2H memcpy + event record per range (all ranges)", {}},
                         {"raw: H2D memcpy per range, one record (all ranges)", {}}};
    for (int r = -2; r < rounds; ++r) {
      dev_sync();
      const auto t0 = clock_type::now();
      check(cudaEventRecord(ev, target), "record");
      check(cudaStreamWaitEvent(side, ev, 0), "wait");
      for (int i = 0; i < stash; ++i) {
        check(cudaMemcpyAsync(sh + stash_range * i, sd + stash_range * i, stash_range, cudaMemcpyDeviceToHost, side),
              "cudaMemcpyAsync");
        check(cudaEventRecord(ev, side), "record");
      }
      const auto t1 = clock_type::now();
      for (int i = 0; i < stash; ++i) {
        check(cudaMemcpyAsync(sd + stash_range * i, sh + stash_range * i, stash_range, cudaMemcpyHostToDevice, side),
              "cudaMemcpyAsync");
      }
      check(cudaEventRecord(ev, side), "record");
      check(cudaStreamWaitEvent(target, ev, 0), "wait");
      const auto t2 = clock_type::now();
      if (r >= 0) {
        raw[0].samples.push_back(us(t0, t1));
        raw[1].samples.push_back(us(t1, t2));
      }
    }
    dev_sync();
    print(raw);
    for (const bool executor_owned : {false, true}) {
      stash_steps(NativeQueue{.handle = target}, sd, sh, stash_range, stash, rounds, executor_owned);
    }
    check(cudaFreeHost(sh), "cudaFreeHost");
    check(cudaFree(sd), "cudaFree");
    return 0;
  }
  std::printf("one upload of %s from adopted pinned memory into adopted device memory, CUDA device 0\n",
              probe::size_str(bytes).c_str());
  std::vector<Row> prims;
  prims.push_back(time_alone("cudaPointerGetAttributes (device)", calls, every, [&] {
    cudaPointerAttributes a{};
    check(cudaPointerGetAttributes(&a, dptr), "cudaPointerGetAttributes");
  }, dev_sync));
  prims.push_back(time_alone("cudaPointerGetAttributes (pinned host)", calls, every, [&] {
    cudaPointerAttributes a{};
    check(cudaPointerGetAttributes(&a, hptr), "cudaPointerGetAttributes");
  }, dev_sync));
  const DriverCalls driver;
  prims.push_back(time_alone("cuCtxGetCurrent", calls, every, [&] {
    CUcontext c = nullptr;
    DriverCalls::ok(driver.current(&c), "cuCtxGetCurrent");
  }, dev_sync));
  prims.push_back(time_alone("cuPointerGetAttributes (device; ferry's five attributes)", calls, every, [&] {
    unsigned int type = 0, managed = 0;
    int ordinal = -1;
    std::uint64_t start = 0, size = 0;
    CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
                                   CU_POINTER_ATTRIBUTE_MAPPING_SIZE};
    void* data[] = {&type, &managed, &ordinal, &start, &size};
    DriverCalls::ok(driver.attributes(5, which, data, reinterpret_cast<CUdeviceptr>(dptr)), "cuPointerGetAttributes");
  }, dev_sync));
  prims.push_back(time_alone("cudaEventRecord", calls, every, [&] { check(cudaEventRecord(ev, target), "record"); },
                             dev_sync));
  prims.push_back(time_alone("cudaStreamWaitEvent", calls, every,
                             [&] { check(cudaStreamWaitEvent(side, ev, 0), "wait"); }, dev_sync));
  prims.push_back(time_alone("cudaEventQuery (complete)", calls, every, [&] { (void)cudaEventQuery(ev); },
                             dev_sync));
  prims.push_back(time_alone("cudaMemcpyAsync H2D (pinned)", calls, every, [&] {
    check(cudaMemcpyAsync(dptr, hptr, bytes, cudaMemcpyHostToDevice, side), "cudaMemcpyAsync");
  }, dev_sync));
  prims.push_back(time_alone("raw: wait + memcpy + record + wait", calls, every, [&] {
    check(cudaStreamWaitEvent(side, ev, 0), "wait");
    check(cudaMemcpyAsync(dptr, hptr, bytes, cudaMemcpyHostToDevice, side), "cudaMemcpyAsync");
    check(cudaEventRecord(ev, side), "record");
    check(cudaStreamWaitEvent(target, ev, 0), "wait");
  }, dev_sync));
  print(prims);

  // The driver calls of the two ways to move one pinned batch for the stream that uses it,
  // timed in turns within one loop so that both see the same queue depth and host speed:
  // PyTorch's Tensor.to(non_blocking=True) copies in the target's order and records an
  // event for its host block; an ordered copy on a side stream (ferry's upload into memory
  // the target frees) waits for the block's last release on the target, copies, records
  // its completion, makes the target wait for it, and records the next release on the target.
  {
    cudaEvent_t done = nullptr, released = nullptr, host_block = nullptr;
    for (cudaEvent_t* e : {&done, &released, &host_block}) {
      check(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreate");
    }
    print(time_in_turns(
        {{"in order: memcpy + record (Tensor.to's calls)",
          [&] {
            check(cudaMemcpyAsync(dptr, hptr, bytes, cudaMemcpyHostToDevice, target), "cudaMemcpyAsync");
            check(cudaEventRecord(host_block, target), "record");
          }},
         {"ordered side copy: wait + memcpy + record + wait + record",
          [&] {
            check(cudaStreamWaitEvent(side, released, 0), "wait");
            check(cudaMemcpyAsync(dptr, hptr, bytes, cudaMemcpyHostToDevice, side), "cudaMemcpyAsync");
            check(cudaEventRecord(done, side), "record");
            check(cudaStreamWaitEvent(target, done, 0), "wait");
            check(cudaEventRecord(released, target), "record");
          }},
         {"ordered side copy, driver API: the same five calls",
          [&] {
            DriverCalls::ok(driver.wait(side, released, 0), "cuStreamWaitEvent");
            DriverCalls::ok(driver.copy(reinterpret_cast<CUdeviceptr>(dptr), hptr, bytes, side), "cuMemcpyHtoDAsync");
            DriverCalls::ok(driver.record(done, side), "cuEventRecord");
            DriverCalls::ok(driver.wait(target, done, 0), "cuStreamWaitEvent");
            DriverCalls::ok(driver.record(released, target), "cuEventRecord");
          }}},
        calls, every, dev_sync));
    for (cudaEvent_t e : {done, released, host_block}) check(cudaEventDestroy(e), "cudaEventDestroy");
  }

  for (const bool record_events : {false, true}) {
    for (const bool chained : {false, true}) {
      ferry_steps(Backend::cuda, NativeQueue{.handle = target}, dptr, hptr, bytes, record_events, chained, calls, every);
    }
  }
  check(cudaFreeHost(hptr), "cudaFreeHost");
  check(cudaFree(dptr), "cudaFree");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return probe::guarded_main("ferry-probe-adopted-copy", run, argc, argv); }
