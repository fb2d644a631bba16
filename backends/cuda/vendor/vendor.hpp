// SPDX-License-Identifier: MIT
// Vendor selection for the CUDA-family backend (STYLE item 5, ggml's vendors/*.h).
//
// The backend's sources (cuda_*.cpp) are written once against the CUDA runtime API. Compiled
// plainly they are the CUDA backend; compiled with FERRY_VENDOR_HIP defined
// (backends/hip/meson.build compiles them a second time so) they are the HIP backend. Each shim provides the same names:
//
//   FERRY_GPU_NS              namespace of the implementation (cuda_impl / hip_impl), so both
//                             builds link into one library without colliding symbols
//   FERRY_GPU_BACKEND         the ferry::Backend value
//   FERRY_GPU_LABEL           "cuda" / "hip", prefix of messages
//   FERRY_GPU_VENDOR          "CUDA" / "HIP", in prose ("no CUDA device present")
//   FERRY_GPU_DESCRIPTOR      cuda_backend_descriptor / hip_backend_descriptor (backend.hpp)
//   FERRY_GPU_OPTION          "-Dcuda=enabled" / "-Dhip=enabled", the meson option
//   FERRY_GPU_HAS_IMAGES      1 when the vendor's array API is mapped (Device::adopt_image)
//   FERRY_GPU_HAS_BATCH_COPY  1 when cudaMemcpyBatchAsync is used for copy_h2d_many / copy_d2h_many
//
// and, in namespace ferry::detail::FERRY_GPU_NS::vendor, the few operations whose API differs
// (loading the vendor's library at run time: runtime_loaded, fail_runtime_missing; error text
// and classification, stream memory operations, stream -> device query, UUID, copy engine
// count, the interop imports of backends/pair/, loading and launching the synthetic kernel
// from an image: kLoadsKernels, Kernels, load_kernels, launch_synthetic, unload_kernels).
// Everything else uses CUDA runtime names: the CUDA shim implements them over the driver API,
// the HIP shim maps them onto HIP's. What a vendor cannot do, its shim's function refuses
// with `unsupported`: the backend's source has no vendor conditionals.
//
// Neither vendor's library is linked: each shim opens it at the backend's first use, so
// libferry loads where the vendor's runtime is absent.

#pragma once

#ifdef FERRY_VENDOR_HIP
#include "hip.hpp"
#else
#include "cuda.hpp"
#endif
