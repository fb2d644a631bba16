// SPDX-License-Identifier: MIT
// A consumer of an installed ferry-export, built by tests/consumer/check_pkgconfig.py with only
// the flags of `pkg-config --cflags --libs ferry-export` (which bring libferry's): a host
// device's snapshot written as JSON by libferry and as a Chrome trace by ferry-export.
#include <ferry/export.hpp>
#include <ferry/ferry.hpp>

#include <cstdio>
#include <string>

int main() {
  try {
    ferry::Device dev = ferry::Device::open({.backend = ferry::Backend::host});
    ferry::Queue compute = dev.queue(ferry::QueueRole::compute);
    ferry::DeviceBuffer b = dev.pool().allocate(4096, compute);
    const ferry::MemorySnapshot snap = dev.pool().snapshot();
    const bool ok = ferry::to_json(snap).find("\"segments\"") != std::string::npos &&
                    ferry::to_chrome_trace(snap).find("\"traceEvents\"") != std::string::npos;
    b.release();
    std::printf("consumer-export: ferry %s, exporters %s\n", FERRY_VERSION, ok ? "ok" : "wrong");
    return ok ? 0 : 1;
  } catch (const ferry::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
