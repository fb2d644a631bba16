// SPDX-License-Identifier: MIT
// ferry-bench: running one (strategy, size) scenario and the raw-copy reference.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sys/resource.h>

#include "bench.hpp"
#include "step_trace.hpp"

namespace ferry_bench {
namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Peak RSS: Linux resets VmHWM when "5" is written to /proc/self/clear_refs.
bool reset_rss_peak() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

std::uint64_t rss_peak_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // kB
  }
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<std::uint64_t>(u.ru_maxrss) * 1024;  // kB on Linux
}

// The pinned host batches of the ring, filled once.
std::vector<ferry::HostBuffer> host_ring(ferry::Device& dev, std::uint64_t bytes, int count) {
  std::vector<ferry::HostBuffer> ring;
  for (int k = 0; k < count; ++k) {
    ring.push_back(dev.host_pool().allocate(bytes));
    auto span = ring.back().span();
    for (std::size_t i = 0; i < span.size(); ++i) span[i] = static_cast<std::byte>((i * 131 + k) & 0xff);
  }
  return ring;
}

// One upload of `source` with the scenario's strategy. For `preallocated` the caller's
// `destination` is written and returned through `input`; otherwise `upload.buffer` is.
struct StepInput {
  ferry::Upload upload;
  ferry::TimelinePoint ready;
};

// In the seed's order the step places the owner's wait itself, right before the batch's
// first use, so the compute enqueued between the upload and that use is not ordered behind the
// copy (the seed's side stream + wait_stream). Elsewhere the use follows the call, which
// places the wait.
bool call_places_wait(const Scenario& sc) { return !(sc.workload == Workload::seed && sc.order == Order::seed); }

StepInput upload_once(ferry::Transfer& xfer, ReferenceUploads& reference, const ferry::HostBuffer& source,
                      const Scenario& sc, const ferry::DeviceBuffer& destination) {
  StepInput in;
  const bool owner_waits = call_places_wait(sc);
  if (sc.mode == Strategy::preallocated) {
    in.ready = xfer.upload_into(source, destination,
                                {.owner_waits = owner_waits});
  } else {
    in.upload = reference.upload(sc.mode, source, {.tag = "input", .overlap = sc.overlap, .owner_waits = owner_waits});
    in.ready = in.upload.ready;
  }
  return in;
}

// The seed's compute that does not read the batch: `units` passes over the unrelated
// `weights` into the step's temporary.
void unrelated_compute(ferry::Queue& compute, const Scenario& sc, const ferry::DeviceBuffer& weights,
                       const ferry::DeviceBuffer& tmp) {
  ferry::run_synthetic_compute(compute, weights, tmp, sc.units);
}

// The use of the batch `input`, uploaded with `ready`, on the owner.
//  - pipeline: `units` passes reading the batch into the step's temporary.
//  - seed: the owner waits for the copy where the call did not place that wait, then one
//    short pass reads the batch.
void use_batch(ferry::Queue& compute, const Scenario& sc, const ferry::DeviceBuffer& input,
               const ferry::TimelinePoint& ready, const ferry::DeviceBuffer& tmp) {
  if (sc.workload == Workload::pipeline) {
    ferry::run_synthetic_compute(compute, input, tmp, sc.units);
    return;
  }
  if (!call_places_wait(sc) && !ready.empty()) compute.wait(ready);
  ferry::run_synthetic_compute(compute, input, tmp, 1);
}

// The step's kernels with no copy (compute-only pass): the seed's unrelated compute and short
// pass, or the pipeline's passes over the batch.
void step_compute(ferry::Queue& compute, const Scenario& sc, const ferry::DeviceBuffer& input,
                  const ferry::DeviceBuffer& weights, const ferry::DeviceBuffer& tmp) {
  if (sc.workload == Workload::seed) unrelated_compute(compute, sc, weights, tmp);
  use_batch(compute, sc, input, {}, tmp);
}

struct Context {
  Context(ferry::Device device, std::vector<ferry::HostBuffer> host = {})
      : dev(std::move(device)),
        compute(dev.queue(ferry::QueueRole::compute)),
        xfer(dev),
        reference(dev, xfer, compute),
        ring(std::move(host)) {}

  ferry::Device dev;
  ferry::Queue compute;
  ferry::Transfer xfer;
  ReferenceUploads reference;  ///< the blocking and executor_owned strategies
  std::vector<ferry::HostBuffer> ring;
  ferry::DeviceBuffer weights;  ///< the seed workload's unrelated compute input
};

// The footprint run: the loader-like loop whose pool peaks and snapshot are the result.
void footprint_run(Context& c, const Scenario& sc, Result& r, const Progress& progress, const std::string& label) {
  auto& pool = c.dev.pool();
  pool.trim();
  pool.reset_peaks();
  pool.clear_events();
  ferry::DeviceBuffer destination;
  if (sc.mode == Strategy::preallocated) {
    destination = pool.allocate(sc.bytes, c.compute, {.tag = "preallocated input"});
  }
  if (sc.workload == Workload::seed) {
    // The model's weights: live for the whole run, the same in every strategy's footprint.
    c.weights = pool.allocate(sc.bytes, c.compute, {.tag = "weights"});
  }
  std::vector<ferry::TimelinePoint> marks(static_cast<std::size_t>(sc.steps));
  std::vector<ferry::TimelinePoint> copied(marks.size());
  std::optional<StepTrace> trace;
  if (sc.trace) {
    trace.emplace(marks.size(), [&](int kind, std::size_t i) { return (kind == 0 ? copied : marks)[i].reached(); });
  }
  std::vector<double> host_us;
  host_us.reserve(marks.size());
  const bool compute_first = sc.workload == Workload::seed && sc.order == Order::compute_first;
  StepClock clock(sc.steps, sc.inflight);
  for (int i = 0; i < sc.steps; ++i) {
    progress.step(label + ": step " + std::to_string(i + 1) + "/" + std::to_string(sc.steps));
    if (i >= sc.inflight) {
      marks[static_cast<std::size_t>(i - sc.inflight)].wait(std::chrono::minutes(10));
      clock.waited(i);
    }
    const auto& source = c.ring[static_cast<std::size_t>(i) % c.ring.size()];
    const auto issued_at = clock_type::now();
    // The step in the scenario's order (Order): the seed's compute_first enqueues the
    // unrelated compute, and so allocates its temporary, before the call.
    ferry::DeviceBuffer tmp;
    // The step's temporary and, in the seed workload, the compute that does not read the batch.
    const auto begin_step = [&] {
      tmp = pool.allocate(sc.bytes, c.compute, {.tag = "temporary"});
      if (sc.workload == Workload::seed) unrelated_compute(c.compute, sc, c.weights, tmp);
    };
    if (compute_first) begin_step();
    const auto u0 = clock_type::now();
    StepInput in = upload_once(c.xfer, c.reference, source, sc, destination);
    host_us.push_back(ms_since(u0) * 1e3);
    const ferry::DeviceBuffer& input = sc.mode == Strategy::preallocated ? destination : in.upload.buffer;
    if (!compute_first) begin_step();
    use_batch(c.compute, sc, input, in.ready, tmp);
    tmp.release();
    if (in.upload.buffer) in.upload.buffer.release();
    marks[static_cast<std::size_t>(i)] = c.compute.mark();
    copied[static_cast<std::size_t>(i)] = in.ready;
    if (trace) trace->issued(static_cast<std::size_t>(i), issued_at);
  }
  marks.back().wait(std::chrono::minutes(10));
  r.step_ms = clock.step_ms(&r.step_ms_with_warmup);
  c.compute.synchronize(std::chrono::minutes(10));
  c.xfer.synchronize(std::chrono::minutes(10));
  if (trace) {
    trace->stop();
    r.times = trace->summary();
  }
  r.host_us_per_call = median(host_us);
  if (destination) destination.release();

  const ferry::PoolBudget b = pool.get_budget();
  r.peak_allocated = b.peak_active_bytes;
  r.peak_reserved = b.peak_reserved_bytes;
  r.peak_stranded = b.peak_stranded_bytes;
  r.segment_allocations = b.segment_allocations;
  r.pending_reuses = b.pending_reuses;
  r.snapshot = pool.snapshot();
}

int pass_count(const Scenario& sc) { return std::clamp(sc.steps, 3, 20); }

// Compute only: the step's kernels on buffers allocated once, no copy.
double compute_only_ms(Context& c, const Scenario& sc) {
  auto& pool = c.dev.pool();
  ferry::DeviceBuffer in = pool.allocate(sc.bytes, c.compute, {.tag = "compute-only input"});
  ferry::DeviceBuffer out = pool.allocate(sc.bytes, c.compute, {.tag = "compute-only output"});
  if (sc.workload == Workload::seed && !c.weights) {
    c.weights = pool.allocate(sc.bytes, c.compute, {.tag = "weights"});
  }
  step_compute(c.compute, sc, in, c.weights, out);  // warm-up
  c.compute.synchronize(std::chrono::minutes(10));
  const int n = pass_count(sc);
  const auto t0 = clock_type::now();
  for (int i = 0; i < n; ++i) step_compute(c.compute, sc, in, c.weights, out);
  c.compute.synchronize(std::chrono::minutes(10));
  return ms_since(t0) / n;
}

// Copy only with the scenario's strategy: N uploads, one host wait at the end (host-timed).
double copy_only_ms(Context& c, const Scenario& sc, int n) {
  ferry::DeviceBuffer destination;
  if (sc.mode == Strategy::preallocated) {
    destination = c.dev.pool().allocate(sc.bytes, c.compute, {.tag = "preallocated input"});
  }
  auto once = [&](std::size_t i) {
    StepInput in = upload_once(c.xfer, c.reference, c.ring[i % c.ring.size()], sc, destination);
    if (in.upload.buffer) in.upload.buffer.release();
    return in.ready;
  };
  once(0).wait(std::chrono::minutes(10));  // warm-up
  c.compute.synchronize(std::chrono::minutes(10));
  // Like the footprint run, the host runs at most `inflight` uploads ahead of the copies.
  const auto t0 = clock_type::now();
  std::vector<ferry::TimelinePoint> ready(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    if (i >= sc.inflight) ready[static_cast<std::size_t>(i - sc.inflight)].wait(std::chrono::minutes(10));
    ready[static_cast<std::size_t>(i)] = once(static_cast<std::size_t>(i));
  }
  ready.back().wait(std::chrono::minutes(10));
  const double ms = ms_since(t0) / n;
  c.compute.synchronize(std::chrono::minutes(10));
  return ms;
}

double gbps(std::uint64_t bytes, double ms) { return ms > 0 ? static_cast<double>(bytes) / (ms * 1e6) : 0; }

}  // namespace

// The step trace's summary (step_trace.hpp), with the medians of the footprint run's.
StepTimes StepTrace::summary(std::size_t skip) const {
  StepTimes t;
  const std::size_t n = issued_.load(std::memory_order_acquire);
  if (n < skip + 2 || failed_.load(std::memory_order_acquire)) return t;
  auto ms = [](clock_type::time_point a, clock_type::time_point b) {
    return std::chrono::duration<double, std::milli>(a - b).count();
  };
  std::vector<double> lead, copy_period, copy_after, use_after, period;
  for (std::size_t i = std::max<std::size_t>(skip, 1); i < n; ++i) {
    lead.push_back(ms(done_at_[1][i - 1], issued_at_[i]));
    copy_period.push_back(ms(done_at_[0][i], done_at_[0][i - 1]));
    copy_after.push_back(ms(done_at_[0][i], done_at_[1][i - 1]));
    use_after.push_back(ms(done_at_[1][i], done_at_[0][i]));
    period.push_back(ms(done_at_[1][i], done_at_[1][i - 1]));
  }
  t.host_lead_ms = median(lead);
  t.copy_period_ms = median(copy_period);
  t.copy_after_step_ms = median(copy_after);
  t.use_after_copy_ms = median(use_after);
  t.step_period_ms = median(period);
  t.measured = true;
  return t;
}

std::string StepTimes::text() const {
  if (!measured) return "not traced";
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "step %.3f ms; copy done every %.3f ms, %.3f ms after the previous step's compute; compute "
                "done %.3f ms after its copy; host issued each step %.3f ms before the previous one finished",
                step_period_ms, copy_period_ms, copy_after_step_ms, use_after_copy_ms, host_lead_ms);
  return buf;
}

const char* workload_name(Workload workload) { return workload == Workload::seed ? "seed" : "pipeline"; }

const char* order_name(Order order) { return order == Order::seed ? "seed" : "compute_first"; }

std::string strategy_name(const Scenario& scenario) {
  return std::string(to_string(scenario.mode)) + (scenario.overlap ? "+overlap" : "");
}

std::string row_name(const Scenario& scenario) {
  const bool named = scenario.workload == Workload::seed && scenario.order != Order::seed;
  return strategy_name(scenario) + (named ? std::string(" (") + order_name(scenario.order) + ")" : "");
}

ferry::Device DeviceFactory::open() const {
  if (backend == "auto") return ferry::Device::open_default();
  return ferry::Device::open({.backend = ferry::parse_backend(backend)});
}

ferry::Device DeviceFactory::open_unrecorded() const {
  if (backend != "auto") return ferry::Device::open({.backend = ferry::parse_backend(backend), .record_events = false});
  // The default device, found again among its backend's devices by name and UUID.
  const ferry::Device chosen = ferry::Device::open_default();
  const ferry::Backend b = chosen.backend();
  const ferry::Capabilities& want = chosen.capabilities();
  for (int i = 0; i < ferry::Device::count(b); ++i) {
    ferry::Device d = ferry::Device::open({.backend = b, .ordinal = i, .record_events = false});
    if (d.capabilities().name == want.name && d.capabilities().uuid == want.uuid) return d;
  }
  throw std::runtime_error("the default device was not found again among its backend's devices");
}

void Progress::phase(const std::string& text) const {
  if (quiet) return;
  std::cerr << (tty ? "\r\033[K" : "") << text << (tty ? "" : "\n") << std::flush;
}

void Progress::step(const std::string& text) const {
  if (quiet || !tty) return;
  std::cerr << "\r\033[K" << text << std::flush;
}

void Progress::done() const {
  if (quiet || !tty) return;
  std::cerr << "\r\033[K" << std::flush;
}

Result run_scenario(const DeviceFactory& factory, const Scenario& sc, const Progress& progress,
                    const std::string& label) {
  Result r;
  r.scenario = sc;
  ferry::Device dev = factory.open();
  Context c(dev);
  progress.phase(label + ": pinning " + std::to_string(sc.inflight + 1) + " host batches");
  c.ring = host_ring(dev, sc.bytes, sc.inflight + 1);

  r.rss_reset = reset_rss_peak();
  progress.phase(label + ": footprint run");
  footprint_run(c, sc, r, progress, label);
  r.rss_peak = rss_peak_bytes();

  progress.phase(label + ": compute-only pass");
  r.compute_ms = compute_only_ms(c, sc);
  progress.phase(label + ": copy-only pass");
  r.copy_ms = copy_only_ms(c, sc, pass_count(sc));
  r.copy_gbps = gbps(sc.bytes, r.copy_ms);
  return r;  // overlap is set once the raw copy of this size is known (measure())
}

RawCopy run_raw_copy(const DeviceFactory& factory, std::uint64_t bytes, int iterations, int steps,
                     std::uint32_t units, int inflight, bool trace) {
  ferry::Device dev = factory.open();
  // Same run-ahead as the strategies' copy-only passes, so the rows compare like for like.
  Scenario sc{.mode = Strategy::preallocated, .bytes = bytes, .steps = iterations, .units = 1, .inflight = 2};
  Context c(dev, host_ring(dev, bytes, 1));
  RawCopy raw;
  raw.bytes = bytes;
  raw.gbps = gbps(bytes, copy_only_ms(c, sc, iterations));

  // Download into pinned memory: N downloads, one host wait at the end.
  {
    ferry::DeviceBuffer src = dev.pool().allocate(bytes, c.compute, {.tag = "download source"});
    c.xfer.download(src, c.ring[0]).wait(std::chrono::minutes(10));  // warm-up
    const auto t0 = clock_type::now();
    ferry::TimelinePoint last;
    for (int i = 0; i < iterations; ++i) last = c.xfer.download(src, c.ring[0]);
    last.wait(std::chrono::minutes(10));
    raw.d2h_gbps = gbps(bytes, ms_since(t0) / iterations);
  }

  // Timeline pair: the executor signals a semaphore, the owner queue waits for it.
  {
    ferry::TimelineSemaphore sem = dev.create_semaphore(0);
    ferry::Queue exec = c.xfer.executor();
    constexpr int pairs = 10000;
    const auto t0 = clock_type::now();
    for (int i = 1; i <= pairs; ++i) {
      exec.signal(sem.at(static_cast<std::uint64_t>(i)));
      c.compute.wait(sem.at(static_cast<std::uint64_t>(i)));
    }
    raw.timeline_pair_us = ms_since(t0) * 1e3 / pairs;
    c.compute.synchronize(std::chrono::minutes(1));
  }
  raw.vendor = measure_vendor_copy(bytes, iterations);
  // A pair's Vulkan side is a Vulkan device of the same ordinal: its raw loop is the pair's
  // Vulkan anchor, beside the CUDA one above.
  const bool pair = dev.backend() == ferry::Backend::vulkan_cuda || dev.backend() == ferry::Backend::cuda_vulkan;
  if (dev.backend() == ferry::Backend::vulkan || (pair && ferry::Device::built_with(ferry::Backend::vulkan))) {
    c.ring.clear();
    dev.pool().trim();
    const ferry::Device anchor = pair ? ferry::Device::open({.backend = ferry::Backend::vulkan}) : dev;
    raw.vulkan = measure_vulkan_anchor(anchor, bytes, iterations, steps, units, inflight, trace);
  }
  return raw;
}

}  // namespace ferry_bench
