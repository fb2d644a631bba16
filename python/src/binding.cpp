// SPDX-License-Identifier: MIT
// The helpers that every binding file of ferry._ferry shares (binding.hpp).
#include "binding.hpp"

namespace ferry::python {

void invalid(const std::string& message) { throw ferry::Error(ferry::ErrorCode::invalid_argument, message); }

std::chrono::nanoseconds seconds(double s) {
  if (!(s >= 0.0)) invalid("timeout " + std::to_string(s) + " s is negative or NaN");
  return std::chrono::nanoseconds(static_cast<std::int64_t>(s * 1e9));
}

Buffer::Buffer(nb::handle obj, bool writable, const std::string& what) {
  const int flags = writable ? (PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS) : PyBUF_ANY_CONTIGUOUS;
  if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
    PyErr_Clear();
    invalid(what + " (a " + std::string(Py_TYPE(obj.ptr())->tp_name) + ") is not a contiguous" +
            (writable ? " writable" : "") + " buffer (bytes, bytearray, memoryview, numpy array, HostBuffer)");
  }
  held_ = true;
}

ferry::Queue PyDevice::adopt(std::uintptr_t handle, ferry::QueueRole role, std::string_view name) {
  std::lock_guard<std::mutex> lock(*mutex);
  auto it = adopted->find(handle);
  if (it != adopted->end() && it->second.role() == role) return it->second;
  ferry::Queue q =
      device.adopt_queue(role, ferry::NativeQueue{.handle = reinterpret_cast<void*>(handle)}, std::string(name));
  (*adopted)[handle] = q;
  return q;
}

ferry::TimelinePoint release_quietly(ferry::DeviceBuffer& buffer) noexcept {
  if (!buffer.valid()) return {};
  try {
    return buffer.release();
  } catch (...) {
    return {};
  }
}

BufferState::~BufferState() {
  if (!on_release.object.is_valid()) return;
  const ferry::TimelinePoint point = buffer.valid() ? release_quietly(buffer) : released;
  call_reporting(on_release.object, point, "ferry: the on_release callback of an adopted buffer");
  nb::gil_scoped_acquire gil;
  on_release.object.reset();
}

PyDeviceBuffer wrap(ferry::DeviceBuffer b, const PyDevice& dev, ferry::TimelinePoint ready) {
  auto s = std::make_shared<BufferState>();
  s->buffer = std::move(b);
  s->ready = std::move(ready);
  s->backend = dev.device.backend();
  s->ordinal = dev.ordinal;
  s->device = dev;
  return {std::move(s)};
}

std::uintptr_t native_stream(nb::handle stream) {
  if (nb::isinstance<nb::int_>(stream)) return nb::cast<std::uintptr_t>(stream);
  if (nb::hasattr(stream, "__cuda_stream__")) {
    nb::object v = stream.attr("__cuda_stream__");
    if (PyCallable_Check(v.ptr())) v = v();
    if (nb::isinstance<nb::tuple>(v)) return nb::cast<std::uintptr_t>(nb::tuple(v)[1]);
    return nb::cast<std::uintptr_t>(v);
  }
  if (nb::hasattr(stream, "cuda_stream")) return nb::cast<std::uintptr_t>(stream.attr("cuda_stream"));
  invalid("Device.adopt_queue: stream (a " + std::string(Py_TYPE(stream.ptr())->tp_name) +
          ") is neither an int handle nor an object with __cuda_stream__ or cuda_stream");
}

}  // namespace ferry::python
