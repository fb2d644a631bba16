# SPDX-License-Identifier: MIT
"""The engines ferry.torch shares between calls: one ferry device and Transfer per backend
and ordinal, the stashes' download Transfers, PyTorch's half of the glue
(``ferry._torch_native``) and ferry's (``ferry._ferry._torch``)."""

from __future__ import annotations

import atexit
import threading
from typing import Any

import torch

from .. import _ferry
from .._error import Error


def _load_native() -> Any:
    """ferry._torch_native, PyTorch's half of the glue, built against the running torch's C++
    ABI; a ferry.Error names what to do where it is missing or built for another torch."""
    try:
        from .. import _torch_native
    except ImportError as exc:
        raise Error("unsupported",
                    f"ferry.torch needs ferry._torch_native, built against the running torch ({torch.__version__}), "
                    f"and this ferry has none ({exc}): build ferry where this torch is importable "
                    "(pip install --no-build-isolation ., or meson setup -Dtorch_native=enabled)") from None
    if _torch_native.TORCH_VERSION != torch.__version__:
        raise Error("unsupported",
                    f"ferry._torch_native was built against torch {_torch_native.TORCH_VERSION}, not the running "
                    f"torch {torch.__version__} (its C++ ABI is that version's): rebuild ferry against this torch "
                    "(pip install --no-build-isolation .)")
    _torch_native.set_error(Error, torch.OutOfMemoryError)
    return _torch_native


native = _load_native()
glue = _ferry._torch
glue.setup(native.TO_API, torch.Tensor, torch.cuda.Stream if torch.cuda.is_available() else None)

_lock = threading.Lock()
_engines: dict[tuple[Any, int], tuple[_ferry.Device, _ferry.Transfer]] = {}


def engine(backend: _ferry.Backend, ordinal: int = 0) -> tuple[_ferry.Device, _ferry.Transfer]:
    """The process's ferry device and transfer engine for a backend and ordinal, opened on
    first use and shared by every ``to`` call (a Transfer serializes its calls). The device
    records pool events when ``ferry.torch.RECORD_EVENTS`` is set at that first use."""
    from . import RECORD_EVENTS
    key = (backend, ordinal)
    with _lock:
        e = _engines.get(key)
        if e is None:
            dev = _ferry.Device.open(backend, ordinal, record_events=bool(RECORD_EVENTS))
            e = (dev, _ferry.Transfer(dev))
            _engines[key] = e
        return e


def adopted_queue(dev: _ferry.Device, stream: Any) -> _ferry.Queue:
    """The Queue of `dev` adopted from `stream` (a torch.cuda.Stream). The device keeps one
    Queue per native handle, so adopting a stream again is a lookup."""
    return dev.adopt_queue(stream, _ferry.QueueRole.compute, "torch target stream")


# A stash's downloads run on a transfer queue of their own, beside the engine's (which runs
# `to`'s uploads and the restores): the device's copy engines then read and write at once, as
# PyTorch's separate D2H and H2D streams do, and a restore never queues behind a stash's copy
# it does not read.
_stash_engines: dict[tuple[Any, int], _ferry.Transfer] = {}
#: Per device index, the point at which the latest restore's copy completes: a stash of
#: tensors whose restore no stream waited for yet must read them after it.
restoring: dict[int, _ferry.TimelinePoint] = {}


def stash_transfer(backend: _ferry.Backend, ordinal: int, dev: _ferry.Device) -> _ferry.Transfer:
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
    glue.release_reached()


def held_sources() -> int:
    """How many pinned source tensors ferry still holds for copies not known to be complete."""
    return glue.held_count()


# What other modules keep of the engines (host memory adopted by their devices), let go of
# when the engines close.
on_close: list = []


def close_engines() -> None:
    """Close every engine ferry.torch opened: wait for their copies, let go of the pinned
    sources held for them, and close their devices, rather than leave open devices to the
    interpreter's teardown, which never closes them. Runs at interpreter exit; a later ``to``
    opens a fresh engine."""
    with _lock:
        engines = list(_engines.values())
        stashes = list(_stash_engines.values())
        _engines.clear()
        _stash_engines.clear()
        restoring.clear()
        glue.forget()
    for xfer in stashes + [x for _, x in engines]:
        xfer.close()  # waits for its in-flight copies, which may still read held sources
    glue.held_clear()
    for forget in on_close:
        forget()
    for dev, _ in engines:
        dev.close()


# Registered after torch's own handlers (torch is imported above), so it runs before them:
# atexit runs handlers last-registered first.
atexit.register(close_engines)


def gpu_backend() -> _ferry.Backend:
    """ferry's backend for PyTorch's GPU: HIP on ROCm builds of PyTorch, else CUDA."""
    return _ferry.Backend.hip if getattr(torch.version, "hip", None) else _ferry.Backend.cuda


def check_stream(fn: str, name: str, stream: Any) -> None:
    """`stream` is None or a torch.cuda.Stream (torch.cuda.ExternalStream included)."""
    if stream is not None and not isinstance(stream, torch.cuda.Stream):
        raise Error("invalid_argument", f"{fn}: {name} is a {type(stream).__name__}, not a torch.cuda.Stream")
