// SPDX-License-Identifier: MIT
// The pinned host pool: allocations, registered user memory, adopted engine memory, and the
// HostBuffer handle.
#include <algorithm>

#include "device_state.hpp"

namespace ferry {
namespace detail {

HostAllocation::~HostAllocation() {
  if (!memory) return;
  auto d = device.lock();
  if (!d || d->closed.load()) return;  // freed by host_pool_close
  std::lock_guard lock(d->host.mutex);
  if (!memory) return;
  if (memory->adopted) {
    // Adopted ranges are in neither the registration map nor the pinned count.
  } else if (memory->registered) {
    d->host.registered.erase(reinterpret_cast<std::uintptr_t>(memory->ptr));
  } else {
    d->host.pinned_bytes -= memory->size;
  }
  try {
    d->backend->free_host(std::move(memory));
  } catch (...) {
    // Destructors do not throw; a failing free leaves the memory to the driver's teardown.
  }
}

void host_pool_close(DeviceState& d) noexcept {
  std::lock_guard lock(d.host.mutex);
  for (auto& w : d.host.live) {
    if (auto a = w.lock()) {
      if (a->memory) {
        try {
          d.backend->free_host(std::move(a->memory));
        } catch (...) {
        }
      }
    }
  }
  d.host.live.clear();
  d.host.registered.clear();
  d.host.pinned_bytes = 0;
}

}  // namespace detail

// ---- HostBuffer / HostPool ---------------------------------------------------------------

namespace {
const detail::HostMemory& live_host(const std::shared_ptr<detail::HostAllocation>& s, const char* function,
                                    const std::source_location& where) {
  FERRY_REQUIRE(s != nullptr, function, "null or moved-from host buffer", where);
  FERRY_REQUIRE(s->memory != nullptr, function, "the device of this host buffer is closed", where);
  return *s->memory;
}

// Track `a` among the device's live host buffers (close frees what is left) and hand it out
// (caller holds d.host.mutex). Dead entries go first, so the list stays as long as the live set.
HostBuffer track(detail::DeviceState& d, std::shared_ptr<detail::HostAllocation> a) {
  std::erase_if(d.host.live, [](const auto& w) { return w.expired(); });
  d.host.live.push_back(a);
  return detail::access::make<HostBuffer>(std::move(a));
}
}  // namespace

std::span<std::byte> HostBuffer::span(std::source_location where) const {
  const auto& m = live_host(state_, "HostBuffer::span", where);
  return {m.ptr, static_cast<std::size_t>(m.size)};
}
std::byte* HostBuffer::data(std::source_location where) const {
  return live_host(state_, "HostBuffer::data", where).ptr;
}
std::uint64_t HostBuffer::size(std::source_location where) const {
  return live_host(state_, "HostBuffer::size", where).size;
}
bool HostBuffer::registered(std::source_location where) const {
  const auto& m = live_host(state_, "HostBuffer::registered", where);
  return m.registered && !m.adopted;
}
bool HostBuffer::adopted(std::source_location where) const {
  return live_host(state_, "HostBuffer::adopted", where).adopted;
}

HostBuffer HostPool::allocate(std::uint64_t bytes, std::source_location where) {
  auto d = device_->shared_from_this();
  FERRY_REQUIRE(!d->closed.load(), "HostPool::allocate", "the device is closed", where);
  FERRY_REQUIRE(bytes > 0, "HostPool::allocate", "size 0 is not allowed", where);
  FERRY_REQUIRE(bytes <= (1ull << 46), "HostPool::allocate",
          "size " + std::to_string(bytes) + " exceeds the largest supported pinned allocation (64 TiB)", where);
  auto a = std::make_shared<detail::HostAllocation>();
  a->device = d;
  a->device_id = device_;
  try {
    a->memory = d->backend->allocate_host(bytes);
  } catch (const Error& err) {
    throw Error(err.code(), "HostPool::allocate(" + std::to_string(bytes) + "): " + err.message(), err.call(), where);
  }
  std::lock_guard lock(d->host.mutex);
  d->host.pinned_bytes += a->memory->size;
  return track(*d, std::move(a));
}

HostBuffer HostPool::register_memory(std::span<std::byte> memory, std::source_location where) {
  auto d = device_->shared_from_this();
  FERRY_REQUIRE(!d->closed.load(), "HostPool::register_memory", "the device is closed", where);
  FERRY_REQUIRE(!memory.empty() && memory.data() != nullptr, "HostPool::register_memory", "empty span", where);
  const auto start = reinterpret_cast<std::uintptr_t>(memory.data());
  const auto end = start + memory.size();
  FERRY_REQUIRE(end > start, "HostPool::register_memory", "the range wraps around the address space", where);
  std::lock_guard lock(d->host.mutex);
  auto next = d->host.registered.lower_bound(start);
  const bool overlaps_next = next != d->host.registered.end() && next->first < end;
  const bool overlaps_prev = next != d->host.registered.begin() && std::prev(next)->second > start;
  FERRY_REQUIRE(!overlaps_next && !overlaps_prev, "HostPool::register_memory",
          "the range overlaps memory registered before", where);
  auto a = std::make_shared<detail::HostAllocation>();
  a->device = d;
  a->device_id = device_;
  try {
    a->memory = d->backend->register_host(memory.data(), memory.size());
  } catch (const Error& err) {
    throw Error(err.code(), "HostPool::register_memory: " + err.message(), err.call(), where);
  }
  d->host.registered.emplace(start, end);
  return track(*d, std::move(a));
}

// Adopted memory is the engine's: described to the backend (which checks its pinning), kept
// out of the registration map (ranges of one pinned allocation may be adopted many times, as
// tensor views of one storage are) and out of pinned_bytes (ferry pinned none of it).
HostBuffer HostPool::adopt(void* data, std::uint64_t size, std::source_location where) {
  constexpr const char* fn = "HostPool::adopt";
  auto d = device_->shared_from_this();
  FERRY_REQUIRE(!d->closed.load(), fn, "the device is closed", where);
  FERRY_REQUIRE(data != nullptr, fn, "data is a null pointer", where);
  FERRY_REQUIRE(size > 0, fn, "size 0 is not allowed", where);
  const auto start = reinterpret_cast<std::uintptr_t>(data);
  FERRY_REQUIRE(size <= UINTPTR_MAX - start, fn,
                "data " + detail::hex_address(start) + " + size " + std::to_string(size) + " wraps around the address space",
                where);
  auto a = std::make_shared<detail::HostAllocation>();
  a->device = d;
  a->device_id = device_;
  {
    const detail::BoundThread bound(*d->backend);
    try {
      a->memory = d->backend->adopt_host(static_cast<std::byte*>(data), size);
    } catch (const Error& err) {
      throw Error(err.code(), std::string(fn) + "(" + std::to_string(size) + " bytes): " + err.message(), err.call(),
                  where);
    }
  }
  std::lock_guard lock(d->host.mutex);
  return track(*d, std::move(a));
}

std::uint64_t HostPool::pinned_bytes() const {
  std::lock_guard lock(device_->host.mutex);
  return device_->host.pinned_bytes;
}

}  // namespace ferry
