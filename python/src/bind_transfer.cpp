// SPDX-License-Identifier: MIT
// ferry._ferry's transfers: Transfer, Upload and UploadBatch (ferry/transfer.hpp).
#include "binding.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <span>

namespace ferry::python {

using namespace nb::literals;

namespace {

ferry::UploadOptions upload_options(const std::string& tag, bool overlap, bool owner_waits,
                                    std::vector<ferry::TimelinePoint> wait,
                                    std::vector<ferry::TimelinePoint> signal, ferry::Priority priority) {
  ferry::UploadOptions o;
  o.priority = priority;
  o.tag = tag;
  o.overlap = overlap;
  o.owner_waits = owner_waits;
  o.wait = std::move(wait);
  o.signal = std::move(signal);
  return o;
}

PyUploadBatch make_batch(ferry::UploadBatch b, const PyDevice& dev) {
  PyUploadBatch r;
  r.offsets = std::move(b.offsets);
  for (const auto& v : b.views) r.sizes.push_back(v.size);
  r.ready = b.ready;
  r.buffer = wrap(std::move(b.buffer), dev, b.ready);
  return r;
}

const char* const kUploadOptionsDoc =
    "Keyword options (every upload): tag (label of the destination in pool events), overlap "
    "(grow the pool rather than wait for the owner's pending free), owner_waits (enqueue "
    "owner.wait(ready) in the call; default True), wait (points the copy waits for), signal "
    "(user points signalled once the copy is complete), priority (Priority.bulk, the default, or "
    "Priority.urgent: see Priority).";

}  // namespace

void bind_transfer(nb::module_& m) {
  nb::enum_<ferry::Priority>(m, "Priority",
                             "A copy's class: bulk (the default) copies keep their order and are cut into pieces "
                             "that let a copy engine serve other queues; urgent copies run on a queue of their own, "
                             "never behind bulk pieces, and may complete before bulk copies enqueued earlier.")
      .value("bulk", ferry::Priority::bulk)
      .value("urgent", ferry::Priority::urgent);
  nb::class_<PyUpload>(m, "Upload", "An upload's destination and the point it is ready at.")
      .def_ro("buffer", &PyUpload::buffer)
      .def_ro("ready", &PyUpload::ready);
  nb::class_<PyUploadBatch>(m, "UploadBatch",
                            "A batch upload: one owner-owned buffer holding every input at 256-aligned offsets.")
      .def_ro("buffer", &PyUploadBatch::buffer)
      .def_ro("offsets", &PyUploadBatch::offsets)
      .def_ro("sizes", &PyUploadBatch::sizes)
      .def_ro("ready", &PyUploadBatch::ready)
      .def_prop_ro("views", [](const PyUploadBatch& b) {
        std::vector<PyBufferView> v;
        for (std::size_t i = 0; i < b.offsets.size(); ++i) v.push_back({b.buffer.s, b.offsets[i], b.sizes[i]});
        return v;
      }, "Input i's range of the buffer, as a BufferView (DLPack-exportable).");

  const std::string upload_doc = std::string("Copy host memory to a new device buffer owned by `owner`: a "
                                             "HostBuffer (pinned: DMA from it, kept alive until the copy "
                                             "completes) or any contiguous buffer (pageable: staged through "
                                             "the pinned ring before the call returns). ") + kUploadOptionsDoc;
  nb::class_<PyTransfer>(m, "Transfer",
                         "The transfer engine: copies on an executing queue into memory owned by other queues. "
                         "Calls are serialized internally and may come from several threads.")
      .def("__init__", [](PyTransfer* self, PyDevice& dev, nb::object executor, std::uint64_t staging_chunk_bytes,
                          std::uint32_t staging_chunks, bool staging, int staging_threads, nb::object urgent_executor,
                          std::uint64_t bulk_piece_bytes) {
             ferry::TransferOptions o;
             if (!executor.is_none()) o.executor = nb::cast<ferry::Queue>(executor);
             if (!urgent_executor.is_none()) o.urgent_executor = nb::cast<ferry::Queue>(urgent_executor);
             o.bulk_piece_bytes = bulk_piece_bytes;
             o.staging_chunk_bytes = staging_chunk_bytes;
             o.staging_chunks = staging_chunks;
             o.staging = staging;
             o.staging_threads = staging_threads;
             new (self) PyTransfer{dev, std::make_unique<ferry::Transfer>(dev.device, o)};
           }, "device"_a, "executor"_a = nb::none(), "staging_chunk_bytes"_a = 16ull << 20, "staging_chunks"_a = 4,
           "staging"_a = true, "staging_threads"_a = -1, "urgent_executor"_a = nb::none(), "bulk_piece_bytes"_a = 0)
      .def_prop_ro("executor", [](PyTransfer& t) { return t.get().executor(); })
      .def_prop_ro("urgent_executor", [](PyTransfer& t) { return t.get().urgent_executor(); },
                   "The queue of urgent copies (made now if no urgent call made it yet).")
      .def_prop_ro("bulk_piece_bytes", [](PyTransfer& t) { return t.get().bulk_piece_bytes(); },
                   "The most bytes a bulk copy moves between two yield points (0: not cut).")
      .def("upload", [](PyTransfer& t, nb::handle source, const ferry::Queue& owner,
                        const std::string& tag, bool overlap, bool owner_waits, std::vector<ferry::TimelinePoint> wait,
                        std::vector<ferry::TimelinePoint> signal, ferry::Priority priority) {
             ferry::UploadOptions o =
                 upload_options(tag, overlap, owner_waits, std::move(wait), std::move(signal), priority);
             ferry::Upload up;
             if (nb::isinstance<PyHostBuffer>(source)) {
               const PyHostBuffer& h = nb::cast<const PyHostBuffer&>(source);
               nb::gil_scoped_release nogil;
               up = t.get().upload(h.buffer, owner, std::move(o));
             } else {
               Buffer b(source, false, "Transfer.upload: source");
               nb::gil_scoped_release nogil;
               up = t.get().upload(std::span<const std::byte>(static_cast<const std::byte*>(b.data()), b.size()), owner,
                                   std::move(o));
             }
             return PyUpload{wrap(std::move(up.buffer), t.device, up.ready), up.ready};
           }, "source"_a, "owner"_a, nb::kw_only(), "tag"_a = "",
           "overlap"_a = false, "owner_waits"_a = true, "wait"_a = std::vector<ferry::TimelinePoint>{},
           "signal"_a = std::vector<ferry::TimelinePoint>{}, "priority"_a = ferry::Priority::bulk, upload_doc.c_str())
      .def("upload_batch", [](PyTransfer& t, const std::vector<nb::object>& sources, const ferry::Queue& owner,
                              const std::string& tag, bool overlap, bool owner_waits,
                              std::vector<ferry::TimelinePoint> wait, std::vector<ferry::TimelinePoint> signal,
                              ferry::Priority priority) {
             ferry::UploadOptions o =
                 upload_options(tag, overlap, owner_waits, std::move(wait), std::move(signal), priority);
             std::vector<Buffer> held;
             held.reserve(sources.size());
             std::vector<ferry::HostView> views;
             for (std::size_t i = 0; i < sources.size(); ++i) {
               held.emplace_back(sources[i], false, "Transfer.upload_batch: source " + std::to_string(i));
               views.push_back({held.back().data(), held.back().size()});
             }
             ferry::UploadBatch b;
             {
               nb::gil_scoped_release nogil;
               b = t.get().upload(std::span<const ferry::HostView>(views), owner, std::move(o));
             }
             return make_batch(std::move(b), t.device);
           }, "sources"_a, "owner"_a, nb::kw_only(), "tag"_a = "",
           "overlap"_a = false, "owner_waits"_a = true, "wait"_a = std::vector<ferry::TimelinePoint>{},
           "signal"_a = std::vector<ferry::TimelinePoint>{}, "priority"_a = ferry::Priority::bulk,
           "Upload many contiguous buffers (empty ones allowed) in one call into one owner-owned "
           "allocation, staged through the pinned ring; the sources may be reused when it returns.")
      .def("upload_into", [](PyTransfer& t, nb::handle source, PyDeviceBuffer& destination, nb::object offsets,
                             bool owner_waits, std::vector<ferry::TimelinePoint> wait,
                             std::vector<ferry::TimelinePoint> signal, bool destination_unused,
                             std::uint64_t source_offset, nb::object size, ferry::Priority priority) {
             ferry::UploadIntoOptions o{.owner_waits = owner_waits,
                                        .wait = std::move(wait),
                                        .signal = std::move(signal),
                                        .priority = priority,
                                        .destination_unused = destination_unused};
             ferry::TimelinePoint p;
             if (nb::isinstance<PyHostBuffer>(source)) {
               const PyHostBuffer& h = nb::cast<const PyHostBuffer&>(source);
               if (!offsets.is_none() || source_offset != 0 || !size.is_none()) {
                 // A range of a HostBuffer (`size` bytes from `source_offset`, by default the
                 // rest of it) at one destination offset; the core checks both ranges.
                 const auto offset = offsets.is_none() ? std::uint64_t{0} : nb::cast<std::uint64_t>(offsets);
                 const std::uint64_t total = h.buffer.size();
                 if (source_offset > total) {
                   invalid("Transfer.upload_into: source_offset " + std::to_string(source_offset) +
                           " is past the end of the HostBuffer of " + std::to_string(total) + " bytes");
                 }
                 const std::uint64_t bytes = size.is_none() ? total - source_offset : nb::cast<std::uint64_t>(size);
                 nb::gil_scoped_release nogil;
                 p = t.get().upload_into(h.buffer, source_offset, bytes, destination.s->buffer, offset, std::move(o));
               } else {
                 nb::gil_scoped_release nogil;
                 p = t.get().upload_into(h.buffer, destination.s->buffer, std::move(o));
               }
             } else {
               if (offsets.is_none()) invalid("Transfer.upload_into: a list of sources needs `offsets`");
               const auto sources = nb::cast<std::vector<nb::object>>(source);
               const auto offs = nb::cast<std::vector<std::uint64_t>>(offsets);
               std::vector<Buffer> held;
               held.reserve(sources.size());
               std::vector<ferry::HostView> views;
               for (std::size_t i = 0; i < sources.size(); ++i) {
                 held.emplace_back(sources[i], false, "Transfer.upload_into: source " + std::to_string(i));
                 views.push_back({held.back().data(), held.back().size()});
               }
               nb::gil_scoped_release nogil;
               p = t.get().upload_into(std::span<const ferry::HostView>(views), destination.s->buffer,
                                       std::span<const std::uint64_t>(offs), std::move(o));
             }
             destination.s->ready = p;
             return p;
           }, "source"_a, "destination"_a, "offsets"_a = nb::none(), nb::kw_only(), "owner_waits"_a = true,
           "wait"_a = std::vector<ferry::TimelinePoint>{}, "signal"_a = std::vector<ferry::TimelinePoint>{},
           "destination_unused"_a = false, "source_offset"_a = 0, "size"_a = nb::none(),
           "priority"_a = ferry::Priority::bulk,
           "Copy into a caller-supplied destination: a HostBuffer (pinned: DMA from it; `offsets`, "
           "when given, is the one destination offset it goes to, the other bytes are kept; "
           "`source_offset` and `size` select a range of it, by default all of it), or a "
           "list of contiguous buffers placed at `offsets` (staged; none may be empty). The "
           "executor waits for the destination owner's work so far (only for its ready_after and "
           "ferry's earlier copies with destination_unused, the caller's guarantee that nothing "
           "used the buffer since its allocation: UploadIntoOptions::destination_unused); the owner "
           "waits for the copy when owner_waits. Returns the point at which every byte is in place.")
      .def("download", [](PyTransfer& t, PyDeviceBuffer& source, nb::handle destination, std::uint64_t offset,
                          std::vector<ferry::TimelinePoint> wait, std::vector<ferry::TimelinePoint> signal,
                          ferry::Priority priority) -> nb::object {
             ferry::CallOptions o{std::move(wait), std::move(signal), priority};
             if (nb::isinstance<PyHostBuffer>(destination)) {
               const PyHostBuffer& h = nb::cast<const PyHostBuffer&>(destination);
               ferry::TimelinePoint p;
               {
                 nb::gil_scoped_release nogil;
                 p = t.get().download(source.s->buffer, h.buffer, offset, std::move(o));
               }
               return nb::cast(p);
             }
             if (offset != 0) invalid("Transfer.download: `offset` is for a HostBuffer destination");
             Buffer b(destination, true, "Transfer.download: destination");
             {
               nb::gil_scoped_release nogil;
               t.get().download(source.s->buffer, std::span<std::byte>(static_cast<std::byte*>(b.data()), b.size()),
                                std::move(o));
             }
             return nb::none();
           }, "source"_a, "destination"_a, "offset"_a = 0, nb::kw_only(),
           "wait"_a = std::vector<ferry::TimelinePoint>{}, "signal"_a = std::vector<ferry::TimelinePoint>{},
           "priority"_a = ferry::Priority::bulk,
           "Copy a device buffer to host memory. A HostBuffer (pinned) destination returns the point "
           "to wait for before reading; any writable contiguous buffer (pageable) blocks until the "
           "bytes are there (the GIL is released) and returns None.")
      .def("download_batch", [](PyTransfer& t, PyUploadBatch& batch, const std::vector<nb::object>& destinations) {
             std::vector<Buffer> held;
             held.reserve(destinations.size());
             std::vector<ferry::HostSpan> spans;
             for (std::size_t i = 0; i < destinations.size(); ++i) {
               held.emplace_back(destinations[i], true, "Transfer.download_batch: destination " + std::to_string(i));
               spans.push_back({held.back().data(), held.back().size()});
             }
             if (spans.size() != batch.offsets.size()) {
               invalid("Transfer.download_batch: " + std::to_string(spans.size()) + " destinations for a batch of " +
                       std::to_string(batch.offsets.size()) + " inputs");
             }
             std::vector<ferry::DownloadView> views;
             for (std::size_t i = 0; i < spans.size(); ++i) {
               if (spans[i].size != batch.sizes[i]) {
                 invalid("Transfer.download_batch: destination " + std::to_string(i) + " has " +
                         std::to_string(spans[i].size) + " bytes, input " + std::to_string(i) + " has " +
                         std::to_string(batch.sizes[i]));
               }
               views.push_back({batch.offsets[i], spans[i].data, spans[i].size});
             }
             nb::gil_scoped_release nogil;
             t.get().download(batch.buffer.s->buffer, std::span<const ferry::DownloadView>(views));
           }, "batch"_a, "destinations"_a,
           "Download a batch's inputs into writable buffers of their sizes (blocking).")
      .def("copy", [](PyTransfer& t, PyDeviceBuffer& source, PyDeviceBuffer& destination, std::uint64_t nbytes,
                      ferry::Priority priority) {
             nb::gil_scoped_release nogil;
             return t.get().copy(source.s->buffer, destination.s->buffer, nbytes, {.priority = priority});
           }, "source"_a, "destination"_a, "nbytes"_a = 0, nb::kw_only(), "priority"_a = ferry::Priority::bulk,
           "Device-to-device copy (0 = all of source).")
      .def("synchronize", [](PyTransfer& t, double timeout) {
             nb::gil_scoped_release nogil;
             t.get().synchronize(seconds(timeout));
           }, "timeout"_a = 60.0, "Host wait for every copy enqueued so far (the GIL is released).")
      .def("close", [](PyTransfer& t) {
             std::unique_ptr<ferry::Transfer> x = std::move(t.t);
             nb::gil_scoped_release nogil;
             x.reset();
           }, "Wait for the in-flight copies and free the staging ring. Idempotent.");

}

}  // namespace ferry::python
