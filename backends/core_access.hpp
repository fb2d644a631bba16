// SPDX-License-Identifier: MIT
// What the core offers a backend beyond the interface it implements (backend.hpp): the few
// front-end operations that a backend's own public entry points need (the adopt, handle and
// hand-over functions of include/ferry/vulkan.hpp). Declared here, beside backend.hpp, and
// defined in src/ (core_access.cpp, registry.cpp). Not installed.
//
// The rule it serves: a backend sees the core through backend.hpp and this header only. src/
// is not on a backend's include path (meson.build: ferry_backend_inc), so the core's state
// types (DeviceState, BlockState, ImageState, SemaphoreState) stay the core's, and a backend
// learns what its handles hold from these functions, by value.
//
// Identity without RTTI: every backend device states the backend that made it
// (`Capabilities::backend`, filled at open). A backend that asks these functions for its own
// kind gets only a device that states that kind, so it may cast it to its own device type.
//
// Ownership: wrap_backend_device takes the backend device; everything else returned is a view
// into the handle's state, valid while the caller holds the handle and its device is open.
// Thread-safety: that of the public call each one serves (see its documentation in
// include/ferry/); the functions take the core's locks themselves.
// Errors: each checks its handles as a public entry point does, throwing `invalid_argument`
// whose message names `function`, at the caller's `where`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <source_location>

#include "backend.hpp"
#include "ferry/device.hpp"
#include "ferry/image.hpp"
#include "ferry/pool.hpp"

namespace ferry::detail::core {

/// @brief Wrap a backend device (opened or adopted) as a front-end Device: capabilities, pool
/// allocator, default queues. Shared by Device::open and the backends' adopt functions, so an
/// adopted device behaves exactly like an opened one.
///
/// `options.backend` is what Device::backend() reports. `invalid_argument` for a null
/// `backend`.
Device wrap_backend_device(std::unique_ptr<BackendDevice> backend, const DeviceOptions& options,
                           std::source_location where);

/// @brief The device of backend `kind` behind `device`: its own backend device when that is
/// of `kind`, else its part of that backend (BackendDevice::part: an interop pair's Vulkan
/// side).
///
/// `invalid_argument` for a null or closed device, or one without a device of `kind`.
BackendDevice& backend_device(const Device& device, Backend kind, const char* function,
                              const std::source_location& where);

/// @brief What an engine takes over with ferry's latest copy of a buffer or image (the
/// backends' engine_acquire): the point to wait for and, when ferry owed the owner queue a
/// queue-family acquire, that acquire, which is then the engine's to record.
struct EngineHandOver {
  BackendDevice* device = nullptr;  ///< the handle's device (of the backend asked for; never null)
  std::uint64_t value = 0;          ///< the ready point's value
  /// Whether the engine records the acquire described below. When true the core has marked
  /// the owed acquire taken, so ferry never records it; false: none was owed, or ferry (or an
  /// earlier hand-over) recorded it already.
  bool acquire = false;
  std::uint32_t src_family = 0;  ///< the releasing (executing) queue's family
  std::uint32_t dst_family = 0;  ///< the owner queue's family
  DeviceRef range{};             ///< a buffer's acquire: the range (image null)
  std::uint64_t bytes = 0;       ///< a buffer's acquire: its length
  const BackendImage* image = nullptr;  ///< an image's acquire: the image (range empty)
  ImageUse image_use = ImageUse::engine;  ///< an image's acquire: the use the copy left it in
};

/// Called once with the ready point's backend semaphore, under the core's lock of it and
/// while its device is open: read what the engine needs of it (its native handle) here.
using SemaphoreReader = std::function<void(BackendSemaphore&)>;

/// @brief Hand ferry's latest copy of `buffer` to the engine: check that `ready` is that
/// copy's point, submit the signal of it (a backend that defers signals), pass its semaphore
/// to `read`, and take the acquire owed to the buffer's owner queue, if any.
///
/// `invalid_argument` for a null, moved-from or released buffer, a closed device or one that
/// is not of backend `kind` (an interop pair is not: its buffers are the pair's), and an
/// empty `ready` or one other than the buffer's latest copy point.
EngineHandOver hand_over_to_engine(const DeviceBuffer& buffer, const TimelinePoint& ready, Backend kind,
                                   const char* function, const std::source_location& where,
                                   const SemaphoreReader& read);

/// @brief The same for `image`: its latest copy, and the acquire (layout and ownership) owed
/// to its owner queue.
EngineHandOver hand_over_to_engine(const Image& image, const TimelinePoint& ready, Backend kind,
                                   const char* function, const std::source_location& where,
                                   const SemaphoreReader& read);

}  // namespace ferry::detail::core
