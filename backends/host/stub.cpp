// SPDX-License-Identifier: MIT
// The host backend's descriptor in a build without it (meson -Dhost=disabled): no devices, and
// opening one names the option that builds it.
#include "backend.hpp"

namespace ferry::detail {

extern const BackendDescriptor host_backend_descriptor;
constinit const BackendDescriptor host_backend_descriptor{
    .id = Backend::host,
    .name = "host",
    .option = "-Dhost=enabled",
    .kind = DeviceKind::cpu,
    .built = false,
    .count = &no_devices,
    .open = [](const DeviceOptions&) -> std::unique_ptr<BackendDevice> { fail_not_built("host", "-Dhost=enabled"); },
};

}  // namespace ferry::detail
