// SPDX-License-Identifier: MIT
//
// The C entry points that ferry._torch_native hands to ferry._ferry's torch glue, in a capsule
// named kTorchNativeApiName. The two modules are built against different C++ libraries'
// headers (libtorch's and ferry's), so only C types cross between them. A device index of -1
// names the CPU.
#pragma once

#include <Python.h>

#include <cstdint>

namespace ferry_torch_native {

inline constexpr const char* kTorchNativeApiName = "ferry._torch_native.to_api";
inline constexpr std::uint32_t kTorchNativeApiVersion = 3;

/// A plain CPU tensor as `read` found it. `shape` points into the tensor: valid while the
/// tensor lives and keeps its shape.
struct Leaf {
  const void* data;
  std::uint64_t nbytes;
  const std::int64_t* shape;
  std::int32_t ndim;
  std::int32_t scalar_type;  ///< c10::ScalarType
  /// 1 when PyTorch's pinned-memory allocator for CUDA allocated the tensor's storage (then
  /// the whole storage is page-locked for as long as it lives), 0 otherwise.
  std::int32_t pinned_by_torch;
};

struct Api {
  std::uint32_t version;  ///< kTorchNativeApiVersion
  /// With the GIL: 1 and `out` filled when `obj` is a torch.Tensor (or a subclass) on the CPU,
  /// strided, contiguous, with storage, not requiring grad, without conjugate or negative bit,
  /// not quantized, nested or under a Python dispatch mode; 0 otherwise, with no error set.
  int (*read)(PyObject* obj, Leaf* out);
  /// With the GIL: the current GPU device's index and the native handle of its current stream
  /// (0 for the legacy default stream). 0 on success; -1 with a Python error set.
  int (*current)(std::int32_t* device_index, std::uintptr_t* stream);
  /// With the GIL: a stream of PyTorch's pool on the device, as torch.cuda.Stream(device)
  /// takes one, named as torch.cuda.Stream.stream_id does. 0 on success; -1 with a Python error.
  int (*idle_stream)(std::int32_t device_index, std::int64_t* stream_id);
  /// With the GIL: `nbytes` of memory from PyTorch's caching allocator on the stream that
  /// (stream_id, device_index) name, or from its CPU allocator (device_index -1, stream_id
  /// ignored); 0 with a Python error set (torch.OutOfMemoryError when it ran out).
  std::uint64_t (*allocate)(std::uint64_t nbytes, std::int64_t stream_id, std::int32_t device_index);
  /// From any thread, with or without the GIL: a block of `allocate` back to its allocator.
  /// It cannot fail to the caller; a failure is written to stderr.
  void (*free)(std::uint64_t pointer, std::int32_t device_index);
  /// With the GIL: a new contiguous tensor of `like`'s dtype and shape over the memory at
  /// `pointer` on `device_index`, whose storage calls deleter(context) once (when `deleter` is
  /// set), from whichever thread lets go of it last. nullptr with a Python error set, the
  /// deleter then called.
  PyObject* (*wrap)(std::uint64_t pointer, std::int32_t device_index, const Leaf* like, void* context,
                    void (*deleter)(void*));
};

}  // namespace ferry_torch_native
