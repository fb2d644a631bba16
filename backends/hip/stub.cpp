// SPDX-License-Identifier: MIT
// The hip backend's descriptor in a build without it (meson -Dhip=disabled, or its toolkit not
// found): no devices, and opening one names the option that builds it.
#include "backend.hpp"

namespace ferry::detail {

extern const BackendDescriptor hip_backend_descriptor;
constinit const BackendDescriptor hip_backend_descriptor{
    .id = Backend::hip,
    .name = "hip",
    .option = "-Dhip=enabled",
    .kind = DeviceKind::gpu,
    .built = false,
    .count = &no_devices,
    .open = [](const DeviceOptions&) -> std::unique_ptr<BackendDevice> { fail_not_built("hip", "-Dhip=enabled"); },
};

}  // namespace ferry::detail
