// SPDX-License-Identifier: MIT
// The state of one allocated device block (what a DeviceBuffer holds). Not installed.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "backend.hpp"
#include "ferry/device.hpp"

namespace ferry::detail {

struct DeviceState;
struct QueueState;

/// A queue-family ownership acquire owed after a release of a block's range to a queue's
/// family (Vulkan EXCLUSIVE buffers). Exactly one queue of that family performs it, after
/// waiting for `point` (the releasing queue's signal): the queue it was released to, at its
/// first wait on `point` or later (enqueue_wait), or another queue of the same family that
/// uses the block first (use_on). `taken` makes it happen once whichever comes first.
struct OwedAcquire {
  TimelinePoint point;
  DeviceRef range;
  std::uint64_t bytes = 0;
  BackendQueue* from = nullptr;  ///< the releasing queue
  BackendQueue* to = nullptr;    ///< the queue the range was released to
  std::atomic<bool> taken{false};
  /// An image's acquire instead of a buffer range's (image.cpp): the acquire half of
  /// `hand_off`, recorded on `image`, which this keeps alive until it is recorded or dropped.
  std::shared_ptr<BackendImage> image{};
  ImageHandOff hand_off{};

  /// Record the acquire on `q` (a queue of the receiving family; caller holds its mutex and
  /// set `taken`).
  void perform(BackendQueue& q) {
    if (image) {
      q.image_barrier(*image, hand_off);
    } else {
      q.acquire_ownership(range, bytes, *from);
    }
  }
};

struct BlockState {
  BlockState() {}  // user-provided: make_shared<BlockState>() sets the members, no zeroing first
  std::weak_ptr<DeviceState> device;
  DeviceState* device_id = nullptr;
  std::uint64_t segment_id = 0;
  const Segment* segment = nullptr;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;       // rounded
  std::uint64_t requested = 0;  // asked for
  std::shared_ptr<QueueState> owner;
  std::shared_ptr<QueueState> recorded_user;  // a non-owner that used the block: release waits for it
  std::shared_ptr<QueueState> holder;  // queue holding queue-family ownership (null: none yet)
  TimelinePoint ready_after;
  /// The queue id of AllocationOptions::first_writer, when given: ready_after then covers the
  /// block's previous life for that queue (UploadIntoOptions::destination_unused relies on it).
  std::optional<std::uint32_t> first_writer;
  TimelinePoint last_access;  // last access by a queue other than the owner (a copy)
  std::shared_ptr<OwedAcquire> owed;  // the acquire of the last release of the range, if any
  std::string tag;
  bool released = false;
  /// Adopted memory (Device::adopt_memory): `segment` is `adopted_segment`, the backend's
  /// description of the engine's range, owned here and never in the pool's allocator.
  bool adopted = false;
  std::unique_ptr<Segment> adopted_segment;
};

}  // namespace ferry::detail
