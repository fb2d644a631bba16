// SPDX-License-Identifier: MIT
// The types the translation units of ferry._ferry share: the Python-side handles of the
// public C++ API's objects and the helpers every binding file uses.
//
// Rules of the binding (every file of python/src/):
//  - It binds the public C++ API only (include/ferry/*.hpp) and adds no policy of its own:
//    ordering, ownership and validation are the core's.
//  - Every ferry::Error becomes a ferry.Error (python/ferry/_error.py) carrying the code's
//    name; the Python caller's file and line are found there, since the C++ source location
//    of a binding names this file.
//  - The GIL is released around everything that copies, stages or waits, so other Python
//    threads (a data loader) run meanwhile. Python objects are touched only with the GIL.
//  - Host memory handed in through the buffer protocol is held for the duration of the call
//    only: pageable sources are staged before the call returns, destinations are written
//    before it returns. Pinned memory (HostBuffer) is kept alive by the core until its copy
//    completes, except adopted memory (HostPool.adopt), which is the caller's to keep alive
//    until the copy's point is reached.
#pragma once

#include <nanobind/nanobind.h>

#include <ferry/ferry.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ferry::python {

namespace nb = nanobind;

[[noreturn]] void invalid(const std::string& message);

/// A timeout argument in seconds, refused when negative or NaN.
std::chrono::nanoseconds seconds(double s);

/// A contiguous buffer-protocol view of a Python object, released on destruction (with the
/// GIL: the owner of a Buffer lives outside every gil_scoped_release scope).
class Buffer {
 public:
  Buffer(nb::handle obj, bool writable, const std::string& what);
  Buffer(Buffer&& o) noexcept : view_(o.view_), held_(o.held_) { o.held_ = false; }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer& operator=(Buffer&&) = delete;
  ~Buffer() {
    if (held_) PyBuffer_Release(&view_);
  }
  [[nodiscard]] void* data() const noexcept { return view_.buf; }
  [[nodiscard]] std::uint64_t size() const noexcept { return static_cast<std::uint64_t>(view_.len); }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

/// A device and what the bindings remember of it: the ordinal it was opened with (DLPack
/// names it) and the queues adopted for native streams, one per handle, so that adopting the
/// same stream again (every __dlpack__(stream=...), every ferry.torch.to call) costs a lookup.
struct PyDevice {
  ferry::Device device;
  int ordinal = 0;
  std::shared_ptr<std::mutex> mutex = std::make_shared<std::mutex>();
  std::shared_ptr<std::map<std::uintptr_t, ferry::Queue>> adopted =
      std::make_shared<std::map<std::uintptr_t, ferry::Queue>>();

  /// `name` is read only when the stream is adopted for the first time: a hot path passes a
  /// literal and builds no string.
  ferry::Queue adopt(std::uintptr_t handle, ferry::QueueRole role, std::string_view name);
};

/// A Python object dropped (with the GIL) by whichever thread destroys its holder: the last
/// owner of a BufferState may be a DLPack consumer's deleter running without the GIL.
struct PyKeep {
  nb::object object;
  PyKeep() = default;
  PyKeep(const PyKeep&) = delete;
  PyKeep& operator=(const PyKeep&) = delete;
  ~PyKeep() {
    if (!object.is_valid()) return;
    nb::gil_scoped_acquire gil;
    object.reset();
  }
};

/// End ferry's use of `buffer` from a path that cannot propagate (a destructor, a DLPack
/// deleter) and return the release point. A closed or failed device has no queue left to
/// order a reuse after: the memory is idle once the device is, so the point is empty.
ferry::TimelinePoint release_quietly(ferry::DeviceBuffer& buffer) noexcept;

/// Call `fn(arg)` with the GIL from a path that cannot propagate: a Python error is reported
/// as unraisable, naming `what`.
template <class Arg>
void call_reporting(const nb::object& fn, const Arg& arg, const char* what) noexcept {
  nb::gil_scoped_acquire gil;
  try {
    fn(arg);
  } catch (nb::python_error& e) {
    e.discard_as_unraisable(what);
  } catch (...) {
    // Nothing to report beyond a Python error, and nothing may propagate.
  }
}

/// A device buffer shared by its Python handle, the views of a batch and the DLPack exports
/// (which count themselves in `exports`, so that an explicit release cannot pull memory out
/// from under a consumer). The last owner's destruction releases it, stream-ordered.
struct BufferState {
  /// Held until the buffer is released and its last owner is gone (Device.adopt_memory's
  /// `keep`). Declared first, so destroyed after `buffer`: the object (the engine's
  /// allocation, say) outlives the release, whose point the owner queue is ordered after.
  PyKeep keep;
  /// Called once with the release point when the last owner is gone (Device.adopt_memory's
  /// `on_release`), before `keep` is dropped: an engine that reuses the memory on another
  /// queue orders that reuse after the point.
  PyKeep on_release;
  ferry::DeviceBuffer buffer;
  ferry::TimelinePoint released{};  ///< the point of an explicit release, if any
  ferry::TimelinePoint ready{};     ///< the last copy into it known to the bindings
  ferry::Backend backend = ferry::Backend::host;
  int ordinal = 0;
  PyDevice device;
  std::atomic<int> exports{0};

  BufferState() = default;
  BufferState(const BufferState&) = delete;
  BufferState& operator=(const BufferState&) = delete;
  ~BufferState();
};

struct PyDeviceBuffer {
  std::shared_ptr<BufferState> s;
};

/// A byte range of a DeviceBuffer (a batch upload's input).
struct PyBufferView {
  std::shared_ptr<BufferState> s;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
};

struct PyHostBuffer {
  ferry::HostBuffer buffer;
  std::unique_ptr<Buffer> registered{};  ///< the Python memory a registration pins
};

struct PyUpload {
  PyDeviceBuffer buffer;
  ferry::TimelinePoint ready;
};

struct PyUploadBatch {
  PyDeviceBuffer buffer;
  std::vector<std::uint64_t> offsets;
  std::vector<std::uint64_t> sizes;
  ferry::TimelinePoint ready;
};

struct PyPool {
  PyDevice device;
};
struct PyHostPool {
  PyDevice device;
};

struct PyTransfer {
  PyDevice device;
  std::unique_ptr<ferry::Transfer> t;

  ferry::Transfer& get() {
    if (!t) invalid("Transfer: the transfer was closed");
    return *t;
  }
};

/// A DeviceBuffer handle over `b`, remembering the last copy into it (`ready`).
PyDeviceBuffer wrap(ferry::DeviceBuffer b, const PyDevice& dev, ferry::TimelinePoint ready = {});

/// The native stream handle of `stream`: an int, an object with `__cuda_stream__` (the CUDA
/// stream protocol: a method returning (version, handle)), or one with a `cuda_stream`
/// attribute (torch.cuda.Stream before the protocol).
std::uintptr_t native_stream(nb::handle stream);

/// The binding of each part of the public API (one file each).
void bind_device(nb::module_& m);
void bind_buffers(nb::module_& m);
void bind_transfer(nb::module_& m);
/// ferry.torch's glue over the same API, in a submodule of its own (python/src/torch/).
void bind_torch_glue(nb::module_& m);

}  // namespace ferry::python
