// SPDX-License-Identifier: MIT
// How the CUDA probes check a CUDA runtime call: a failure throws CudaFailure naming the call,
// the error's name, number and text, and the probe's line. Header-only, for the probes that
// link cudart (each probe is one translation unit).
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace probe {

struct CudaFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void check_rt(cudaError_t e, const char* call, int line) {
  if (e != cudaSuccess) {
    throw CudaFailure(std::string(call) + " failed: " + cudaGetErrorName(e) + " (" + std::to_string(static_cast<int>(e)) +
                      "): " + cudaGetErrorString(e) + " at line " + std::to_string(line));
  }
}

}  // namespace probe

#define CK(call) ::probe::check_rt((call), #call, __LINE__)
