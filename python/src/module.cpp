// SPDX-License-Identifier: MIT
// ferry._ferry: the nanobind extension behind the `ferry` Python package.
//
// Rules of this layer:
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
//    until the copy's point is reached (ferry.torch holds the tensors).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <ferry/export.hpp>
#include <ferry/ferry.hpp>

#include <atomic>
#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "torch_native_api.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using ferry::Error;
using ferry::ErrorCode;

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::invalid_argument, message); }

std::chrono::nanoseconds seconds(double s) {
  if (!(s >= 0.0)) invalid("timeout " + std::to_string(s) + " s is negative or NaN");
  return std::chrono::nanoseconds(static_cast<std::int64_t>(s * 1e9));
}

#ifdef FERRY_TORCH_PHASES
/// The host time of each part of ferry.torch's binding path, summed over calls: built only
/// with -DFERRY_TORCH_PHASES (a profiling build), read and reset by _torch_phases(). The
/// parts are named where they are stamped. The sums are plain integers: profile one thread's
/// calls.
struct TorchPhases {
  static constexpr int kCount = 16;
  const char* names[kCount] = {};
  std::int64_t ns[kCount] = {};
  std::int64_t calls[kCount] = {};
};
TorchPhases& torch_phases() {
  static TorchPhases p;
  return p;
}
/// Stamps consecutive parts of one call: each stamp adds the time since the previous one.
class PhaseClock {
 public:
  PhaseClock() : last_(std::chrono::steady_clock::now()) {}
  void stamp(int i, const char* name) {
    const auto now = std::chrono::steady_clock::now();
    TorchPhases& p = torch_phases();
    p.names[i] = name;
    p.ns[i] += std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count();
    ++p.calls[i];
    last_ = now;
  }

 private:
  std::chrono::steady_clock::time_point last_;
};
#define FERRY_PHASE_CLOCK(c) PhaseClock c
#define FERRY_PHASE(c, i, name) c.stamp(i, name)
#else
#define FERRY_PHASE_CLOCK(c)
#define FERRY_PHASE(c, i, name)
#endif

/// A contiguous buffer-protocol view of a Python object, released on destruction (with the
/// GIL: the owner of a Buffer lives outside every gil_scoped_release scope).
class Buffer {
 public:
  Buffer(nb::handle obj, bool writable, const std::string& what) {
    const int flags = writable ? (PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS) : PyBUF_ANY_CONTIGUOUS;
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
      PyErr_Clear();
      invalid(what + " (a " + std::string(Py_TYPE(obj.ptr())->tp_name) + ") is not a contiguous" +
              (writable ? " writable" : "") + " buffer (bytes, bytearray, memoryview, numpy array, HostBuffer)");
    }
    held_ = true;
  }
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

// ---------------------------------------------------------------------------------------------
// Handles

/// The pinned sources of ferry.torch.to adopted lately, by address and size: a training loop
/// moves batches from the few blocks PyTorch's pinned allocator recycles, and adopting a range
/// again asks the driver whether it is page-locked on every call. Only ranges whose storage
/// PyTorch's pinned allocator holds at the call are looked up (ferry._torch_native's `read`
/// tells), so a hit is page-locked memory: the address may have been freed and allocated
/// again since, but only by that allocator, which hands out nothing else. An adopted range
/// owns nothing, so an entry outliving its memory holds no resource.
struct PinnedSources {
  static constexpr std::size_t kEntries = 8;
  /// Shared with the calls using it: another thread's miss may replace the entry meanwhile.
  using Buffer = std::shared_ptr<const ferry::HostBuffer>;
  struct Entry {
    const void* data = nullptr;
    std::uint64_t nbytes = 0;
    Buffer buffer;
  };
  std::mutex mutex;
  std::array<Entry, kEntries> entries;
  std::size_t next = 0;  ///< the entry a miss replaces (round robin)

  Buffer adopt(ferry::Device& device, const void* data, std::uint64_t nbytes) {
    std::lock_guard<std::mutex> lock(mutex);
    for (const Entry& e : entries) {
      if (e.data == data && e.nbytes == nbytes) return e.buffer;
    }
    auto b = std::make_shared<const ferry::HostBuffer>(device.host_pool().adopt(const_cast<void*>(data), nbytes));
    entries[next] = {data, nbytes, b};
    next = (next + 1) % kEntries;
    return b;
  }
};

/// A device and what the bindings remember of it: the ordinal it was opened with (DLPack
/// names it), the queues adopted for native streams, one per handle, so that adopting the
/// same stream again (every ferry.torch.to call, every __dlpack__(stream=...)) costs a lookup,
/// and the pinned sources ferry.torch.to adopted lately.
struct PyDevice {
  ferry::Device device;
  int ordinal = 0;
  std::shared_ptr<std::mutex> mutex = std::make_shared<std::mutex>();
  std::shared_ptr<std::map<std::uintptr_t, ferry::Queue>> adopted =
      std::make_shared<std::map<std::uintptr_t, ferry::Queue>>();
  std::shared_ptr<PinnedSources> pinned_sources = std::make_shared<PinnedSources>();

  /// `name` is read only when the stream is adopted for the first time: a hot path passes a
  /// literal and builds no string.
  ferry::Queue adopt(std::uintptr_t handle, ferry::QueueRole role, std::string_view name) {
    std::lock_guard<std::mutex> lock(*mutex);
    auto it = adopted->find(handle);
    if (it != adopted->end() && it->second.role() == role) return it->second;
    ferry::Queue q = device.adopt_queue(role, ferry::NativeQueue{.handle = reinterpret_cast<void*>(handle)},
                                        std::string(name));
    (*adopted)[handle] = q;
    return q;
  }
};

/// A device buffer shared by its Python handle, the views of a batch and the DLPack exports
/// (which count themselves in `exports`, so that an explicit release cannot pull memory out
/// from under a consumer). The last owner's destruction releases it, stream-ordered.
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
ferry::TimelinePoint release_quietly(ferry::DeviceBuffer& buffer) noexcept {
  if (!buffer.valid()) return {};
  try {
    return buffer.release();
  } catch (...) {
    return {};
  }
}

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
  ~BufferState() {
    if (!on_release.object.is_valid()) return;
    const ferry::TimelinePoint point = buffer.valid() ? release_quietly(buffer) : released;
    call_reporting(on_release.object, point, "ferry: the on_release callback of an adopted buffer");
    nb::gil_scoped_acquire gil;
    on_release.object.reset();
  }
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

PyDeviceBuffer wrap(ferry::DeviceBuffer b, const PyDevice& dev, ferry::TimelinePoint ready = {}) {
  auto s = std::make_shared<BufferState>();
  s->buffer = std::move(b);
  s->ready = std::move(ready);
  s->backend = dev.device.backend();
  s->ordinal = dev.ordinal;
  s->device = dev;
  return {std::move(s)};
}

/// The native stream handle of `stream`: an int, an object with `__cuda_stream__` (the CUDA
/// stream protocol: a method returning (version, handle)), or one with a `cuda_stream`
/// attribute (torch.cuda.Stream before the protocol).
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

ferry::CopyMode copy_mode(nb::handle mode) {
  if (nb::isinstance<ferry::CopyMode>(mode)) return nb::cast<ferry::CopyMode>(mode);
  const std::string name = nb::cast<std::string>(nb::str(mode));
  for (auto m : {ferry::CopyMode::preallocated, ferry::CopyMode::owner_owned}) {
    if (ferry::to_string(m) == name) return m;
  }
  invalid("copy mode '" + name + "' is not one of preallocated, owner_owned");
}

ferry::UploadOptions upload_options(nb::handle mode, const std::string& tag, bool overlap, bool owner_waits,
                                    std::vector<ferry::TimelinePoint> wait,
                                    std::vector<ferry::TimelinePoint> signal) {
  ferry::UploadOptions o;
  o.mode = copy_mode(mode);
  o.tag = tag;
  o.overlap = overlap;
  o.owner_waits = owner_waits;
  o.wait = std::move(wait);
  o.signal = std::move(signal);
  return o;
}

// ---------------------------------------------------------------------------------------------
// DLPack

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

// ---------------------------------------------------------------------------------------------
// Transfers

struct PyTransfer {
  PyDevice device;
  std::unique_ptr<ferry::Transfer> t;

  ferry::Transfer& get() {
    if (!t) invalid("Transfer: the transfer was closed");
    return *t;
  }
};

std::vector<ferry::HostView> raw_views(const std::vector<std::uint64_t>& addresses,
                                       const std::vector<std::uint64_t>& sizes, const char* fn) {
  if (addresses.size() != sizes.size()) {
    invalid(std::string(fn) + ": " + std::to_string(addresses.size()) + " addresses but " +
            std::to_string(sizes.size()) + " sizes");
  }
  std::vector<ferry::HostView> views(addresses.size());
  for (std::size_t i = 0; i < views.size(); ++i) {
    views[i] = {reinterpret_cast<const void*>(static_cast<std::uintptr_t>(addresses[i])), sizes[i]};
  }
  return views;
}

/// Engine ranges adopted by one batched call (ferry.torch's stash restore), owned by one
/// queue and released together. Destruction releases what is still held, stream-ordered on
/// the owner, as a DeviceBuffer's destruction does.
/// Engine ranges adopted by one batched call. Ranges adopted as the executor's (`owner` set)
/// leave the ordering of the engine's queue to this record: releasing them makes `owner` wait
/// once for `done`, the last copy, which follows every copy into them (the executor's copies
/// complete in order), rather than once per range.
struct PyAdoptions {
  std::vector<ferry::DeviceBuffer> buffers;
  std::optional<ferry::Queue> owner;
  ferry::TimelinePoint done;

  PyAdoptions() = default;
  PyAdoptions(PyAdoptions&&) = default;
  PyAdoptions& operator=(PyAdoptions&&) = default;
  PyAdoptions(const PyAdoptions&) = delete;
  PyAdoptions& operator=(const PyAdoptions&) = delete;
  ~PyAdoptions() {
    try {
      release();
    } catch (...) {
      // A closed or failed device: nothing is in flight any more that the owner could overtake.
    }
  }

  /// Release every range and order the owner after the copies; returns the last release point
  /// (empty when nothing was left to release).
  ferry::TimelinePoint release() {
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
};

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

PyUploadBatch make_batch(ferry::UploadBatch b, const PyDevice& dev) {
  PyUploadBatch r;
  r.offsets = std::move(b.offsets);
  for (const auto& v : b.views) r.sizes.push_back(v.size);
  r.ready = b.ready;
  r.buffer = wrap(std::move(b.buffer), dev, b.ready);
  return r;
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

// ---------------------------------------------------------------------------------------------
// ferry.torch's one-call path, through DLPack's C exchange API
//
// `to` spends its host time in PyTorch's Python calls (streams, allocation, DLPack capsules,
// views), each a few microseconds, where `Tensor.to` is one C++ call. A tensor type's
// `__dlpack_c_exchange_api__` capsule gives C entry points for what ferry needs of PyTorch:
// read a tensor's layout, ask for the current stream, hand back a tensor over memory ferry
// describes. With them one binding call does a whole `to`, and ferry needs no build against
// libtorch.

namespace dl {
// The ABI of DLPack 1.x (dlpack.h), as far as a consumer of the exchange API needs it: the
// layouts are DLPack's, so that the function table a framework hands out can be called.
struct Version {
  std::uint32_t major;
  std::uint32_t minor;
};
struct Device {
  std::int32_t device_type;
  std::int32_t device_id;
};
struct DataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct Tensor {
  void* data;
  Device device;
  std::int32_t ndim;
  DataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;
  std::uint64_t byte_offset;
};
struct ManagedTensorVersioned {
  Version version;
  void* manager_ctx;
  void (*deleter)(ManagedTensorVersioned* self);
  std::uint64_t flags;
  Tensor dl_tensor;
};
struct ExchangeApiHeader {
  Version version;
  ExchangeApiHeader* prev_api;
};
using SetError = void (*)(void* ctx, const char* kind, const char* message);
struct ExchangeApi {
  ExchangeApiHeader header;
  int (*managed_tensor_allocator)(Tensor* prototype, ManagedTensorVersioned** out, void* error_ctx, SetError set);
  int (*managed_tensor_from_py_object_no_sync)(void* py_object, ManagedTensorVersioned** out);
  int (*managed_tensor_to_py_object_no_sync)(ManagedTensorVersioned* tensor, void** out_py_object);
  int (*dltensor_from_py_object_no_sync)(void* py_object, Tensor* out);
  int (*current_work_stream)(std::int32_t device_type, std::int32_t device_id, void** out_stream);
};
constexpr std::int32_t kCPU = 1;
constexpr std::int32_t kCUDA = 2;
constexpr std::int32_t kCUDAHost = 3;
constexpr std::int32_t kROCM = 10;
constexpr std::int32_t kROCMHost = 11;
constexpr std::uint8_t kComplex = 5;
}  // namespace dl

/// Pinned sources below this size are staged rather than copied by a DMA call of their own:
/// adopting a tensor and enqueueing its copy costs more host time than copying this many bytes
/// into the staging ring, which moves every staged leaf of the call in one stream.
constexpr std::uint64_t kTorchDmaMinBytes = 128 << 10;
/// Offset alignment of every leaf in a structure's allocation: it satisfies every dtype, and it
/// is the core's padding limit, so the staged copy may overwrite the gaps between leaves.
constexpr std::uint64_t kTorchAlignment = ferry::UploadOptions::kPaddingLimit;

/// The exchange API of a `__dlpack_c_exchange_api__` capsule, checked for DLPack major version 1.
const dl::ExchangeApi& exchange_api(nb::handle capsule) {
  void* p = PyCapsule_GetPointer(capsule.ptr(), "dlpack_exchange_api");
  if (p == nullptr) {
    PyErr_Clear();
    invalid("ferry.torch: the tensor type's __dlpack_c_exchange_api__ is not a 'dlpack_exchange_api' capsule");
  }
  const auto* api = static_cast<const dl::ExchangeApi*>(p);
  if (api->header.version.major != 1) {
    throw Error(ErrorCode::unsupported, "ferry.torch: DLPack exchange API version " +
                                            std::to_string(api->header.version.major) + " (ferry reads version 1)");
  }
  return *api;
}

/// Reached-ness of points on a hot path: the watermark first (free), the device at most once
/// per kQueryIntervalNs (one driver query costs about what a whole small copy's enqueue does,
/// and a point not known reached is at worst kept, or waited for on the device, a little
/// longer). The core's hot paths ask a timeline at the same rate. Used under its owner's mutex.
class ThrottledReached {
 public:
  static constexpr std::int64_t kQueryIntervalNs = 50'000;

  bool operator()(const ferry::TimelinePoint& point) {
    if (point.known_reached()) return true;
    const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count();
    if (now - last_query_ns_ < kQueryIntervalNs) return false;
    last_query_ns_ = now;
    return point.reached();  // raises the watermark for the points behind it too
  }

 private:
  std::int64_t last_query_ns_ = INT64_MIN / 2;
};

/// The destinations of `ferry.torch.to(mode="torch")` for one target stream: blocks of
/// PyTorch's caching allocator taken on a stream of ferry's own that runs no work, so the
/// allocator hands them out again only to ferry, with the release point of every range ferry
/// let go of that may still be in use on the target. A copy into a range waits for the latest
/// release point it overlaps: the points are all on the target's timeline, so that one covers
/// the others. Shared by `to`'s binding path and its Python path.
struct TorchDestinations {
  struct Freed {
    std::uint64_t start;
    std::uint64_t end;
    ferry::TimelinePoint point;
  };
  /// The caching allocator through ferry._torch_native's entry points, when set (no Python
  /// call either way); else through raw_alloc and raw_delete.
  const ferry_torch_native::Api* native = nullptr;
  std::int64_t stream_id = 0;      ///< the idle stream as torch.cuda.Stream.stream_id names it
  std::int32_t device_index = 0;   ///< its device
  PyKeep raw_alloc;   ///< (nbytes, stream) -> device pointer, on the current device
  PyKeep raw_delete;  ///< (pointer) -> None
  std::uintptr_t stream = 0;
  std::mutex mutex;
  std::vector<Freed> freed;
  ThrottledReached reached;  ///< under `mutex`

  /// With the GIL: a pointer to `nbytes` bytes and the point a writer must wait for (empty when
  /// no range it overlaps may still be in use).
  std::pair<std::uint64_t, ferry::TimelinePoint> allocate(std::uint64_t nbytes) {
    std::uint64_t ptr = 0;
    if (native != nullptr) {
      ptr = native->allocate(nbytes, stream_id, device_index);
      if (ptr == 0) throw nb::python_error();
    } else {
      ptr = nb::cast<std::uint64_t>(raw_alloc.object(nbytes, stream));
    }
    const std::uint64_t end = ptr + nbytes;
    ferry::TimelinePoint wait;
    std::lock_guard<std::mutex> lock(mutex);
    // Release points of one target are recorded in the order of its timeline, so the reached
    // ones lead. An entry recorded out of order behind an unreached one stays until those
    // before it are reached; an entry not known reached is waited for on the device, which
    // costs no more than asking.
    std::size_t done = 0;
    while (done < freed.size() && reached(freed[done].point)) ++done;
    freed.erase(freed.begin(), freed.begin() + static_cast<std::ptrdiff_t>(done));
    for (const Freed& f : freed) {
      if (f.start < end && ptr < f.end && (wait.empty() || f.point.value > wait.value)) wait = f.point;
    }
    return {ptr, wait};
  }

  /// From any thread: record `point` for the range, then hand the block back to the caching
  /// allocator (raw_delete takes the GIL; the native entry point needs none). An allocation
  /// failure of the record terminates: a block handed back without its point could be
  /// overwritten under a read.
  void release(std::uint64_t ptr, std::uint64_t nbytes, const ferry::TimelinePoint& point) noexcept {
    if (!point.empty()) {
      // Reached points are dropped by the next allocation, which asks anyway.
      std::lock_guard<std::mutex> lock(mutex);
      freed.push_back({ptr, ptr + nbytes, point});
    }
    if (native != nullptr) {
      native->free(ptr);
    } else {
      call_reporting(raw_delete.object, ptr, "ferry.torch: handing a block back to PyTorch's caching allocator");
    }
  }
};

/// One `to` call's device memory, shared by the tensors handed to PyTorch: the last one's
/// deleter releases the adoption (ordering the target after the copy) and hands the block back
/// with that release point. On the CPU it holds PyTorch's own allocation instead.
struct PyTorchDestinations {
  std::shared_ptr<TorchDestinations> s;
};

struct TorchBlock {
  ferry::DeviceBuffer buffer;
  std::shared_ptr<TorchDestinations> destinations;
  std::uint64_t pointer = 0;
  std::uint64_t size = 0;
  dl::ManagedTensorVersioned* host_allocation = nullptr;

  TorchBlock() = default;
  TorchBlock(const TorchBlock&) = delete;
  TorchBlock& operator=(const TorchBlock&) = delete;
  ~TorchBlock() {
    FERRY_PHASE_CLOCK(clock);
    const ferry::TimelinePoint point = release_quietly(buffer);
    FERRY_PHASE(clock, 10, "drop: release the adoption");
    if (destinations) destinations->release(pointer, size, point);
    FERRY_PHASE(clock, 11, "drop: record the point, raw_delete");
    if (host_allocation != nullptr && host_allocation->deleter != nullptr) host_allocation->deleter(host_allocation);
  }
};

/// A result tensor's DLPack record: its share of the block and its shape and strides.
struct TorchLeaf {
  std::shared_ptr<TorchBlock> block;
  std::vector<std::int64_t> dims;  ///< shape, then strides
  dl::ManagedTensorVersioned managed{};
};

void torch_leaf_deleter(dl::ManagedTensorVersioned* self) noexcept {
  delete static_cast<TorchLeaf*>(self->manager_ctx);
}

/// Pinned sources read by DMA after `to` returns, held with the point at which their last copy
/// completes and let go of once it is reached. One executor's copies complete in order, so
/// entries are let go of oldest first, up to the first point not reached.
struct TorchHeld {
  /// The sources of one call: the first inline, since most calls hold one.
  struct Entry {
    ferry::TimelinePoint point;
    nb::object first;
    std::vector<nb::object> rest;
  };
  std::mutex mutex;
  std::deque<Entry> entries;
  ThrottledReached reached;  ///< under `mutex`

  // Every method runs with the GIL: holding and dropping the tensors changes their references.
  void release_reached() {
    std::lock_guard<std::mutex> lock(mutex);
    release_reached_locked();
  }
  /// Hold the `n` (at least one) tensors `at(0)` ... `at(n - 1)` until `point` is reached.
  template <class At>
  void hold(ferry::TimelinePoint point, std::size_t n, At&& at) {
    Entry e{std::move(point), nb::borrow(at(0)), {}};
    if (n > 1) {
      e.rest.reserve(n - 1);
      for (std::size_t i = 1; i < n; ++i) e.rest.push_back(nb::borrow(at(i)));
    }
    std::lock_guard<std::mutex> lock(mutex);
    release_reached_locked();
    entries.push_back(std::move(e));
  }
  std::size_t count() {
    std::lock_guard<std::mutex> lock(mutex);
    std::size_t n = 0;
    for (const auto& e : entries) n += 1 + e.rest.size();
    return n;
  }
  /// Let go of everything (after every copy completed); the tensors are dropped outside the
  /// mutex.
  void clear() {
    std::deque<Entry> gone;
    std::lock_guard<std::mutex> lock(mutex);
    gone.swap(entries);
  }

 private:
  void release_reached_locked() {
    while (!entries.empty() && reached(entries.front().point)) entries.pop_front();
  }
};

TorchHeld& torch_held() {
  static TorchHeld* held = new TorchHeld;  // never destroyed: its tensors die with the interpreter
  return *held;
}

/// A plain leaf as the fast path copies it: a CPU tensor, strided, contiguous, of whole bytes,
/// not requiring grad and with no conjugate or negative bit. Anything else is left to the
/// Python path, which converts it or names what is wrong with it.
struct TorchSource {
  nb::handle tensor;
  const std::byte* data = nullptr;
  std::uint64_t nbytes = 0;
  std::uint64_t offset = 0;  ///< in the destination
  dl::DataType dtype{};
  /// A copy (the call may let other threads run, which may resize the tensor): in
  /// `shape_inline` up to its size, which holds nearly every tensor's, else in `shape_copy`.
  std::span<const std::int64_t> shape;
  std::int64_t shape_inline[6];
  std::vector<std::int64_t> shape_copy;
  std::int32_t scalar_type = 0;  ///< c10::ScalarType, when read through ferry._torch_native
  bool pinned_by_torch = false;  ///< PyTorch's pinned allocator holds the storage (native read)

  TorchSource() = default;
  TorchSource(const TorchSource&) = delete;  // `shape` may point into the object itself
  TorchSource& operator=(const TorchSource&) = delete;

  void set_shape(const std::int64_t* dims, std::int32_t ndim) {
    const auto n = static_cast<std::size_t>(ndim);
    if (n <= std::size(shape_inline)) {
      std::copy_n(dims, n, shape_inline);
      shape = {shape_inline, n};
    } else {
      shape_copy.assign(dims, dims + n);
      shape = shape_copy;
    }
  }
};

/// ferry.torch.to's one-call path: ferry._torch_native's entry points (when set, for the
/// running torch) and the types the one-tensor entry tells apart. Read and set with the GIL.
struct TorchGlue {
  const ferry_torch_native::Api* native = nullptr;
  nb::object native_capsule;  ///< keeps `native` alive
  nb::object exchange;        ///< torch.Tensor.__dlpack_c_exchange_api__
  nb::object tensor_type;     ///< torch.Tensor: only it takes the one-tensor entry
  nb::object stream_type;     ///< torch.cuda.Stream
  /// Per CUDA device index: the Transfer and the destinations of each target stream handle,
  /// registered by the general path's first call for that stream.
  struct Engine {
    nb::object transfer;
    std::unordered_map<std::uintptr_t, std::shared_ptr<TorchDestinations>> destinations;
  };
  std::unordered_map<int, Engine> engines;
};

TorchGlue& torch_glue() {
  static TorchGlue* glue = new TorchGlue;  // never destroyed: its objects die with the interpreter
  return *glue;
}

bool torch_source_native(const ferry_torch_native::Api& api, nb::handle t, TorchSource& out) {
  ferry_torch_native::Leaf leaf{};
  if (api.read(t.ptr(), &leaf) == 0) return false;
  out.tensor = t;
  out.data = static_cast<const std::byte*>(leaf.data);
  out.nbytes = leaf.nbytes;
  out.set_shape(leaf.shape, leaf.ndim);
  out.scalar_type = leaf.scalar_type;
  out.pinned_by_torch = leaf.pinned_by_torch != 0;
  return true;
}

/// A result tensor's share of the block, handed to ferry._torch_native's wrap as its
/// storage's deleter context.
void torch_block_unref(void* context) noexcept { delete static_cast<std::shared_ptr<TorchBlock>*>(context); }

bool torch_source(const dl::ExchangeApi& api, nb::handle t, TorchSource& out) {
  dl::Tensor d{};
  if (api.dltensor_from_py_object_no_sync(t.ptr(), &d) != 0) {
    PyErr_Clear();
    return false;
  }
  if (d.device.device_type != dl::kCPU && d.device.device_type != dl::kCUDAHost &&
      d.device.device_type != dl::kROCMHost) {
    return false;
  }
  if (d.dtype.bits % 8 != 0 || d.dtype.lanes == 0) return false;
  std::uint64_t numel = 1;
  std::int64_t expected = 1;
  for (std::int32_t i = d.ndim - 1; i >= 0; --i) {
    if (d.strides != nullptr && d.shape[i] > 1 && d.strides[i] != expected) return false;
    expected *= d.shape[i];
    numel *= static_cast<std::uint64_t>(d.shape[i]);
  }
  static PyObject* requires_grad = PyUnicode_InternFromString("requires_grad");
  PyObject* rg = PyObject_GetAttr(t.ptr(), requires_grad);
  if (rg == nullptr) {
    PyErr_Clear();
    return false;
  }
  const bool grad = rg == Py_True;
  Py_DECREF(rg);
  if (grad) return false;
  if (d.dtype.code == dl::kComplex) {
    for (const char* bit : {"is_conj", "is_neg"}) {
      nb::object r = nb::steal(PyObject_CallMethod(t.ptr(), bit, nullptr));
      if (!r.is_valid()) {
        PyErr_Clear();
        return false;
      }
      if (r.ptr() == Py_True) return false;
    }
  }
  out.tensor = t;
  out.data = static_cast<const std::byte*>(d.data) + d.byte_offset;
  out.nbytes = numel * d.dtype.bits / 8 * d.dtype.lanes;
  out.dtype = d.dtype;
  out.set_shape(d.shape, d.ndim);
  return true;
}

void torch_set_error(void* ctx, const char* kind, const char* message) {
  *static_cast<std::string*>(ctx) = std::string(kind) + ": " + message;
}

/// `ferry.torch.to` for a list of leaves in one call (see torch.py). Returns the device tensors,
/// or None when a leaf is not one the fast path copies (the caller then takes the Python path).
/// On a GPU, with ferry._torch_native's entry points set, the leaves are read, the destination
/// taken and the results made through them (`native`); else through DLPack's exchange API.
/// `leaves` are borrowed for the call.
nb::object torch_to(PyTransfer& t, nb::handle capsule, std::span<const nb::handle> leaves,
                    const std::shared_ptr<TorchDestinations>& destinations,
                    int device_index, std::optional<std::uintptr_t> target_stream,
                    std::optional<std::uintptr_t> wait_stream) {
  FERRY_PHASE_CLOCK(clock);
  const dl::ExchangeApi& api = exchange_api(capsule);
  const bool cpu = destinations == nullptr;
  const ferry_torch_native::Api* native = cpu ? nullptr : torch_glue().native;
  const std::size_t n = leaves.size();
  std::vector<TorchSource> sources(n);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!(native != nullptr ? torch_source_native(*native, leaves[i], sources[i])
                            : torch_source(api, leaves[i], sources[i]))) {
      return nb::none();
    }
    total = (total + kTorchAlignment - 1) / kTorchAlignment * kTorchAlignment;
    sources[i].offset = total;
    total += sources[i].nbytes;
  }
  if (total == 0) return nb::none();
  FERRY_PHASE(clock, 0, "to: read the leaves");
  ferry::Transfer& x = t.get();
  ferry::Device& dev = t.device.device;
  const std::int32_t dl_type = cpu ? dl::kCPU : (dev.backend() == ferry::Backend::hip ? dl::kROCM : dl::kCUDA);

  // The streams: the target owns the memory; the waiting stream waits for the copy.
  std::uintptr_t target = 0;
  std::uintptr_t waiter = 0;
  if (!cpu) {
    void* current = nullptr;
    if (!target_stream || !wait_stream) {
      if (native != nullptr) {
        std::int32_t index = 0;
        std::uintptr_t handle = 0;
        if (native->current(&index, &handle) != 0) throw nb::python_error();
        if (index != device_index) {
          invalid("ferry.torch.to: the current device is cuda:" + std::to_string(index) + ", not cuda:" +
                  std::to_string(device_index));
        }
        current = reinterpret_cast<void*>(handle);
      } else if (api.current_work_stream(dl_type, device_index, &current) != 0) {
        throw nb::python_error();
      }
    }
    target = target_stream.value_or(reinterpret_cast<std::uintptr_t>(current));
    waiter = wait_stream.value_or(reinterpret_cast<std::uintptr_t>(current));
  }
  const bool target_waits = cpu || target == waiter;
  // PyTorch names CUDA's legacy default stream 0; the backend adopts it as handle 1.
  const auto adoptable = [&](std::uintptr_t h) {
    return h == 0 && dev.backend() == ferry::Backend::cuda ? std::uintptr_t{1} : h;
  };
  ferry::Queue owner = cpu ? dev.queue(ferry::QueueRole::compute)
                           : t.device.adopt(adoptable(target), ferry::QueueRole::compute, "torch target stream");
  FERRY_PHASE(clock, 1, "to: streams and the adopted target queue");

  auto block = std::make_shared<TorchBlock>();
  ferry::TimelinePoint ready_after;
  if (cpu) {
    ready_after = owner.mark();
    std::int64_t shape[1] = {static_cast<std::int64_t>(total)};
    dl::Tensor prototype{nullptr, {dl::kCPU, 0}, 1, {1, 8, 1}, shape, nullptr, 0};  // uint8 [total]
    std::string error;
    if (api.managed_tensor_allocator(&prototype, &block->host_allocation, &error, torch_set_error) != 0 ||
        block->host_allocation == nullptr) {
      block->host_allocation = nullptr;
      throw Error(ErrorCode::out_of_memory, "ferry.torch.to: PyTorch could not allocate " + std::to_string(total) +
                                                " bytes on the CPU: " + error);
    }
    block->pointer = reinterpret_cast<std::uintptr_t>(block->host_allocation->dl_tensor.data) +
                     block->host_allocation->dl_tensor.byte_offset;
  } else {
    auto [ptr, wait] = destinations->allocate(total);
    block->pointer = ptr;
    block->size = total;
    // From here the block goes back to the caching allocator with the block's release.
    block->destinations = destinations;
    ready_after = std::move(wait);
  }
  FERRY_PHASE(clock, 2, "to: allocate (raw_alloc, release points)");
  ferry::AdoptOptions ao;
  ao.ready_after = std::move(ready_after);
  ao.tag = "ferry.torch.to";
  block->buffer = dev.adopt_memory(ferry::NativeMemory{.pointer = block->pointer}, total, owner, std::move(ao));
  FERRY_PHASE(clock, 3, "to: Device::adopt_memory");

  // Pinned sources go by DMA from their own memory; the rest in one staged stream.
  std::vector<std::pair<std::size_t, PinnedSources::Buffer>> pinned;
  std::vector<ferry::HostView> staged;
  std::vector<std::uint64_t> staged_offsets;
  for (std::size_t i = 0; i < n; ++i) {
    const TorchSource& s = sources[i];
    if (s.nbytes == 0) continue;
    if (s.nbytes >= kTorchDmaMinBytes) {
      try {
        pinned.emplace_back(i, s.pinned_by_torch ? t.device.pinned_sources->adopt(dev, s.data, s.nbytes)
                                                 : std::make_shared<const ferry::HostBuffer>(dev.host_pool().adopt(
                                                       const_cast<std::byte*>(s.data), s.nbytes)));
        continue;
      } catch (const Error& e) {
        if (e.code() != ErrorCode::invalid_argument) throw;  // pageable memory: staged
      }
    }
    staged.push_back({s.data, s.nbytes});
    staged_offsets.push_back(s.offset);
  }
  FERRY_PHASE(clock, 4, "to: HostPool::adopt of pinned sources");
  ferry::TimelinePoint last;
  const auto pinned_tensor = [&](std::size_t k) { return sources[pinned[k].first].tensor; };
  {
    // Copies from pinned memory only enqueue DMA and never wait on the host, so they keep the
    // GIL (releasing and taking it back costs a share of a one-tensor call); a staged copy
    // may wait for ring space, and the host backend's copy waits for its result, so they let
    // other threads run.
    std::optional<nb::gil_scoped_release> nogil;
    if (cpu || !staged.empty()) nogil.emplace();
    FERRY_PHASE(clock, 5, "to: release the GIL");
    std::exception_ptr failed;
    try {
      for (std::size_t k = 0; k < pinned.size(); ++k) {
        ferry::UploadOptions o;
        o.mode = ferry::CopyMode::preallocated;
        o.owner_waits = target_waits && staged.empty() && k + 1 == pinned.size();
        o.destination_unused = true;
        const TorchSource& s = sources[pinned[k].first];
        last = x.upload_into(*pinned[k].second, 0, s.nbytes, block->buffer, s.offset, std::move(o));
      }
      if (!staged.empty()) {
        ferry::UploadOptions o;
        o.mode = ferry::CopyMode::preallocated;
        o.owner_waits = target_waits;
        o.overwrite_padding = true;
        o.destination_unused = true;
        last = x.upload_into(std::span<const ferry::HostView>(staged), block->buffer,
                             std::span<const std::uint64_t>(staged_offsets), std::move(o));
      }
    } catch (...) {
      failed = std::current_exception();
    }
    if (failed) {
      // The copies enqueued so far still read their pinned sources: hold them until every
      // copy enqueued on the executor completes.
      nogil.reset();
      if (!pinned.empty()) torch_held().hold(x.executor().mark(), pinned.size(), pinned_tensor);
      std::rethrow_exception(failed);
    }
    FERRY_PHASE(clock, 6, "to: Transfer::upload_into");
    if (cpu) {
      // The host reads the results at once.
      ferry::TimelinePoint done = block->buffer.release();
      done.wait();
    } else if (!target_waits) {
      t.device.adopt(adoptable(waiter), ferry::QueueRole::compute, "torch wait stream").wait(last);
    }
  }
  FERRY_PHASE(clock, 7, "to: the waiting stream's wait, take the GIL");
  if (!pinned.empty() && !cpu) torch_held().hold(last, pinned.size(), pinned_tensor);

  FERRY_PHASE(clock, 8, "to: hold the pinned sources");
  nb::list out;
  for (std::size_t i = 0; i < n; ++i) {
    const TorchSource& s = sources[i];
    if (native != nullptr) {
      const ferry_torch_native::Leaf like{nullptr, s.nbytes, s.shape.data(), static_cast<std::int32_t>(s.shape.size()),
                                          s.scalar_type, 0};
      // wrap calls the deleter, which drops this share, when it fails.
      PyObject* obj = native->wrap(block->pointer + s.offset, device_index, &like,
                                   new std::shared_ptr<TorchBlock>(block), torch_block_unref);
      if (obj == nullptr) throw nb::python_error();
      out.append(nb::steal(obj));
      continue;
    }
    auto* leaf = new TorchLeaf;
    leaf->block = block;
    const auto nd = static_cast<std::int32_t>(s.shape.size());
    leaf->dims.resize(2 * s.shape.size());
    std::int64_t stride = 1;
    for (std::int32_t d = nd - 1; d >= 0; --d) {
      leaf->dims[d] = s.shape[d];
      leaf->dims[nd + d] = stride;
      stride *= s.shape[d] > 0 ? s.shape[d] : 1;
    }
    dl::ManagedTensorVersioned& m = leaf->managed;
    m.version = {1, 0};
    m.manager_ctx = leaf;
    m.deleter = torch_leaf_deleter;
    m.flags = 0;
    m.dl_tensor = dl::Tensor{reinterpret_cast<void*>(block->pointer + s.offset),
                             {dl_type, cpu ? 0 : device_index},
                             nd,
                             s.dtype,
                             leaf->dims.data(),
                             leaf->dims.data() + nd,
                             0};
    void* obj = nullptr;
    if (api.managed_tensor_to_py_object_no_sync(&m, &obj) != 0 || obj == nullptr) {
      // The consumer did not take the record: it is still ferry's to free.
      delete leaf;
      throw nb::python_error();
    }
    out.append(nb::steal(static_cast<PyObject*>(obj)));
  }
  FERRY_PHASE(clock, 9, "to: the result tensors");
  return out;
}

const char* const kUploadOptionsDoc =
    "Keyword options (every upload): mode (CopyMode or its name; default owner_owned), tag (label "
    "of pool events), overlap (grow the pool rather than wait for the owner's pending free), "
    "owner_waits (enqueue owner.wait(ready) in the call; default True), wait (points the copy "
    "waits for), signal (user points signalled once the copy is complete).";

}  // namespace

NB_MODULE(_ferry, m) {
  m.doc() =
      "ferry's C++ core: devices, queues, timelines, pools, transfers and snapshots. Import the "
      "`ferry` package rather than this module.";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      nb::object cls = nb::module_::import_("ferry._error").attr("Error");
      nb::object exc = cls(std::string(ferry::to_string(e.code())), e.message(), e.call());
      PyErr_SetObject(cls.ptr(), exc.ptr());
    }
  });

  nb::enum_<ferry::Backend>(m, "Backend", "The backends ferry can be built with.")
      .value("host", ferry::Backend::host)
      .value("cuda", ferry::Backend::cuda)
      .value("hip", ferry::Backend::hip)
      .value("vulkan", ferry::Backend::vulkan)
      .value("vulkan_cuda", ferry::Backend::vulkan_cuda)
      .value("cuda_vulkan", ferry::Backend::cuda_vulkan)
      .value("null", ferry::Backend::null);
  nb::enum_<ferry::QueueRole>(m, "QueueRole", "compute (owner) or transfer (executing).")
      .value("compute", ferry::QueueRole::compute)
      .value("transfer", ferry::QueueRole::transfer);
  nb::enum_<ferry::CopyMode>(m, "CopyMode", "Where an upload's destination comes from (see ferry/transfer.hpp).")
      .value("preallocated", ferry::CopyMode::preallocated)
      .value("owner_owned", ferry::CopyMode::owner_owned);

  nb::class_<ferry::Capabilities>(m, "Capabilities", "Device capabilities and limits, filled at open.")
      .def_ro("name", &ferry::Capabilities::name)
      .def_ro("backend", &ferry::Capabilities::backend)
      .def_ro("is_gpu", &ferry::Capabilities::is_gpu)
      .def_ro("device_memory_bytes", &ferry::Capabilities::device_memory_bytes)
      .def_ro("copy_engines", &ferry::Capabilities::copy_engines)
      .def_ro("dedicated_transfer_queue", &ferry::Capabilities::dedicated_transfer_queue)
      .def_ro("host_memory_registration", &ferry::Capabilities::host_memory_registration)
      .def_ro("host_memory_adoption", &ferry::Capabilities::host_memory_adoption)
      .def_ro("timeline_export", &ferry::Capabilities::timeline_export)
      .def_ro("min_alignment", &ferry::Capabilities::min_alignment)
      .def_ro("max_allocation_bytes", &ferry::Capabilities::max_allocation_bytes)
      .def_ro("uuid", &ferry::Capabilities::uuid)
      .def_ro("notes", &ferry::Capabilities::notes)
      .def("__repr__", [](const ferry::Capabilities& c) {
        return "<ferry.Capabilities " + c.name + " (" + std::string(ferry::to_string(c.backend)) + ")>";
      });

  nb::class_<ferry::TimelinePoint>(m, "TimelinePoint",
                                   "A point on a timeline: all work up to here. An empty point counts as reached.")
      .def_ro("value", &ferry::TimelinePoint::value)
      .def_prop_ro("empty", &ferry::TimelinePoint::empty)
      .def("reached", [](const ferry::TimelinePoint& p) { return p.reached(); },
           "Non-blocking query: has the point been reached?")
      .def_prop_ro("known_reached", &ferry::TimelinePoint::known_reached,
                   "Whether the point is known reached without asking the device (a query or wait on its "
                   "semaphore has seen it); False means not known: reached() asks.")
      .def("wait", [](const ferry::TimelinePoint& p, double timeout) {
             nb::gil_scoped_release nogil;
             p.wait(seconds(timeout));
           }, "timeout"_a = 60.0,
           "Block until reached (the GIL is released); ferry.Error('timeout') after `timeout` seconds.");

  nb::class_<ferry::TimelineSemaphore>(m, "TimelineSemaphore", "A monotonic 64-bit counter; host and queues signal and wait on it.")
      .def_prop_ro("value", [](const ferry::TimelineSemaphore& s) { return s.value(); })
      .def("signal", [](ferry::TimelineSemaphore& s, std::uint64_t v) { s.signal(v); }, "value"_a,
           "Signal from the host; the value must exceed the current one.")
      .def("wait", [](const ferry::TimelineSemaphore& s, std::uint64_t v, double timeout) {
             nb::gil_scoped_release nogil;
             s.wait(v, seconds(timeout));
           }, "value"_a, "timeout"_a = 60.0, "Block until the value is >= `value` (the GIL is released).")
      .def("at", [](const ferry::TimelineSemaphore& s, std::uint64_t v) { return s.at(v); }, "value"_a,
           "The point (this, value).");

  nb::class_<ferry::Queue>(m, "Queue", "A queue of ordered work, with a role and a private timeline.")
      .def_prop_ro("role", [](const ferry::Queue& q) { return q.role(); })
      .def_prop_ro("id", [](const ferry::Queue& q) { return q.id(); })
      .def_prop_ro("name", [](const ferry::Queue& q) { return q.name(); })
      .def("wait", [](ferry::Queue& q, const ferry::TimelinePoint& p) { q.wait(p); }, "point"_a,
           "Make later work on this queue wait for `point` (on the device; the host is not blocked).")
      .def("signal", [](ferry::Queue& q, const ferry::TimelinePoint& p) { q.signal(p); }, "point"_a,
           "Signal `point` after all work enqueued so far.")
      .def("mark", [](ferry::Queue& q) { return q.mark(); },
           "A point reached once all work enqueued so far has completed.")
      .def("synchronize", [](ferry::Queue& q, double timeout) {
             nb::gil_scoped_release nogil;
             q.synchronize(seconds(timeout));
           }, "timeout"_a = 60.0, "Block until all work enqueued so far has completed (the GIL is released).")
      .def("__eq__", [](const ferry::Queue& a, const ferry::Queue& b) { return a == b; })
      .def("__repr__", [](const ferry::Queue& q) { return "<ferry.Queue " + q.name() + ">"; });

  // --- pools and statistics
  nb::class_<ferry::QueueBudget>(m, "QueueBudget", "Per-owner pool statistics.")
      .def_ro("queue_id", &ferry::QueueBudget::queue_id)
      .def_ro("queue_name", &ferry::QueueBudget::queue_name)
      .def_ro("active_bytes", &ferry::QueueBudget::active_bytes)
      .def_ro("free_bytes", &ferry::QueueBudget::free_bytes)
      .def_ro("peak_active_bytes", &ferry::QueueBudget::peak_active_bytes);
  nb::class_<ferry::PoolBudget>(m, "PoolBudget", "Cheap pool statistics (every step of a loop may read them).")
      .def_ro("reserved_bytes", &ferry::PoolBudget::reserved_bytes)
      .def_ro("active_bytes", &ferry::PoolBudget::active_bytes)
      .def_ro("requested_bytes", &ferry::PoolBudget::requested_bytes)
      .def_ro("peak_reserved_bytes", &ferry::PoolBudget::peak_reserved_bytes)
      .def_ro("peak_active_bytes", &ferry::PoolBudget::peak_active_bytes)
      .def_ro("stranded_bytes", &ferry::PoolBudget::stranded_bytes)
      .def_ro("peak_stranded_bytes", &ferry::PoolBudget::peak_stranded_bytes)
      .def_ro("segment_count", &ferry::PoolBudget::segment_count)
      .def_ro("allocations", &ferry::PoolBudget::allocations)
      .def_ro("segment_allocations", &ferry::PoolBudget::segment_allocations)
      .def_ro("pending_reuses", &ferry::PoolBudget::pending_reuses)
      .def_ro("immediate_reuses", &ferry::PoolBudget::immediate_reuses)
      .def_ro("queues", &ferry::PoolBudget::queues);
  nb::class_<ferry::PoolDetailedStatistics>(m, "PoolDetailedStatistics", "Slow statistics (walks every block).")
      .def_ro("budget", &ferry::PoolDetailedStatistics::budget)
      .def_ro("free_blocks", &ferry::PoolDetailedStatistics::free_blocks)
      .def_ro("allocated_blocks", &ferry::PoolDetailedStatistics::allocated_blocks)
      .def_ro("pending_free_blocks", &ferry::PoolDetailedStatistics::pending_free_blocks)
      .def_ro("largest_free_block", &ferry::PoolDetailedStatistics::largest_free_block)
      .def_ro("idle_segments", &ferry::PoolDetailedStatistics::idle_segments);

  nb::class_<ferry::MemorySnapshot>(m, "MemorySnapshot",
                                    "Segments, blocks and the trace of pool events, copied out of the pool.")
      .def_ro("device_name", &ferry::MemorySnapshot::device_name)
      .def_ro("backend", &ferry::MemorySnapshot::backend)
      .def_prop_ro("segment_count", [](const ferry::MemorySnapshot& s) { return s.segments.size(); })
      .def_prop_ro("event_count", [](const ferry::MemorySnapshot& s) { return s.events.size(); })
      .def("to_json", [](const ferry::MemorySnapshot& s) { return ferry::to_json(s); },
           "The documented JSON form (tools/snapshot.schema.json).")
      .def("write_json", [](const ferry::MemorySnapshot& s, const std::string& path) { ferry::write_json(s, path); },
           "path"_a)
      .def("to_memory_viz_pickle", [](const ferry::MemorySnapshot& s) {
             const std::string p = ferry::to_memory_viz_pickle(s);
             return nb::bytes(p.data(), p.size());
           }, "The pickle PyTorch's memory_viz reads (torch.cuda.memory._snapshot()'s format).")
      .def("write_memory_viz_pickle",
           [](const ferry::MemorySnapshot& s, const std::string& path) { ferry::write_memory_viz_pickle(s, path); },
           "path"_a)
      .def("write_chrome_trace",
           [](const ferry::MemorySnapshot& s, const std::string& path) { ferry::write_chrome_trace(s, path); },
           "path"_a, "Chrome trace-event JSON of the queues' activity (opens in Perfetto).")
      .def("write_html_report",
           [](const ferry::MemorySnapshot& s, const std::string& path) { ferry::write_html_report(s, path); },
           "path"_a, "A self-contained HTML report of the footprint timelines.");

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
  nb::class_<PyPool>(m, "DevicePool", "The device's stream-ordered memory pool (Device.pool).")
      .def("allocate", [](PyPool& p, std::uint64_t bytes, const ferry::Queue& owner, const std::string& tag,
                          std::optional<ferry::Queue> first_writer) {
             ferry::AllocationOptions o{.tag = tag};
             if (first_writer) o.first_writer = *first_writer;
             return wrap(p.device.device.pool().allocate(bytes, owner, std::move(o)), p.device);
           }, "nbytes"_a, "owner"_a, "tag"_a = "", "first_writer"_a = nb::none(),
           "Allocate `nbytes` (> 0) owned by `owner`. `first_writer`: the queue that writes the block "
           "first when it is not the owner (a Transfer's executor); the block's ready_after then "
           "covers its previous use (AllocationOptions::first_writer).")
      .def("budget", [](const PyPool& p) { return p.device.device.pool().get_budget(); }, "Cheap statistics.")
      .def("statistics", [](const PyPool& p) { return p.device.device.pool().calculate_statistics(); },
           "Slow statistics (walks every block).")
      .def("reset_peaks", [](PyPool& p) { p.device.device.pool().reset_peaks(); })
      .def("trim", [](PyPool& p) { return p.device.device.pool().trim(); },
           "Return idle segments to the backend; returns the bytes returned.")
      .def("validate", [](const PyPool& p) { p.device.device.pool().validate(); },
           "Check every invariant (ferry.Error('internal_error') names a broken one).")
      .def("snapshot", [](const PyPool& p) { return p.device.device.pool().snapshot(); })
      .def("clear_events", [](PyPool& p) { p.device.device.pool().clear_events(); });

  nb::class_<PyHostPool>(m, "HostPool", "Pinned host memory of a device (Device.host_pool).")
      .def("allocate", [](PyHostPool& p, std::uint64_t bytes) {
             return PyHostBuffer{p.device.device.host_pool().allocate(bytes)};
           }, "nbytes"_a, "Allocate `nbytes` (> 0) of pinned host memory.")
      .def("register", [](PyHostPool& p, nb::handle obj) {
             auto held = std::make_unique<Buffer>(obj, true, "HostPool.register: memory");
             auto span = std::span<std::byte>(static_cast<std::byte*>(held->data()), held->size());
             PyHostBuffer h{p.device.device.host_pool().register_memory(span)};
             h.registered = std::move(held);
             return h;
           }, "memory"_a,
           "Register a writable contiguous Python buffer for DMA; the result keeps it alive. "
           "ferry.Error('unsupported') where the backend cannot register memory.")
      .def("adopt", [](PyHostPool& p, std::uint64_t address, std::uint64_t nbytes) {
             return PyHostBuffer{p.device.device.host_pool().adopt(
                 reinterpret_cast<void*>(static_cast<std::uintptr_t>(address)), nbytes)};
           }, "address"_a, "nbytes"_a,
           "Adopt `nbytes` at `address`, host memory an engine already page-locked for this device "
           "(a pinned torch tensor's data_ptr()), as a HostBuffer that every pinned path copies "
           "by DMA directly. ferry never frees it and holds no reference to its owner: keep the "
           "memory alive and unchanged until each copy's point is reached. ferry.Error "
           "('invalid_argument') for a null address, 0 bytes, a wrapping range or (CUDA/HIP) "
           "memory that is not page-locked for the device; ('unsupported') where the backend "
           "cannot adopt host memory.")
      .def_prop_ro("pinned_bytes", [](const PyHostPool& p) { return p.device.device.host_pool().pinned_bytes(); });

  nb::class_<PyDevice>(m, "Device", "One device opened through one backend.")
      .def_static("open", [](ferry::Backend backend, int ordinal, int host_latency_us, bool record_events) {
                    ferry::DeviceOptions o;
                    o.backend = backend;
                    o.ordinal = ordinal;
                    o.host_latency_us = host_latency_us;
                    o.record_events = record_events;
                    nb::gil_scoped_release nogil;
                    return PyDevice{ferry::Device::open(o), ordinal};
                  }, "backend"_a = ferry::Backend::host, "ordinal"_a = 0, "host_latency_us"_a = -1,
                  "record_events"_a = true,
                  "Open a device. ferry.Error('unsupported') when the backend was not built or has no device.")
      .def_static("open_default", [] {
                    nb::gil_scoped_release nogil;
                    return PyDevice{ferry::Device::open_default(), 0};
                  }, "Open the best device present (GPUs first, the host backend last).")
      .def_static("count", &ferry::Device::count, "backend"_a, "Number of devices a backend sees.")
      .def_static("built_with", &ferry::Device::built_with, "backend"_a,
                  "Whether the backend was compiled into this build.")
      .def_prop_ro("backend", [](const PyDevice& d) { return d.device.backend(); })
      .def_prop_ro("ordinal", [](const PyDevice& d) { return d.ordinal; })
      .def_prop_ro("capabilities", [](const PyDevice& d) { return d.device.capabilities(); })
      .def("queue", [](const PyDevice& d, ferry::QueueRole role) { return d.device.queue(role); }, "role"_a,
           "The device's default queue of a role.")
      .def("create_queue", [](PyDevice& d, ferry::QueueRole role, const std::string& name, int priority) {
             return d.device.create_queue(role, name, priority);
           }, "role"_a, "name"_a = "", "priority"_a = 0)
      .def("adopt_queue", [](PyDevice& d, nb::handle stream, ferry::QueueRole role, const std::string& name) {
             std::uintptr_t handle = native_stream(stream);
             // PyTorch's default stream reports handle 0: on CUDA that is the legacy default
             // stream, which the backend adopts by its own name.
             if (handle == 0 && d.device.backend() == ferry::Backend::cuda) handle = 1;  // cudaStreamLegacy
             return d.adopt(handle, role, name.empty() ? std::string_view("adopted") : std::string_view(name));
           }, "stream"_a, "role"_a = ferry::QueueRole::compute, "name"_a = "", nb::keep_alive<0, 2>(),
           "Adopt an engine's stream (an int cudaStream_t/hipStream_t, an object with "
           "__cuda_stream__ such as torch.cuda.Stream). ferry never destroys it; keep it alive "
           "while ferry uses the queue. The same handle gives the same Queue.")
      .def("adopt_memory", [](PyDevice& d, std::uint64_t pointer, std::uint64_t size, const ferry::Queue& owner,
                              const ferry::TimelinePoint& ready_after, const std::string& tag, nb::object keep,
                              nb::object on_release) {
             if (!on_release.is_none() && !PyCallable_Check(on_release.ptr())) {
               invalid("Device.adopt_memory: on_release (a " + std::string(Py_TYPE(on_release.ptr())->tp_name) +
                       ") is not callable");
             }
             ferry::AdoptOptions o;
             o.ready_after = ready_after;
             o.tag = tag;
             PyDeviceBuffer b =
                 wrap(d.device.adopt_memory(ferry::NativeMemory{.pointer = pointer}, size, owner, std::move(o)), d);
             if (!keep.is_none()) b.s->keep.object = std::move(keep);
             if (!on_release.is_none()) b.s->on_release.object = std::move(on_release);
             return b;
           }, "pointer"_a, "size"_a, "owner"_a, "ready_after"_a = ferry::TimelinePoint{}, "tag"_a = "",
           "keep"_a = nb::none(), "on_release"_a = nb::none(),
           "Adopt an engine's memory (a host pointer on the host backend, a device pointer on "
           "CUDA/HIP) as a DeviceBuffer owned by `owner`. ferry never frees it; the engine keeps "
           "it allocated until the buffer's release point is reached. `keep` (optional) is held "
           "until the buffer is released and its handle and every DLPack export are gone: pass "
           "the object that owns the memory (a torch tensor) and its stream-ordered free on the "
           "owner then follows the release, which orders the owner after every ferry copy. "
           "`on_release` (optional, a callable) is called once, with the GIL, when the handle and "
           "every export are gone: with the release point (a TimelinePoint on the owner, empty "
           "once the device is closed), before `keep` is dropped. Memory reused on another queue "
           "after that point is never reused under a ferry copy or an owner's read before it.")
      .def("create_semaphore", [](PyDevice& d, std::uint64_t initial) { return d.device.create_semaphore(initial); },
           "initial"_a = 0)
      .def_prop_ro("pool", [](const PyDevice& d) { (void)d.device.pool(); return PyPool{d}; })
      .def_prop_ro("host_pool", [](const PyDevice& d) { (void)d.device.host_pool(); return PyHostPool{d}; })
      .def_prop_ro("host_waits", [](const PyDevice& d) { return d.device.host_waits(); })
      .def_prop_ro("is_open", [](const PyDevice& d) { return d.device.is_open(); })
      .def("close", [](PyDevice& d) {
             {
               std::lock_guard<std::mutex> lock(*d.mutex);
               d.adopted->clear();
             }
             nb::gil_scoped_release nogil;
             d.device.close();
           }, "Wait for all work, free everything, invalidate handles. Idempotent.")
      .def("__eq__", [](const PyDevice& a, const PyDevice& b) { return a.device == b.device; })
      .def("__repr__", [](const PyDevice& d) {
        if (!d.device.is_open()) return std::string("<ferry.Device closed>");
        return "<ferry.Device " + d.device.capabilities().name + " (" + std::string(ferry::to_string(d.device.backend())) + ")>";
      });

  nb::class_<PyUpload>(m, "Upload", "An upload's destination and the point it is ready at.")
      .def_ro("buffer", &PyUpload::buffer)
      .def_ro("ready", &PyUpload::ready);
  nb::class_<PyAdoptions>(m, "_Adoptions", "Engine ranges adopted together by one batched call.")
      .def("release", [](PyAdoptions& a) {
             nb::gil_scoped_release nogil;
             return a.release();
           }, "Release every range (stream-ordered on the owner, after ferry's copies into it) and "
           "return the last release point; a second call releases nothing and returns an empty point.")
      .def("__len__", [](const PyAdoptions& a) { return a.buffers.size(); });

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
                          std::uint32_t staging_chunks, bool staging, int staging_threads) {
             ferry::TransferOptions o;
             if (!executor.is_none()) o.executor = nb::cast<ferry::Queue>(executor);
             o.staging_chunk_bytes = staging_chunk_bytes;
             o.staging_chunks = staging_chunks;
             o.staging = staging;
             o.staging_threads = staging_threads;
             new (self) PyTransfer{dev, std::make_unique<ferry::Transfer>(dev.device, o)};
           }, "device"_a, "executor"_a = nb::none(), "staging_chunk_bytes"_a = 16ull << 20, "staging_chunks"_a = 4,
           "staging"_a = true, "staging_threads"_a = -1)
      .def_prop_ro("executor", [](PyTransfer& t) { return t.get().executor(); })
      .def("upload", [](PyTransfer& t, nb::handle source, const ferry::Queue& owner, nb::handle mode,
                        const std::string& tag, bool overlap, bool owner_waits, std::vector<ferry::TimelinePoint> wait,
                        std::vector<ferry::TimelinePoint> signal) {
             ferry::UploadOptions o = upload_options(mode, tag, overlap, owner_waits, std::move(wait), std::move(signal));
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
           }, "source"_a, "owner"_a, nb::kw_only(), "mode"_a = ferry::CopyMode::owner_owned, "tag"_a = "",
           "overlap"_a = false, "owner_waits"_a = true, "wait"_a = std::vector<ferry::TimelinePoint>{},
           "signal"_a = std::vector<ferry::TimelinePoint>{}, upload_doc.c_str())
      .def("upload_batch", [](PyTransfer& t, const std::vector<nb::object>& sources, const ferry::Queue& owner,
                              nb::handle mode, const std::string& tag, bool overlap, bool owner_waits,
                              std::vector<ferry::TimelinePoint> wait, std::vector<ferry::TimelinePoint> signal) {
             ferry::UploadOptions o = upload_options(mode, tag, overlap, owner_waits, std::move(wait), std::move(signal));
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
           }, "sources"_a, "owner"_a, nb::kw_only(), "mode"_a = ferry::CopyMode::owner_owned, "tag"_a = "",
           "overlap"_a = false, "owner_waits"_a = true, "wait"_a = std::vector<ferry::TimelinePoint>{},
           "signal"_a = std::vector<ferry::TimelinePoint>{},
           "Upload many contiguous buffers (empty ones allowed) in one call into one owner-owned "
           "allocation, staged through the pinned ring; the sources may be reused when it returns.")
      .def("_upload_batch_raw", [](PyTransfer& t, const std::vector<std::uint64_t>& addresses,
                                   const std::vector<std::uint64_t>& sizes, const ferry::Queue& owner, bool owner_waits,
                                   const std::string& tag) {
             std::vector<ferry::HostView> views = raw_views(addresses, sizes, "Transfer._upload_batch_raw");
             ferry::UploadOptions o;
             o.owner_waits = owner_waits;
             o.tag = tag;
             ferry::UploadBatch b;
             {
               nb::gil_scoped_release nogil;
               b = t.get().upload(std::span<const ferry::HostView>(views), owner, std::move(o));
             }
             return make_batch(std::move(b), t.device);
           }, "addresses"_a, "sizes"_a, "owner"_a, "owner_waits"_a = true, "tag"_a = "",
           "upload_batch from raw host addresses (ferry.torch's path; the caller keeps the memory alive "
           "during the call).")
      .def("upload_into", [](PyTransfer& t, nb::handle source, PyDeviceBuffer& destination, nb::object offsets,
                             bool owner_waits, std::vector<ferry::TimelinePoint> wait,
                             std::vector<ferry::TimelinePoint> signal, bool destination_unused,
                             std::uint64_t source_offset, nb::object size) {
             ferry::UploadOptions o = upload_options(nb::cast(ferry::CopyMode::preallocated), "", false, owner_waits,
                                                     std::move(wait), std::move(signal));
             o.destination_unused = destination_unused;
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
           "Copy into a caller-supplied destination: a HostBuffer (pinned: DMA from it; `offsets`, "
           "when given, is the one destination offset it goes to, the other bytes are kept; "
           "`source_offset` and `size` select a range of it, by default all of it), or a "
           "list of contiguous buffers placed at `offsets` (staged; none may be empty). The "
           "executor waits for the destination owner's work so far (only for its ready_after and "
           "ferry's earlier copies with destination_unused, the caller's guarantee that nothing "
           "used the buffer since its allocation: UploadOptions::destination_unused); the owner "
           "waits for the copy when owner_waits. Returns the point at which every byte is in place.")
      .def("_upload_into_raw", [](PyTransfer& t, const std::vector<std::uint64_t>& addresses,
                                  const std::vector<std::uint64_t>& sizes, PyDeviceBuffer& destination,
                                  const std::vector<std::uint64_t>& offsets, bool owner_waits,
                                  bool overwrite_padding, bool destination_unused) {
             std::vector<ferry::HostView> views = raw_views(addresses, sizes, "Transfer._upload_into_raw");
             ferry::UploadOptions o;
             o.mode = ferry::CopyMode::preallocated;
             o.owner_waits = owner_waits;
             o.overwrite_padding = overwrite_padding;
             o.destination_unused = destination_unused;
             ferry::TimelinePoint p;
             {
               nb::gil_scoped_release nogil;
               p = t.get().upload_into(std::span<const ferry::HostView>(views), destination.s->buffer,
                                       std::span<const std::uint64_t>(offsets), std::move(o));
             }
             destination.s->ready = p;
             return p;
           }, "addresses"_a, "sizes"_a, "destination"_a, "offsets"_a, "owner_waits"_a = true,
           "overwrite_padding"_a = false, "destination_unused"_a = false,
           "upload_into from raw host addresses (ferry.torch's path); overwrite_padding and "
           "destination_unused as in UploadOptions.")
      .def("_download_adopted_raw", [](PyTransfer& t, const std::vector<std::uint64_t>& pointers,
                                       const std::vector<std::uint64_t>& sizes, const ferry::Queue& owner,
                                       const ferry::TimelinePoint& ready_after, const PyHostBuffer& host,
                                       const std::vector<std::uint64_t>& host_offsets, const std::string& tag,
                                       bool owner_waits) {
             constexpr const char* fn = "Transfer._download_adopted_raw";
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
           }, "pointers"_a, "sizes"_a, "owner"_a, "ready_after"_a, "host"_a, "host_offsets"_a, "tag"_a = "",
           "owner_waits"_a = true,
           "For each range: adopt `sizes[i]` device bytes at `pointers[i]` (owned by `owner`, free for "
           "ferry after `ready_after`), download them to `host` at `host_offsets[i]`, and release "
           "the adoption; with `owner_waits` the owner is then ordered after the reads, without it "
           "the caller orders any reuse after the returned point. Returns the point at which every "
           "byte is in host memory (empty when every size is 0). ferry.torch's stash path.")
      .def("_upload_adopted_raw", [](PyTransfer& t, const std::vector<std::uint64_t>& pointers,
                                     const std::vector<std::uint64_t>& sizes, const ferry::Queue& owner,
                                     const ferry::TimelinePoint& ready_after, const PyHostBuffer& host,
                                     const std::vector<std::uint64_t>& host_offsets, const std::string& tag) {
             constexpr const char* fn = "Transfer._upload_adopted_raw";
             check_adopted_ranges(fn, pointers, sizes, host_offsets, host.buffer);
             ferry::Transfer& x = t.get();
             // Adopted as the executor's, like the stash's ranges, all before the one upload
             // call enqueues anything: the adoptions order the owner once, after the call's
             // copies, when they are released (PyAdoptions).
             PyAdoptions held;
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
                 ferry::UploadOptions o;
                 o.mode = ferry::CopyMode::preallocated;
                 o.owner_waits = false;
                 o.destination_unused = true;
                 last = x.upload_into(host.buffer, std::span<const std::uint64_t>(offsets),
                                      std::span<const ferry::DeviceBuffer>(held.buffers), std::move(o));
                 held.done = last;
               }
             }
             return std::make_pair(last, std::move(held));
           }, "pointers"_a, "sizes"_a, "owner"_a, "ready_after"_a, "host"_a, "host_offsets"_a, "tag"_a = "",
           "For each range: adopt `sizes[i]` device bytes at `pointers[i]` (owned by `owner`, unused "
           "since their allocation, free for ferry after `ready_after`) and upload `host`'s bytes at "
           "`host_offsets[i]` into them; the owner does not wait. Returns (the point at which every "
           "byte is in place, the adoptions): release them (Adoptions.release, or by dropping them) "
           "to order the owner after the copies. ferry.torch's stash-restore path.")
      .def("download", [](PyTransfer& t, PyDeviceBuffer& source, nb::handle destination, std::uint64_t offset,
                          std::vector<ferry::TimelinePoint> wait, std::vector<ferry::TimelinePoint> signal) -> nb::object {
             ferry::CallOptions o{std::move(wait), std::move(signal)};
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
      .def("_download_raw", [](PyTransfer& t, PyDeviceBuffer& source, const std::vector<std::uint64_t>& offsets,
                               const std::vector<std::uint64_t>& addresses, const std::vector<std::uint64_t>& sizes) {
             if (offsets.size() != addresses.size() || sizes.size() != addresses.size()) {
               invalid("Transfer._download_raw: offsets, addresses and sizes differ in count");
             }
             std::vector<ferry::DownloadView> views;
             for (std::size_t i = 0; i < offsets.size(); ++i) {
               views.push_back({offsets[i], reinterpret_cast<void*>(static_cast<std::uintptr_t>(addresses[i])), sizes[i]});
             }
             nb::gil_scoped_release nogil;
             t.get().download(source.s->buffer, std::span<const ferry::DownloadView>(views));
           }, "source"_a, "offsets"_a, "addresses"_a, "sizes"_a,
           "Batch download to raw host addresses (blocking; the caller keeps the memory alive).")
      .def("copy", [](PyTransfer& t, PyDeviceBuffer& source, PyDeviceBuffer& destination, std::uint64_t nbytes) {
             nb::gil_scoped_release nogil;
             return t.get().copy(source.s->buffer, destination.s->buffer, nbytes);
           }, "source"_a, "destination"_a, "nbytes"_a = 0, "Device-to-device copy (0 = all of source).")
      .def("synchronize", [](PyTransfer& t, double timeout) {
             nb::gil_scoped_release nogil;
             t.get().synchronize(seconds(timeout));
           }, "timeout"_a = 60.0, "Host wait for every copy enqueued so far (the GIL is released).")
      .def("close", [](PyTransfer& t) {
             std::unique_ptr<ferry::Transfer> x = std::move(t.t);
             nb::gil_scoped_release nogil;
             x.reset();
           }, "Wait for the in-flight copies and free the staging ring. Idempotent.");

  // ferry.torch's binding path and the state it shares with the Python path.
  nb::class_<PyTorchDestinations>(m, "_TorchDestinations",
      "The destinations of ferry.torch.to(mode='torch') for one target stream: PyTorch caching "
      "allocator blocks taken on an idle stream of ferry's, with the release point of each range "
      "ferry let go of that may still be in use on the target.")
      .def("__init__", [](PyTorchDestinations* self, nb::object raw_alloc, nb::object raw_delete,
                          std::uintptr_t stream, bool native, std::int64_t stream_id, std::int32_t device_index) {
             if (!PyCallable_Check(raw_alloc.ptr()) || !PyCallable_Check(raw_delete.ptr())) {
               invalid("_TorchDestinations: raw_alloc and raw_delete must be callables");
             }
             if (native && torch_glue().native == nullptr) {
               invalid("_TorchDestinations: native=True, but _torch_setup set no ferry._torch_native entry points");
             }
             auto s = std::make_shared<TorchDestinations>();
             s->native = native ? torch_glue().native : nullptr;
             s->stream_id = stream_id;
             s->device_index = device_index;
             s->raw_alloc.object = std::move(raw_alloc);
             s->raw_delete.object = std::move(raw_delete);
             s->stream = stream;
             new (self) PyTorchDestinations{std::move(s)};
           }, "raw_alloc"_a, "raw_delete"_a, "stream"_a, "native"_a = false, "stream_id"_a = 0,
           "device_index"_a = 0,
           "raw_alloc(nbytes, stream) -> pointer and raw_delete(pointer): the caching allocator's; "
           "stream: the idle stream's handle. native: take the blocks through the ferry._torch_native "
           "entry points that _torch_setup set instead, on the stream that stream_id and device_index "
           "(its torch.cuda.Stream's) name.")
      .def("allocate", [](PyTorchDestinations& d, std::uint64_t nbytes) {
             auto [ptr, wait] = d.s->allocate(nbytes);
             return std::make_pair(ptr, wait.empty() ? nb::none() : nb::cast(wait));
           }, "nbytes"_a,
           "(pointer, the point a writer waits for, or None when the range is unused).")
      .def("release", [](PyTorchDestinations& d, std::uint64_t pointer, std::uint64_t nbytes,
                         const ferry::TimelinePoint& point) { d.s->release(pointer, nbytes, point); },
           "pointer"_a, "nbytes"_a, "point"_a,
           "Record the range's release point and hand the block back to the caching allocator.")
      .def_prop_ro("pending", [](PyTorchDestinations& d) {
             std::lock_guard<std::mutex> lock(d.s->mutex);
             return d.s->freed.size();
           }, "Released ranges whose release point was not reached when last looked at.");
  m.def("_torch_to", [](PyTransfer& t, nb::handle capsule, nb::sequence leaves, PyTorchDestinations* d,
                        int device_index, nb::handle target_stream, nb::handle wait_stream) {
          std::vector<nb::handle> borrowed;
          borrowed.reserve(nb::len(leaves));
          for (nb::handle leaf : leaves) borrowed.push_back(leaf);
          const auto handle = [](nb::handle st) {
            return st.is_none() ? std::nullopt : std::optional<std::uintptr_t>(native_stream(st));
          };
          return torch_to(t, capsule, borrowed, d == nullptr ? nullptr : d->s, device_index, handle(target_stream),
                          handle(wait_stream));
        }, "transfer"_a, "capsule"_a, "leaves"_a, "destinations"_a.none(), "device_index"_a,
        "target_stream"_a.none(), "wait_stream"_a.none(),
        "ferry.torch.to's one-call path: the leaves (CPU tensors) in one transfer, through the tensor "
        "type's DLPack exchange capsule. destinations None: ferry's host backend, waited for. "
        "target_stream / wait_stream None: the current stream. Returns the tensors, or None when a "
        "leaf is not a plain contiguous CPU tensor (the Python path then takes the call).");
  m.def("_torch_setup", [](nb::object native, nb::object exchange, nb::object tensor_type, nb::object stream_type) {
          TorchGlue& g = torch_glue();
          const ferry_torch_native::Api* api = nullptr;
          if (!native.is_none()) {
            api = static_cast<const ferry_torch_native::Api*>(
                PyCapsule_GetPointer(native.ptr(), ferry_torch_native::kTorchNativeApiName));
            if (api == nullptr) throw nb::python_error();
            if (api->version != ferry_torch_native::kTorchNativeApiVersion) {
              throw Error(ErrorCode::unsupported, "ferry.torch: ferry._torch_native's entry points are version " +
                                                      std::to_string(api->version) + ", not " +
                                                      std::to_string(ferry_torch_native::kTorchNativeApiVersion));
            }
          }
          g.native = api;
          g.native_capsule = std::move(native);
          g.exchange = std::move(exchange);
          g.tensor_type = std::move(tensor_type);
          g.stream_type = std::move(stream_type);
          g.engines.clear();
        }, "native"_a.none(), "exchange"_a.none(), "tensor_type"_a, "stream_type"_a.none(),
        "Set ferry.torch.to's glue: ferry._torch_native's TO_API capsule (None: DLPack and the caching "
        "allocator's Python functions), torch.Tensor's DLPack exchange capsule, torch.Tensor and "
        "torch.cuda.Stream. Forgets the registered engines.");
  m.def("_torch_register", [](int device_index, nb::object transfer, std::uintptr_t target, PyTorchDestinations& d) {
          auto& engines = torch_glue().engines;
          auto it = engines.find(device_index);
          if (it == engines.end()) it = engines.emplace(device_index, TorchGlue::Engine{transfer, {}}).first;
          if (it->second.transfer.is(transfer)) it->second.destinations.emplace(target, d.s);
        }, "device_index"_a, "transfer"_a, "target"_a, "destinations"_a,
        "Let _torch_to_fast take one-tensor calls to `target` (a stream handle) on the device with this "
        "Transfer and destinations; the first Transfer registered for a device stays its one.");
  m.def("_torch_forget", []() { torch_glue().engines.clear(); },
        "Forget the registered engines (they are closing).");
  m.def("_torch_to_fast", [](nb::handle obj, nb::handle target_stream, nb::handle wait_stream,
                             int device_index) -> nb::object {
          TorchGlue& g = torch_glue();
          if (!g.tensor_type.is_valid() || !g.exchange.is_valid() ||
              reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr())) != g.tensor_type.ptr()) {
            return nb::none();
          }
          std::uintptr_t current = 0;
          const bool need_current = target_stream.is_none() || wait_stream.is_none();
          if (g.native != nullptr) {
            std::int32_t index = 0;
            if (g.native->current(&index, &current) != 0) throw nb::python_error();
            device_index = index;
          } else if (need_current) {
            void* c = nullptr;
            if (exchange_api(g.exchange).current_work_stream(dl::kCUDA, device_index, &c) != 0) {
              throw nb::python_error();
            }
            current = reinterpret_cast<std::uintptr_t>(c);
          }
          auto engine = g.engines.find(device_index);
          if (engine == g.engines.end()) return nb::none();
          // Streams other than torch.cuda.Streams of this device take the general path, which
          // checks them and names what is wrong.
          const auto handle = [&](nb::handle st, std::uintptr_t& out) {
            if (st.is_none()) {
              out = current;
              return true;
            }
            if (!g.stream_type.is_valid() || PyObject_IsInstance(st.ptr(), g.stream_type.ptr()) != 1 ||
                nb::cast<int>(st.attr("device_index")) != device_index) {
              PyErr_Clear();
              return false;
            }
            out = nb::cast<std::uintptr_t>(st.attr("cuda_stream"));
            return true;
          };
          std::uintptr_t target = 0;
          std::uintptr_t waiter = 0;
          if (!handle(target_stream, target) || !handle(wait_stream, waiter)) return nb::none();
          auto dests = engine->second.destinations.find(target);
          if (dests == engine->second.destinations.end()) return nb::none();
          // Owned for the call: another thread may forget the engines while this one copies.
          const nb::object transfer = engine->second.transfer;
          const std::shared_ptr<TorchDestinations> d = dests->second;
          PyTransfer& t = nb::cast<PyTransfer&>(transfer);
          const nb::handle leaves[1] = {obj};
          nb::object out = torch_to(t, g.exchange, leaves, d, device_index, target, waiter);
          if (out.is_none()) return out;
          return nb::borrow(PyList_GET_ITEM(out.ptr(), 0));
        }, "obj"_a, "target_stream"_a.none(), "wait_stream"_a.none(), "device_index"_a,
        "ferry.torch.to of one torch.Tensor to the current CUDA device in one call, with an engine and "
        "destinations registered for the target stream; device_index: the current device's (read "
        "natively, and ignored, where _torch_setup set ferry._torch_native). None: not such a call "
        "(the caller takes the general path).");
  m.def("_torch_hold", [](const ferry::TimelinePoint& point, std::vector<nb::object> tensors) {
          if (!tensors.empty()) {
            torch_held().hold(point, tensors.size(), [&](std::size_t i) -> nb::handle { return tensors[i]; });
          }
        }, "point"_a, "tensors"_a, "Hold pinned sources until `point` is reached.");
  m.def("_torch_release_reached", []() { torch_held().release_reached(); },
        "Let go of the held sources whose copies completed.");
  m.def("_torch_held_count", []() { return torch_held().count(); },
        "How many pinned sources are held for copies not known to be complete.");
  m.def("_torch_held_clear", []() { torch_held().clear(); },
        "Let go of every held source (after every copy completed).");
#ifdef FERRY_TORCH_PHASES
  m.def("_torch_phases", []() {
          TorchPhases& p = torch_phases();
          nb::list out;
          for (int i = 0; i < TorchPhases::kCount; ++i) {
            if (p.calls[i] > 0) out.append(nb::make_tuple(p.names[i], p.ns[i] / p.calls[i], p.calls[i]));
          }
          p = TorchPhases{};
          return out;
        }, "[(part, mean ns, calls)] of the binding path since the last read, then reset (profiling builds).");
#endif
  m.attr("_TORCH_DMA_MIN_BYTES") = kTorchDmaMinBytes;
  m.attr("_TORCH_ALIGNMENT") = kTorchAlignment;

  m.def("backend_name", [](ferry::Backend b) { return std::string(ferry::to_string(b)); }, "backend"_a);
  m.def("parse_backend", [](const std::string& name) { return ferry::parse_backend(name); }, "name"_a);
}
