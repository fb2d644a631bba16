// SPDX-License-Identifier: MIT
// ferry-bench command line.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "bench.hpp"

namespace ferry_bench {
namespace {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep)) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

long long parse_int(const std::string& text, const char* option, long long lo, long long hi) {
  long long v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size() || v < lo || v > hi) {
    throw std::invalid_argument(std::string(option) + ": expected an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "], got '" + text + "'");
  }
  return v;
}

Strategy parse_strategy(const std::string& name) {
  if (const std::optional<Strategy> s = parse_strategy_name(name)) return *s;
  throw std::invalid_argument("--strategies: unknown strategy '" + name +
                              "' (blocking, executor_owned, preallocated, owner_owned)");
}

Workload parse_workload(const std::string& name) {
  for (auto w : {Workload::seed, Workload::pipeline}) {
    if (name == workload_name(w)) return w;
  }
  throw std::invalid_argument("--workloads: unknown workload '" + name + "' (seed, pipeline)");
}

Order parse_order(const std::string& name) {
  for (auto order : {Order::seed, Order::compute_first}) {
    if (name == order_name(order)) return order;
  }
  throw std::invalid_argument("--orders: unknown order '" + name + "' (seed, compute_first)");
}

double parse_fraction(const std::string& text, const char* option) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size() || !(v > 0 && v <= 1)) {
    throw std::invalid_argument(std::string(option) + ": expected a number in (0, 1], got '" + text + "'");
  }
  return v;
}

}  // namespace

std::uint64_t parse_size(const std::string& text) {
  if (text.empty()) throw std::invalid_argument("empty size");
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end == text.data()) throw std::invalid_argument("bad size '" + text + "'");
  std::string suffix(end, text.data() + text.size());
  for (auto& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else if (suffix == "K" || suffix == "KB" || suffix == "KIB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MB" || suffix == "MIB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GB" || suffix == "GIB") {
    shift = 30;
  } else {
    throw std::invalid_argument("bad size suffix in '" + text + "' (K, M, G: binary units)");
  }
  if (v == 0 || v > (UINT64_MAX >> shift)) throw std::invalid_argument("size out of range: '" + text + "'");
  return v << shift;
}

std::string size_label(std::uint64_t bytes) {
  if (bytes % (1ull << 30) == 0) return std::to_string(bytes >> 30) + "G";
  if (bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + "M";
  if (bytes % (1ull << 10) == 0) return std::to_string(bytes >> 10) + "K";
  return std::to_string(bytes) + "B";
}

std::string usage() {
  return R"(ferry-bench: copy strategies side by side (footprint, bandwidth, host cost, overlap)

usage: ferry-bench [options]
  --backend NAME        host | cuda | vulkan | hip | vulkan_cuda | cuda_vulkan | auto (default
                        auto: the best GPU present,
                        else the CPU reference backend)
  --sizes LIST          batch sizes, K/M/G binary units (default 64M,512M; host backend 12M,16M)
  --steps N             steps per footprint run (default 30)
  --compute-units N     passes of synthetic compute per step (default 20)
  --inflight N          steps the host lets run ahead before waiting (default 2)
  --workloads LIST      any of seed,pipeline (default: both, each with its own bars)
                        seed: compute on an unrelated buffer while the batch is copied, then a
                        short pass reading the batch (the seed's matmuls, then d.sum());
                        pipeline: compute reads the whole batch while the next batch is copied
  --orders LIST         the seed workload's orders, any of seed,compute_first (default: both,
                        in the same run, each judged by the seed workload's bars)
                        seed, the seed's order as an engine writes it:
                          up = xfer.upload(batch, owner, {.owner_waits = false});
                          the unrelated compute on the owner; owner.wait(up.ready);
                          the short pass reads up.buffer; up.buffer.release()
                        compute_first: the unrelated compute, then the upload call (which
                        makes the owner wait), then the short pass; its rows are named
                        STRATEGY (compute_first)
  --strategies LIST     any of blocking,executor_owned,preallocated,owner_owned (default: all)
  --out DIR             write DIR/results.json
  --snapshot DIR        write per strategy and size: .pickle (PyTorch memory_viz), .json,
                        .trace.json (Chrome/Perfetto); and report-SIZE.html with all strategies
  --quiet               no progress on stderr
  --batch-study SIZE|off  whole-batch study: 4096 x 16K scattered pageable buffers and one SIZE
                        pageable buffer, against the host-staging ceiling measured in the same
                        run, and the scattered buffers staged by hand (memcpy into pinned
                        chunks, each uploaded once packed) as its anchor (default 1G; host
                        backend 64M)
  --host-cost N|off     host cost per upload call: N uploads of one small pinned range to the
                        owner queue, each released right after, each call timed (default 4096);
                        on CUDA beside a bare cudaMemcpyAsync of the same size
  --batch-rounds N      whole-batch study: rounds of ceiling and ferry measured alternately
                        (default 5); verdicts use the median ratio of each round
  --host-cost-size SIZE size of each of those uploads (default 64K)
  --host-cost-only      run only the host-cost measurement
  --batch-study-only    run only the whole-batch study (with the raw copies at --sizes that
                        give its DMA ceiling)
  --trace-steps         time each footprint run's steps (and the raw Vulkan loop's) from a
                        polling thread and print where a step's time goes
  --images, --no-images image study on or off (default: on for a GPU backend only): an
                        engine's images made with the vendor's calls and adopted, filled and
                        read by upload_image / download_image from pinned memory, beside one
                        buffer copy of the same bytes and the vendor's raw image copy of the
                        same regions: a 3840x2160 rgba8 frame, a 4096x4096 bc7 texture with
                        its mip chain, and 2048 layers of 256x256 rgba8
  --images-only         run only the image study
  --image-reps N        image study: timed copies per measurement and direction (default 10)
  --image-scale F       image study: fraction of the layered case's 2048 layers, in (0, 1]
                        (default 1 on a GPU, 1/32 on a CPU backend)
  --contention on|off   contention section (default on): while a bulk pinned upload runs
                        through ferry (Priority::bulk), a small pinned upload with
                        Priority::urgent every period from another thread; urgent latency
                        p50/p99/max (host clock before the call -> a polling thread sees its
                        point reached) and the bulk's GB/s, urgent copies alone, the same
                        beside a bulk download; on a GPU beside the raw CUDA references (one
                        cudaMemcpyAsync; TorchRec's chunks with an empty kernel between them;
                        small copies on a stream of the greatest priority) and, where Vulkan
                        executes the copies, the raw Vulkan ones (one vkCmdCopyBuffer on the
                        transfer queue, small copies on another queue)
  --contention-only     run only the contention section
  --contention-bulk-mib N   the bulk's size in MiB (default 4096; 64 on a CPU backend)
  --contention-urgent-kib N each urgent upload's size in KiB (default 64)
  --contention-period-us N  one urgent upload every N us (default 500)
  --contention-reps N   bulk copies per row, urgent samples pooled (default 3)
  --contention-piece-kib N  ferry's bulk piece (TransferOptions::bulk_piece_bytes, at least 64):
                        the latency an urgent copy buys with the bulk's bandwidth (default:
                        the backend's, which on CUDA cuts nothing)
  --help                this text

Each step, in the workload's order: pinned host batch -> device (strategy), allocate the
owner's temporary from the pool, the workload's synthetic compute on the owner queue, release
both (stream-ordered), host waits for the step `inflight` steps back. Step times are the steady state: from the completion
of step 3 to that of the last step. Bandwidths are host-timed (N uploads, one host wait at the
end).
)";
}

namespace {

// One argument as a POSIX shell reads it back: as is when it holds only safe characters, else in
// single quotes (a quote inside as '\'').
std::string shell_quoted(const std::string& arg) {
  const bool safe = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](unsigned char c) {
    return std::isalnum(c) || std::strchr("_-+=.,:/@%", c) != nullptr;
  });
  if (safe) return arg;
  std::string q = "'";
  for (char c : arg) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

std::optional<Options> parse_options(int argc, char** argv) {
  Options o;
  o.command = "ferry-bench";
  for (int i = 1; i < argc; ++i) o.command += " " + shell_quoted(argv[i]);
  auto value = [&](int& i, const char* name) -> std::string {
    const std::string arg = argv[i];
    if (const auto eq = arg.find('='); eq != std::string::npos) return arg.substr(eq + 1);
    if (i + 1 >= argc) throw std::invalid_argument(std::string(name) + " needs a value");
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::string key = arg.substr(0, arg.find('='));
    if (key == "--help" || key == "-h") {
      std::cout << usage();
      return std::nullopt;
    } else if (key == "--backend") {
      o.backend = value(i, "--backend");
      if (o.backend != "auto") (void)ferry::parse_backend(o.backend);  // throws ferry::Error when unknown
    } else if (key == "--sizes") {
      o.sizes.clear();
      for (const auto& s : split(value(i, "--sizes"), ',')) o.sizes.push_back(parse_size(s));
      if (o.sizes.empty()) throw std::invalid_argument("--sizes: empty list");
    } else if (key == "--steps") {
      o.steps = static_cast<int>(parse_int(value(i, "--steps"), "--steps", 1, 1'000'000));
    } else if (key == "--compute-units") {
      o.compute_units =
          static_cast<std::uint32_t>(parse_int(value(i, "--compute-units"), "--compute-units", 1, 1'000'000));
    } else if (key == "--inflight") {
      o.inflight = static_cast<int>(parse_int(value(i, "--inflight"), "--inflight", 1, 64));
    } else if (key == "--strategies") {
      o.strategies.clear();
      for (const auto& s : split(value(i, "--strategies"), ',')) o.strategies.push_back(parse_strategy(s));
      if (o.strategies.empty()) throw std::invalid_argument("--strategies: empty list");
    } else if (key == "--workloads") {
      o.workloads.clear();
      for (const auto& s : split(value(i, "--workloads"), ',')) o.workloads.push_back(parse_workload(s));
      if (o.workloads.empty()) throw std::invalid_argument("--workloads: empty list");
    } else if (key == "--orders") {
      o.orders.clear();
      for (const auto& s : split(value(i, "--orders"), ',')) o.orders.push_back(parse_order(s));
      if (o.orders.empty()) throw std::invalid_argument("--orders: empty list");
    } else if (key == "--batch-rounds") {
      o.batch_rounds = static_cast<int>(parse_int(value(i, "--batch-rounds"), "--batch-rounds", 1, 1000));
    } else if (key == "--out") {
      o.out = value(i, "--out");
    } else if (key == "--snapshot") {
      o.snapshot = value(i, "--snapshot");
    } else if (key == "--quiet" || key == "-q") {
      o.quiet = true;
    } else if (key == "--batch-study") {
      const std::string v = value(i, "--batch-study");
      if (v == "off") {
        o.batch_bytes = 0;
      } else {
        o.batch_bytes = parse_size(v);
      }
    } else if (key == "--host-cost") {
      const std::string v = value(i, "--host-cost");
      o.host_cost_calls = v == "off" ? 0 : static_cast<int>(parse_int(v, "--host-cost", 1, 10'000'000));
    } else if (key == "--host-cost-size") {
      o.host_cost_bytes = parse_size(value(i, "--host-cost-size"));
    } else if (key == "--host-cost-only") {
      o.host_cost_only = true;
    } else if (key == "--batch-study-only") {
      o.batch_study_only = true;
    } else if (key == "--trace-steps") {
      o.trace_steps = true;
    } else if (key == "--images") {
      o.images = true;
    } else if (key == "--no-images") {
      o.images = false;
    } else if (key == "--images-only") {
      o.images_only = true;
    } else if (key == "--image-reps") {
      o.image_reps = static_cast<int>(parse_int(value(i, "--image-reps"), "--image-reps", 1, 100'000));
    } else if (key == "--image-scale") {
      o.image_scale = parse_fraction(value(i, "--image-scale"), "--image-scale");
    } else if (key == "--contention") {
      const std::string v = value(i, "--contention");
      if (v != "on" && v != "off") throw std::invalid_argument("--contention: expected on or off, got '" + v + "'");
      o.contention = v == "on";
    } else if (key == "--contention-only") {
      o.contention_only = true;
    } else if (key == "--contention-bulk-mib") {
      o.contention_bulk_bytes =
          static_cast<std::uint64_t>(parse_int(value(i, "--contention-bulk-mib"), "--contention-bulk-mib", 1, 1 << 20))
          << 20;
    } else if (key == "--contention-urgent-kib") {
      o.contention_urgent_bytes =
          static_cast<std::uint64_t>(
              parse_int(value(i, "--contention-urgent-kib"), "--contention-urgent-kib", 1, 1 << 20))
          << 10;
    } else if (key == "--contention-period-us") {
      o.contention_period_us = static_cast<int>(
          parse_int(value(i, "--contention-period-us"), "--contention-period-us", 1, 10'000'000));
    } else if (key == "--contention-piece-kib") {
      o.contention_piece_bytes =
          static_cast<std::uint64_t>(
              parse_int(value(i, "--contention-piece-kib"), "--contention-piece-kib", 64, 1 << 20))
          << 10;
    } else if (key == "--contention-reps") {
      o.contention_reps =
          static_cast<int>(parse_int(value(i, "--contention-reps"), "--contention-reps", 1, 1000));
    } else {
      throw std::invalid_argument("unknown option '" + arg + "' (see --help)");
    }
  }
  return o;
}

}  // namespace ferry_bench
