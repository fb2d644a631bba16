// SPDX-License-Identifier: MIT
// CUDA images: an engine's cudaArray_t or cudaMipmappedArray_t (CUarray / CUmipmappedArray to
// the driver, which the backend calls directly: Device::adopt_image), another
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
ErrorCode classify_engine_array(CUresult) { return ErrorCode::invalid_argument; }

/// An array's element layout as the driver describes it (CUDA_ARRAY3D_DESCRIPTOR).
struct Elements {
  CUarray_format format = CU_AD_FORMAT_UNSIGNED_INT8;
  unsigned channels = 0;  ///< 0: the format has no CUDA array form
};

/// The block-compressed array format of `format` (CUDA 11.5 and later), with its channel
/// count; no channels for a format with none: the uncompressed ones, and ASTC, which CUDA
/// arrays cannot hold.
Elements block_compressed(ImageFormat format) {
  switch (format) {
    case ImageFormat::bc1_rgba_unorm: return {CU_AD_FORMAT_BC1_UNORM, 4};
    case ImageFormat::bc1_rgba_srgb: return {CU_AD_FORMAT_BC1_UNORM_SRGB, 4};
    case ImageFormat::bc2_unorm: return {CU_AD_FORMAT_BC2_UNORM, 4};
    case ImageFormat::bc3_unorm: return {CU_AD_FORMAT_BC3_UNORM, 4};
    case ImageFormat::bc3_srgb: return {CU_AD_FORMAT_BC3_UNORM_SRGB, 4};
    case ImageFormat::bc4_unorm: return {CU_AD_FORMAT_BC4_UNORM, 1};
    case ImageFormat::bc5_unorm: return {CU_AD_FORMAT_BC5_UNORM, 2};
    case ImageFormat::bc6h_ufloat: return {CU_AD_FORMAT_BC6H_UF16, 3};
    case ImageFormat::bc6h_sfloat: return {CU_AD_FORMAT_BC6H_SF16, 3};
    case ImageFormat::bc7_unorm: return {CU_AD_FORMAT_BC7_UNORM, 4};
    case ImageFormat::bc7_srgb: return {CU_AD_FORMAT_BC7_UNORM_SRGB, 4};
    default: return {};
  }
}

/// The elements of a CUDA array holding `format` as a Vulkan image of the matching VkFormat
/// holds it (vulkan::to_vk_format), for an imported image: the format's channels and kind,
/// the packed 32-bit formats as one 32-bit channel (CUDA has no packed kinds; the bytes are
/// what is copied), BC1-7 as their block-compressed formats. No channels: no CUDA form (ASTC).
Elements import_elements(ImageFormat format) {
  using F = ImageFormat;
  switch (format) {
    case F::r8_unorm:
    case F::r8_uint: return {CU_AD_FORMAT_UNSIGNED_INT8, 1};
    case F::rg8_unorm: return {CU_AD_FORMAT_UNSIGNED_INT8, 2};
    case F::rgba8_unorm:
    case F::rgba8_srgb:
    case F::rgba8_uint:
    case F::bgra8_unorm:
    case F::bgra8_srgb: return {CU_AD_FORMAT_UNSIGNED_INT8, 4};
    case F::r16_unorm:
    case F::r16_uint: return {CU_AD_FORMAT_UNSIGNED_INT16, 1};
    case F::r16_float: return {CU_AD_FORMAT_HALF, 1};
    case F::rg16_float: return {CU_AD_FORMAT_HALF, 2};
    case F::rgba16_unorm: return {CU_AD_FORMAT_UNSIGNED_INT16, 4};
    case F::rgba16_float: return {CU_AD_FORMAT_HALF, 4};
    case F::r32_uint: return {CU_AD_FORMAT_UNSIGNED_INT32, 1};
    case F::r32_sint: return {CU_AD_FORMAT_SIGNED_INT32, 1};
    case F::r32_float: return {CU_AD_FORMAT_FLOAT, 1};
    case F::rg32_uint: return {CU_AD_FORMAT_UNSIGNED_INT32, 2};
    case F::rg32_float: return {CU_AD_FORMAT_FLOAT, 2};
    case F::rgba32_uint: return {CU_AD_FORMAT_UNSIGNED_INT32, 4};
    case F::rgba32_float: return {CU_AD_FORMAT_FLOAT, 4};
    case F::rgb10a2_unorm:
    case F::rg11b10_float: return {CU_AD_FORMAT_UNSIGNED_INT32, 1};
    default: return block_compressed(format);
  }
}

/// Whether `format` is one of the block-compressed formats (BC1-7, signed or not, sRGB).
bool is_block_compressed(CUarray_format format) {
  return format >= CU_AD_FORMAT_BC1_UNORM && format <= CU_AD_FORMAT_BC7_UNORM_SRGB;
}

/// Bytes of one element of an uncompressed array (0 for a format ferry does not copy: the
/// video formats and the block-compressed ones).
unsigned element_bytes(CUarray_format format, unsigned channels) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return channels;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2 * channels;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4 * channels;
    case CU_AD_FORMAT_UNORM_INT8X1:
    case CU_AD_FORMAT_SNORM_INT8X1: return 1;
    case CU_AD_FORMAT_UNORM_INT8X2:
    case CU_AD_FORMAT_SNORM_INT8X2:
    case CU_AD_FORMAT_UNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT16X1: return 2;
    case CU_AD_FORMAT_UNORM_INT8X4:
    case CU_AD_FORMAT_SNORM_INT8X4:
    case CU_AD_FORMAT_UNORM_INT16X2:
    case CU_AD_FORMAT_SNORM_INT16X2: return 4;
    case CU_AD_FORMAT_UNORM_INT16X4:
    case CU_AD_FORMAT_SNORM_INT16X4: return 8;
    default: return 0;
  }
}

/// An array's elements in an error message: "32-bit elements", or the format of a
/// block-compressed array.
std::string describe_elements(const CUDA_ARRAY3D_DESCRIPTOR& d) {
  if (is_block_compressed(d.Format)) {
    return "block-compressed elements (CUarray_format " + std::to_string(static_cast<int>(d.Format)) + ")";
  }
  return std::to_string(element_bytes(d.Format, d.NumChannels) * 8) + "-bit elements";
}

struct GpuImage final : BackendImage {
  CUarray array = nullptr;               ///< one level (not mipmapped)
  CUmipmappedArray mipmapped = nullptr;  ///< the levels (mipmapped)
  bool layered = false;                  ///< CUDA_ARRAY3D_LAYERED: z addresses layers
  bool volume = false;                   ///< a 3D array: z addresses depth slices
  std::uint32_t block_bytes = 0;         ///< bytes per element (per block when compressed)
  std::uint32_t block_width = 1;         ///< texels per element, across (4 for BC)
  std::uint32_t block_height = 1;        ///< texels per element, down (4 for BC)
  /// An imported image (import_image) owns its import: `mipmapped` mapped onto `external`,
  /// both freed here, in the device's context (`core`). Adopted arrays own nothing.
  std::shared_ptr<Core> core;
  CUexternalMemory external = nullptr;

  GpuImage() = default;
  GpuImage(const GpuImage&) = delete;
  GpuImage& operator=(const GpuImage&) = delete;
  ~GpuImage() override {
    if (external == nullptr) return;
    const auto guard = ContextGuard::try_bind(*core);
    if (!guard) return;  // no context to bind: the process is going, and the driver reclaims the import
    const vendor::Driver& d = vendor::driver_load().driver;
    if (mipmapped != nullptr) (void)d.cuMipmappedArrayDestroy(mipmapped);
    (void)d.cuDestroyExternalMemory(external);
  }

  /// The array of level `mip` (checked at adoption to exist).
  [[nodiscard]] CUarray level(std::uint32_t mip) const {
    if (mipmapped == nullptr) return array;
    CUarray a = nullptr;
    FERRY_CU_CHECK(vendor::driver().cuMipmappedArrayGetLevel(&a, mipmapped, mip));
    return a;
  }
};

/// Copy every region between linear memory at `linear` (host or device, per `linear_type`)
/// and `image`, on `stream`: a plain 2D region with cuMemcpy2DAsync, layers and depth slices
/// with cuMemcpy3DAsync (the linear side's slices `image_height` rows of `row_pitch` bytes
/// apart).
///
/// The driver addresses an array in its elements, and the element of a block-compressed
/// array is a block. The front end's regions are whole blocks (offsets on block boundaries,
/// extents too unless they end at the level's edge), so: the x offset and the width are bytes
/// of whole blocks (blocks x block_bytes), the y offset, the height and the linear side's
/// slice height are rows of blocks. For an uncompressed array a block is one texel, and the
/// same arithmetic gives the usual byte offsets and texel rows.
void copy_image_regions(const GpuImage& image, std::byte* linear, std::span<const ImageCopy> regions, bool to_image,
                        CUmemorytype linear_type, cudaStream_t stream) {
  const vendor::Driver& d = vendor::driver();
  for (const ImageCopy& c : regions) {
    const CUarray a = image.level(c.mip);
    std::byte* at = linear + c.buffer_offset;
    const std::size_t x_bytes = std::size_t{c.x / image.block_width} * image.block_bytes;
    const std::size_t y_rows = c.y / image.block_height;
    if (!image.layered && !image.volume) {
      CUDA_MEMCPY2D p{};
      if (to_image) {
        p.srcMemoryType = linear_type;
        p.srcHost = at;
        p.srcDevice = to_device_address(at);
        p.srcPitch = c.row_pitch;
        p.dstMemoryType = CU_MEMORYTYPE_ARRAY;
        p.dstArray = a;
        p.dstXInBytes = x_bytes;
        p.dstY = y_rows;
      } else {
        p.srcMemoryType = CU_MEMORYTYPE_ARRAY;
        p.srcArray = a;
        p.srcXInBytes = x_bytes;
        p.srcY = y_rows;
        p.dstMemoryType = linear_type;
        p.dstHost = at;
        p.dstDevice = to_device_address(at);
        p.dstPitch = c.row_pitch;
      }
      p.WidthInBytes = c.row_bytes;  // whole blocks: ceil(width / block_width) of them
      p.Height = c.rows;             // rows of blocks
      FERRY_CU_CHECK(d.cuMemcpy2DAsync(&p, stream));
      continue;
    }
    CUDA_MEMCPY3D p{};
    const std::size_t z = image.layered ? c.base_layer : c.z;
    const std::size_t slice_rows = c.image_height / image.block_height;  // rows of blocks per slice
    if (to_image) {
      p.srcMemoryType = linear_type;
      p.srcHost = at;
      p.srcDevice = to_device_address(at);
      p.srcPitch = c.row_pitch;
      p.srcHeight = slice_rows;
      p.dstMemoryType = CU_MEMORYTYPE_ARRAY;
      p.dstArray = a;
      p.dstXInBytes = x_bytes;
      p.dstY = y_rows;
      p.dstZ = z;
    } else {
      p.srcMemoryType = CU_MEMORYTYPE_ARRAY;
      p.srcArray = a;
      p.srcXInBytes = x_bytes;
      p.srcY = y_rows;
      p.srcZ = z;
      p.dstMemoryType = linear_type;
      p.dstHost = at;
      p.dstDevice = to_device_address(at);
      p.dstPitch = c.row_pitch;
      p.dstHeight = slice_rows;
    }
    p.WidthInBytes = c.row_bytes;
    p.Height = c.rows;
    p.Depth = image.layered ? c.layers : c.depth;
    FERRY_CU_CHECK(d.cuMemcpy3DAsync(&p, stream));
  }
}

}  // namespace

void Queue::copy_h2i(BackendImage& dst, HostRef src, std::span<const ImageCopy> regions) {
  ContextGuard guard(*core_);
  copy_image_regions(static_cast<GpuImage&>(dst), static_cast<std::byte*>(host_ptr(src)), regions, true,
                     CU_MEMORYTYPE_HOST, stream_);
}

void Queue::copy_i2h(HostRef dst, BackendImage& src, std::span<const ImageCopy> regions) {
  ContextGuard guard(*core_);
  copy_image_regions(static_cast<GpuImage&>(src), static_cast<std::byte*>(host_ptr(dst)), regions, false,
                     CU_MEMORYTYPE_HOST, stream_);
}

void Queue::copy_d2i(BackendImage& dst, DeviceRef src, std::span<const ImageCopy> regions) {
  ContextGuard guard(*core_);
  copy_image_regions(static_cast<GpuImage&>(dst), static_cast<std::byte*>(device_ptr(src)), regions, true,
                     CU_MEMORYTYPE_DEVICE, stream_);
}

void Queue::copy_i2d(DeviceRef dst, BackendImage& src, std::span<const ImageCopy> regions) {
  ContextGuard guard(*core_);
  copy_image_regions(static_cast<GpuImage&>(src), static_cast<std::byte*>(device_ptr(dst)), regions, false,
                     CU_MEMORYTYPE_DEVICE, stream_);
}

// An engine's array: its elements, extent, layering and levels are asked of the driver
// (cuArray3DGetDescriptor on every level) and must be the stated shape's. The elements of an
// uncompressed format are compared by size (ferry never converts, so any kind of the same
// bits copies the same bytes), those of a BC format by array format (the channels the driver
// reports do not describe a block). ASTC has no CUDA array form.
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
  const Elements bc = block_compressed(desc.format);
  if (f.compressed() && bc.channels == 0) {
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
    image->mipmapped = reinterpret_cast<CUmipmappedArray>(static_cast<std::uintptr_t>(native.cuda_array));
  } else {
    image->array = reinterpret_cast<CUarray>(static_cast<std::uintptr_t>(native.cuda_array));
  }
  const vendor::Driver& d = vendor::driver();
  for (std::uint32_t l = 0; l < desc.mip_levels; ++l) {
    CUarray a = image->array;
    if (image->mipmapped != nullptr) {
      FERRY_GPU_CHECK_WITH(d.cuMipmappedArrayGetLevel(&a, image->mipmapped, l), classify_engine_array);
    }
    CUDA_ARRAY3D_DESCRIPTOR info{};
    FERRY_GPU_CHECK_WITH(d.cuArray3DGetDescriptor(&info, a), classify_engine_array);
    const bool elements_match = f.compressed() ? info.Format == bc.format
                                               : element_bytes(info.Format, info.NumChannels) == f.block_bytes &&
                                                     !is_block_compressed(info.Format);
    const bool layered = (info.Flags & CUDA_ARRAY3D_LAYERED) != 0;
    struct {
      std::size_t width, height, depth;
    } extent{info.Width, info.Height, info.Depth};
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
          f.compressed() ? std::string(f.name) + " (block-compressed elements, CUarray_format " +
                               std::to_string(static_cast<int>(bc.format)) + ")"
                         : std::string(f.name) + " (" + std::to_string(f.block_bytes * 8) + "-bit elements)";
      throw Error(ErrorCode::invalid_argument,
                  FERRY_GPU_LABEL ": level " + std::to_string(l) + " of the array is " + std::to_string(extent.width) +
                      "x" + std::to_string(extent.height) + "x" + std::to_string(extent.depth) + (layered ? " layered" : "") +
                      " of " + describe_elements(info) + ", not the stated " + std::to_string(e.width) + "x" +
                      std::to_string(e.height) + "x" + std::to_string(desc.depth > 1 ? e.depth : desc.array_layers) +
                      " of " + stated,
                  "cuArray3DGetDescriptor", std::source_location{});
    }
    if (l == 0) image->layered = layered;
  }
  return image;
}

// Interop (images): the memory of another API's image (a Vulkan image's, exported as an
// opaque fd) imported whole, and the image's levels mapped at `offset` as a mipmapped array
// of the stated shape and the format's elements (import_elements). The driver lays the
// array out as the exporter laid out the image, given the same shape, format and levels
// (and the color-attachment flag, which changes that layout).
std::unique_ptr<BackendImage> Device::import_image(const ExternalMemory& memory, std::uint64_t offset,
                                                   const ImageDesc& desc, bool color_attachment) {
  const FormatInfo f = format_info(desc.format);
  const Elements elements = import_elements(desc.format);
  if (elements.channels == 0) {
    ::close(memory.fd);
    throw Error(ErrorCode::unsupported,
                FERRY_GPU_LABEL ": " + std::string(f.name) +
                    " has no CUDA array form (CUDA arrays hold the block-compressed formats BC1-7 only)",
                {}, std::source_location{});
  }
  ContextGuard guard(*core_);
  const vendor::Driver& d = vendor::driver();
  CUDA_EXTERNAL_MEMORY_HANDLE_DESC handle{};
  handle.type = CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD;
  handle.handle.fd = memory.fd;
  handle.size = memory.size;
  handle.flags = memory.dedicated ? CUDA_EXTERNAL_MEMORY_DEDICATED : 0;
  auto image = std::make_unique<GpuImage>();
  image->core = core_;
  // The engine's statement of its allocation (size, dedication) is what the import checks.
  // The fd is CUDA's once imported, and closed here when the import fails.
  try {
    FERRY_GPU_CHECK_WITH(d.cuImportExternalMemory(&image->external, &handle), classify_engine_array);
  } catch (...) {
    ::close(memory.fd);
    throw;
  }
  const bool layered = desc.array_layers > 1;
  CUDA_EXTERNAL_MEMORY_MIPMAPPED_ARRAY_DESC levels{};
  levels.offset = offset;
  levels.arrayDesc.Format = elements.format;
  levels.arrayDesc.NumChannels = elements.channels;
  levels.arrayDesc.Width = desc.width;
  levels.arrayDesc.Height = desc.height;
  levels.arrayDesc.Depth = layered ? desc.array_layers : (desc.depth > 1 ? desc.depth : 0);
  levels.arrayDesc.Flags = (layered ? CUDA_ARRAY3D_LAYERED : 0u) | (color_attachment ? CUDA_ARRAY3D_COLOR_ATTACHMENT : 0u);
  levels.numLevels = desc.mip_levels;
  FERRY_GPU_CHECK_WITH(d.cuExternalMemoryGetMappedMipmappedArray(&image->mipmapped, image->external, &levels),
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
