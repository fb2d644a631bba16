// SPDX-License-Identifier: MIT
// The interop pairs' descriptors in a build without the Vulkan or the CUDA backend: no devices,
// and opening one names the options that build it.
#include "backend.hpp"

namespace ferry::detail {

namespace {

constexpr const char* kOption = "-Dvulkan=enabled -Dcuda=enabled";

}  // namespace

extern const BackendDescriptor vulkan_cuda_backend_descriptor;
constinit const BackendDescriptor vulkan_cuda_backend_descriptor{
    .id = Backend::vulkan_cuda,
    .name = "vulkan_cuda",
    .option = kOption,
    .kind = DeviceKind::composite,
    .built = false,
    .count = &no_devices,
    .open = [](const DeviceOptions&) -> std::unique_ptr<BackendDevice> { fail_not_built("vulkan_cuda", kOption); },
};
extern const BackendDescriptor cuda_vulkan_backend_descriptor;
constinit const BackendDescriptor cuda_vulkan_backend_descriptor{
    .id = Backend::cuda_vulkan,
    .name = "cuda_vulkan",
    .option = kOption,
    .kind = DeviceKind::composite,
    .built = false,
    .count = &no_devices,
    .open = [](const DeviceOptions&) -> std::unique_ptr<BackendDevice> { fail_not_built("cuda_vulkan", kOption); },
};

}  // namespace ferry::detail
