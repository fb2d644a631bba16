// SPDX-License-Identifier: MIT
// The state ferry.torch's glue keeps between calls: the release points of the destinations it
// takes from PyTorch's caching allocator, the pinned sources it holds for copies in flight,
// the pinned ranges it adopted lately, and the engine of each device.
//
// ferry.torch's glue is two halves joined by C entry points (native_api.h):
// ferry._torch_native, built against libtorch, reads tensors, allocates from PyTorch's
// allocators and makes result tensors; this half, inside ferry._ferry, makes the copies with
// the public C++ API. They are two modules because ferry._ferry imports without torch, and a
// module built against libtorch runs with that torch version only.
//
// Thread-safety: every type here locks its own state; the methods that take or drop Python
// objects run with the GIL.
#pragma once

#include "../binding.hpp"
#include "native_api.h"
#include "release_points.hpp"

#include <deque>
#include <optional>
#include <unordered_map>

namespace ferry::python::torch {

/// Offset alignment of every leaf in a structure's allocation: it satisfies every dtype, and it
/// is the core's padding limit, so the staged copy may overwrite the gaps between leaves.
inline constexpr std::uint64_t kAlignment = ferry::UploadIntoOptions::kPaddingLimit;
/// Pinned sources below this size are staged rather than copied by a DMA call of their own:
/// adopting a tensor and enqueueing its copy costs more host time than copying this many bytes
/// into the staging ring, which moves every staged leaf of the call in one stream.
inline constexpr std::uint64_t kDmaMinBytes = 128 << 10;

/// The destinations of `to` for one target stream: blocks of PyTorch's caching allocator
/// taken on an idle stream of the device, which runs no work, so the allocator hands them out
/// again only to ferry; ferry knows when each range it let go of stops being used on the
/// target (ReleasePoints). The memory stays PyTorch's: memory_reserved() counts it,
/// empty_cache() returns it, and an allocation that runs out of memory frees these cached
/// blocks and retries.
struct Destinations {
  const ferry_torch_native::Api* native = nullptr;
  std::int64_t stream_id = 0;     ///< the idle stream, as torch.cuda.Stream.stream_id names it
  std::int32_t device_index = 0;
  ReleasePoints points;

  /// With the GIL: a block of `nbytes` and the point a writer must wait for.
  std::pair<std::uint64_t, ferry::TimelinePoint> allocate(std::uint64_t nbytes);
  /// From any thread: record the range's release point, then hand the block back.
  void release(std::uint64_t pointer, std::uint64_t nbytes, const ferry::TimelinePoint& point) noexcept;
};

/// Pinned sources read by DMA after `to` returns, held with the point at which their last copy
/// completes and let go of once it is reached. One executor's copies complete in order, so
/// entries are let go of oldest first, up to the first point not reached. Every method runs
/// with the GIL: holding and dropping the tensors changes their references.
class HeldSources {
 public:
  void release_reached();
  /// Hold the `n` (at least one) tensors `at(0)` ... `at(n - 1)` until `point` is reached.
  template <class At>
  void hold(ferry::TimelinePoint point, std::size_t n, At&& at) {
    Entry e{std::move(point), nb::borrow(at(0)), {}};
    if (n > 1) {
      e.rest.reserve(n - 1);
      for (std::size_t i = 1; i < n; ++i) e.rest.push_back(nb::borrow(at(i)));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    release_reached_locked();
    entries_.push_back(std::move(e));
  }
  std::size_t count();
  /// Let go of everything (after every copy completed).
  void clear();

 private:
  /// The sources of one call: the first inline, since most calls hold one.
  struct Entry {
    ferry::TimelinePoint point;
    nb::object first;
    std::vector<nb::object> rest;
  };
  void release_reached_locked();
  std::mutex mutex_;
  std::deque<Entry> entries_;
  ThrottledReached reached_;  ///< under mutex_
};

/// The pinned sources `to` adopted lately, by address and size: a training loop moves batches
/// from the blocks PyTorch's pinned allocator recycles, and adopting a range again asks the
/// driver whether it is page-locked on every call. A batch may have hundreds of leaves, each a
/// block of its own, and a loader keeps a few batches in flight: the record holds that many
/// ranges and forgets the oldest first. Only ranges whose storage PyTorch's
/// pinned allocator holds at the call are looked up (the native `read` tells), so a hit is
/// page-locked memory: the address may have been freed and allocated again since, but only by
/// that allocator, which hands out nothing else. An adopted range owns nothing, so an entry
/// outliving its memory holds no resource.
class PinnedSources {
 public:
  static constexpr std::size_t kEntries = 4096;
  /// Shared with the calls using it: another thread's miss may forget the entry meanwhile.
  using Buffer = std::shared_ptr<const ferry::HostBuffer>;
  Buffer adopt(ferry::Device& device, const void* data, std::uint64_t nbytes);

 private:
  struct Key {
    const void* data = nullptr;
    std::uint64_t nbytes = 0;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const noexcept {
      return std::hash<const void*>{}(k.data) ^ (std::hash<std::uint64_t>{}(k.nbytes) * 0x9e3779b97f4a7c15ull);
    }
  };
  std::mutex mutex_;
  std::unordered_map<Key, Buffer, KeyHash> entries_;
  std::deque<Key> order_;  ///< the entries, oldest first
};

/// One device's engine as `to` uses it: the Transfer (a ferry.Transfer object of the Python
/// package's engine) and the destinations of each target stream handle.
struct Engine {
  nb::object transfer;
  std::unordered_map<std::uintptr_t, std::shared_ptr<Destinations>> destinations;
  std::shared_ptr<PinnedSources> pinned = std::make_shared<PinnedSources>();
};

/// Everything the glue keeps, set up once by ferry.torch (`setup`) and read with the GIL.
struct Glue {
  const ferry_torch_native::Api* native = nullptr;
  nb::object native_capsule;  ///< keeps `native` alive
  nb::object tensor_type;     ///< torch.Tensor: only it takes the one-tensor entry
  nb::object stream_type;     ///< torch.cuda.Stream
  /// By device index (-1: the CPU, through ferry's host backend).
  std::unordered_map<int, Engine> engines;
  HeldSources held;
};

Glue& glue();

/// Engine ranges adopted by one batched call, as the executor's, owned by `owner` and released
/// together: releasing them makes `owner` wait once for `done`, the last copy, which follows
/// every copy into them (the executor's copies complete in order), rather than once per
/// range. Destruction releases what is still held.
struct Adoptions {
  std::vector<ferry::DeviceBuffer> buffers;
  std::optional<ferry::Queue> owner;
  ferry::TimelinePoint done;

  Adoptions() = default;
  Adoptions(Adoptions&&) = default;
  Adoptions& operator=(Adoptions&&) = default;
  Adoptions(const Adoptions&) = delete;
  Adoptions& operator=(const Adoptions&) = delete;
  ~Adoptions();
  /// Release every range and order the owner after the copies; returns the last release point
  /// (empty when nothing was left to release).
  ferry::TimelinePoint release();
};

/// The binding of the stash's batched adopt-and-copy calls (torch/adopted.cpp).
void bind_adopted(nb::module_& m);

}  // namespace ferry::python::torch
