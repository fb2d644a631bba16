// SPDX-License-Identifier: MIT
// The state ferry.torch's glue keeps between calls (state.hpp).
#include "state.hpp"

namespace ferry::python::torch {

std::pair<std::uint64_t, ferry::TimelinePoint> Destinations::allocate(std::uint64_t nbytes) {
  const std::uint64_t ptr = native->allocate(nbytes, stream_id, device_index);
  if (ptr == 0) throw nb::python_error();
  return {ptr, points.wait_for(ptr, nbytes)};
}

void Destinations::release(std::uint64_t pointer, std::uint64_t nbytes, const ferry::TimelinePoint& point) noexcept {
  // A record that cannot be made terminates (noexcept): a block handed back without its point
  // could be overwritten under a read.
  points.record(pointer, nbytes, point);
  native->free(pointer, device_index);
}

void HeldSources::release_reached() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_reached_locked();
}

std::size_t HeldSources::count() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t n = 0;
  for (const auto& e : entries_) n += 1 + e.rest.size();
  return n;
}

void HeldSources::clear() {
  std::deque<Entry> gone;  // dropped after the mutex is let go of
  std::lock_guard<std::mutex> lock(mutex_);
  gone.swap(entries_);
}

void HeldSources::release_reached_locked() {
  while (!entries_.empty() && reached_(entries_.front().point)) entries_.pop_front();
}

PinnedSources::Buffer PinnedSources::adopt(ferry::Device& device, const void* data, std::uint64_t nbytes) {
  const Key key{data, nbytes};
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto it = entries_.find(key); it != entries_.end()) return it->second;
  auto b = std::make_shared<const ferry::HostBuffer>(device.host_pool().adopt(const_cast<void*>(data), nbytes));
  if (order_.size() == kEntries) {
    entries_.erase(order_.front());
    order_.pop_front();
  }
  entries_.emplace(key, b);
  order_.push_back(key);
  return b;
}

Glue& glue() {
  static Glue* g = new Glue;  // never destroyed: its objects die with the interpreter
  return *g;
}

Adoptions::~Adoptions() {
  try {
    release();
  } catch (...) {
    // A closed or failed device: nothing is in flight any more that the owner could overtake.
  }
}

ferry::TimelinePoint Adoptions::release() {
  std::vector<ferry::DeviceBuffer> held = std::move(buffers);
  buffers.clear();
  // The ranges are adopted as the executor's, so ferry's use of each ends at its copy's point
  // (last_access): release_unordered hands that point back without enqueueing a mark per
  // range, and the owner's one wait for `done` (the last copy, which completes after every
  // other) orders it after all of them.
  ferry::TimelinePoint last;
  for (ferry::DeviceBuffer& b : held) last = b.release_unordered();
  if (owner && !held.empty()) owner->wait(done);
  return last;
}

}  // namespace ferry::python::torch
