// SPDX-License-Identifier: MIT
// A consumer of an installed ferry-testkit, built by tests/consumer/check_pkgconfig.py with only
// the flags of `pkg-config --cflags --libs ferry-testkit` (which bring libferry's): an upload,
// the synthetic compute step and a download on a host device, the bytes checked.
#include <ferry/ferry.hpp>
#include <ferry/testing.hpp>

#include <cstddef>
#include <cstdio>
#include <vector>

int main() {
  try {
    ferry::Device dev = ferry::Device::open({.backend = ferry::Backend::host});
    ferry::Queue compute = dev.queue(ferry::QueueRole::compute);
    ferry::Transfer xfer(dev);
    std::vector<std::byte> in(4096, std::byte{41});
    ferry::Upload up = xfer.upload(std::span<const std::byte>(in), compute);
    ferry::DeviceBuffer out = dev.pool().allocate(in.size(), compute);
    ferry::run_synthetic_compute(compute, up.buffer, out);
    std::vector<std::byte> back(in.size());
    xfer.download(out, std::span<std::byte>(back));
    bool ok = true;
    for (std::byte b : back) ok = ok && b == std::byte{42};
    up.buffer.release();
    out.release();
    std::printf("consumer-testkit: ferry %s, synthetic compute %s\n", FERRY_VERSION, ok ? "ok" : "wrong");
    return ok ? 0 : 1;
  } catch (const ferry::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
