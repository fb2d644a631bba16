// SPDX-License-Identifier: MIT
// The image example of docs/guide.md, compiled verbatim (between the markers) and run on the
// device under test with an image the backend's test main made; a second case checks that
// docs/guide.md shows exactly this text.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "conformance.hpp"

// [readme-image-example-begin]
#include <ferry/ferry.hpp>

#include <cstring>
#include <span>
#include <vector>

// A BC7 texture with its full mip chain into the engine's own image (a VkImage, a cudaArray_t
// or a host region: `native` says which), then a new tile of level 0 from pinned memory.
ferry::TimelinePoint upload_texture(ferry::Device dev, const ferry::NativeImage& native,
                                    std::span<const std::byte> mips) {
  ferry::Queue compute = dev.queue(ferry::QueueRole::compute);
  ferry::Transfer xfer(dev);
  const ferry::ImageDesc desc{.format = ferry::ImageFormat::bc7_unorm, .width = 256, .height = 256,
                              .mip_levels = 9};
  ferry::Image texture = dev.adopt_image(native, desc, compute);  // ferry never frees it

  std::vector<ferry::ImageRegion> levels;  // one region per level, packed one after another
  std::uint64_t at = 0;
  for (std::uint32_t level = 0; level < desc.mip_levels; ++level) {
    levels.push_back(ferry::ImageRegion::whole_level(desc, level, at));
    at += ferry::region_bytes(ferry::format_info(desc.format), levels.back());
  }
  xfer.upload_image(mips.first(at), texture, levels);  // pageable: staged, reusable at return

  // A 64x64 tile at (64, 64), rows 512 bytes apart in the buffer (whole 4x4 blocks).
  ferry::HostBuffer tile = dev.host_pool().allocate(16 << 10);
  std::memset(tile.data(), 0x5a, tile.size());
  const ferry::ImageRegion region{.row_pitch = 512, .x = 64, .y = 64, .width = 64, .height = 64};
  xfer.upload_image(tile, texture, {&region, 1});  // compute waits for both copies
  return texture.release();  // once reached, the engine may reuse or destroy the image
}
// [readme-image-example-end]

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string between(const std::string& text, const std::string& begin, const std::string& end) {
  auto b = text.find(begin);
  if (b == std::string::npos) return {};
  b = text.find('\n', b);
  if (b == std::string::npos) return {};
  auto e = text.find(end, b + 1);
  if (e == std::string::npos) return {};
  return text.substr(b + 1, e - b - 1);
}

}  // namespace

CONFORMANCE_CASE("readme: the image example runs") {
  ferry::Device dev = conformance::open_device();
  const ferry::ImageDesc desc{.format = ferry::ImageFormat::bc7_unorm, .width = 256, .height = 256, .mip_levels = 9};
  auto foreign = conformance::allocate_image(dev, desc);
  if (!foreign) return;
  std::vector<std::byte> mips(ferry::host_image_bytes(desc) + 64);
  conformance::fill_pattern(mips, 77);
  upload_texture(dev, foreign->native, mips).wait(std::chrono::seconds(60));

  // Adopted again, now in its final layout: level 1 holds the second region's bytes.
  ferry::NativeImage again = foreign->native;
  again.vulkan_layout = again.vulkan_final_layout;
  ferry::Image image = dev.adopt_image(again, desc, dev.queue(ferry::QueueRole::compute));
  ferry::Transfer xfer(dev);
  const ferry::ImageRegion level1 = ferry::ImageRegion::whole_level(desc, 1);
  std::vector<std::byte> back(ferry::region_bytes(ferry::format_info(desc.format), level1));
  xfer.download_image(image, std::span<std::byte>(back), {&level1, 1});
  const std::uint64_t level0 = ferry::host_image_level(desc, 0).size;
  CHECK(std::memcmp(back.data(), mips.data() + level0, back.size()) == 0);
  // The tile: its first row of blocks at (64, 64) of level 0.
  const ferry::ImageRegion tile{.x = 64, .y = 64, .width = 64, .height = 4};
  std::vector<std::byte> row(ferry::region_bytes(ferry::format_info(desc.format), tile));
  xfer.download_image(image, std::span<std::byte>(row), {&tile, 1});
  CHECK(std::all_of(row.begin(), row.end(), [](std::byte b) { return b == std::byte{0x5a}; }));
  image.release().wait(std::chrono::seconds(60));
}

#ifdef FERRY_SOURCE_ROOT
CONFORMANCE_CASE("readme: docs/guide.md shows the image example exactly") {
  const std::string root = FERRY_SOURCE_ROOT;
  const std::string source = read_file(root + "/tests/conformance/readme_image.cpp");
  const std::string readme = read_file(root + "/docs/guide.md");
  REQUIRE_FALSE(source.empty());
  REQUIRE_FALSE(readme.empty());
  const std::string code = between(source, "// [readme-image-example-begin]", "// [readme-image-example-end]");
  const std::string shown = between(readme, "<!-- readme-image-example -->", "```\n");
  REQUIRE_FALSE(code.empty());
  const std::string fence = "```cpp\n";
  REQUIRE(shown.rfind(fence, 0) == 0);
  CHECK_MESSAGE(shown.substr(fence.size()) == code,
                "docs/guide.md's image example differs from tests/conformance/readme_image.cpp");
}
#endif
