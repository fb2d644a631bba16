// SPDX-License-Identifier: MIT
// ferry-bench internals: options, one scenario's run, and the report (table, verdicts, JSON).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"
#include "ferry/testing.hpp"
#include "reference.hpp"
#include "step_trace.hpp"
#include "vendor.hpp"

namespace ferry_bench {

/// What a step's compute does with the batch (docs/benchmarks.md, "Workloads").
enum class Workload {
  /// The seed's step: compute that does not read the batch (the synthetic compute over an
  /// unrelated buffer, standing for the seed's matmuls) runs while the batch is copied, then a
  /// short pass reads the batch (the seed's `d.sum()`). Footprint and overlap are both
  /// reachable: the copy of batch i+1 waits only for the short pass of step i.
  seed,
  /// The compute reads the whole batch; the copy of batch i+1 overlaps it (TorchRec's
  /// TrainPipelineSparseDist). Overlap needs one more batch live than a blocking copy.
  pipeline,
};

/// "seed", "pipeline".
const char* workload_name(Workload workload);

/// Where the seed workload's upload call sits among the step's work on the owner. Order is
/// part of the workload: a bar met only in the order that suits the copy is not met, so both
/// are measured in the same run and judged by the same bars. The pipeline workload has one
/// schedule; its scenarios keep the default.
enum class Order {
  /// The seed's order, as an engine writes it: the call first with `owner_waits = false`, then
  /// the unrelated compute, then `owner.wait(upload.ready)`, then the short pass that reads the
  /// batch, then the release. The compute enqueued between the call and the wait is not
  /// ordered behind the copy (a side stream with `wait_stream` places the wait there).
  seed,
  /// The unrelated compute first, then the call, which makes the owner wait for the copy
  /// (`owner_waits`, the default: the use follows the call), then the short pass.
  compute_first,
};

/// "seed", "compute_first".
const char* order_name(Order order);

/// Command-line options (see `usage()`).
struct Options {
  std::string backend = "auto";              ///< host|cuda|vulkan|hip|auto
  std::vector<std::uint64_t> sizes;          ///< bytes per batch; empty = backend default
  int steps = 30;                            ///< steps per footprint run
  std::uint32_t compute_units = 20;          ///< passes of synthetic compute per step
  int inflight = 2;                          ///< steps the host lets run ahead
  std::vector<Workload> workloads{Workload::seed, Workload::pipeline};
  std::vector<Order> orders{Order::seed, Order::compute_first};  ///< the seed workload's orders
  std::vector<Strategy> strategies{all_strategies.begin(), all_strategies.end()};
  std::optional<std::filesystem::path> out;       ///< results.json folder
  std::optional<std::filesystem::path> snapshot;  ///< snapshot exports folder
  bool quiet = false;
  /// Also run owner_owned with UploadOptions::overlap ("owner_owned+overlap").
  bool overlap_variant = true;
  /// Whole-batch study: size of the pageable buffer (0 = off; unset = backend default).
  std::optional<std::uint64_t> batch_bytes;
  /// Host cost per upload call: number of timed calls (0 = off) and the size of each.
  int host_cost_calls = 4096;
  std::uint64_t host_cost_bytes = 64ull << 10;
  /// Run only the host-cost measurement (no strategies, raw copies or batch study).
  bool host_cost_only = false;
  /// Run only the whole-batch study, with the raw copies its DMA ceiling needs (no
  /// strategies, no host cost).
  bool batch_study_only = false;
  /// Whole-batch study: rounds of (ceiling, ferry) measured alternately.
  int batch_rounds = 5;
  /// Time each footprint run's steps (and the raw Vulkan loop's) and print where they go.
  bool trace_steps = false;
  /// Image study (`--images`, `--no-images`); unset = on a GPU backend only.
  std::optional<bool> images;
  /// Run only the image study.
  bool images_only = false;
  /// Image study: timed copies per measurement, each way.
  int image_reps = 10;
  /// Image study: the fraction of the layered case's 2048 layers; unset = 1 on a GPU, 1/32
  /// elsewhere (CPU runs then finish in seconds).
  std::optional<double> image_scale;
  /// Contention section (`--contention on|off`; default on): urgent uploads beside a bulk copy.
  bool contention = true;
  /// Run only the contention section.
  bool contention_only = false;
  /// Contention: the bulk copy's size; unset = 4 GiB on a GPU, 64 MiB elsewhere (a CPU
  /// backend's copy-engine model then finishes a bulk in milliseconds).
  std::optional<std::uint64_t> contention_bulk_bytes;
  /// Contention: each urgent upload's size and the period between two of them.
  std::uint64_t contention_urgent_bytes = 64ull << 10;
  int contention_period_us = 500;
  /// Contention: bulk copies per row (urgent latencies pooled, GB/s the median).
  int contention_reps = 3;
  /// Contention: ferry's TransferOptions::bulk_piece_bytes (0: the backend's default).
  std::uint64_t contention_piece_bytes = 0;
  /// The command line as given (argv[0] as "ferry-bench", arguments shell-quoted where
  /// needed): results.json records it, so a table made from the file names what reproduces it.
  std::string command;
};

/// Parse argv; throws std::invalid_argument with a message on bad input. Returns nullopt for
/// --help (usage already printed).
std::optional<Options> parse_options(int argc, char** argv);
std::string usage();
/// "64M" -> 64 MiB; K/M/G are binary units; a plain number is bytes.
std::uint64_t parse_size(const std::string& text);
/// 67108864 -> "64M".
std::string size_label(std::uint64_t bytes);

/// One (strategy, size) measurement.
struct Scenario {
  Workload workload = Workload::pipeline;
  Order order = Order::seed;  ///< the seed workload's order (the pipeline keeps the default)
  Strategy mode = Strategy::owner_owned;
  std::uint64_t bytes = 0;
  int steps = 30;
  std::uint32_t units = 20;
  int inflight = 2;
  bool overlap = false;  ///< owner_owned with UploadOptions::overlap (overlap first)
  bool trace = false;    ///< time the footprint run's steps (StepTrace)
};

/// "owner_owned", "owner_owned+overlap", ...
std::string strategy_name(const Scenario& scenario);
/// The row's name within its workload: the strategy, with " (compute_first)" for a seed
/// scenario in that order ("owner_owned (compute_first)"). Unique per workload and size, so
/// results.json rows keep one key each.
std::string row_name(const Scenario& scenario);

/// What a scenario measured. Times in milliseconds, bandwidth in GB/s (1e9 bytes/s).
struct Result {
  Scenario scenario;
  std::uint64_t peak_allocated = 0;  ///< pool peak active bytes
  std::uint64_t peak_reserved = 0;   ///< pool peak reserved bytes
  std::uint64_t peak_stranded = 0;   ///< pool peak stranded bytes
  std::uint64_t segment_allocations = 0;
  std::uint64_t pending_reuses = 0;
  std::uint64_t rss_peak = 0;        ///< process peak RSS during the scenario (bytes)
  bool rss_reset = false;            ///< whether the RSS peak was reset before the scenario
  double copy_gbps = 0;              ///< copy-only pass, host-timed
  double host_us_per_call = 0;       ///< median host time of one upload call (footprint run)
  double step_ms = 0;                ///< footprint run: steady-state step time (StepClock)
  double step_ms_with_warmup = 0;    ///< footprint run: wall time / steps, first steps included
  double compute_ms = 0;             ///< compute-only pass, per step (the step's kernels, no copy)
  double copy_ms = 0;                ///< copy-only pass, per upload
  double overlap = 0;                ///< step_ms / max(compute_ms, raw copy time of the batch)
  ferry::MemorySnapshot snapshot;    ///< pool snapshot after the footprint run
  StepTimes times;                   ///< the footprint run's step timeline (--trace-steps)
};

/// Link-level references for one size, measured on a fresh device.
struct RawCopy {
  std::uint64_t bytes = 0;
  double gbps = 0;             ///< ferry upload_into a preallocated buffer, host-timed
  double d2h_gbps = 0;         ///< ferry download into pinned memory, host-timed
  double timeline_pair_us = 0; ///< host time of one queue signal + other-queue wait pair
  VendorCopy vendor;           ///< the vendor's raw copy (CUDA builds with a device)
  VulkanAnchor vulkan;         ///< the raw Vulkan loop (Vulkan backend)
};

/// Opens a fresh device of the chosen backend.
struct DeviceFactory {
  std::string backend;  ///< "auto" or a backend name
  ferry::Device open() const;
  /// The same device with event recording (snapshots, activity spans) off.
  ferry::Device open_unrecorded() const;
};

/// Progress reporting on stderr (silent when quiet).
struct Progress {
  bool quiet = false;
  bool tty = false;
  /// A new phase (always shown unless quiet).
  void phase(const std::string& text) const;
  /// A fine-grained update (shown only on a terminal, overwriting the line).
  void step(const std::string& text) const;
  void done() const;
};

Result run_scenario(const DeviceFactory& factory, const Scenario& scenario, const Progress& progress,
                    const std::string& label);
/// The references of one size; on the Vulkan backend also the raw Vulkan loop with the
/// footprint runs' shape (`steps`, `units`, `inflight`).
RawCopy run_raw_copy(const DeviceFactory& factory, std::uint64_t bytes, int iterations, int steps,
                     std::uint32_t units, int inflight, bool trace);

/// Spread of a measurement repeated over rounds: median, min and max.
struct Spread {
  double median = 0, min = 0, max = 0;
};

/// Whole-batch study: scattered and pageable uploads against the ceiling
/// min(parallel host memcpy, pinned DMA). The host memcpy side of the ceiling is measured in
/// rounds alternating with ferry's calls (ceiling, ferry, ceiling, ferry, ...), so a host
/// whose speed drifts moves both sides of a ratio alike; each ratio is taken within its round
/// and the verdicts use the median ratio. Each ceiling copies the bytes of the call it bounds
/// (the same sources, or as many bytes), with threads started before the timing, as ferry's
/// helpers are. GB/s, host-timed.
struct BatchStudy {
  bool ran = false;
  int rounds = 0;
  unsigned memcpy_threads = 0;
  double dma_gbps = 0;           ///< pinned DMA (vendor raw copy, else ferry's raw upload)
  std::uint64_t scattered_count = 0, scattered_each = 0;
  /// Scattered upload ceiling: the faster of the same buffers gathered into pinned memory and
  /// one contiguous pageable range of as many bytes copied into pinned memory.
  Spread memcpy_gather_gbps;     ///< the same scattered buffers -> pinned, all threads
  Spread memcpy_same_gbps;       ///< contiguous pageable -> pinned, as many bytes, all threads
  Spread ceiling_scattered_gbps; ///< min(max of the two, DMA), per round
  Spread scattered_gbps;         ///< one Transfer::upload(span<HostView>) of the scattered buffers
  Spread scattered_ratio;        ///< scattered / its ceiling of the same round
  /// The same buffers staged by hand in each round beside ferry's call (the two take turns
  /// going first): memcpy into pinned memory by the same threads, chunk by chunk, each chunk's
  /// pinned upload issued as soon as it is packed (what an engine writes without ferry's
  /// staging).
  std::uint64_t hand_chunk = 0;
  Spread hand_staged_gbps;
  Spread hand_staged_ratio;      ///< hand-staged / the ceiling of the same round
  Spread scattered_vs_hand;      ///< ferry's scattered call / the hand-staged one, per round
  /// One contiguous pageable buffer of the scattered call's size through the same call, against
  /// the same ceiling: what the per-buffer work costs is the gap between the two ratios.
  Spread contiguous_gbps;
  Spread contiguous_ratio;
  std::uint64_t pageable_bytes = 0;
  Spread memcpy_gbps;            ///< pageable_bytes contiguous pageable -> pinned, all threads
  Spread ceiling_gbps;           ///< min(memcpy_gbps, DMA), per round
  Spread pageable_gbps;          ///< one Transfer::upload(span<const std::byte>) of pageable_bytes
  Spread pageable_ratio;
  /// Downloads: ceiling min(faster of pinned -> the same buffers and pinned -> contiguous
  /// pageable of as many bytes, pinned D2H DMA).
  Spread memcpy_out_gbps;
  double dma_d2h_gbps = 0;       ///< pinned D2H DMA (vendor where measured, else ferry's); 0 = unknown
  Spread ceiling_down_gbps;
  Spread scattered_down_gbps;    ///< one Transfer::download(buffer, span<DownloadView>) into the scattered buffers
  Spread scattered_down_ratio;
};
BatchStudy run_batch_study(const DeviceFactory& factory, std::uint64_t pageable_bytes, double dma_gbps,
                           double dma_d2h_gbps, int rounds, const Progress& progress);

/// Median and 90th percentile of a set of samples (nearest rank).
struct Percentiles {
  double median = 0;
  double p90 = 0;
};
Percentiles percentiles(std::vector<double> samples);

/// What the image study measures of one kind of copy (see time_copies).
struct CopyTimes {
  double gbps = 0;     ///< median over the copies of bytes / host time of the issue and the wait
  double call_us = 0;  ///< median host time of the issue alone
};

/// One untimed warm-up, then `reps` copies of `bytes`, each `wait(issue())`, host-timed
/// around the issue and around both. The image study's ferry calls and vendor loops all time
/// their copies with it, so that their figures compare by construction.
template <class Issue, class Wait>
CopyTimes time_copies(std::uint64_t bytes, int reps, Issue&& issue, Wait&& wait) {
  using clock = std::chrono::steady_clock;
  const auto us = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
  };
  wait(issue());
  std::vector<double> gbps, call_us;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = clock::now();
    auto issued = issue();
    const auto t1 = clock::now();
    wait(issued);
    const auto t2 = clock::now();
    call_us.push_back(us(t0, t1));
    gbps.push_back(static_cast<double>(bytes) / (us(t0, t2) * 1e3));
  }
  return {percentiles(std::move(gbps)).median, percentiles(std::move(call_us)).median};
}

/// One case of the image study (docs/benchmarks.md, "Images"): an engine's image made with
/// the vendor's calls and adopted, every region filled and read back by ferry from and into
/// pinned memory, beside one ferry buffer copy of the same bytes and the vendor's own image
/// copy of the same regions. GB/s are medians over the reps of one copy's bytes / its host
/// time (the call and the wait for its point); call times are medians of the call alone.
struct ImageCase {
  std::string name;                ///< "frame", "bc7_mips", "layers"
  ferry::ImageDesc desc{};
  std::vector<ferry::ImageRegion> regions;  ///< whole levels, tight, 16-byte aligned
  std::uint64_t bytes = 0;         ///< the regions' bytes: the buffer copy's size
  std::string skipped;             ///< why the case was not measured (empty when it was)
  std::string image_what;          ///< the engine's image (VendorImage::what)
  double upload_gbps = 0;          ///< Transfer::upload_image(HostBuffer, ...)
  double download_gbps = 0;        ///< Transfer::download_image(..., HostBuffer, ...)
  double buffer_upload_gbps = 0;   ///< Transfer::upload_into(HostBuffer, DeviceBuffer)
  double buffer_download_gbps = 0; ///< Transfer::download(DeviceBuffer, HostBuffer)
  double upload_call_us = 0;       ///< host time of one upload_image call
  double download_call_us = 0;     ///< host time of one download_image call
  double buffer_upload_call_us = 0;    ///< host time of one upload_into call
  double buffer_download_call_us = 0;  ///< host time of one buffer download call
  VendorImageCopy raw;             ///< the vendor's image copy of the same regions
  [[nodiscard]] bool ran() const { return skipped.empty(); }
  /// "3840x2160 rgba8_unorm, 1 level, 1 layer"
  [[nodiscard]] std::string shape() const;
};

struct ImageStudy {
  bool ran = false;
  int reps = 0;
  double scale = 1;  ///< the layered case's fraction of 2048 layers
  std::vector<ImageCase> cases;
};
ImageStudy run_image_study(const DeviceFactory& factory, int reps, double scale, const Progress& progress);

/// Host cost of one upload call: `calls` uploads of one `bytes` pinned range to the
/// owner queue (owner_owned, the defaults), each released right after, each call host-timed.
/// Microseconds.
struct HostCost {
  bool ran = false;
  std::uint64_t bytes = 0;
  int calls = 0;
  Percentiles upload;   ///< Transfer::upload(HostBuffer, owner): allocation + copy + ordering
  Percentiles release;  ///< DeviceBuffer::release() right after
  Percentiles pair;     ///< both
  /// The same loop with one part of the work left out, to attribute the cost.
  struct Variant {
    std::string what;
    Percentiles upload, pair;
  };
  std::vector<Variant> variants;
  /// Uploads per frame of the engine's path, and its submit_batch.
  static constexpr int kFrame = 16;
  /// The variant of the engine's path on Vulkan (owner_waits = false, calls batched, the
  /// frame's buffers released after the frame), which the report judges against its own bar.
  static constexpr const char* kBatchedVariant = "owner_waits = false, submit_batch = 16, frames of 16";
  /// The same with each buffer released right after its upload (reported, not judged).
  static constexpr const char* kBatchedAtOnceVariant = "owner_waits = false, submit_batch = 16";
  VendorCallCost vendor;  ///< the vendor's bare async copy of the same size (CUDA builds)
  VulkanCallCost vulkan;  ///< one raw vkQueueSubmit per copy of the same size (Vulkan backend)
};
HostCost run_host_cost(const DeviceFactory& factory, std::uint64_t bytes, int calls, const Progress& progress);

/// The contention section (docs/benchmarks.md, "Contention"): ferry's rows (path "ferry"),
/// then the vendor references measured in the same run (paths "cuda", "vulkan").
struct ContentionStudy {
  bool ran = false;
  ContentionConfig config;
  bool copy_priorities = false;        ///< Capabilities::copy_priorities of the ferry device
  std::uint64_t bulk_piece_bytes = 0;  ///< Transfer::bulk_piece_bytes() (0: nothing is cut)
  std::vector<ContentionRow> rows;
  std::string cuda_skipped;    ///< why the CUDA references were not measured (empty when they were)
  std::string vulkan_skipped;  ///< why the Vulkan references were not measured (empty when they were)
  /// The row of `path` named `name`, or null.
  [[nodiscard]] const ContentionRow* find(const std::string& path, const std::string& name) const;
};
/// ferry's rows on a device of `factory`: urgent uploads alone; a bulk upload and a bulk
/// download each alone and beside the urgent uploads. Then, on a GPU, the raw CUDA references
/// (where the module loads and a CUDA device matches) and, where Vulkan executes the copies,
/// the raw Vulkan ones.
ContentionStudy run_contention(const DeviceFactory& factory, const ContentionConfig& config, const Progress& progress);

/// Everything the report needs.
struct Run {
  Options options;
  std::string backend;
  std::string device_name;
  bool is_gpu = false;  ///< GPU bars apply (a CPU Vulkan driver such as lavapipe is not a GPU)
  std::vector<std::uint64_t> sizes;
  std::vector<Result> results;
  std::vector<RawCopy> raw;
  BatchStudy batch;
  HostCost host_cost;
  ImageStudy images;
  ContentionStudy contention;
};

void print_header(const Run& run);
void print_table(const Run& run);
/// Verdict lines; returns false when a bar was checked and missed.
bool print_verdicts(const Run& run);
/// The traced step timelines (--trace-steps): one line per footprint run and raw loop.
void print_step_times(const Run& run);
void write_results_json(const Run& run, const std::filesystem::path& file);
void write_snapshots(const Run& run, const std::filesystem::path& dir);

}  // namespace ferry_bench
