# SPDX-License-Identifier: MIT
"""The engines ferry.torch shares between calls: one ferry device and Transfer per backend
and ordinal, the stashes' download Transfers, PyTorch's half of the glue
(``ferry._torch_native``) and ferry's (``ferry._ferry._torch``)."""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Any

import torch

from .. import _ferry
from .._error import Error


# How ferry._torch_native was found: "prebuilt" (built with ferry, against this torch) or
# "built at first use in DIR" (see _build_native).
native_origin = ""


def _load_native() -> Any:
    """ferry._torch_native, PyTorch's half of the glue, built against the running torch's C++
    ABI: the one built with ferry where it matches the running torch, else one built for it
    at first use (a wheel cannot know the user's torch); a ferry.Error names what to do where
    neither can be had. FERRY_TORCH_NATIVE=build always builds (or reuses a build)."""
    global native_origin
    why = None
    if os.environ.get("FERRY_TORCH_NATIVE", "") != "build":
        try:
            from .. import _torch_native as prebuilt
        except ImportError as exc:
            why = f"this ferry has no ferry._torch_native ({exc})"
        else:
            if prebuilt.TORCH_VERSION == torch.__version__:
                native_origin = "prebuilt"
                prebuilt.set_error(Error, torch.OutOfMemoryError)
                return prebuilt
            why = f"this ferry's ferry._torch_native was built against torch {prebuilt.TORCH_VERSION}"
    else:
        why = "FERRY_TORCH_NATIVE=build"
    module, directory = _build_native(why)
    native_origin = f"built at first use in {directory}"
    module.set_error(Error, torch.OutOfMemoryError)
    return module


def _native_cache(sources: list[str]) -> str:
    """The directory of the build for these sources, this torch and this Python:
    FERRY_TORCH_NATIVE_CACHE, or ferry/torch-native under XDG_CACHE_HOME (~/.cache)."""
    import hashlib
    base = os.environ.get("FERRY_TORCH_NATIVE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "ferry", "torch-native")
    digest = hashlib.sha256()
    for path in sources:
        with open(path, "rb") as fh:
            digest.update(fh.read())
    tag = f"torch{torch.__version__}-py{sys.version_info[0]}{sys.version_info[1]}-{digest.hexdigest()[:16]}"
    return os.path.join(base, "".join(c if c.isalnum() or c in ".-_" else "_" for c in tag))


def _build_native(why: str) -> tuple[Any, str]:
    """ferry._torch_native compiled against the running torch with its C++ extension builder
    (a C++20 compiler and ninja), cached per source, torch and Python version; later imports
    load the cached build at once. The sources ship with the package (torch/_native/)."""
    from torch.utils import cpp_extension
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native")
    source = os.path.join(here, "native.cpp")
    if not os.path.exists(source):
        raise Error("unsupported", f"ferry.torch needs ferry._torch_native for torch {torch.__version__}: {why}, "
                    f"and its sources are not beside the package ({here}): reinstall ferry")
    symbols = os.path.join(here, "extension.map")
    if not os.path.exists(symbols):
        symbols = None
    directory = _native_cache([source, os.path.join(here, "native_api.h")] + ([symbols] if symbols else []))
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise Error("unsupported", f"ferry.torch needs ferry._torch_native for torch {torch.__version__} ({why}); "
                    f"its build directory {directory} cannot be made ({exc}): set FERRY_TORCH_NATIVE_CACHE to a "
                    "writable directory") from None
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    # ninja hands the flags to a shell, so the string literal's quotes are escaped.
    cflags = ["-O2", "-std=c++20", "-fvisibility=hidden", f'-DFERRY_TORCH_VERSION=\\"{torch.__version__}\\"']
    include = [here]
    # The module exports PyInit__torch_native alone (extension.map says why): a toolchain that
    # links libstdc++ statically would otherwise export its copy of the C++ runtime.
    ldflags = [f"-Wl,--version-script={symbols}"] if symbols and sys.platform.startswith("linux") else []
    cuda_include = _cuda_headers() if torch.version.cuda else None
    if cuda_include is not None and os.path.exists(os.path.join(torch_lib, "libc10_cuda.so")):
        # The caching allocator's stream-taking entry point, as the prebuilt module has it.
        cflags.append("-DFERRY_TORCH_CUDA_ALLOCATOR=1")
        include.append(cuda_include)
        ldflags += [f"-L{torch_lib}", "-lc10_cuda"]
    try:
        module = cpp_extension.load(name="_torch_native", sources=[source], extra_include_paths=include,
                                    extra_cflags=cflags, extra_ldflags=ldflags, build_directory=directory,
                                    verbose=False)
    except Exception as exc:  # noqa: BLE001 - the compiler's or loader's failure is the reason named
        text = str(exc).strip().splitlines()
        raise Error("unsupported", f"ferry.torch needs ferry._torch_native for torch {torch.__version__} ({why}); "
                    f"building it at first use in {directory} failed (a C++20 compiler, ninja and torch's "
                    f"headers are needed): {' | '.join(text[-6:])}") from None
    if getattr(module, "TORCH_VERSION", None) != torch.__version__:
        raise Error("internal_error", f"ferry._torch_native built in {directory} names torch "
                    f"{getattr(module, 'TORCH_VERSION', None)}, not {torch.__version__}")
    return module, directory


def _cuda_headers() -> str | None:
    """A directory with CUDA's runtime headers (cuda_runtime_api.h), which torch's CUDA
    allocator header includes: the toolkit's, or PyPI's nvidia CUDA runtime package's (torch's
    CUDA wheels depend on it); None where there is none."""
    candidates = []
    from torch.utils import cpp_extension
    home = getattr(cpp_extension, "CUDA_HOME", None)
    if home:
        candidates.append(os.path.join(home, "include"))
    try:
        import nvidia  # the namespace package of PyPI's CUDA wheels
        for root in getattr(nvidia, "__path__", []):
            for sub in ("cuda_runtime", "cu13", "cu12"):
                candidates.append(os.path.join(root, sub, "include"))
    except ImportError:
        pass
    for c in candidates:
        if os.path.exists(os.path.join(c, "cuda_runtime_api.h")):
            return c
    return None


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
