// SPDX-License-Identifier: MIT
// The state of one adopted image (what an Image holds). Not installed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend.hpp"
#include "block_state.hpp"
#include "ferry/device.hpp"
#include "ferry/image.hpp"

namespace ferry::detail {

struct DeviceState;
struct QueueState;

struct ImageState {
  ImageState() {}  // user-provided: make_shared<ImageState>() sets the members, no zeroing first
  std::weak_ptr<DeviceState> device;
  DeviceState* device_id = nullptr;
  ImageDesc desc;
  FormatInfo format;
  /// The backend's description of the engine's image; shared with an owed acquire, which
  /// records a barrier on it after the Image may be gone.
  std::shared_ptr<BackendImage> backend;
  std::shared_ptr<QueueState> owner;
  /// ferry's latest access of the image (a copy's completion point); before the first one,
  /// the engine's ImageAdoptOptions::ready_after. Every access follows it.
  TimelinePoint last_access;
  /// The owner's acquire of the latest copy's hand-back, while owed (Vulkan, two families).
  std::shared_ptr<OwedAcquire> owed;
  MemorySharing sharing = MemorySharing::exclusive;
  std::vector<std::uint32_t> families;  ///< a concurrent image's queue families
  std::string tag;
  bool released = false;
};

}  // namespace ferry::detail
