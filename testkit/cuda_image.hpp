// SPDX-License-Identifier: MIT
// An engine's CUDA array, made with the runtime's own calls as an engine makes the images it
// has ferry adopt (Device::adopt_image): one maker for the CUDA conformance suite's images
// (tests/backends/cuda.cpp) and ferry-bench's image study (tools/bench/vendor_cuda.cpp), so
// that the suite checks the arrays the bench measures. Header-only and not installed: it
// needs the CUDA headers, which ferry-testkit does not.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "ferry/image.hpp"

namespace ferry::testkit {

/// The channels of an engine's array of `format`: unsigned elements of the format's block
/// size (the bytes ferry's copies move) for uncompressed formats, the driver's BC channel
/// kinds for BC formats (the array's extent then counts texels). Formats without a CUDA form
/// (ASTC) leave the reason in `why_not`.
inline cudaChannelFormatDesc cuda_engine_channels(ImageFormat format, std::string& why_not) {
  using F = ImageFormat;
  switch (format) {
    case F::bc1_rgba_unorm: return cudaCreateChannelDesc(8, 8, 8, 8, cudaChannelFormatKindUnsignedBlockCompressed1);
    case F::bc1_rgba_srgb: return cudaCreateChannelDesc(8, 8, 8, 8, cudaChannelFormatKindUnsignedBlockCompressed1SRGB);
    case F::bc2_unorm: return cudaCreateChannelDesc(8, 8, 8, 8, cudaChannelFormatKindUnsignedBlockCompressed2);
    case F::bc3_unorm: return cudaCreateChannelDesc(8, 8, 8, 8, cudaChannelFormatKindUnsignedBlockCompressed3);
    case F::bc3_srgb: return cudaCreateChannelDesc(8, 8, 8, 8, cudaChannelFormatKindUnsignedBlockCompressed3SRGB);
    case F::bc4_unorm: return cudaCreateChannelDesc(8, 0, 0, 0, cudaChannelFormatKindUnsignedBlockCompressed4);
    case F::bc5_unorm: return cudaCreateChannelDesc(8, 8, 0, 0, cudaChannelFormatKindUnsignedBlockCompressed5);
    case F::bc6h_ufloat: return cudaCreateChannelDesc(16, 16, 16, 0, cudaChannelFormatKindUnsignedBlockCompressed6H);
    case F::bc6h_sfloat: return cudaCreateChannelDesc(16, 16, 16, 0, cudaChannelFormatKindSignedBlockCompressed6H);
    case F::bc7_unorm: return cudaCreateChannelDesc(8, 8, 8, 8, cudaChannelFormatKindUnsignedBlockCompressed7);
    case F::bc7_srgb: return cudaCreateChannelDesc(8, 8, 8, 8, cudaChannelFormatKindUnsignedBlockCompressed7SRGB);
    default: break;
  }
  const FormatInfo f = format_info(format);
  if (f.compressed()) {
    why_not = "CUDA arrays have no channel kind for " + std::string(f.name);
    return {};
  }
  switch (f.block_bytes) {
    case 1: return cudaCreateChannelDesc(8, 0, 0, 0, cudaChannelFormatKindUnsigned);
    case 2: return cudaCreateChannelDesc(16, 0, 0, 0, cudaChannelFormatKindUnsigned);
    case 4: return cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindUnsigned);
    case 8: return cudaCreateChannelDesc(32, 32, 0, 0, cudaChannelFormatKindUnsigned);
    default: return cudaCreateChannelDesc(32, 32, 32, 32, cudaChannelFormatKindUnsigned);
  }
}

/// An engine's array of `desc` on the current CUDA device, of `channels`: a cudaArray_t for
/// one level (layered for several layers, 3D for depth) or a cudaMipmappedArray_t, described
/// in `native` as ferry's CUDA backend adopts it. Returns the allocation's error; `call` names
/// the call made.
inline cudaError_t make_cuda_engine_array(const ImageDesc& desc, const cudaChannelFormatDesc& channels,
                                          NativeImage& native, const char*& call) {
  const bool layered = desc.array_layers > 1;
  cudaExtent extent{};
  extent.width = desc.width;
  extent.height = desc.height;
  extent.depth = layered ? desc.array_layers : (desc.depth > 1 ? desc.depth : 0);
  const unsigned int flags = layered ? cudaArrayLayered : cudaArrayDefault;
  native = NativeImage{};
  if (desc.mip_levels > 1) {
    call = "cudaMallocMipmappedArray";
    cudaMipmappedArray_t mipmapped = nullptr;
    const cudaError_t e = cudaMallocMipmappedArray(&mipmapped, &channels, extent, desc.mip_levels, flags);
    native.cuda_array = reinterpret_cast<std::uintptr_t>(mipmapped);
    native.cuda_mipmapped = true;
    return e;
  }
  call = "cudaMalloc3DArray";
  cudaArray_t array = nullptr;
  const cudaError_t e = cudaMalloc3DArray(&array, &channels, extent, flags);
  native.cuda_array = reinterpret_cast<std::uintptr_t>(array);
  return e;
}

/// Free an array make_cuda_engine_array made (nothing for a null handle).
inline cudaError_t free_cuda_engine_array(const NativeImage& native) {
  if (native.cuda_array == 0) return cudaSuccess;
  const auto handle = static_cast<std::uintptr_t>(native.cuda_array);
  if (native.cuda_mipmapped) return cudaFreeMipmappedArray(reinterpret_cast<cudaMipmappedArray_t>(handle));
  return cudaFreeArray(reinterpret_cast<cudaArray_t>(handle));
}

}  // namespace ferry::testkit
