// SPDX-License-Identifier: MIT
//
// ferry._torch_native: PyTorch's half of ferry.torch, in C++ against libtorch, for the
// PyTorch that the package was built with: the per-tensor work of ferry.torch.stash and
// Stash.restore, and the C entry points (native_api.h) through which ferry._ferry's torch glue
// reads each leaf of `to`, takes each destination and hands each result back.
//
// A stash of N tensors checks, groups, allocates and re-points N tensors, and a `to` of one
// tensor reads it, allocates and makes a tensor: done with PyTorch's Python API, each step
// costs interpreter-level calls of a few microseconds each. Here each is a direct call on the
// TensorImpl or on PyTorch's allocators. The module holds no ferry state and makes no copy.
//
// The module is built against one PyTorch's C++ ABI: FERRY_TORCH_VERSION, the torch.__version__
// that the build found (meson defines it). ferry.torch refuses to load under another torch.
//
// Errors are raised as ferry.Error, and running out of device memory as torch.OutOfMemoryError
// (set_error hands both classes in before any other call).

#include <Python.h>

#include <ATen/core/Tensor.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#if FERRY_TORCH_CUDA_ALLOCATOR
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#endif
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "native_api.h"

namespace {

PyObject* g_error = nullptr;  // ferry.Error
PyObject* g_out_of_memory = nullptr;  // torch.OutOfMemoryError, as PyTorch's own calls raise it

// Raises ferry.Error(code, message); returns nullptr for the caller to return.
PyObject* fail(const char* code, const std::string& message) {
  if (g_error == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, message.c_str());
    return nullptr;
  }
  PyObject* e = PyObject_CallFunction(g_error, "ss", code, message.c_str());
  if (e != nullptr) {
    PyErr_SetObject(g_error, e);
    Py_DECREF(e);
  }
  return nullptr;
}

// A PyTorch error inside a call becomes ferry.Error with PyTorch's message, except running
// out of device memory, which raises torch.OutOfMemoryError as PyTorch's own allocations do
// (a caller's out-of-memory handling catches it either way).
PyObject* raise_current(const char* fn) {
  try {
    throw;
  } catch (const c10::OutOfMemoryError& e) {
    if (g_out_of_memory == nullptr) return fail("out_of_memory", std::string(fn) + ": " + e.what_without_backtrace());
    PyErr_SetString(g_out_of_memory, (std::string(fn) + ": " + e.what_without_backtrace()).c_str());
    return nullptr;
  } catch (const c10::Error& e) {
    return fail("backend_error", std::string(fn) + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return fail("internal_error", std::string(fn) + ": " + e.what());
  }
}

// One stashed tensor: the Python object (a strong reference, so its identity survives) and
// its layout in its storage when stashed.
struct Entry {
  PyObject* obj;
  c10::ScalarType dtype;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t offset;  // elements
};

// The tensors that share one storage, the storage itself, and where its bytes go in the host
// copy. The storage object stays the same across a stash and its restore: only its memory is
// let go of and replaced, so whatever else holds it (a view that was not passed, an autograd
// saved tensor, a .data alias) follows it, as with resize_(0) and resize_ back.
struct Group {
  std::vector<Entry> entries;
  c10::Storage storage;
  c10::DispatchKeySet keys;  // the device tensors' keys, for setting them back into it
  uint64_t key;     // the storage's data pointer when stashed
  int64_t nbytes;
  int64_t host_offset;
  c10::DataPtr block;  // the restore's device memory, between restore_alloc and repoint_blocks
};

struct Plan {
  std::vector<Group> groups;
  int device = -1;
  int64_t total = 0;

  ~Plan() {
    for (Group& g : groups)
      for (Entry& e : g.entries) Py_XDECREF(e.obj);
  }
};

constexpr const char* kPlanName = "ferry._torch_native.Plan";

void plan_destructor(PyObject* capsule) {
  delete static_cast<Plan*>(PyCapsule_GetPointer(capsule, kPlanName));
}

Plan* plan_of(PyObject* capsule) {
  return static_cast<Plan*>(PyCapsule_GetPointer(capsule, kPlanName));
}

std::string device_name(const at::Tensor& t) { return t.device().str(); }

// The tensor's layout as Python prints it ("torch.sparse_coo"), as ferry.torch.to's message
// names it.
std::string layout_name(PyObject* tensor) {
  std::string name = "?";
  if (PyObject* layout = PyObject_GetAttrString(tensor, "layout")) {
    if (PyObject* text = PyObject_Str(layout)) {
      if (const char* c = PyUnicode_AsUTF8(text)) name = c;
      Py_DECREF(text);
    }
    Py_DECREF(layout);
  }
  PyErr_Clear();
  return name;
}

// Points the variable `obj` at `storage` (of `keys`) as `e`'s layout, `base` bytes in: a
// fresh TensorImpl over the storage, set as the variable's data, so the variable keeps its
// identity, autograd metadata and Python attributes.
void set_into(const Entry& e, const c10::Storage& storage, c10::DispatchKeySet keys, int64_t base) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(storage), keys,
                                                    caffe2::TypeMeta::fromScalarType(e.dtype));
  impl->set_sizes_and_strides(e.sizes, e.strides, base / static_cast<int64_t>(c10::elementSize(e.dtype)) + e.offset);
  at::Tensor data(std::move(impl));
  THPVariable_Unpack(e.obj).set_data(data);
}

// stash_plan(items, alignment) -> (plan, device index, keys, nbytes, host offsets, total)
// Checks every item as ferry.torch.stash documents, groups them by storage (each storage's
// bytes at an `alignment`-aligned offset of the host copy) and refuses a storage that anything
// but the items holds. Nothing is changed.
PyObject* stash_plan(PyObject*, PyObject* args) {
  PyObject* items = nullptr;
  long long alignment = 0;
  if (!PyArg_ParseTuple(args, "OL", &items, &alignment)) return nullptr;
  constexpr const char* fn = "ferry.torch.stash";
  PyObject* seq = PySequence_Fast(items, "ferry.torch.stash: tensors must be a tensor or a sequence of them");
  if (seq == nullptr) return nullptr;
  auto plan = std::make_unique<Plan>();
  try {
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject** objs = PySequence_Fast_ITEMS(seq);
    std::unordered_set<PyObject*> seen;
    std::unordered_map<const c10::StorageImpl*, std::size_t> index;  // storage -> group
    seen.reserve(static_cast<std::size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* o = objs[i];
      if (!THPVariable_Check(o)) {
        Py_DECREF(seq);
        return fail("invalid_argument", std::string(fn) + ": item " + std::to_string(i) + " is a " +
                                             Py_TYPE(o)->tp_name + ", not a tensor");
      }
      const at::Tensor& t = THPVariable_Unpack(o);
      if (t.is_nested() || t.layout() != c10::kStrided || t.is_quantized()) {
        std::string what = t.is_nested() ? "nested" : t.layout() != c10::kStrided ? layout_name(o) : "quantized";
        Py_DECREF(seq);
        return fail("unsupported", std::string(fn) + ": tensor " + std::to_string(i) +
                                        " is not a plain strided tensor (" + what + ")");
      }
      if (!t.is_cuda()) {
        Py_DECREF(seq);
        return fail("invalid_argument", std::string(fn) + ": tensor " + std::to_string(i) + " is on " +
                                             device_name(t) +
                                             ", not a CUDA device (a stashed tensor is a CPU tensor until "
                                             "its stash is restored)");
      }
      const int d = t.get_device();
      if (plan->device < 0) {
        plan->device = d;
      } else if (d != plan->device) {
        Py_DECREF(seq);
        return fail("invalid_argument", std::string(fn) + ": tensor " + std::to_string(i) + " is on " +
                                             device_name(t) + ", the others on cuda:" +
                                             std::to_string(plan->device) + ": one stash holds one device's tensors");
      }
      if (!seen.insert(o).second) continue;
      const c10::Storage& storage = t.storage();
      // A tensor reaching past its storage's bytes is a view of a storage stashed already
      // (empty until its stash is restored).
      int64_t extent = t.numel() == 0 ? 0 : 1;
      for (int64_t k = 0; k < t.dim(); ++k) extent += (t.size(k) - 1) * t.stride(k);
      const int64_t need = t.numel() == 0 ? 0 : (t.storage_offset() + extent) * static_cast<int64_t>(t.element_size());
      if (need > static_cast<int64_t>(storage.nbytes())) {
        Py_DECREF(seq);
        return fail("invalid_argument", std::string(fn) + ": tensor " + std::to_string(i) + " needs " +
                                             std::to_string(need) + " bytes of its storage, which has " +
                                             std::to_string(storage.nbytes()) +
                                             " (a view of a storage that is stashed: restore that stash first)");
      }
      const c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
      auto [it, fresh] = index.try_emplace(impl, plan->groups.size());
      if (fresh) {
        Group g;
        g.storage = storage;
        g.keys = t.key_set();
        g.key = reinterpret_cast<uint64_t>(storage.data());
        g.nbytes = static_cast<int64_t>(storage.nbytes());
        plan->total = (plan->total + alignment - 1) / alignment * alignment;
        g.host_offset = plan->total;
        plan->total += g.nbytes;
        plan->groups.push_back(std::move(g));
      }
      Py_INCREF(o);
      plan->groups[it->second].entries.push_back(
          Entry{o, t.scalar_type(), t.sizes().vec(), t.strides().vec(), t.storage_offset()});
    }
  } catch (...) {
    Py_DECREF(seq);
    return raise_current(fn);
  }
  Py_DECREF(seq);
  if (plan->groups.empty()) return fail("invalid_argument", std::string(fn) + ": no tensors to stash");
  const std::size_t m = plan->groups.size();
  PyObject* keys = PyList_New(static_cast<Py_ssize_t>(m));
  PyObject* sizes = PyList_New(static_cast<Py_ssize_t>(m));
  PyObject* offsets = PyList_New(static_cast<Py_ssize_t>(m));
  if (keys == nullptr || sizes == nullptr || offsets == nullptr) {
    Py_XDECREF(keys);
    Py_XDECREF(sizes);
    Py_XDECREF(offsets);
    return nullptr;
  }
  for (std::size_t k = 0; k < m; ++k) {
    const Group& g = plan->groups[k];
    PyList_SET_ITEM(keys, static_cast<Py_ssize_t>(k), PyLong_FromUnsignedLongLong(g.key));
    PyList_SET_ITEM(sizes, static_cast<Py_ssize_t>(k), PyLong_FromLongLong(g.nbytes));
    PyList_SET_ITEM(offsets, static_cast<Py_ssize_t>(k), PyLong_FromLongLong(g.host_offset));
  }
  const int device = plan->device;
  const long long total = plan->total;
  PyObject* capsule = PyCapsule_New(plan.get(), kPlanName, plan_destructor);
  if (capsule == nullptr) {
    Py_DECREF(keys);
    Py_DECREF(sizes);
    Py_DECREF(offsets);
    return nullptr;
  }
  plan.release();
  return Py_BuildValue("(NiNNNL)", capsule, device, keys, sizes, offsets, total);
}

// Parses (plan, stream_id, device_index, device_type): the plan, and the stream in `stream`;
// nullptr with a Python error set when they are not.
Plan* plan_and_stream(PyObject* args, const char* fn, std::optional<c10::Stream>& stream) {
  PyObject* capsule = nullptr;
  long long id = 0;
  int index = 0, type = 0;
  if (!PyArg_ParseTuple(args, "OLii", &capsule, &id, &index, &type)) return nullptr;
  Plan* plan = plan_of(capsule);
  if (plan == nullptr) return nullptr;
  try {
    stream.emplace(c10::Stream::unpack3(id, static_cast<c10::DeviceIndex>(index), static_cast<c10::DeviceType>(type)));
  } catch (...) {
    raise_current(fn);
    return nullptr;
  }
  return plan;
}

// record_streams(plan, stream_id, device_index, device_type): each storage's use recorded on
// that stream (Tensor.record_stream), so the caching allocator hands its block out again only
// once the stream's work at the free has completed.
PyObject* record_streams(PyObject*, PyObject* args) {
  std::optional<c10::Stream> s;
  Plan* plan = plan_and_stream(args, "ferry.torch.stash", s);
  if (plan == nullptr) return nullptr;
  try {
    for (const Group& g : plan->groups) THPVariable_Unpack(g.entries.front().obj).record_stream(*s);
  } catch (...) {
    return raise_current("ferry.torch.stash");
  }
  Py_RETURN_NONE;
}

// repoint_host(plan, whole): every tensor becomes a CPU tensor over `whole` (a uint8 tensor
// that starts its storage), its group's bytes at the group's host offset, in its own layout;
// then each device storage lets go of its memory (to PyTorch's caching allocator, as
// resize_(0) does), whoever else still holds it. Such a holder sees an empty storage until
// the restore.
PyObject* repoint_host(PyObject*, PyObject* args) {
  PyObject* capsule = nullptr;
  PyObject* whole = nullptr;
  if (!PyArg_ParseTuple(args, "OO", &capsule, &whole)) return nullptr;
  Plan* plan = plan_of(capsule);
  if (plan == nullptr) return nullptr;
  if (!THPVariable_Check(whole)) return fail("internal_error", "ferry.torch.stash: the host copy is not a tensor");
  try {
    const at::Tensor& w = THPVariable_Unpack(whole);
    const c10::Storage& storage = w.storage();
    for (Group& g : plan->groups) {
      for (const Entry& e : g.entries) set_into(e, storage, w.key_set(), g.host_offset);
      c10::StorageImpl* impl = g.storage.unsafeGetStorageImpl();
      impl->set_data_ptr_noswap(c10::DataPtr(nullptr, g.storage.device()));
      impl->set_nbytes(0);
    }
  } catch (...) {
    return raise_current("ferry.torch.stash");
  }
  Py_RETURN_NONE;
}

// restore_alloc(plan, stream_id, device_index, device_type) -> data pointers
// Fresh device memory for each group's storage from PyTorch's caching allocator on that
// stream. The blocks stay in the plan until repoint_blocks or drop_blocks.
PyObject* restore_alloc(PyObject*, PyObject* args) {
  std::optional<c10::Stream> stream;
  Plan* plan = plan_and_stream(args, "Stash.restore", stream);
  if (plan == nullptr) return nullptr;
  PyObject* ptrs = PyList_New(static_cast<Py_ssize_t>(plan->groups.size()));
  if (ptrs == nullptr) return nullptr;
  try {
    const c10::Stream s = *stream;
    c10::StreamGuard guard(s);
    c10::Allocator* allocator = c10::GetAllocator(s.device_type());
    for (std::size_t k = 0; k < plan->groups.size(); ++k) {
      Group& g = plan->groups[k];
      g.block = allocator->allocate(static_cast<std::size_t>(g.nbytes));
      PyList_SET_ITEM(ptrs, static_cast<Py_ssize_t>(k),
                      PyLong_FromUnsignedLongLong(reinterpret_cast<uint64_t>(g.block.get())));
    }
  } catch (...) {
    Py_DECREF(ptrs);
    for (Group& g : plan->groups) g.block.clear();
    return raise_current("Stash.restore");
  }
  return ptrs;
}

// repoint_blocks(plan): each group's storage takes its block, and every stashed tensor points
// at the storage again, in its own layout: the tensors, and whatever else held the storage,
// share it as before the stash.
PyObject* repoint_blocks(PyObject*, PyObject* capsule) {
  Plan* plan = plan_of(capsule);
  if (plan == nullptr) return nullptr;
  try {
    for (Group& g : plan->groups) {
      if (!g.block && g.nbytes > 0) return fail("internal_error", "Stash.restore: a group has no block");
      c10::StorageImpl* impl = g.storage.unsafeGetStorageImpl();
      impl->set_data_ptr_noswap(std::move(g.block));
      impl->set_nbytes(static_cast<std::size_t>(g.nbytes));
      for (const Entry& e : g.entries) set_into(e, g.storage, g.keys, 0);
      g.block = c10::DataPtr();
    }
  } catch (...) {
    return raise_current("Stash.restore");
  }
  Py_RETURN_NONE;
}

// drop_blocks(plan): the plan lets go of the blocks (a restore that failed before its copy).
PyObject* drop_blocks(PyObject*, PyObject* capsule) {
  Plan* plan = plan_of(capsule);
  if (plan == nullptr) return nullptr;
  for (Group& g : plan->groups) g.block = c10::DataPtr();
  Py_RETURN_NONE;
}

// ---------------------------------------------------------------------------------------------
// ferry.torch.to's entry points (torch_native_api.h)

// PyTorch's pinned-memory allocator for CUDA (its caching host allocator, which only hands out
// page-locked memory), or nullptr where this torch has none. Asked once: the allocator is a
// process-wide object.
const c10::Allocator* torch_pinned_allocator() {
  static const c10::Allocator* const allocator = []() -> const c10::Allocator* {
    try {
      return at::detail::getCUDAHooks().getPinnedMemoryAllocator();
    } catch (...) {
      return nullptr;
    }
  }();
  return allocator;
}

int to_read(PyObject* obj, ferry_torch_native::Leaf* out) {
  if (!THPVariable_Check(obj)) return 0;
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (!t.defined() || t.device().type() != c10::DeviceType::CPU || t.layout() != c10::kStrided) return 0;
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  // A Python dispatch mode or subclass, a functional or nested wrapper (no storage), and the
  // bits a byte copy would lose are refused: ferry.torch converts or names them.
  if (impl->is_python_dispatch() || !impl->has_storage() || t.is_nested() || t.requires_grad() || t.is_conj() ||
      t.is_neg() || c10::isQIntType(t.scalar_type()) || !t.is_contiguous()) {
    return 0;
  }
  out->data = t.const_data_ptr();
  out->nbytes = static_cast<std::uint64_t>(t.numel()) * t.element_size();
  out->shape = t.sizes().data();
  out->ndim = static_cast<std::int32_t>(t.dim());
  out->scalar_type = static_cast<std::int32_t>(t.scalar_type());
  const c10::Allocator* pinned = torch_pinned_allocator();
  out->pinned_by_torch = pinned != nullptr && impl->storage().unsafeGetStorageImpl()->allocator() == pinned ? 1 : 0;
  return 1;
}

int to_current(std::int32_t* device_index, std::uintptr_t* stream) {
  try {
    const c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
    const c10::Device d = impl.getDevice();
    *device_index = d.index();
    *stream = reinterpret_cast<std::uintptr_t>(impl.getStream(d).native_handle());
    return 0;
  } catch (...) {
    raise_current("ferry.torch.to");
    return -1;
  }
}

// The caching allocator's generic entry point takes the current stream of the current device,
// which a guard sets and restores around it. Where this module is built against torch's CUDA
// allocator, its stream-taking entry point needs neither when the stream's device is current
// (ferry.torch.to's own case): the guard's device and stream exchanges cost more host time
// than the allocation.
int to_idle_stream(std::int32_t device_index, std::int64_t* stream_id) {
  try {
    const c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
    *stream_id = impl.getStreamFromGlobalPool(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_index)),
                                              false)
                     .id();
    return 0;
  } catch (...) {
    raise_current("ferry.torch.to");
    return -1;
  }
}

std::uint64_t to_allocate(std::uint64_t nbytes, std::int64_t stream_id, std::int32_t device_index) {
  try {
    const auto device = static_cast<c10::DeviceIndex>(device_index);
    void* p = nullptr;
    if (device_index < 0) {
      p = c10::GetAllocator(c10::DeviceType::CPU)->raw_allocate(nbytes);
    } else
#if FERRY_TORCH_CUDA_ALLOCATOR
    if (c10::cuda::current_device() == device) {
      const c10::cuda::CUDAStream s = c10::cuda::CUDAStream::unpack3(stream_id, device, c10::DeviceType::CUDA);
      p = c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(nbytes, s.stream());
    } else
#endif
    {
      const c10::Stream s = c10::Stream::unpack3(stream_id, device, c10::DeviceType::CUDA);
      c10::StreamGuard guard(s);
      p = c10::GetAllocator(c10::DeviceType::CUDA)->raw_allocate(nbytes);
    }
    if (p == nullptr) {
      fail("out_of_memory", "ferry.torch.to: PyTorch's caching allocator returned no memory for " +
                                std::to_string(nbytes) + " bytes");
      return 0;
    }
    return reinterpret_cast<std::uint64_t>(p);
  } catch (...) {
    raise_current("ferry.torch.to");
    return 0;
  }
}

void to_free(std::uint64_t pointer, std::int32_t device_index) {
  try {
    c10::GetAllocator(device_index < 0 ? c10::DeviceType::CPU : c10::DeviceType::CUDA)
        ->raw_deallocate(reinterpret_cast<void*>(pointer));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry.torch: handing a block back to PyTorch's caching allocator failed: %s\n", e.what());
  }
}

PyObject* to_wrap(std::uint64_t pointer, std::int32_t device_index, const ferry_torch_native::Leaf* like,
                  void* context, void (*deleter)(void*)) {
  const bool cpu = device_index < 0;
  const c10::Device device = cpu ? c10::Device(c10::DeviceType::CPU)
                                 : c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_index));
  const auto dtype = static_cast<c10::ScalarType>(like->scalar_type);
  c10::DataPtr data(reinterpret_cast<void*>(pointer), context, deleter, device);
  try {
    c10::Storage storage(c10::Storage::use_byte_size_t(), static_cast<int64_t>(like->nbytes), std::move(data),
                         nullptr, false);
    auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(cpu ? c10::DispatchKey::CPU : c10::DispatchKey::CUDA),
                                                      caffe2::TypeMeta::fromScalarType(dtype));
    impl->set_sizes_contiguous(c10::IntArrayRef(like->shape, static_cast<std::size_t>(like->ndim)));
    return THPVariable_Wrap(at::Tensor(std::move(impl)));
  } catch (...) {
    // `data`, or the storage that took it, has called the deleter on the way out.
    raise_current("ferry.torch.to");
    return nullptr;
  }
}

const ferry_torch_native::Api kToApi{ferry_torch_native::kTorchNativeApiVersion, to_read, to_current, to_idle_stream,
                                     to_allocate, to_free, to_wrap};

PyObject* set_error(PyObject*, PyObject* args) {
  PyObject* error = nullptr;
  PyObject* oom = nullptr;
  if (!PyArg_ParseTuple(args, "OO", &error, &oom)) return nullptr;
  Py_INCREF(error);
  Py_XSETREF(g_error, error);
  Py_INCREF(oom);
  Py_XSETREF(g_out_of_memory, oom);
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"set_error", set_error, METH_VARARGS,
     "set_error(error, out_of_memory): the classes errors are raised as (ferry.Error, torch.OutOfMemoryError)."},
    {"stash_plan", stash_plan, METH_VARARGS,
     "stash_plan(items, alignment) -> (plan, device, keys, nbytes, host_offsets, total)"},
    {"record_streams", record_streams, METH_VARARGS, "record_streams(plan, stream_id, device_index, device_type)"},
    {"repoint_host", repoint_host, METH_VARARGS, "repoint_host(plan, whole)"},
    {"restore_alloc", restore_alloc, METH_VARARGS,
     "restore_alloc(plan, stream_id, device_index, device_type) -> data pointers"},
    {"repoint_blocks", repoint_blocks, METH_O, "repoint_blocks(plan)"},
    {"drop_blocks", drop_blocks, METH_O, "drop_blocks(plan)"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_torch_native",
    "PyTorch's half of ferry.torch, against libtorch's C++ API (python/src/torch/native.cpp).", -1, methods,
    nullptr, nullptr, nullptr, nullptr,
};

}  // namespace

PyMODINIT_FUNC PyInit__torch_native() {
  PyObject* m = PyModule_Create(&module);
  if (m == nullptr) return nullptr;
  PyObject* api = PyCapsule_New(const_cast<ferry_torch_native::Api*>(&kToApi), ferry_torch_native::kTorchNativeApiName,
                                nullptr);
  if (api == nullptr || PyModule_AddObject(m, "TO_API", api) != 0) {
    Py_XDECREF(api);
    Py_DECREF(m);
    return nullptr;
  }
  if (PyModule_AddStringConstant(m, "TORCH_VERSION", FERRY_TORCH_VERSION) != 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
