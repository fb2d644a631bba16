// SPDX-License-Identifier: MIT
// The conformance suite on the HIP backend (built from the CUDA sources) (see gpu.hpp).
#define FERRY_TEST_GPU hip
#define FERRY_TEST_GPU_NAME "hip"
#include "gpu.hpp"
