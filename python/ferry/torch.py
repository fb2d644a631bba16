# SPDX-License-Identifier: MIT
"""ferry.torch: move a PyTorch structure to a device in one ferry transfer.

``ferry.torch.to(obj, "cuda")`` is ``obj.to("cuda", non_blocking=True)`` for a whole
structure, with the destination memory owned by the stream that will use it:

- **One allocation.** The CPU tensors of the structure are laid out in one byte range
  (each leaf at a 256-byte aligned offset, which satisfies every dtype's alignment). With
  ``mode="torch"`` (the default) that range comes from PyTorch's caching allocator, so
  PyTorch's counters, snapshots, ``empty_cache()`` and its out-of-memory retry see one pool.
  For plain contiguous CPU leaves (the common case) each result is a tensor over its range of
  that one block, handed to PyTorch through DLPack's C exchange API in the same binding call
  that copies (so ``untyped_storage()`` differs per leaf while the block is one); other
  leaves take a Python path whose results are views of one storage. The block is allocated
  on a stream of ferry's own that runs no work,
  one per target stream, so the caching allocator hands it out again only to ferry, and
  ferry records the point at which each range it lets go of stops being used on the target.
  ferry adopts the range (``Device.adopt_memory``, owner = the adopted target stream) and
  fills it with one batch ``upload_into`` on its transfer stream, which waits on the GPU only
  for the release points of the earlier destinations the range overlaps: never for unrelated
  compute queued on the target before the call, and a reused block is never overwritten
  while earlier work on the target still reads it. With ``mode="ferry"`` the range comes
  from ferry's own stream-ordered pool with the target stream as owner, a second pool beside
  PyTorch's. Either way the results reach PyTorch through DLPack and freeing them releases
  the range, stream-ordered on the target stream.
- **The wait goes where the caller puts it; no host sync.** The results are the target
  stream's memory, and one stream waits on the GPU for ferry's copy: ``wait_stream``, by
  default the stream current at the call. Called without a side stream (current == target),
  the target waits, so work enqueued on it after the call sees the data. Called under
  ``with torch.cuda.stream(side):`` with ``target_stream=main`` (PyTorch's side-stream
  pattern), ``side`` waits and ``main`` does not, so compute enqueued on ``main`` after the
  call overlaps the copy; ``main.wait_stream(side)`` then orders the use. The memory is
  still freed in ``main``'s order and never reused before its copy completes, even when the
  results are dropped before anyone waits: when the last result is gone, the release of the
  range makes ``main`` wait for the copy, and the range is reused only after that release
  point. Nobody calls
  ``record_stream``. Using the results on yet another stream needs the usual PyTorch care
  (``wait_stream``/``record_stream``).
- **Sources.** Pinned CPU tensors (``t.is_pinned()``) of ``DMA_MIN_BYTES`` or more are
  copied by DMA directly from their own memory (``HostPool.adopt``), with no staging copy, as
  ``Tensor.to(non_blocking=True)`` copies them: they are read after the call returns, so
  leave them unchanged until the target stream's work that follows the call may run (as with
  PyTorch). ferry keeps them alive until their copy's point is reached, so dropping them at
  once is safe. Smaller pinned tensors are staged with the pageable ones (one DMA call each
  would cost more host time than copying their bytes). Pageable CPU tensors go through
  ferry's pinned staging ring and may be modified once the call returns.
  Non-contiguous tensors are made contiguous first (a pageable copy, so staged). Tensors
  already on the target device are returned as they are (as ``Tensor.to`` does); tensors on
  another GPU move with ``Tensor.to``. ``synchronize()`` waits for every copy in flight and
  lets go of the pinned sources held for them.
- **device="cpu"** runs the same packing on ferry's host backend into CPU tensors allocated
  by PyTorch, and waits for the copy before returning (the host reads the results at once).
  Unlike ``Tensor.to("cpu")`` it always copies: the results never alias the sources.
- On ROCm builds of PyTorch (``torch.version.hip``) ferry's HIP backend is used.

Structures (walked recursively; empty tensors are leaves like any other):

- ``torch.Tensor``: a leaf. Results carry the source's dtype and shape, are contiguous, and
  are not part of an autograd graph (as if detached).
- ``dict`` (and ``OrderedDict``, ``defaultdict``), ``list``, ``tuple``, namedtuples,
  dataclass instances (a shallow copy with every field converted), and types registered with
  ``torch.utils._pytree``.
- Any other object with a ``.to`` method (TorchRec's ``KeyedJaggedTensor``, a
  ``ModelInput``-like class): ferry calls ``obj.to(device, non_blocking=True)`` twice under a
  ``torch.overrides.TorchFunctionMode``. The first call records the tensors that it moves
  with ``Tensor.to`` (handing each back unmoved); those tensors join the batch; the second
  call hands back the uploaded views in the same order, so the object builds its result from
  ferry's tensors. Its ``.to`` must therefore move the same tensors in the same order on both
  calls (a ``ferry.Error`` says so otherwise). A ``Tensor.to`` that also converts the dtype
  gets the converted view (converted on the target stream).
- Anything else (ints, strings, None, ...) is returned unchanged.

Errors raise ``ferry.Error`` with the caller's file and line.
"""

from __future__ import annotations

import atexit
import collections
import copy as _copy
import dataclasses
import threading
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from . import _ferry
from ._error import Error

__all__ = ["to", "stash", "Stash", "engine", "synchronize", "held_sources", "ALIGNMENT", "DMA_MIN_BYTES",
           "RECORD_EVENTS"]

#: Whether the devices that ferry.torch opens record pool events and queue activity for
#: their snapshots (``DeviceOptions::record_events``), read when an engine opens: set it
#: before the first call. Off by default: every ``to`` call would log a few events, costing
#: host time on each call and host memory that grows with the run up to the logs' bounds
#: (millions of events). Turn it on to read ferry's side of a run in
#: ``engine(...)[0].pool.snapshot()``; PyTorch's own snapshots show ``mode="torch"``'s memory
#: either way.
RECORD_EVENTS = False

#: Offset alignment of every leaf inside the structure's allocation, in bytes. It is also
#: the core's padding limit (UploadOptions::kPaddingLimit): with every leaf aligned to it, a
#: gap between two leaves shorter than it holds no other leaf (a pinned one copied by DMA
#: included), so the pageable leaves' staged copy may overwrite such gaps
#: (overwrite_padding) and moves many small leaves in one stream instead of one per leaf.
ALIGNMENT = _ferry._TORCH_ALIGNMENT

#: Pinned sources below this size are staged rather than copied by a DMA call of their own:
#: adopting a tensor and enqueueing its copy costs more host time than copying this many
#: bytes into the staging ring, which moves every staged leaf of the call in one stream.
DMA_MIN_BYTES = _ferry._TORCH_DMA_MIN_BYTES

# DLPack's C exchange API of torch.Tensor (None where this PyTorch lacks it): with it, one
# binding call does a whole `to` of plain CPU leaves (_ferry._torch_to), instead of a dozen
# of PyTorch's Python calls.
_EXCHANGE = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
_torch_to = _ferry._torch_to
_torch_to_fast = _ferry._torch_to_fast
_Tensor = torch.Tensor
_get_device = torch._C._cuda_getDevice if torch.cuda.is_available() else None
_raw_stream = torch._C._cuda_getCurrentRawStream if torch.cuda.is_available() else None

def _stream_handles(idx: int, target_stream: Any, wait_stream: Any) -> tuple[int, int]:
    """The native handles of the target and waiting streams of device `idx`, each the current
    stream's when None."""
    current = None if target_stream is not None and wait_stream is not None else _raw_stream(idx)
    return (current if target_stream is None else target_stream.cuda_stream,
            current if wait_stream is None else wait_stream.cuda_stream)


_STRIDED = torch.strided

_lock = threading.Lock()
_engines: dict[tuple[Any, int], tuple[_ferry.Device, _ferry.Transfer]] = {}


def engine(backend: _ferry.Backend, ordinal: int = 0) -> tuple[_ferry.Device, _ferry.Transfer]:
    """The process's ferry device and transfer engine for a backend and ordinal, opened on
    first use and shared by every ``to`` call (a Transfer serializes its calls)."""
    key = (backend, ordinal)
    with _lock:
        e = _engines.get(key)
        if e is None:
            dev = _ferry.Device.open(backend, ordinal, record_events=bool(RECORD_EVENTS))
            e = (dev, _ferry.Transfer(dev))
            _engines[key] = e
        return e


# A Queue adopted from a stream stays registered with its device until the device closes
# (Device::adopt_queue), so each target stream is adopted once per engine and kept here: one
# adoption per call would grow the device's queues, and the pool's per-queue records, with
# every call. The key is the native handle: torch.cuda.Stream objects are made afresh by
# current_stream() for one stream, and torch's pooled streams are never destroyed.
_queues: dict[tuple[Any, int, int], _ferry.Queue] = {}


def _adopted_queue(key: tuple[Any, int], dev: _ferry.Device, stream: Any) -> _ferry.Queue:
    """The Queue of `dev` adopted from `stream` (a torch.cuda.Stream), adopted on first use."""
    handle = int(stream.cuda_stream)
    with _lock:
        q = _queues.get((*key, handle))
        if q is None:
            q = dev.adopt_queue(stream, _ferry.QueueRole.compute, "torch target stream")
            _queues[(*key, handle)] = q
        return q


# Pinned sources are read by DMA after `to` returns: each call's pinned tensors are held (in
# the binding, which both of `to`'s paths share) with the point at which its last copy
# completes (the executor's copies complete in order), and let go of once it is reached, on
# later calls and at synchronize().
_hold = _ferry._torch_hold
_release_reached = _ferry._torch_release_reached


def _pinned(t: torch.Tensor) -> bool:
    """Whether a CPU tensor's memory is page-locked (copied directly, not staged)."""
    return t.is_pinned()


def held_sources() -> int:
    """How many pinned source tensors ferry still holds for copies not known to be complete."""
    return _ferry._torch_held_count()


# A stash's downloads run on a transfer queue of their own, beside the engine's (which runs
# `to`'s uploads and the restores): the device's copy engines then read and write at once, as
# PyTorch's separate D2H and H2D streams do, and a restore never queues behind a stash's copy
# it does not read.
_stash_engines: dict[tuple[Any, int], _ferry.Transfer] = {}
# Per device, the point at which the latest restore's copy completes: a stash of tensors whose
# restore no stream waited for yet must read them after it.
_restoring: dict[int, _ferry.TimelinePoint] = {}


def _stash_transfer(backend: _ferry.Backend, ordinal: int, dev: _ferry.Device) -> _ferry.Transfer:
    """The Transfer that runs the stashes' downloads on `dev` (made on first use)."""
    key = (backend, ordinal)
    with _lock:
        x = _stash_engines.get(key)
        if x is None:
            x = _ferry.Transfer(dev, dev.create_queue(_ferry.QueueRole.transfer, "ferry.torch stash"), staging=False)
            _stash_engines[key] = x
        return x


def synchronize() -> None:
    """Wait on the host for every copy of every ``to`` call and stash so far, and let go of the
    pinned source tensors held for them."""
    with _lock:
        transfers = [x for _, x in _engines.values()] + list(_stash_engines.values())
    for xfer in transfers:
        xfer.synchronize()
    _release_reached()


def _close_engines() -> None:
    """Close every engine ferry.torch opened: wait for their copies, let go of the pinned
    sources held for them, and close their devices, rather than leave open devices to the
    interpreter's teardown, which never closes them. Runs at interpreter exit; a later ``to``
    opens a fresh engine."""
    with _lock:
        engines = list(_engines.values())
        stashes = list(_stash_engines.values())
        _engines.clear()
        _stash_engines.clear()
        _restoring.clear()
        _ferry._torch_forget()
        _queues.clear()
    for xfer in stashes + [x for _, x in engines]:
        xfer.close()  # waits for its in-flight copies, which may still read held sources
    _ferry._torch_held_clear()
    for dev, _ in engines:
        dev.close()


# Registered after torch's own handlers (torch is imported above), so it runs before them:
# atexit runs handlers last-registered first.
atexit.register(_close_engines)


def _gpu_backend() -> _ferry.Backend:
    """ferry's backend for PyTorch's GPU: HIP on ROCm builds of PyTorch, else CUDA."""
    return _ferry.Backend.hip if getattr(torch.version, "hip", None) else _ferry.Backend.cuda


def _target(device: Any) -> torch.device:
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise Error("invalid_argument", f"ferry.torch.to: device {device!r} is not a torch device: {exc}") from None
    if d.type == "cuda":
        if d.index is None:
            d = torch.device("cuda", torch.cuda.current_device())
        return d
    if d.type == "cpu":
        return torch.device("cpu")
    raise Error("unsupported", f"ferry.torch.to: device type '{d.type}' is not supported (cuda or cpu)")


class _ToCapture(TorchFunctionMode):
    """Intercepts ``Tensor.to`` calls that name a device: records the tensor (first pass) or
    hands back its uploaded view (second pass)."""

    def __init__(self, owner: str, replacements: list[torch.Tensor] | None = None,
                 seen: list[torch.Tensor] | None = None):
        super().__init__()
        self.owner = owner  # the type name of the object whose .to runs, for errors
        self.seen: list[torch.Tensor] = [] if seen is None else seen
        self.replacements = replacements
        self.next = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.to and args and isinstance(args[0], torch.Tensor):
            dev, dtype, _, _ = torch._C._nn._parse_to(*args[1:], **kwargs)
            if dev is not None:
                t = args[0]
                if self.replacements is None:
                    self.seen.append(t)
                    return t
                i = self.next
                if i >= len(self.seen) or self.seen[i] is not t:
                    raise Error("invalid_argument",
                                f"ferry.torch.to: {self.owner}.to moved different tensors on its second call "
                                f"(tensor {i}): an object's .to must move the same tensors in the same order")
                self.next += 1
                r = self.replacements[i]
                if dtype is not None and dtype != r.dtype:
                    r = r.to(dtype)
                return r
        return func(*args, **kwargs)


def _check_stream(name: str, stream: Any) -> None:
    """`stream` is None or a torch.cuda.Stream (torch.cuda.ExternalStream included)."""
    if stream is not None and not isinstance(stream, torch.cuda.Stream):
        raise Error("invalid_argument",
                    f"ferry.torch.to: {name} is a {type(stream).__name__}, not a torch.cuda.Stream")


def _check_leaf(i: int, t: torch.Tensor) -> None:
    """Refuse a leaf whose copy would not be its bytes in a plain strided layout, or whose
    copy would silently leave the autograd graph, naming the leaf and what to do instead."""
    what = None
    if t.is_nested:
        what = "a nested tensor (its buffers and sizes are not one strided tensor): move it with Tensor.to"
    elif t.layout != torch.strided:
        what = f"a {t.layout} tensor, not strided: move it with Tensor.to, or call to_dense() first"
    elif t.is_quantized:
        what = "a quantized tensor (its scale and zero point are not bytes of it): move it with Tensor.to"
    elif t.device.type == "meta":
        what = "a meta tensor, which has no data to copy"
    elif t.requires_grad:
        what = ("a tensor that requires grad: its copy would not be part of the autograd graph; pass "
                "t.detach() to copy its data, or move it with Tensor.to to keep the graph")
    if what is not None:
        code = "invalid_argument" if t.device.type == "meta" or t.requires_grad else "unsupported"
        shape = "" if t.is_nested else f"{tuple(t.shape)}, "  # a nested tensor has no one shape
        raise Error(code, f"ferry.torch.to: leaf {i} ({shape}{t.dtype}) is {what}")


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


def _flatten(obj: Any, leaves: list[torch.Tensor], device: torch.device):
    """Append the tensors of `obj` to `leaves`; return `rebuild(results)`, which builds the
    same structure from the converted leaves."""
    if isinstance(obj, torch.Tensor):
        i = len(leaves)
        leaves.append(obj)
        return lambda out: out[i]
    if _is_namedtuple(obj):
        parts = [_flatten(v, leaves, device) for v in obj]
        return lambda out: type(obj)(*(p(out) for p in parts))
    if isinstance(obj, (list, tuple)):
        parts = [_flatten(v, leaves, device) for v in obj]
        kind = type(obj)

        def rebuild_seq(out):
            items = [p(out) for p in parts]
            if kind in (list, tuple):
                return kind(items)
            try:
                return kind(items)
            except TypeError:
                return list(items) if isinstance(obj, list) else tuple(items)
        return rebuild_seq
    if isinstance(obj, dict):
        keys = list(obj.keys())
        parts = [_flatten(obj[k], leaves, device) for k in keys]

        def rebuild_dict(out):
            items = [(k, p(out)) for k, p in zip(keys, parts)]
            if isinstance(obj, collections.defaultdict):
                return collections.defaultdict(obj.default_factory, items)
            if type(obj) is dict:
                return dict(items)
            try:
                return type(obj)(items)
            except TypeError:
                return dict(items)
        return rebuild_dict
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        names = [f.name for f in dataclasses.fields(obj)]
        parts = [_flatten(getattr(obj, n), leaves, device) for n in names]

        def rebuild_dataclass(out):
            r = _copy.copy(obj)
            for n, p in zip(names, parts):
                object.__setattr__(r, n, p(out))
            return r
        return rebuild_dataclass
    node = _pytree_node(type(obj))
    if node is not None:
        children, context = node.flatten_fn(obj)
        parts = [_flatten(c, leaves, device) for c in children]
        return lambda out: node.unflatten_fn([p(out) for p in parts], context)
    to = getattr(obj, "to", None)
    if callable(to) and not isinstance(obj, type):
        capture = _ToCapture(type(obj).__name__)
        with capture:
            to(device, non_blocking=True)
        first = len(leaves)
        leaves.extend(capture.seen)
        count = len(capture.seen)

        def rebuild_to(out):
            second = _ToCapture(type(obj).__name__, replacements=list(out[first:first + count]), seen=capture.seen)
            with second:
                result = to(device, non_blocking=True)
            if second.next != count:
                raise Error("invalid_argument",
                            f"ferry.torch.to: {type(obj).__name__}.to moved {second.next} tensors on its second "
                            f"call and {count} on its first: it must move the same tensors both times")
            return result
        return rebuild_to
    return lambda out: obj


def _pytree_node(kind: type):
    try:
        from torch.utils import _pytree
    except ImportError:  # pragma: no cover - every supported torch has it
        return None
    return _pytree.SUPPORTED_NODES.get(kind)


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def _views(whole: torch.Tensor, sources: list[torch.Tensor], offsets: list[int]) -> list[torch.Tensor]:
    """The leaves as views of `whole` (bytes): leaf i has sources[i]'s dtype, shape and
    (contiguous) strides at byte offsets[i] (ascending). A few tensor ops per dtype, not per
    leaf: a typed view of the whole range is split at the leaves' boundaries in one
    ``split_with_sizes`` (the gaps between a dtype's leaves are pieces of their own), which
    gives 1-D leaves as they are; only leaves of other ranks take one more view."""
    if len(sources) == 1 and offsets[0] == 0 and whole.numel() == sources[0].nbytes and sources[0].nbytes:
        s = sources[0]  # one leaf spanning the whole range: two views
        return [whole.view(s.dtype).view(s.shape)]
    n = whole.numel()
    base = whole.storage_offset()  # in bytes: `whole` is uint8
    by_dtype: dict[torch.dtype, list[int]] = {}
    for i, s in enumerate(sources):
        by_dtype.setdefault(s.dtype, []).append(i)
    out: list[torch.Tensor | None] = [None] * len(sources)
    for dtype, indices in by_dtype.items():
        e = dtype.itemsize
        if base % e:  # not element-aligned in the storage: slice and view each leaf's bytes
            for i in indices:
                s = sources[i]
                out[i] = whole[offsets[i]:offsets[i] + s.nbytes].view(dtype).view(s.shape)
            continue
        typed = whole[:n - n % e].view(dtype) if n % e else whole.view(dtype)
        sizes: list[int] = []
        picks: list[int] = []
        at = 0  # in elements
        for i in indices:
            start = offsets[i] // e  # offsets are ALIGNMENT-aligned, so whole elements
            if start > at:
                sizes.append(start - at)
            picks.append(len(sizes))
            count = sources[i].numel()
            sizes.append(count)
            at = start + count
        if typed.numel() > at:
            sizes.append(typed.numel() - at)
        parts = typed.split_with_sizes(sizes)
        for i, k in zip(indices, picks):
            s = sources[i]
            out[i] = parts[k] if s.dim() == 1 else parts[k].view(s.shape)
    return out


def to(obj: Any, device: Any = "cuda", *, target_stream: Any = None, wait_stream: Any = None,
       mode: str = "torch") -> Any:
    """Move every CPU tensor of `obj` (a tensor or any nested structure) to `device` in one
    ferry transfer; see the module documentation for the rules.

    Args:
        obj: a tensor or a structure of them.
        device: "cuda", "cuda:N", a torch.device, or "cpu" (ferry's host backend).
        target_stream: the torch.cuda.Stream whose memory the results are (default: the
            current stream of `device`): allocated in its order and freed in its order.
        wait_stream: the torch.cuda.Stream that waits on the device for ferry's copy (default:
            the stream current at the call). When it is the target stream (no side stream is
            current), work enqueued on the target after the call sees the data. Otherwise the
            target does not wait at the call, so its compute enqueued after the call overlaps
            the copy, and the caller orders the use (``target.wait_stream(wait_stream)``), as
            with PyTorch's side-stream copies. The host never waits.
        mode: "torch" (destination from PyTorch's caching allocator, reused by ferry after
            its release point on target_stream) or "ferry" (from ferry's own pool, owned by
            target_stream); handed over through DLPack either way.

    Returns:
        The same structure with device tensors.

    Raises:
        ferry.Error: bad arguments (a mode, a stream that is not a torch.cuda.Stream or is of
        another device) and leaves ferry cannot copy byte for byte (sparse, quantized, meta,
        nested, or requiring grad), before anything is allocated or copied.
    """
    if type(obj) is _Tensor and mode == "torch" and device == "cuda" and _get_device is not None:
        # The commonest call, one tensor to the current device, in one binding call, with the
        # engine and destinations a first call of the general path registered for the target.
        out = _torch_to_fast(obj, target_stream, wait_stream, -1 if _native_to else _get_device())
        if out is not None:
            return out
    if mode != "torch" and mode != "ferry":
        raise Error("invalid_argument", f"ferry.torch.to: mode {mode!r} is not 'torch' or 'ferry'")
    if target_stream is not None:
        _check_stream("target_stream", target_stream)
    if wait_stream is not None:
        _check_stream("wait_stream", wait_stream)
    dev_t = _target(device)
    leaves: list[torch.Tensor] = []
    rebuild = _flatten(obj, leaves, dev_t)

    cpu = dev_t.type == "cpu"
    if cpu:
        if target_stream is not None or wait_stream is not None:
            raise Error("invalid_argument", "ferry.torch.to: target_stream and wait_stream are for a cuda device, "
                        "not 'cpu'")
        backend = _ferry.Backend.host
        ordinal = 0
    else:
        backend = _gpu_backend()
        ordinal = dev_t.index
        for name, st in (("target_stream", target_stream), ("wait_stream", wait_stream)):
            if st is not None and torch.device(st.device) != dev_t:
                raise Error("invalid_argument", f"ferry.torch.to: {name} is a stream of {st.device}, not of {dev_t}")
    if mode == "torch" and _EXCHANGE is not None and leaves:
        # One binding call for plain contiguous CPU leaves (None: a leaf is not one, and the
        # Python path below converts it or names what is wrong). PyTorch's raw allocation is
        # on the current device, so a target of another device takes the Python path.
        dev, xfer = engine(backend, ordinal)
        if cpu:
            out = _torch_to(xfer, _EXCHANGE, leaves, None, 0, None, None)
        elif _get_device is not None and ordinal == _get_device():
            target, waiter = _stream_handles(ordinal, target_stream, wait_stream)
            dests = _destinations(ordinal, target)
            out = _torch_to(xfer, _EXCHANGE, leaves, dests, ordinal, target, waiter)
            if backend == _ferry.Backend.cuda:
                _ferry._torch_register(ordinal, xfer, target, dests)
        else:
            out = None
        if out is not None:
            return rebuild(out)
    results: list[torch.Tensor | None] = [None] * len(leaves)
    if not cpu:
        current = torch.cuda.current_stream(dev_t)
        if target_stream is None:
            target_stream = current
        if wait_stream is None:
            wait_stream = current
    # Every leaf is checked before anything is allocated or copied. The plain strided CPU
    # tensor (the common leaf) passes one inline test; any other leaf gets the full check,
    # which names what is wrong with it.
    devices = [t.device for t in leaves]
    for i, t in enumerate(leaves):
        d = devices[i]
        if d.type == "cpu" and t.layout is _STRIDED and not (t.requires_grad or t.is_quantized or t.is_nested):
            continue
        if cpu or d != dev_t:
            _check_leaf(i, t)

    packed: list[int] = []  # indices into leaves
    sources: list[torch.Tensor] = []
    for i, t in enumerate(leaves):
        d = devices[i]
        if d.type == "cpu":
            packed.append(i)
            sources.append(t.contiguous())  # the tensor itself when contiguous; none requires grad
        elif not cpu and d == dev_t:
            results[i] = t
        else:
            with torch.cuda.stream(target_stream) if not cpu else _nullcontext():
                results[i] = t.to(dev_t, non_blocking=True)

    _release_reached()
    if sources:
        dev, xfer = engine(backend, ordinal)
        offsets: list[int] = []
        total = 0
        for s in sources:
            total = _align(total)
            offsets.append(total)
            total += s.nbytes
        if cpu:
            owner = dev.queue(_ferry.QueueRole.compute)
            target_waits = True
        else:
            owner = _adopted_queue((backend, ordinal), dev, target_stream)
            target_waits = int(wait_stream.cuda_stream) == int(target_stream.cuda_stream)
        if mode == "torch":
            views = _upload_torch(dev, xfer, owner, target_waits, sources, offsets, total, dev_t, target_stream,
                                  wait_stream)
        else:
            views = _upload_ferry(dev, xfer, owner, target_waits, sources, offsets, total, dev_t, wait_stream)
        for i, v in zip(packed, views):
            results[i] = v
    return rebuild(results)


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


class _AllocationStream:
    """The destinations of ``mode="torch"`` for one target stream: PyTorch's caching allocator
    on a stream of ferry's own that never runs work (``alloc``), with each range's release
    point recorded when ferry lets go of it (``destinations``, shared with the binding path).

    A block that the caching allocator hands out on the target stream is free in that
    stream's order only, so a copy on another queue would have to wait for all the target's
    queued work before writing it: the copy could never overlap compute enqueued before the
    call. Blocks allocated on `alloc` are handed out again only on `alloc`, that is only to
    ferry, and ferry knows when each range it freed stops being used: its release point on
    the target, recorded before the block goes back to the caching allocator. A copy into a
    range waits for the release points of the earlier destinations it overlaps, and for
    nothing else. The memory stays PyTorch's: it is counted in ``memory_reserved()``,
    ``empty_cache()`` returns it, and an allocation that would run out of memory makes the
    caching allocator free these cached blocks (its cudaFree waits for the device) and retry.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.alloc = torch.cuda.Stream(device)
        # PyTorch's raw allocation is on the current device: the Python path sets it.
        self.destinations = _ferry._TorchDestinations(torch._C._cuda_cudaCachingAllocator_raw_alloc,
                                                      torch._C._cuda_cudaCachingAllocator_raw_delete,
                                                      int(self.alloc.cuda_stream), native=_native_to,
                                                      stream_id=self.alloc.stream_id, device_index=device.index)

    def allocate(self, nbytes: int) -> tuple[int, _ferry.TimelinePoint | None]:
        """A device pointer to `nbytes` bytes and the point a writer must wait for (None: the
        range is unused)."""
        with torch.cuda.device(self.device):
            return self.destinations.allocate(nbytes)

    def release(self, ptr: int, nbytes: int, point: _ferry.TimelinePoint) -> None:
        """Let go of a range once ferry's adoption of it is released at `point`: recorded
        before the caching allocator may hand it out again."""
        self.destinations.release(ptr, nbytes, point)


_alloc_streams: dict[tuple[int, int], _AllocationStream] = {}


def _allocation_stream(dev_t: torch.device, target_stream: Any) -> _AllocationStream:
    """The allocation stream of a target stream (one per native handle, made on first use):
    every range freed on it was released on that target, so the release points it records are
    points of one timeline and the latest overlapping one covers them all."""
    return _allocation_stream_of(dev_t.index, int(target_stream.cuda_stream))


def _allocation_stream_of(index: int, handle: int) -> _AllocationStream:
    key = (index, handle)
    a = _alloc_streams.get(key)
    if a is None:
        with _lock:
            a = _alloc_streams.get(key)
            if a is None:
                a = _AllocationStream(torch.device("cuda", index))
                _alloc_streams[key] = a
    return a


def _destinations(index: int, handle: int) -> Any:
    """The binding's destinations of a target stream (by device index and native handle)."""
    return _allocation_stream_of(index, handle).destinations


def _upload_torch(dev, xfer, owner, target_waits, sources, offsets, total, dev_t, target_stream, wait_stream):
    """mode="torch": one block of PyTorch's caching allocator (see _AllocationStream), adopted
    and filled by ferry. The target (the owner) waits for the copy when `target_waits`, else
    `wait_stream` does."""
    if total == 0:
        whole = torch.empty(0, dtype=torch.uint8, device=dev_t)
        return _views(whole, sources, offsets)
    pinned, pageable = _split(dev, sources, offsets)
    if dev_t.type == "cpu":
        whole = torch.empty(total, dtype=torch.uint8)
        adopted = dev.adopt_memory(whole.data_ptr(), total, owner, ready_after=owner.mark(), tag="ferry.torch.to")
        try:
            _fill(xfer, adopted, pinned, pageable)
        finally:
            done = adopted.release()
        done.wait()
        return _views(whole, sources, offsets)
    alloc = _allocation_stream(dev_t, target_stream)
    ptr, wait = alloc.allocate(total)
    try:
        after = {} if wait is None else {"ready_after": wait}
        adopted = dev.adopt_memory(ptr, total, owner, tag="ferry.torch.to",
                                   on_release=lambda point: alloc.release(ptr, total, point), **after)
    except BaseException:
        torch.cuda.caching_allocator_delete(ptr)
        raise
    # The results are a DLPack export of the adopted range. When the last one is gone, ferry
    # releases the range on the target (ordering the target after the copy when it did not
    # wait for it) and hands the block back with that release point.
    _fill(xfer, adopted, pinned, pageable, owner_waits=target_waits)
    if target_waits:
        exported = torch.from_dlpack(adopted.__dlpack__(stream=-1))  # the target already waits
    else:
        handle = int(wait_stream.cuda_stream)
        exported = torch.from_dlpack(adopted.__dlpack__(stream=handle if handle else 1))
    del adopted
    return _views(exported, sources, offsets)


def _upload_ferry(dev, xfer, owner, target_waits, sources, offsets, total, dev_t, wait_stream):
    """mode="ferry": one block of ferry's pool owned by the target stream, through DLPack.
    The target (the owner) waits for the copy when `target_waits`, else `wait_stream` does; the
    block's release, stream-ordered on the owner, follows the copy either way."""
    pinned, pageable = _split(dev, sources, offsets)
    owner_waits = target_waits
    if not pinned:
        batch = xfer._upload_batch_raw([s.data_ptr() for s in sources], [s.nbytes for s in sources], owner,
                                       owner_waits=owner_waits, tag="ferry.torch.to")
        buffer, offsets = batch.buffer, list(batch.offsets)
    else:
        # The batch layout (256-aligned offsets), in a block allocated here: the pinned
        # sources go in by DMA from their own memory, the pageable ones through the ring.
        # Nothing uses the fresh block before these copies, so they wait only for its
        # previous life (ready_after, which first_writer makes cover a block the target
        # stream freed and may still be reading), as upload_batch's do, not for the target
        # stream's queued compute.
        buffer = dev.pool.allocate(total, owner, tag="ferry.torch.to", first_writer=xfer.executor)
        _fill(xfer, buffer, pinned, pageable, owner_waits=owner_waits)
    if dev_t.type == "cpu":
        whole = torch.from_dlpack(buffer)
    else:
        # DLPack's consumer stream waits on the device for the copy: the wait stream. DLPack
        # names PyTorch's default stream (handle 0, the legacy default stream on CUDA) 1.
        handle = int(wait_stream.cuda_stream)
        whole = torch.from_dlpack(buffer.__dlpack__(stream=handle if handle else 1))
    return _views(whole, sources, offsets)


def _split(dev, sources, offsets):
    """The non-empty sources with their offsets: (pinned, pageable). A pinned source comes
    with its memory adopted as a HostBuffer; one the core refuses to adopt (pinned under
    another device's context and not portable, which a copy engine of this device cannot
    read directly) counts as pageable and is staged."""
    pinned, pageable = [], []
    for s, o in zip(sources, offsets):
        if s.nbytes == 0:
            continue
        if s.nbytes >= DMA_MIN_BYTES and _pinned(s):
            try:
                pinned.append((s, o, dev.host_pool.adopt(s.data_ptr(), s.nbytes)))
                continue
            except Error as e:
                if e.code != "invalid_argument":
                    raise
        pageable.append((s, o))
    return pinned, pageable


def _fill(xfer, destination, pinned, pageable, owner_waits=True):
    """Fill `destination` (fresh: unused since its allocation or adoption) with the split
    sources: the pinned ones by DMA, the pageable ones in one staged stream over the padding
    between them. With `owner_waits` the owner waits for the last copy, which covers them all;
    without, the caller places the wait."""
    _upload_pinned(xfer, destination, pinned, owner_waits=owner_waits and not pageable)
    if pageable:
        xfer._upload_into_raw([s.data_ptr() for s, _ in pageable], [s.nbytes for s, _ in pageable], destination,
                              [o for _, o in pageable], owner_waits=owner_waits,
                              overwrite_padding=True, destination_unused=True)


def _upload_pinned(xfer, destination, pinned, owner_waits):
    """Copy each pinned source by DMA from its own memory (adopted, never staged) to its
    offset of `destination` (fresh: unused since its allocation or adoption, so each copy
    waits only for its ready_after); the owner waits for the last copy when `owner_waits` (the
    executor's copies complete in order, so that covers them all). The sources are held
    until the last copy's point is reached."""
    if not pinned:
        return
    done = None
    try:
        last = len(pinned) - 1
        for i, (_, o, h) in enumerate(pinned):
            point = xfer.upload_into(h, destination, o, owner_waits=owner_waits and i == last,
                                     destination_unused=True)
        done = point
    finally:
        # After an error the copies enqueued so far still read their sources: they are held
        # until every copy enqueued on the executor completes.
        _hold(done if done is not None else xfer.executor.mark(), [s for s, _, _ in pinned])


# ---------------------------------------------------------------------------------------------
# Stashing device state in pinned host memory


class _StashGroup:
    """The stashed tensors that share one device storage, and where its bytes live in the
    stash's host memory."""

    __slots__ = ("tensors", "layouts", "nbytes", "offset", "block", "itself")

    def __init__(self, nbytes: int, offset: int):
        self.tensors: list[torch.Tensor] = []
        # Each tensor's (dtype, shape, stride, storage offset in elements) in the storage.
        self.layouts: list[tuple[torch.dtype, torch.Size, tuple[int, ...], int]] = []
        self.nbytes = nbytes
        self.offset = offset
        self.block: torch.Tensor | None = None  # the restore's memory until it is set in
        self.itself = False  # the block is the group's one tensor as it was


def _repoint(group: _StashGroup, whole: torch.Tensor, base: int, typed: dict[torch.dtype, torch.Tensor]) -> None:
    """Point every tensor of `group` at its place in `whole` (a uint8 tensor that starts its
    storage), `base` bytes in, keeping each one's identity, dtype, shape, strides and offset:
    views of one storage stay views of one storage. `typed` caches `whole` viewed as each
    dtype, so each tensor costs one view."""
    for t, (dtype, shape, stride, offset) in zip(group.tensors, group.layouts):
        v = typed.get(dtype)
        if v is None:
            size = dtype.itemsize
            # A whole that is not a whole number of elements cannot be viewed as them: trim it.
            v = (whole if whole.numel() % size == 0 else whole[:whole.numel() - whole.numel() % size]).view(dtype)
            typed[dtype] = v
        t.data = v.as_strided(shape, stride, base // dtype.itemsize + offset)


class _PythonStashOps:
    """The per-tensor work of a stash and its restore, with PyTorch's Python API: the same
    functions, contracts and errors as ferry._torch_native's (python/src/torch_native.cpp),
    which does it in C++ and is used instead wherever it was built for the running torch. A
    plan is the list of _StashGroup."""

    @staticmethod
    def stash_plan(items: list, alignment: int):
        """(plan, device index, storage data pointers, sizes, host offsets, total bytes): every
        item checked, grouped by storage (each at an `alignment`-aligned host offset), and a
        storage held by anything but the items refused. Nothing is changed."""
        # One pass validates each tensor and groups it by storage; the checks are property
        # reads (is_cuda, get_device) rather than torch.device objects.
        groups: dict[int, _StashGroup] = {}
        storages: dict[int, torch.UntypedStorage] = {}
        seen: set[int] = set()
        index = -1
        total = 0
        for i, t in enumerate(items):
            if not isinstance(t, torch.Tensor):
                raise Error("invalid_argument", f"ferry.torch.stash: item {i} is a {type(t).__name__}, not a tensor")
            if t.is_nested or t.layout != torch.strided or t.is_quantized:
                raise Error("unsupported", f"ferry.torch.stash: tensor {i} is not a plain strided tensor "
                            f"({'nested' if t.is_nested else t.layout if t.layout != torch.strided else 'quantized'})")
            if not t.is_cuda:
                raise Error("invalid_argument", f"ferry.torch.stash: tensor {i} is on {t.device}, not a CUDA device "
                            "(a stashed tensor is a CPU tensor until its stash is restored)")
            if index < 0:
                index = t.get_device()
            elif t.get_device() != index:
                raise Error("invalid_argument", f"ferry.torch.stash: tensor {i} is on {t.device}, the others on "
                            f"cuda:{index}: one stash holds one device's tensors")
            if id(t) in seen:
                continue
            seen.add(id(t))
            storage = t.untyped_storage()
            key = storage.data_ptr()
            g = groups.get(key)
            if g is None:
                total = (total + alignment - 1) // alignment * alignment
                g = _StashGroup(storage.nbytes(), total)
                total += g.nbytes
                groups[key] = g
                storages[key] = storage
            g.tensors.append(t)
            g.layouts.append((t.dtype, t.shape, t.stride(), t.storage_offset()))
            del storage
        # Every holder of a storage must be one of the tensors passed (plus the one storage
        # object kept here): any other would read the storage after it is freed.
        for key, g in groups.items():
            holders = torch._C._storage_Use_Count(storages[key]._cdata) - 1
            if holders > len(g.tensors):
                i = next(j for j, t in enumerate(items) if t.untyped_storage().data_ptr() == key)
                raise Error("invalid_argument",
                            f"ferry.torch.stash: tensor {i}'s storage ({g.nbytes} bytes) is also held by "
                            f"{holders - len(g.tensors)} tensor(s) or storage reference(s) that were not passed "
                            "(a view, an autograd saved tensor, a .data alias): they would read freed memory; "
                            "pass every tensor that uses it")
        if not groups:
            raise Error("invalid_argument", "ferry.torch.stash: no tensors to stash")
        plan = list(groups.values())
        return plan, index, list(groups.keys()), [g.nbytes for g in plan], [g.offset for g in plan], total

    @staticmethod
    def record_streams(plan: list[_StashGroup], stream_id: int, device_index: int, device_type: int) -> None:
        """Each storage's use recorded on the stream (Tensor.record_stream)."""
        s = torch.cuda.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)
        for g in plan:
            g.tensors[0].record_stream(s)

    @staticmethod
    def repoint_host(plan: list[_StashGroup], whole: torch.Tensor) -> None:
        """Every tensor becomes a CPU tensor over `whole` at its group's host offset."""
        typed: dict[torch.dtype, torch.Tensor] = {}
        for g in plan:
            _repoint(g, whole, g.offset, typed)

    @staticmethod
    def restore_alloc(plan: list[_StashGroup], stream_id: int, device_index: int, device_type: int) -> list[int]:
        """Fresh device memory for each group on the stream's pool, kept in the plan; the data
        pointers. A group of one contiguous tensor that spans its whole storage gets a tensor
        of that layout (one allocation that takes the tensor's place as it is); any other
        group gets a byte block its tensors are set into."""
        s = torch.cuda.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)
        device = torch.device("cuda", device_index)
        try:
            with torch.cuda.stream(s):
                for g in plan:
                    t = g.tensors[0]
                    dtype, shape, stride, offset = g.layouts[0]
                    g.itself = (len(g.tensors) == 1 and offset == 0 and t.numel() * dtype.itemsize == g.nbytes
                                and t.is_contiguous())
                    g.block = (torch.empty_strided(shape, stride, dtype=dtype, device=device) if g.itself
                               else torch.empty(g.nbytes, dtype=torch.uint8, device=device))
        except BaseException:
            _PythonStashOps.drop_blocks(plan)
            raise
        return [g.block.data_ptr() for g in plan]

    @staticmethod
    def repoint_blocks(plan: list[_StashGroup]) -> None:
        """Every tensor points at its group's block, in its own layout; the plan lets go of
        the blocks."""
        for g in plan:
            if g.itself:
                g.tensors[0].data = g.block
            else:
                _repoint(g, g.block, 0, {})
            g.block = None

    @staticmethod
    def drop_blocks(plan: list[_StashGroup]) -> None:
        for g in plan:
            g.block = None


def _native_module() -> Any:
    """ferry._torch_native (the stash's per-tensor work) where it is built for the running
    torch (its C++ ABI is that version's), else None. FERRY_TORCH_NATIVE=0 in the environment also gives None."""
    import os
    if os.environ.get("FERRY_TORCH_NATIVE", "1") == "0":
        return None
    try:
        from . import _torch_native
    except ImportError:
        return None
    if _torch_native.TORCH_VERSION != torch.__version__:
        return None
    _torch_native.set_error(Error, torch.OutOfMemoryError)
    return _torch_native


_torch_native = _native_module()
#: The stash's per-tensor work: ferry._torch_native, or its Python path (_PythonStashOps).
_stash_ops: Any = _torch_native or _PythonStashOps
# `to`'s binding glue: ferry._torch_native's entry points for the leaves, the destinations and
# the results where it is built for this torch and CUDA is present, else DLPack's exchange API
# and the caching allocator's Python functions.
def _use_to_glue(native: bool) -> None:
    """Set `to`'s glue: ferry._torch_native's entry points (`native`, where they can serve)
    or DLPack's. The destinations made so far are forgotten, not freed: each takes and hands
    back its blocks through the glue it was made with, on an allocation stream of its own."""
    global _native_to
    with _lock:
        _native_to = native and _torch_native is not None and _get_device is not None and _EXCHANGE is not None
        _alloc_streams.clear()
        _ferry._torch_setup(_torch_native.TO_API if _native_to else None, _EXCHANGE, torch.Tensor,
                            torch.cuda.Stream if _get_device is not None else None)


_native_to = False
_use_to_glue(True)


class Stash:
    """CUDA tensors stashed in pinned host memory by ``ferry.torch.stash``; see there.

    States: *stashed* (the tensors are CPU tensors over the host copy), then *restoring* after
    ``restore`` (device tensors whose bytes arrive on the device), then *restored* once
    ``wait`` ordered a stream after the copy. Not thread-safe: one thread drives a Stash.
    """

    def __init__(self, ops, plan, sizes, offsets, host, host_buffer, device, dev, xfer, ready):
        self._ops = ops                  # _stash_ops at the stash, which made `plan`
        self._plan = plan                # the stashed tensors, by storage (opaque to this class)
        self._sizes: list[int] = sizes   # each storage's bytes
        self._offsets: list[int] = offsets  # and its offset in the host copy
        self._host = host                # pinned uint8 tensor holding every group's bytes
        self._host_buffer = host_buffer  # it, adopted for DMA
        self._device = device
        self._dev = dev
        self._xfer = xfer
        self._ready = ready              # the point at which the host copy is complete
        self._adopted = None             # the restore's destinations (_ferry._Adoptions) until wait()
        self._restored = None            # the point at which the restore's bytes are in place
        self._state = "stashed"

    @property
    def state(self) -> str:
        """"stashed", "restoring" or "restored"."""
        return self._state

    @property
    def nbytes(self) -> int:
        """Bytes of device storage stashed (one per storage, shared by its views)."""
        return sum(self._sizes)

    @property
    def ready(self) -> _ferry.TimelinePoint:
        """The point at which the host copy is complete (its CPU tensors may be read)."""
        return self._ready

    def synchronize(self) -> None:
        """Wait on the host until the host copy is complete: the stashed tensors' CPU data may
        then be read (a checkpoint, say)."""
        self._ready.wait()

    def restore(self, *, target_stream: Any = None) -> None:
        """Copy the state back into fresh device storage allocated on `target_stream`'s pool
        (default: the current stream) and point every stashed tensor at it, in place.

        The copy runs on ferry's transfer stream. It waits for the target's work enqueued
        before the call (the caching allocator's order for the new blocks, which may reuse
        memory the target freed) and for the stash's copy into host memory, and for nothing
        else; the target does not wait for it. Call
        ``wait(stream)`` before a stream reads the tensors (a backward hook, or before
        ``optimizer.step()``): that stream then waits on the device, the host never does.

        Raises:
            ferry.Error: the Stash is not stashed, or `target_stream` is not a stream of the
            tensors' device.
        """
        if self._state != "stashed":
            raise Error("invalid_argument", f"Stash.restore: the stash is {self._state}, not stashed")
        _check_stream("target_stream", target_stream)
        if target_stream is None:
            target_stream = torch.cuda.current_stream(self._device)
        elif torch.device(target_stream.device) != self._device:
            raise Error("invalid_argument",
                        f"Stash.restore: target_stream is a stream of {target_stream.device}, not of {self._device}")
        backend = _gpu_backend()
        owner = _adopted_queue((backend, self._device.index), self._dev, target_stream)
        ops = self._ops
        pointers = ops.restore_alloc(self._plan, target_stream.stream_id, target_stream.device_index,
                                     target_stream.device_type)
        after = owner.mark()  # the new blocks are free in the target's order from here on
        if not self._ready.known_reached:
            self._xfer.executor.wait(self._ready)  # the host copy is written on the stash's queue
        try:
            done, self._adopted = self._xfer._upload_adopted_raw(
                pointers, self._sizes, owner, after, self._host_buffer, self._offsets, "ferry.torch.stash")
        except BaseException:
            ops.drop_blocks(self._plan)
            self._finish()  # the target waits for what was enqueued; the tensors stay on the host
            raise
        ops.repoint_blocks(self._plan)
        self._restored = None if done.empty else done
        if self._restored is not None:
            _restoring[self._device.index] = done
        self._state = "restoring"

    def wait(self, stream: Any = None) -> None:
        """Make `stream` (default: the current stream) wait on the device for the restore, and
        end ferry's use of the restored memory: from then on it is the target stream's like any
        tensor's, and the pinned host memory goes back once the copy completes."""
        if self._state == "stashed":
            raise Error("invalid_argument", "Stash.wait: the stash was not restored (call restore() first)")
        _check_stream("stream", stream)
        if stream is None:
            stream = torch.cuda.current_stream(self._device)
        if self._restored is not None:
            backend = _gpu_backend()
            _adopted_queue((backend, self._device.index), self._dev, stream).wait(self._restored)
        self._finish()
        self._state = "restored"

    def _finish(self) -> None:
        # Releasing an adoption orders its owner (the target) after ferry's copy into it, so the
        # memory is never freed or reused under the copy; the host copy is held until the copy
        # completes.
        if self._adopted is not None:
            self._adopted.release()
        self._adopted = None
        if self._host is not None:
            _hold(self._xfer.executor.mark(), [self._host])
            self._host = None

    def __del__(self):
        if self._adopted is not None:
            try:
                self._finish()
            except Exception:  # pragma: no cover - a closed device at interpreter exit
                pass


_stash_keepers: dict[int, torch.cuda.Stream] = {}


def _stash_keeper(device: torch.device) -> torch.cuda.Stream:
    """The stream a deferred stash records its storages' use on (one per device, running
    nothing but waits for the stashes' copies): the caching allocator hands a block freed with
    such a record out again once the stream's work at the free has completed."""
    with _lock:
        s = _stash_keepers.get(device.index)
        if s is None:
            s = torch.cuda.Stream(device)
            _stash_keepers[device.index] = s
        return s


def stash(tensors: Any, *, stream: Any = None, free: str = "ordered") -> Stash:
    """Stash CUDA tensors (parameters, optimizer state, views of them) in pinned host memory
    and free their device storage, with no host wait and no ``record_stream``.

    - One D2H copy per storage into one pinned host allocation, after the work `stream`
      (default: the current stream) has enqueued so far (and after a restore of the same device
      that no stream waited for yet). The copies run on a transfer stream of ferry's that runs
      only stashes, so a stash and a restore (or ``to``'s uploads) move bytes in both
      directions at once.
    - The device storage is freed at once, and the caching allocator hands the bytes out again
      only after the copy has read them. `stream` must be the stream the storages were
      allocated on (the caching allocator reuses a block in its allocation stream's order), as
      with PyTorch's own ``resize_(0)`` stashing. `free` chooses how:

      - ``"ordered"`` (default): `stream` waits on the device for the copy, and the blocks are
        free in its order at once. The footprint never grows: work enqueued on `stream` after
        the call may reuse the bytes, and therefore runs after the copy.
      - ``"deferred"``: `stream` does not wait. The blocks go back to the caching allocator
        once the copy completes (a stream-use record on a stream of ferry's that waits for the
        copy on the device, as ``record_stream`` would keep them), so work enqueued on
        `stream` after the call overlaps the copy; an allocation made meanwhile takes other
        memory, as it would with ``record_stream``. For steps whose compute after the stash
        allocates little.
    - The tensors keep their identity, dtype, shape, strides and views of one another. While
      stashed they are **CPU tensors over the host copy**: device code that reads one by
      accident raises PyTorch's device-mismatch error instead of reading freed memory, and host
      code may read them once the copy is complete (``Stash.synchronize()``, or the point
      ``Stash.ready``).
    - ``Stash.restore()`` brings them back; ``Stash.wait(stream)`` orders a stream after it.

    Every tensor that uses a stashed storage must be passed: a view, an autograd saved tensor
    or a ``.data`` alias left out would keep pointing at freed memory, so the call refuses a
    storage that anything else still holds.

    Raises:
        ferry.Error: a non-tensor, a tensor not on one CUDA device (a stashed tensor is a CPU
        tensor), a sparse, quantized, nested or meta tensor, a storage held by tensors that
        were not passed, a bad `stream` or `free`. Nothing is copied or freed then.
    """
    items = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
    _check_stream("stream", stream)
    if free not in ("ordered", "deferred"):
        raise Error("invalid_argument", f"ferry.torch.stash: free is {free!r}, not 'ordered' or 'deferred'")
    ops = _stash_ops
    plan, index, keys, sizes, offsets, total = ops.stash_plan(items, ALIGNMENT)
    device = torch.device("cuda", index)
    if stream is None:
        stream = torch.cuda.current_stream(device)
    elif torch.device(stream.device) != device:
        raise Error("invalid_argument", f"ferry.torch.stash: stream is a stream of {stream.device}, not of {device}")
    backend = _gpu_backend()
    dev, xfer = engine(backend, device.index)
    owner = _adopted_queue((backend, device.index), dev, stream)
    _release_reached()
    host = torch.empty(max(total, 1), dtype=torch.uint8, pin_memory=True)
    host_buffer = dev.host_pool.adopt(host.data_ptr(), max(total, 1))
    after = owner.mark()  # the work `stream` enqueued on the tensors so far
    # Each storage's reuse is ordered after its download's read: "ordered" makes `stream` wait
    # for the copy, "deferred" records the storage's use on a stream that waits for it, so the
    # caching allocator keeps the block until that stream's work (the wait) completes.
    ordered = free == "ordered"
    down = _stash_transfer(backend, device.index, dev)
    restoring = _restoring.get(device.index)
    if restoring is not None and not restoring.known_reached:
        down.executor.wait(restoring)  # a restore no stream waited for may still write these storages
    ready = down._download_adopted_raw(keys, sizes, owner, after, host_buffer, offsets, "ferry.torch.stash", ordered)
    if ready.empty:
        ready = down.executor.mark()
    if not ordered:
        keeper = _stash_keeper(device)
        _adopted_queue((backend, device.index), dev, keeper).wait(ready)
        ops.record_streams(plan, keeper.stream_id, keeper.device_index, keeper.device_type)
    # The tensors become CPU tensors over the host copy: their device storages lose their
    # last holders and are freed here, in the order chosen above.
    ops.repoint_host(plan, host)
    return Stash(ops, plan, sizes, offsets, host, host_buffer, device, dev, xfer, ready)
