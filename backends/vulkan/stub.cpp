// SPDX-License-Identifier: MIT
// The Vulkan backend's descriptor and public entry point in a build without it (meson
// -Dvulkan=disabled, or its headers or glslangValidator not found): no devices, and opening a
// device or adopting one names the option that builds it.
#include "backend.hpp"
#include "ferry/api.hpp"

namespace ferry::detail {

extern const BackendDescriptor vulkan_backend_descriptor;
constinit const BackendDescriptor vulkan_backend_descriptor{
    .id = Backend::vulkan,
    .name = "vulkan",
    .option = "-Dvulkan=enabled",
    .kind = DeviceKind::gpu,
    .built = false,
    .count = &no_devices,
    .open = [](const DeviceOptions&) -> std::unique_ptr<BackendDevice> { fail_not_built("vulkan", "-Dvulkan=enabled"); },
};

}  // namespace ferry::detail

// ferry/vulkan.hpp declares adopt_device, but includes <vulkan/vulkan.h>, which a build
// without the backend may not have: AdoptInfo stays incomplete here (it is only referred to).
namespace ferry::vulkan {
struct AdoptInfo;
FERRY_API Device adopt_device(const AdoptInfo& info, std::source_location where);
Device adopt_device(const AdoptInfo& /*info*/, std::source_location where) {
  throw Error(ErrorCode::unsupported,
              "vulkan::adopt_device: ferry was built without the vulkan backend (reconfigure with meson "
              "-Dvulkan=enabled)",
              {}, where);
}
}  // namespace ferry::vulkan

// native_handles returns a Vulkan struct by value, so it needs the complete type: defined where
// the Vulkan headers are present (the only programs that can call it include them too).
#if __has_include(<vulkan/vulkan.h>)
#include "ferry/vulkan.hpp"
namespace ferry::vulkan {
NativeHandles native_handles(const Device& /*device*/, std::source_location where) {
  throw Error(ErrorCode::unsupported,
              "vulkan::native_handles: ferry was built without the vulkan backend (reconfigure with meson "
              "-Dvulkan=enabled)",
              {}, where);
}
EngineAcquire engine_acquire(const DeviceBuffer& /*buffer*/, const TimelinePoint& /*ready*/,
                             std::source_location where) {
  throw Error(ErrorCode::unsupported,
              "vulkan::engine_acquire: ferry was built without the vulkan backend (reconfigure with meson "
              "-Dvulkan=enabled)",
              {}, where);
}
EngineImageAcquire engine_acquire(const Image& /*image*/, const TimelinePoint& /*ready*/, std::source_location where) {
  throw Error(ErrorCode::unsupported,
              "vulkan::engine_acquire: ferry was built without the vulkan backend (reconfigure with meson "
              "-Dvulkan=enabled)",
              {}, where);
}
}  // namespace ferry::vulkan
#endif
