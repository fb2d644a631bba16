// SPDX-License-Identifier: MIT
// The backend registry lists what this build compiled: meson passes every backend it knows
// (FERRY_TEST_BACKENDS) and those it built (FERRY_TEST_BUILT_BACKENDS), comma-separated, and
// the public API must agree: Device::built_with, names, counts, the one ordinal check, and an
// unbuilt backend refusing with `unsupported` that names the meson option building it.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <source_location>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"

using namespace ferry;

namespace {

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    if (comma > start) out.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

const std::vector<std::string> kAll = split(FERRY_TEST_BACKENDS);
const std::vector<std::string> kBuilt = split(FERRY_TEST_BUILT_BACKENDS);

bool built(const std::string& name) { return std::find(kBuilt.begin(), kBuilt.end(), name) != kBuilt.end(); }

/// The meson arguments that build `name`: an interop pair needs both of its APIs.
std::vector<std::string> options_of(const std::string& name) {
  if (name == "vulkan_cuda" || name == "cuda_vulkan") return {"-Dvulkan=enabled", "-Dcuda=enabled"};
  return {"-D" + name + "=enabled"};
}

}  // namespace

TEST_CASE("registry: every enumerator of Backend is a backend meson knows, by name") {
  REQUIRE(!kAll.empty());
  for (std::size_t i = 0; i < kAll.size(); ++i) {
    const auto b = static_cast<Backend>(i);
    CAPTURE(i);
    const std::string name(to_string(b));
    CHECK(std::find(kAll.begin(), kAll.end(), name) != kAll.end());
    CHECK(parse_backend(name) == b);
  }
  // One past the last enumerator is no backend.
  const auto past = static_cast<Backend>(kAll.size());
  CHECK(to_string(past) == "unknown");
  CHECK_FALSE(Device::built_with(past));
  CHECK(Device::count(past) == 0);
  CHECK_THROWS_AS((void)Device::open({.backend = past}), Error);
  try {
    (void)parse_backend("nope");
    FAIL("parse_backend accepted an unknown name");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    for (const std::string& name : kAll) CHECK_MESSAGE(e.message().find(name) != std::string::npos, e.message());
  }
}

TEST_CASE("registry: built_with matches the build; an unbuilt backend names its option") {
  for (const std::string& name : kAll) {
    CAPTURE(name);
    const Backend b = parse_backend(name);
    CHECK(Device::built_with(b) == built(name));
    if (built(name)) continue;
    CHECK(Device::count(b) == 0);
    try {
      (void)Device::open({.backend = b});
      FAIL("opening a backend that was not built succeeded");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::unsupported);
      const std::string what = e.message();
      CHECK_MESSAGE(what.find("built without the " + name + " backend") != std::string::npos, what);
      for (const std::string& option : options_of(name)) {
        CHECK_MESSAGE(what.find(option) != std::string::npos, what);
      }
      CHECK(e.where().line() != 0);  // the caller's line
    }
  }
  for (const std::string& name : kBuilt) {
    CHECK_MESSAGE(std::find(kAll.begin(), kAll.end(), name) != kAll.end(), name);
  }
}

TEST_CASE("registry: Device::open checks the ordinal against the backend's count") {
  for (const std::string& name : kBuilt) {
    CAPTURE(name);
    const Backend b = parse_backend(name);
    const int n = Device::count(b);
    try {
      (void)Device::open({.backend = b, .ordinal = -1});
      FAIL("a negative ordinal was accepted");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::invalid_argument);
    }
    if (n == 0) {
      // No device: the backend says why, which is not the caller's mistake.
      try {
        (void)Device::open({.backend = b});
        FAIL("a backend without devices opened one");
      } catch (const Error& e) {
        CHECK_MESSAGE(e.code() == ErrorCode::unsupported, e.what());
      }
      continue;
    }
    try {
      (void)Device::open({.backend = b, .ordinal = n});
      FAIL("an ordinal past the last device was accepted");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::invalid_argument);
      const std::string expected = "ordinal " + std::to_string(n) + " out of range (" + std::to_string(n) +
                                   (n == 1 ? " device)" : " devices)");
      CHECK_MESSAGE(e.message().find(expected) != std::string::npos, e.message());
    }
  }
}

TEST_CASE("registry: open_default picks a device that works, never a null or composite one") {
  Device best = Device::open_default();
  REQUIRE(best.is_open());
  const Backend b = best.backend();
  CHECK(b != Backend::null);
  CHECK(b != Backend::vulkan_cuda);
  CHECK(b != Backend::cuda_vulkan);
  CHECK(Device::built_with(b));
  if (Device::count(Backend::cuda) > 0) CHECK(b == Backend::cuda);
  if (Device::built_with(Backend::host) && Device::count(Backend::cuda) == 0 && Device::count(Backend::vulkan) == 0 &&
      Device::count(Backend::hip) == 0) {
    CHECK(b == Backend::host);
  }
  MESSAGE("open_default chose " << to_string(b) << ": " << best.capabilities().name);
}

#if !FERRY_HAVE_VULKAN
// ferry/vulkan.hpp needs the Vulkan headers; without the backend its entry point still links
// (the declaration below is the header's) and refuses, naming the option.
namespace ferry::vulkan {
struct AdoptInfo;
Device adopt_device(const AdoptInfo& info, std::source_location where);
}  // namespace ferry::vulkan

TEST_CASE("registry: vulkan::adopt_device without the Vulkan backend names the option") {
  int placeholder = 0;  // never read: the refusing entry point ignores its argument
  try {
    (void)vulkan::adopt_device(*reinterpret_cast<const vulkan::AdoptInfo*>(&placeholder),
                               std::source_location::current());
    FAIL("adopt_device succeeded without the Vulkan backend");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::unsupported);
    CHECK_MESSAGE(e.message().find("-Dvulkan=enabled") != std::string::npos, e.message());
  }
}
#endif
