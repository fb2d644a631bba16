# SPDX-License-Identifier: MIT
"""ferry.torch.stash: CUDA tensors stashed in pinned host memory and restored, with no host
wait and no ``record_stream``."""

from __future__ import annotations

import threading
from typing import Any

import torch

from .. import _ferry
from .._error import Error
from ._engine import adopted_queue, check_stream, engine, glue, gpu_backend, native, on_close, restoring, stash_transfer

_lock = threading.Lock()


class _HostCopies:
    """The pinned host copies of finished stashes, per device, for the next stash to reuse in
    device order: a copy goes back with the point at which the restore's copy last read it,
    and the next stash's copy into it waits for that point on the device. A host running steps
    ahead of the GPU then needs no new pinned memory per step in flight (page-locking 2 GiB
    takes the host most of a second); it reuses one copy, as a loop that stashes into buffers
    of its own does. A copy that anything else still holds (a CPU view of a stashed tensor
    kept past the restore) is never reused."""

    KEEP = 4  # per device: the sizes a training step stashes

    def __init__(self):
        self._free: dict[int, list] = {}

    def take(self, device_index: int, nbytes: int):
        """(host tensor, its ferry HostBuffer, point to wait for) of at least `nbytes`, or None."""
        with _lock:
            entries = self._free.get(device_index, [])
            # The smallest that fits: a training step's stashes of several sizes each find
            # their own, and a small stash does not take (and hold) a large copy.
            fits = [i for i, e in enumerate(entries) if e[0].numel() >= nbytes]
            if not fits:
                return None
            host, buffer, point = entries.pop(min(fits, key=lambda k: entries[k][0].numel()))
        # One reference is the entry's tensor, one the storage object asked for here; a torch
        # that cannot tell reuses nothing.
        count = getattr(torch._C, "_storage_Use_Count", None)
        if count is None or count(host.untyped_storage()._cdata) > 2:
            _let_go(host, point)  # held elsewhere meanwhile
            return None
        return host, buffer, point

    def give_back(self, device_index: int, host, buffer, point) -> None:
        with _lock:
            entries = self._free.setdefault(device_index, [])
            entries.append((host, buffer, point))
            evicted = entries[:-self.KEEP]
            del entries[:-self.KEEP]
        for host, _, point in evicted:
            _let_go(host, point)

    def clear(self) -> None:
        with _lock:
            self._free.clear()


def _let_go(host, point) -> None:
    """A host copy ferry no longer keeps: held until the restore's copy that reads it completes,
    so that PyTorch's pinned allocator cannot hand it out under that read."""
    glue.hold(point, [host])


_host_copies = _HostCopies()
on_close.append(_host_copies.clear)


class Stash:
    """CUDA tensors stashed in pinned host memory by ``ferry.torch.stash``; see there.

    States: *stashed* (the tensors are CPU tensors over the host copy), then *restoring* after
    ``restore`` (device tensors whose bytes arrive on the device), then *restored* once
    ``wait`` ordered a stream after the copy. Not thread-safe: one thread drives a Stash.
    """

    def __init__(self, plan, sizes, offsets, host, host_buffer, device, dev, xfer, ready):
        self._plan = plan                # the stashed tensors, by storage (opaque to this class)
        self._sizes: list[int] = sizes   # each storage's bytes
        self._offsets: list[int] = offsets  # and its offset in the host copy
        self._host = host                # pinned uint8 tensor holding every group's bytes
        self._host_buffer = host_buffer  # it, adopted for DMA
        self._device = device
        self._dev = dev
        self._xfer = xfer
        self._ready = ready              # the point at which the host copy is complete
        self._adopted = None             # the restore's destinations (glue.Adoptions) until wait()
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
        """Copy the state back into fresh device memory allocated on `target_stream`'s pool
        (default: the current stream), given to each stashed storage, and point every stashed
        tensor at its storage again, in place.

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
        check_stream("Stash.restore", "target_stream", target_stream)
        if target_stream is None:
            target_stream = torch.cuda.current_stream(self._device)
        elif torch.device(target_stream.device) != self._device:
            raise Error("invalid_argument",
                        f"Stash.restore: target_stream is a stream of {target_stream.device}, not of {self._device}")
        owner = adopted_queue(self._dev, target_stream)
        ops = native
        pointers = ops.restore_alloc(self._plan, target_stream.stream_id, target_stream.device_index,
                                     target_stream.device_type)
        after = owner.mark()  # the new blocks are free in the target's order from here on
        if not self._ready.known_reached:
            self._xfer.executor.wait(self._ready)  # the host copy is written on the stash's queue
        try:
            done, self._adopted = glue.upload_adopted(
                self._xfer, pointers, self._sizes, owner, after, self._host_buffer, self._offsets, "ferry.torch.stash")
        except BaseException:
            ops.drop_blocks(self._plan)
            self._finish()  # the target waits for what was enqueued; the tensors stay on the host
            raise
        ops.repoint_blocks(self._plan)
        self._restored = None if done.empty else done
        if self._restored is not None:
            restoring[self._device.index] = done
        self._state = "restoring"

    def wait(self, stream: Any = None) -> None:
        """Make `stream` (default: the current stream) wait on the device for the restore, and
        end ferry's use of the restored memory: from then on it is the target stream's like any
        tensor's, and the pinned host memory goes back once the copy completes."""
        if self._state == "stashed":
            raise Error("invalid_argument", "Stash.wait: the stash was not restored (call restore() first)")
        check_stream("Stash.wait", "stream", stream)
        if stream is None:
            stream = torch.cuda.current_stream(self._device)
        if self._restored is not None:
            adopted_queue(self._dev, stream).wait(self._restored)
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
            _host_copies.give_back(self._device.index, self._host, self._host_buffer, self._xfer.executor.mark())
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

    - Each storage object stays the same: the stash lets go of its memory and the restore gives
      it new memory with the bytes. So whatever else holds a stashed storage and was not passed
      (a view, a ``.data`` alias, an autograd saved tensor, a flat parameter buffer) follows it
      as it follows ``resize_(0)`` and ``resize_`` back: while stashed it is a CUDA tensor over
      an empty storage, which must not be read (as with PyTorch's own stashing), and after
      ``restore`` it reads and writes the restored state, sharing it with the passed tensors.
      Pass a tensor to have it readable on the host while stashed and refused on the device.

    Raises:
        ferry.Error: a non-tensor, a tensor not on one CUDA device (a stashed tensor is a CPU
        tensor), a view of a storage that is stashed, a sparse, quantized, nested or meta
        tensor, a bad `stream` or `free`. Nothing is copied or freed then.
    """
    items = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
    check_stream("ferry.torch.stash", "stream", stream)
    if free not in ("ordered", "deferred"):
        raise Error("invalid_argument", f"ferry.torch.stash: free is {free!r}, not 'ordered' or 'deferred'")
    ops = native
    plan, index, keys, sizes, offsets, total = ops.stash_plan(items, glue.ALIGNMENT)
    device = torch.device("cuda", index)
    if stream is None:
        stream = torch.cuda.current_stream(device)
    elif torch.device(stream.device) != device:
        raise Error("invalid_argument", f"ferry.torch.stash: stream is a stream of {stream.device}, not of {device}")
    backend = gpu_backend()
    dev, xfer = engine(backend, device.index)
    owner = adopted_queue(dev, stream)
    glue.release_reached()
    host_bytes = max(total, 1)
    reused = _host_copies.take(device.index, host_bytes)
    if reused is None:
        host = torch.empty(host_bytes, dtype=torch.uint8, pin_memory=True)
        host_buffer = dev.host_pool.adopt(host.data_ptr(), host_bytes)
        read_until = None
    else:
        host, host_buffer, read_until = reused
    after = owner.mark()  # the work `stream` enqueued on the tensors so far
    # Each storage's reuse is ordered after its download's read: "ordered" makes `stream` wait
    # for the copy, "deferred" records the storage's use on a stream that waits for it, so the
    # caching allocator keeps the block until that stream's work (the wait) completes.
    ordered = free == "ordered"
    down = stash_transfer(backend, device.index, dev)
    pending = restoring.get(device.index)
    if pending is not None and not pending.known_reached:
        down.executor.wait(pending)  # a restore no stream waited for may still write these storages
    if read_until is not None and not read_until.known_reached:
        down.executor.wait(read_until)  # a reused host copy: the last restore's copy reads it until then
    ready = glue.download_adopted(down, keys, sizes, owner, after, host_buffer, offsets, "ferry.torch.stash", ordered)
    if ready.empty:
        ready = down.executor.mark()
    if not ordered:
        keeper = _stash_keeper(device)
        adopted_queue(dev, keeper).wait(ready)
        ops.record_streams(plan, keeper.stream_id, keeper.device_index, keeper.device_type)
    # The tensors become CPU tensors over the host copy: their device storages lose their
    # last holders and are freed here, in the order chosen above.
    ops.repoint_host(plan, host)
    return Stash(plan, sizes, offsets, host, host_buffer, device, dev, xfer, ready)
