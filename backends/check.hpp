// SPDX-License-Identifier: MIT
// One checking macro for every vendor call (CUDA, HIP, Vulkan), parameterized by the success
// value, a describe function (code -> text) and a classify function (code -> ErrorCode):
//
//   FERRY_CHECK_GEN(cudaMalloc(&p, n), cudaSuccess, cuda_describe, cuda_classify);
//
// On failure it throws ferry::Error with the classified code, the call's source text as
// `call()`, and the vendor's description in the message.
#pragma once

#include <string>

#include "ferry/error.hpp"

namespace ferry::detail {

[[noreturn]] inline void raise_vendor_error(ErrorCode code, const char* call, const std::string& detail,
                                            const char* file, int line) {
  std::string message = "device call failed: " + detail + " (ferry " + file + ":" + std::to_string(line) + ")";
  throw Error(code, std::move(message), call, std::source_location{});
}

}  // namespace ferry::detail

#define FERRY_CHECK_GEN(expr, success, describe, classify)                                   \
  do {                                                                                         \
    auto ferry_check_result_ = (expr);                                                         \
    if (ferry_check_result_ != (success)) {                                                    \
      ::ferry::detail::raise_vendor_error(classify(ferry_check_result_), #expr,                \
                                          describe(ferry_check_result_), __FILE__, __LINE__);  \
    }                                                                                          \
  } while (0)
