// SPDX-License-Identifier: MIT
// The core's side of backends/core_access.hpp (wrap_backend_device is in registry.cpp): the
// front-end operations a backend's public entry points call, over the core's handle state.
#include "core_access.hpp"

#include <atomic>
#include <string>

#include "device_state.hpp"
#include "image_state.hpp"

namespace ferry::detail::core {
namespace {

/// "not a <kind> device (backend <actual>)": the message of a handle of another backend.
std::string not_of_kind(const char* whose, Backend kind, Backend actual) {
  return std::string(whose) + " is not a " + std::string(to_string(kind)) + " device (backend " +
         std::string(to_string(actual)) + ")";
}

/// The part both hand-overs share, after their handle checks: `ready` must be `latest`, the
/// point of the handle's latest copy (`noun` names the handle in messages); its signal is
/// submitted, since the engine waits for it where ferry cannot see, and `read` sees its
/// semaphore under the lock that close() takes.
EngineHandOver hand_over_point(DeviceState& device, const TimelinePoint& latest, const TimelinePoint& ready,
                               const char* noun, const char* function, const std::source_location& where,
                               const SemaphoreReader& read) {
  FERRY_REQUIRE(!ready.empty(), function,
                "empty ready point: pass the point of the " + std::string(noun) + "'s latest copy", where);
  FERRY_REQUIRE(access::semaphore(ready) == access::semaphore(latest) && ready.value == latest.value, function,
                "the ready point (value " + std::to_string(ready.value) + ") is not the point of the " +
                    std::string(noun) + "'s latest copy (value " + std::to_string(latest.value) +
                    "): pass the point that call returned",
                where);
  SemaphoreState& s = *access::semaphore(ready);
  ensure_submitted(s, ready.value);
  {
    std::lock_guard lock(s.mutex);
    FERRY_REQUIRE(s.backend != nullptr, function, "the device is closed", where);
    read(*s.backend);
  }
  EngineHandOver out;
  out.device = device.backend.get();
  out.value = ready.value;
  return out;
}

/// Take `owed` for the engine: true when no queue of ferry's has (or will).
bool take(OwedAcquire& owed) {
  if (owed.taken.load(std::memory_order_acquire)) return false;
  return !owed.taken.exchange(true, std::memory_order_acq_rel);  // false: ferry took it meanwhile
}

}  // namespace

BackendDevice& backend_device(const Device& device, Backend kind, const char* function,
                              const std::source_location& where) {
  FERRY_REQUIRE(static_cast<bool>(device) && device.is_open(), function, "null or closed device", where);
  DeviceState& d = *access::state(device);
  BackendDevice* found = d.caps.backend == kind ? d.backend.get() : d.backend->part(kind);
  FERRY_REQUIRE(found != nullptr && found->capabilities().backend == kind, function,
                not_of_kind("the device", kind, d.options.backend), where);
  return *found;
}

EngineHandOver hand_over_to_engine(const DeviceBuffer& buffer, const TimelinePoint& ready, Backend kind,
                                   const char* function, const std::source_location& where,
                                   const SemaphoreReader& read) {
  FERRY_REQUIRE(static_cast<bool>(access::state(buffer)), function, "null or moved-from device buffer", where);
  BlockState& b = *access::state(buffer);
  const auto device = lock_device(b.device, function, where);
  FERRY_REQUIRE(!b.released, function, "the device buffer was released", where);
  FERRY_REQUIRE(device->caps.backend == kind, function,
                not_of_kind("the buffer's device", kind, device->options.backend), where);
  EngineHandOver out = hand_over_point(*device, b.last_access, ready, "buffer", function, where, read);
  // Only an acquire owed to the owner is the engine's: the engine submits on the owner's queue.
  const std::shared_ptr<OwedAcquire>& owed = b.owed;
  if (!owed || owed->to != b.owner->backend || !take(*owed)) return out;
  out.acquire = true;
  out.src_family = owed->from->family();
  out.dst_family = owed->to->family();
  out.range = owed->range;
  out.bytes = owed->bytes;
  return out;
}

EngineHandOver hand_over_to_engine(const Image& image, const TimelinePoint& ready, Backend kind,
                                   const char* function, const std::source_location& where,
                                   const SemaphoreReader& read) {
  const std::shared_ptr<ImageState>& state = access::state(image);
  FERRY_REQUIRE(state != nullptr, function, "null or moved-from image", where);
  ImageState& img = *state;
  const auto device = lock_device(img.device, function, where);
  FERRY_REQUIRE(!img.released, function, "the image was released", where);
  FERRY_REQUIRE(device->caps.backend == kind, function,
                not_of_kind("the image's device", kind, device->options.backend), where);
  EngineHandOver out = hand_over_point(*device, img.last_access, ready, "image", function, where, read);
  // An image's acquire is always owed to its owner (image.cpp, executor_hands_back).
  const std::shared_ptr<OwedAcquire>& owed = img.owed;
  if (!owed || !take(*owed)) return out;
  out.acquire = true;
  out.src_family = owed->hand_off.src_family;
  out.dst_family = owed->hand_off.dst_family;
  out.image = img.backend.get();
  out.image_use = owed->hand_off.from;
  return out;
}

}  // namespace ferry::detail::core
