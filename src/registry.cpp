// SPDX-License-Identifier: MIT
// The backend registry: the descriptors of every backend folder (backend_table.hpp, generated
// by backends/meson.build), opening and ranking their devices, and wrapping an opened or
// adopted backend device as a Device. Backend-neutral: which backends exist, whether each was
// built, what its devices are and how they rank is what their descriptors say.
#include <algorithm>
#include <optional>

#include "backend_table.hpp"
#include "core_access.hpp"
#include "device_state.hpp"

namespace ferry {
namespace detail {

Device core::wrap_backend_device(std::unique_ptr<BackendDevice> backend, const DeviceOptions& options,
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
  return detail::access::make<Device>(std::move(state));
}

namespace {

/// Whether the generated table has one descriptor per Backend value 0..N-1: each id once, no
/// gap. (An enumerator past them that no folder describes is no backend: to_string says
/// "unknown" and Device::open refuses it as invalid_argument.)
constexpr bool table_ids_are_dense() {
  constexpr std::size_t n = std::size(kBackendIds);
  for (std::size_t value = 0; value < n; ++value) {
    std::size_t seen = 0;
    for (Backend id : kBackendIds) seen += static_cast<std::size_t>(id) == value ? 1 : 0;
    if (seen != 1) return false;
  }
  return true;
}
static_assert(table_ids_are_dense(),
              "each Backend enumerator needs one backend folder that appends it to ferry_backends "
              "(backends/meson.build)");

/// The descriptor of `b`; null for a value that is no enumerator.
const BackendDescriptor* find(Backend b) noexcept {
  for (const BackendDescriptor* d : kBackendTable) {
    if (d->id == b) return d;
  }
  return nullptr;
}

std::string plural(int n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

}  // namespace
}  // namespace detail

using detail::fail;

std::string_view to_string(Backend backend) noexcept {
  const detail::BackendDescriptor* d = detail::find(backend);
  return d != nullptr ? std::string_view(d->name) : std::string_view("unknown");
}

Backend parse_backend(std::string_view name, std::source_location where) {
  std::string names;
  const std::size_t n = std::size(detail::kBackendIds);
  for (std::size_t i = 0; i < n; ++i) {
    const auto b = static_cast<Backend>(i);
    if (to_string(b) == name) return b;
    names += (i == 0 ? "" : i + 1 == n ? " or " : ", ") + std::string(to_string(b));
  }
  fail(ErrorCode::invalid_argument,
       "parse_backend: unknown backend '" + std::string(name) + "' (expected " + names + ")", where);
}

Device Device::open(const DeviceOptions& options, std::source_location where) {
  const detail::BackendDescriptor* d = detail::find(options.backend);
  FERRY_REQUIRE(d != nullptr, "Device::open",
                "unknown backend " + std::to_string(static_cast<int>(options.backend)), where);
  FERRY_REQUIRE(options.ordinal >= 0, "Device::open", "negative ordinal " + std::to_string(options.ordinal), where);
  // The one ordinal check: backends trust it. Without a device the backend's open says why
  // (not built, no driver, no device), which is `unsupported`, not an argument error.
  const int count = d->count();
  FERRY_REQUIRE(count == 0 || options.ordinal < count, "Device::open",
                "ordinal " + std::to_string(options.ordinal) + " out of range (" + detail::plural(count, "device") + ")",
                where);
  if (d->peer_count != nullptr && options.peer_ordinal >= 0) {
    const int peers = d->peer_count();
    FERRY_REQUIRE(peers == 0 || options.peer_ordinal < peers, "Device::open",
                  "peer ordinal " + std::to_string(options.peer_ordinal) + " out of range (" +
                      detail::plural(peers, "device") + ")",
                  where);
  }
  std::unique_ptr<detail::BackendDevice> backend;
  try {
    backend = d->open(options);
  } catch (Error& err) {
    throw Error(err.code(), "Device::open(" + std::string(d->name) + ", " + std::to_string(options.ordinal) +
                                "): " + err.message(),
                err.call(), where);
  }
  return detail::core::wrap_backend_device(std::move(backend), options, where);
}

Device Device::open_default(std::source_location where) {
  using detail::DeviceKind;
  // Every GPU before every CPU device; within a kind, the table's order (backends/meson.build)
  // and then ordinal order. A device that fails to open gives way to the next.
  std::optional<Error> last_error;
  for (const bool gpus : {true, false}) {
    for (const detail::BackendDescriptor* d : detail::kBackendTable) {
      if (d->kind != DeviceKind::gpu && d->kind != DeviceKind::cpu) continue;
      const int n = d->count();
      for (int i = 0; i < n; ++i) {
        const bool gpu = d->kind == DeviceKind::gpu && (d->is_gpu == nullptr || d->is_gpu(i));
        if (gpu != gpus) continue;
        try {
          return open(DeviceOptions{.backend = d->id, .ordinal = i}, where);
        } catch (const Error& e) {
          last_error = e;
        }
      }
    }
  }
  if (last_error) throw *last_error;
  std::string built, not_built;
  for (const detail::BackendDescriptor* d : detail::kBackendTable) {
    if (d->kind != DeviceKind::gpu && d->kind != DeviceKind::cpu) continue;
    std::string& list = d->built ? built : not_built;
    list += (list.empty() ? "" : ", ") + std::string(d->name) + (d->built ? "" : std::string(" (") + d->option + ")");
  }
  fail(ErrorCode::unsupported,
       "Device::open_default: no device present (built: " + (built.empty() ? "none" : built) +
           "; not built: " + (not_built.empty() ? "none" : not_built) + ")",
       where);
}

int Device::count(Backend backend) noexcept {
  const detail::BackendDescriptor* d = detail::find(backend);
  return d != nullptr ? d->count() : 0;
}

bool Device::built_with(Backend backend) noexcept {
  const detail::BackendDescriptor* d = detail::find(backend);
  return d != nullptr && d->built;
}

bool Device::runtime_present(Backend backend) noexcept {
  const detail::BackendDescriptor* d = detail::find(backend);
  return d != nullptr && d->built && (d->runtime_present == nullptr || d->runtime_present());
}

}  // namespace ferry
