# SPDX-License-Identifier: MIT
"""TorchRec's in-place batch copy through ferry: ``pipeline_to`` (``.to``'s arguments plus
``data_copy_stream``) and ``batches``, which hands a train pipeline batches whose ``.to`` is it."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator

import torch

from .._error import Error
from ._engine import check_stream
from ._to import _target, move


def pipeline_to(batch: Any, device: Any, non_blocking: bool = False, data_copy_stream: Any = None,
                *, method: Any = None) -> Any:
    """``batch.to(device, non_blocking)`` as TorchRec's train pipelines call it, with ferry's
    copy: every tensor that ``batch``'s own ``.to`` moves (a tensor, a dataclass, TorchRec's
    ``KeyedJaggedTensor``/``JaggedTensor``/``KeyedTensor``/``Batch``, any ``Pipelineable``)
    is copied in one ferry transfer, and ``batch``'s ``.to`` builds its result from them.

    Args:
        batch: the batch; a tensor, or an object whose ``.to(device, non_blocking=...)`` moves
            its tensors with ``Tensor.to`` (the same tensors in the same order on every call).
        device: the target device ("cuda", "cuda:N", a torch.device, or "cpu").
        non_blocking: False makes the host wait for the copy before returning (as
            ``Tensor.to`` does); True returns at once.
        data_copy_stream: TorchRec's in-place contract (``enable_inplace_copy_batch=True``):
            the results are the memory of the stream current at the call (the training
            stream): one block per leaf from ferry's destinations of that stream, each given
            back in its order when its tensor dies, so no memory is held for a batch once its
            tensors are gone. A copy into a block waits only for that block's release on the
            training stream (for a batch's dense tensors, the forward that read them), so it
            overlaps the rest of the step. The copy runs for ``data_copy_stream``, which
            waits for it on the device; the current stream does not wait: the pipeline's
            ``current.wait_stream(data_copy_stream)`` orders the use. Nobody calls
            ``record_stream``. None: the stream current at the call owns the results and waits
            for the copy (``batch.to(device, non_blocking=True)`` under that stream).
        method: the ``to`` to call instead of ``batch.to`` (an unbound function of its class
            taking ``(batch, device, non_blocking=...)``), for a class whose own ``to`` is this
            function's caller.

    Returns:
        What ``batch.to(device, non_blocking=...)`` returns, over ferry's copies.

    Raises:
        ferry.Error: a device that is not a torch device, a ``non_blocking`` that is not a bool,
        a ``data_copy_stream`` that is not a torch.cuda.Stream of ``device`` (or is given for
        "cpu"), and what ``ferry.torch.to`` refuses.
    """
    dev = _target(device)
    if not isinstance(non_blocking, bool):
        raise Error("invalid_argument",
                    f"ferry.torch.pipeline_to: non_blocking must be a bool, not {type(non_blocking).__name__}")
    check_stream("ferry.torch.pipeline_to", "data_copy_stream", data_copy_stream)
    if data_copy_stream is not None:
        if dev.type == "cpu":
            raise Error("invalid_argument",
                        "ferry.torch.pipeline_to: data_copy_stream is for a cuda device, not 'cpu'")
        if torch.device(data_copy_stream.device) != dev:
            raise Error("invalid_argument", f"ferry.torch.pipeline_to: data_copy_stream is a stream of "
                        f"{data_copy_stream.device}, not of {dev}")
    if method is None and not isinstance(batch, torch.Tensor):
        method = getattr(batch, "to", None)
        if not callable(method):
            raise Error("invalid_argument", f"ferry.torch.pipeline_to: batch ({type(batch).__name__}) has no .to "
                        "method: pass a tensor or a Pipelineable")
    elif method is not None:
        if not callable(method):
            raise Error("invalid_argument",
                        f"ferry.torch.pipeline_to: method must be callable, not {type(method).__name__}")
        unbound = method
        method = lambda d, non_blocking: unbound(batch, d, non_blocking=non_blocking)  # noqa: E731
    if isinstance(batch, torch.Tensor):
        method = None
    if data_copy_stream is None:
        out = move(batch, dev, None, None, method)
        if not non_blocking and dev.type == "cuda":
            torch.cuda.current_stream(dev).synchronize()
        return out
    # The results are the training stream's: ferry's destinations of that stream, one block
    # per leaf, each released in the training stream's order when its tensor dies. The next
    # batch's copy into a released block waits only for that release (the dense tensors' after
    # the forward that read them), not for the training stream's whole queue, so it overlaps
    # the backward. The copy is ordered for the memcpy stream, which is current while the
    # batch's .to builds its result (any work that .to enqueues on the results then follows
    # the copy).
    current = torch.cuda.current_stream(dev)
    with torch.cuda.stream(data_copy_stream):
        out = move(batch, dev, current, data_copy_stream, method)
    if not non_blocking:
        data_copy_stream.synchronize()
    return out


_proxy_class = None


def _proxy() -> type:
    """The batch wrapper class: a dataclass over the batch (so TorchRec's batch-size logging
    walks into it), a ``torchrec.streamable.Pipelineable`` where TorchRec imports (TorchRec's
    pipelines assert it)."""
    global _proxy_class
    if _proxy_class is not None:
        return _proxy_class
    try:
        from torchrec.streamable import Pipelineable as base
    except Exception:  # noqa: BLE001 - without TorchRec the wrapper is a plain object
        base = object

    @dataclasses.dataclass
    class InplaceBatch(base):  # type: ignore[misc, valid-type]
        """One batch whose ``.to(device, non_blocking, data_copy_stream=None)`` is
        ``ferry.torch.pipeline_to`` over the batch's own ``.to``; it returns the batch's own
        type. Other attributes are the batch's."""

        batch: Any

        def to(self, device: Any, non_blocking: bool = False, data_copy_stream: Any = None) -> Any:
            return pipeline_to(self.batch, device, non_blocking, data_copy_stream)

        def record_stream(self, stream: Any) -> None:
            self.batch.record_stream(stream)

        def pin_memory(self) -> Any:
            return type(self)(self.batch.pin_memory())

        def __getattr__(self, name: str) -> Any:
            if name == "batch":  # not yet set (copy, pickle)
                raise AttributeError(name)
            return getattr(self.batch, name)

    InplaceBatch.__module__ = "ferry.torch"
    InplaceBatch.__qualname__ = "InplaceBatch"
    _proxy_class = InplaceBatch
    return InplaceBatch


def batches(source: Iterable[Any]) -> Iterator[Any]:
    """The batches of `source` (a DataLoader, an iterator), each wrapped so that a TorchRec
    train pipeline's ``batch.to(device, non_blocking=..., data_copy_stream=...)`` is
    ``ferry.torch.pipeline_to``: ``pipeline.progress(ferry.torch.batches(dataloader))``. The
    pipeline's model receives what the batch's own ``.to`` returns, over ferry's copies. None
    items pass through unwrapped."""
    try:
        it = iter(source)
    except TypeError:
        raise Error("invalid_argument",
                    f"ferry.torch.batches: source must be iterable, not {type(source).__name__}") from None
    return _wrapped(it)


def _wrapped(it: Iterator[Any]) -> Iterator[Any]:
    wrap = _proxy()
    for b in it:
        yield b if b is None else wrap(b)
