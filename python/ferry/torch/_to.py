# SPDX-License-Identifier: MIT
"""ferry.torch.to: the structure walk, the checks, and the one call into the glue."""

from __future__ import annotations

import collections
import copy as _copy
import dataclasses
import threading
from typing import Any

import torch

from .. import _ferry
from .._error import Error
from ._engine import check_stream, engine, glue, gpu_backend

_Tensor = torch.Tensor
_STRIDED = torch.strided
_CUDA = torch.cuda.is_available()
_current_device = torch._C._cuda_getDevice if _CUDA else None
_to_fast = glue.to_fast
_to = glue.to


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


_original_to = torch.Tensor.to
_DEVICE_NAMES = (torch.device, str)
_PLAIN_TO_KEYWORDS = frozenset(("non_blocking", "copy"))
_capture_local = threading.local()
_capture_lock = threading.Lock()
_capture_users = 0


def _capturing_to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    """``Tensor.to`` while a capture is active in some thread: this thread's capture sees the
    call; any other thread's call is ``Tensor.to`` itself."""
    capture = getattr(_capture_local, "active", None)
    if capture is None:
        return _original_to(self, *args, **kwargs)
    return capture.on_to(self, args, kwargs)


class _ToCapture:
    """Intercepts ``Tensor.to`` calls that name a device, made by this thread while it is
    active: records the tensor (first pass) or hands back its uploaded view (second pass).

    ``Tensor.to`` is replaced on the class while any thread has a capture active (the first to
    enter installs the replacement, the last to leave puts ``Tensor.to`` back), and the
    replacement hands every other thread's call to ``Tensor.to``. A ``TorchFunctionMode`` would
    see the same calls, but its dispatch costs every call microseconds, which a batch of
    hundreds of leaves pays twice (both passes) on the copy call's host time."""

    def __init__(self, owner: str, replacements: list[torch.Tensor] | None = None,
                 seen: list[torch.Tensor] | None = None):
        self.owner = owner  # the type name of the object whose .to runs, for errors
        self.seen: list[torch.Tensor] = [] if seen is None else seen
        self.replacements = replacements
        self.next = 0
        self._outer: Any = None

    def __enter__(self) -> _ToCapture:
        global _capture_users
        with _capture_lock:
            if _capture_users == 0:
                torch.Tensor.to = _capturing_to  # type: ignore[method-assign]
            _capture_users += 1
        self._outer = getattr(_capture_local, "active", None)
        _capture_local.active = self
        return self

    def __exit__(self, *exc: Any) -> None:
        global _capture_users
        _capture_local.active = self._outer
        with _capture_lock:
            _capture_users -= 1
            if _capture_users == 0:
                torch.Tensor.to = _original_to  # type: ignore[method-assign]

    def on_to(self, t: torch.Tensor, args: tuple, kwargs: dict) -> Any:
        if len(args) == 1 and isinstance(args[0], _DEVICE_NAMES) and (
                not kwargs or _PLAIN_TO_KEYWORDS.issuperset(kwargs)):
            dev, dtype = args[0], None  # the common call, to(device, non_blocking=...)
        else:
            dev, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        if dev is None:
            return _original_to(t, *args, **kwargs)
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
            r = _original_to(r, dtype)
        return r


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
        return _flatten_method(obj, to, leaves, device)
    return lambda out: obj


def _flatten_method(obj: Any, to: Any, leaves: list[torch.Tensor], device: torch.device):
    """`_flatten` for an object moved by its own `to` method (called as `to(device,
    non_blocking=True)`): the tensors it moves with ``Tensor.to`` become leaves, and rebuild
    calls it again with the uploaded tensors handed back in their place."""
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


def _pytree_node(kind: type):
    try:
        from torch.utils import _pytree
    except ImportError:  # pragma: no cover - every supported torch has it
        return None
    return _pytree.SUPPORTED_NODES.get(kind)


def _plain(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor's bytes as the glue copies them: contiguous, with no conjugate or negative
    bit (a pageable copy when it is not so already)."""
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    return t.contiguous()


def _copy_leaves(xfer: Any, sources: list[torch.Tensor], index: int, target_stream: Any, wait_stream: Any,
                 packed: list[int]) -> list[torch.Tensor]:
    """The glue's one call for the checked CPU leaves `sources` (leaves `packed` of the
    structure), each made plain first (not contiguous, a conjugate or negative view); a leaf
    the glue cannot read even so is named."""
    sources = [_plain(s) for s in sources]
    out = _to(xfer, sources, index, target_stream, wait_stream)
    if isinstance(out, int):
        t = sources[out]
        raise Error("unsupported", f"ferry.torch.to: leaf {packed[out]} ({tuple(t.shape)}, {t.dtype}) is a "
                    f"{type(t).__name__} without plain CPU storage (a tensor subclass with Python dispatch, or a "
                    "functional or fake tensor): move it with Tensor.to")
    return out


def to(obj: Any, device: Any = "cuda", *, target_stream: Any = None, wait_stream: Any = None) -> Any:
    """Move every CPU tensor of `obj` (a tensor or any nested structure) to `device` in one
    ferry transfer; see the package documentation for the rules.

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
            with PyTorch's side-stream copies; each leaf then has a block of its own, released
            when its tensor dies (the results may die apart, as a batch's do in a training
            step), where a call whose target waits puts every leaf in one block. The host never
            waits.

    Returns:
        The same structure with device tensors.

    Raises:
        ferry.Error: bad arguments (a stream that is not a torch.cuda.Stream or is of another
        device) and leaves ferry cannot copy byte for byte (sparse, quantized, meta, nested,
        requiring grad, or without plain storage), before anything is allocated or copied.
    """
    if type(obj) is _Tensor and device == "cuda" and _CUDA:
        # The commonest call, one tensor to the current device, in one binding call, once a
        # call of the general path set the device's engine up.
        out = _to_fast(obj, target_stream, wait_stream)
        if out is not None:
            return out
    check_stream("ferry.torch.to", "target_stream", target_stream)
    check_stream("ferry.torch.to", "wait_stream", wait_stream)
    return move(obj, _target(device), target_stream, wait_stream)


def move(obj: Any, dev_t: torch.device, target_stream: Any, wait_stream: Any, method: Any = None) -> Any:
    """`to` once its streams are known to be None or torch.cuda.Streams and its device is
    resolved; with `method`, `obj` is moved by calling it as its own `to` method."""
    leaves: list[torch.Tensor] = []
    rebuild = _flatten(obj, leaves, dev_t) if method is None else _flatten_method(obj, method, leaves, dev_t)

    cpu = dev_t.type == "cpu"
    if cpu:
        if target_stream is not None or wait_stream is not None:
            raise Error("invalid_argument", "ferry.torch.to: target_stream and wait_stream are for a cuda device, "
                        "not 'cpu'")
        backend, ordinal = _ferry.Backend.host, 0
    else:
        backend, ordinal = gpu_backend(), dev_t.index
        for name, st in (("target_stream", target_stream), ("wait_stream", wait_stream)):
            if st is not None and torch.device(st.device) != dev_t:
                raise Error("invalid_argument", f"ferry.torch.to: {name} is a stream of {st.device}, not of {dev_t}")
    if leaves and (cpu or ordinal == _current_device()):
        # The common call, every leaf a plain CPU tensor: one glue call, which reads every
        # leaf first and declines (an index) before it allocates or copies anything when one
        # is not plain; the checks and conversions below then take the call.
        _, xfer = engine(backend, ordinal)
        out = _to(xfer, leaves, -1 if cpu else ordinal, target_stream, wait_stream)
        if not isinstance(out, int):
            return rebuild(out)
    # Every leaf is checked before anything is allocated or copied. The plain strided CPU
    # tensor (the common leaf) passes one inline test; any other leaf gets the full check,
    # which names what is wrong with it.
    for i, t in enumerate(leaves):
        d = t.device
        if d.type == "cpu" and t.layout is _STRIDED and not (t.requires_grad or t.is_quantized or t.is_nested):
            continue
        if cpu or d != dev_t:
            _check_leaf(i, t)

    results: list[torch.Tensor | None] = [None] * len(leaves)
    packed: list[int] = []  # the CPU leaves, copied by ferry
    for i, t in enumerate(leaves):
        d = t.device
        if d.type == "cpu":
            packed.append(i)
        elif not cpu and d == dev_t:
            results[i] = t  # already there, as Tensor.to returns it
        elif cpu:
            results[i] = t.to(dev_t)
        else:
            with torch.cuda.stream(target_stream or torch.cuda.current_stream(dev_t)):
                results[i] = t.to(dev_t, non_blocking=True)
    glue.release_reached()
    if packed:
        _, xfer = engine(backend, ordinal)
        sources = [leaves[i] for i in packed]
        if cpu:
            out = _copy_leaves(xfer, sources, -1, None, None, packed)
        elif ordinal == _current_device():
            out = _copy_leaves(xfer, sources, ordinal, target_stream, wait_stream, packed)
        else:
            with torch.cuda.device(ordinal):  # the caching allocator takes the current device's streams
                out = _copy_leaves(xfer, sources, ordinal, target_stream, wait_stream, packed)
        for i, v in zip(packed, out):
            results[i] = v
    return rebuild(results)
