// SPDX-License-Identifier: MIT
// Adopted device memory (Device::adopt_memory): an engine's own range wrapped as a
// DeviceBuffer that the pool never sees. The front end checks the backend-neutral rules; the
// backend describes the range (BackendDevice::adopt_memory) and checks what only its driver
// can tell. Copies then treat the block like a pool block (access.hpp); its release ends
// ferry's use without returning anything to the pool (pool.cpp).
#include <string>

#include "access.hpp"
#include "handle_access.hpp"
#include "ferry/pool.hpp"

namespace ferry {

namespace {
/// Adopted ranges start at a multiple of this many bytes: device kernels and Vulkan storage
/// buffers address 32-bit words.
constexpr std::uint64_t kAdoptAlignment = 4;
}  // namespace

DeviceBuffer Device::adopt_memory(const NativeMemory& native, std::uint64_t size, const Queue& owner,
                                  AdoptOptions options, std::source_location where) {
  constexpr const char* fn = "Device::adopt_memory";
  FERRY_REQUIRE(state_ != nullptr, fn, "null device handle", where);
  FERRY_REQUIRE(!state_->closed.load(), fn, "the device is closed", where);
  detail::DeviceState& d = *state_;
  FERRY_REQUIRE(size > 0, fn, "size 0 is not allowed", where);
  detail::QueueState& q = detail::checked_queue(owner, fn, where);
  FERRY_REQUIRE(q.device_id == &d, fn, "the owner queue belongs to another device", where);
  if (!options.ready_after.empty()) {
    FERRY_REQUIRE(detail::access::semaphore(options.ready_after)->device_id == &d, fn,
                  "options.ready_after is a point of another device's semaphore", where);
  }
  FERRY_REQUIRE(native.pointer % kAdoptAlignment == 0, fn,
                "pointer " + detail::hex_address(native.pointer) + " is not a multiple of " + std::to_string(kAdoptAlignment) +
                    " bytes (adopted ranges start at a 32-bit word)",
                where);
  FERRY_REQUIRE(native.vulkan_offset % kAdoptAlignment == 0, fn,
                "vulkan_offset " + std::to_string(native.vulkan_offset) + " is not a multiple of " +
                    std::to_string(kAdoptAlignment) + " bytes (adopted ranges start at a 32-bit word)",
                where);
  FERRY_REQUIRE(native.pointer == 0 || native.pointer <= UINT64_MAX - size, fn,
                "pointer + size " + std::to_string(size) + " wraps around the address space", where);
  FERRY_REQUIRE(native.vulkan_offset <= UINT64_MAX - size, fn,
                "vulkan_offset " + std::to_string(native.vulkan_offset) + " + size " + std::to_string(size) +
                    " overflows",
                where);
  const detail::BoundThread bound(*d.backend);
  detail::AdoptedRange range;
  try {
    range = d.backend->adopt_memory(native, size);
  } catch (const Error& err) {
    throw Error(err.code(), std::string(fn) + ": " + err.message(), err.call(), where);
  }
  auto block = std::make_shared<detail::BlockState>();
  block->device = state_;
  block->device_id = &d;
  block->segment = range.segment.get();
  block->adopted_segment = std::move(range.segment);
  block->offset = range.offset;
  block->size = size;
  block->requested = size;
  block->owner = detail::access::state(owner);
  // The contents are the engine's, as the owner left them: the owner holds the range (queue
  // families), and the first access follows the engine's stated point.
  block->holder = detail::access::state(owner);
  block->last_access = std::move(options.ready_after);
  block->tag = std::move(options.tag);
  block->adopted = true;
  return detail::access::make<DeviceBuffer>(std::move(block));
}

}  // namespace ferry
