// SPDX-License-Identifier: MIT
/// @file image.hpp
/// @brief Images: an engine's textures and frames, adopted like its memory, filled and read
/// through the same transfer queue in regions.
///
/// ## Ownership
/// ferry never creates or frees an image. The engine creates it (a `VkImage` bound to its
/// memory, a CUDA `cudaArray_t` or mipmapped array, a pitched host region) and adopts it with
/// `Device::adopt_image`, naming the queue that owns it (its compute queue). The engine keeps
/// the native object alive until the image's release point (`Image::release`) is reached.
///
/// ## Ordering
/// The protocol of adopted memory (device.hpp, `Device::adopt_memory`; transfer.hpp):
///  - every copy into or out of an image runs on the Transfer's executor, after the owner's
///    work enqueued before the call (and, for the first access, `ImageAdoptOptions::ready_after`)
///    and after ferry's earlier accesses of the image;
///  - the owner uses the image only after the copy's point; with
///    `UploadIntoOptions::owner_waits` (the default) the call enqueues that wait on the owner;
///  - `Image::release()` ends ferry's use on the owner queue and returns the release point.
///
/// ## Vulkan: layouts and queue families
/// An adopted `VkImage` states its current layout and the layout the engine wants after every
/// ferry copy (`NativeImage::vulkan_layout`, `::vulkan_final_layout`). Around each copy ferry
/// records the transition to `TRANSFER_DST_OPTIMAL` (or `TRANSFER_SRC_OPTIMAL`) and back to
/// the final layout, over every mip level and layer. For an `exclusive` image used by queues
/// of two families, the transitions carry the queue-family ownership transfer: the owner
/// releases to the executor's family before the copy and acquires after it, exactly as for
/// buffers. With `owner_waits = false`, `vulkan::engine_acquire(image, point)` hands the
/// engine the acquire barrier (layout plus ownership) to record itself. Within one family (or
/// for a `concurrent` image) the executor records both transitions alone.
///
/// ## Regions
/// A copy moves many regions in one call (`ImageRegion`): a mip level, a range of array layers
/// (or of depth slices, for a 3D image), a texel offset and extent, and where the texels are
/// in the linear buffer (byte offset, row pitch, rows per image). Block-compressed formats
/// (BC, ASTC) copy whole blocks: offsets are multiples of the block size, and so are extents
/// unless they end at the edge of the mip level.
///
/// Thread-safety: `Image` is a move-only handle. Calls that use one image (copies, release,
/// `engine_acquire`) must not run concurrently with each other; different images are
/// independent. The format table and the layout helpers are pure functions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/api.hpp"
#include "ferry/device.hpp"
#include "ferry/error.hpp"

namespace ferry {

namespace detail {
struct ImageState;
}

/// @brief The texel formats ferry copies. A format only describes the bytes of a texel block:
/// ferry never converts between formats, and a copy moves a format's blocks as they are.
enum class ImageFormat : std::uint16_t {
  undefined = 0,  ///< no format: refused by every call
  // 8-bit channels
  r8_unorm,
  r8_uint,
  rg8_unorm,
  rgba8_unorm,
  rgba8_srgb,
  rgba8_uint,
  bgra8_unorm,
  bgra8_srgb,
  // 16-bit channels
  r16_unorm,
  r16_uint,
  r16_float,
  rg16_float,
  rgba16_unorm,
  rgba16_float,
  // 32-bit channels
  r32_uint,
  r32_sint,
  r32_float,
  rg32_uint,
  rg32_float,
  rgba32_uint,
  rgba32_float,
  // packed
  rgb10a2_unorm,
  rg11b10_float,
  // block-compressed: BC1-7 (4x4 blocks)
  bc1_rgba_unorm,
  bc1_rgba_srgb,
  bc2_unorm,
  bc3_unorm,
  bc3_srgb,
  bc4_unorm,
  bc5_unorm,
  bc6h_ufloat,
  bc6h_sfloat,
  bc7_unorm,
  bc7_srgb,
  // block-compressed: ASTC LDR
  astc_4x4_unorm,
  astc_4x4_srgb,
  astc_6x6_unorm,
  astc_8x8_unorm,
  astc_8x8_srgb,
};

/// @brief One past the last format of the table (for loops over every format).
inline constexpr std::uint16_t kImageFormatCount = static_cast<std::uint16_t>(ImageFormat::astc_8x8_srgb) + 1;

/// @brief What a format's texel block is. Uncompressed formats have 1x1 blocks of one texel.
struct FormatInfo {
  std::string_view name{};           ///< lower-case name ("rgba8_unorm"); "undefined" for no format
  std::uint32_t block_width = 1;     ///< texels per block, horizontally
  std::uint32_t block_height = 1;    ///< texels per block, vertically
  std::uint32_t block_bytes = 0;     ///< bytes per block (0: not a format of the table)
  /// Block-compressed (BC, ASTC): copies move whole blocks.
  [[nodiscard]] constexpr bool compressed() const noexcept { return block_width > 1 || block_height > 1; }
  /// A format of the table (`block_bytes` > 0).
  [[nodiscard]] constexpr bool known() const noexcept { return block_bytes > 0; }
};

/// @brief The block geometry of `format`; `block_bytes` is 0 for `undefined` and for values
/// outside the enum (which every call then refuses with `invalid_argument`).
[[nodiscard]] constexpr FormatInfo format_info(ImageFormat format) noexcept {
  switch (format) {
    case ImageFormat::undefined: return {"undefined", 1, 1, 0};
    case ImageFormat::r8_unorm: return {"r8_unorm", 1, 1, 1};
    case ImageFormat::r8_uint: return {"r8_uint", 1, 1, 1};
    case ImageFormat::rg8_unorm: return {"rg8_unorm", 1, 1, 2};
    case ImageFormat::rgba8_unorm: return {"rgba8_unorm", 1, 1, 4};
    case ImageFormat::rgba8_srgb: return {"rgba8_srgb", 1, 1, 4};
    case ImageFormat::rgba8_uint: return {"rgba8_uint", 1, 1, 4};
    case ImageFormat::bgra8_unorm: return {"bgra8_unorm", 1, 1, 4};
    case ImageFormat::bgra8_srgb: return {"bgra8_srgb", 1, 1, 4};
    case ImageFormat::r16_unorm: return {"r16_unorm", 1, 1, 2};
    case ImageFormat::r16_uint: return {"r16_uint", 1, 1, 2};
    case ImageFormat::r16_float: return {"r16_float", 1, 1, 2};
    case ImageFormat::rg16_float: return {"rg16_float", 1, 1, 4};
    case ImageFormat::rgba16_unorm: return {"rgba16_unorm", 1, 1, 8};
    case ImageFormat::rgba16_float: return {"rgba16_float", 1, 1, 8};
    case ImageFormat::r32_uint: return {"r32_uint", 1, 1, 4};
    case ImageFormat::r32_sint: return {"r32_sint", 1, 1, 4};
    case ImageFormat::r32_float: return {"r32_float", 1, 1, 4};
    case ImageFormat::rg32_uint: return {"rg32_uint", 1, 1, 8};
    case ImageFormat::rg32_float: return {"rg32_float", 1, 1, 8};
    case ImageFormat::rgba32_uint: return {"rgba32_uint", 1, 1, 16};
    case ImageFormat::rgba32_float: return {"rgba32_float", 1, 1, 16};
    case ImageFormat::rgb10a2_unorm: return {"rgb10a2_unorm", 1, 1, 4};
    case ImageFormat::rg11b10_float: return {"rg11b10_float", 1, 1, 4};
    case ImageFormat::bc1_rgba_unorm: return {"bc1_rgba_unorm", 4, 4, 8};
    case ImageFormat::bc1_rgba_srgb: return {"bc1_rgba_srgb", 4, 4, 8};
    case ImageFormat::bc2_unorm: return {"bc2_unorm", 4, 4, 16};
    case ImageFormat::bc3_unorm: return {"bc3_unorm", 4, 4, 16};
    case ImageFormat::bc3_srgb: return {"bc3_srgb", 4, 4, 16};
    case ImageFormat::bc4_unorm: return {"bc4_unorm", 4, 4, 8};
    case ImageFormat::bc5_unorm: return {"bc5_unorm", 4, 4, 16};
    case ImageFormat::bc6h_ufloat: return {"bc6h_ufloat", 4, 4, 16};
    case ImageFormat::bc6h_sfloat: return {"bc6h_sfloat", 4, 4, 16};
    case ImageFormat::bc7_unorm: return {"bc7_unorm", 4, 4, 16};
    case ImageFormat::bc7_srgb: return {"bc7_srgb", 4, 4, 16};
    case ImageFormat::astc_4x4_unorm: return {"astc_4x4_unorm", 4, 4, 16};
    case ImageFormat::astc_4x4_srgb: return {"astc_4x4_srgb", 4, 4, 16};
    case ImageFormat::astc_6x6_unorm: return {"astc_6x6_unorm", 6, 6, 16};
    case ImageFormat::astc_8x8_unorm: return {"astc_8x8_unorm", 8, 8, 16};
    case ImageFormat::astc_8x8_srgb: return {"astc_8x8_srgb", 8, 8, 16};
  }
  return {"unknown", 1, 1, 0};
}

/// @brief Lower-case name of a format ("unknown" for a value outside the enum).
[[nodiscard]] constexpr std::string_view to_string(ImageFormat format) noexcept { return format_info(format).name; }

/// @brief The shape of an image, as the engine created it.
///  - A 2D image (or 2D array) has `depth` 1 and `array_layers` >= 1; a 3D image has `depth`
///    > 1 and `array_layers` 1 (a 3D image of depth 1 copies exactly as a 2D image).
///  - Level l measures max(1, width >> l) x max(1, height >> l) x max(1, depth >> l) texels;
///    `mip_levels` is at most the full chain (floor(log2(max extent)) + 1).
struct ImageDesc {
  ImageFormat format = ImageFormat::undefined;  ///< texel format (see format_info)
  std::uint32_t width = 0;         ///< level-0 width in texels (> 0)
  std::uint32_t height = 1;        ///< level-0 height in texels (> 0)
  std::uint32_t depth = 1;         ///< level-0 depth in texels (> 1 only for 3D images)
  std::uint32_t mip_levels = 1;    ///< levels (>= 1)
  std::uint32_t array_layers = 1;  ///< layers (>= 1; 1 for 3D images)
};

/// @brief Extent of level `level` of `desc` in texels: max(1, extent >> level) per axis.
struct Extent3D {
  std::uint32_t width = 0;
  std::uint32_t height = 0;
  std::uint32_t depth = 0;
};
[[nodiscard]] constexpr Extent3D mip_extent(const ImageDesc& desc, std::uint32_t level) noexcept {
  auto shrink = [level](std::uint32_t e) { return level >= 32 ? 1u : std::max(1u, e >> level); };
  return {shrink(desc.width), shrink(desc.height), shrink(desc.depth)};
}

/// @brief Where level `level` of a host-backend image lies in its memory (the reference
/// layout; see NativeImage).
struct HostImageLevel {
  std::uint64_t offset = 0;       ///< bytes from `NativeImage::host_pointer` to the level
  std::uint64_t row_pitch = 0;    ///< bytes from one row of blocks to the next
  std::uint64_t slice_pitch = 0;  ///< bytes from one depth slice or array layer to the next
  std::uint64_t size = 0;         ///< bytes of the level (slice_pitch x depth x layers)
};

/// @brief The host backend's reference layout of level `level` (see NativeImage): level 0 at
/// offset 0 with `row_pitch` and `slice_pitch` (0 = tight); every further level right after
/// the previous one, tightly packed (rows of whole blocks, slices of whole rows). Layers and
/// slices of a level are consecutive. Expects a valid `desc` (Device::adopt_image checks).
[[nodiscard]] constexpr HostImageLevel host_image_level(const ImageDesc& desc, std::uint32_t level,
                                                        std::uint64_t row_pitch = 0,
                                                        std::uint64_t slice_pitch = 0) noexcept {
  const FormatInfo f = format_info(desc.format);
  HostImageLevel out{};
  for (std::uint32_t l = 0; l <= level; ++l) {
    const Extent3D e = mip_extent(desc, l);
    const std::uint64_t bx = (e.width + f.block_width - 1) / f.block_width;
    const std::uint64_t by = (e.height + f.block_height - 1) / f.block_height;
    const std::uint64_t tight_row = bx * f.block_bytes;
    const std::uint64_t rp = (l == 0 && row_pitch != 0) ? row_pitch : tight_row;
    const std::uint64_t sp = (l == 0 && slice_pitch != 0) ? slice_pitch : rp * by;
    if (l > 0) out.offset += out.size;
    out.row_pitch = rp;
    out.slice_pitch = sp;
    out.size = sp * e.depth * desc.array_layers;
  }
  return out;
}

/// @brief Bytes a host-backend image of `desc` spans with the given level-0 pitches (every
/// level; see host_image_level).
[[nodiscard]] constexpr std::uint64_t host_image_bytes(const ImageDesc& desc, std::uint64_t row_pitch = 0,
                                                       std::uint64_t slice_pitch = 0) noexcept {
  const HostImageLevel last = host_image_level(desc, desc.mip_levels - 1, row_pitch, slice_pitch);
  return last.offset + last.size;
}

/// @brief An engine's image as the backend addresses it (see `Device::adopt_image`). A
/// vendor-free description: each backend reads its own fields and refuses the others
/// (`invalid_argument`).
///
///  - host: `host_pointer` to memory holding every level in the reference layout
///    (`host_image_level`): level 0 with rows `host_row_pitch` bytes apart and slices (depth
///    slices or array layers) `host_slice_pitch` bytes apart (0 = tight), the further levels
///    packed after it. The engine keeps at least `host_image_bytes(desc, row, slice)` bytes.
///  - Vulkan: `vulkan_image` is a `VkImage` of the device's `VkDevice` (cast to an integer;
///    `ferry::vulkan::native_image` fills these fields from Vulkan types), created with
///    TRANSFER_SRC and TRANSFER_DST usage, optimal tiling and the color aspect, bound to
///    memory. `vulkan_layout` is its layout now (a `VkImageLayout` value; 0 = UNDEFINED, for
///    an image whose contents may be discarded) for every level and layer;
///    `vulkan_final_layout` is the layout every ferry copy leaves it in (not UNDEFINED or
///    PREINITIALIZED). `vulkan_sharing` states its sharing mode; a `concurrent` image lists
///    its families (`VkImageCreateInfo::pQueueFamilyIndices`) in `vulkan_queue_families`,
///    which must include the owner's and every executor's family.
///  - CUDA: `cuda_array` is a `cudaArray_t` (`cuda_mipmapped` false; one level, and
///    `array_layers` > 1 only for a layered array) or a `cudaMipmappedArray_t`
///    (`cuda_mipmapped` true; its levels from `cudaGetMipmappedArrayLevel`), of this device.
///    For an uncompressed format its elements are the format's block size (any channel kind
///    of those bits but a block-compressed one). For BC1-7 it is a block-compressed array
///    (CUDA 11.5 and later) of the format's own channel kind, its extent in texels as stated:
///    bc1_rgba_unorm `cudaChannelFormatKindUnsignedBlockCompressed1` (bc1_rgba_srgb: `...1SRGB`),
///    bc2_unorm `...2`, bc3_unorm `...3` (bc3_srgb: `...3SRGB`), bc4_unorm `...4`,
///    bc5_unorm `...5`, bc6h_ufloat `...6H`, bc6h_sfloat `cudaChannelFormatKindSignedBlockCompressed6H`,
///    bc7_unorm `...7` (bc7_srgb: `...7SRGB`); an array of another kind is `invalid_argument`.
///    ASTC formats have no CUDA array form (`unsupported`). HIP: not supported yet
///    (`unsupported`).
///  - interop pairs (`vulkan_cuda`, `cuda_vulkan`; interop.hpp): an `exclusive` `VkImage` of
///    the pair's `VkDevice` (`vulkan::native_handles`) with the Vulkan fields above, whose
///    memory ferry also imports into CUDA (`cudaImportExternalMemory`, then
///    `cudaExternalMemoryGetMappedMipmappedArray` of the stated shape), so that copies run on
///    the executor's API: a Vulkan queue copies into the `VkImage`, a CUDA stream into the
///    imported array. The image is created with `VkExternalMemoryImageCreateInfo` and its
///    memory allocated with `VkExportMemoryAllocateInfo`, both for
///    `VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT`, and the pair needs five more fields
///    (`vulkan::with_exported_memory` fills them): `vulkan_memory`, the `VkDeviceMemory` it
///    is bound to; `vulkan_memory_offset`, the bind offset; `vulkan_memory_size`, the
///    allocation's `allocationSize` (Vulkan has no query of it, and the import maps the whole
///    allocation); `vulkan_dedicated`, whether it was allocated for this image alone
///    (`VkMemoryDedicatedAllocateInfo`, which CUDA's import must be told); and
///    `vulkan_usage`, the image's `VkImageUsageFlags` (TRANSFER_SRC and TRANSFER_DST at least;
///    with COLOR_ATTACHMENT the import is made as a color attachment's, whose layout CUDA
///    otherwise does not assume). Around every copy the Vulkan side's queue releases the
///    image to, or acquires it from, `VK_QUEUE_FAMILY_EXTERNAL`, as for the pair's buffers,
///    with the layouts stated above. Formats: every uncompressed one and BC1-7 (ASTC has no
///    CUDA array form: `unsupported`); a `concurrent` image is `unsupported`. ferry exports
///    its own fd of the memory and owns its import, which it destroys with the `Image`
///    handle: the engine frees the memory once the release point is reached and the handle
///    is gone. Every missing or inconsistent field is `invalid_argument` naming it. A Vulkan
///    device ignores these five fields; the host and CUDA backends refuse them.
///  - null backend: not supported (`unsupported`).
struct NativeImage {
  std::uint64_t host_pointer = 0;      ///< host backend: the image's memory; 0 = none
  std::uint64_t host_row_pitch = 0;    ///< host backend: level-0 row pitch in bytes (0 = tight)
  std::uint64_t host_slice_pitch = 0;  ///< host backend: level-0 slice pitch in bytes (0 = tight)
  std::uint64_t vulkan_image = 0;      ///< VkImage handle; 0 = none
  std::uint32_t vulkan_layout = 0;     ///< VkImageLayout now (0 = VK_IMAGE_LAYOUT_UNDEFINED)
  std::uint32_t vulkan_final_layout = 0;  ///< VkImageLayout after every copy (required on Vulkan)
  MemorySharing vulkan_sharing = MemorySharing::exclusive;  ///< its VkSharingMode
  std::vector<std::uint32_t> vulkan_queue_families{};       ///< `concurrent`: its families
  std::uint64_t vulkan_memory = 0;         ///< pairs: the VkDeviceMemory the image is bound to; 0 = none
  std::uint64_t vulkan_memory_offset = 0;  ///< pairs: the image's offset in `vulkan_memory`
  std::uint64_t vulkan_memory_size = 0;    ///< pairs: `vulkan_memory`'s allocationSize
  bool vulkan_dedicated = false;           ///< pairs: `vulkan_memory` is a dedicated allocation of the image
  std::uint32_t vulkan_usage = 0;          ///< pairs: the image's VkImageUsageFlags
  std::uint64_t cuda_array = 0;        ///< CUDA: cudaArray_t / cudaMipmappedArray_t; 0 = none
  bool cuda_mipmapped = false;         ///< `cuda_array` is a mipmapped array

  /// @brief A host-backend image at `p` with level-0 pitches (0 = tight).
  [[nodiscard]] static NativeImage from_host(void* p, std::uint64_t row_pitch = 0,
                                             std::uint64_t slice_pitch = 0) noexcept {
    NativeImage n;
    n.host_pointer = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
    n.host_row_pitch = row_pitch;
    n.host_slice_pitch = slice_pitch;
    return n;
  }
};

/// @brief Options of `Device::adopt_image`.
struct ImageAdoptOptions {
  /// The engine's point after which ferry may access the image (its last use on another queue
  /// than the owner, or by the host). Empty: only the owner's work enqueued before each copy,
  /// which ferry waits for anyway. The first ferry access waits for it on the device.
  TimelinePoint ready_after{};
  std::string tag{};  ///< label for reports and error messages
};

/// @brief One region of an image copy: texels of one mip level and a range of layers (or of
/// depth slices) on the image side, and where they are in the linear buffer.
///
/// Buffer side: the region's texels are rows of blocks. Row r of slice s (s counts the depth
/// slices first, then the layers: slice = layer_index * depth + z) starts at
/// `buffer_offset + s * slice_pitch + r * row_pitch`, where `row_pitch` (0 = tight: the row's
/// bytes) and `slice_pitch = row_pitch * image_height / block_height` (image_height 0 = the
/// region's height). Rows hold ceil(width / block_width) blocks of `block_bytes` each.
///
/// Rules (checked by every copy call, each failure `invalid_argument` naming the region's
/// index): a known format; `mip_level` < mip_levels; `layer_count` >= 1 and
/// `base_layer + layer_count` <= array_layers; width, height, depth >= 1 and the box inside
/// the level (x + width <= level width, ...); 2D images have z 0 and depth 1; for
/// block-compressed formats x and y multiples of the block size, and width and height too
/// unless the box ends at the level's edge; the same in granules of the executor's queue
/// family where it copies images coarser than a block (Vulkan's
/// `minImageTransferGranularity`; (0, 0, 0): whole levels only); `buffer_offset` a multiple of max(4,
/// block_bytes) (the portable rule: Vulkan transfer queues need 4-byte aligned offsets);
/// `row_pitch` 0 or a multiple of block_bytes at least the row's bytes; `image_height` 0 or
/// at least `height` (and a multiple of block_height for compressed formats); every byte of
/// the footprint inside the buffer; regions writing the image must not overlap each other.
struct ImageRegion {
  std::uint64_t buffer_offset = 0;  ///< bytes from the buffer's start to the region's first row
  std::uint64_t row_pitch = 0;      ///< bytes between rows of blocks in the buffer; 0 = tight
  std::uint32_t image_height = 0;   ///< texel rows per slice in the buffer; 0 = `height`
  std::uint32_t mip_level = 0;      ///< the level
  std::uint32_t base_layer = 0;     ///< first array layer
  std::uint32_t layer_count = 1;    ///< layers (1 for 3D images)
  std::uint32_t x = 0;              ///< texel offset in the level
  std::uint32_t y = 0;
  std::uint32_t z = 0;              ///< 3D images only
  std::uint32_t width = 0;          ///< texel extent (>= 1)
  std::uint32_t height = 1;
  std::uint32_t depth = 1;          ///< > 1 for 3D images only

  /// @brief Every texel of level `level` (all layers), tightly packed at `offset`.
  [[nodiscard]] static ImageRegion whole_level(const ImageDesc& desc, std::uint32_t level,
                                               std::uint64_t offset = 0) noexcept {
    const Extent3D e = mip_extent(desc, level);
    ImageRegion r;
    r.buffer_offset = offset;
    r.mip_level = level;
    r.layer_count = desc.array_layers;
    r.width = e.width;
    r.height = e.height;
    r.depth = e.depth;
    return r;
  }
};

/// @brief Bytes of the linear buffer a valid region spans from its `buffer_offset`
/// (the last row ends there): what a buffer must hold past the offset.
[[nodiscard]] constexpr std::uint64_t region_bytes(const FormatInfo& f, const ImageRegion& r) noexcept {
  if (!f.known() || r.width == 0 || r.height == 0 || r.depth == 0 || r.layer_count == 0) return 0;
  const std::uint64_t row = (r.width + f.block_width - 1) / f.block_width * std::uint64_t{f.block_bytes};
  const std::uint64_t rows = (r.height + f.block_height - 1) / f.block_height;
  const std::uint64_t pitch = r.row_pitch != 0 ? r.row_pitch : row;
  const std::uint64_t slice_rows =
      r.image_height != 0 ? (r.image_height + f.block_height - 1) / f.block_height : rows;
  const std::uint64_t slices = std::uint64_t{r.depth} * r.layer_count;
  return (slices - 1) * slice_rows * pitch + (rows - 1) * pitch + row;
}

/// @brief An engine's image adopted by ferry (`Device::adopt_image`): owned by its owner
/// queue, never freed by ferry.
///
/// Move-only. Destruction without `release()` releases. After release, or after the device
/// is closed, accessors throw `invalid_argument` (`valid()` is false).
class FERRY_API Image {
 public:
  Image() = default;
  Image(Image&&) noexcept;
  Image& operator=(Image&&) noexcept;
  Image(const Image&) = delete;
  Image& operator=(const Image&) = delete;
  /// Releases (see `release`); errors are swallowed, as a destructor must not throw.
  ~Image();

  /// @brief The shape the engine stated at adoption.
  [[nodiscard]] const ImageDesc& desc(std::source_location where = std::source_location::current()) const;
  /// @brief The owner queue.
  [[nodiscard]] Queue owner(std::source_location where = std::source_location::current()) const;
  /// @brief The point of ferry's latest copy of the image (empty before the first one).
  [[nodiscard]] TimelinePoint last_access(std::source_location where = std::source_location::current()) const;
  /// @brief End ferry's use: enqueues on the owner queue a wait for ferry's last access of the
  /// image (and, on Vulkan, the ownership acquire it still owes), and returns the release
  /// point: once reached, the engine may reuse, rewrite or destroy the image. Work the engine
  /// enqueues on the owner after the call is already ordered after it. After
  /// `Device::close()` the call only makes the handle inert and returns an empty point.
  /// Errors: `invalid_argument` for a null, moved-from or already released image.
  TimelinePoint release(std::source_location where = std::source_location::current());
  /// @brief Whether this handle holds a live (adopted, not released) image.
  [[nodiscard]] bool valid() const noexcept;
  explicit operator bool() const noexcept { return valid(); }

 private:
  friend struct detail::access;
  explicit Image(std::shared_ptr<detail::ImageState> s) : state_(std::move(s)) {}
  std::shared_ptr<detail::ImageState> state_;
};

}  // namespace ferry
