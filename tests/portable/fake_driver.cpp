// SPDX-License-Identifier: MIT
// The CUDA backend over a driver that loads but sees no device (fake_cuda.cpp, named by
// FERRY_CUDA_LIBRARY): the runtime is present, no device is counted, and opening one is
// `unsupported` with the driver's own error name. The fake aborts on any request made at the
// wrong ABI version or with the wrong flags, so a pass also means the table was resolved as
// the backend's pointer types require.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>

#include "ferry/ferry.hpp"

TEST_CASE("a CUDA driver without devices: runtime present, no device, open names the driver's error") {
  if (!ferry::Device::built_with(ferry::Backend::cuda)) {
    MESSAGE("cuda not built");
    return;
  }
  CHECK(ferry::Device::runtime_present(ferry::Backend::cuda));
  CHECK(ferry::Device::count(ferry::Backend::cuda) == 0);
  try {
    (void)ferry::Device::open({.backend = ferry::Backend::cuda});
    FAIL("open succeeded on a driver without devices");
  } catch (const ferry::Error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(e.code() == ferry::ErrorCode::unsupported);
    CHECK(what.find("no CUDA device present") != std::string::npos);
    CHECK(what.find("CUDA_ERROR_NO_DEVICE") != std::string::npos);
  }
}
