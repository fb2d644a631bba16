// SPDX-License-Identifier: MIT
// ferry-bench: the seed's copy-strategy study on any ferry backend.
//
//   ferry-bench [--backend auto] [--sizes 64M,512M] [--steps 30] [--compute-units 20]
//               [--inflight 2] [--workloads seed,pipeline] [--orders seed,compute_first]
//               [--strategies ...] [--images] [--contention on|off] [--out DIR] [--snapshot DIR]
//               [--quiet]
//
// Prints, per workload (seed, pipeline; the seed in each order), a table (footprint,
// bandwidth, host cost, step time, overlap per strategy and size), a raw-copy reference row per
// size, the image study (on a GPU, or with --images), the contention section (urgent uploads
// beside a bulk copy) and verdict lines against each workload's bars (docs/benchmarks.md,
// "Bars").
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <iostream>

#include "bench/bench.hpp"

namespace {

using namespace ferry_bench;

// Fills in the backend, device name and default sizes from a first open of the device.
Run plan(const Options& options, const DeviceFactory& factory) {
  Run run;
  run.options = options;
  {
    ferry::Device probe = factory.open();
    run.backend = std::string(ferry::to_string(probe.backend()));
    run.device_name = probe.capabilities().name;
    run.is_gpu = probe.capabilities().is_gpu;
  }
  run.sizes = options.sizes;
  if (run.sizes.empty()) {
    // The seed's 64 MB / 512 MB; the CPU reference runs smaller so that both workloads stay
    // quick on a small machine (its compute is a memcpy-speed loop on the host's cores). Both
    // stay above the pool's 10 MiB small-request class, so that every batch gets a segment of
    // its own as at the seed's sizes and the footprint bars compare batches, not segments.
    run.sizes = run.backend == "host" ? std::vector<std::uint64_t>{12ull << 20, 16ull << 20}
                                      : std::vector<std::uint64_t>{64ull << 20, 512ull << 20};
  }
  return run;
}

// The image study at the options' scale: the layered case shrinks on a CPU backend.
ImageStudy measure_images(const Run& run, const DeviceFactory& factory, const Progress& progress) {
  const auto& o = run.options;
  return run_image_study(factory, o.image_reps, o.image_scale.value_or(run.is_gpu ? 1.0 : 1.0 / 32), progress);
}

// The contention section at the options' sizes: a CPU backend's bulk is smaller by default.
ContentionStudy measure_contention(const Run& run, const DeviceFactory& factory, const Progress& progress) {
  const auto& o = run.options;
  ContentionConfig config;
  config.bulk_bytes = o.contention_bulk_bytes.value_or(run.is_gpu ? 4096ull << 20 : 64ull << 20);
  config.urgent_bytes = o.contention_urgent_bytes;
  config.period_us = o.contention_period_us;
  config.reps = o.contention_reps;
  config.piece_bytes = o.contention_piece_bytes;
  return run_contention(factory, config, progress);
}

void measure(Run& run, const DeviceFactory& factory, const Progress& progress) {
  const auto& o = run.options;
  if (o.contention_only) {
    run.contention = measure_contention(run, factory, progress);
    progress.done();
    return;
  }
  if (o.images_only) {
    run.images = measure_images(run, factory, progress);
    progress.done();
    return;
  }
  if (o.host_cost_calls > 0 && !o.batch_study_only) {
    run.host_cost = run_host_cost(factory, o.host_cost_bytes, o.host_cost_calls, progress);
  }
  if (o.host_cost_only) {
    progress.done();
    return;
  }
  std::vector<Scenario> per_size;
  for (auto workload : o.batch_study_only ? std::vector<Workload>{} : o.workloads) {
    // The seed workload runs in each order, each strategy's orders back to back, so that a
    // host whose speed drifts moves both orders' rows alike.
    const std::vector<Order> orders = workload == Workload::seed ? o.orders : std::vector<Order>{Order::seed};
    for (auto mode : o.strategies) {
      for (auto order : orders) {
        per_size.push_back(
            {.workload = workload,
             .order = order,
             .mode = mode,
             .steps = o.steps,
             .units = o.compute_units,
             .inflight = o.inflight,
             .trace = o.trace_steps});
        if (mode == Strategy::owner_owned && o.overlap_variant) {
          per_size.push_back(per_size.back());
          per_size.back().overlap = true;
        }
      }
    }
  }
  const std::size_t total = run.sizes.size() * (per_size.size() + 1);
  std::size_t k = 0;
  for (auto bytes : run.sizes) {
    for (Scenario sc : per_size) {
      sc.bytes = bytes;
      const std::string label = "[" + std::to_string(++k) + "/" + std::to_string(total) + "] " +
                                workload_name(sc.workload) + " " + row_name(sc) + " " + size_label(bytes);
      run.results.push_back(run_scenario(factory, sc, progress, label));
    }
    progress.phase("[" + std::to_string(++k) + "/" + std::to_string(total) + "] raw copy " + size_label(bytes));
    run.raw.push_back(run_raw_copy(factory, bytes, std::clamp(o.steps, 3, 20), o.steps, o.compute_units, o.inflight,
                                   o.trace_steps));
    // Overlap = step time / max(compute, copy), the copy being the raw copy of one batch: the
    // time a step cannot beat whatever the strategy.
    const double raw_copy_ms = run.raw.back().gbps > 0 ? static_cast<double>(bytes) / (run.raw.back().gbps * 1e6) : 0;
    for (auto& r : run.results) {
      if (r.scenario.bytes != bytes) continue;
      const double bound = std::max(r.compute_ms, raw_copy_ms);
      r.overlap = bound > 0 ? r.step_ms / bound : 0;
    }
  }
  const std::uint64_t batch_bytes = o.batch_bytes.value_or(run.backend == "host" ? 64ull << 20 : 1ull << 30);
  if (batch_bytes > 0) {
    // The pinned-DMA side of the ceiling: the vendor's raw copy where measured, else ferry's.
    double dma = 0, dma_d2h = 0;
    for (const auto& r : run.raw) {
      dma = std::max(dma, r.vendor.measured ? r.vendor.h2d_gbps : r.gbps);
      dma_d2h = std::max(dma_d2h, r.vendor.measured ? r.vendor.d2h_gbps : r.d2h_gbps);
    }
    run.batch = run_batch_study(factory, batch_bytes, dma, dma_d2h, o.batch_rounds, progress);
  }
  if (!o.batch_study_only && o.images.value_or(run.is_gpu)) run.images = measure_images(run, factory, progress);
  if (!o.batch_study_only && o.contention) run.contention = measure_contention(run, factory, progress);
  progress.done();
}

int bench_main(int argc, char** argv) {
  const auto options = parse_options(argc, argv);
  if (!options) return 0;
  DeviceFactory factory{options->backend};
  if (factory.backend == "auto" && !ferry::Device::open_default().capabilities().is_gpu) {
    // No GPU (a CPU Vulkan driver such as lavapipe at best): the CPU reference backend is the
    // meaningful baseline, and much quicker than emulating a GPU.
    factory.backend = "host";
  }
  const Progress progress{options->quiet, isatty(STDERR_FILENO) != 0};

  if (options->host_cost_only && options->batch_study_only) {
    throw std::invalid_argument("--host-cost-only and --batch-study-only exclude each other");
  }
  if (options->batch_study_only && options->batch_bytes == std::optional<std::uint64_t>(0)) {
    throw std::invalid_argument("--batch-study-only with --batch-study off measures nothing");
  }
  if (options->host_cost_only && options->host_cost_calls == 0) {
    throw std::invalid_argument("--host-cost-only with --host-cost off measures nothing");
  }
  if (options->images_only && (options->host_cost_only || options->batch_study_only)) {
    throw std::invalid_argument("--images-only excludes --host-cost-only and --batch-study-only");
  }
  if (options->images_only && options->images == std::optional<bool>(false)) {
    throw std::invalid_argument("--images-only with --no-images measures nothing");
  }
  if (options->contention_only && (options->host_cost_only || options->batch_study_only || options->images_only)) {
    throw std::invalid_argument("--contention-only excludes --host-cost-only, --batch-study-only and --images-only");
  }
  if (options->contention_only && !options->contention) {
    throw std::invalid_argument("--contention-only with --contention off measures nothing");
  }
  Run run = plan(*options, factory);
  if (options->host_cost_only || options->images_only || options->contention_only) run.sizes.clear();
  print_header(run);
  measure(run, factory, progress);
  print_table(run);
  print_verdicts(run);
  if (options->trace_steps) print_step_times(run);

  if (options->out) {
    std::filesystem::create_directories(*options->out);
    const auto file = *options->out / "results.json";
    write_results_json(run, file);
    std::cout << "\nresults: " << file.string() << "\n";
  }
  if (options->snapshot) {
    write_snapshots(run, *options->snapshot);
    std::cout << "snapshots: " << options->snapshot->string()
              << " (*.pickle: pytorch.org/memory_viz; *.trace.json: ui.perfetto.dev; report-*.html)\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return bench_main(argc, argv);
  } catch (const ferry::Error& e) {
    std::cerr << "ferry-bench: " << e.what() << "\n";
    return e.code() == ferry::ErrorCode::unsupported ? 77 : 1;
  } catch (const std::exception& e) {
    std::cerr << "ferry-bench: " << e.what() << "\n";
    return 2;
  }
}
