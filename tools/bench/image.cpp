// SPDX-License-Identifier: MIT
// ferry-bench: the image study. Each case is an engine's image, made with the vendor's own
// calls (engines own their images; ferry only adopts them) and adopted with
// Device::adopt_image, then filled and read back in whole levels from and into pinned memory
// (a HostBuffer) by Transfer::upload_image and download_image. Beside it in the same run: the
// same bytes as one ferry buffer copy (upload_into and download of a DeviceBuffer), and the
// vendor's own copy of the same regions (vendor.hpp). The host backend's image is plain host
// memory in the reference layout, and its "vendor" copy a memcpy of every row by one thread.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "bench.hpp"

namespace ferry_bench {
namespace {

constexpr auto kWait = std::chrono::minutes(10);

/// Whole levels, one region each, tight, at 16-byte aligned offsets of one linear buffer.
void plan_regions(ImageCase& c) {
  const ferry::FormatInfo f = ferry::format_info(c.desc.format);
  std::uint64_t at = 0;
  for (std::uint32_t l = 0; l < c.desc.mip_levels; ++l) {
    const ferry::ImageRegion r = ferry::ImageRegion::whole_level(c.desc, l, (at + 15) / 16 * 16);
    c.regions.push_back(r);
    at = r.buffer_offset + ferry::region_bytes(f, r);
  }
  c.bytes = at;
}

/// The cases: a 4K RGBA8 frame, a BC7 texture with its full chain, a layered RGBA8 array of
/// `layers` layers.
std::vector<ImageCase> plan_cases(std::uint32_t layers) {
  using F = ferry::ImageFormat;
  std::vector<ImageCase> cases(3);
  cases[0].name = "frame";
  cases[0].desc = {.format = F::rgba8_unorm, .width = 3840, .height = 2160};
  cases[1].name = "bc7_mips";
  cases[1].desc = {.format = F::bc7_unorm, .width = 4096, .height = 4096, .mip_levels = 13};
  cases[2].name = "layers";
  cases[2].desc = {.format = F::rgba8_unorm, .width = 256, .height = 256, .array_layers = layers};
  for (ImageCase& c : cases) plan_regions(c);
  return cases;
}

/// A host-backend image: host memory in the reference layout, tight.
std::unique_ptr<VendorImage> make_host_image(const ferry::ImageDesc& desc) {
  auto image = std::make_unique<VendorImage>();
  const std::uint64_t bytes = ferry::host_image_bytes(desc);
  void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  image->native = ferry::NativeImage::from_host(p);
  image->what = "host memory, reference layout";
  image->free = [p] { std::free(p); };
  return image;
}

/// The engine's image of `desc` on `dev`, made with its backend's vendor calls.
std::unique_ptr<VendorImage> make_image(const ferry::Device& dev, const ferry::ImageDesc& desc) {
  switch (dev.backend()) {
    case ferry::Backend::host: return make_host_image(desc);
    case ferry::Backend::cuda: return make_cuda_image(dev, desc);
    case ferry::Backend::vulkan: return make_vulkan_image(dev, desc);
    default: break;
  }
  auto none = std::make_unique<VendorImage>();
  none->skipped = "ferry adopts images of the host, CUDA and Vulkan backends only, not " +
                  std::string(ferry::to_string(dev.backend()));
  return none;
}

/// The host backend's anchor: every region's rows copied by memcpy between the pinned buffer
/// and the image's memory in the reference layout, on the calling thread.
VendorImageCopy host_image_copy(const VendorImage& image, const ImageCase& c, std::byte* linear, int reps) {
  const ferry::FormatInfo f = ferry::format_info(c.desc.format);
  auto* base = reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(image.native.host_pointer));
  auto copy = [&](bool to_image) {
    for (const ferry::ImageRegion& r : c.regions) {
      const ferry::HostImageLevel level = ferry::host_image_level(c.desc, r.mip_level);
      const std::uint64_t row = (r.width + f.block_width - 1) / f.block_width * f.block_bytes;
      const std::uint64_t rows = (r.height + f.block_height - 1) / f.block_height;
      std::byte* in = linear + r.buffer_offset;
      for (std::uint64_t s = 0; s < std::uint64_t{r.layer_count} * r.depth; ++s) {
        std::byte* at = base + level.offset + (r.base_layer * std::uint64_t{r.depth} + s) * level.slice_pitch;
        for (std::uint64_t y = 0; y < rows; ++y, in += row) {
          std::byte* img = at + y * level.row_pitch;
          std::memcpy(to_image ? img : in, to_image ? in : img, row);
        }
      }
    }
  };
  auto timed = [&](bool to_image) {
    const auto issue = [&] {
      copy(to_image);
      return 0;
    };
    return time_copies(c.bytes, reps, issue, [](int) {});  // done when the call returns
  };
  const CopyTimes up = timed(true);
  VendorImageCopy r;
  r.upload_gbps = up.gbps;
  r.upload_call_us = up.call_us;
  r.download_gbps = timed(false).gbps;
  r.what = "raw host: memcpy of every row, one thread";
  r.measured = true;
  return r;
}

/// `reps` timed ferry calls of `bytes`, `call()` returning the copy's point (see time_copies).
template <class Call>
CopyTimes time_calls(std::uint64_t bytes, int reps, Call&& call) {
  return time_copies(bytes, reps, call, [](const ferry::TimelinePoint& done) { done.wait(kWait); });
}

void fill(std::span<std::byte> bytes) {
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>((i * 131 + 7) & 0xff);
}

/// Measure case `c` on a fresh device (see ImageCase).
void run_case(const DeviceFactory& factory, ImageCase& c, int reps) {
  ferry::Device dev = factory.open();
  const std::unique_ptr<VendorImage> native = make_image(dev, c.desc);  // after dev: freed before it closes
  if (!native->made()) {
    c.skipped = native->skipped;
    return;
  }
  c.image_what = native->what;
  ferry::Queue compute = dev.queue(ferry::QueueRole::compute);
  ferry::Transfer xfer(dev);
  ferry::HostBuffer source = dev.host_pool().allocate(c.bytes);
  ferry::HostBuffer back = dev.host_pool().allocate(c.bytes);
  fill(source.span());
  {
    ferry::Image image;
    try {
      image = dev.adopt_image(native->native, c.desc, compute, ferry::ImageAdoptOptions{.tag = c.name});
    } catch (const ferry::Error& e) {
      if (e.code() != ferry::ErrorCode::unsupported) throw;
      c.skipped = e.message();
      return;
    }
    const CopyTimes up = time_calls(c.bytes, reps, [&] { return xfer.upload_image(source, image, c.regions); });
    const CopyTimes down = time_calls(c.bytes, reps, [&] { return xfer.download_image(image, back, c.regions); });
    // Every region is tight and the regions cover the image: the bytes come back as they went.
    if (std::memcmp(source.data(), back.data(), c.bytes) != 0) {
      throw std::runtime_error("image study: " + c.name + ": the downloaded image differs from the uploaded one");
    }
    c.upload_gbps = up.gbps;
    c.upload_call_us = up.call_us;
    c.download_gbps = down.gbps;
    c.download_call_us = down.call_us;
    image.release().wait(kWait);
  }
  {
    ferry::DeviceBuffer buffer = dev.pool().allocate(c.bytes, compute, {.tag = "image study buffer"});
    const CopyTimes up = time_calls(c.bytes, reps, [&] {
      return xfer.upload_into(source, buffer);
    });
    const CopyTimes down = time_calls(c.bytes, reps, [&] { return xfer.download(buffer, back); });
    c.buffer_upload_gbps = up.gbps;
    c.buffer_upload_call_us = up.call_us;
    c.buffer_download_gbps = down.gbps;
    c.buffer_download_call_us = down.call_us;
    buffer.release();
  }
  xfer.synchronize(kWait);
  switch (dev.backend()) {
    case ferry::Backend::host: c.raw = host_image_copy(*native, c, source.data(), reps); break;
    case ferry::Backend::cuda:
      c.raw = measure_cuda_image_copy(dev, *native, c.desc, c.regions, c.bytes, reps);
      break;
    case ferry::Backend::vulkan: c.raw = measure_vulkan_image_copy(dev, c.desc, c.regions, c.bytes, reps); break;
    default: c.raw.skipped = "no raw image copy for this backend"; break;
  }
}

}  // namespace

std::string ImageCase::shape() const {
  return std::to_string(desc.width) + "x" + std::to_string(desc.height) + " " +
         std::string(ferry::to_string(desc.format)) + ", " + std::to_string(desc.mip_levels) +
         (desc.mip_levels == 1 ? " level, " : " levels, ") + std::to_string(desc.array_layers) +
         (desc.array_layers == 1 ? " layer" : " layers");
}

ImageStudy run_image_study(const DeviceFactory& factory, int reps, double scale, const Progress& progress) {
  ImageStudy study;
  study.reps = reps;
  study.scale = scale;
  const auto layers = static_cast<std::uint32_t>(std::max(1.0, 2048 * scale + 0.5));
  study.cases = plan_cases(layers);
  std::size_t k = 0;
  for (ImageCase& c : study.cases) {
    progress.phase("[images " + std::to_string(++k) + "/" + std::to_string(study.cases.size()) + "] " + c.name +
                   ": " + c.shape());
    run_case(factory, c, reps);
  }
  study.ran = true;
  return study;
}

}  // namespace ferry_bench
