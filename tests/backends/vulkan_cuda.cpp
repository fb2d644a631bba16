// SPDX-License-Identifier: MIT
// The conformance suite on the vulkan_cuda interop pair (see pair.hpp).
#define FERRY_TEST_PAIR vulkan_cuda
#include "pair.hpp"
