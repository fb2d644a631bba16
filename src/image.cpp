// SPDX-License-Identifier: MIT
// Images (include/ferry/image.hpp): adoption of an engine's image, the Image handle, the
// checks of copy regions, the hand-over of an image between its owner and the executor
// (layouts and queue-family ownership on Vulkan), and the six image copies of Transfer, with
// pageable sources and destinations staged through the Transfer's ring.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "call.hpp"
#include "pacing.hpp"
#include "ferry/image.hpp"
#include "ferry/transfer.hpp"
#include "image_state.hpp"

namespace ferry {

namespace {

using detail::Call;
using detail::ImageCopy;
using detail::ImageState;
using detail::ImageUse;
using detail::QueuePtr;

std::string region_name(std::size_t i) { return "region " + std::to_string(i); }

/// Levels of the full mip chain of `desc`: floor(log2(largest extent)) + 1.
std::uint32_t full_chain(const ImageDesc& desc) {
  std::uint32_t largest = std::max({desc.width, desc.height, desc.depth});
  std::uint32_t levels = 1;
  while (largest > 1) {
    largest >>= 1;
    ++levels;
  }
  return levels;
}

void check_desc(const ImageDesc& desc, const char* fn, const std::source_location& where) {
  const FormatInfo f = format_info(desc.format);
  FERRY_REQUIRE(f.known(), fn,
                "desc.format " + std::to_string(static_cast<unsigned>(desc.format)) + " (" + std::string(f.name) +
                    ") is not a format of the table (format_info)",
                where);
  FERRY_REQUIRE(desc.width >= 1 && desc.height >= 1 && desc.depth >= 1, fn,
                "desc extent " + std::to_string(desc.width) + "x" + std::to_string(desc.height) + "x" +
                    std::to_string(desc.depth) + " has a zero axis",
                where);
  FERRY_REQUIRE(desc.array_layers >= 1, fn, "desc.array_layers is 0", where);
  FERRY_REQUIRE(desc.depth == 1 || desc.array_layers == 1, fn,
                "a 3D image (depth " + std::to_string(desc.depth) + ") has one layer, not " +
                    std::to_string(desc.array_layers),
                where);
  const std::uint32_t chain = full_chain(desc);
  FERRY_REQUIRE(desc.mip_levels >= 1 && desc.mip_levels <= chain, fn,
                "desc.mip_levels " + std::to_string(desc.mip_levels) + " is outside [1, " + std::to_string(chain) +
                    "] (the full chain of a " + std::to_string(desc.width) + "x" + std::to_string(desc.height) + "x" +
                    std::to_string(desc.depth) + " image)",
                where);
}

ImageState& checked_image(const Image& image, detail::DeviceState* device, const char* function,
                          const std::source_location& where) {
  const auto& s = detail::access::state(image);
  FERRY_REQUIRE(s != nullptr, function, "null or moved-from image", where);
  (void)detail::lock_device(s->device, function, where);
  FERRY_REQUIRE(!s->released, function, "the image was released", where);
  FERRY_REQUIRE(s->device_id == device, function, "the image belongs to another device", where);
  return *s;
}

/// Check every region against `img` and a buffer of `buffer_size` bytes (`buffer` names it),
/// and resolve them for the backend. `writes`: the regions write the image, so they must not
/// overlap.
std::vector<ImageCopy> resolve_regions(const ImageState& img, std::span<const ImageRegion> regions,
                                       std::uint64_t buffer_size, const char* buffer, bool writes,
                                       const Extent3D& granularity, const char* fn,
                                       const std::source_location& where) {
  FERRY_REQUIRE(!regions.empty(), fn, "empty span of regions", where);
  FERRY_REQUIRE(regions.size() <= max_batch_views, fn,
                std::to_string(regions.size()) + " regions exceed the limit of " + std::to_string(max_batch_views),
                where);
  const FormatInfo& f = img.format;
  const ImageDesc& d = img.desc;
  const std::uint64_t align = std::max<std::uint64_t>(4, f.block_bytes);
  std::vector<ImageCopy> out(regions.size());
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const ImageRegion& r = regions[i];
    const std::string what = region_name(i);
    FERRY_REQUIRE(r.mip_level < d.mip_levels, fn,
                  what + ": mip_level " + std::to_string(r.mip_level) + " is out of range (the image has " +
                      std::to_string(d.mip_levels) + " levels)",
                  where);
    FERRY_REQUIRE(r.layer_count >= 1, fn, what + ": layer_count is 0", where);
    FERRY_REQUIRE(r.base_layer < d.array_layers && r.layer_count <= d.array_layers - r.base_layer, fn,
                  what + ": layers [" + std::to_string(r.base_layer) + ", +" + std::to_string(r.layer_count) +
                      ") are out of range (the image has " + std::to_string(d.array_layers) + " layers)",
                  where);
    FERRY_REQUIRE(r.width >= 1 && r.height >= 1 && r.depth >= 1, fn,
                  what + ": extent " + std::to_string(r.width) + "x" + std::to_string(r.height) + "x" +
                      std::to_string(r.depth) + " has a zero axis",
                  where);
    const Extent3D e = mip_extent(d, r.mip_level);
    const auto inside = [](std::uint32_t at, std::uint32_t n, std::uint32_t size) { return at < size && n <= size - at; };
    FERRY_REQUIRE(inside(r.x, r.width, e.width) && inside(r.y, r.height, e.height) && inside(r.z, r.depth, e.depth),
                  fn,
                  what + ": box at (" + std::to_string(r.x) + ", " + std::to_string(r.y) + ", " + std::to_string(r.z) +
                      ") of " + std::to_string(r.width) + "x" + std::to_string(r.height) + "x" +
                      std::to_string(r.depth) + " exceeds mip level " + std::to_string(r.mip_level) + " (" +
                      std::to_string(e.width) + "x" + std::to_string(e.height) + "x" + std::to_string(e.depth) + ")",
                  where);
    if (f.compressed()) {
      const auto block_ok = [](std::uint32_t at, std::uint32_t n, std::uint32_t size, std::uint32_t block) {
        return at % block == 0 && (n % block == 0 || at + n == size);
      };
      FERRY_REQUIRE(block_ok(r.x, r.width, e.width, f.block_width) && block_ok(r.y, r.height, e.height, f.block_height),
                    fn,
                    what + ": " + std::string(f.name) + " copies whole " + std::to_string(f.block_width) + "x" +
                        std::to_string(f.block_height) +
                        " blocks: the offset must be a multiple of the block and the extent too unless it ends at "
                        "the level's edge (offset " +
                        std::to_string(r.x) + ", " + std::to_string(r.y) + ", extent " + std::to_string(r.width) +
                        "x" + std::to_string(r.height) + ")",
                    where);
    }
    {
      // The executor's queue family copies boxes of whole granules (in blocks; none but whole
      // levels when the granularity is 0).
      const auto granule_ok = [](std::uint32_t at, std::uint32_t n, std::uint32_t size, std::uint64_t g) {
        return g == 0 ? (at == 0 && n == size) : (at % g == 0 && (n % g == 0 || at + n == size));
      };
      const std::uint64_t gx = std::uint64_t{granularity.width} * f.block_width;
      const std::uint64_t gy = std::uint64_t{granularity.height} * f.block_height;
      const std::uint64_t gz = granularity.depth;
      FERRY_REQUIRE(granule_ok(r.x, r.width, e.width, gx) && granule_ok(r.y, r.height, e.height, gy) &&
                        granule_ok(r.z, r.depth, e.depth, gz),
                    fn,
                    what + ": the executor's queue family copies images in granules of " + std::to_string(gx) +
                        "x" + std::to_string(gy) + "x" + std::to_string(gz) +
                        " texels (0: whole levels only); the box must start on one and end on one or at the "
                        "level's edge",
                    where);
    }
    FERRY_REQUIRE(r.buffer_offset % align == 0, fn,
                  what + ": buffer_offset " + std::to_string(r.buffer_offset) + " is not a multiple of " +
                      std::to_string(align) + " bytes (max(4, the format's block of " + std::to_string(f.block_bytes) +
                      " bytes))",
                  where);
    const std::uint64_t blocks_x = (r.width + f.block_width - 1) / f.block_width;
    const std::uint64_t rows = (r.height + f.block_height - 1) / f.block_height;
    const std::uint64_t row_bytes = blocks_x * f.block_bytes;
    const std::uint64_t pitch = r.row_pitch != 0 ? r.row_pitch : row_bytes;
    FERRY_REQUIRE(pitch >= row_bytes && pitch % f.block_bytes == 0, fn,
                  what + ": row_pitch " + std::to_string(r.row_pitch) + " must be 0 or a multiple of " +
                      std::to_string(f.block_bytes) + " bytes of at least the row's " + std::to_string(row_bytes) +
                      " bytes",
                  where);
    const std::uint64_t texels_per_row = pitch / f.block_bytes * f.block_width;
    FERRY_REQUIRE(texels_per_row <= 0x7fffffffu, fn,
                  what + ": row_pitch " + std::to_string(pitch) + " spans more than 2^31 texels", where);
    const std::uint64_t image_height = r.image_height != 0 ? r.image_height : r.height;
    FERRY_REQUIRE(image_height >= r.height && (r.image_height == 0 || r.image_height % f.block_height == 0), fn,
                  what + ": image_height " + std::to_string(r.image_height) + " must be 0 or at least the height " +
                      std::to_string(r.height) +
                      (f.compressed() ? " and a multiple of the block height " + std::to_string(f.block_height) : ""),
                  where);
    const std::uint64_t slice_rows = (image_height + f.block_height - 1) / f.block_height;
    // The footprint, refused when any step overflows 64 bits: the last row of the last slice
    // ends at (slices - 1) * slice_pitch + (rows - 1) * pitch + row_bytes.
    const std::uint64_t slices = std::uint64_t{r.depth} * r.layer_count;
    std::uint64_t slice_pitch = 0, to_slice = 0, to_row = 0, span = 0;
    const bool overflow = __builtin_mul_overflow(slice_rows, pitch, &slice_pitch) ||
                          __builtin_mul_overflow(slices - 1, slice_pitch, &to_slice) ||
                          __builtin_mul_overflow(rows - 1, pitch, &to_row) ||
                          __builtin_add_overflow(to_slice, to_row, &span) ||
                          __builtin_add_overflow(span, row_bytes, &span);
    FERRY_REQUIRE(!overflow, fn, what + ": its footprint in the " + buffer + " exceeds 2^64 bytes", where);
    FERRY_REQUIRE(r.buffer_offset <= buffer_size && span <= buffer_size - r.buffer_offset, fn,
                  what + ": its bytes [" + std::to_string(r.buffer_offset) + ", +" + std::to_string(span) +
                      ") exceed the " + buffer + "'s " + std::to_string(buffer_size) + " bytes",
                  where);
    ImageCopy& c = out[i];
    c.buffer_offset = r.buffer_offset;
    c.row_pitch = pitch;
    c.slice_pitch = slice_pitch;
    c.row_bytes = row_bytes;
    c.rows = static_cast<std::uint32_t>(rows);
    c.row_length = static_cast<std::uint32_t>(texels_per_row);
    c.image_height = static_cast<std::uint32_t>(slice_rows * f.block_height);
    c.mip = r.mip_level;
    c.base_layer = r.base_layer;
    c.layers = r.layer_count;
    c.x = r.x;
    c.y = r.y;
    c.z = r.z;
    c.width = r.width;
    c.height = r.height;
    c.depth = r.depth;
  }
  if (writes && regions.size() > 1) {
    // Regions written into one image must not overlap (the result would depend on the copy
    // order): a sweep over x within each level finds every pair whose x ranges intersect.
    std::vector<std::uint32_t> order(regions.size());
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
      return regions[a].mip_level != regions[b].mip_level ? regions[a].mip_level < regions[b].mip_level
                                                          : regions[a].x < regions[b].x;
    });
    const auto meets = [](std::uint64_t a, std::uint64_t an, std::uint64_t b, std::uint64_t bn) {
      return a < b + bn && b < a + an;
    };
    for (std::size_t i = 0; i < order.size(); ++i) {
      const ImageRegion& a = regions[order[i]];
      for (std::size_t j = i + 1; j < order.size(); ++j) {
        const ImageRegion& b = regions[order[j]];
        if (b.mip_level != a.mip_level || std::uint64_t{b.x} >= std::uint64_t{a.x} + a.width) break;
        const bool overlap = meets(a.y, a.height, b.y, b.height) && meets(a.z, a.depth, b.z, b.depth) &&
                             meets(a.base_layer, a.layer_count, b.base_layer, b.layer_count);
        FERRY_REQUIRE(!overlap, fn,
                      "regions " + std::to_string(std::min(order[i], order[j])) + " and " +
                          std::to_string(std::max(order[i], order[j])) + " write overlapping texels of mip level " +
                          std::to_string(a.mip_level),
                      where);
      }
    }
  }
  return out;
}

/// The image copy granularity of the executor's queue family.
Extent3D granularity(detail::DeviceState& d, const detail::QueueState& exec) {
  return d.backend->image_copy_granularity(exec.backend->family());
}

/// The flags of UploadIntoOptions that concern DeviceBuffer destinations only.
void check_image_options(const UploadIntoOptions& options, const char* fn, const std::source_location& where) {
  FERRY_REQUIRE(!options.destination_unused, fn,
                "UploadIntoOptions::destination_unused applies only to a DeviceBuffer destination (upload_into), "
                "not to an image",
                where);
  FERRY_REQUIRE(!options.overwrite_padding, fn,
                "UploadIntoOptions::overwrite_padding applies only to the batch upload_into (HostViews at offsets), "
                "not to an image",
                where);
}

/// A concurrent image is shared by the families it lists: the executor's must be one.
void check_executor_family(const ImageState& img, const detail::QueueState& exec, const char* fn,
                           const std::source_location& where) {
  if (img.sharing != MemorySharing::concurrent) return;
  const std::uint32_t family = exec.backend->family();
  FERRY_REQUIRE(std::find(img.families.begin(), img.families.end(), family) != img.families.end(), fn,
                "the image is concurrent over families that do not include the executor's family " +
                    std::to_string(family),
                where);
}

/// The owner's half of the executor's access of `img` as `use` (caller holds no queue mutex):
/// the owner's earlier work and any acquire it owes come first, then its release half of the
/// hand-over. Returns the owner's point the executor waits for (empty when they are one queue).
TimelinePoint owner_hands_over(const QueuePtr& exec, ImageState& img, ImageUse use) {
  const QueuePtr& owner = img.owner;
  if (owner == exec) return {};
  std::lock_guard lock(owner->mutex);
  detail::enqueue_wait(*owner, img.last_access);  // records the acquire the owner still owes
  owner->backend->image_barrier(*img.backend, {ImageUse::engine, use, owner->backend->family(),
                                               exec->backend->family(), /*release=*/true, /*executor=*/false});
  owner->dirty = true;
  TimelinePoint done = detail::enqueue_mark(*owner);
  detail::flush(*owner);
  return done;
}

/// The executor's acquire half (caller holds e.mutex, after the caller's waits): after
/// ferry's earlier accesses and the owner's point.
void executor_takes_over(detail::QueueState& e, ImageState& img, ImageUse use, const TimelinePoint& owner_done) {
  detail::enqueue_wait(e, img.last_access);
  detail::enqueue_wait(e, owner_done, /*query=*/false);
  e.backend->image_barrier(*img.backend, {ImageUse::engine, use, img.owner->backend->family(), e.backend->family(),
                                          /*release=*/false, /*executor=*/true});
  e.dirty = true;
}

/// The executor hands the image back to the owner after its copies (caller holds exec's
/// mutex): the release half, the completion point, and the acquire the owner then owes.
TimelinePoint executor_hands_back(detail::DeviceState& d, const QueuePtr& exec, ImageState& img, ImageUse use) {
  const QueuePtr& owner = img.owner;
  const std::uint32_t ef = exec->backend->family(), of = owner->backend->family();
  exec->backend->image_barrier(*img.backend, {use, ImageUse::engine, ef, of, /*release=*/true, /*executor=*/true});
  exec->dirty = true;
  TimelinePoint done = detail::enqueue_mark(*exec);
  img.last_access = done;
  img.owed.reset();
  if (owner != exec && owner->traits.acquires_ownership && d.backend->image_hand_off_needed(*img.backend, ef, of)) {
    auto owed = std::make_shared<detail::OwedAcquire>();
    owed->point = done;
    owed->from = exec->backend;
    owed->to = owner->backend;
    owed->image = img.backend;
    owed->hand_off = {use, ImageUse::engine, ef, of, /*release=*/false, /*executor=*/false};
    img.owed = owed;
    std::lock_guard lock(owner->mutex);
    owner->pending_acquires.push_back(std::move(owed));
  }
  return done;
}

/// A piece of a staged image copy: rows [row_begin, row_end) of slices [slice_begin,
/// slice_end) of region `region`, at `stage_offset` of a staging buffer, tightly packed.
struct StagedPiece {
  std::size_t region = 0;
  std::uint64_t slice_begin = 0, slice_end = 0;
  std::uint32_t row_begin = 0, row_end = 0;
  std::uint64_t stage_offset = 0;
  [[nodiscard]] std::uint64_t bytes(const ImageCopy& c) const {
    return (slice_end - slice_begin) * (row_end - row_begin) * c.row_bytes;
  }
};

/// The chunks of a staged copy: pieces of whole rows of blocks (whole slices where a slice
/// fits), packed in order into staging buffers of `chunk` bytes, each piece at a multiple of
/// 16 bytes (any format's block and Vulkan's 4-byte rule).
std::vector<std::vector<StagedPiece>> plan_staging(const std::vector<ImageCopy>& copies, std::uint64_t chunk) {
  constexpr std::uint64_t kAlign = 16;
  std::vector<std::vector<StagedPiece>> chunks(1);
  std::uint64_t used = 0;
  auto place = [&](StagedPiece p, const ImageCopy& c) {
    const std::uint64_t n = p.bytes(c);
    std::uint64_t at = (used + kAlign - 1) / kAlign * kAlign;
    if (at + n > chunk && !chunks.back().empty()) {
      chunks.emplace_back();
      at = 0;
    }
    p.stage_offset = at;
    chunks.back().push_back(p);
    used = at + n;
  };
  for (std::size_t i = 0; i < copies.size(); ++i) {
    const ImageCopy& c = copies[i];
    const std::uint64_t slices = std::uint64_t{c.depth} * c.layers;
    const std::uint64_t slice_bytes = std::uint64_t{c.rows} * c.row_bytes;
    if (slice_bytes <= chunk) {
      const std::uint64_t per = std::max<std::uint64_t>(1, chunk / slice_bytes);
      for (std::uint64_t s = 0; s < slices; s += per) {
        place({i, s, std::min(slices, s + per), 0, c.rows, 0}, c);
      }
    } else {
      const std::uint32_t per = static_cast<std::uint32_t>(std::max<std::uint64_t>(1, chunk / c.row_bytes));
      for (std::uint64_t s = 0; s < slices; ++s) {
        for (std::uint32_t r = 0; r < c.rows; r += per) place({i, s, s + 1, r, std::min(c.rows, r + per), 0}, c);
      }
    }
  }
  return chunks;
}

/// The copy of `piece` from a staging buffer: the sub-box of its region, tight in staging.
ImageCopy staged_copy(const ImageCopy& c, const FormatInfo& f, const StagedPiece& p) {
  ImageCopy s = c;
  s.buffer_offset = p.stage_offset;
  s.row_pitch = c.row_bytes;
  s.rows = p.row_end - p.row_begin;
  s.slice_pitch = std::uint64_t{s.rows} * c.row_bytes;
  s.row_length = static_cast<std::uint32_t>(c.row_bytes / f.block_bytes * f.block_width);
  if (c.depth > 1) {  // slices are depth slices of a 3D image
    s.z = c.z + static_cast<std::uint32_t>(p.slice_begin);
    s.depth = static_cast<std::uint32_t>(p.slice_end - p.slice_begin);
  } else {  // slices are layers
    s.base_layer = c.base_layer + static_cast<std::uint32_t>(p.slice_begin);
    s.layers = static_cast<std::uint32_t>(p.slice_end - p.slice_begin);
  }
  const std::uint32_t y0 = p.row_begin * f.block_height;
  s.y = c.y + y0;
  s.height = p.row_end == c.rows ? c.height - y0 : (p.row_end - p.row_begin) * f.block_height;
  s.image_height = s.rows * f.block_height;
  return s;
}

/// Copy the rows of `piece` between the caller's linear memory (`linear`, at the region's
/// offset and pitches) and staging (`stage`, tight), in the direction `to_stage`.
void move_rows(const ImageCopy& c, const StagedPiece& p, std::byte* linear, std::byte* stage, bool to_stage) {
  std::byte* out = stage + p.stage_offset;
  for (std::uint64_t s = p.slice_begin; s < p.slice_end; ++s) {
    for (std::uint32_t r = p.row_begin; r < p.row_end; ++r) {
      std::byte* in = linear + c.buffer_offset + s * c.slice_pitch + std::uint64_t{r} * c.row_pitch;
      if (to_stage) {
        std::memcpy(out, in, static_cast<std::size_t>(c.row_bytes));
      } else {
        std::memcpy(in, out, static_cast<std::size_t>(c.row_bytes));
      }
      out += c.row_bytes;
    }
  }
}

std::uint64_t total_bytes(const std::vector<ImageCopy>& copies) {
  std::uint64_t n = 0;
  for (const ImageCopy& c : copies) n += std::uint64_t{c.rows} * c.row_bytes * c.depth * c.layers;
  return n;
}

/// Refuse a staged copy whose block rows do not fit one staging chunk, naming the region.
void check_staging(const detail::TransferState& s, const std::vector<ImageCopy>& copies, const char* fn,
                   const std::source_location& where) {
  for (std::size_t i = 0; i < copies.size(); ++i) {
    FERRY_REQUIRE(s.options.staging, fn,
                  region_name(i) +
                      " needs staging, which is disabled (TransferOptions::staging = false); use a HostBuffer",
                  where);
    FERRY_REQUIRE(copies[i].row_bytes <= s.options.staging_chunk_bytes, fn,
                  region_name(i) + ": a row of " + std::to_string(copies[i].row_bytes) +
                      " bytes is larger than a staging chunk (" + std::to_string(s.options.staging_chunk_bytes) +
                      " bytes, TransferOptions::staging_chunk_bytes)",
                  where);
  }
}

/// The skeleton every image copy of Transfer shares, over Call's. The caller checks its buffer
/// argument and the image (image()); prepare() checks the rest (the copy mode of a copy into
/// the image, the executor's family, the regions against the buffer, and the staging chunk
/// of a staged copy), orders the caller's lists and takes the Transfer's lock. A direct copy
/// then runs in one step (direct()). A staged one takes the image over (take_over()), issues
/// its chunks through the ring (next_slot(), issue()) and hands the image back (hand_back());
/// a failure in between still hands it back, so that its layout and its latest access stay
/// what the chunks issued so far left. finish() records the activity and signals the
/// caller's points.
class ImageCall {
 public:
  /// `use`: copy_dst for the copies into the image, copy_src for the copies out of it.
  ImageCall(const std::unique_ptr<detail::TransferState>& s, ImageUse use, const char* fn,
            const std::source_location& where)
      : call_(s, fn, where), use_(use), fn_(fn), where_(where) {}

  ~ImageCall() {
    if (!taken_) return;
    try {
      std::lock_guard elock(call_.exec()->mutex);
      (void)executor_hands_back(call_.device(), call_.exec(), *img_, use_);
    } catch (...) {  // a device error: the call fails with its own error already
    }
  }
  ImageCall(const ImageCall&) = delete;
  ImageCall& operator=(const ImageCall&) = delete;

  [[nodiscard]] Call& call() { return call_; }
  [[nodiscard]] detail::DeviceState& device() const { return call_.device(); }
  [[nodiscard]] const QueuePtr& exec() const { return call_.exec(); }
  [[nodiscard]] const std::vector<ImageCopy>& copies() const { return copies_; }

  /// Check the image argument; the call copies into or out of it.
  ImageState& image(const Image& image) {
    img_ = &checked_image(image, &call_.device(), fn_, where_);
    return *img_;
  }

  /// The checks after the arguments', then the ordering and the lock (see the class comment);
  /// `buffer_size`: the bytes of the linear side.
  void prepare(std::span<const ImageRegion> regions, std::uint64_t buffer_size, const UploadIntoOptions& options,
               bool staged) {
    check_image_options(options, fn_, where_);
    call_.prioritize(options.priority, detail::priority_field(options));
    prepare(regions, buffer_size, options.wait, options.signal, staged);
  }
  void prepare(std::span<const ImageRegion> regions, std::uint64_t buffer_size, const CallOptions& options,
               bool staged) {
    call_.prioritize(options.priority, detail::priority_field(options));
    prepare(regions, buffer_size, options.wait, options.signal, staged);
  }

  /// A direct copy: the owner hands the image over, the executor takes it, `op(executor)`
  /// records the copy and the executor hands the image back. Returns the copy's point.
  template <class Op>
  TimelinePoint direct(Op&& op) {
    const TimelinePoint owner_done = owner_hands_over(exec(), *img_, use_);
    return call_.with_executor([&](detail::QueueState& e) {
      executor_takes_over(e, *img_, use_, owner_done);
      detail::yield_before(e, call_.piece(), total_bytes(copies_));  // an image copy is not cut
      op(e);
      return executor_hands_back(device(), exec(), *img_, use_);
    });
  }

  /// A staged copy's start: the Transfer's staging ring, the chunks of the copy, and the
  /// take-over of the image by the executor.
  std::vector<std::vector<StagedPiece>> take_over() {
    detail::TransferState& s = call_.state();
    s.ensure_staging(device(), where_);
    auto chunks = plan_staging(copies_, s.options.staging_chunk_bytes);
    const TimelinePoint owner_done = owner_hands_over(exec(), *img_, use_);
    call_.with_executor([&](detail::QueueState& e) {
      executor_takes_over(e, *img_, use_, owner_done);
      return 0;
    });
    taken_ = true;
    return chunks;
  }

  /// The next slot of the ring, once the slot's previous copy is done with it.
  detail::TransferState::Slot& next_slot() {
    detail::TransferState& s = call_.state();
    detail::TransferState::Slot& slot = s.ring[s.next_slot];
    s.next_slot = (s.next_slot + 1) % s.ring.size();
    slot.free.wait(std::chrono::hours(1), where_);
    return slot;
  }

  /// Issue the copy of one chunk (`pieces`) between `slot`'s staging buffer and the image, in
  /// the call's direction; the slot is free again at the copy's completion.
  void issue(detail::TransferState::Slot& slot, const std::vector<StagedPiece>& pieces) {
    staged_.clear();
    for (const StagedPiece& p : pieces) staged_.push_back(staged_copy(copies_[p.region], img_->format, p));
    const detail::HostRef stage{detail::access::state(slot.buffer)->memory.get(), 0};
    const QueuePtr& e = exec();
    std::lock_guard elock(e->mutex);
    detail::yield_before(*e, call_.piece(), total_bytes(staged_));
    if (use_ == ImageUse::copy_dst) {
      e->backend->copy_h2i(*img_->backend, stage, staged_);
    } else {
      e->backend->copy_i2h(stage, *img_->backend, staged_);
    }
    e->dirty = true;
    slot.free = detail::enqueue_mark(*e);
    detail::flush(*e);
  }

  /// A staged copy's end: the executor hands the image back. Returns the copy's point.
  TimelinePoint hand_back() {
    taken_ = false;
    return call_.with_executor([&](detail::QueueState&) { return executor_hands_back(device(), exec(), *img_, use_); });
  }

  /// Record the activity of the copy, which completes at `done`, keeping `host` alive until
  /// then, and signal the caller's points.
  void finish(const char* name, const TimelinePoint& done,
              const std::shared_ptr<detail::HostAllocation>& host = nullptr) {
    call_.finish(name, total_bytes(copies_), done, host);
  }

 private:
  void prepare(std::span<const ImageRegion> regions, std::uint64_t buffer_size, const std::vector<TimelinePoint>& wait,
               const std::vector<TimelinePoint>& signal, bool staged) {
    check_executor_family(*img_, *exec(), fn_, where_);
    const bool writes = use_ == ImageUse::copy_dst;
    copies_ = resolve_regions(*img_, regions, buffer_size, writes ? "source" : "destination", writes,
                              granularity(device(), *exec()), fn_, where_);
    if (staged) check_staging(call_.state(), copies_, fn_, where_);
    call_.order(wait, signal);
    call_.lock();
    call_.wait_not_busy(img_);
  }

  Call call_;
  const ImageUse use_;
  const char* const fn_;
  const std::source_location where_;
  ImageState* img_ = nullptr;      ///< image()
  std::vector<ImageCopy> copies_;  ///< prepare(): the resolved regions
  std::vector<ImageCopy> staged_;  ///< issue(): the copies of one chunk
  bool taken_ = false;             ///< take_over() without hand_back() yet
};
}  // namespace

// ---- Adoption and the handle -------------------------------------------------------------

Image Device::adopt_image(const NativeImage& native, const ImageDesc& desc, const Queue& owner,
                          std::source_location where) {
  return adopt_image(native, desc, owner, ImageAdoptOptions{}, where);
}

Image Device::adopt_image(const NativeImage& native, const ImageDesc& desc, const Queue& owner,
                          const ImageAdoptOptions& options, std::source_location where) {
  constexpr const char* fn = "Device::adopt_image";
  FERRY_REQUIRE(state_ != nullptr, fn, "null device handle", where);
  FERRY_REQUIRE(!state_->closed.load(), fn, "the device is closed", where);
  detail::DeviceState& d = *state_;
  detail::QueueState& q = detail::checked_queue(owner, fn, where);
  FERRY_REQUIRE(q.device_id == &d, fn, "the owner queue belongs to another device", where);
  if (!options.ready_after.empty()) {
    FERRY_REQUIRE(detail::access::semaphore(options.ready_after)->device_id == &d, fn,
                  "options.ready_after is a point of another device's semaphore", where);
  }
  check_desc(desc, fn, where);
  FERRY_REQUIRE(native.vulkan_sharing == MemorySharing::exclusive || native.vulkan_sharing == MemorySharing::concurrent,
                fn, "vulkan_sharing is not a MemorySharing value", where);
  const detail::BoundThread bound(*d.backend);
  std::unique_ptr<detail::BackendImage> backend;
  try {
    backend = d.backend->adopt_image(native, desc, q.backend->family());
  } catch (const Error& err) {
    throw Error(err.code(), std::string(fn) + ": " + err.message(), err.call(), where);
  }
  auto image = std::make_shared<ImageState>();
  image->device = state_;
  image->device_id = &d;
  image->desc = desc;
  image->format = format_info(desc.format);
  image->backend = std::move(backend);
  image->owner = detail::access::state(owner);
  image->last_access = options.ready_after;
  image->sharing = native.vulkan_sharing;
  image->families = native.vulkan_queue_families;
  image->tag = options.tag;
  return detail::access::make<Image>(std::move(image));
}

Image::Image(Image&&) noexcept = default;
Image& Image::operator=(Image&& other) noexcept {
  if (this != &other) {
    if (valid()) {
      try {
        (void)release();
      } catch (...) {  // a destructor-like path: the device is lost or closing
      }
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

Image::~Image() {
  if (!valid()) return;
  try {
    (void)release();
  } catch (...) {  // a lost device: nothing of ferry's is in flight that could still be ordered
  }
}

const ImageDesc& Image::desc(std::source_location where) const {
  FERRY_REQUIRE(state_ != nullptr, "Image::desc", "null or moved-from image", where);
  FERRY_REQUIRE(!state_->released, "Image::desc", "the image was released", where);
  return state_->desc;
}

Queue Image::owner(std::source_location where) const {
  FERRY_REQUIRE(state_ != nullptr, "Image::owner", "null or moved-from image", where);
  FERRY_REQUIRE(!state_->released, "Image::owner", "the image was released", where);
  (void)detail::lock_device(state_->device, "Image::owner", where);
  return detail::access::make<Queue>(state_->owner);
}

TimelinePoint Image::last_access(std::source_location where) const {
  FERRY_REQUIRE(state_ != nullptr, "Image::last_access", "null or moved-from image", where);
  FERRY_REQUIRE(!state_->released, "Image::last_access", "the image was released", where);
  return state_->last_access;
}

TimelinePoint Image::release(std::source_location where) {
  constexpr const char* fn = "Image::release";
  FERRY_REQUIRE(state_ != nullptr, fn, "null or moved-from image", where);
  FERRY_REQUIRE(!state_->released, fn, "the image was already released (double release)", where);
  const auto d = state_->device.lock();
  if (!d || d->closed.load()) {
    state_->released = true;  // nothing of ferry's is in flight after close
    return {};
  }
  const detail::BoundThread bound(*d->backend);
  ImageState& img = *state_;
  const QueuePtr& owner = img.owner;
  std::lock_guard lock(owner->mutex);
  // The wait also records the acquire the owner still owes for ferry's last copy.
  detail::enqueue_wait(*owner, img.last_access);
  if (img.owed) img.owed->taken.store(true, std::memory_order_release);  // recorded above, or by the engine
  img.owed.reset();
  TimelinePoint point = detail::enqueue_mark(*owner);
  detail::flush(*owner);
  img.released = true;
  return point;
}

bool Image::valid() const noexcept {
  if (state_ == nullptr || state_->released) return false;
  const auto d = state_->device.lock();
  return d && !d->closed.load();
}

// ---- Transfer's image copies -------------------------------------------------------------

TimelinePoint Transfer::upload_image(const HostBuffer& source, const Image& destination,
                                     std::span<const ImageRegion> regions, UploadIntoOptions options,
                                     std::source_location where) {
  constexpr const char* fn = "Transfer::upload_image";
  ImageCall call(state_, ImageUse::copy_dst, fn, where);
  auto& host = detail::checked_host(source, &call.device(), fn, where);
  ImageState& img = call.image(destination);
  call.prepare(regions, host.memory->size, options, /*staged=*/false);
  const TimelinePoint done = call.direct([&](detail::QueueState& e) {
    e.backend->copy_h2i(*img.backend, detail::HostRef{host.memory.get(), 0}, call.copies());
  });
  call.finish("copy h2i", done, detail::access::state(source));
  if (options.owner_waits) detail::make_owner_wait(img.owner, done);
  return done;
}

TimelinePoint Transfer::upload_image(std::span<const std::byte> source, const Image& destination,
                                     std::span<const ImageRegion> regions, UploadIntoOptions options,
                                     std::source_location where) {
  constexpr const char* fn = "Transfer::upload_image(pageable)";
  ImageCall call(state_, ImageUse::copy_dst, fn, where);
  FERRY_REQUIRE(source.data() != nullptr || source.empty(), fn, "null source span", where);
  ImageState& img = call.image(destination);
  call.prepare(regions, source.size(), options, /*staged=*/true);
  auto* linear = const_cast<std::byte*>(source.data());  // move_rows only reads it here
  const auto chunks = call.take_over();
  {
    const detail::Call::Staging staging(call.call(), &img);
    for (const auto& pieces : chunks) {
      detail::TransferState::Slot& slot = call.next_slot();
      for (const StagedPiece& p : pieces) {
        move_rows(call.copies()[p.region], p, linear, slot.buffer.data(), /*to_stage=*/true);
      }
      call.issue(slot, pieces);
    }
  }
  const TimelinePoint done = call.hand_back();
  call.finish("copy h2i (staged)", done);
  if (options.owner_waits) detail::make_owner_wait(img.owner, done);
  return done;
}

TimelinePoint Transfer::download_image(const Image& source, const HostBuffer& destination,
                                       std::span<const ImageRegion> regions, CallOptions options,
                                       std::source_location where) {
  constexpr const char* fn = "Transfer::download_image";
  ImageCall call(state_, ImageUse::copy_src, fn, where);
  ImageState& img = call.image(source);
  auto& host = detail::checked_host(destination, &call.device(), fn, where);
  call.prepare(regions, host.memory->size, options, /*staged=*/false);
  const TimelinePoint done = call.direct([&](detail::QueueState& e) {
    e.backend->copy_i2h(detail::HostRef{host.memory.get(), 0}, *img.backend, call.copies());
  });
  call.finish("copy i2h", done, detail::access::state(destination));
  return done;
}

void Transfer::download_image(const Image& source, std::span<std::byte> destination,
                              std::span<const ImageRegion> regions, CallOptions options, std::source_location where) {
  constexpr const char* fn = "Transfer::download_image(pageable)";
  ImageCall call(state_, ImageUse::copy_src, fn, where);
  FERRY_REQUIRE(destination.data() != nullptr || destination.empty(), fn, "null destination span", where);
  ImageState& img = call.image(source);
  call.prepare(regions, destination.size(), options, /*staged=*/true);
  const auto chunks = call.take_over();
  // Up to a ring's worth of chunks in flight; each is scattered once its copy is complete.
  struct Pending {
    std::size_t chunk;
    detail::TransferState::Slot* slot;
  };
  std::vector<Pending> pending;
  std::size_t unpacked = 0;
  auto unpack_oldest = [&] {
    const Pending& p = pending[unpacked++];
    p.slot->free.wait(std::chrono::hours(1), where);
    for (const StagedPiece& piece : chunks[p.chunk]) {
      move_rows(call.copies()[piece.region], piece, destination.data(), p.slot->buffer.data(), /*to_stage=*/false);
    }
  };
  const std::size_t ring = call.call().state().ring.size();
  {
    const detail::Call::Staging staging(call.call(), &img);
    for (std::size_t k = 0; k < chunks.size(); ++k) {
      if (pending.size() - unpacked == ring) unpack_oldest();
      detail::TransferState::Slot& slot = call.next_slot();
      call.issue(slot, chunks[k]);
      pending.push_back({k, &slot});
    }
  }
  const TimelinePoint done = call.hand_back();
  call.finish("copy i2h (staged)", done);
  call.call().end_ordering();  // the scatter below waits for the device, not for ordering state
  while (unpacked < pending.size()) unpack_oldest();
}

TimelinePoint Transfer::copy_to_image(const DeviceBuffer& source, const Image& destination,
                                      std::span<const ImageRegion> regions, UploadIntoOptions options,
                                      std::source_location where) {
  constexpr const char* fn = "Transfer::copy_to_image";
  ImageCall call(state_, ImageUse::copy_dst, fn, where);
  auto& src = detail::checked_block(source, &call.device(), fn, where);
  ImageState& img = call.image(destination);
  call.prepare(regions, src.requested, options, /*staged=*/false);
  const QueuePtr src_owner = call.call().access(src, true);  // after the work that produced the data
  const TimelinePoint done = call.direct([&](detail::QueueState& e) {
    e.backend->copy_d2i(*img.backend, detail::ref(src), call.copies());
    (void)detail::finish_access(call.exec(), src, src_owner);
  });
  call.finish("copy d2i", done);
  if (options.owner_waits) detail::make_owner_wait(img.owner, done);
  return done;
}

TimelinePoint Transfer::copy_from_image(const Image& source, const DeviceBuffer& destination,
                                        std::span<const ImageRegion> regions, CallOptions options,
                                        std::source_location where) {
  constexpr const char* fn = "Transfer::copy_from_image";
  ImageCall call(state_, ImageUse::copy_src, fn, where);
  ImageState& img = call.image(source);
  auto& dst = detail::checked_block(destination, &call.device(), fn, where);
  call.prepare(regions, dst.requested, options, /*staged=*/false);
  // The bytes between the regions' rows are kept: the range changes hands with its contents.
  const QueuePtr dst_owner = call.call().access(dst, true);
  const TimelinePoint done = call.direct([&](detail::QueueState& e) {
    e.backend->copy_i2d(detail::ref(dst), *img.backend, call.copies());
    (void)detail::finish_access(call.exec(), dst, dst_owner);
  });
  call.finish("copy i2d", done);
  detail::make_owner_wait(dst_owner, done);
  return done;
}

}  // namespace ferry
