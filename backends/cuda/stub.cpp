// SPDX-License-Identifier: MIT
// The cuda backend's descriptor in a build without it (meson -Dcuda=disabled, or its toolkit not
// found): no devices, and opening one names the option that builds it.
#include "backend.hpp"

namespace ferry::detail {

extern const BackendDescriptor cuda_backend_descriptor;
constinit const BackendDescriptor cuda_backend_descriptor{
    .id = Backend::cuda,
    .name = "cuda",
    .option = "-Dcuda=enabled",
    .kind = DeviceKind::gpu,
    .built = false,
    .count = &no_devices,
    .open = [](const DeviceOptions&) -> std::unique_ptr<BackendDevice> { fail_not_built("cuda", "-Dcuda=enabled"); },
};

}  // namespace ferry::detail
