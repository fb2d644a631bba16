// SPDX-License-Identifier: MIT
// The null backend's descriptor in a build without it (meson -Dnull=disabled): no devices, and
// opening one names the option that builds it.
#include "backend.hpp"

namespace ferry::detail {

extern const BackendDescriptor null_backend_descriptor;
constinit const BackendDescriptor null_backend_descriptor{
    .id = Backend::null,
    .name = "null",
    .option = "-Dnull=enabled",
    .kind = DeviceKind::inert,
    .built = false,
    .count = &no_devices,
    .open = [](const DeviceOptions&) -> std::unique_ptr<BackendDevice> { fail_not_built("null", "-Dnull=enabled"); },
};

}  // namespace ferry::detail
