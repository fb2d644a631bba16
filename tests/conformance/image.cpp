// SPDX-License-Identifier: MIT
// Images (image.hpp): an engine's image, made with its vendor's calls by the backend's test
// main (conformance::allocate_image), filled and read in regions through every image entry
// point of Transfer. Every case checks bytes against a model kept in the host backend's
// reference layout (host_image_level, tight), and on other backends also against the same
// sequence run on a host device; bad input is refused with typed errors naming the region.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "conformance.hpp"

using namespace ferry;
using conformance::expect_error;
using conformance::fill_pattern;

namespace {

constexpr auto kWait = std::chrono::seconds(60);

std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

/// The image's contents as the test expects them: every level tight in the reference layout.
struct Model {
  ImageDesc desc;
  std::vector<std::byte> bytes;
  explicit Model(const ImageDesc& d) : desc(d), bytes(host_image_bytes(d)) {}

  /// Apply region `r` between the model and linear memory `linear` (to the model when
  /// `write`): the rule of ImageRegion's buffer side, written out independently of ferry.
  void apply(const ImageRegion& r, std::byte* linear, bool write) {
    const FormatInfo f = format_info(desc.format);
    const HostImageLevel level = host_image_level(desc, r.mip_level);
    const Extent3D e = mip_extent(desc, r.mip_level);
    const std::uint64_t row = (r.width + f.block_width - 1) / f.block_width * f.block_bytes;
    const std::uint64_t rows = (r.height + f.block_height - 1) / f.block_height;
    const std::uint64_t pitch = r.row_pitch ? r.row_pitch : row;
    const std::uint64_t slice_rows = r.image_height ? (r.image_height + f.block_height - 1) / f.block_height : rows;
    for (std::uint64_t layer = 0; layer < r.layer_count; ++layer) {
      for (std::uint64_t z = 0; z < r.depth; ++z) {
        const std::uint64_t s = layer * r.depth + z;
        const std::uint64_t slice = (r.base_layer + layer) * e.depth + (r.z + z);
        for (std::uint64_t y = 0; y < rows; ++y) {
          std::byte* m = bytes.data() + level.offset + slice * level.slice_pitch +
                         (r.y / f.block_height + y) * level.row_pitch + (r.x / f.block_width) * f.block_bytes;
          std::byte* l = linear + r.buffer_offset + s * slice_rows * pitch + y * pitch;
          if (write) {
            std::memcpy(m, l, row);
          } else {
            std::memcpy(l, m, row);
          }
        }
      }
    }
  }
};

/// Regions covering every level, each tight at a 16-aligned offset of one linear buffer.
struct WholeImage {
  std::vector<ImageRegion> regions;
  std::uint64_t bytes = 0;
  explicit WholeImage(const ImageDesc& d) {
    for (std::uint32_t l = 0; l < d.mip_levels; ++l) {
      ImageRegion r = ImageRegion::whole_level(d, l, align_up(bytes, 16));
      regions.push_back(r);
      bytes = r.buffer_offset + region_bytes(format_info(d.format), r);
    }
  }
};

/// Sub-regions with padded pitches and odd offsets: for each level, one box inside it that
/// starts at the second block, on the last layers, with row pitch a block longer than the row
/// and two spare rows of blocks per slice. Laid out one after another in a linear buffer.
struct PitchedRegions {
  std::vector<ImageRegion> regions;
  std::uint64_t bytes = 0;
  explicit PitchedRegions(const ImageDesc& d) {
    const FormatInfo f = format_info(d.format);
    for (std::uint32_t l = 0; l < d.mip_levels; ++l) {
      const Extent3D e = mip_extent(d, l);
      ImageRegion r;
      r.mip_level = l;
      r.x = e.width > f.block_width ? f.block_width : 0;
      r.y = e.height > f.block_height ? f.block_height : 0;
      r.width = e.width - r.x;  // ends at the edge: any width is a whole number of blocks
      r.height = e.height - r.y;
      r.z = e.depth > 1 ? 1 : 0;
      r.depth = e.depth - r.z;
      r.base_layer = d.array_layers > 1 ? 1 : 0;
      r.layer_count = d.array_layers - r.base_layer;
      const std::uint64_t row = (r.width + f.block_width - 1) / f.block_width * f.block_bytes;
      r.row_pitch = row + f.block_bytes;
      r.image_height = align_up(r.height, f.block_height) + 2 * f.block_height;
      r.buffer_offset = align_up(bytes, 16) + std::max<std::uint64_t>(16, f.block_bytes);
      regions.push_back(r);
      bytes = r.buffer_offset + region_bytes(f, r);
    }
  }
};

/// What most cases start from: a device, an engine's image of `desc` made on it (null where
/// the device cannot make one: the case then returns, the allocator having reported the
/// skip), the owner (compute) queue and a Transfer. Members go in reverse order, so the
/// engine's image is freed before its device closes.
struct Setup {
  Device dev;
  ImageDesc desc;
  std::unique_ptr<conformance::ForeignImage> foreign;
  Queue compute;
  Transfer xfer;
  explicit Setup(const ImageDesc& d, TransferOptions options = {})
      : dev(conformance::open_device()),
        desc(d),
        foreign(conformance::allocate_image(dev, d)),
        compute(dev.queue(QueueRole::compute)),
        xfer(dev, std::move(options)) {}
  /// The engine's image, adopted with the compute queue as its owner.
  Image adopt(ImageAdoptOptions options = {}) {
    return dev.adopt_image(foreign->native, desc, compute, std::move(options));
  }
};

/// One sequence over an image of `desc` on `dev`: a whole-image upload from pinned memory,
/// pitched sub-regions from pageable memory, then a whole-image pageable download and a
/// pitched pinned download. Returns the two downloads' bytes (empty when the device cannot
/// make the image).
struct Sequence {
  std::vector<std::byte> whole, pitched;
  bool ran = false;
};

/// A host-backend image of `desc` in plain host memory, tightly packed: the oracle's image,
/// described with the public reference layout alone.
std::unique_ptr<conformance::ForeignImage> host_image(const ImageDesc& desc) {
  auto image = std::make_unique<conformance::ForeignImage>();
  auto* p = new std::byte[host_image_bytes(desc)]();
  image->native = NativeImage::from_host(p);
  image->desc = desc;
  image->free = [p] { delete[] p; };
  return image;
}

Sequence run_sequence(Device& dev, const ImageDesc& desc, Model* model, bool oracle = false) {
  Sequence out;
  auto foreign = oracle ? host_image(desc) : conformance::allocate_image(dev, desc);
  if (!foreign) return out;
  Queue compute = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  Image image = dev.adopt_image(foreign->native, desc, compute, ImageAdoptOptions{.tag = "engine"});
  CHECK(image.valid());
  CHECK(image.desc().mip_levels == desc.mip_levels);

  const WholeImage whole(desc);
  HostBuffer first = dev.host_pool().allocate(whole.bytes);
  fill_pattern(first.span(), 7 + static_cast<std::uint64_t>(desc.format));
  (void)xfer.upload_image(first, image, whole.regions);
  if (model) {
    for (const ImageRegion& r : whole.regions) model->apply(r, first.data(), true);
  }

  const PitchedRegions pitched(desc);
  std::vector<std::byte> second(pitched.bytes);
  fill_pattern(second, 91 + static_cast<std::uint64_t>(desc.format));
  (void)xfer.upload_image(std::span<const std::byte>(second), image, pitched.regions);
  if (model) {
    for (const ImageRegion& r : pitched.regions) model->apply(r, second.data(), true);
  }

  out.whole.assign(whole.bytes, std::byte{0});
  xfer.download_image(image, std::span<std::byte>(out.whole), whole.regions);
  HostBuffer back = dev.host_pool().allocate(pitched.bytes);
  std::memset(back.data(), 0, pitched.bytes);
  xfer.download_image(image, back, pitched.regions).wait(kWait);
  out.pitched.assign(back.data(), back.data() + pitched.bytes);
  image.release().wait(kWait);
  out.ran = true;
  return out;
}

/// Check a download of `regions` in `bytes` against the model, region by region, naming the
/// first differing byte; the bytes outside the regions' rows are not compared.
void check_against_model(Model& model, const std::vector<ImageRegion>& regions, const std::vector<std::byte>& bytes,
                         const std::string& what) {
  std::vector<std::byte> expect = bytes;
  for (const ImageRegion& r : regions) model.apply(r, expect.data(), false);
  std::size_t wrong = 0, first = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != expect[i] && wrong++ == 0) first = i;
  }
  CHECK_MESSAGE(wrong == 0, what << ": " << wrong << " bytes differ from the reference, the first at " << first);
}

/// The image shapes of the round trip: odd extents, a mip chain and layers for 2D; a 3D image.
ImageDesc shape_2d(ImageFormat format) {
  return ImageDesc{.format = format, .width = 37, .height = 19, .depth = 1, .mip_levels = 4, .array_layers = 3};
}
ImageDesc shape_3d(ImageFormat format) {
  return ImageDesc{.format = format, .width = 13, .height = 9, .depth = 5, .mip_levels = 3, .array_layers = 1};
}

/// One format's round trip on `dev`. A case opens one device for all its formats: a driver
/// may cap the devices a process has open at once (the NVIDIA Vulkan driver refuses
/// vkCreateDevice past about a dozen), and a case keeps each device it opens until its end.
void round_trip(Device& dev, const ImageDesc& desc) {
  INFO("format " << to_string(desc.format) << ", " << desc.width << "x" << desc.height << "x" << desc.depth
                 << ", " << desc.mip_levels << " levels, " << desc.array_layers << " layers");
  Model model(desc);
  const Sequence got = run_sequence(dev, desc, &model);
  if (!got.ran) return;
  check_against_model(model, WholeImage(desc).regions, got.whole, "whole-image download");
  check_against_model(model, PitchedRegions(desc).regions, got.pitched, "pitched download");
  // The host backend is the oracle: the same sequence there gives the same bytes.
  if (conformance::config().backend != Backend::host && Device::built_with(Backend::host)) {
    Device host = Device::open({.backend = Backend::host, .host_latency_us = 0});
    const Sequence ref = run_sequence(host, desc, nullptr, /*oracle=*/true);
    if (ref.ran) {
      CHECK_MESSAGE(ref.whole == got.whole, "whole-image download differs from the host backend's");
    }
    host.close();
  }
}

}  // namespace

CONFORMANCE_CASE("image: round trip of every uncompressed format, odd extents, mips, layers, pitches") {
  Device dev = conformance::open_device();
  for (std::uint16_t i = 1; i < kImageFormatCount; ++i) {
    const auto format = static_cast<ImageFormat>(i);
    if (format_info(format).compressed()) continue;
    round_trip(dev, shape_2d(format));
  }
}

CONFORMANCE_CASE("image: round trip of every block-compressed format in whole blocks") {
  Device dev = conformance::open_device();
  for (std::uint16_t i = 1; i < kImageFormatCount; ++i) {
    const auto format = static_cast<ImageFormat>(i);
    if (!format_info(format).compressed()) continue;
    round_trip(dev, shape_2d(format));
  }
}

CONFORMANCE_CASE("image: block-compressed levels smaller than a block copy as one partial block") {
  // 13x7 with its full chain: 13x7, 6x3, 3x1, 1x1 texels, so every level but the first is
  // narrower or lower than one 4x4 block, and the first ends in partial blocks on both axes.
  Device dev = conformance::open_device();
  for (const ImageFormat format : {ImageFormat::bc1_rgba_unorm, ImageFormat::bc4_unorm, ImageFormat::bc7_srgb}) {
    round_trip(dev, ImageDesc{.format = format, .width = 13, .height = 7, .mip_levels = 4, .array_layers = 2});
    round_trip(dev, ImageDesc{.format = format, .width = 13, .height = 7, .mip_levels = 4, .array_layers = 1});
  }
}

CONFORMANCE_CASE("image: 3D images copy depth slices") {
  Device dev = conformance::open_device();
  for (const ImageFormat format : {ImageFormat::r8_unorm, ImageFormat::rgba16_float, ImageFormat::rgba32_float}) {
    round_trip(dev, shape_3d(format));
  }
}

CONFORMANCE_CASE("image: staged copies split regions into whole rows across small staging chunks") {
  // 300 RGBA8 texels a row (1200 bytes), 70 rows a slice: a slice exceeds a 4 KiB chunk, so
  // the staged paths cut rows, and the ring of two chunks is reused many times in one call.
  const ImageDesc desc{.format = ImageFormat::rgba8_unorm, .width = 300, .height = 70, .mip_levels = 2, .array_layers = 2};
  Setup s(desc, {.staging_chunk_bytes = 4096, .staging_chunks = 2});
  if (!s.foreign) return;
  Transfer& xfer = s.xfer;
  Image image = s.adopt();
  Model model(desc);
  const WholeImage whole(desc);
  std::vector<std::byte> src(whole.bytes);
  fill_pattern(src, 5);
  (void)xfer.upload_image(std::span<const std::byte>(src), image, whole.regions);
  for (const ImageRegion& r : whole.regions) model.apply(r, src.data(), true);
  // Many small regions in one call: a 7x5 tile grid of level 0, layer 1, from one buffer.
  std::vector<ImageRegion> tiles;
  std::uint64_t at = 0;
  for (std::uint32_t ty = 0; ty < 5; ++ty) {
    for (std::uint32_t tx = 0; tx < 7; ++tx) {
      ImageRegion r{.buffer_offset = at, .base_layer = 1, .x = tx * 40, .y = ty * 13, .width = 37, .height = 11};
      tiles.push_back(r);
      at = align_up(at + region_bytes(format_info(desc.format), r), 4);
    }
  }
  std::vector<std::byte> tile_bytes(at);
  fill_pattern(tile_bytes, 6);
  (void)xfer.upload_image(std::span<const std::byte>(tile_bytes), image, tiles);
  for (const ImageRegion& r : tiles) model.apply(r, tile_bytes.data(), true);
  std::vector<std::byte> back(whole.bytes);
  xfer.download_image(image, std::span<std::byte>(back), whole.regions);
  check_against_model(model, whole.regions, back, "staged round trip");
  std::vector<std::byte> tiles_back(at);
  xfer.download_image(image, std::span<std::byte>(tiles_back), tiles);
  check_against_model(model, tiles, tiles_back, "staged tiles");
  image.release().wait(kWait);  // before the engine destroys the image
}

CONFORMANCE_CASE("image: urgent and bulk copies of one image stay ordered by the image") {
  // Each copy reads what the copy of the other class before it wrote: an image is ordered
  // like a buffer, whatever the class (transfer.hpp, "Priorities"), staged or pinned.
  const ImageDesc desc{.format = ImageFormat::rgba8_unorm, .width = 300, .height = 70, .mip_levels = 2, .array_layers = 2};
  Setup s(desc, {.bulk_piece_bytes = 64 << 10, .staging_chunk_bytes = 4096, .staging_chunks = 2});
  if (!s.foreign) return;
  Transfer& xfer = s.xfer;
  Image image = s.adopt();
  const WholeImage whole(desc);
  HostBuffer pinned = s.dev.host_pool().allocate(whole.bytes);
  std::vector<std::byte> src(whole.bytes), back(whole.bytes);
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    const bool urgent_first = round % 2 == 0;
    const Priority first = urgent_first ? Priority::urgent : Priority::bulk;
    const Priority second = urgent_first ? Priority::bulk : Priority::urgent;
    Model model(desc);
    fill_pattern(src, 40 + static_cast<std::uint64_t>(round));
    (void)xfer.upload_image(std::span<const std::byte>(src), image, whole.regions, {.priority = first});
    for (const ImageRegion& r : whole.regions) model.apply(r, src.data(), true);
    xfer.download_image(image, std::span<std::byte>(back), whole.regions, {.priority = second});
    check_against_model(model, whole.regions, back, "staged upload, then a staged download of the other class");
    fill_pattern(pinned.span(), 50 + static_cast<std::uint64_t>(round));
    (void)xfer.upload_image(pinned, image, whole.regions, {.priority = second});
    for (const ImageRegion& r : whole.regions) model.apply(r, pinned.data(), true);
    xfer.download_image(image, pinned, whole.regions, {.priority = first}).wait(kWait);
    std::memcpy(back.data(), pinned.data(), whole.bytes);
    check_against_model(model, whole.regions, back, "pinned upload, then a pinned download of the other class");
  }
  image.release().wait(kWait);  // before the engine destroys the image
}

CONFORMANCE_CASE("image: device buffers copy into images and back on the transfer queue") {
  for (const ImageFormat format : {ImageFormat::rgba16_float, ImageFormat::bc7_unorm}) {
    INFO("format " << to_string(format));
    const ImageDesc desc{.format = format, .width = 64, .height = 36, .mip_levels = 3, .array_layers = 2};
    Setup s(desc);
    if (!s.foreign) continue;
    Transfer& xfer = s.xfer;
    Image image = s.adopt();
    const WholeImage whole(desc);
    std::vector<std::byte> src(whole.bytes);
    fill_pattern(src, 17);
    Upload up = xfer.upload(std::span<const std::byte>(src), s.compute);
    (void)xfer.copy_to_image(up.buffer, image, whole.regions);
    DeviceBuffer out = s.dev.pool().allocate(whole.bytes, s.compute);
    (void)xfer.copy_from_image(image, out, whole.regions);
    std::vector<std::byte> back(whole.bytes);
    xfer.download(out, std::span<std::byte>(back));
    Model model(desc);
    for (const ImageRegion& r : whole.regions) model.apply(r, src.data(), true);
    check_against_model(model, whole.regions, back, "buffer -> image -> buffer");
    out.release();
    up.buffer.release();
    image.release().wait(kWait);
  }
}

CONFORMANCE_CASE("image: the owner orders its use after the copy, by itself when owner_waits is off") {
  Setup s({.format = ImageFormat::r32_float, .width = 33, .height = 17});
  if (!s.foreign) return;
  Transfer& xfer = s.xfer;
  Image image = s.adopt();
  const WholeImage whole(s.desc);
  for (std::uint64_t round = 0; round < 4; ++round) {
    HostBuffer h = s.dev.host_pool().allocate(whole.bytes);
    fill_pattern(h.span(), 100 + round);
    const TimelinePoint done = xfer.upload_image(h, image, whole.regions, {.owner_waits = false});
    CHECK(image.last_access().value == done.value);
    s.compute.wait(done);  // the owner's own wait: records what it owes (Vulkan: the acquire)
    std::vector<std::byte> back(whole.bytes);
    xfer.download_image(image, std::span<std::byte>(back), whole.regions);
    CHECK(conformance::first_mismatch(back, 100 + round) == -1);
  }
  const TimelinePoint released = image.release();
  released.wait(kWait);
  CHECK_FALSE(image.valid());
  expect_error(ErrorCode::invalid_argument, [&] { (void)image.release(); }, "double release");
  expect_error(ErrorCode::invalid_argument, [&] { (void)image.desc(); }, "desc of a released image");
}

CONFORMANCE_CASE("image: a caller's wait and signal lists order image copies") {
  Setup s({.format = ImageFormat::rgba8_srgb, .width = 16, .height = 16, .array_layers = 2});
  if (!s.foreign) return;
  Transfer& xfer = s.xfer;
  Image image = s.adopt();
  TimelineSemaphore gate = s.dev.create_semaphore(0);
  TimelineSemaphore after = s.dev.create_semaphore(0);
  const WholeImage whole(s.desc);
  HostBuffer h = s.dev.host_pool().allocate(whole.bytes);
  fill_pattern(h.span(), 3);
  (void)xfer.upload_image(h, image, whole.regions, {.wait = {gate.at(1)}, .signal = {after.at(5)}});
  CHECK_FALSE(after.at(5).reached());
  gate.signal(1);
  after.wait(5, kWait);
  std::vector<std::byte> back(whole.bytes);
  xfer.download_image(image, std::span<std::byte>(back), whole.regions);
  CHECK(conformance::first_mismatch(back, 3) == -1);
  image.release().wait(kWait);
}

namespace {
/// Every refusal of bad input, on an image of `format` (30x18, 3 levels, 2 layers); the
/// block rules only for a block-compressed format.
void bad_input(ImageFormat format) {
  INFO("format " << to_string(format));
  const ImageDesc desc{.format = format, .width = 30, .height = 18, .mip_levels = 3, .array_layers = 2};
  const bool blocks = format_info(format).compressed();
  Setup s(desc);
  if (!s.foreign) return;
  Device& dev = s.dev;
  Queue& compute = s.compute;
  Transfer& xfer = s.xfer;

  // Adoption: bad shapes and formats.
  auto adopt = [&](ImageDesc d) { return dev.adopt_image(s.foreign->native, d, compute); };
  expect_error(ErrorCode::invalid_argument, [&] { (void)adopt({.format = ImageFormat::undefined, .width = 4}); },
               "undefined format");
  expect_error(ErrorCode::invalid_argument,
               [&] { (void)adopt({.format = static_cast<ImageFormat>(9999), .width = 4}); }, "format outside the table");
  expect_error(ErrorCode::invalid_argument, [&] { (void)adopt({.format = ImageFormat::r8_unorm, .width = 0}); },
               "zero width");
  expect_error(ErrorCode::invalid_argument,
               [&] { (void)adopt({.format = ImageFormat::r8_unorm, .width = 8, .height = 8, .mip_levels = 5}); },
               "mip_levels beyond the chain");
  expect_error(ErrorCode::invalid_argument,
               [&] { (void)adopt({.format = ImageFormat::r8_unorm, .width = 8, .height = 8, .depth = 2, .array_layers = 2}); },
               "3D image with layers");
  expect_error(ErrorCode::invalid_argument, [&] { (void)dev.adopt_image(s.foreign->native, desc, Queue{}); },
               "null owner");
  expect_error(ErrorCode::invalid_argument, [&] { (void)dev.adopt_image(NativeImage{}, desc, compute); },
               "no native image");

  Image image = s.adopt();
  HostBuffer h = dev.host_pool().allocate(1 << 16);
  std::vector<std::byte> pageable(1 << 16);
  const ImageRegion good{.width = 8, .height = 8};
  auto bad = [&](ImageRegion r, const char* what, bool reads_too = true) {
    // The bad region is region 1 of two: the message must name it.
    const ImageRegion regions[] = {good, r};
    try {
      (void)xfer.upload_image(h, image, regions);
      FAIL_CHECK(what << ": nothing was thrown");
    } catch (const Error& e) {
      CHECK_MESSAGE(e.code() == ErrorCode::invalid_argument, what << ": " << e.what());
      const bool named = e.message().find("region 1") != std::string::npos ||
                         e.message().find("regions 0 and 1") != std::string::npos;
      CHECK_MESSAGE(named, what << ": " << e.message());
      if (conformance::kCallerLocations) CHECK(std::string(e.where().file_name()).find("image.cpp") != std::string::npos);
    }
    expect_error(ErrorCode::invalid_argument, [&] { (void)xfer.upload_image(std::span<const std::byte>(pageable), image, regions); },
                 what);
    if (reads_too) {
      expect_error(ErrorCode::invalid_argument,
                   [&] { xfer.download_image(image, std::span<std::byte>(pageable), regions); }, what);
    }
  };
  bad({.buffer_offset = 4096, .mip_level = 3, .width = 4, .height = 4}, "mip level out of range");
  bad({.buffer_offset = 4096, .base_layer = 2, .width = 4, .height = 4}, "layer out of range");
  bad({.buffer_offset = 4096, .base_layer = 1, .layer_count = 2, .width = 4, .height = 4}, "layer count out of range");
  bad({.buffer_offset = 4096, .layer_count = 0, .width = 4, .height = 4}, "zero layers");
  bad({.buffer_offset = 4096, .x = 28, .width = 4, .height = 4}, "box outside the level");
  bad({.buffer_offset = 4096, .width = 0, .height = 4}, "zero width");
  bad({.buffer_offset = 4096, .z = 1, .width = 4, .height = 4}, "z on a 2D image");
  if (blocks) {
    bad({.buffer_offset = 4096, .x = 2, .width = 4, .height = 4}, "offset not in whole blocks");
    bad({.buffer_offset = 4096, .x = 4, .width = 6, .height = 4}, "extent not in whole blocks inside the level");
    bad({.buffer_offset = 4096, .image_height = 10, .width = 8, .height = 8}, "image height not in whole blocks");
  }
  bad({.buffer_offset = 4098, .width = 4, .height = 4}, "buffer offset not a multiple of the block");
  bad({.buffer_offset = 4096, .row_pitch = format_info(format).block_bytes * 9 + 2, .width = 8, .height = 4},
      "row pitch not a multiple of the block");
  bad({.buffer_offset = 4096, .row_pitch = 8, .width = 8, .height = 4}, "row pitch below the row");
  bad({.buffer_offset = 4096, .image_height = 4, .width = 8, .height = 8}, "image height below the height");
  bad({.buffer_offset = (1 << 16) - 16, .width = 8, .height = 8}, "footprint beyond the buffer");
  bad({.buffer_offset = 4096, .row_pitch = std::uint64_t{1} << 62, .width = 8, .height = 8}, "a pitch of 2^62 bytes");
  bad({.buffer_offset = 4096, .image_height = 0x7fffffff, .layer_count = 2, .width = 8, .height = 8},
      "a footprint past the buffer by its image height");
  bad({.buffer_offset = 4096, .x = 4, .y = 4, .width = 8, .height = 8}, "overlaps region 0", /*reads_too=*/false);

  expect_error(ErrorCode::invalid_argument, [&] { (void)xfer.upload_image(h, image, std::span<const ImageRegion>()); },
               "no regions");
  const ImageRegion one[] = {good};
  expect_error(ErrorCode::invalid_argument, [&] { (void)xfer.upload_image(h, Image{}, one); }, "null image");
  {
    Transfer unstaged(dev, {.staging = false});
    expect_error(ErrorCode::invalid_argument,
                 [&] { (void)unstaged.upload_image(std::span<const std::byte>(pageable), image, one); },
                 "pageable upload without staging");
  }
  // The flags of UploadIntoOptions that concern buffer destinations only.
  expect_error(ErrorCode::invalid_argument, [&] { (void)xfer.upload_image(h, image, one, {.destination_unused = true}); },
               "destination_unused into an image");
  expect_error(ErrorCode::invalid_argument,
               [&] { (void)xfer.upload_image(std::span<const std::byte>(pageable), image, one, {.overwrite_padding = true}); },
               "overwrite_padding into an image");
  DeviceBuffer small = dev.pool().allocate(16, compute);
  expect_error(ErrorCode::invalid_argument, [&] { (void)xfer.copy_to_image(small, image, one); },
               "device buffer too small");
  expect_error(ErrorCode::invalid_argument, [&] { (void)xfer.copy_from_image(image, small, one); },
               "device buffer too small for the download");
  small.release();

  // The image still works after every refusal.
  (void)xfer.upload_image(h, image, one);
  std::vector<std::byte> back(region_bytes(format_info(desc.format), good));
  xfer.download_image(image, std::span<std::byte>(back), one);
  CHECK(std::memcmp(back.data(), h.data(), back.size()) == 0);
  image.release().wait(kWait);
  expect_error(ErrorCode::invalid_argument, [&] { (void)xfer.upload_image(h, image, one); }, "released image");
}
}  // namespace

CONFORMANCE_CASE("image: the first copy waits on the device for the engine's ready_after point") {
  Setup s({.format = ImageFormat::rg16_float, .width = 24, .height = 10});
  if (!s.foreign) return;
  Transfer& xfer = s.xfer;
  TimelineSemaphore engine = s.dev.create_semaphore(0);
  Image image = s.adopt({.ready_after = engine.at(1)});
  const WholeImage whole(s.desc);
  HostBuffer h = s.dev.host_pool().allocate(whole.bytes);
  fill_pattern(h.span(), 21);
  const TimelinePoint done = xfer.upload_image(h, image, whole.regions, {.owner_waits = false});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_FALSE(done.reached());  // held behind the engine's point
  engine.signal(1);
  done.wait(kWait);
  std::vector<std::byte> back(whole.bytes);
  xfer.download_image(image, std::span<std::byte>(back), whole.regions);
  CHECK(conformance::first_mismatch(back, 21) == -1);
  image.release().wait(kWait);
}

CONFORMANCE_CASE("image: bad regions, pitches, formats and ranges are typed errors naming the region") {
  bad_input(ImageFormat::rgba8_unorm);
}

CONFORMANCE_CASE("image: block-compressed regions must be whole blocks, else typed errors") {
  bad_input(ImageFormat::bc1_rgba_unorm);
}
