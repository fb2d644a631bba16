// SPDX-License-Identifier: MIT
// The conformance suite on an interop pair (ferry/interop.hpp), plus interop-only cases.
// Included by vulkan_cuda.cpp and cuda_vulkan.cpp with FERRY_TEST_PAIR set to the backend.
// Without both backends built, or without a GPU seen through both APIs (CI), the executable
// reports SKIPPED and exits 77.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "conformance.hpp"

using namespace ferry;

namespace {

constexpr Backend kPair = Backend::FERRY_TEST_PAIR;

/// An engine's CUDA stream (what PyTorch's current stream is), destroyed with the object.
struct EngineStream {
  cudaStream_t stream = nullptr;
  EngineStream() { REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess); }
  ~EngineStream() { (void)cudaStreamDestroy(stream); }
};

}  // namespace

CONFORMANCE_CASE("interop: capabilities describe one GPU seen through both APIs") {
  Device dev = conformance::open_device();
  const Capabilities& caps = dev.capabilities();
  CHECK(caps.backend == kPair);
  CHECK(dev.backend() == kPair);
  CHECK(caps.is_gpu);
  CHECK(caps.timeline_export);
  CHECK(caps.host_memory_registration);
  CHECK(std::any_of(caps.uuid.begin(), caps.uuid.end(), [](std::uint8_t b) { return b != 0; }));
  // The same UUID as the Vulkan device and the CUDA device the pair was made of.
  Device vk = Device::open({.backend = Backend::vulkan, .ordinal = 0});
  CHECK(vk.capabilities().uuid == caps.uuid);
  bool cuda_match = false;
  for (int i = 0; i < Device::count(Backend::cuda); ++i) {
    cuda_match = cuda_match || Device::open({.backend = Backend::cuda, .ordinal = i}).capabilities().uuid == caps.uuid;
  }
  CHECK(cuda_match);
  MESSAGE(caps.name << ": " << caps.notes);
}

CONFORMANCE_CASE("interop: a CUDA ordinal of another or no GPU is a typed error") {
  const int n = Device::count(Backend::cuda);
  DeviceOptions o = conformance::options();
  o.peer_ordinal = n;  // one past the last CUDA device
  conformance::expect_error(ErrorCode::invalid_argument, [&] { (void)Device::open(o); },
                            "open(pair, peer_ordinal out of range)");
  Device vk = Device::open({.backend = Backend::vulkan, .ordinal = o.ordinal});
  int other = -1;
  for (int i = 0; i < n && other < 0; ++i) {
    if (Device::open({.backend = Backend::cuda, .ordinal = i}).capabilities().uuid != vk.capabilities().uuid) other = i;
  }
  if (other < 0) {
    MESSAGE("not supported here: a UUID mismatch needs a second GPU (" << n << " CUDA device(s))");
  } else {
    o.peer_ordinal = other;
    conformance::expect_error(ErrorCode::invalid_argument, [&] { (void)Device::open(o); },
                              "open(pair, CUDA device of another GPU)");
  }
}

// The steady-state loop of a loader feeding a consumer of the other API: random sizes and
// offsets, upload (owner_owned) -> consumer compute -> download of the result, with no host
// wait anywhere until the final check; the consumer waits for each copy on the GPU.
CONFORMANCE_CASE("interop: many random uploads consumed by the other API, no host waits") {
  Device dev = conformance::open_device();
  std::unique_ptr<EngineStream> engine;
  Queue owner = dev.queue(QueueRole::compute);
  if (kPair == Backend::vulkan_cuda) {
    engine = std::make_unique<EngineStream>();
    owner = dev.adopt_queue(QueueRole::compute, NativeQueue{.handle = engine->stream}, "engine");
  }
  Transfer transfer(dev);
  const int iterations = conformance::small() ? 40 : 300;
  constexpr std::uint64_t kMax = 192 * 1024;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::uint64_t> size_of(1, kMax);
  HostBuffer src = dev.host_pool().allocate(kMax + 4096);
  conformance::fill_pattern(src.span(), 5);
  HostBuffer dst = dev.host_pool().allocate(static_cast<std::uint64_t>(iterations) * kMax);
  struct Step {
    std::uint64_t offset, bytes;
  };
  std::vector<Step> steps;
  TimelinePoint last;
  const std::uint64_t waits_before = dev.host_waits();
  for (int i = 0; i < iterations; ++i) {
    const Step s{rng() % 4096, size_of(rng)};
    Upload up = transfer.upload(src, s.offset, s.bytes, owner);
    DeviceBuffer out = dev.pool().allocate(s.bytes, owner, {.tag = "consumer output"});
    run_synthetic_compute(owner, up.buffer, out, 1 + static_cast<std::uint32_t>(i % 3));
    up.buffer.release();
    last = transfer.download(out, dst, static_cast<std::uint64_t>(i) * kMax);
    out.release();
    steps.push_back(s);
  }
  const std::uint64_t waits_in_loop = dev.host_waits() - waits_before;
  CHECK_MESSAGE(waits_in_loop == 0, waits_in_loop << " host waits in the steady-state loop");
  last.wait(std::chrono::minutes(2));
  for (int i = 0; i < iterations; ++i) {
    const Step& s = steps[static_cast<std::size_t>(i)];
    const auto got = dst.span().subspan(static_cast<std::size_t>(i) * kMax, s.bytes);
    std::int64_t bad = -1;
    const int add = 1;  // out = in + 1, whatever the number of passes
    for (std::uint64_t k = 0; k < s.bytes && bad < 0; ++k) {
      const auto want = static_cast<std::byte>(static_cast<unsigned>(conformance::pattern_byte(5, s.offset + k)) + add);
      if (got[k] != want) bad = static_cast<std::int64_t>(k);
    }
    CHECK_MESSAGE(bad == -1, "iteration " << i << " (" << s.bytes << " bytes at " << s.offset
                                          << "): first wrong byte at " << bad);
    if (bad != -1) break;
  }
  // The footprint claim holds across APIs: released uploads went back to the owner.
  CHECK(dev.pool().get_budget().peak_reserved_bytes <= 64ull << 20);
  conformance::finish_device(dev);  // before the engine's stream goes
}

int main(int argc, char** argv) {
  if (int skip = conformance::presence_check(kPair)) return skip;
  // The Vulkan side runs under validation when the layer is there (CI has no pair device).
  const char* layers = std::getenv("VK_INSTANCE_LAYERS");
  const bool validation = layers != nullptr && std::string(layers).find("VK_LAYER_KHRONOS_validation") != std::string::npos;
  try {
    Device probe = Device::open({.backend = kPair, .validation = validation});
  } catch (const Error& e) {
    if (e.code() != ErrorCode::unsupported) throw;
    std::printf("SKIPPED: %s: %s\n", std::string(to_string(kPair)).c_str(), e.what());
    return 77;
  }
  conformance::configure({.backend = kPair, .validation = validation});
  if (validation) {
    conformance::set_end_of_case_check([](Device& dev) {
      const std::uint64_t n = dev.validation_messages();
      CHECK_MESSAGE(n == 0, n << " Vulkan validation messages (see stderr)");
    });
  }
  std::printf("conformance: %s, validation %s\n", std::string(to_string(kPair)).c_str(), validation ? "on" : "off");
  return conformance::run(argc, argv);
}
