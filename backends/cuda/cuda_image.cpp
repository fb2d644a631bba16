// SPDX-License-Identifier: MIT
// CUDA images: an engine's cudaArray_t or cudaMipmappedArray_t (Device::adopt_image), another
// API's image imported through its memory (Device::import_image), and the queue's copies
// between them and linear memory. Built where the vendor has CUDA arrays
// (FERRY_GPU_HAS_IMAGES; not HIP).
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include <unistd.h>

#include "cuda/cuda_internal.hpp"

#if FERRY_GPU_HAS_IMAGES
namespace ferry::detail::FERRY_GPU_NS {

namespace {

/// A failure of a call on an array the engine named is the engine's wrong handle or shape.
ErrorCode classify_engine_array(cudaError_t) { return ErrorCode::invalid_argument; }

/// The channel kind of a CUDA block-compressed array of `format` (CUDA 11.5 and later);
/// cudaChannelFormatKindNone for a format with none: the uncompressed ones, and ASTC, which
/// CUDA arrays cannot hold.
cudaChannelFormatKind block_compressed_kind(ImageFormat format) {
  switch (format) {
    case ImageFormat::bc1_rgba_unorm: return cudaChannelFormatKindUnsignedBlockCompressed1;
    case ImageFormat::bc1_rgba_srgb: return cudaChannelFormatKindUnsignedBlockCompressed1SRGB;
    case ImageFormat::bc2_unorm: return cudaChannelFormatKindUnsignedBlockCompressed2;
    case ImageFormat::bc3_unorm: return cudaChannelFormatKindUnsignedBlockCompressed3;
    case ImageFormat::bc3_srgb: return cudaChannelFormatKindUnsignedBlockCompressed3SRGB;
    case ImageFormat::bc4_unorm: return cudaChannelFormatKindUnsignedBlockCompressed4;
    case ImageFormat::bc5_unorm: return cudaChannelFormatKindUnsignedBlockCompressed5;
    case ImageFormat::bc6h_ufloat: return cudaChannelFormatKindUnsignedBlockCompressed6H;
    case ImageFormat::bc6h_sfloat: return cudaChannelFormatKindSignedBlockCompressed6H;
    case ImageFormat::bc7_unorm: return cudaChannelFormatKindUnsignedBlockCompressed7;
    case ImageFormat::bc7_srgb: return cudaChannelFormatKindUnsignedBlockCompressed7SRGB;
    default: return cudaChannelFormatKindNone;
  }
}

/// The channels of a CUDA array holding `format` as a Vulkan image of the matching VkFormat
/// holds it (vulkan::to_vk_format), for an imported image: the format's channels and kind,
/// the packed 32-bit formats as one 32-bit channel (CUDA has no packed kinds; the bytes are
/// what is copied), BC1-7 as their block-compressed kinds. Channels of 0 bits (kind None):
/// no CUDA form (ASTC).
cudaChannelFormatDesc import_channels(ImageFormat format) {
  using F = ImageFormat;
  constexpr auto u = cudaChannelFormatKindUnsigned;
  constexpr auto i = cudaChannelFormatKindSigned;
  constexpr auto fl = cudaChannelFormatKindFloat;
  switch (format) {
    case F::r8_unorm:
    case F::r8_uint: return cudaCreateChannelDesc(8, 0, 0, 0, u);
    case F::rg8_unorm: return cudaCreateChannelDesc(8, 8, 0, 0, u);
    case F::rgba8_unorm:
    case F::rgba8_srgb:
    case F::rgba8_uint:
    case F::bgra8_unorm:
    case F::bgra8_srgb: return cudaCreateChannelDesc(8, 8, 8, 8, u);
    case F::r16_unorm:
    case F::r16_uint: return cudaCreateChannelDesc(16, 0, 0, 0, u);
    case F::r16_float: return cudaCreateChannelDesc(16, 0, 0, 0, fl);
    case F::rg16_float: return cudaCreateChannelDesc(16, 16, 0, 0, fl);
    case F::rgba16_unorm: return cudaCreateChannelDesc(16, 16, 16, 16, u);
    case F::rgba16_float: return cudaCreateChannelDesc(16, 16, 16, 16, fl);
    case F::r32_uint: return cudaCreateChannelDesc(32, 0, 0, 0, u);
    case F::r32_sint: return cudaCreateChannelDesc(32, 0, 0, 0, i);
    case F::r32_float: return cudaCreateChannelDesc(32, 0, 0, 0, fl);
    case F::rg32_uint: return cudaCreateChannelDesc(32, 32, 0, 0, u);
    case F::rg32_float: return cudaCreateChannelDesc(32, 32, 0, 0, fl);
    case F::rgba32_uint: return cudaCreateChannelDesc(32, 32, 32, 32, u);
    case F::rgba32_float: return cudaCreateChannelDesc(32, 32, 32, 32, fl);
    case F::rgb10a2_unorm:
    case F::rg11b10_float: return cudaCreateChannelDesc(32, 0, 0, 0, u);
    case F::bc4_unorm: return cudaCreateChannelDesc(8, 0, 0, 0, block_compressed_kind(format));
    case F::bc5_unorm: return cudaCreateChannelDesc(8, 8, 0, 0, block_compressed_kind(format));
    case F::bc6h_ufloat:
    case F::bc6h_sfloat: return cudaCreateChannelDesc(16, 16, 16, 0, block_compressed_kind(format));
    default: break;
  }
  const cudaChannelFormatKind bc = block_compressed_kind(format);
  if (bc != cudaChannelFormatKindNone) return cudaCreateChannelDesc(8, 8, 8, 8, bc);  // BC1-3, BC7
  return cudaCreateChannelDesc(0, 0, 0, 0, cudaChannelFormatKindNone);
}

/// Whether `kind` is one of the block-compressed channel kinds (BC1-7, signed or not, sRGB).
bool is_block_compressed(cudaChannelFormatKind kind) {
  return kind >= cudaChannelFormatKindUnsignedBlockCompressed1 &&
         kind <= cudaChannelFormatKindUnsignedBlockCompressed7SRGB;
}

/// An array's elements in an error message: "32-bit elements", or the channel kind of a
/// block-compressed array.
std::string describe_elements(const cudaChannelFormatDesc& channels) {
  if (is_block_compressed(channels.f)) {
    return "block-compressed elements (cudaChannelFormatKind " + std::to_string(static_cast<int>(channels.f)) + ")";
  }
  return std::to_string(channels.x + channels.y + channels.z + channels.w) + "-bit elements";
}

struct GpuImage final : BackendImage {
  cudaArray_t array = nullptr;               ///< one level (not mipmapped)
  cudaMipmappedArray_t mipmapped = nullptr;  ///< the levels (mipmapped)
  bool layered = false;                      ///< cudaArrayLayered: z addresses layers
  bool volume = false;                       ///< a 3D array: z addresses depth slices
  std::uint32_t block_bytes = 0;             ///< bytes per element (per block when compressed)
  std::uint32_t block_width = 1;             ///< texels per element, across (4 for BC)
  std::uint32_t block_height = 1;            ///< texels per element, down (4 for BC)
  /// An imported image (import_image) owns its import: `mipmapped` mapped onto `external`,
  /// both freed here, in the device's context (`core`). Adopted arrays own nothing.
  std::shared_ptr<Core> core;
  cudaExternalMemory_t external = nullptr;

  GpuImage() = default;
  GpuImage(const GpuImage&) = delete;
  GpuImage& operator=(const GpuImage&) = delete;
  ~GpuImage() override {
    if (external == nullptr) return;
    try {
      ContextGuard guard(*core);
      if (mipmapped != nullptr) ignore_in_destructor(cudaFreeMipmappedArray(mipmapped));
      ignore_in_destructor(cudaDestroyExternalMemory(external));
    } catch (...) {  // no context to bind: the process is going, and the driver reclaims the import
    }
  }

  /// The array of level `mip` (checked at adoption to exist).
  [[nodiscard]] cudaArray_t level(std::uint32_t mip) const {
    if (mipmapped == nullptr) return array;
    cudaArray_t a = nullptr;
    FERRY_GPU_CHECK(cudaGetMipmappedArrayLevel(&a, mipmapped, mip));
    return a;
  }
};

/// Copy every region between linear memory at `linear` (host or device, per `kind`) and
/// `image`, on `stream`: a plain 2D region with cudaMemcpy2DToArrayAsync /
/// cudaMemcpy2DFromArrayAsync, layers and depth slices with cudaMemcpy3DAsync (the linear
/// side's slices `image_height` rows of `row_pitch` bytes apart).
///
/// The two calls address a block-compressed array differently, and the front end's regions
/// are whole blocks (offsets on block boundaries, extents too unless they end at the level's
/// edge), so both forms below are exact:
///  - the 2D calls count in blocks: the x offset and the width in bytes of whole blocks
///    (blocks x block_bytes), the y offset and the height in rows of blocks;
///  - cudaMemcpy3DAsync counts the array's position and extent in texels (a partial block at
///    the edge included), while the pitched side's `ysize` is in rows of blocks.
/// For an uncompressed array a block is one texel, and the same arithmetic gives the usual
/// byte offsets and texel rows.
void copy_image_regions(const GpuImage& image, std::byte* linear, std::span<const ImageCopy> regions, bool to_image,
                        cudaMemcpyKind kind, cudaStream_t stream) {
  for (const ImageCopy& c : regions) {
    const cudaArray_t a = image.level(c.mip);
    std::byte* at = linear + c.buffer_offset;
    if (!image.layered && !image.volume) {
      const std::size_t x_bytes = std::size_t{c.x / image.block_width} * image.block_bytes;
      const std::size_t y_rows = c.y / image.block_height;
      const std::size_t width_bytes = c.row_bytes;  // whole blocks: ceil(width / block_width) of them
      const std::size_t rows = c.rows;              // rows of blocks
      if (to_image) {
        FERRY_GPU_CHECK(cudaMemcpy2DToArrayAsync(a, x_bytes, y_rows, at, c.row_pitch, width_bytes, rows, kind, stream));
      } else {
        FERRY_GPU_CHECK(cudaMemcpy2DFromArrayAsync(at, c.row_pitch, a, x_bytes, y_rows, width_bytes, rows, kind, stream));
      }
      continue;
    }
    cudaMemcpy3DParms p{};
    // The fields of make_cudaPitchedPtr / make_cudaPos / make_cudaExtent (driver_functions.h,
    // which the runtime API header alone does not include).
    cudaPitchedPtr pitched{};
    pitched.ptr = at;
    pitched.pitch = c.row_pitch;
    pitched.xsize = c.width;
    pitched.ysize = c.image_height / image.block_height;  // rows of blocks per slice
    cudaPos pos{};
    pos.x = c.x;
    pos.y = c.y;
    pos.z = image.layered ? c.base_layer : c.z;
    if (to_image) {
      p.srcPtr = pitched;
      p.dstArray = a;
      p.dstPos = pos;
    } else {
      p.srcArray = a;
      p.srcPos = pos;
      p.dstPtr = pitched;
    }
    p.extent.width = c.width;
    p.extent.height = c.height;
    p.extent.depth = image.layered ? c.layers : c.depth;
    p.kind = kind;
    FERRY_GPU_CHECK(cudaMemcpy3DAsync(&p, stream));
  }
}

}  // namespace

void Queue::copy_h2i(BackendImage& dst, HostRef src, std::span<const ImageCopy> regions) {
  ContextGuard guard(*core_);
  copy_image_regions(static_cast<GpuImage&>(dst), static_cast<std::byte*>(host_ptr(src)), regions, true,
                     cudaMemcpyHostToDevice, stream_);
}

void Queue::copy_i2h(HostRef dst, BackendImage& src, std::span<const ImageCopy> regions) {
  ContextGuard guard(*core_);
  copy_image_regions(static_cast<GpuImage&>(src), static_cast<std::byte*>(host_ptr(dst)), regions, false,
                     cudaMemcpyDeviceToHost, stream_);
}

void Queue::copy_d2i(BackendImage& dst, DeviceRef src, std::span<const ImageCopy> regions) {
  ContextGuard guard(*core_);
  copy_image_regions(static_cast<GpuImage&>(dst), static_cast<std::byte*>(device_ptr(src)), regions, true,
                     cudaMemcpyDeviceToDevice, stream_);
}

void Queue::copy_i2d(DeviceRef dst, BackendImage& src, std::span<const ImageCopy> regions) {
  ContextGuard guard(*core_);
  copy_image_regions(static_cast<GpuImage&>(src), static_cast<std::byte*>(device_ptr(dst)), regions, false,
                     cudaMemcpyDeviceToDevice, stream_);
}

// An engine's array: its elements, extent, layering and levels are asked of the driver
// (cudaArrayGetInfo on every level) and must be the stated shape's. The elements of an
// uncompressed format are compared by size (ferry never converts, so any kind of the same
// bits copies the same bytes), those of a BC format by channel kind (the bits per channel
// the driver reports do not describe a block). ASTC has no CUDA array form.
std::unique_ptr<BackendImage> Device::adopt_image(const NativeImage& native, const ImageDesc& desc,
                                                  std::uint32_t /*owner_family*/) {
  if (native.host_pointer != 0 || native.host_row_pitch != 0 || native.host_slice_pitch != 0 ||
      native.vulkan_image != 0 || native.vulkan_layout != 0 || native.vulkan_final_layout != 0 ||
      !native.vulkan_queue_families.empty() || native.vulkan_memory != 0 || native.vulkan_memory_offset != 0 ||
      native.vulkan_memory_size != 0 || native.vulkan_dedicated || native.vulkan_usage != 0) {
    throw Error(ErrorCode::invalid_argument,
                FERRY_GPU_LABEL ": a host or Vulkan field of NativeImage is set; a " FERRY_GPU_VENDOR
                                " image is NativeImage::cuda_array",
                {}, std::source_location{});
  }
  if (native.cuda_array == 0) {
    throw Error(ErrorCode::invalid_argument, FERRY_GPU_LABEL ": NativeImage::cuda_array is null", {},
                std::source_location{});
  }
  const FormatInfo f = format_info(desc.format);
  const cudaChannelFormatKind bc_kind = block_compressed_kind(desc.format);
  if (f.compressed() && bc_kind == cudaChannelFormatKindNone) {
    throw Error(ErrorCode::unsupported,
                FERRY_GPU_LABEL ": " + std::string(f.name) +
                    " has no CUDA array form (CUDA arrays hold the block-compressed formats BC1-7 only)",
                {}, std::source_location{});
  }
  if (!native.cuda_mipmapped && desc.mip_levels != 1) {
    throw Error(ErrorCode::invalid_argument,
                FERRY_GPU_LABEL ": a cudaArray_t has one level, not " + std::to_string(desc.mip_levels) +
                    " (adopt a cudaMipmappedArray_t with cuda_mipmapped = true)",
                {}, std::source_location{});
  }
  ContextGuard guard(*core_);
  auto image = std::make_unique<GpuImage>();
  image->block_bytes = f.block_bytes;
  image->block_width = f.block_width;
  image->block_height = f.block_height;
  image->volume = desc.depth > 1;
  if (native.cuda_mipmapped) {
    image->mipmapped = reinterpret_cast<cudaMipmappedArray_t>(static_cast<std::uintptr_t>(native.cuda_array));
  } else {
    image->array = reinterpret_cast<cudaArray_t>(static_cast<std::uintptr_t>(native.cuda_array));
  }
  for (std::uint32_t l = 0; l < desc.mip_levels; ++l) {
    cudaArray_t a = image->array;
    if (image->mipmapped != nullptr) {
      FERRY_GPU_CHECK_WITH(cudaGetMipmappedArrayLevel(&a, image->mipmapped, l), classify_engine_array);
    }
    cudaChannelFormatDesc channels{};
    cudaExtent extent{};
    unsigned int flags = 0;
    FERRY_GPU_CHECK_WITH(cudaArrayGetInfo(&channels, &extent, &flags, a), classify_engine_array);
    const int bits = channels.x + channels.y + channels.z + channels.w;
    const bool elements_match = f.compressed() ? channels.f == bc_kind
                                               : bits == static_cast<int>(f.block_bytes * 8) &&
                                                     !is_block_compressed(channels.f);
    const bool layered = (flags & cudaArrayLayered) != 0;
    const Extent3D e = mip_extent(desc, l);
    const std::size_t want_height = e.height;
    const std::size_t want_depth = layered ? desc.array_layers : (desc.depth > 1 ? e.depth : 0);
    // A block-compressed array's extent counts texels, as the stated shape does.
    const bool matches = elements_match && extent.width == e.width &&
                         (extent.height == want_height || (extent.height == 0 && want_height == 1)) &&
                         (extent.depth == want_depth || (extent.depth == 1 && want_depth == 0)) &&
                         (layered || desc.array_layers == 1);
    if (!matches) {
      const std::string stated =
          f.compressed() ? std::string(f.name) + " (block-compressed elements, cudaChannelFormatKind " +
                               std::to_string(static_cast<int>(bc_kind)) + ")"
                         : std::string(f.name) + " (" + std::to_string(f.block_bytes * 8) + "-bit elements)";
      throw Error(ErrorCode::invalid_argument,
                  FERRY_GPU_LABEL ": level " + std::to_string(l) + " of the array is " + std::to_string(extent.width) +
                      "x" + std::to_string(extent.height) + "x" + std::to_string(extent.depth) + (layered ? " layered" : "") +
                      " of " + describe_elements(channels) + ", not the stated " + std::to_string(e.width) + "x" +
                      std::to_string(e.height) + "x" + std::to_string(desc.depth > 1 ? e.depth : desc.array_layers) +
                      " of " + stated,
                  "cudaArrayGetInfo", std::source_location{});
    }
    if (l == 0) image->layered = layered;
  }
  return image;
}

// Interop (images): the memory of another API's image (a Vulkan image's, exported as an
// opaque fd) imported whole, and the image's levels mapped at `offset` as a mipmapped array
// of the stated shape and the format's channels (import_channels). The driver lays the
// array out as the exporter laid out the image, given the same shape, format and levels
// (and the color-attachment flag, which changes that layout).
std::unique_ptr<BackendImage> Device::import_image(const ExternalMemory& memory, std::uint64_t offset,
                                                   const ImageDesc& desc, bool color_attachment) {
  const FormatInfo f = format_info(desc.format);
  const cudaChannelFormatDesc channels = import_channels(desc.format);
  if (channels.f == cudaChannelFormatKindNone) {
    ::close(memory.fd);
    throw Error(ErrorCode::unsupported,
                FERRY_GPU_LABEL ": " + std::string(f.name) +
                    " has no CUDA array form (CUDA arrays hold the block-compressed formats BC1-7 only)",
                {}, std::source_location{});
  }
  ContextGuard guard(*core_);
  cudaExternalMemoryHandleDesc handle{};
  handle.type = cudaExternalMemoryHandleTypeOpaqueFd;
  handle.handle.fd = memory.fd;
  handle.size = memory.size;
  handle.flags = memory.dedicated ? cudaExternalMemoryDedicated : 0;
  auto image = std::make_unique<GpuImage>();
  image->core = core_;
  // The engine's statement of its allocation (size, dedication) is what the import checks.
  // The fd is CUDA's once imported, and closed here when the import fails.
  try {
    FERRY_GPU_CHECK_WITH(cudaImportExternalMemory(&image->external, &handle), classify_engine_array);
  } catch (...) {
    ::close(memory.fd);
    throw;
  }
  const bool layered = desc.array_layers > 1;
  cudaExternalMemoryMipmappedArrayDesc levels{};
  levels.offset = offset;
  levels.formatDesc = channels;
  levels.extent.width = desc.width;
  levels.extent.height = desc.height;
  levels.extent.depth = layered ? desc.array_layers : (desc.depth > 1 ? desc.depth : 0);
  levels.flags = (layered ? cudaArrayLayered : 0u) | (color_attachment ? cudaArrayColorAttachment : 0u);
  levels.numLevels = desc.mip_levels;
  FERRY_GPU_CHECK_WITH(cudaExternalMemoryGetMappedMipmappedArray(&image->mipmapped, image->external, &levels),
                       classify_engine_array);  // on failure the destructor destroys the import
  image->block_bytes = f.block_bytes;
  image->block_width = f.block_width;
  image->block_height = f.block_height;
  image->layered = layered;
  image->volume = desc.depth > 1;
  return image;
}

}  // namespace ferry::detail::FERRY_GPU_NS
#endif  // FERRY_GPU_HAS_IMAGES
