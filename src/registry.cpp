// SPDX-License-Identifier: MIT
// The backend registry: which backends were built, how many devices each sees, opening and
// ranking them, and wrapping an opened or adopted backend device as a Device.
#include <algorithm>

#include "device_state.hpp"
#include "ferry/config.hpp"

namespace ferry {
namespace detail {

Device wrap_backend_device(std::unique_ptr<BackendDevice> backend, const DeviceOptions& options,
                           std::source_location where) {
  FERRY_REQUIRE(backend != nullptr, "wrap_backend_device", "null backend device", where);
  auto state = std::make_shared<DeviceState>();
  state->options = options;
  state->backend = std::move(backend);
  state->caps = state->backend->capabilities();
  state->pool.allocator = BlockAllocator(BlockAllocator::Config{
      .alignment = std::max<std::uint64_t>(512, state->caps.min_alignment)});
  auto& compute_backend = state->backend->default_queue(QueueRole::compute);
  auto& transfer_backend = state->backend->default_queue(QueueRole::transfer);
  state->compute = make_queue(*state, state, QueueRole::compute, "compute", &compute_backend, nullptr);
  if (&transfer_backend == &compute_backend) {
    state->transfer = state->compute;  // one-queue device: documented in capabilities
  } else {
    state->transfer = make_queue(*state, state, QueueRole::transfer, "transfer", &transfer_backend, nullptr);
  }
  return Device(std::move(state));
}

namespace {

struct BackendEntry {
  Backend backend;
  bool built;
  const char* option;
  int (*count)() noexcept;
  std::unique_ptr<BackendDevice> (*open)(const DeviceOptions&);
};

#define FERRY_ENTRY(name, have) \
  BackendEntry{Backend::name, have, "-D" #name "=enabled", &name##_device_count, &name##_open}

[[maybe_unused]] int none_count() noexcept { return 0; }

const BackendEntry& entry(Backend b) {
  static const BackendEntry entries[] = {
#if FERRY_HAVE_HOST
      FERRY_ENTRY(host, true),
#else
      BackendEntry{Backend::host, false, "-Dhost=enabled", &none_count, nullptr},
#endif
#if FERRY_HAVE_CUDA
      FERRY_ENTRY(cuda, true),
#else
      BackendEntry{Backend::cuda, false, "-Dcuda=enabled", &none_count, nullptr},
#endif
#if FERRY_HAVE_HIP
      FERRY_ENTRY(hip, true),
#else
      BackendEntry{Backend::hip, false, "-Dhip=enabled", &none_count, nullptr},
#endif
#if FERRY_HAVE_VULKAN
      FERRY_ENTRY(vulkan, true),
#else
      BackendEntry{Backend::vulkan, false, "-Dvulkan=enabled", &none_count, nullptr},
#endif
#if FERRY_HAVE_VULKAN && FERRY_HAVE_CUDA
      BackendEntry{Backend::vulkan_cuda, true, "", &pair_device_count, &pair_open},
      BackendEntry{Backend::cuda_vulkan, true, "", &pair_device_count, &pair_open},
#else
      BackendEntry{Backend::vulkan_cuda, false, "-Dvulkan=enabled -Dcuda=enabled", &none_count, nullptr},
      BackendEntry{Backend::cuda_vulkan, false, "-Dvulkan=enabled -Dcuda=enabled", &none_count, nullptr},
#endif
  };
  static_assert(std::size(entries) == static_cast<std::size_t>(Backend::cuda_vulkan) + 1);
  return entries[static_cast<int>(b)];
}

}  // namespace
}  // namespace detail

using detail::fail;

std::string_view to_string(Backend backend) noexcept {
  switch (backend) {
    case Backend::host: return "host";
    case Backend::cuda: return "cuda";
    case Backend::hip: return "hip";
    case Backend::vulkan: return "vulkan";
    case Backend::vulkan_cuda: return "vulkan_cuda";
    case Backend::cuda_vulkan: return "cuda_vulkan";
  }
  return "unknown";
}

Backend parse_backend(std::string_view name, std::source_location where) {
  for (Backend b : {Backend::host, Backend::cuda, Backend::hip, Backend::vulkan, Backend::vulkan_cuda,
                    Backend::cuda_vulkan}) {
    if (to_string(b) == name) return b;
  }
  fail(ErrorCode::invalid_argument,
       "parse_backend: unknown backend '" + std::string(name) +
           "' (expected host, cuda, hip, vulkan, vulkan_cuda or cuda_vulkan)",
       where);
}

Device Device::open(const DeviceOptions& options, std::source_location where) {
  const detail::BackendEntry& e = detail::entry(options.backend);
  if (!e.built) {
    fail(ErrorCode::unsupported,
         "Device::open: ferry was built without the " + std::string(to_string(options.backend)) +
             " backend (reconfigure with meson " + e.option + ")",
         where);
  }
  FERRY_REQUIRE(options.ordinal >= 0, "Device::open", "negative ordinal " + std::to_string(options.ordinal), where);
  std::unique_ptr<detail::BackendDevice> backend;
  try {
    backend = e.open(options);
  } catch (Error& err) {
    throw Error(err.code(), "Device::open(" + std::string(to_string(options.backend)) + ", " +
                                std::to_string(options.ordinal) + "): " + err.message(),
                err.call(), where);
  }
  return detail::wrap_backend_device(std::move(backend), options, where);
}

Device Device::open_default(std::source_location where) {
  auto try_open = [&](Backend b, int ordinal) -> Device {
    try {
      return open(DeviceOptions{.backend = b, .ordinal = ordinal}, where);
    } catch (const Error&) {
      return Device();
    }
  };
  if (count(Backend::cuda) > 0) {
    if (Device d = try_open(Backend::cuda, 0)) return d;
  }
#if FERRY_HAVE_VULKAN
  const int vk = count(Backend::vulkan);
  for (int i = 0; i < vk; ++i) {
    if (detail::vulkan_device_is_gpu(i)) {
      if (Device d = try_open(Backend::vulkan, i)) return d;
    }
  }
#endif
  if (count(Backend::hip) > 0) {
    if (Device d = try_open(Backend::hip, 0)) return d;
  }
#if FERRY_HAVE_VULKAN
  for (int i = 0; i < vk; ++i) {
    if (Device d = try_open(Backend::vulkan, i)) return d;
  }
#endif
  return open(DeviceOptions{.backend = Backend::host}, where);
}

int Device::count(Backend backend) noexcept {
  const detail::BackendEntry& e = detail::entry(backend);
  return e.built ? e.count() : 0;
}

bool Device::built_with(Backend backend) noexcept { return detail::entry(backend).built; }

#if !FERRY_HAVE_VULKAN
// ferry/vulkan.hpp declares adopt_device; without the Vulkan backend it is defined here, with
// AdoptInfo left incomplete (no Vulkan headers in the front end), and refuses.
namespace vulkan {
struct AdoptInfo;
Device adopt_device(const AdoptInfo& info, std::source_location where);
Device adopt_device(const AdoptInfo& /*info*/, std::source_location where) {
  fail(ErrorCode::unsupported,
       "vulkan::adopt_device: ferry was built without the vulkan backend (reconfigure with meson "
       "-Dvulkan=enabled)",
       where);
}
}  // namespace vulkan
#endif

}  // namespace ferry
