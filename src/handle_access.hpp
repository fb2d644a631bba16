// SPDX-License-Identifier: MIT
// The one way into the public handles' internals. `Device`, `Queue`, `TimelineSemaphore`,
// `TimelinePoint`, `DeviceBuffer`, `HostBuffer`, `DevicePool` and `HostPool` keep their state
// and their state constructors private and befriend `detail::access`, defined here and nowhere
// else: a consumer sees the handles' public API only, while ferry's sources (src/, backends/,
// and tests built inside the tree) build handles from state and read it back through these
// functions. Not installed. All members are inline and compiled into each user, so none of
// them is a symbol of libferry.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "ferry/device.hpp"
#include "ferry/image.hpp"
#include "ferry/pool.hpp"

namespace ferry::detail {

struct access {
  /// A handle of type `Handle` holding `state` (a null state gives a null handle).
  template <class Handle, class State>
  [[nodiscard]] static Handle make(std::shared_ptr<State> state) {
    return Handle(std::move(state));
  }
  /// The point `(semaphore, value)`; a null semaphore gives an empty point.
  [[nodiscard]] static TimelinePoint point(std::shared_ptr<SemaphoreState> semaphore, std::uint64_t value) {
    return TimelinePoint(std::move(semaphore), value);
  }
  /// The device's pool front ends, built once inside its DeviceState (neither copies nor moves:
  /// the prvalue initializes the member in place).
  [[nodiscard]] static DevicePool device_pool(DeviceState* device) { return DevicePool(device); }
  [[nodiscard]] static HostPool host_pool(DeviceState* device) { return HostPool(device); }

  [[nodiscard]] static const std::shared_ptr<DeviceState>& state(const Device& h) noexcept { return h.state_; }
  [[nodiscard]] static const std::shared_ptr<QueueState>& state(const Queue& h) noexcept { return h.state_; }
  [[nodiscard]] static const std::shared_ptr<SemaphoreState>& state(const TimelineSemaphore& h) noexcept {
    return h.state_;
  }
  [[nodiscard]] static const std::shared_ptr<BlockState>& state(const DeviceBuffer& h) noexcept { return h.state_; }
  [[nodiscard]] static const std::shared_ptr<ImageState>& state(const Image& h) noexcept { return h.state_; }
  [[nodiscard]] static const std::shared_ptr<HostAllocation>& state(const HostBuffer& h) noexcept {
    return h.state_;
  }
  /// The point's semaphore (null for an empty point).
  [[nodiscard]] static const std::shared_ptr<SemaphoreState>& semaphore(const TimelinePoint& p) noexcept {
    return p.semaphore_;
  }
};

}  // namespace ferry::detail
