// SPDX-License-Identifier: MIT
// The vendor's own copy, measured beside ferry in the same run (the bars in docs/benchmarks.md are
// relative to it). The CUDA anchors are built from vendor_cuda.cpp when ferry has CUDA, else
// vendor_none.cpp; the Vulkan anchors from vendor_vulkan.cpp when ferry has Vulkan, else
// vendor_vulkan_none.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ferry/image.hpp"
#include "step_trace.hpp"

namespace ferry {
class Device;
}

namespace ferry_bench {

struct VendorCopy {
  bool measured = false;
  std::string what;     ///< e.g. "cudaMemcpyAsync, pinned, event-timed"
  double h2d_gbps = 0;  ///< host->device from pinned memory, host-timed like ferry's rows
  double d2h_gbps = 0;  ///< device->host into pinned memory, host-timed like ferry's rows
  double h2d_gpu_gbps = 0;  ///< the same copies, GPU-timed (event) median
  double d2h_gpu_gbps = 0;
};

/// Measure the vendor's raw pinned copy of `bytes`, `iterations` times each way: back to back
/// on one stream with one host wait at the end, host-timed (what ferry's rows are compared
/// with), and each copy GPU-timed with events (median). `measured` is false without a device.
VendorCopy measure_vendor_copy(std::uint64_t bytes, int iterations);

/// Host time of issuing one bare vendor copy (the anchor of ferry's per-upload host cost).
struct VendorCallCost {
  bool measured = false;
  std::string what;      ///< e.g. "cudaMemcpyAsync h2d, pinned, one stream"
  double median_us = 0;  ///< per call, host-timed around the enqueue only
  double p90_us = 0;
  /// The same copy issued the way a side-queue copy must be ordered with raw CUDA (what
  /// PyTorch's side stream + wait_stream does, and what ferry's owner_owned upload + release
  /// issues): the copy stream waits for the owner's last event, copies, records; the owner
  /// stream waits for that record (the "upload"), then records its own event (the "release").
  std::string ordered_what;
  double ordered_upload_median_us = 0;  ///< wait + copy + record + owner wait
  double ordered_upload_p90_us = 0;
  double ordered_pair_median_us = 0;    ///< ... + the owner's record
  double ordered_pair_p90_us = 0;
};

/// Issue `calls` async copies of `bytes` from pinned memory to the device on one stream, each
/// host-timed on its own; the host waits for the stream every `round` calls, untimed, so the
/// command queue never fills. `measured` is false without a device.
VendorCallCost measure_vendor_call_cost(std::uint64_t bytes, int calls, int round);

/// A hand-written Vulkan loop doing what an engine would do by hand, on its own VkDevice
/// created on the physical device and queue families of a ferry Vulkan device:
/// `vkCmdCopyBuffer` on the transfer family from a host-visible staging buffer into a
/// device-local buffer, queue-family ownership release/acquire barriers when the families
/// differ, timeline semaphores both ways (the copy waits for compute's free point, compute
/// waits for the copy), and ferry's synthetic shader on the compute family.
struct VulkanAnchor {
  bool measured = false;
  std::string what;     ///< e.g. "raw Vulkan: vkCmdCopyBuffer on family 1, ..."
  std::string skipped;  ///< why not measured (empty when measured)
  std::uint64_t bytes = 0;
  std::uint32_t compute_family = 0, transfer_family = 0;
  double h2d_gbps = 0;      ///< staging -> device-local, back to back, one host wait, host-timed
  double d2h_gbps = 0;      ///< device-local -> staging, the same way
  double submit_us = 0;     ///< median host time of one vkQueueSubmit of a recorded copy
  double copy_us = 0;       ///< median host time of one copy: record the command buffer + submit
  /// Step loops with ferry-bench's shape (30 steps, `units` passes, `inflight` ahead), in ms.
  struct Loop {
    double step_ms = 0;     ///< steady-state step time (StepClock)
    double step_ms_with_warmup = 0;  ///< wall time / steps, first steps included
    double compute_ms = 0;  ///< the step's dispatches alone
    double overlap = 0;     ///< step_ms / max(compute_ms, one back-to-back copy)
    StepTimes times;        ///< where the steps' time went (traced runs only)
  };
  Loop seed;      ///< compute over an unrelated buffer during the copy, then one pass on the batch
  Loop pipeline;  ///< compute reads the batch; the copy of batch i+1 into a second buffer overlaps it
};

/// Measure the raw Vulkan loop on `device`'s physical device and families (a ferry device of
/// the Vulkan backend; others give `measured = false` with the reason in `skipped`). Every
/// Vulkan call's result is checked: a failure throws std::runtime_error naming the call.
VulkanAnchor measure_vulkan_anchor(const ferry::Device& device, std::uint64_t bytes, int iterations, int steps,
                                   std::uint32_t units, int inflight, bool trace);

/// Host time of one raw Vulkan submit per small copy: a command buffer holding one
/// `vkCmdCopyBuffer` of `bytes` (host-visible -> device-local) on the transfer family,
/// submitted `calls` times, one `vkQueueSubmit` each with a timeline signal, each submit
/// host-timed; the host waits for the timeline every `round` calls, untimed.
struct VulkanCallCost {
  bool measured = false;
  std::string what;
  double median_us = 0;
  double p90_us = 0;
};
VulkanCallCost measure_vulkan_call_cost(const ferry::Device& device, std::uint64_t bytes, int calls, int round);

/// An engine's image made with the vendor's own calls for the image study (engines own their
/// images: ferry only adopts them), destroyed with the object. Without an image, `skipped`
/// says why (a format or shape the device lacks, a build without the vendor).
struct VendorImage {
  ferry::NativeImage native{};
  std::string what;     ///< e.g. "VkImage, optimal tiling, device-local"
  std::string skipped;  ///< why no image was made (empty when one was)
  std::function<void()> free{};
  VendorImage() = default;
  VendorImage(const VendorImage&) = delete;
  VendorImage& operator=(const VendorImage&) = delete;
  ~VendorImage() {
    if (free) free();
  }
  [[nodiscard]] bool made() const { return skipped.empty(); }
};

/// The vendor's own copy of an image's regions, beside ferry's upload_image and
/// download_image in the same run: every region from pinned host memory into the image (or
/// back) as one operation, waited for by the host, `reps` times each way after a warm-up.
struct VendorImageCopy {
  bool measured = false;
  std::string what;           ///< e.g. "raw Vulkan: vkCmdCopyBufferToImage on family 1"
  std::string skipped;        ///< why not measured (empty when measured)
  double upload_gbps = 0;     ///< median over the reps of one copy's bytes / its host time
  double download_gbps = 0;
  double upload_call_us = 0;  ///< median host time of issuing one upload (no wait)
};

/// A CUDA array of `desc` on `device`'s GPU: a cudaArray_t (one level; layered for several
/// layers) or a cudaMipmappedArray_t, of unsigned elements of the format's block size, as
/// ferry's CUDA backend adopts them; block-compressed formats as the driver's BC channel
/// kinds, which that backend refuses (`unsupported`: the study then reports ferry's reason).
/// Every CUDA call is checked: a failure throws std::runtime_error naming the call.
std::unique_ptr<VendorImage> make_cuda_image(const ferry::Device& device, const ferry::ImageDesc& desc);
/// cudaMemcpy2DToArrayAsync / cudaMemcpy2DFromArrayAsync per region of a plain 2D level,
/// cudaMemcpy3DAsync for layers, into and out of `image` (from make_cuda_image) from pinned
/// memory on one non-blocking stream; the regions' buffer side tight, as ferry's rows copy it.
VendorImageCopy measure_cuda_image_copy(const ferry::Device& device, const VendorImage& image,
                                        const ferry::ImageDesc& desc, std::span<const ferry::ImageRegion> regions,
                                        std::uint64_t bytes, int reps);

/// A VkImage of `desc` on `device`'s own VkDevice (ferry's device, so that ferry can adopt
/// it): optimal tiling, device-local memory of its own, transfer and sampled usage, EXCLUSIVE,
/// in UNDEFINED layout and SHADER_READ_ONLY_OPTIMAL after every copy. Without one (the device
/// lacks the format or the shape), `skipped` says why. Every Vulkan call is checked.
std::unique_ptr<VendorImage> make_vulkan_image(const ferry::Device& device, const ferry::ImageDesc& desc);
/// The raw Vulkan image copy on the loop's own VkDevice (as the raw Vulkan loop: the ferry
/// device's physical device and families): an image of `desc` like make_vulkan_image's, a
/// host-visible staging buffer of `bytes`, and per copy one command buffer on the transfer
/// family with the transition to TRANSFER_DST_OPTIMAL (TRANSFER_SRC_OPTIMAL), one
/// vkCmdCopyBufferToImage (vkCmdCopyImageToBuffer) of every region, and the transition to
/// SHADER_READ_ONLY_OPTIMAL, submitted with a timeline signal the host waits for.
VendorImageCopy measure_vulkan_image_copy(const ferry::Device& device, const ferry::ImageDesc& desc,
                                          std::span<const ferry::ImageRegion> regions, std::uint64_t bytes, int reps);

/// The contention section's shape (docs/benchmarks.md, "Contention"): a bulk copy of
/// `bulk_bytes` from or into pinned memory, and beside it one urgent pinned host->device copy of
/// `urgent_bytes` every `period_us`, for as long as the bulk runs.
struct ContentionConfig {
  std::uint64_t bulk_bytes = 4096ull << 20;
  std::uint64_t urgent_bytes = 64ull << 10;
  int period_us = 500;
  int reps = 3;              ///< bulk copies per row; urgent samples pooled, GB/s the median
  int alone_copies = 400;    ///< urgent copies of a row without bulk
  std::uint64_t chunk_bytes = 32ull << 20;  ///< TorchRec's chunks (the chunked reference)
  std::uint64_t piece_bytes = 0;  ///< ferry's TransferOptions::bulk_piece_bytes (0: the default)
};

/// One row of the contention section: urgent copies (latency from the host clock just before
/// the call to their completion seen by a polling thread), a bulk copy (GB/s: bytes over the
/// host time from just before its call to its completion), or both at once.
struct ContentionRow {
  std::string path;       ///< "ferry", "cuda", "vulkan"
  std::string name;       ///< unique within its path: "urgent alone", "h2d bulk + urgent", ...
  std::string bulk;       ///< "none", "h2d", "d2h"
  bool urgent = true;     ///< whether urgent copies ran
  /// How the row's bulk was issued; for a row without bulk, how the urgent copies were (every
  /// row of a path issues its urgent copies that way).
  std::string how;
  std::uint64_t samples = 0;
  double p50_us = 0, p99_us = 0, max_us = 0;
  double bulk_gbps = 0;   ///< median over the reps; 0 without bulk
};

/// A vendor's contention references: rows of path "cuda" or "vulkan".
struct VendorContention {
  bool measured = false;
  std::string skipped;    ///< why not measured (empty when measured)
  std::vector<ContentionRow> rows;
};

/// The raw CUDA references on `device`'s GPU (by UUID): urgent copies alone on a stream of the
/// greatest priority; the bulk as one cudaMemcpyAsync alone and beside the urgent copies; the
/// bulk in `chunk_bytes` chunks with an empty kernel between chunks on the bulk stream
/// (TorchRec's way) beside them; each host->device, and the same bulks device->host beside the
/// host->device urgent copies. Every CUDA call is checked: a failure throws std::runtime_error
/// naming the call.
VendorContention measure_cuda_contention(const ferry::Device& device, const ContentionConfig& config);

/// The raw Vulkan references on the physical device of `device` (Vulkan backend), on a VkDevice
/// of their own: the bulk as one vkCmdCopyBuffer on the transfer family's queue, alone and
/// beside the urgent copies on another queue, and the urgent copies alone. Every Vulkan call is
/// checked: a failure throws std::runtime_error naming the call.
VendorContention measure_vulkan_contention(const ferry::Device& device, const ContentionConfig& config);

/// The CUDA references, as the module ferry-bench-cuda provides them (vendor_cuda.cpp): the
/// functions above, implemented there against the CUDA runtime. ferry-bench opens the module
/// at run time (vendor_cuda_loader.cpp), so the bench itself links nothing of CUDA.
struct VendorCudaApi {
  VendorCopy (*measure_vendor_copy)(std::uint64_t bytes, int iterations);
  VendorCallCost (*measure_vendor_call_cost)(std::uint64_t bytes, int calls, int round);
  std::unique_ptr<VendorImage> (*make_cuda_image)(const ferry::Device& device, const ferry::ImageDesc& desc);
  VendorImageCopy (*measure_cuda_image_copy)(const ferry::Device& device, const VendorImage& image,
                                             const ferry::ImageDesc& desc, std::span<const ferry::ImageRegion> regions,
                                             std::uint64_t bytes, int reps);
  VendorContention (*measure_cuda_contention)(const ferry::Device& device, const ContentionConfig& config);
};

}  // namespace ferry_bench
