// SPDX-License-Identifier: MIT
// Example: a model input made of KeyedJaggedTensor-like parts uploads in one call and comes
// back with the same shape holding device views.
//
//   build/tools/ferry-example-structured [--backend host|cuda|vulkan|hip|auto]
//
// The type opts in with two functions found by argument-dependent lookup:
//   ferry_host_views(const T&)                -> std::vector<ferry::HostView>
//   ferry_device_shape(const T&, UploadBatch) -> the device-side shape
#include <ferry/ferry.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

namespace model {

/// Host side: a jagged feature batch, like TorchRec's KeyedJaggedTensor.
struct JaggedFeatures {
  std::vector<std::int32_t> keys;     // one id per feature
  std::vector<std::int64_t> values;   // all ids of all rows, concatenated
  std::vector<std::int32_t> lengths;  // ids per (feature, row)
  std::vector<std::int32_t> offsets;  // exclusive prefix sum of lengths
  std::vector<float> weights;         // one weight per value
};

/// Device side: the same fields as device views.
struct DeviceJaggedFeatures {
  ferry::DeviceView keys, values, lengths, offsets, weights;
};

template <class V>
ferry::HostView view_of(const std::vector<V>& v) {
  return {v.data(), v.size() * sizeof(V)};
}

std::vector<ferry::HostView> ferry_host_views(const JaggedFeatures& f) {
  return {view_of(f.keys), view_of(f.values), view_of(f.lengths), view_of(f.offsets), view_of(f.weights)};
}

DeviceJaggedFeatures ferry_device_shape(const JaggedFeatures&, const ferry::UploadBatch& b) {
  return {b.views[0], b.views[1], b.views[2], b.views[3], b.views[4]};
}

static_assert(ferry::Uploadable<JaggedFeatures>);

JaggedFeatures make_batch(int features, int rows) {
  JaggedFeatures f;
  for (int k = 0; k < features; ++k) {
    f.keys.push_back(k);
    for (int r = 0; r < rows; ++r) {
      const int n = 1 + (k * 31 + r * 7) % 23;
      f.offsets.push_back(static_cast<std::int32_t>(f.values.size()));
      f.lengths.push_back(n);
      for (int i = 0; i < n; ++i) {
        f.values.push_back(static_cast<std::int64_t>(k) << 32 | static_cast<std::int64_t>(r * 1000 + i));
        f.weights.push_back(1.0f / static_cast<float>(n));
      }
    }
  }
  return f;
}

}  // namespace model

int main(int argc, char** argv) {
  try {
    const std::string backend = argc > 2 && std::string(argv[1]) == "--backend" ? argv[2] : "auto";
    ferry::Device dev = backend == "auto" ? ferry::Device::open_default()
                                          : ferry::Device::open({.backend = ferry::parse_backend(backend)});
    ferry::Queue compute = dev.queue(ferry::QueueRole::compute);
    ferry::Transfer xfer(dev);

    const model::JaggedFeatures batch = model::make_batch(26, 512);
    auto [uploaded, device] = ferry::upload_structured(xfer, batch, compute);  // one call, no sizes
    // ... launch kernels on `compute` reading device.values etc.; here: read everything back.
    std::vector<std::byte> back(uploaded.buffer.size());
    xfer.download(uploaded.buffer, std::span<std::byte>(back));

    const auto views = ferry_host_views(batch);
    const ferry::DeviceView* dv[] = {&device.keys, &device.values, &device.lengths, &device.offsets, &device.weights};
    const char* names[] = {"keys", "values", "lengths", "offsets", "weights"};
    bool ok = true;
    std::printf("%s (%s): one upload of %zu buffers, %llu bytes\n", dev.capabilities().name.c_str(),
                std::string(ferry::to_string(dev.backend())).c_str(), views.size(),
                static_cast<unsigned long long>(uploaded.buffer.size()));
    for (std::size_t i = 0; i < views.size(); ++i) {
      const bool same = std::memcmp(back.data() + uploaded.offsets[i], views[i].data, views[i].size) == 0;
      ok = ok && same && dv[i]->size == views[i].size;
      std::printf("  %-8s %9llu bytes at offset %9llu: %s\n", names[i], static_cast<unsigned long long>(views[i].size),
                  static_cast<unsigned long long>(uploaded.offsets[i]), same ? "ok" : "MISMATCH");
    }
    uploaded.buffer.release();  // stream-ordered on the compute queue
    compute.synchronize();
    return ok ? 0 : 1;
  } catch (const ferry::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return e.code() == ferry::ErrorCode::unsupported ? 77 : 1;
  }
}
