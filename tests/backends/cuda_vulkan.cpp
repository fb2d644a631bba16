// SPDX-License-Identifier: MIT
// The conformance suite on the cuda_vulkan interop pair (see pair.hpp).
#define FERRY_TEST_PAIR cuda_vulkan
#include "pair.hpp"
