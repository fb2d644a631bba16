// SPDX-License-Identifier: MIT
// The conformance suite on the CUDA backend (see gpu.hpp).
#define FERRY_TEST_GPU cuda
#define FERRY_TEST_GPU_NAME "cuda"
#include "gpu.hpp"
