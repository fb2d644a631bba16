// SPDX-License-Identifier: MIT
// The stash's batched calls: adopt a list of device ranges PyTorch allocated, copy them to or
// from one pinned host buffer in one Transfer call, and release the adoptions with one wait.
#include "state.hpp"

#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <span>

namespace ferry::python::torch {

using namespace nb::literals;

namespace {

/// The checked arguments of a batched adopt-and-copy: one device range and one offset in the
/// host buffer per entry, each range inside the host buffer.
void check_adopted_ranges(const char* fn, const std::vector<std::uint64_t>& pointers,
                          const std::vector<std::uint64_t>& sizes, const std::vector<std::uint64_t>& host_offsets,
                          const ferry::HostBuffer& host) {
  if (pointers.size() != sizes.size() || pointers.size() != host_offsets.size()) {
    invalid(std::string(fn) + ": " + std::to_string(pointers.size()) + " pointers, " + std::to_string(sizes.size()) +
            " sizes and " + std::to_string(host_offsets.size()) + " host offsets: one of each per range");
  }
  const std::uint64_t total = host.size();
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (host_offsets[i] > total || sizes[i] > total - host_offsets[i]) {
      invalid(std::string(fn) + ": range " + std::to_string(i) + " (" + std::to_string(sizes[i]) + " bytes at host offset " +
              std::to_string(host_offsets[i]) + ") is outside the HostBuffer of " + std::to_string(total) + " bytes");
    }
  }
}

/// Adopts range i of a batched call (`Device::adopt_memory`), its error prefixed with the index.
ferry::DeviceBuffer adopt_range(PyTransfer& t, const char* fn, std::size_t i, std::uint64_t pointer,
                                std::uint64_t size, const ferry::Queue& owner, const ferry::TimelinePoint& after,
                                const std::string& tag) {
  ferry::AdoptOptions o;
  o.ready_after = after;
  o.tag = tag;
  try {
    return t.device.device.adopt_memory(ferry::NativeMemory{.pointer = pointer}, size, owner, std::move(o));
  } catch (const ferry::Error& e) {
    throw ferry::Error(e.code(), std::string(fn) + ": range " + std::to_string(i) + ": " + e.message(), e.call(),
                       e.where());
  }
}

}  // namespace

void bind_adopted(nb::module_& m) {
  nb::class_<Adoptions>(m, "Adoptions", "Engine ranges adopted together by one batched call.")
      .def("release", [](Adoptions& a) {
             nb::gil_scoped_release nogil;
             return a.release();
           }, "Release every range (stream-ordered on the owner, after ferry's copies into it) and "
           "return the last release point; a second call releases nothing and returns an empty point.")
      .def("__len__", [](const Adoptions& a) { return a.buffers.size(); });

  m.def("download_adopted", [](PyTransfer& t, const std::vector<std::uint64_t>& pointers,
                                   const std::vector<std::uint64_t>& sizes, const ferry::Queue& owner,
                                   const ferry::TimelinePoint& ready_after, const PyHostBuffer& host,
                                   const std::vector<std::uint64_t>& host_offsets, const std::string& tag,
                                   bool owner_waits) {
         constexpr const char* fn = "ferry.torch: download_adopted";
         check_adopted_ranges(fn, pointers, sizes, host_offsets, host.buffer);
         ferry::Transfer& x = t.get();
         nb::gil_scoped_release nogil;
         // Each range is adopted as the executor's, ready after `ready_after` (the owner's
         // work on it): the download waits for that point once for all ranges, with no
         // mark and wait on the owner per range. Every range is checked and adopted before
         // the one download call enqueues anything, so a bad range fails the call with
         // nothing in flight. The owner then waits once for the call's point, so its order,
         // and any reuse that follows it, comes after every read. Without `owner_waits` the
         // caller orders the reuse after the returned point itself (ferry.torch's deferred
         // free).
         const ferry::Queue exec = x.executor();
         ferry::Queue target = owner;  // a handle: waits are enqueued through a copy
         std::vector<ferry::DeviceBuffer> ranges;
         std::vector<std::uint64_t> offsets;
         ranges.reserve(pointers.size());
         offsets.reserve(pointers.size());
         for (std::size_t i = 0; i < pointers.size(); ++i) {
           if (sizes[i] == 0) continue;
           ranges.push_back(adopt_range(t, fn, i, pointers[i], sizes[i], exec, ready_after, tag));
           offsets.push_back(host_offsets[i]);
         }
         if (ranges.empty()) return ferry::TimelinePoint{};
         // One call for every range: one completion point, and one driver call where the
         // backend batches copies.
         const ferry::TimelinePoint last = x.download(std::span<const ferry::DeviceBuffer>(ranges), host.buffer,
                                                      std::span<const std::uint64_t>(offsets));
         // The executor's own ranges: ferry's use of each ends at `last`.
         for (ferry::DeviceBuffer& a : ranges) a.release_unordered();
         if (owner_waits) target.wait(last);
         return last;
       }, "transfer"_a, "pointers"_a, "sizes"_a, "owner"_a, "ready_after"_a, "host"_a, "host_offsets"_a, "tag"_a = "",
       "owner_waits"_a = true,
       "For each range: adopt `sizes[i]` device bytes at `pointers[i]` (owned by `owner`, free for "
       "ferry after `ready_after`), download them to `host` at `host_offsets[i]`, and release "
       "the adoption; with `owner_waits` the owner is then ordered after the reads, without it "
       "the caller orders any reuse after the returned point. Returns the point at which every "
       "byte is in host memory (empty when every size is 0). ferry.torch's stash path.");
  m.def("upload_adopted", [](PyTransfer& t, const std::vector<std::uint64_t>& pointers,
                                 const std::vector<std::uint64_t>& sizes, const ferry::Queue& owner,
                                 const ferry::TimelinePoint& ready_after, const PyHostBuffer& host,
                                 const std::vector<std::uint64_t>& host_offsets, const std::string& tag) {
         constexpr const char* fn = "ferry.torch: upload_adopted";
         check_adopted_ranges(fn, pointers, sizes, host_offsets, host.buffer);
         ferry::Transfer& x = t.get();
         // Adopted as the executor's, like the stash's ranges, all before the one upload
         // call enqueues anything: the adoptions order the owner once, after the call's
         // copies, when they are released (Adoptions).
         Adoptions held;
         held.owner = owner;
         ferry::TimelinePoint last;
         {
           nb::gil_scoped_release nogil;
           const ferry::Queue exec = x.executor();
           held.buffers.reserve(pointers.size());
           std::vector<std::uint64_t> offsets;
           offsets.reserve(pointers.size());
           for (std::size_t i = 0; i < pointers.size(); ++i) {
             if (sizes[i] == 0) continue;
             held.buffers.push_back(adopt_range(t, fn, i, pointers[i], sizes[i], exec, ready_after, tag));
             offsets.push_back(host_offsets[i]);
           }
           if (!held.buffers.empty()) {
             ferry::UploadIntoOptions o;
             o.owner_waits = false;
             o.destination_unused = true;
             last = x.upload_into(host.buffer, std::span<const std::uint64_t>(offsets),
                                  std::span<const ferry::DeviceBuffer>(held.buffers), std::move(o));
             held.done = last;
           }
         }
         return std::make_pair(last, std::move(held));
       }, "transfer"_a, "pointers"_a, "sizes"_a, "owner"_a, "ready_after"_a, "host"_a, "host_offsets"_a, "tag"_a = "",
       "For each range: adopt `sizes[i]` device bytes at `pointers[i]` (owned by `owner`, unused "
       "since their allocation, free for ferry after `ready_after`) and upload `host`'s bytes at "
       "`host_offsets[i]` into them; the owner does not wait. Returns (the point at which every "
       "byte is in place, the adoptions): release them (Adoptions.release, or by dropping them) "
       "to order the owner after the copies. ferry.torch's stash-restore path.");
}

}  // namespace ferry::python::torch
