// SPDX-License-Identifier: MIT
// ferry.torch.to in one binding call: read the leaves, take the destination, copy, and hand the
// results to PyTorch, through ferry._torch_native's entry points (native_api.h) for PyTorch's
// side and the public C++ API for ferry's. Bound as the submodule ferry._ferry._torch.
//
// `to` spends its host time in PyTorch's Python calls (streams, allocation, views), each a few
// microseconds, where `Tensor.to` is one C++ call; here a whole `to` is one call, with direct
// calls on the TensorImpls and on PyTorch's caching allocator.
#include "state.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <exception>
#include <span>

namespace ferry::python::torch {

using namespace nb::literals;

namespace {

/// A device block of one `to` call, shared by the result tensors it holds: the last one's
/// deleter releases the adoption (ordering the target after the copy) and hands the block back
/// to ferry's destinations of the target with that release point. On the CPU the block is
/// PyTorch's CPU memory, handed back at once.
struct Block {
  ferry::DeviceBuffer buffer;
  std::shared_ptr<Destinations> destinations;  ///< null on the CPU
  const ferry_torch_native::Api* native = nullptr;
  std::uint64_t pointer = 0;
  std::uint64_t size = 0;

  Block() = default;
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  ~Block() {
    if (pointer == 0) return;
    const ferry::TimelinePoint point = release_quietly(buffer);
    if (destinations) {
      destinations->release(pointer, size, point);
    } else {
      native->free(pointer, -1);
    }
  }
};

/// A result tensor's share of the block, handed to the native wrap as its storage's deleter
/// context.
void block_unref(void* context) noexcept { delete static_cast<std::shared_ptr<Block>*>(context); }

/// A leaf as the native `read` found it, with a copy of its shape (the call may let other
/// threads run, which may resize the tensor).
struct Source {
  nb::handle tensor;
  ferry_torch_native::Leaf leaf{};
  std::vector<std::int64_t> shape;
  std::uint64_t offset = 0;  ///< in the destination
};

/// The destinations of `target` on the device of `engine` (made on first use, on an idle
/// stream of PyTorch's pool).
std::shared_ptr<Destinations> destinations_of(Engine& engine, int device_index, std::uintptr_t target) {
  auto it = engine.destinations.find(target);
  if (it != engine.destinations.end()) return it->second;
  const ferry_torch_native::Api* native = glue().native;
  auto d = std::make_shared<Destinations>();
  d->native = native;
  d->device_index = device_index;
  if (native->idle_stream(device_index, &d->stream_id) != 0) throw nb::python_error();
  engine.destinations.emplace(target, d);
  return d;
}

/// ferry.torch.to of `leaves` (CPU tensors) with `transfer` on the device `device_index` (-1:
/// the CPU, through ferry's host backend, waited for). target/wait None: the current stream.
/// The destinations come from ferry's destinations of the target (a pool of the caching
/// allocator on an idle stream), whose copy waits only for the release of the range it
/// reuses. Returns the result tensors, or the index of the first leaf the native reader
/// refused (a tensor subclass with Python dispatch, a tensor without storage), before anything
/// is done.
nb::object to(nb::handle transfer, std::span<const nb::handle> leaves, int device_index,
              std::optional<std::uintptr_t> target_stream, std::optional<std::uintptr_t> wait_stream) {
  Glue& g = glue();
  if (g.native == nullptr) invalid("ferry.torch: the glue is not set up (ferry._ferry._torch.setup)");
  const ferry_torch_native::Api& native = *g.native;
  PyTransfer& t = nb::cast<PyTransfer&>(transfer);
  const bool cpu = device_index < 0;
  auto [engine_it, fresh] = g.engines.try_emplace(device_index);
  Engine& engine = engine_it->second;
  if (fresh) engine.transfer = nb::borrow(transfer);
  const std::size_t n = leaves.size();
  std::vector<Source> sources(n);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    Source& s = sources[i];
    if (native.read(leaves[i].ptr(), &s.leaf) == 0) return nb::int_(i);
    s.tensor = leaves[i];
    s.shape.assign(s.leaf.shape, s.leaf.shape + s.leaf.ndim);
    total = (total + kAlignment - 1) / kAlignment * kAlignment;
    s.offset = total;
    total += s.leaf.nbytes;
  }
  ferry::Transfer& x = t.get();
  ferry::Device& dev = t.device.device;

  // The streams: the target owns the memory; the waiting stream waits for the copy.
  std::uintptr_t target = 0;
  std::uintptr_t waiter = 0;
  if (!cpu) {
    std::uintptr_t current = 0;
    if (!target_stream || !wait_stream) {
      std::int32_t index = 0;
      if (native.current(&index, &current) != 0) throw nb::python_error();
      if (index != device_index) {
        invalid("ferry.torch.to: the current device is cuda:" + std::to_string(index) + ", not cuda:" +
                std::to_string(device_index));
      }
    }
    target = target_stream.value_or(current);
    waiter = wait_stream.value_or(current);
  }
  const bool target_waits = cpu || target == waiter;
  // PyTorch names CUDA's legacy default stream 0; the backend adopts it as handle 1.
  const auto adoptable = [&](std::uintptr_t h) {
    return h == 0 && dev.backend() == ferry::Backend::cuda ? std::uintptr_t{1} : h;
  };
  ferry::Queue owner = cpu ? dev.queue(ferry::QueueRole::compute)
                           : t.device.adopt(adoptable(target), ferry::QueueRole::compute, "torch target stream");

  // The destinations: one block for the call where the target waits for the copy at once
  // (the results are used together), else one block per leaf, so that each leaf's memory is
  // released when its tensor dies, as the in-place way's per-leaf destinations are (one block
  // would live as long as its longest-lived leaf, and a copy into it would wait for that).
  const bool per_leaf = !cpu && !target_waits;
  std::vector<std::shared_ptr<Block>> blocks;
  std::vector<std::size_t> block_of(n, 0);
  const auto make_block = [&](std::uint64_t size) {
    auto block = std::make_shared<Block>();
    block->native = &native;
    block->size = size;
    ferry::TimelinePoint ready_after;
    if (cpu) {
      block->pointer = native.allocate(size, 0, -1);
      if (block->pointer == 0) throw nb::python_error();
      ready_after = owner.mark();
    } else {
      std::shared_ptr<Destinations> d = destinations_of(engine, device_index, target);
      auto [ptr, wait] = d->allocate(size);
      block->pointer = ptr;
      // From here the block goes back to the caching allocator with the block's release.
      block->destinations = std::move(d);
      ready_after = std::move(wait);
    }
    ferry::AdoptOptions ao;
    ao.ready_after = std::move(ready_after);
    ao.tag = "ferry.torch.to";
    block->buffer = dev.adopt_memory(ferry::NativeMemory{.pointer = block->pointer}, size, owner, std::move(ao));
    blocks.push_back(std::move(block));
  };
  // Per leaf, the leaves too small for DMA share one block: each staged call takes a buffer of
  // the staging ring, and one call per small leaf would wrap the ring within a batch or two,
  // so that the next call waits on the host for the DMA of an earlier batch's staging,
  // queued behind that batch's bulk copies. Their memory is small beside the batch.
  std::size_t shared_block = n;  // the small leaves' block, n where there is none
  if (per_leaf) {
    std::uint64_t small = 0;
    for (std::size_t i = 0; i < n; ++i) {
      Source& s = sources[i];
      s.offset = 0;
      if (s.leaf.nbytes == 0) continue;
      if (s.leaf.nbytes < kDmaMinBytes) {
        small = (small + kAlignment - 1) / kAlignment * kAlignment;
        s.offset = small;
        small += s.leaf.nbytes;
        continue;
      }
      block_of[i] = blocks.size();
      make_block(s.leaf.nbytes);
    }
    if (small > 0) {
      shared_block = blocks.size();
      for (std::size_t i = 0; i < n; ++i) {
        if (sources[i].leaf.nbytes != 0 && sources[i].leaf.nbytes < kDmaMinBytes) block_of[i] = shared_block;
      }
      make_block(small);
    }
  } else if (total > 0) {
    make_block(total);
  }

  // Pinned sources go by DMA from their own memory; the rest in one staged stream per block.
  std::vector<std::pair<std::size_t, PinnedSources::Buffer>> pinned;
  std::vector<std::size_t> staged_leaves;
  for (std::size_t i = 0; i < n; ++i) {
    const Source& s = sources[i];
    if (s.leaf.nbytes == 0) continue;
    if (s.leaf.nbytes >= kDmaMinBytes) {
      try {
        pinned.emplace_back(i, s.leaf.pinned_by_torch != 0
                                   ? engine.pinned->adopt(dev, s.leaf.data, s.leaf.nbytes)
                                   : std::make_shared<const ferry::HostBuffer>(dev.host_pool().adopt(
                                         const_cast<void*>(s.leaf.data), s.leaf.nbytes)));
        continue;
      } catch (const ferry::Error& e) {
        if (e.code() != ferry::ErrorCode::invalid_argument) throw;  // pageable memory: staged
      }
    }
    staged_leaves.push_back(i);
  }
  // One staged call per block takes the block's staged leaves together: the shared block's
  // leaves go after those with blocks of their own (one block for the call needs no order).
  if (shared_block != n) {
    std::stable_sort(staged_leaves.begin(), staged_leaves.end(),
                     [&](std::size_t a, std::size_t b) { return block_of[a] < block_of[b]; });
  }
  ferry::TimelinePoint last;
  const auto pinned_tensor = [&](std::size_t k) { return sources[pinned[k].first].tensor; };
  if (!blocks.empty()) {
    // Copies from pinned memory only enqueue DMA and never wait on the host, so they keep the
    // GIL (releasing and taking it back costs a share of a one-tensor call); a staged copy
    // may wait for ring space, and the host backend's copy waits for its result, so they let
    // other threads run.
    std::optional<nb::gil_scoped_release> nogil;
    if (cpu || !staged_leaves.empty()) nogil.emplace();
    std::exception_ptr failed;
    try {
      // Each pinned leaf fills a block of its own: one call for them all, which copies them in
      // the leaves' order, each after its own block's release (a batch's blocks come free at
      // different points of the target's order: its dense tensors after the forward that read
      // them, its ids after the backward), the copies between two such waits in one batched
      // driver copy, and one mark per run rather than per leaf. The blocks lend their buffers
      // to the call's contiguous list and take them back.
      const bool batched = per_leaf && pinned.size() > 1;
      for (std::size_t at = 0; batched && at < pinned.size(); at += ferry::max_batch_views) {
        const std::size_t end = std::min(pinned.size(), at + ferry::max_batch_views);
        std::vector<const ferry::HostBuffer*> from;
        std::vector<ferry::DeviceBuffer> into;
        from.reserve(end - at);
        into.reserve(end - at);
        struct GiveBack {  // also when the call throws
          std::vector<ferry::DeviceBuffer>& into;
          const std::vector<std::pair<std::size_t, PinnedSources::Buffer>>& pinned;
          const std::vector<std::shared_ptr<Block>>& blocks;
          const std::vector<std::size_t>& block_of;
          std::size_t at;
          ~GiveBack() {
            for (std::size_t k = 0; k < into.size(); ++k) blocks[block_of[pinned[at + k].first]]->buffer = std::move(into[k]);
          }
        } give_back{into, pinned, blocks, block_of, at};
        for (std::size_t k = at; k < end; ++k) {
          from.push_back(pinned[k].second.get());
          into.push_back(std::move(blocks[block_of[pinned[k].first]]->buffer));
        }
        ferry::UploadIntoOptions o;
        o.owner_waits = false;  // per leaf: the target does not wait (the waiting stream does, below)
        o.destination_unused = true;
        last = x.upload_into(std::span<const ferry::HostBuffer* const>(from), std::span<const ferry::DeviceBuffer>(into),
                             std::move(o));
      }
      for (std::size_t k = 0; !batched && k < pinned.size(); ++k) {
        ferry::UploadIntoOptions o;
        o.owner_waits = target_waits && staged_leaves.empty() && k + 1 == pinned.size();
        o.destination_unused = true;
        const Source& s = sources[pinned[k].first];
        last = x.upload_into(*pinned[k].second, 0, s.leaf.nbytes, blocks[block_of[pinned[k].first]]->buffer,
                             s.offset, std::move(o));
      }
      // One staged call per block, with the block's staged leaves.
      std::vector<ferry::HostView> staged;
      std::vector<std::uint64_t> staged_offsets;
      for (std::size_t k = 0; k < staged_leaves.size(); ++k) {
        const Source& s = sources[staged_leaves[k]];
        staged.push_back({s.leaf.data, s.leaf.nbytes});
        staged_offsets.push_back(s.offset);
        const std::size_t b = block_of[staged_leaves[k]];
        if (k + 1 < staged_leaves.size() && block_of[staged_leaves[k + 1]] == b) continue;
        ferry::UploadIntoOptions o;
        o.owner_waits = target_waits && k + 1 == staged_leaves.size();
        o.overwrite_padding = !per_leaf || b == shared_block;  // a leaf's own block has no padding
        o.destination_unused = true;
        last = x.upload_into(std::span<const ferry::HostView>(staged), blocks[b]->buffer,
                             std::span<const std::uint64_t>(staged_offsets), std::move(o));
        staged.clear();
        staged_offsets.clear();
      }
    } catch (...) {
      failed = std::current_exception();
    }
    if (failed) {
      // The copies enqueued so far still read their pinned sources: hold them until every
      // copy enqueued on the executor completes.
      nogil.reset();
      if (!pinned.empty()) g.held.hold(x.executor().mark(), pinned.size(), pinned_tensor);
      std::rethrow_exception(failed);
    }
    if (cpu) {
      // The host reads the results at once.
      ferry::TimelinePoint done = blocks.front()->buffer.release();
      done.wait();
    } else if (!target_waits) {
      t.device.adopt(adoptable(waiter), ferry::QueueRole::compute, "torch wait stream").wait(last);
    }
  }
  if (!pinned.empty() && !cpu) g.held.hold(last, pinned.size(), pinned_tensor);

  nb::list out;
  for (std::size_t i = 0; i < n; ++i) {
    const Source& s = sources[i];
    const ferry_torch_native::Leaf like{nullptr, s.leaf.nbytes, s.shape.data(),
                                        static_cast<std::int32_t>(s.shape.size()), s.leaf.scalar_type, 0};
    // An empty result needs no memory; wrap calls the deleter, which drops the share, when it
    // fails.
    PyObject* obj = nullptr;
    if (blocks.empty() || (per_leaf && s.leaf.nbytes == 0)) {
      obj = native.wrap(0, device_index, &like, nullptr, nullptr);
    } else {
      const std::shared_ptr<Block>& block = blocks[block_of[i]];
      obj = native.wrap(block->pointer + s.offset, device_index, &like, new std::shared_ptr<Block>(block),
                        block_unref);
    }
    if (obj == nullptr) throw nb::python_error();
    out.append(nb::steal(obj));
  }
  return out;
}

/// The one-tensor entry: `obj` a torch.Tensor (not a subclass), the streams None or
/// torch.cuda.Streams of the current device, whose engine a call of `to` set up. None when
/// the call is not such a call (the caller takes the general path).
nb::object to_fast(nb::handle obj, nb::handle target_stream, nb::handle wait_stream) {
  Glue& g = glue();
  if (g.native == nullptr || !g.tensor_type.is_valid() ||
      reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr())) != g.tensor_type.ptr()) {
    return nb::none();
  }
  std::uintptr_t current = 0;
  std::int32_t device_index = 0;
  if (g.native->current(&device_index, &current) != 0) throw nb::python_error();
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
  // Owned for the call: another thread may forget the engines while this one copies.
  const nb::object transfer = engine->second.transfer;
  const nb::handle leaves[1] = {obj};
  nb::object out = to(transfer, leaves, device_index, target, waiter);
  if (!nb::isinstance<nb::list>(out)) return nb::none();
  return nb::borrow(PyList_GET_ITEM(out.ptr(), 0));
}

}  // namespace

}  // namespace ferry::python::torch

namespace ferry::python {

void bind_torch_glue(nb::module_& m) {
  using namespace torch;
  m.def("setup", [](nb::object native, nb::object tensor_type, nb::object stream_type) {
          const auto* api = static_cast<const ferry_torch_native::Api*>(
              PyCapsule_GetPointer(native.ptr(), ferry_torch_native::kTorchNativeApiName));
          if (api == nullptr) throw nb::python_error();
          if (api->version != ferry_torch_native::kTorchNativeApiVersion) {
            throw ferry::Error(ferry::ErrorCode::unsupported,
                               "ferry.torch: ferry._torch_native's entry points are version " +
                                   std::to_string(api->version) + ", not " +
                                   std::to_string(ferry_torch_native::kTorchNativeApiVersion));
          }
          Glue& g = glue();
          g.native = api;
          g.native_capsule = std::move(native);
          g.tensor_type = std::move(tensor_type);
          g.stream_type = std::move(stream_type);
          g.engines.clear();
        }, "native"_a, "tensor_type"_a, "stream_type"_a.none(),
        "Set the glue up: ferry._torch_native's TO_API capsule, torch.Tensor and torch.cuda.Stream "
        "(None without CUDA). Forgets the engines.");
  m.def("to", [](nb::object transfer, nb::sequence leaves, int device_index, nb::handle target_stream,
                 nb::handle wait_stream) {
          std::vector<nb::handle> borrowed;
          borrowed.reserve(nb::len(leaves));
          for (nb::handle leaf : leaves) borrowed.push_back(leaf);
          const auto handle = [](nb::handle st) {
            return st.is_none() ? std::nullopt : std::optional<std::uintptr_t>(native_stream(st));
          };
          return to(transfer, borrowed, device_index, handle(target_stream), handle(wait_stream));
        }, "transfer"_a, "leaves"_a, "device_index"_a, "target_stream"_a.none(), "wait_stream"_a.none(),
        "The leaves (plain contiguous CPU tensors) in one transfer into one allocation, or one per "
        "leaf where the target does not wait (device_index -1: the CPU, through the host backend, "
        "waited for). target_stream / wait_stream None: the current stream. Returns the tensors, or "
        "the index of a leaf the native reader refused. The transfer becomes the device's engine for "
        "to_fast on first use.");
  m.def("to_fast", &to_fast, "obj"_a, "target_stream"_a.none(), "wait_stream"_a.none(),
        "One torch.Tensor to the current CUDA device in one call, once `to` set its engine up; None "
        "when the call is not such a call.");
  m.def("forget", []() { glue().engines.clear(); }, "Forget the engines (they are closing).");
  m.def("hold", [](const ferry::TimelinePoint& point, std::vector<nb::object> tensors) {
          if (!tensors.empty()) {
            glue().held.hold(point, tensors.size(), [&](std::size_t i) -> nb::handle { return tensors[i]; });
          }
        }, "point"_a, "tensors"_a, "Hold tensors until `point` is reached.");
  m.def("release_reached", []() { glue().held.release_reached(); },
        "Let go of the held sources whose copies completed.");
  m.def("held_count", []() { return glue().held.count(); },
        "How many pinned sources are held for copies not known to be complete.");
  m.def("held_clear", []() { glue().held.clear(); }, "Let go of every held source (after every copy completed).");
  nb::class_<ReleasePoints>(m, "ReleasePoints",
                            "The release points of the ranges let go of on one target stream (the record each "
                            "destination of `to` keeps).")
      .def(nb::init<>())
      .def("wait_for", [](ReleasePoints& r, std::uint64_t pointer, std::uint64_t nbytes) {
             ferry::TimelinePoint p = r.wait_for(pointer, nbytes);
             return p.empty() ? nb::none() : nb::cast(p);
           }, "pointer"_a, "nbytes"_a, "The point a writer of the range waits for, or None.")
      .def("record", &ReleasePoints::record, "pointer"_a, "nbytes"_a, "point"_a,
           "Record that the range is in use until `point`.")
      .def_prop_ro("pending", &ReleasePoints::pending, "Ranges whose point was not known reached.");
  bind_adopted(m);
  m.attr("ALIGNMENT") = kAlignment;
  m.attr("DMA_MIN_BYTES") = kDmaMinBytes;
}

}  // namespace ferry::python
