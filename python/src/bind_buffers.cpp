// SPDX-License-Identifier: MIT
// ferry._ferry's buffers: DeviceBuffer and its views with their DLPack export, and HostBuffer
// with the buffer protocol (ferry/pool.hpp, host_pool.hpp).
#include "binding.hpp"

#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

namespace ferry::python {

using namespace nb::literals;

namespace {


/// What a DLPack export owns: a share of the buffer, counted in its `exports`.
struct Export {
  std::shared_ptr<BufferState> s;
  explicit Export(std::shared_ptr<BufferState> st) : s(std::move(st)) { s->exports.fetch_add(1); }
  ~Export() { s->exports.fetch_sub(1); }
  Export(const Export&) = delete;
  Export& operator=(const Export&) = delete;
};

std::pair<int, int> dlpack_device(const BufferState& s) {
  switch (s.backend) {
    case ferry::Backend::host:
    case ferry::Backend::null: return {static_cast<int>(nb::device::cpu::value), 0};
    case ferry::Backend::cuda: return {static_cast<int>(nb::device::cuda::value), s.ordinal};
    case ferry::Backend::hip: return {static_cast<int>(nb::device::rocm::value), s.ordinal};
    default: break;
  }
  throw Error(ErrorCode::unsupported, "DeviceBuffer.__dlpack__: a " + std::string(ferry::to_string(s.backend)) +
                                          " buffer has no address a DLPack consumer can use");
}

/// `__dlpack__` of `size` bytes at `offset` of a buffer, as a 1-D uint8 tensor.
/// Ordering: the consumer's `stream` waits on the device for the owner's work so far, which
/// covers every ferry copy into the buffer that the owner waited for, and for the last copy
/// the bindings know of. The values are DLPack's: an int handle; on CUDA, None and 1 name the
/// legacy default stream, which is adopted and waits on the device like any other (PyTorch's
/// default stream is that one, so a host wait there would stall every default-stream
/// consumer); 2 (the per-thread default stream, a different stream on each thread) and, on
/// HIP, None and 0 (the null stream) cannot be adopted and are waited for on the host. -1
/// means no synchronization. On the CPU (host backend) the host waits, since the consumer
/// reads at once.
nb::object dlpack(const std::shared_ptr<BufferState>& s, std::uint64_t offset, std::uint64_t size,
                  nb::handle stream, nb::handle max_version, nb::handle dl_device, nb::handle copy) {
  const ferry::DeviceView view = s->buffer.view();  // throws for a released buffer
  const auto [type, id] = dlpack_device(*s);
  if (!copy.is_none() && nb::cast<bool>(copy)) {
    throw Error(ErrorCode::unsupported, "DeviceBuffer.__dlpack__: copy=True is not supported (ferry exports in place)");
  }
  (void)dl_device;
  const bool cpu = type == static_cast<int>(nb::device::cpu::value);
  const bool cuda = s->backend == ferry::Backend::cuda;
  std::intptr_t consumer = 0;
  if (!cpu) consumer = stream.is_none() ? (cuda ? 1 : 0) : nb::cast<std::intptr_t>(stream);
  // cudaStreamLegacy is handle 1, as in DLPack; the null handle and the per-thread default
  // stream cannot be adopted (Device::adopt_queue).
  bool host_wait = cpu || consumer == 0 || consumer == 2 || (!cuda && consumer == 1);
  ferry::Queue owner = s->buffer.owner();
  if (host_wait || consumer != -1) {
    if (host_wait) {
      nb::gil_scoped_release nogil;
      ferry::TimelinePoint done = owner.mark();
      done.wait();
      s->ready.wait();
    } else {
      ferry::Queue q = s->device.adopt(static_cast<std::uintptr_t>(consumer), ferry::QueueRole::compute, "dlpack consumer");
      if (!(q == owner)) {
        q.wait(owner.mark());
        if (!s->ready.empty()) q.wait(s->ready);
      }
    }
  }
  auto* ex = new Export(s);
  nb::capsule owner_capsule(ex, [](void* p) noexcept { delete static_cast<Export*>(p); });
  const std::size_t shape[1] = {static_cast<std::size_t>(size)};
  nb::ndarray<nb::array_api> arr(reinterpret_cast<void*>(view.address + offset), 1, shape, owner_capsule, nullptr,
                    nb::dtype<std::uint8_t>(), type, id);
  nb::object obj = nb::cast(arr);
  nb::dict kwargs;
  if (!max_version.is_none()) kwargs["max_version"] = max_version;
  return obj.attr("__dlpack__")(**kwargs);
}

/// The buffer protocol of HostBuffer, so memoryview(h) and numpy see the pinned bytes.
int host_buffer_getbuffer(PyObject* self, Py_buffer* view, int flags) {
  PyHostBuffer* h = nb::inst_ptr<PyHostBuffer>(self);
  if (!h->buffer.valid()) {
    PyErr_SetString(PyExc_BufferError, "ferry.HostBuffer: null buffer");
    return -1;
  }
  return PyBuffer_FillInfo(view, self, h->buffer.data(), static_cast<Py_ssize_t>(h->buffer.size()), 0, flags);
}

PyType_Slot kHostBufferSlots[] = {
    {Py_bf_getbuffer, reinterpret_cast<void*>(host_buffer_getbuffer)},
    {0, nullptr},
};

}  // namespace

void bind_buffers(nb::module_& m) {
  nb::class_<PyBufferView>(m, "BufferView",
                           "A byte range of a DeviceBuffer (a batch input). Exports DLPack like the buffer.")
      .def_ro("offset", &PyBufferView::offset)
      .def_ro("size", &PyBufferView::size)
      .def_prop_ro("address", [](const PyBufferView& v) { return v.s->buffer.view().address + v.offset; })
      .def("__dlpack__", [](const PyBufferView& v, nb::handle stream, nb::handle max_version, nb::handle dl_device,
                            nb::handle copy) { return dlpack(v.s, v.offset, v.size, stream, max_version, dl_device, copy); },
           nb::kw_only(), "stream"_a = nb::none(), "max_version"_a = nb::none(), "dl_device"_a = nb::none(),
           "copy"_a = nb::none(), "DLPack export of the range as 1-D uint8 (see DeviceBuffer.__dlpack__).")
      .def("__dlpack_device__", [](const PyBufferView& v) { return nb::make_tuple(dlpack_device(*v.s).first, dlpack_device(*v.s).second); });

  nb::class_<PyDeviceBuffer>(m, "DeviceBuffer",
                             "Device memory with an owner queue: a pool block, or an engine's memory adopted with "
                             "Device.adopt_memory (never freed by ferry). Dropping the last reference (the handle, "
                             "every DLPack export) releases it, stream-ordered on the owner.")
      .def_prop_ro("size", [](const PyDeviceBuffer& b) { return b.s->buffer.size(); })
      .def_prop_ro("owner", [](const PyDeviceBuffer& b) { return b.s->buffer.owner(); })
      .def_prop_ro("address", [](const PyDeviceBuffer& b) { return b.s->buffer.view().address; },
                   "Device pointer (CUDA/HIP), host pointer (host backend); 0 on Vulkan.")
      .def_prop_ro("adopted", [](const PyDeviceBuffer& b) { return b.s->buffer.adopted(); })
      .def_prop_ro("valid", [](const PyDeviceBuffer& b) { return b.s->buffer.valid(); })
      .def_prop_ro("ready_after", [](const PyDeviceBuffer& b) { return b.s->buffer.ready_after(); })
      .def("release", [](PyDeviceBuffer& b) {
             if (b.s->exports.load() > 0) {
               invalid("DeviceBuffer.release: " + std::to_string(b.s->exports.load()) +
                       " DLPack export(s) still use the buffer; it is released when the last one is dropped");
             }
             b.s->released = b.s->buffer.release();
             return b.s->released;
           },
           "Stream-ordered free on the owner queue; returns the free point (adopted memory: the point "
           "after which the engine may reuse it). Refused while DLPack exports are alive.")
      .def("release_after", [](PyDeviceBuffer& b, const ferry::TimelinePoint& p) {
             if (b.s->exports.load() > 0) invalid("DeviceBuffer.release_after: DLPack exports still use the buffer");
             b.s->released = b.s->buffer.release_after(p);
             return b.s->released;
           }, "point"_a, "Stream-ordered free once the owner has waited for `point`.")
      .def("release_unordered", [](PyDeviceBuffer& b) {
             if (b.s->exports.load() > 0) invalid("DeviceBuffer.release_unordered: DLPack exports still use the buffer");
             b.s->released = b.s->buffer.release_unordered();
             return b.s->released;
           },
           "Adopted memory only: end ferry's use without making the owner wait for a copy in flight; "
           "returns the point at which every ferry access completes. The caller orders the memory's "
           "reuse after it (see DeviceBuffer::release_unordered in ferry/pool.hpp).")
      .def("view", [](const PyDeviceBuffer& b, std::uint64_t offset, std::uint64_t size) {
             const std::uint64_t total = b.s->buffer.size();
             if (offset > total || size > total - offset) {
               invalid("DeviceBuffer.view: range [" + std::to_string(offset) + ", +" + std::to_string(size) +
                       ") is outside the buffer of " + std::to_string(total) + " bytes");
             }
             return PyBufferView{b.s, offset, size};
           }, "offset"_a, "size"_a, "A byte range of the buffer.")
      .def("__dlpack__", [](const PyDeviceBuffer& b, nb::handle stream, nb::handle max_version, nb::handle dl_device,
                            nb::handle copy) { return dlpack(b.s, 0, b.s->buffer.size(), stream, max_version, dl_device, copy); },
           nb::kw_only(), "stream"_a = nb::none(), "max_version"_a = nb::none(), "dl_device"_a = nb::none(),
           "copy"_a = nb::none(),
           "DLPack export (versioned when the consumer asks with max_version >= (1, 0)) of the whole "
           "buffer as 1-D uint8. `stream` (CUDA/HIP) waits on the device for the owner's work so far "
           "and the last copy into the buffer; None or a default stream waits on the host; -1 skips "
           "synchronization. On the host backend the host waits. The export shares the buffer: it "
           "is released, stream-ordered on the owner, when the handle and every export are gone.")
      .def("__dlpack_device__", [](const PyDeviceBuffer& b) {
        const auto d = dlpack_device(*b.s);
        return nb::make_tuple(d.first, d.second);
      });

  nb::class_<PyHostBuffer>(m, "HostBuffer", nb::type_slots(kHostBufferSlots),
                           "Pinned (DMA-able) host memory, Python memory registered with the device, or an "
                           "engine's page-locked memory adopted with HostPool.adopt. Supports the buffer protocol "
                           "(memoryview(h), numpy.frombuffer(h, ...)) for filling and reading. Pool and registered "
                           "memory stays alive while a copy uses it, even after the handle is dropped; adopted "
                           "memory is the engine's, kept alive by it until each copy's point is reached.")
      .def_prop_ro("size", [](const PyHostBuffer& h) { return h.buffer.size(); })
      .def_prop_ro("address", [](const PyHostBuffer& h) {
        return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(h.buffer.data()));
      })
      .def_prop_ro("registered", [](const PyHostBuffer& h) { return h.buffer.registered(); })
      .def_prop_ro("adopted", [](const PyHostBuffer& h) { return h.buffer.adopted(); },
                   "True for an engine's page-locked memory adopted with HostPool.adopt.")
      .def("__len__", [](const PyHostBuffer& h) { return h.buffer.size(); })
      .def("memoryview", [](nb::handle self) { return nb::steal(PyMemoryView_FromObject(self.ptr())); },
           "A writable memoryview of the bytes (keeps the buffer alive).");
}

}  // namespace ferry::python
