// SPDX-License-Identifier: MIT
// The docs' idioms as a consumer writes them: every public option and parameter struct
// built with C++20 designated initializers that name only some members. Compiled with
// -Wall -Wextra -Werror -Wmissing-field-initializers (tests/headers/meson.build), so a public
// struct member without a default member initializer breaks the build here before it breaks
// a consumer's; then run on the host backend.
#include <ferry/ferry.hpp>
#include <ferry/testing.hpp>
#if FERRY_HAVE_VULKAN
#include <ferry/vulkan.hpp>
#endif

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <span>
#include <vector>

namespace {

int run() {
  ferry::Device dev = ferry::Device::open({.backend = ferry::Backend::host, .ordinal = 0});
  const ferry::DeviceOptions options{.backend = ferry::Backend::host, .host_latency_us = 0};
  ferry::Device quiet = ferry::Device::open(options);
  quiet.close();

  ferry::Queue compute = dev.queue(ferry::QueueRole::compute);
  ferry::Transfer xfer(dev, {.staging_chunk_bytes = 1 << 20, .staging_chunks = 2});
  ferry::Transfer pinned_only(dev, ferry::TransferOptions{.staging = false});
  ferry::Transfer inline_packing(dev, {.executor = dev.queue(ferry::QueueRole::transfer),
                                       .staging_threads = 0});

  ferry::HostBuffer batch = dev.host_pool().allocate(1 << 16);
  std::memset(batch.data(), 1, batch.size());
  ferry::Upload up = xfer.upload(batch, compute, {.overlap = true});
  ferry::Upload tagged = pinned_only.upload(batch, compute, {.tag = "batch", .owner_waits = false});
  compute.wait(tagged.ready);
  ferry::Upload blocking = inline_packing.upload(batch, compute, ferry::UploadOptions{.tag = "waited"});
  blocking.ready.wait();

  ferry::DeviceBuffer out = dev.pool().allocate(batch.size(), compute, {.tag = "x"});
  ferry::DeviceBuffer staged = dev.pool().allocate(
      batch.size(), compute, ferry::AllocationOptions{.tag = "staged", .first_writer = xfer.executor()});
  ferry::run_synthetic_compute(compute, up.buffer, out);
  compute.wait(xfer.upload_into(batch, staged, {.owner_waits = false, .destination_unused = true}));

  std::vector<std::byte> a(300, std::byte{2}), b(500, std::byte{3});
  const ferry::HostView views[] = {{.data = a.data(), .size = a.size()},
                                   ferry::HostView{.data = b.data(), .size = b.size()}};
  ferry::UploadBatch many = xfer.upload(std::span<const ferry::HostView>(views), compute, {.tag = "views"});
  const std::uint64_t at[] = {0, 512};
  (void)xfer.upload_into(std::span<const ferry::HostView>(views), out, std::span<const std::uint64_t>(at),
                         ferry::UploadIntoOptions{.wait = {many.ready}, .overwrite_padding = true});

  std::vector<std::byte> back_a(a.size()), back_b(b.size());
  const ferry::HostSpan into[] = {{.data = back_a.data(), .size = back_a.size()},
                                  {.data = back_b.data(), .size = back_b.size()}};
  xfer.download(many, std::span<const ferry::HostSpan>(into));
  std::vector<std::byte> head(32);
  const ferry::DownloadView ranges[] = {{.offset = 0, .data = head.data(), .size = 16},
                                        {.offset = 16, .data = head.data() + 16, .size = 16}};
  xfer.download(up.buffer, std::span<const ferry::DownloadView>(ranges));

  // Structs a consumer builds for the API or for an exporter.
  [[maybe_unused]] const ferry::NativeQueue native{.handle = nullptr, .family = 1};
  [[maybe_unused]] const ferry::interop::PairOptions pair{.executor = ferry::Backend::cuda,
                                                          .owner = ferry::Backend::vulkan};
  [[maybe_unused]] const ferry::DeviceView view{.address = 0, .size = 16};
  [[maybe_unused]] const ferry::Capabilities caps{.backend = ferry::Backend::host};
  [[maybe_unused]] const ferry::QueueBudget queue_budget{.queue_id = 1};
  [[maybe_unused]] const ferry::PoolBudget budget{.reserved_bytes = 1};
  [[maybe_unused]] const ferry::PoolDetailedStatistics stats{.free_blocks = 1};
  const ferry::MemorySnapshot snapshot{
      .device_name = "idioms",
      .queues = {{.id = 0, .name = "compute"}},
      .segments = {{.address = 0, .total_size = 2 << 20,
                    .blocks = {{.address = 0, .size = 512, .state = ferry::BlockStateKind::active_allocated}}}},
      .events = {{.kind = ferry::PoolEventKind::alloc, .size = 512, .tag = "x"}},
      .activity = {{.queue_id = 0, .name = "compute", .begin_ns = 1}},
  };
  [[maybe_unused]] const ferry::Upload empty_upload{.ready = {}};
  [[maybe_unused]] const ferry::UploadBatch empty_batch{.offsets = {0}};
#if FERRY_HAVE_VULKAN
  [[maybe_unused]] const ferry::vulkan::AdoptInfo adopt{.compute_family = 0, .transfer_family = 1};
  [[maybe_unused]] const ferry::vulkan::EngineImageAcquire image_acquire{.barrier_needed = false};
#endif

  // An image: the host backend's pitched region, adopted and filled in two regions.
  const ferry::ImageDesc image_desc{.format = ferry::ImageFormat::rgba8_unorm, .width = 8, .height = 4};
  std::vector<std::byte> texels(ferry::host_image_bytes(image_desc, 64));
  ferry::Image image = dev.adopt_image(ferry::NativeImage::from_host(texels.data(), 64), image_desc, compute,
                                       {.tag = "texture"});
  const ferry::ImageRegion regions[] = {{.width = 8, .height = 2},
                                        {.buffer_offset = 64, .row_pitch = 64, .y = 2, .width = 8, .height = 2}};
  (void)xfer.upload_image(batch, image, regions, {.owner_waits = true});
  image.release().wait();
  const bool image_ok = std::all_of(texels.begin(), texels.begin() + 32, [](std::byte v) { return v == std::byte{1}; });

  up.buffer.release();
  tagged.buffer.release();
  blocking.buffer.release();
  out.release();
  staged.release();
  many.buffer.release();
  compute.synchronize();
  const bool ok = image_ok && back_a == a && back_b == b && head == std::vector<std::byte>(32, std::byte{1}) &&
                  !ferry::to_json(snapshot).empty();
  std::printf("idioms: %s\n", ok ? "ok" : "downloaded bytes differ");
  return ok ? 0 : 1;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const ferry::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
