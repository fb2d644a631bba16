// SPDX-License-Identifier: MIT
// The HIP backend is the CUDA backend's source compiled through the HIP vendor shim
// (backends/cuda/vendor/hip.hpp), as ggml-hip builds ggml-cuda. This wrapper gives that
// second compilation its own object name in the one ferry library.
#define FERRY_VENDOR_HIP 1
#include "../cuda/cuda_backend.cpp"
