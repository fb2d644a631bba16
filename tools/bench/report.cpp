// SPDX-License-Identifier: MIT
// ferry-bench output: header, table, verdicts, results.json and snapshot exports.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "bench.hpp"
#include "ferry/export.hpp"
#include "json.hpp"
#include "write_file.hpp"

namespace ferry_bench {
namespace {

constexpr double gib = 1024.0 * 1024.0 * 1024.0;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

const Result* find(const Run& run, Workload workload, Strategy mode, std::uint64_t bytes,
                   bool overlap = false, Order order = Order::seed) {
  for (const auto& r : run.results) {
    if (r.scenario.workload == workload && r.scenario.mode == mode && r.scenario.bytes == bytes &&
        r.scenario.overlap == overlap && r.scenario.order == order) {
      return &r;
    }
  }
  return nullptr;
}

const RawCopy* find_raw(const Run& run, std::uint64_t bytes) {
  for (const auto& r : run.raw) {
    if (r.bytes == bytes) return &r;
  }
  return nullptr;
}

bool has_workload(const Run& run, Workload w) {
  for (auto x : run.options.workloads) {
    if (x == w) return true;
  }
  return false;
}

// The bars (docs/benchmarks.md, "Bars"). Bandwidth and overlap bars are GPU bars; elsewhere
// (the host backend, a CPU Vulkan driver) informational. Interop pairs are judged by their
// executing API's bar (Vulkan copies: 95%, CUDA: 98%).
double bandwidth_bar(const Run& run) {
  if (!run.is_gpu) return 0;
  const std::string& backend = run.backend;
  if (backend == "cuda" || backend == "hip" || backend == "cuda_vulkan") return 0.98;
  if (backend == "vulkan" || backend == "vulkan_cuda") return 0.95;
  return 0;
}
constexpr double reserved_bar = 1.02;
/// Host time of one upload call (median), CUDA backend on the H200.
constexpr double upload_host_us_bar = 5.0;
/// Vulkan upload call on the engine's path (owner_waits = false, deferred submission), in us.
constexpr double vulkan_deferred_host_us_bar = 3.0;
constexpr double overlap_bar = 1.05;
/// Against the hand-written raw Vulkan loop of the same run.
constexpr double vulkan_anchor_bandwidth_bar = 0.98;
constexpr double vulkan_anchor_overlap_slack = 0.03;
/// Image copies against the vendor's own image copy of the same regions, same run.
constexpr double image_vs_raw_bar = 0.95;
/// The uncompressed 2D frame against one buffer copy of the same bytes, same run: an image's
/// copy moves the bytes of a buffer's, and may cost only its tiling.
constexpr double image_vs_buffer_bar = 0.90;
/// Contention: an urgent copy's p99 beside a bulk copy, at most this many times its p99 alone,
/// and never judged below the floor (a copy engine's own queueing costs some tens of us).
constexpr double contention_p99_factor = 2.0;
constexpr double contention_p99_floor_us = 250.0;
/// Contention: ferry's bulk beside the urgent copies against the vendor's one-piece bulk alone.
constexpr double contention_bandwidth_bar = 0.98;
/// The image case whose copies are judged against a buffer copy (uncompressed, 2D, 1 level).
constexpr const char* image_vs_buffer_case = "frame";

struct Verdict {
  std::uint64_t bytes = 0;
  std::string workload;  // "seed", "pipeline"; empty for a bar of the copy path alone
  std::string name;
  double value = 0;
  double bar = 0;        // 0 = informational
  bool less_is_better = true;
  std::string text;
  [[nodiscard]] bool checked() const { return bar > 0; }
  [[nodiscard]] bool pass() const { return !checked() || (less_is_better ? value <= bar : value >= bar); }
};

double ratio(std::uint64_t a, std::uint64_t b) { return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0; }

std::string bar_note(bool applies, const std::string& bar) {
  return applies ? " (bar " + bar + ")" : " (bar " + bar + " applies to GPU backends)";
}

// The seed's bars, in each order measured: a bar met in one order only is not met, so every
// order is judged by the same bars, against blocking in the same order. The seed's own order
// keeps the plain verdict names; another order's names end in "_" + its name.
void seed_verdicts(const Run& run, std::uint64_t bytes, std::vector<Verdict>& out) {
  const bool gpu_bars = bandwidth_bar(run) > 0;
  for (const Order order : run.options.orders) {
    const Result* blocking = find(run, Workload::seed, Strategy::blocking, bytes, false, order);
    const Result* owner = find(run, Workload::seed, Strategy::owner_owned, bytes, false, order);
    const Result* executor = find(run, Workload::seed, Strategy::executor_owned, bytes, false, order);
    const std::string where = size_label(bytes) + ", " + order_name(order) + (order == Order::seed ? " order" : "");
    const std::string suffix = order == Order::seed ? "" : std::string("_") + order_name(order);
    if (blocking && owner && blocking->peak_reserved > 0) {
      const double v = ratio(owner->peak_reserved, blocking->peak_reserved);
      out.push_back({bytes, "seed", "owner_owned_reserved_vs_blocking" + suffix, v, reserved_bar, true,
                     where + ": owner_owned peak reserved / blocking = " + fmt("%.3f", v) + " (bar <= 1.02)"});
    }
    if (owner && owner->overlap > 0) {
      out.push_back({bytes, "seed", "owner_owned_step_vs_bound" + suffix, owner->overlap, gpu_bars ? overlap_bar : 0,
                     true,
                     where + ": owner_owned step time = " + fmt("%.3f", owner->overlap) +
                         " x max(compute-only step, copy)" + bar_note(gpu_bars, "<= 1.05") +
                         "; in the same run as the footprint bar above"});
    }
    if (blocking && executor && blocking->peak_reserved > 0) {
      const double v = ratio(executor->peak_reserved, blocking->peak_reserved);
      out.push_back({bytes, "seed", "executor_owned_reserved_vs_blocking" + suffix, v, 0, true,
                     where + ": executor_owned peak reserved / blocking = " + fmt("%.3f", v) +
                         " (the side-queue stranding; PyTorch measured 3.16 at 64 MB on the H200)"});
    }
  }
}

void pipeline_verdicts(const Run& run, std::uint64_t bytes, std::vector<Verdict>& out) {
  const bool gpu_bars = bandwidth_bar(run) > 0;
  const Result* blocking = find(run, Workload::pipeline, Strategy::blocking, bytes);
  const Result* owner = find(run, Workload::pipeline, Strategy::owner_owned, bytes);
  const Result* overlap = find(run, Workload::pipeline, Strategy::owner_owned, bytes, true);
  const Result* executor = find(run, Workload::pipeline, Strategy::executor_owned, bytes);
  const std::string size = size_label(bytes);
  // Every overlapping schedule holds one batch more than a blocking copy: that is the minimum.
  const std::uint64_t minimum = blocking ? blocking->peak_reserved + bytes : 0;
  if (overlap && minimum > 0) {
    const double v = ratio(overlap->peak_reserved, minimum);
    out.push_back({bytes, "pipeline", "overlap_reserved_vs_blocking_plus_batch", v, reserved_bar, true,
                   size + ": owner_owned+overlap peak reserved / (blocking + one batch) = " + fmt("%.3f", v) +
                       " (bar <= 1.02)"});
  }
  if (overlap && overlap->overlap > 0) {
    out.push_back({bytes, "pipeline", "overlap_step_vs_bound", overlap->overlap, gpu_bars ? overlap_bar : 0, true,
                   size + ": owner_owned+overlap step time = " + fmt("%.3f", overlap->overlap) +
                       " x max(compute-only step, copy)" + bar_note(gpu_bars, "<= 1.05")});
  }
  if (executor && minimum > 0) {
    const double v = ratio(executor->peak_reserved, minimum);
    const double beyond = (static_cast<double>(executor->peak_reserved) - static_cast<double>(minimum)) / gib;
    out.push_back({bytes, "pipeline", "executor_owned_reserved_vs_blocking_plus_batch", v, 0, true,
                   size + ": executor_owned peak reserved / (blocking + one batch) = " + fmt("%.3f", v) + " (" +
                       fmt("%+.3f", beyond) + " GiB stranded beyond the schedule's minimum)"});
  }
  if (blocking && owner && blocking->peak_reserved > 0) {
    const double v = ratio(owner->peak_reserved, blocking->peak_reserved);
    out.push_back({bytes, "pipeline", "owner_owned_reserved_vs_blocking", v, reserved_bar, true,
                   size + ": owner_owned (footprint first) peak reserved / blocking = " + fmt("%.3f", v) +
                       " (bar <= 1.02)"});
  }
  if (owner && owner->overlap > 0) {
    out.push_back({bytes, "pipeline", "owner_owned_step_vs_bound", owner->overlap, 0, true,
                   size + ": owner_owned (footprint first) step time = " + fmt("%.3f", owner->overlap) +
                       " x max(compute-only step, copy): the copy of batch i+1 reuses, so waits for, the block "
                       "compute i reads"});
  }
}

// The copy path alone: one workload's copy-only passes (the pipeline's where it ran).
void copy_verdicts(const Run& run, std::uint64_t bytes, std::vector<Verdict>& out) {
  const bool gpu_bars = bandwidth_bar(run) > 0;
  const Workload w = has_workload(run, Workload::pipeline) ? Workload::pipeline : Workload::seed;
  const Order first = w == Workload::seed ? run.options.orders.front() : Order::seed;
  const Result* owner = find(run, w, Strategy::owner_owned, bytes, false, first);
  const RawCopy* raw = find_raw(run, bytes);
  // Against the vendor's own copy: the backend's bar, CUDA's where the backend has none.
  // Copies that Vulkan executes are judged against the raw Vulkan loop where it was measured
  // (same API, same driver path); cudaMemcpyAsync is then a reference, not a bar.
  const bool vulkan_copies = run.backend == "vulkan" || run.backend == "vulkan_cuda";
  const bool vendor_judges = !(vulkan_copies && raw && raw->vulkan.measured);
  const double vendor_bar = !vendor_judges ? 0 : bytes < (16u << 20) ? 0 : gpu_bars ? bandwidth_bar(run) : 0.98;
  const std::string vendor_suffix = vendor_bar > 0 ? " (bar >= " + fmt("%.0f", vendor_bar * 100) + "%)"
                                  : vendor_judges ? ""
                                                  : " (reported; Vulkan copies are judged against the raw Vulkan loop)";
  const std::string size = size_label(bytes);
  if (owner && raw && raw->gbps > 0) {
    const double v = owner->copy_gbps / raw->gbps;
    const double bar = bandwidth_bar(run);
    out.push_back({bytes, "", "owner_owned_bandwidth_vs_raw", v, bar, false,
                   size + ": owner_owned copy bandwidth = " + fmt("%.1f", v * 100) + "% of the raw copy (" +
                       fmt("%.2f", raw->gbps) + " GB/s)" +
                       (bar > 0 ? " (bar >= " + fmt("%.0f", bar * 100) + "%)" : " (bar applies to GPU backends)")});
  }
  if (owner && raw && raw->vendor.measured && raw->vendor.h2d_gbps > 0) {
    const double v = owner->copy_gbps / raw->vendor.h2d_gbps;
    out.push_back({bytes, "", "owner_owned_h2d_vs_vendor", v, vendor_bar, false,
                   size + ": owner_owned upload = " + fmt("%.1f", v * 100) + "% of " + raw->vendor.what + " (" +
                       fmt("%.2f", raw->vendor.h2d_gbps) + " GB/s)" + vendor_suffix});
  }
  if (raw && raw->vendor.measured && raw->vendor.d2h_gbps > 0) {
    const double v = raw->d2h_gbps / raw->vendor.d2h_gbps;
    out.push_back({bytes, "", "download_d2h_vs_vendor", v, vendor_bar, false,
                   size + ": download = " + fmt("%.1f", v * 100) + "% of " + raw->vendor.what + " d2h (" +
                       fmt("%.2f", raw->vendor.d2h_gbps) + " GB/s)" + vendor_suffix});
  }
  if (raw && raw->vulkan.measured) {
    const VulkanAnchor& a = raw->vulkan;
    if (owner && a.h2d_gbps > 0) {
      const double v = owner->copy_gbps / a.h2d_gbps;
      out.push_back({bytes, "", "owner_owned_h2d_vs_raw_vulkan", v, gpu_bars ? vulkan_anchor_bandwidth_bar : 0, false,
                     size + ": owner_owned upload = " + fmt("%.1f", v * 100) + "% of the raw Vulkan loop (" +
                         fmt("%.2f", a.h2d_gbps) + " GB/s)" + bar_note(gpu_bars, ">= 98%")});
    }
    if (a.d2h_gbps > 0) {
      const double v = raw->d2h_gbps / a.d2h_gbps;
      out.push_back({bytes, "", "download_vs_raw_vulkan", v, gpu_bars ? vulkan_anchor_bandwidth_bar : 0, false,
                     size + ": download = " + fmt("%.1f", v * 100) + "% of the raw Vulkan loop (" +
                         fmt("%.2f", a.d2h_gbps) + " GB/s)" + bar_note(gpu_bars, ">= 98%")});
    }
    // The raw loop submits each step's copy before its compute: the seed's order.
    const Result* seed_owner = find(run, Workload::seed, Strategy::owner_owned, bytes);
    if (seed_owner && seed_owner->overlap > 0 && a.seed.overlap > 0) {
      const double bar = a.seed.overlap + vulkan_anchor_overlap_slack;
      out.push_back({bytes, "seed", "owner_owned_step_vs_raw_vulkan", seed_owner->overlap, gpu_bars ? bar : 0, true,
                     size + ", seed order: owner_owned step/bound " + fmt("%.3f", seed_owner->overlap) +
                         " vs the raw Vulkan loop's " +
                         fmt("%.3f", a.seed.overlap) + bar_note(gpu_bars, "<= raw + 0.03")});
    }
    const Result* pipe_overlap = find(run, Workload::pipeline, Strategy::owner_owned, bytes, true);
    if (pipe_overlap && pipe_overlap->overlap > 0 && a.pipeline.overlap > 0) {
      const double bar = a.pipeline.overlap + vulkan_anchor_overlap_slack;
      out.push_back({bytes, "pipeline", "overlap_step_vs_raw_vulkan", pipe_overlap->overlap, gpu_bars ? bar : 0, true,
                     size + ": owner_owned+overlap step/bound " + fmt("%.3f", pipe_overlap->overlap) +
                         " vs the raw Vulkan loop's " + fmt("%.3f", a.pipeline.overlap) + bar_note(gpu_bars, "<= raw + 0.03")});
    }
  }
}

// The image study's bars: GPU bars (`Capabilities::is_gpu`), informational elsewhere.
void image_verdicts(const Run& run, std::vector<Verdict>& out) {
  const bool gpu = run.is_gpu;
  const std::string raw_note = gpu ? " (bar >= 95%)" : " (bar applies to GPUs)";
  const std::string buffer_note = gpu ? " (bar >= 90%)" : " (bar applies to GPUs)";
  for (const ImageCase& c : run.images.cases) {
    if (!c.ran()) continue;
    const std::string what = c.name + " (" + c.shape() + ")";
    const std::string prefix = "image_" + c.name + "_";
    if (c.raw.measured) {
      for (const bool up : {true, false}) {
        const double ferry = up ? c.upload_gbps : c.download_gbps;
        const double raw = up ? c.raw.upload_gbps : c.raw.download_gbps;
        if (raw <= 0) continue;
        const double v = ferry / raw;
        out.push_back({c.bytes, "image", prefix + (up ? "upload_vs_raw" : "download_vs_raw"), v,
                       gpu ? image_vs_raw_bar : 0, false,
                       what + ": " + (up ? "upload_image" : "download_image") + " = " + fmt("%.1f", v * 100) +
                           "% of the raw image copy (" + fmt("%.2f", raw) + " GB/s)" + raw_note});
      }
    }
    if (c.name == image_vs_buffer_case) {
      for (const bool up : {true, false}) {
        const double image = up ? c.upload_gbps : c.download_gbps;
        const double buffer = up ? c.buffer_upload_gbps : c.buffer_download_gbps;
        if (buffer <= 0) continue;
        const double v = image / buffer;
        out.push_back({c.bytes, "image", prefix + (up ? "upload_vs_buffer" : "download_vs_buffer"), v,
                       gpu ? image_vs_buffer_bar : 0, false,
                       what + ": " + (up ? "upload_image" : "download_image") + " = " + fmt("%.1f", v * 100) +
                           "% of one buffer copy of the same bytes (" + fmt("%.2f", buffer) + " GB/s)" +
                           buffer_note});
      }
    }
    out.push_back({c.bytes, "image", prefix + "upload_call_us", c.upload_call_us, 0, true,
                   what + ": upload_image call: median " + fmt("%.2f", c.upload_call_us) +
                       " us of host time; a buffer upload_into call: " + fmt("%.2f", c.buffer_upload_call_us) +
                       " us (informational)"});
  }
}

// The contention section's bars, GPU backends only (a CPU backend's copy engine is a model):
// an urgent upload's p99 beside each bulk, against its own p99 alone; ferry's bulk GB/s beside
// the urgent copies against the vendor's one-piece bulk alone (the raw Vulkan copy where
// Vulkan executes the copies and it was measured, else cudaMemcpyAsync).
void contention_verdicts(const Run& run, std::vector<Verdict>& out) {
  const ContentionStudy& c = run.contention;
  if (!run.is_gpu) return;
  const ContentionRow* alone = c.find("ferry", "urgent alone");
  const bool vulkan_copies = run.backend == "vulkan" || run.backend == "vulkan_cuda";
  const std::string bulk = size_label(c.config.bulk_bytes);
  const std::string urgent = size_label(c.config.urgent_bytes);
  for (const std::string dir : {"h2d", "d2h"}) {
    const ContentionRow* ferry = c.find("ferry", dir + " bulk + urgent");
    if (ferry == nullptr) continue;
    const std::string what = bulk + " " + dir + " bulk";
    if (alone != nullptr && alone->samples > 0 && ferry->samples > 0) {
      const double bar = std::max(contention_p99_floor_us, contention_p99_factor * alone->p99_us);
      std::string text = what + ": urgent " + urgent + " upload p99 = " + fmt("%.1f", ferry->p99_us) +
                         " us beside ferry's bulk (max " + fmt("%.1f", ferry->max_us) + " us; alone: p99 " +
                         fmt("%.1f", alone->p99_us) + " us";
      if (const ContentionRow* raw = c.find("cuda", dir + " bulk + urgent")) {
        text += "; raw CUDA one copy: " + fmt("%.1f", raw->p99_us) + " us";
      }
      if (const ContentionRow* chunked = c.find("cuda", dir + " chunked bulk + urgent")) {
        text += "; TorchRec chunks: " + fmt("%.1f", chunked->p99_us) + " us";
      }
      if (const ContentionRow* vk = c.find("vulkan", dir + " bulk + urgent")) {
        text += "; raw Vulkan one copy: " + fmt("%.1f", vk->p99_us) + " us";
      }
      text += ") (bar <= max(" + fmt("%.0f", contention_p99_floor_us) + " us, " +
              fmt("%.0f", contention_p99_factor) + " x alone p99) = " + fmt("%.1f", bar) + " us)";
      out.push_back({c.config.bulk_bytes, "contention", "contention_" + dir + "_urgent_p99_us", ferry->p99_us, bar, true,
                     text});
    }
    const ContentionRow* ref = vulkan_copies ? c.find("vulkan", dir + " bulk alone") : nullptr;
    std::string ref_what = "the raw Vulkan copy alone";
    if (ref == nullptr) {
      ref = c.find("cuda", dir + " bulk alone");
      ref_what = "one cudaMemcpyAsync alone";
    }
    if (ref != nullptr && ref->bulk_gbps > 0 && ferry->bulk_gbps > 0) {
      const double v = ferry->bulk_gbps / ref->bulk_gbps;
      out.push_back({c.config.bulk_bytes, "contention", "contention_" + dir + "_bulk_vs_raw", v,
                     contention_bandwidth_bar, false,
                     what + ": ferry's bulk beside the urgent copies = " + fmt("%.1f", v * 100) + "% of " + ref_what +
                         " (" + fmt("%.2f", ferry->bulk_gbps) + " vs " + fmt("%.2f", ref->bulk_gbps) +
                         " GB/s) (bar >= " + fmt("%.0f", contention_bandwidth_bar * 100) + "%)"});
    }
  }
}

std::vector<Verdict> verdicts(const Run& run) {
  std::vector<Verdict> out;
  const bool gpu_bars = bandwidth_bar(run) > 0;
  for (auto bytes : run.sizes) {
    if (has_workload(run, Workload::seed)) seed_verdicts(run, bytes, out);
    if (has_workload(run, Workload::pipeline)) pipeline_verdicts(run, bytes, out);
    copy_verdicts(run, bytes, out);
  }
  if (run.host_cost.ran) {
    const HostCost& h = run.host_cost;
    const double bar = run.backend == "cuda" && run.is_gpu ? upload_host_us_bar : 0;
    std::string text = size_label(h.bytes) + " upload call: median " + fmt("%.2f", h.upload.median) +
                       " us of host time (p90 " + fmt("%.2f", h.upload.p90) + ")";
    if (h.vendor.measured) {
      text += "; " + h.vendor.what + ": median " + fmt("%.2f", h.vendor.median_us) + " us; " + h.vendor.ordered_what +
              ": median " + fmt("%.2f", h.vendor.ordered_upload_median_us) + " us";
    }
    if (h.vulkan.measured) {
      text += "; " + h.vulkan.what + ": median " + fmt("%.2f", h.vulkan.median_us) + " us";
    }
    text += bar > 0 ? " (bar <= " + fmt("%.0f", bar) + " us)" : " (bar applies to the CUDA backend)";
    out.push_back({h.bytes, "", "upload_host_us", h.upload.median, bar, true, text});
    // Vulkan, the engine's path: owner_waits = false, so calls share submissions (deferred
    // submission), judged against one raw vkQueueSubmit per copy measured in the same run.
    if (run.backend == "vulkan") {
      for (const HostCost::Variant& v : h.variants) {
        if (v.what != HostCost::kBatchedVariant) continue;
        const double deferred_bar = run.is_gpu ? vulkan_deferred_host_us_bar : 0;
        std::string t = size_label(h.bytes) + " upload call, " + v.what + ": median " +
                        fmt("%.2f", v.upload.median) + " us (p90 " + fmt("%.2f", v.upload.p90) + ")";
        if (h.vulkan.measured) t += "; " + h.vulkan.what + ": median " + fmt("%.2f", h.vulkan.median_us) + " us";
        t += deferred_bar > 0 ? " (bar <= " + fmt("%.0f", deferred_bar) + " us)" : " (bar applies to a Vulkan GPU)";
        out.push_back({h.bytes, "", "upload_host_us_deferred", v.upload.median, deferred_bar, true, t});
      }
    }
  }
  if (run.batch.ran && run.batch.ceiling_scattered_gbps.median > 0) {
    const BatchStudy& b = run.batch;
    const double bar = gpu_bars ? 0.80 : 0;
    const std::string bar_text = gpu_bars ? " (bar >= 80%)" : " (bar applies to GPU backends)";
    // A per-round ratio against `of`: its median and spread over the rounds.
    auto spread_text = [&](const Spread& r, const std::string& of = "the host-staging ceiling") {
      return fmt("%.1f", 100 * r.median) + "% of " + of + " (median of " + std::to_string(b.rounds) +
             " alternating rounds, " + fmt("%.1f", 100 * r.min) + "-" + fmt("%.1f", 100 * r.max) + "%)";
    };
    out.push_back({0, "", "scattered_vs_ceiling", b.scattered_ratio.median, bar, false,
                   "4096 x 16K scattered pageable upload = " + spread_text(b.scattered_ratio) + bar_text});
    if (b.hand_staged_gbps.median > 0) {
      // The hand-staged anchor runs on the same host and link as ferry's call: it says what
      // staging without ferry gets, where the ceiling only bounds it.
      const double hand_bar = gpu_bars ? 0.95 : 0;
      out.push_back({0, "", "scattered_vs_hand_staged", b.scattered_vs_hand.median, hand_bar, false,
                     "4096 x 16K scattered pageable upload = " +
                         spread_text(b.scattered_vs_hand, "the same buffers staged by hand") +
                         ", which reach " + fmt("%.1f", 100 * b.hand_staged_ratio.median) +
                         "% of the host-staging ceiling" +
                         (gpu_bars ? " (bar >= 95%)" : " (bar applies to GPU backends)")});
    }
    out.push_back({0, "", "contiguous_twin_vs_ceiling", b.contiguous_ratio.median, 0, false,
                   size_label(b.scattered_count * b.scattered_each) +
                       " pageable upload (one buffer of the scattered call's size) = " +
                       spread_text(b.contiguous_ratio) + " (informational)"});
    out.push_back({b.pageable_bytes, "", "pageable_vs_ceiling", b.pageable_ratio.median, bar, false,
                   size_label(b.pageable_bytes) + " pageable upload = " + spread_text(b.pageable_ratio) + bar_text});
    if (b.ceiling_down_gbps.median > 0) {
      out.push_back({0, "", "scattered_download_vs_ceiling", b.scattered_down_ratio.median, bar, false,
                     "4096 x 16K scattered pageable download = " + spread_text(b.scattered_down_ratio) + bar_text});
    }
  }
  if (run.images.ran) image_verdicts(run, out);
  if (run.contention.ran) contention_verdicts(run, out);
  return out;
}

std::string num(double v) {
  if (!(v == v) || v > 1e300 || v < -1e300) return "null";
  return fmt("%.6g", v);
}

}  // namespace

void print_header(const Run& run) {
  const auto& o = run.options;
  std::cout << "ferry-bench " << FERRY_VERSION << ": " << run.backend << " backend, " << run.device_name << "\n";
  if (o.images_only) {
    std::cout << "image study only\n";
    return;
  }
  if (o.contention_only) {
    std::cout << "contention section only\n";
    return;
  }
  if (run.sizes.empty()) {  // --host-cost-only
    std::cout << "host cost only: " << o.host_cost_calls << " uploads of " << size_label(o.host_cost_bytes) << "\n";
    return;
  }
  std::cout << "sizes";
  for (std::size_t i = 0; i < run.sizes.size(); ++i) std::cout << (i ? "," : " ") << size_label(run.sizes[i]);
  std::cout << ", " << o.steps << " steps, " << o.compute_units << " compute units/step, " << o.inflight
            << " steps in flight\n";
  std::cout << "GiB = 2^30 bytes; GB/s = 1e9 bytes/s, host-timed (N uploads, at most `inflight` ahead)\n"
               "step ms = steady state: from the completion of step 3 to the last step's (the first steps'\n"
               "one-time costs, such as the pool's growth, are in the JSON's step_ms_with_warmup)\n"
               "overlap = step ms / max(compute-only step ms, raw copy time of one batch)\n\n";
}

namespace {

const char* workload_text(Workload w) {
  return w == Workload::seed
             ? "workload seed: compute on an unrelated buffer while the batch is copied, then a short pass "
               "reading the batch (the seed's matmuls, then d.sum())"
             : "workload pipeline: compute reads the whole batch while the next batch is copied (TorchRec "
               "TrainPipelineSparseDist)";
}

const char* order_text(Order order) {
  return order == Order::seed
             ? "order seed (the seed's, as an engine writes it): the upload call with owner_waits = false, the "
               "unrelated compute, owner.wait(ready), the short pass"
             : "order compute_first: the unrelated compute, then the upload call (the owner waits at the call), "
               "the short pass";
}

void print_row_header() {
  std::printf("%-28s %6s %10s %10s %10s %8s %8s %10s %9s %9s %9s %8s\n", "strategy", "size", "alloc GiB",
              "resv GiB", "strand GiB", "RSS GiB", "copy GB/s", "host us", "step ms", "comp ms", "copy ms", "overlap");
}

void print_strategy_table(const Run& run) {
  for (auto w : run.results.empty() ? std::vector<Workload>{} : run.options.workloads) {  // none: batch study only
    std::printf("%s\n", workload_text(w));
    // The seed in each order measured, one block each; the pipeline in its one schedule.
    const bool seed = w == Workload::seed;
    for (auto order : seed ? run.options.orders : std::vector<Order>{Order::seed}) {
      if (seed) std::printf("%s\n", order_text(order));
      print_row_header();
      for (auto bytes : run.sizes) {
        for (const auto& r : run.results) {
          if (r.scenario.bytes != bytes || r.scenario.workload != w || r.scenario.order != order) continue;
          std::printf("%-28s %6s %10.3f %10.3f %10.3f %8.3f %8.2f %10.1f %9.3f %9.3f %9.3f %8.3f\n",
                      strategy_name(r.scenario).c_str(), size_label(bytes).c_str(),
                      static_cast<double>(r.peak_allocated) / gib, static_cast<double>(r.peak_reserved) / gib,
                      static_cast<double>(r.peak_stranded) / gib, static_cast<double>(r.rss_peak) / gib, r.copy_gbps,
                      r.host_us_per_call, r.step_ms, r.compute_ms, r.copy_ms, r.overlap);
        }
        // The raw loop submits each step's copy before its compute: the seed's order.
        for (const auto& raw : run.raw) {
          if (raw.bytes != bytes || !raw.vulkan.measured || order != Order::seed) continue;
          const VulkanAnchor::Loop& l = seed ? raw.vulkan.seed : raw.vulkan.pipeline;
          std::printf("%-28s %6s %10s %10s %10s %8s %8.2f %10.1f %9.3f %9.3f %9.3f %8.3f\n", "raw Vulkan loop",
                      size_label(bytes).c_str(), "-", "-", "-", "-", raw.vulkan.h2d_gbps, raw.vulkan.copy_us, l.step_ms,
                      l.compute_ms,
                      raw.vulkan.h2d_gbps > 0 ? static_cast<double>(bytes) / (raw.vulkan.h2d_gbps * 1e6) : 0,
                      l.overlap);
        }
      }
      std::printf("\n");
    }
  }
  std::printf("copy references (no compute)\n");
  print_row_header();
  for (auto bytes : run.sizes) {
    if (const RawCopy* raw = find_raw(run, bytes)) {
      std::printf("%-28s %6s %10s %10s %10s %8s %8.2f %10s %9s %9s %9s %8s\n", "raw copy (upload_into loop)",
                  size_label(bytes).c_str(), "-", "-", "-", "-", raw->gbps, "-", "-", "-", "-", "-");
      std::printf("%-28s %6s %10s %10s %10s %8s %8.2f %10s %9s %9s %9s %8s\n", "download (pinned)",
                  size_label(bytes).c_str(), "-", "-", "-", "-", raw->d2h_gbps, "-", "-", "-", "-", "-");
      if (raw->vendor.measured) {
        std::printf("%-28s %6s %10s %10s %10s %8s %8.2f %10s %9s %9s %9s %8s\n", "cudaMemcpyAsync h2d",
                    size_label(bytes).c_str(), "-", "-", "-", "-", raw->vendor.h2d_gbps, "-", "-", "-", "-", "-");
        std::printf("%-28s %6s %10s %10s %10s %8s %8.2f %10s %9s %9s %9s %8s\n", "cudaMemcpyAsync d2h",
                    size_label(bytes).c_str(), "-", "-", "-", "-", raw->vendor.d2h_gbps, "-", "-", "-", "-", "-");
        std::printf("%-28s %6s (GPU-timed per copy: h2d %.2f GB/s, d2h %.2f GB/s)\n", "", size_label(bytes).c_str(),
                    raw->vendor.h2d_gpu_gbps, raw->vendor.d2h_gpu_gbps);
      }
      if (raw->vulkan.measured) {
        const VulkanAnchor& a = raw->vulkan;
        std::printf("%-28s %6s %10s %10s %10s %8s %8.2f %10.1f %9s %9s %9s %8s\n", "raw Vulkan vkCmdCopyBuffer h2d",
                    size_label(bytes).c_str(), "-", "-", "-", "-", a.h2d_gbps, a.copy_us, "-", "-", "-", "-");
        std::printf("%-28s %6s %10s %10s %10s %8s %8.2f %10s %9s %9s %9s %8s\n", "raw Vulkan vkCmdCopyBuffer d2h",
                    size_label(bytes).c_str(), "-", "-", "-", "-", a.d2h_gbps, "-", "-", "-", "-", "-");
        std::printf("%-28s %6s (%s; host us per vkQueueSubmit %.2f, per copy recorded + submitted %.2f)\n", "",
                    size_label(bytes).c_str(), a.what.c_str(), a.submit_us, a.copy_us);
      } else if (!raw->vulkan.skipped.empty() && run.backend == "vulkan") {
        std::printf("%-28s %6s raw Vulkan loop not measured: %s\n", "", size_label(bytes).c_str(),
                    raw->vulkan.skipped.c_str());
      }
      std::printf("%-28s %6s timeline signal+wait pair: %.3f us of host time\n", "", size_label(bytes).c_str(),
                  raw->timeline_pair_us);
    }
  }
}

std::string spread_gbps(const Spread& s) {
  return fmt("%.2f", s.median) + " GB/s [" + fmt("%.2f", s.min) + "-" + fmt("%.2f", s.max) + "]";
}

std::string spread_pct(const Spread& s) {
  return fmt("%.1f", 100 * s.median) + "% [" + fmt("%.1f", 100 * s.min) + "-" + fmt("%.1f", 100 * s.max) + "%]";
}

void print_batch_study(const BatchStudy& b) {
  std::printf("\nwhole batches (host-timed; median [min-max] of %d rounds, each ceiling measured on the bytes of "
              "the call it bounds, right before it; ratios within each round):\n",
              b.rounds);
  std::printf("  scattered ceiling: min(faster of host memcpy gather %s and contiguous %s, %u threads; pinned DMA "
              "%.2f GB/s) = %s\n",
              spread_gbps(b.memcpy_gather_gbps).c_str(), spread_gbps(b.memcpy_same_gbps).c_str(), b.memcpy_threads,
              b.dma_gbps, spread_gbps(b.ceiling_scattered_gbps).c_str());
  std::printf("  %llu x %s scattered pageable buffers, one call: %s, %s of the ceiling\n",
              static_cast<unsigned long long>(b.scattered_count), size_label(b.scattered_each).c_str(),
              spread_gbps(b.scattered_gbps).c_str(), spread_pct(b.scattered_ratio).c_str());
  std::printf("  the same buffers staged by hand (memcpy into pinned %s chunks, each uploaded once packed): %s, %s of "
              "the ceiling; ferry's call = %s of it\n",
              size_label(b.hand_chunk).c_str(), spread_gbps(b.hand_staged_gbps).c_str(),
              spread_pct(b.hand_staged_ratio).c_str(), spread_pct(b.scattered_vs_hand).c_str());
  std::printf("  one %s pageable buffer (the scattered call's size): %s, %s of the same ceiling\n",
              size_label(b.scattered_count * b.scattered_each).c_str(), spread_gbps(b.contiguous_gbps).c_str(),
              spread_pct(b.contiguous_ratio).c_str());
  std::printf("  ceiling: min(host memcpy %s with %u threads, pinned DMA %.2f GB/s) = %s\n",
              spread_gbps(b.memcpy_gbps).c_str(), b.memcpy_threads, b.dma_gbps, spread_gbps(b.ceiling_gbps).c_str());
  std::printf("  one %s pageable buffer: %s, %s of the ceiling\n", size_label(b.pageable_bytes).c_str(),
              spread_gbps(b.pageable_gbps).c_str(), spread_pct(b.pageable_ratio).c_str());
  std::printf("  download ceiling: min(host memcpy out %s with %u threads, pinned D2H DMA %.2f GB/s) = %s\n",
              spread_gbps(b.memcpy_out_gbps).c_str(), b.memcpy_threads, b.dma_d2h_gbps,
              spread_gbps(b.ceiling_down_gbps).c_str());
  std::printf("  %llu x %s scattered pageable buffers, one batch download: %s, %s of the ceiling\n",
              static_cast<unsigned long long>(b.scattered_count), size_label(b.scattered_each).c_str(),
              spread_gbps(b.scattered_down_gbps).c_str(), spread_pct(b.scattered_down_ratio).c_str());
}

void print_image_study(const ImageStudy& study) {
  std::printf("\nimage copies from and into pinned memory, whole levels (GB/s: median of %d copies, each "
              "host-timed with its wait; call us: median host time of the call alone):\n",
              study.reps);
  std::printf("  %-10s %-5s %8s %8s %8s %8s %9s %10s %10s\n", "case", "dir", "image", "buffer", "img/buf", "raw",
              "ferry/raw", "call us", "buf call");
  std::string raw_what;
  for (const ImageCase& c : study.cases) {
    std::printf("  %s: %s, %s MiB in %zu region%s\n", c.name.c_str(), c.shape().c_str(),
                fmt("%.1f", static_cast<double>(c.bytes) / (1 << 20)).c_str(),
                c.regions.size(), c.regions.size() == 1 ? "" : "s");
    if (!c.ran()) {
      std::printf("    skipped: %s\n", c.skipped.c_str());
      continue;
    }
    for (const bool up : {true, false}) {
      const double image = up ? c.upload_gbps : c.download_gbps;
      const double buffer = up ? c.buffer_upload_gbps : c.buffer_download_gbps;
      const double raw = c.raw.measured ? (up ? c.raw.upload_gbps : c.raw.download_gbps) : 0;
      const auto ratio_text = [](double a, double b) { return b > 0 ? fmt("%.3f", a / b) : std::string("-"); };
      std::printf("  %-10s %-5s %8.2f %8.2f %8s %8s %9s %10.2f %10.2f\n", "", up ? "up" : "down", image, buffer,
                  ratio_text(image, buffer).c_str(), raw > 0 ? fmt("%.2f", raw).c_str() : "-",
                  ratio_text(image, raw).c_str(), up ? c.upload_call_us : c.download_call_us,
                  up ? c.buffer_upload_call_us : c.buffer_download_call_us);
    }
    if (!c.raw.measured) std::printf("    raw image copy skipped: %s\n", c.raw.skipped.c_str());
    if (c.raw.measured && raw_what.empty()) raw_what = c.raw.what;
  }
  std::printf("  image: the engine's image, Transfer::upload_image / download_image; buffer: upload_into / "
              "download of a DeviceBuffer of the same bytes\n");
  if (!raw_what.empty()) std::printf("  raw: %s\n", raw_what.c_str());
}

void print_contention(const Run& run) {
  const ContentionStudy& c = run.contention;
  std::printf("\ncontention: a %s pinned bulk copy beside a %s pinned urgent upload every %d us (%d bulk copies "
              "per row, urgent samples pooled; ferry: bulk pieces of %s, copy_priorities %s):\n",
              size_label(c.config.bulk_bytes).c_str(), size_label(c.config.urgent_bytes).c_str(), c.config.period_us,
              c.config.reps, c.bulk_piece_bytes > 0 ? size_label(c.bulk_piece_bytes).c_str() : "none (not cut)",
              c.copy_priorities ? "yes" : "no");
  std::printf("  %-7s %-26s %7s %10s %10s %10s %10s\n", "path", "row", "urgent n", "p50 us", "p99 us", "max us",
              "bulk GB/s");
  for (const ContentionRow& r : c.rows) {
    const auto lat = [&](double v) { return r.urgent ? fmt("%.1f", v) : std::string("-"); };
    std::printf("  %-7s %-26s %7s %10s %10s %10s %10s\n", r.path.c_str(), r.name.c_str(),
                r.urgent ? std::to_string(r.samples).c_str() : "-", lat(r.p50_us).c_str(), lat(r.p99_us).c_str(),
                lat(r.max_us).c_str(), r.bulk == "none" ? "-" : fmt("%.2f", r.bulk_gbps).c_str());
  }
  // How each path issued its copies: its urgent copies as in its row without bulk, each bulk
  // once (the rows with and without urgent copies issue it alike).
  std::vector<std::string> seen;
  for (const ContentionRow& r : c.rows) {
    const std::string key = r.path + "\n" + r.how;
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
    seen.push_back(key);
    std::printf("  %s %s: %s\n", r.path.c_str(), r.bulk == "none" ? "urgent copies" : "bulk", r.how.c_str());
  }
  if (!c.cuda_skipped.empty()) std::printf("  raw CUDA references not measured: %s\n", c.cuda_skipped.c_str());
  if (!c.vulkan_skipped.empty()) std::printf("  raw Vulkan references not measured: %s\n", c.vulkan_skipped.c_str());
  std::printf("  latency: host clock just before the urgent call -> a dedicated thread polling the copy sees it "
              "complete (ferry: TimelinePoint::reached(); CUDA: cudaEventQuery; Vulkan: the timeline semaphore's "
              "value); bulk GB/s: bytes / host time from just before the bulk call to its completion, median\n");
  if (!run.is_gpu) {
    std::printf("  bars: judged on GPU backends only (urgent p99 <= max(%.0f us, %.0f x alone p99); bulk GB/s >= "
                "%.0f%% of the one-piece raw copy); not judged here\n",
                contention_p99_floor_us, contention_p99_factor, contention_bandwidth_bar * 100);
  }
}

}  // namespace

void print_table(const Run& run) {
  if (!run.sizes.empty()) print_strategy_table(run);
  if (run.host_cost.ran) {
    const HostCost& h = run.host_cost;
    std::printf("\nhost cost per call, %d calls of %s (us of host time: median / p90):\n", h.calls,
                size_label(h.bytes).c_str());
    std::printf("  %-44s %8.2f / %8.2f\n", "Transfer::upload(HostBuffer, owner)", h.upload.median, h.upload.p90);
    std::printf("  %-44s %8.2f / %8.2f\n", "DeviceBuffer::release() after it", h.release.median, h.release.p90);
    std::printf("  %-44s %8.2f / %8.2f\n", "upload + release", h.pair.median, h.pair.p90);
    for (const HostCost::Variant& v : h.variants) {
      std::printf("  %-44s %8.2f / %8.2f   (+ release %.2f / %.2f)\n", ("  upload, " + v.what).c_str(), v.upload.median,
                  v.upload.p90, v.pair.median, v.pair.p90);
    }
    if (h.vendor.measured) {
      std::printf("  %-44s %8.2f / %8.2f\n", h.vendor.what.c_str(), h.vendor.median_us, h.vendor.p90_us);
      std::printf("  %-44s %8.2f / %8.2f   (+ owner's record %.2f / %.2f)\n", h.vendor.ordered_what.c_str(),
                  h.vendor.ordered_upload_median_us, h.vendor.ordered_upload_p90_us, h.vendor.ordered_pair_median_us,
                  h.vendor.ordered_pair_p90_us);
    }
    if (h.vulkan.measured) {
      std::printf("  %-44s %8.2f / %8.2f\n", h.vulkan.what.c_str(), h.vulkan.median_us, h.vulkan.p90_us);
    }
  }
  if (run.batch.ran) print_batch_study(run.batch);
  if (run.images.ran) print_image_study(run.images);
  if (run.contention.ran) print_contention(run);
  std::printf("\n");
}

void print_step_times(const Run& run) {
  std::printf("\nstep timelines (medians over the steps after the third):\n");
  for (const auto& r : run.results) {
    std::printf("  %-8s %-35s %5s  %s\n", workload_name(r.scenario.workload), row_name(r.scenario).c_str(),
                size_label(r.scenario.bytes).c_str(), r.times.text().c_str());
  }
  for (const auto& raw : run.raw) {
    if (!raw.vulkan.measured) continue;
    std::printf("  %-8s %-35s %5s  %s\n", "seed", "raw Vulkan loop", size_label(raw.bytes).c_str(),
                raw.vulkan.seed.times.text().c_str());
    std::printf("  %-8s %-35s %5s  %s\n", "pipeline", "raw Vulkan loop", size_label(raw.bytes).c_str(),
                raw.vulkan.pipeline.times.text().c_str());
  }
}

bool print_verdicts(const Run& run) {
  bool ok = true;
  const auto all = verdicts(run);
  for (const char* group : {"seed", "pipeline", "", "image", "contention"}) {
    bool first = true;
    for (const auto& v : all) {
      if (v.workload != group) continue;
      if (first) {
        const std::string g = group;
        const std::string header = g.empty()           ? "bars of the copy path, host cost and whole batches:"
                                   : g == "image"      ? "bars of the image copies:"
                                   : g == "contention" ? "bars of the contention section:"
                                                       : "bars of workload " + g + ":";
        std::printf("%s\n", header.c_str());
        first = false;
      }
      const char* tag = !v.checked() ? "info" : (v.pass() ? "PASS" : "FAIL");
      std::printf("[%s] %s\n", tag, v.text.c_str());
      ok = ok && v.pass();
    }
  }
  return ok;
}

void write_results_json(const Run& run, const std::filesystem::path& file) {
  std::ostringstream o;
  const auto& opt = run.options;
  o << "{\n  \"tool\": \"ferry-bench\",\n  \"version\": \"" << FERRY_VERSION << "\"";
  // The tree that ran, as the environment names it (FERRY_COMMIT, as for the seed study: a
  // `git archive` copy has no git metadata of its own); null when unset.
  const char* commit = std::getenv("FERRY_COMMIT");
  const bool has_commit = commit != nullptr && *commit != '\0';
  o << ",\n  \"commit\": " << (has_commit ? ferry::detail::json_string(commit) : std::string("null"));
  o << ",\n  \"command\": " << ferry::detail::json_string(opt.command);
  o << ",\n  \"backend\": ";
  o << ferry::detail::json_string(run.backend);
  o << ",\n  \"device\": ";
  o << ferry::detail::json_string(run.device_name);
  o << ",\n  \"is_gpu\": " << (run.is_gpu ? "true" : "false");
  o << ",\n  \"config\": {\"sizes\": [";
  for (std::size_t i = 0; i < run.sizes.size(); ++i) o << (i ? ", " : "") << run.sizes[i];
  o << "], \"steps\": " << opt.steps << ", \"compute_units\": " << opt.compute_units
    << ", \"inflight\": " << opt.inflight << ", \"workloads\": [";
  for (std::size_t i = 0; i < opt.workloads.size(); ++i) {
    o << (i ? ", " : "") << "\"" << workload_name(opt.workloads[i]) << "\"";
  }
  o << "], \"orders\": [";
  for (std::size_t i = 0; i < opt.orders.size(); ++i) o << (i ? ", " : "") << "\"" << order_name(opt.orders[i]) << "\"";
  o << "], \"timing\": \"host\"},\n  \"results\": [";
  for (std::size_t i = 0; i < run.results.size(); ++i) {
    const auto& r = run.results[i];
    // "strategy" is the row's name, one per workload and size (row_name); "order" is the seed
    // workload's order.
    const bool seed = r.scenario.workload == Workload::seed;
    o << (i ? ",\n" : "\n") << "    {\"workload\": \"" << workload_name(r.scenario.workload)
      << "\", \"strategy\": " << ferry::detail::json_string(row_name(r.scenario))
      << ", \"order\": " << (seed ? "\"" + std::string(order_name(r.scenario.order)) + "\"" : std::string("null"))
      << ", \"size_bytes\": " << r.scenario.bytes << ", \"peak_allocated_bytes\": " << r.peak_allocated
      << ", \"peak_reserved_bytes\": " << r.peak_reserved << ", \"peak_stranded_bytes\": " << r.peak_stranded
      << ", \"segment_allocations\": " << r.segment_allocations << ", \"pending_reuses\": " << r.pending_reuses
      << ", \"cpu_peak_rss_bytes\": " << r.rss_peak << ", \"cpu_peak_rss_reset\": " << (r.rss_reset ? "true" : "false")
      << ", \"copy_gbps\": " << num(r.copy_gbps) << ", \"host_us_per_call\": " << num(r.host_us_per_call)
      << ", \"step_ms\": " << num(r.step_ms) << ", \"step_ms_with_warmup\": " << num(r.step_ms_with_warmup)
      << ", \"compute_ms\": " << num(r.compute_ms)
      << ", \"copy_ms\": " << num(r.copy_ms) << ", \"overlap\": " << num(r.overlap) << "}";
  }
  o << "\n  ],\n  \"raw_copy\": [";
  for (std::size_t i = 0; i < run.raw.size(); ++i) {
    const RawCopy& r = run.raw[i];
    o << (i ? ", " : "") << "{\"size_bytes\": " << r.bytes << ", \"gbps\": " << num(r.gbps)
      << ", \"download_gbps\": " << num(r.d2h_gbps) << ", \"timeline_pair_us\": " << num(r.timeline_pair_us)
      << ", \"vendor\": " << (r.vendor.measured ? "{\"h2d_gbps\": " + num(r.vendor.h2d_gbps) + ", \"d2h_gbps\": " +
                                                      num(r.vendor.d2h_gbps) + ", \"h2d_gpu_timed_gbps\": " +
                                                      num(r.vendor.h2d_gpu_gbps) + ", \"d2h_gpu_timed_gbps\": " +
                                                      num(r.vendor.d2h_gpu_gbps) + "}"
                                                : std::string("null"))
      << ", \"raw_vulkan\": ";
    if (r.vulkan.measured) {
      const VulkanAnchor& a = r.vulkan;
      auto loop = [&](const VulkanAnchor::Loop& l) {
        return "{\"step_ms\": " + num(l.step_ms) + ", \"step_ms_with_warmup\": " + num(l.step_ms_with_warmup) +
               ", \"compute_ms\": " + num(l.compute_ms) +
               ", \"overlap\": " + num(l.overlap) + "}";
      };
      o << "{\"what\": " << ferry::detail::json_string(a.what) << ", \"compute_family\": " << a.compute_family
        << ", \"transfer_family\": " << a.transfer_family << ", \"h2d_gbps\": " << num(a.h2d_gbps)
        << ", \"d2h_gbps\": " << num(a.d2h_gbps) << ", \"submit_us_median\": " << num(a.submit_us)
        << ", \"copy_us_median\": " << num(a.copy_us) << ", \"seed\": " << loop(a.seed)
        << ", \"pipeline\": " << loop(a.pipeline) << "}";
    } else {
      o << "null";
    }
    o << "}";
  }
  o << "],\n  \"batch_study\": ";
  if (run.batch.ran) {
    const BatchStudy& b = run.batch;
    auto sp = [](const Spread& x) {
      return "{\"median\": " + num(x.median) + ", \"min\": " + num(x.min) + ", \"max\": " + num(x.max) + "}";
    };
    o << "{\"rounds\": " << b.rounds << ", \"memcpy_threads\": " << b.memcpy_threads
      << ", \"memcpy_gbps\": " << sp(b.memcpy_gbps) << ", \"dma_gbps\": " << num(b.dma_gbps)
      << ", \"ceiling_gbps\": " << sp(b.ceiling_gbps) << ", \"scattered_count\": " << b.scattered_count
      << ", \"scattered_each_bytes\": " << b.scattered_each
      << ", \"memcpy_gather_gbps\": " << sp(b.memcpy_gather_gbps)
      << ", \"memcpy_same_bytes_gbps\": " << sp(b.memcpy_same_gbps)
      << ", \"ceiling_scattered_gbps\": " << sp(b.ceiling_scattered_gbps)
      << ", \"scattered_gbps\": " << sp(b.scattered_gbps) << ", \"scattered_ratio\": " << sp(b.scattered_ratio)
      << ", \"hand_staged_chunk_bytes\": " << b.hand_chunk << ", \"hand_staged_gbps\": " << sp(b.hand_staged_gbps)
      << ", \"hand_staged_ratio\": " << sp(b.hand_staged_ratio)
      << ", \"scattered_vs_hand_staged\": " << sp(b.scattered_vs_hand)
      << ", \"contiguous_twin_gbps\": " << sp(b.contiguous_gbps)
      << ", \"contiguous_twin_ratio\": " << sp(b.contiguous_ratio) << ", \"pageable_bytes\": " << b.pageable_bytes
      << ", \"pageable_gbps\": " << sp(b.pageable_gbps) << ", \"pageable_ratio\": " << sp(b.pageable_ratio)
      << ", \"memcpy_out_gbps\": " << sp(b.memcpy_out_gbps) << ", \"dma_d2h_gbps\": " << num(b.dma_d2h_gbps)
      << ", \"ceiling_down_gbps\": " << sp(b.ceiling_down_gbps)
      << ", \"scattered_down_gbps\": " << sp(b.scattered_down_gbps)
      << ", \"scattered_down_ratio\": " << sp(b.scattered_down_ratio) << "}";
  } else {
    o << "null";
  }
  o << ",\n  \"host_cost\": ";
  if (run.host_cost.ran) {
    const HostCost& h = run.host_cost;
    o << "{\"calls\": " << h.calls << ", \"size_bytes\": " << h.bytes
      << ", \"upload_us_median\": " << num(h.upload.median) << ", \"upload_us_p90\": " << num(h.upload.p90)
      << ", \"release_us_median\": " << num(h.release.median) << ", \"release_us_p90\": " << num(h.release.p90)
      << ", \"pair_us_median\": " << num(h.pair.median) << ", \"pair_us_p90\": " << num(h.pair.p90)
      << ", \"variants\": [";
    for (std::size_t i = 0; i < h.variants.size(); ++i) {
      const HostCost::Variant& v = h.variants[i];
      o << (i ? ", " : "") << "{\"what\": ";
      o << ferry::detail::json_string(v.what);
      o << ", \"upload_us_median\": " << num(v.upload.median) << ", \"upload_us_p90\": " << num(v.upload.p90)
        << ", \"pair_us_median\": " << num(v.pair.median) << ", \"pair_us_p90\": " << num(v.pair.p90) << "}";
    }
    o << "], \"vendor\": ";
    if (h.vendor.measured) {
      o << "{\"what\": ";
      o << ferry::detail::json_string(h.vendor.what);
      o << ", \"us_median\": " << num(h.vendor.median_us) << ", \"us_p90\": " << num(h.vendor.p90_us)
        << ", \"ordered_what\": ";
      o << ferry::detail::json_string(h.vendor.ordered_what);
      o << ", \"ordered_upload_us_median\": " << num(h.vendor.ordered_upload_median_us)
        << ", \"ordered_upload_us_p90\": " << num(h.vendor.ordered_upload_p90_us)
        << ", \"ordered_pair_us_median\": " << num(h.vendor.ordered_pair_median_us)
        << ", \"ordered_pair_us_p90\": " << num(h.vendor.ordered_pair_p90_us) << "}";
    } else {
      o << "null";
    }
    o << ", \"raw_vulkan\": ";
    if (h.vulkan.measured) {
      o << "{\"what\": " << ferry::detail::json_string(h.vulkan.what) << ", \"us_median\": " << num(h.vulkan.median_us)
        << ", \"us_p90\": " << num(h.vulkan.p90_us) << "}";
    } else {
      o << "null";
    }
    o << "}";
  } else {
    o << "null";
  }
  o << ",\n  \"image_study\": ";
  if (run.images.ran) {
    const ImageStudy& st = run.images;
    o << "{\"reps\": " << st.reps << ", \"layer_scale\": " << num(st.scale) << ", \"cases\": [";
    for (std::size_t i = 0; i < st.cases.size(); ++i) {
      const ImageCase& c = st.cases[i];
      o << (i ? ", " : "") << "{\"name\": " << ferry::detail::json_string(c.name)
        << ", \"format\": " << ferry::detail::json_string(std::string(ferry::to_string(c.desc.format)))
        << ", \"width\": " << c.desc.width << ", \"height\": " << c.desc.height
        << ", \"mip_levels\": " << c.desc.mip_levels << ", \"array_layers\": " << c.desc.array_layers
        << ", \"regions\": " << c.regions.size() << ", \"bytes\": " << c.bytes << ", \"skipped\": "
        << (c.ran() ? std::string("null") : ferry::detail::json_string(c.skipped));
      if (c.ran()) {
        o << ", \"image\": " << ferry::detail::json_string(c.image_what)
          << ", \"upload_gbps\": " << num(c.upload_gbps) << ", \"download_gbps\": " << num(c.download_gbps)
          << ", \"buffer_upload_gbps\": " << num(c.buffer_upload_gbps)
          << ", \"buffer_download_gbps\": " << num(c.buffer_download_gbps)
          << ", \"upload_call_us\": " << num(c.upload_call_us) << ", \"download_call_us\": " << num(c.download_call_us)
          << ", \"buffer_upload_call_us\": " << num(c.buffer_upload_call_us)
          << ", \"buffer_download_call_us\": " << num(c.buffer_download_call_us) << ", \"raw\": ";
        if (c.raw.measured) {
          o << "{\"what\": " << ferry::detail::json_string(c.raw.what)
            << ", \"upload_gbps\": " << num(c.raw.upload_gbps)
            << ", \"download_gbps\": " << num(c.raw.download_gbps)
            << ", \"upload_call_us\": " << num(c.raw.upload_call_us) << "}";
        } else {
          o << "{\"skipped\": " << ferry::detail::json_string(c.raw.skipped) << "}";
        }
      }
      o << "}";
    }
    o << "]}";
  } else {
    o << "null";
  }
  o << ",\n  \"contention\": ";
  if (run.contention.ran) {
    const ContentionStudy& c = run.contention;
    o << "{\"bulk_bytes\": " << c.config.bulk_bytes << ", \"urgent_bytes\": " << c.config.urgent_bytes
      << ", \"period_us\": " << c.config.period_us << ", \"reps\": " << c.config.reps
      << ", \"alone_copies\": " << c.config.alone_copies << ", \"chunk_bytes\": " << c.config.chunk_bytes
      << ", \"copy_priorities\": " << (c.copy_priorities ? "true" : "false")
      << ", \"bulk_piece_bytes\": " << c.bulk_piece_bytes << ", \"cuda_skipped\": "
      << (c.cuda_skipped.empty() ? std::string("null") : ferry::detail::json_string(c.cuda_skipped))
      << ", \"vulkan_skipped\": "
      << (c.vulkan_skipped.empty() ? std::string("null") : ferry::detail::json_string(c.vulkan_skipped))
      << ", \"rows\": [";
    for (std::size_t i = 0; i < c.rows.size(); ++i) {
      const ContentionRow& r = c.rows[i];
      o << (i ? "," : "") << "\n    {\"path\": " << ferry::detail::json_string(r.path)
        << ", \"name\": " << ferry::detail::json_string(r.name) << ", \"bulk\": " << ferry::detail::json_string(r.bulk)
        << ", \"urgent\": " << (r.urgent ? "true" : "false") << ", \"how\": " << ferry::detail::json_string(r.how)
        << ", \"urgent_samples\": " << r.samples << ", \"urgent_p50_us\": " << (r.urgent ? num(r.p50_us) : "null")
        << ", \"urgent_p99_us\": " << (r.urgent ? num(r.p99_us) : "null")
        << ", \"urgent_max_us\": " << (r.urgent ? num(r.max_us) : "null")
        << ", \"bulk_gbps\": " << (r.bulk == "none" ? "null" : num(r.bulk_gbps)) << "}";
    }
    o << "\n  ]}";
  } else {
    o << "null";
  }
  o << ",\n  \"verdicts\": [";
  const auto vs = verdicts(run);
  for (std::size_t i = 0; i < vs.size(); ++i) {
    const auto& v = vs[i];
    o << (i ? ",\n" : "\n") << "    {\"size_bytes\": " << v.bytes << ", \"workload\": "
      << (v.workload.empty() ? std::string("null") : "\"" + v.workload + "\"")
      << ", \"name\": " << ferry::detail::json_string(v.name)
      << ", \"value\": " << num(v.value) << ", \"bar\": " << (v.checked() ? num(v.bar) : "null")
      << ", \"pass\": " << (v.checked() ? (v.pass() ? "true" : "false") : "null") << ", \"text\": ";
    o << ferry::detail::json_string(v.text);
    o << "}";
  }
  o << "\n  ]\n}\n";
  ferry::detail::write_file("ferry-bench --out", o.str(), file);
}

void write_snapshots(const Run& run, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  for (auto bytes : run.sizes) {
    // One column per (strategy, workload), strategy-major: each strategy's workloads side by side.
    std::vector<std::pair<std::string, ferry::MemorySnapshot>> columns;
    std::vector<const Result*> order;
    for (const auto& r : run.results) {
      if (r.scenario.bytes != bytes) continue;
      const bool named = r.scenario.workload == Workload::seed && r.scenario.order != Order::seed;
      const std::string stem = std::string(workload_name(r.scenario.workload)) + "-" + strategy_name(r.scenario) +
                               (named ? std::string("-") + order_name(r.scenario.order) : "") + "-" +
                               size_label(bytes);
      ferry::write_memory_viz_pickle(r.snapshot, dir / (stem + ".pickle"));
      ferry::write_json(r.snapshot, dir / (stem + ".json"));
      ferry::write_chrome_trace(r.snapshot, dir / (stem + ".trace.json"));
      order.push_back(&r);
    }
    std::stable_sort(order.begin(), order.end(), [&](const Result* a, const Result* b) {
      auto rank = [&](const Result* r) {
        for (std::size_t i = 0; i < run.results.size(); ++i) {
          const Scenario& s = run.results[i].scenario;
          if (s.mode == r->scenario.mode && s.overlap == r->scenario.overlap) return i;  // first appearance
        }
        return run.results.size();
      };
      return rank(a) < rank(b);
    });
    for (const Result* r : order) {
      columns.emplace_back(row_name(r->scenario) + " / " + workload_name(r->scenario.workload), r->snapshot);
    }
    if (!columns.empty()) ferry::write_html_report(columns, dir / ("report-" + size_label(bytes) + ".html"));
  }
}

}  // namespace ferry_bench
