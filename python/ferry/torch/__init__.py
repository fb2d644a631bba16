# SPDX-License-Identifier: MIT
"""ferry.torch: move a PyTorch structure to a device in one ferry transfer, and stash tensors in
host memory.

``ferry.torch.to(obj, "cuda")`` is ``obj.to("cuda", non_blocking=True)`` for a whole
structure, with the destination memory owned by the stream that will use it:

- **One allocation.** The CPU tensors of the structure are laid out in one byte range (each
  leaf at an ``ALIGNMENT``-aligned offset, which satisfies every dtype's alignment), taken
  from PyTorch's caching allocator, so PyTorch's counters, snapshots, ``empty_cache()`` and
  its out-of-memory retry see one pool. Each result is its own tensor over its range of that
  block (``untyped_storage()`` differs per leaf while the memory is one allocation, freed
  when the last result is gone). The block is allocated on an idle stream of PyTorch's pool,
  one per target stream, so the caching allocator hands it out again only to ferry, and
  ferry records the point at which each range it lets go of stops being used on the target.
  ferry adopts the range (owner: the target stream) and fills it on its transfer stream,
  which waits on the GPU only for the release points of the earlier destinations the range
  overlaps: never for unrelated compute queued on the target before the call, and a reused
  block is never overwritten while earlier work on the target still reads it.
- **The wait goes where the caller puts it; no host sync.** The results are the target
  stream's memory, and one stream waits on the GPU for ferry's copy: ``wait_stream``, by
  default the stream current at the call. Called without a side stream (current == target),
  the target waits, so work enqueued on it after the call sees the data. Called under
  ``with torch.cuda.stream(side):`` with ``target_stream=main`` (PyTorch's side-stream
  pattern), ``side`` waits and ``main`` does not, so compute enqueued on ``main`` after the
  call overlaps the copy; ``main.wait_stream(side)`` then orders the use. The memory is still
  freed in ``main``'s order and never reused before its copy completes, even when the results
  are dropped before anyone waits. Nobody calls ``record_stream``. Using the results on yet
  another stream needs the usual PyTorch care (``wait_stream``/``record_stream``).
- **Sources.** Pinned CPU tensors (``t.is_pinned()``) of ``DMA_MIN_BYTES`` or more are copied
  by DMA directly from their own memory, with no staging copy, as
  ``Tensor.to(non_blocking=True)`` copies them: they are read after the call returns, so leave
  them unchanged until the target stream's work that follows the call may run (as with
  PyTorch). ferry keeps them alive until their copy's point is reached, so dropping them at
  once is safe. Smaller pinned tensors and pageable ones go through ferry's pinned staging
  ring, all of a call's in one stream, and may be modified once the call returns.
  Non-contiguous tensors and conjugate views are made plain first (a pageable copy, so
  staged). Tensors already on the target device are returned as they are (as ``Tensor.to``
  does); tensors on another GPU move with ``Tensor.to``. ``synchronize()`` waits for every
  copy in flight and lets go of the pinned sources held for them.
- **device="cpu"** runs the same packing on ferry's host backend into CPU memory of PyTorch's
  allocator, and waits for the copy before returning (the host reads the results at once).
  Unlike ``Tensor.to("cpu")`` it always copies: the results never alias the sources.
- On ROCm builds of PyTorch (``torch.version.hip``) ferry's HIP backend is used.

Structures (walked recursively; empty tensors are leaves like any other):

- ``torch.Tensor``: a leaf. Results carry the source's dtype and shape, are contiguous, and
  are not part of an autograd graph.
- ``dict`` (and ``OrderedDict``, ``defaultdict``), ``list``, ``tuple``, namedtuples,
  dataclass instances (a shallow copy with every field converted), and types registered with
  ``torch.utils._pytree``.
- Any other object with a ``.to`` method (TorchRec's ``KeyedJaggedTensor``, a
  ``ModelInput``-like class): ferry calls ``obj.to(device, non_blocking=True)`` twice, seeing
  the calling thread's ``Tensor.to`` calls (``Tensor.to`` is replaced on the class meanwhile;
  other threads' calls reach PyTorch's own). The first call records the tensors that it moves
  with ``Tensor.to`` (handing each back unmoved); those tensors join the batch; the second
  call hands back the uploaded tensors in the same order, so the object builds its result
  from ferry's tensors. Its ``.to`` must therefore move the same tensors in the same order on
  both calls (a ``ferry.Error`` says so otherwise). A ``Tensor.to`` that also converts the
  dtype gets the converted tensor (converted on the target stream).
- Anything else (ints, strings, None, ...) is returned unchanged.

``ferry.torch.pipeline_to(batch, device, non_blocking, data_copy_stream)`` is TorchRec's
in-place batch copy (``enable_inplace_copy_batch=True``) for any batch, by way of its own
``.to``: the results are the current (training) stream's memory and the copy is ordered for
``data_copy_stream``, which the pipeline's ``wait_stream`` then orders the use after; no
``record_stream``. ``ferry.torch.batches(dataloader)`` wraps each batch so that a TorchRec
train pipeline's ``batch.to(...)`` is that call.

``ferry.torch.stash(tensors)`` moves CUDA tensors' storage to pinned host memory and frees the
device memory, and ``Stash.restore()`` brings it back, with no host wait (see ``stash``).

ferry.torch's PyTorch side is ``ferry._torch_native``, built against the running torch's C++
ABI. Where ferry was built beside this torch it is the one built then; otherwise (a wheel, or
another torch) importing ferry.torch builds it against the running torch with torch's C++
extension builder (a C++20 compiler and ninja), once per torch and Python version, cached
under ``~/.cache/ferry/torch-native`` (``FERRY_TORCH_NATIVE_CACHE``; ``FERRY_TORCH_NATIVE=build``
always builds). ``NATIVE`` says which. Where it can be neither, importing ferry.torch raises
``ferry.Error('unsupported')`` naming why. Errors raise ``ferry.Error`` with the caller's
file and line.
"""

from __future__ import annotations

from ._engine import engine, glue, held_sources, native_origin, synchronize
from ._engine import close_engines as _close_engines
from ._pipeline import batches, pipeline_to
from ._stash import Stash, stash
from ._to import to

__all__ = ["to", "pipeline_to", "batches", "stash", "Stash", "engine", "synchronize", "held_sources", "ALIGNMENT", "DMA_MIN_BYTES",
           "RECORD_EVENTS", "NATIVE"]

#: How ferry._torch_native was had: "prebuilt" (built with ferry, against this torch) or
#: "built at first use in DIR" (compiled against the running torch and cached there).
NATIVE = native_origin

#: Whether the devices that ferry.torch opens record pool events and queue activity for
#: their snapshots (``DeviceOptions::record_events``), read when an engine opens: set it
#: before the first call. Off by default: every ``to`` call would log a few events, costing
#: host time on each call and host memory that grows with the run up to the logs' bounds.
#: Turn it on to read ferry's side of a run in ``engine(...)[0].pool.snapshot()``; PyTorch's
#: own snapshots show the memory either way.
RECORD_EVENTS = False

#: Offset alignment of every leaf inside the structure's allocation, in bytes. It is also the
#: core's padding limit (UploadOptions::kPaddingLimit): with every leaf aligned to it, a gap
#: between two leaves shorter than it holds no other leaf, so the staged copy may overwrite
#: such gaps and moves many small leaves in one stream instead of one per leaf.
ALIGNMENT = glue.ALIGNMENT

#: Pinned sources below this size are staged rather than copied by a DMA call of their own:
#: adopting a tensor and enqueueing its copy costs more host time than copying this many
#: bytes into the staging ring, which moves every staged leaf of the call in one stream.
DMA_MIN_BYTES = glue.DMA_MIN_BYTES
