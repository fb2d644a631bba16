// SPDX-License-Identifier: MIT
// ferry-bench's contention section: how long a small urgent upload waits while a bulk copy is in
// flight, through ferry's copy priorities, beside the vendor's own ways of issuing the same
// copies (vendor_cuda.cpp, vendor_vulkan.cpp) in the same run.
#include <chrono>
#include <exception>
#include <stdexcept>

#include "bench.hpp"
#include "contention_loop.hpp"

namespace ferry_bench {
namespace {

using clock_type = std::chrono::steady_clock;

/// ferry's side: one Transfer, a bulk pinned buffer and device buffer of the bulk's size, an
/// urgent pinned buffer and device buffer of the urgent copies' size.
struct FerryRig {
  const ContentionConfig& config;
  ferry::Device dev;
  ferry::Queue owner;
  ferry::Transfer xfer;
  ferry::HostBuffer host_bulk, host_urgent;
  ferry::DeviceBuffer dev_bulk, dev_urgent;

  FerryRig(ferry::Device device, const ContentionConfig& c)
      : config(c),
        dev(std::move(device)),
        owner(dev.queue(ferry::QueueRole::compute)),
        xfer(dev, [&] {
          ferry::TransferOptions o;
          o.bulk_piece_bytes = c.piece_bytes;
          return o;
        }()),
        host_bulk(dev.host_pool().allocate(c.bulk_bytes)),
        host_urgent(dev.host_pool().allocate(c.urgent_bytes)),
        dev_bulk(dev.pool().allocate(c.bulk_bytes, owner, {.tag = "contention bulk"})),
        dev_urgent(dev.pool().allocate(c.urgent_bytes, owner, {.tag = "contention urgent"})) {
    auto bulk = host_bulk.span();
    for (std::size_t i = 0; i < bulk.size(); i += 4096) bulk[i] = static_cast<std::byte>(i >> 12);
    auto urgent = host_urgent.span();
    for (std::size_t i = 0; i < urgent.size(); ++i) urgent[i] = static_cast<std::byte>(i * 7);
  }

  // Neither copy makes the owner wait (its queue stays empty): what is timed is the copy, not
  // the ordering an engine adds after it.
  ferry::TimelinePoint bulk(bool to_device) {
    if (to_device) {
      return xfer.upload_into(host_bulk, dev_bulk,
                              {.owner_waits = false, .priority = ferry::Priority::bulk});
    }
    return xfer.download(dev_bulk, host_bulk, 0, {.priority = ferry::Priority::bulk});
  }

  /// Urgent uploads: `count` of them, or until `stop()`. Latency: each call's TimelinePoint is
  /// polled with `reached()` by the dedicated thread of run_urgent_copies.
  template <class Stop>
  std::vector<double> urgent_copies(std::uint64_t count, Stop&& stop) {
    const auto issue = [&](std::size_t) {
      return xfer.upload_into(host_urgent, dev_urgent,
                              {.owner_waits = false, .priority = ferry::Priority::urgent});
    };
    const auto done = [](const ferry::TimelinePoint& p) { return p.reached(); };
    return run_urgent_copies<ferry::TimelinePoint>(std::chrono::microseconds(config.period_us), count, issue, done,
                                                   stop);
  }

  /// One row: the bulk (none for "none"), waited for with TimelinePoint::wait, beside the
  /// urgent copies when `with_urgent`.
  ContentionRow row(const std::string& name, const std::string& dir, bool with_urgent, const std::string& how) {
    ContentionRow r{.path = "ferry", .name = name, .bulk = dir, .urgent = with_urgent, .how = how};
    measure_contention_row(
        r, config, [&] { bulk(dir == "h2d").wait(std::chrono::minutes(10)); },
        [&](std::uint64_t count, auto&& stop) { return urgent_copies(count, stop); }, [&] { xfer.synchronize(); });
    return r;
  }
};

/// A reference's rows, or why there are none (a failing vendor call included: its message
/// names the call, and ferry's rows are kept).
template <class Measure>
void add_reference(ContentionStudy& study, std::string& skipped, Measure&& measure) {
  try {
    VendorContention v = measure();
    if (!v.measured) {
      skipped = v.skipped;
      return;
    }
    for (auto& row : v.rows) study.rows.push_back(std::move(row));
  } catch (const std::exception& e) {
    skipped = std::string("failed: ") + e.what();
  }
}

}  // namespace

const ContentionRow* ContentionStudy::find(const std::string& path, const std::string& name) const {
  for (const auto& r : rows) {
    if (r.path == path && r.name == name) return &r;
  }
  return nullptr;
}

ContentionStudy run_contention(const DeviceFactory& factory, const ContentionConfig& requested,
                               const Progress& progress) {
  ContentionStudy study;
  ferry::Device first = factory.open_unrecorded();
  // One allocation holds the bulk on each side: a device whose largest allocation is smaller
  // (Vulkan's maxMemoryAllocationSize, just under 4 GiB on NVIDIA) moves the largest whole MiB
  // it allows, the same bytes for ferry and the references.
  ContentionConfig config = requested;
  const std::uint64_t largest = first.capabilities().max_allocation_bytes;
  if (largest > 0 && config.bulk_bytes > largest) config.bulk_bytes = largest & ~((std::uint64_t{1} << 20) - 1);
  study.config = config;
  ferry::Backend backend{};
  bool gpu = false;
  {
    progress.phase("contention: ferry, " + size_label(config.bulk_bytes) + " bulk beside " +
                   size_label(config.urgent_bytes) + " urgent uploads every " + std::to_string(config.period_us) +
                   " us");
    FerryRig rig(std::move(first), config);
    backend = rig.dev.backend();
    gpu = rig.dev.capabilities().is_gpu;
    study.copy_priorities = rig.dev.capabilities().copy_priorities;
    study.bulk_piece_bytes = rig.xfer.bulk_piece_bytes();
    // Warm-up: the urgent executor is made at the first urgent call; one bulk each way.
    (void)rig.urgent_copies(8, [] { return false; });
    rig.bulk(true).wait(std::chrono::minutes(10));
    rig.bulk(false).wait(std::chrono::minutes(10));
    const std::string urgent_how = "upload_into, Priority::urgent (the urgent executor)";
    const std::string bulk_how =
        study.bulk_piece_bytes > 0
            ? "Priority::bulk, pieces of " + size_label(study.bulk_piece_bytes) + " with a yield point between them"
            : std::string("Priority::bulk, not cut (the executor has no yield point)");
    study.rows.push_back(rig.row("urgent alone", "none", true, urgent_how));
    for (const char* dir : {"h2d", "d2h"}) {
      const std::string d = dir;
      const std::string call = d == "h2d" ? "upload_into, " : "download, ";
      study.rows.push_back(rig.row(d + " bulk alone", d, false, call + bulk_how));
      study.rows.push_back(rig.row(d + " bulk + urgent", d, true, call + bulk_how));
    }
  }
  // The references run on GPUs only, after ferry's buffers are freed (each side holds a bulk
  // of pinned and device memory of its own).
  if (!gpu) {
    study.cuda_skipped = study.vulkan_skipped = "not a GPU";
    study.ran = true;
    return study;
  }
  {
    progress.phase("contention: raw CUDA references");
    const ferry::Device dev = factory.open_unrecorded();
    add_reference(study, study.cuda_skipped, [&] { return measure_cuda_contention(dev, config); });
  }
  const bool pair = backend == ferry::Backend::vulkan_cuda || backend == ferry::Backend::cuda_vulkan;
  if (backend == ferry::Backend::vulkan || (pair && ferry::Device::built_with(ferry::Backend::vulkan))) {
    progress.phase("contention: raw Vulkan references");
    const ferry::Device dev = pair ? ferry::Device::open({.backend = ferry::Backend::vulkan}) : factory.open_unrecorded();
    add_reference(study, study.vulkan_skipped, [&] { return measure_vulkan_contention(dev, config); });
  } else {
    study.vulkan_skipped = "the backend's copies are not Vulkan's";
  }
  study.ran = true;
  return study;
}

}  // namespace ferry_bench
