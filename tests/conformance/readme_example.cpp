// SPDX-License-Identifier: MIT
// The README's usage example, compiled verbatim (between the markers) and run on the device
// under test; a second case checks that README.md shows exactly this text.
#include <fstream>
#include <sstream>
#include <string>

#include "conformance.hpp"

#define main readme_main  // the snippet's main() is compiled, not run
// [readme-example-begin]
#include <ferry/ferry.hpp>
#include <ferry/testing.hpp>  // run_synthetic_compute: a stand-in for your kernels

#include <cstdio>
#include <cstring>

// One upload per step into memory owned by the compute queue, used there, freed there. The
// copy runs while the compute queue does the step's work that does not read the batch.
int run_steps(ferry::Device dev, int steps) {
  ferry::Queue compute = dev.queue(ferry::QueueRole::compute);
  ferry::Transfer xfer(dev);                                  // copies run on the transfer queue
  ferry::HostBuffer batch = dev.host_pool().allocate(64 << 20);  // pinned
  std::memset(batch.data(), 1, batch.size());
  ferry::DeviceBuffer weights = xfer.upload(batch, compute).buffer;  // uploaded once

  for (int step = 0; step < steps; ++step) {
    // Returns at once; with owner_waits = false you place the compute queue's wait for the copy.
    ferry::Upload up = xfer.upload(batch, compute, {.owner_waits = false});
    ferry::DeviceBuffer out = dev.pool().allocate(batch.size(), compute);
    ferry::run_synthetic_compute(compute, weights, out);      // your kernels: overlap the copy
    compute.wait(up.ready);                                   // GPU-side wait, host not blocked
    ferry::run_synthetic_compute(compute, up.buffer, out);    // the batch's first use
    up.buffer.release();                                      // stream-ordered free on compute
    out.release();
  }
  weights.release();
  compute.synchronize();

  ferry::PoolBudget b = dev.pool().get_budget();
  std::printf("%s: peak reserved %.3f GB, peak active %.3f GB, stranded %.3f GB\n",
              dev.capabilities().name.c_str(), b.peak_reserved_bytes / 1e9,
              b.peak_active_bytes / 1e9, b.peak_stranded_bytes / 1e9);
  return 0;
}

int main() {
  try {
    return run_steps(ferry::Device::open_default(), 30);
  } catch (const ferry::Error& e) {  // every failure is a typed ferry::Error
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
// [readme-example-end]
#undef main

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string between(const std::string& text, const std::string& begin, const std::string& end) {
  auto b = text.find(begin);
  if (b == std::string::npos) return {};
  b = text.find('\n', b);
  if (b == std::string::npos) return {};
  auto e = text.find(end, b + 1);
  if (e == std::string::npos) return {};
  std::string s = text.substr(b + 1, e - b - 1);
  return s;
}

}  // namespace

CONFORMANCE_CASE("readme: the usage example runs") {
  ferry::Device dev = conformance::open_device();
  CHECK(run_steps(dev, 4) == 0);
  ferry::PoolBudget b = dev.pool().get_budget();
  // the 64 MiB weights, one 64 MiB input and one 64 MiB output at a time: nothing more is
  // ever reserved
  CHECK(b.peak_reserved_bytes <= 3 * (64u << 20) + (2u << 20));
  CHECK(b.active_bytes == 0);
}

#ifdef FERRY_SOURCE_ROOT
CONFORMANCE_CASE("readme: README.md shows the example exactly") {
  const std::string root = FERRY_SOURCE_ROOT;
  const std::string source = read_file(root + "/tests/conformance/readme_example.cpp");
  const std::string readme = read_file(root + "/README.md");
  REQUIRE_FALSE(source.empty());
  REQUIRE_FALSE(readme.empty());
  const std::string code = between(source, "// [readme-example-begin]", "// [readme-example-end]");
  const std::string shown = between(readme, "<!-- readme-example -->", "```\n");
  REQUIRE_FALSE(code.empty());
  // the README block starts with the ```cpp fence line
  const std::string fence = "```cpp\n";
  REQUIRE(shown.rfind(fence, 0) == 0);
  CHECK_MESSAGE(shown.substr(fence.size()) == code,
                "README.md's usage example differs from tests/conformance/readme_example.cpp");
}
#endif
