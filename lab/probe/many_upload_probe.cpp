// SPDX-License-Identifier: MIT
// ferry-probe-many-upload: an experiment, not part of ferry. The host cost of ferry's own work
// when a structure's leaves are uploaded each into a block of its own (ferry.torch's in-place
// pipeline copy), one Transfer::upload_into call per leaf against one several-source call, on
// the null backend (no driver underneath; FERRY_NULL_LAG = --lag). Each destination is
// adopted memory unused since its release (`destination_unused`), released with a point
// that is reached (`--pending 0`, fresh blocks: the copies go in one batch) or still pending
// (`--pending 1`: every copy waits for its own release, as a batch's blocks do when the
// training stream runs behind). Prints the median microseconds per leaf of each way.
//
//   ferry-probe-many-upload [--leaves N (500)] [--batches N (200)] [--lag N (0)] [--pending 0|1]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"
#include "probe_util.hpp"

namespace {

using namespace ferry;
using clock_type = std::chrono::steady_clock;

struct Config {
  std::size_t leaves = 500;
  int batches = 200;
  std::uint64_t lag = 0;
  bool pending = true;
};

/// Median microseconds per leaf of the upload calls of `batches` batches, one way.
double time_way(const Config& c, bool one_call) {
  if (::setenv("FERRY_NULL_LAG", std::to_string(c.lag).c_str(), 1) != 0) throw std::runtime_error("setenv failed");
  Device dev = Device::open({.backend = Backend::null});
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  constexpr std::uint64_t kLeaf = 4096;
  std::vector<HostBuffer> sources;
  std::vector<const HostBuffer*> from;
  for (std::size_t i = 0; i < c.leaves; ++i) sources.push_back(dev.host_pool().allocate(kLeaf));
  for (const HostBuffer& h : sources) from.push_back(&h);
  std::vector<std::byte> memory(c.leaves * kLeaf);  // the engine's memory (null copies nothing)
  TimelineSemaphore released = dev.create_semaphore(0);
  std::uint64_t value = 0;
  std::vector<double> per_leaf;
  for (int b = 0; b < c.batches; ++b) {
    std::vector<DeviceBuffer> into;
    into.reserve(c.leaves);
    for (std::size_t i = 0; i < c.leaves; ++i) {
      AdoptOptions o;
      if (c.pending) o.ready_after = released.at(++value);
      into.push_back(dev.adopt_memory({.pointer = reinterpret_cast<std::uint64_t>(memory.data() + i * kLeaf)}, kLeaf,
                                      owner, std::move(o)));
    }
    const auto t0 = clock_type::now();
    if (one_call) {
      (void)xfer.upload_into(std::span<const HostBuffer* const>(from), std::span<const DeviceBuffer>(into),
                             {.owner_waits = false, .destination_unused = true});
    } else {
      for (std::size_t i = 0; i < c.leaves; ++i) {
        (void)xfer.upload_into(sources[i], 0, kLeaf, into[i], 0, {.owner_waits = false, .destination_unused = true});
      }
    }
    per_leaf.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count() /
                       static_cast<double>(c.leaves));
    if (c.pending) released.signal(value);
    for (DeviceBuffer& d : into) (void)d.release();
    xfer.synchronize();
  }
  return probe::median(per_leaf);
}

int run(int argc, char** argv) {
  Config c;
  probe::Args args(argc, argv);
  while (args.next()) {
    if (args.flag() == "--leaves") c.leaves = std::stoul(args.value());
    else if (args.flag() == "--batches") c.batches = std::stoi(args.value());
    else if (args.flag() == "--lag") c.lag = std::stoull(args.value());
    else if (args.flag() == "--pending") c.pending = args.value() != "0";
    else throw std::runtime_error("unknown argument " + args.flag());
  }
  if (c.leaves == 0 || c.batches <= 0) throw std::runtime_error("--leaves and --batches must be positive");
  // In turns, so that drift on the machine shows in both ways alike.
  std::vector<double> per_call, one_call;
  for (int round = 0; round < 3; ++round) {
    per_call.push_back(time_way(c, false));
    one_call.push_back(time_way(c, true));
  }
  std::printf("null backend, %zu leaves of 4 KiB, %d batches per round, lag %llu, releases %s\n", c.leaves, c.batches,
              static_cast<unsigned long long>(c.lag), c.pending ? "pending" : "reached");
  std::printf("  a call per leaf:     %.3f us per leaf (median of 3 rounds' medians)\n", probe::median(per_call));
  std::printf("  one call for them:   %.3f us per leaf\n", probe::median(one_call));
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return probe::guarded_main("ferry-probe-many-upload", run, argc, argv); }
