// SPDX-License-Identifier: MIT
// percentiles() (bench.hpp), on its own so that the CUDA reference module
// (ferry-bench-cuda, vendor_cuda.cpp) compiles it too.
#include <algorithm>
#include <vector>

#include "bench.hpp"

namespace ferry_bench {

Percentiles percentiles(std::vector<double> samples) {
  Percentiles p;
  if (samples.empty()) return p;
  std::sort(samples.begin(), samples.end());
  const auto at = [&](double q) {
    const auto i = static_cast<std::size_t>(q * static_cast<double>(samples.size() - 1) + 0.5);
    return samples[std::min(i, samples.size() - 1)];
  };
  p.median = at(0.5);
  p.p90 = at(0.9);
  return p;
}

}  // namespace ferry_bench
