// SPDX-License-Identifier: MIT
// A consumer of an installed ferry, built by tests/consumer/check_pkgconfig.py with only the
// flags of `pkg-config --cflags --libs ferry`: one upload and download on the host backend.
#include <ferry/ferry.hpp>

#include <cstdio>
#include <cstring>
#include <vector>

int main() {
  try {
    ferry::Device dev = ferry::Device::open({.backend = ferry::Backend::host});
    ferry::Queue compute = dev.queue(ferry::QueueRole::compute);
    ferry::Transfer xfer(dev);
    ferry::HostBuffer src = dev.host_pool().allocate(4096);
    std::memset(src.data(), 7, src.size());
    ferry::Upload up = xfer.upload(src, compute);
    std::vector<std::byte> back(src.size());
    xfer.download(up.buffer, std::span<std::byte>(back));
    up.buffer.release();
    const bool ok = std::memcmp(back.data(), src.data(), back.size()) == 0;
    std::printf("consumer: ferry %s, round trip %s\n", FERRY_VERSION, ok ? "ok" : "differs");
    return ok ? 0 : 1;
  } catch (const ferry::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
