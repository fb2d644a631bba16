// SPDX-License-Identifier: MIT
// The conformance fixture (see conformance.hpp).
#include "conformance.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace conformance {
namespace {

Config g_config;
DeviceCheck g_check;
std::vector<ferry::Device> g_opened;  // devices opened by the running case
ForeignAllocator g_foreign;
ImageAllocator g_images;

}  // namespace

void set_foreign_allocator(ForeignAllocator allocator) { g_foreign = std::move(allocator); }

std::unique_ptr<ForeignMemory> allocate_foreign(ferry::Device& device, std::uint64_t bytes) {
  if (!g_foreign) {
    MESSAGE("not supported: this backend's test main allocates no foreign memory");
    return nullptr;
  }
  return g_foreign(device, bytes);
}

void set_image_allocator(ImageAllocator allocator) { g_images = std::move(allocator); }

std::unique_ptr<ForeignImage> allocate_image(ferry::Device& device, const ferry::ImageDesc& desc) {
  if (!g_images) {
    MESSAGE("not supported: this backend's test main creates no images");
    return nullptr;
  }
  std::string why_not;
  auto image = g_images(device, desc, why_not);
  if (!image) MESSAGE("not supported: " << ferry::to_string(desc.format) << ": " << why_not);
  return image;
}

void configure(const Config& config) { g_config = config; }
const Config& config() { return g_config; }

ferry::DeviceOptions options() {
  ferry::DeviceOptions o;
  o.backend = g_config.backend;
  o.ordinal = 0;
  o.validation = g_config.validation;
  return o;
}

ferry::Device open_device() {
  ferry::Device device = ferry::Device::open(options());
  g_opened.push_back(device);
  return device;
}

ferry::Queue try_create_queue(ferry::Device& device, ferry::QueueRole role,
                             const std::string& name) {
  try {
    return device.create_queue(role, name);
  } catch (const ferry::Error& e) {
    if (e.code() != ferry::ErrorCode::unsupported) throw;
    MESSAGE("not supported: no queue left for '" << name << "': " << e.message());
    return ferry::Queue{};
  }
}

int presence_check(ferry::Backend backend) {
  const std::string name(ferry::to_string(backend));
  if (!ferry::Device::built_with(backend)) {
    std::printf("SKIPPED: %s: no device (backend not built; configure with -D%s=enabled)\n",
                name.c_str(), name.c_str());
    std::fflush(stdout);
    return 77;
  }
  if (ferry::Device::count(backend) == 0) {
    std::printf("SKIPPED: %s: no device (built, but the backend found no device on this machine)\n",
                name.c_str());
    std::fflush(stdout);
    return 77;
  }
  return 0;
}

int run(int argc, char** argv) {
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}

void set_end_of_case_check(DeviceCheck check) { g_check = std::move(check); }

bool small() {
  const char* v = std::getenv("FERRY_TEST_SMALL");
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

std::byte pattern_byte(std::uint64_t seed, std::uint64_t index) {
  // 251 is prime: the pattern does not repeat with any power-of-two stride, so a copy landing
  // at a wrong aligned offset shows.
  return static_cast<std::byte>((index * 7 + seed * 31 + (index / 251) * 13) % 251);
}

void fill_pattern(std::span<std::byte> bytes, std::uint64_t seed) {
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = pattern_byte(seed, i);
}

std::int64_t first_mismatch(std::span<const std::byte> bytes, std::uint64_t seed, int add) {
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    auto want = static_cast<std::byte>(static_cast<unsigned>(pattern_byte(seed, i)) + add);
    if (bytes[i] != want) return static_cast<std::int64_t>(i);
  }
  return -1;
}

void check_round_trip(ferry::Device& device, ferry::Transfer& transfer, std::uint64_t bytes) {
  ferry::Queue owner = device.queue(ferry::QueueRole::compute);
  ferry::HostBuffer src = device.host_pool().allocate(bytes);
  ferry::HostBuffer dst = device.host_pool().allocate(bytes);
  fill_pattern(src.span(), 99);
  ferry::Upload up = transfer.upload(src, owner);
  ferry::DeviceBuffer out = device.pool().allocate(bytes, owner);
  ferry::run_synthetic_compute(owner, up.buffer, out);
  ferry::TimelinePoint done = transfer.download(out, dst);
  up.buffer.release();
  out.release();
  done.wait();
  CHECK_MESSAGE(first_mismatch(dst.span(), 99, 1) == -1, "round trip after an error");
}

namespace {

void end_checks(ferry::Device& device) {
  if (!device.is_open()) return;
  try {
    device.pool().validate();
  } catch (const std::exception& e) {
    FAIL_CHECK("pool invariant broken at the end of the case: " << e.what());
  }
  if (g_check) {
    try {
      g_check(device);
    } catch (const std::exception& e) {
      FAIL_CHECK("end-of-case check threw: " << e.what());
    }
  }
}

void close_checked(ferry::Device& device) {
  try {
    device.close();
  } catch (const std::exception& e) {
    FAIL_CHECK("Device::close threw: " << e.what());
  }
}

}  // namespace

void finish_device(ferry::Device& device) {
  end_checks(device);
  close_checked(device);
}

CaseGuard::CaseGuard() { g_opened.clear(); }

CaseGuard::~CaseGuard() {
  std::vector<ferry::Device> opened = std::move(g_opened);
  g_opened.clear();
  for (ferry::Device& device : opened) end_checks(device);
  for (ferry::Device& device : opened) close_checked(device);
}

}  // namespace conformance
