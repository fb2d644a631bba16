// SPDX-License-Identifier: MIT
// A GPU backend whose vendor library cannot be loaded: ferry still loads, the backend counts no
// device and says its runtime is absent, and opening it is `unsupported` naming the library
// and what installs it. meson runs this with FERRY_CUDA_LIBRARY and FERRY_HIP_LIBRARY naming a
// file that does not exist (FERRY_TEST_MISSING_LIBRARY, the same path), which hides a runtime
// the machine has as well as one it lacks.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "ferry/ferry.hpp"

namespace {

std::string missing_path() {
  const char* p = std::getenv("FERRY_TEST_MISSING_LIBRARY");
  REQUIRE_MESSAGE(p != nullptr, "meson sets FERRY_TEST_MISSING_LIBRARY");
  return p;
}

void check_missing(ferry::Backend backend, const char* origin, const char* variable) {
  const std::string name(ferry::to_string(backend));
  CAPTURE(name);
  if (!ferry::Device::built_with(backend)) {
    CHECK_FALSE(ferry::Device::runtime_present(backend));
    MESSAGE("not built: only runtime_present checked");
    return;
  }
  CHECK_FALSE(ferry::Device::runtime_present(backend));
  CHECK(ferry::Device::count(backend) == 0);
  try {
    (void)ferry::Device::open({.backend = backend});
    FAIL("open succeeded without its runtime");
  } catch (const ferry::Error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(e.code() == ferry::ErrorCode::unsupported);
    CHECK(what.find(missing_path()) != std::string::npos);  // the library it tried
    CHECK(what.find(origin) != std::string::npos);          // what installs it
    CHECK(what.find(variable) != std::string::npos);        // how to name another
  }
}

}  // namespace

TEST_CASE("a CUDA backend without libcuda is unsupported, naming the library") {
  check_missing(ferry::Backend::cuda, "NVIDIA driver", "FERRY_CUDA_LIBRARY");
  // The interop pairs need CUDA's driver too.
  CHECK_FALSE(ferry::Device::runtime_present(ferry::Backend::vulkan_cuda));
  CHECK_FALSE(ferry::Device::runtime_present(ferry::Backend::cuda_vulkan));
}

TEST_CASE("a HIP backend without libamdhip64 is unsupported, naming the library") {
  check_missing(ferry::Backend::hip, "HIP runtime", "FERRY_HIP_LIBRARY");
}

TEST_CASE("backends without a vendor library stay present, and a default device opens") {
  CHECK(ferry::Device::runtime_present(ferry::Backend::host) == ferry::Device::built_with(ferry::Backend::host));
  CHECK(ferry::Device::runtime_present(ferry::Backend::null) == ferry::Device::built_with(ferry::Backend::null));
  if (ferry::Device::built_with(ferry::Backend::host)) {
    ferry::Device dev = ferry::Device::open_default();  // CUDA and HIP give way, quietly
    CHECK(dev.backend() != ferry::Backend::cuda);
    CHECK(dev.backend() != ferry::Backend::hip);
  }
}
