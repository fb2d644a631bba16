// SPDX-License-Identifier: MIT
// Example: a TorchRec-shaped training batch -- 26 sparse features (int64 values, int32
// lengths, float weights on half of them, several features empty), a dense 8192 x 13 float
// tensor and labels -- goes to the device in one call and comes back in one call.
//
//   build/tools/ferry-example-structured [--backend host|cuda|vulkan|hip|auto]
//
// The structure opts in with one function found by argument-dependent lookup that lists its
// buffers once, for both directions ("Structured transfers" in ferry/transfer.hpp). The code
// between the two "user glue" marks is all a program writes to move such a batch.
#include <ferry/ferry.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace model {

// --- user glue: begin
struct Feature {                      // one key of a KeyedJaggedTensor
  std::vector<std::int64_t> values;   // ids of every row, concatenated
  std::vector<std::int32_t> lengths;  // ids per row
  std::vector<float> weights;         // one per value; empty for an unweighted feature
  bool operator==(const Feature&) const = default;
};
struct Batch {
  std::vector<Feature> features;
  std::vector<float> dense;   // rows x 13
  std::vector<float> labels;  // one per row
};
struct DeviceFeature {
  ferry::DeviceView values, lengths, weights;
};
struct DeviceBatch {
  std::vector<DeviceFeature> features;
  ferry::DeviceView dense, labels;
};

// Every buffer of a Batch, once: the upload, the device shape and the download all use it.
template <ferry::maybe_const<Batch> B, class Leaf>
DeviceBatch ferry_leaves(B& b, Leaf&& leaf) {
  DeviceBatch d;
  for (auto& f : b.features) d.features.push_back({leaf(f.values), leaf(f.lengths), leaf(f.weights)});
  d.dense = leaf(b.dense);
  d.labels = leaf(b.labels);
  return d;
}
// --- user glue: end

constexpr int kFeatures = 26, kRows = 8192, kDense = 13;

/// Feature k is empty (no id in any row) when k % 6 == 0 (k = 0, 6, ..., 24); even features
/// are weighted.
Batch make_batch() {
  Batch b;
  for (int k = 0; k < kFeatures; ++k) {
    Feature& f = b.features.emplace_back();
    for (int r = 0; r < kRows; ++r) {
      const int n = k % 6 == 0 ? 0 : (k * 31 + r * 7) % 5;
      f.lengths.push_back(n);
      for (int i = 0; i < n; ++i) {
        f.values.push_back(static_cast<std::int64_t>(k) << 32 | (r * 8 + i));
        if (k % 2 == 0) f.weights.push_back(1.0f / static_cast<float>(n));
      }
    }
  }
  for (int i = 0; i < kRows * kDense; ++i) b.dense.push_back(static_cast<float>(i % 1000) * 0.5f);
  for (int r = 0; r < kRows; ++r) b.labels.push_back(static_cast<float>(r % 2));
  return b;
}

}  // namespace model

int main(int argc, char** argv) {
  try {
    const std::string backend = argc > 2 && std::string(argv[1]) == "--backend" ? argv[2] : "auto";
    ferry::Device dev = backend == "auto" ? ferry::Device::open_default()
                                          : ferry::Device::open({.backend = ferry::parse_backend(backend)});
    ferry::Queue compute = dev.queue(ferry::QueueRole::compute);
    ferry::Transfer xfer(dev);

    const model::Batch batch = model::make_batch();
    // --- user glue: begin
    auto [uploaded, device] = ferry::upload_structured(xfer, batch, compute);  // one call, no sizes
    // ... kernels on `compute` read device.features[k].values etc. here ...
    model::Batch back = batch;  // a destination of the same shape
    // --- user glue: end
    // Clear every leaf, so that the download has to bring each one back (the same
    // description of the leaves serves any walk over them).
    (void)ferry_leaves(back, [](auto& leaf) {
      std::ranges::fill(leaf, 0);
      return ferry::DeviceView{};
    });
    // --- user glue: begin
    ferry::download_structured(xfer, uploaded, back);  // one call, every leaf
    // --- user glue: end

    int leaves = 0, empty = 0, wrong = 0;
    for (int k = 0; k < model::kFeatures; ++k) {
      const model::Feature& f = batch.features[static_cast<std::size_t>(k)];
      const model::DeviceFeature& d = device.features[static_cast<std::size_t>(k)];
      wrong += !(back.features[static_cast<std::size_t>(k)] == f);
      wrong += d.values.size != f.values.size() * 8 || d.lengths.size != f.lengths.size() * 4 ||
               d.weights.size != f.weights.size() * 4;
      leaves += 3;
      empty += f.values.empty() + f.lengths.empty() + f.weights.empty();
    }
    wrong += (back.dense != batch.dense) + (back.labels != batch.labels);
    std::printf("%s (%s): %d leaves (%d empty), %llu bytes: one upload, one download: %s\n",
                dev.capabilities().name.c_str(), std::string(ferry::to_string(dev.backend())).c_str(), leaves + 2,
                empty, static_cast<unsigned long long>(uploaded.buffer.size()), wrong == 0 ? "ok" : "MISMATCH");
    uploaded.buffer.release();  // stream-ordered on the compute queue
    compute.synchronize();
    return wrong == 0 ? 0 : 1;
  } catch (const ferry::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return e.code() == ferry::ErrorCode::unsupported ? 77 : 1;
  }
}
