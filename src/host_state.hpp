// SPDX-License-Identifier: MIT
// Pinned host memory state: one allocation, and the device's host pool. Not installed.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "backend.hpp"

namespace ferry::detail {

struct DeviceState;

struct HostAllocation {
  std::weak_ptr<DeviceState> device;
  DeviceState* device_id = nullptr;
  std::unique_ptr<HostMemory> memory;  // null once freed (device closed)
  ~HostAllocation();
};

struct HostPoolState {
  std::mutex mutex;
  std::uint64_t pinned_bytes = 0;
  std::map<std::uintptr_t, std::uintptr_t> registered;  // start -> end
  std::vector<std::weak_ptr<HostAllocation>> live;
};

/// Free every live host allocation of the device (close). Never throws.
void host_pool_close(DeviceState& device) noexcept;

}  // namespace ferry::detail
