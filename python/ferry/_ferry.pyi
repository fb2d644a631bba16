"""
ferry's C++ core: devices, queues, timelines, pools, transfers and snapshots. Import the `ferry` package rather than this module.
"""

from collections.abc import Callable, Sequence
import enum
from typing import Any


class Backend(enum.Enum):
    """The backends ferry can be built with."""

    host = 0

    cuda = 1

    hip = 2

    vulkan = 3

    vulkan_cuda = 4

    cuda_vulkan = 5

    null = 6

class QueueRole(enum.Enum):
    """compute (owner) or transfer (executing)."""

    compute = 0

    transfer = 1

class Capabilities:
    """Device capabilities and limits, filled at open."""

    @property
    def name(self) -> str: ...

    @property
    def backend(self) -> Backend: ...

    @property
    def is_gpu(self) -> bool: ...

    @property
    def device_memory_bytes(self) -> int: ...

    @property
    def copy_engines(self) -> int: ...

    @property
    def copy_priorities(self) -> bool: ...

    @property
    def copy_bytes_per_second(self) -> int: ...

    @property
    def dedicated_transfer_queue(self) -> bool: ...

    @property
    def host_memory_registration(self) -> bool: ...

    @property
    def host_memory_adoption(self) -> bool: ...

    @property
    def timeline_export(self) -> bool: ...

    @property
    def min_alignment(self) -> int: ...

    @property
    def max_allocation_bytes(self) -> int: ...

    @property
    def uuid(self) -> list[int]: ...

    @property
    def notes(self) -> str: ...

    def __repr__(self) -> str: ...

class TimelinePoint:
    """
    A point on a timeline: all work up to here. An empty point counts as reached.
    """

    @property
    def value(self) -> int: ...

    @property
    def empty(self) -> bool: ...

    def reached(self) -> bool:
        """Non-blocking query: has the point been reached?"""

    @property
    def known_reached(self) -> bool:
        """
        Whether the point is known reached without asking the device (a query or wait on its semaphore has seen it); False means not known: reached() asks.
        """

    def wait(self, timeout: float = 60.0) -> None:
        """
        Block until reached (the GIL is released); ferry.Error('timeout') after `timeout` seconds.
        """

class TimelineSemaphore:
    """A monotonic 64-bit counter; host and queues signal and wait on it."""

    @property
    def value(self) -> int: ...

    def signal(self, value: int) -> None:
        """Signal from the host; the value must exceed the current one."""

    def wait(self, value: int, timeout: float = 60.0) -> None:
        """Block until the value is >= `value` (the GIL is released)."""

    def at(self, value: int) -> TimelinePoint:
        """The point (this, value)."""

class Queue:
    """A queue of ordered work, with a role and a private timeline."""

    @property
    def role(self) -> QueueRole: ...

    @property
    def id(self) -> int: ...

    @property
    def name(self) -> str: ...

    def wait(self, point: TimelinePoint) -> None:
        """
        Make later work on this queue wait for `point` (on the device; the host is not blocked).
        """

    def signal(self, point: TimelinePoint) -> None:
        """Signal `point` after all work enqueued so far."""

    def mark(self) -> TimelinePoint:
        """A point reached once all work enqueued so far has completed."""

    def synchronize(self, timeout: float = 60.0) -> None:
        """
        Block until all work enqueued so far has completed (the GIL is released).
        """

    def __eq__(self, arg: Queue, /) -> bool: ...

    def __repr__(self) -> str: ...

class QueueBudget:
    """Per-owner pool statistics."""

    @property
    def queue_id(self) -> int: ...

    @property
    def queue_name(self) -> str: ...

    @property
    def active_bytes(self) -> int: ...

    @property
    def free_bytes(self) -> int: ...

    @property
    def peak_active_bytes(self) -> int: ...

class PoolBudget:
    """Cheap pool statistics (every step of a loop may read them)."""

    @property
    def reserved_bytes(self) -> int: ...

    @property
    def active_bytes(self) -> int: ...

    @property
    def requested_bytes(self) -> int: ...

    @property
    def peak_reserved_bytes(self) -> int: ...

    @property
    def peak_active_bytes(self) -> int: ...

    @property
    def stranded_bytes(self) -> int: ...

    @property
    def peak_stranded_bytes(self) -> int: ...

    @property
    def segment_count(self) -> int: ...

    @property
    def allocations(self) -> int: ...

    @property
    def segment_allocations(self) -> int: ...

    @property
    def pending_reuses(self) -> int: ...

    @property
    def immediate_reuses(self) -> int: ...

    @property
    def queues(self) -> list[QueueBudget]: ...

class PoolDetailedStatistics:
    """Slow statistics (walks every block)."""

    @property
    def budget(self) -> PoolBudget: ...

    @property
    def free_blocks(self) -> int: ...

    @property
    def allocated_blocks(self) -> int: ...

    @property
    def pending_free_blocks(self) -> int: ...

    @property
    def largest_free_block(self) -> int: ...

    @property
    def idle_segments(self) -> int: ...

class MemorySnapshot:
    """Segments, blocks and the trace of pool events, copied out of the pool."""

    @property
    def device_name(self) -> str: ...

    @property
    def backend(self) -> str: ...

    @property
    def segment_count(self) -> int: ...

    @property
    def event_count(self) -> int: ...

    def to_json(self) -> str:
        """The documented JSON form (tools/snapshot.schema.json)."""

    def write_json(self, path: str) -> None: ...

    def to_memory_viz_pickle(self) -> bytes:
        """
        The pickle PyTorch's memory_viz reads (torch.cuda.memory._snapshot()'s format).
        """

    def write_memory_viz_pickle(self, path: str) -> None: ...

    def write_chrome_trace(self, path: str) -> None:
        """Chrome trace-event JSON of the queues' activity (opens in Perfetto)."""

    def write_html_report(self, path: str) -> None:
        """A self-contained HTML report of the footprint timelines."""

class BufferView:
    """
    A byte range of a DeviceBuffer (a batch input). Exports DLPack like the buffer.
    """

    @property
    def offset(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def address(self) -> int: ...

    def __dlpack__(self, *, stream: object | None = None, max_version: object | None = None, dl_device: object | None = None, copy: object | None = None) -> object:
        """DLPack export of the range as 1-D uint8 (see DeviceBuffer.__dlpack__)."""

    def __dlpack_device__(self) -> tuple: ...

class DeviceBuffer:
    """
    Device memory with an owner queue: a pool block, or an engine's memory adopted with Device.adopt_memory (never freed by ferry). Dropping the last reference (the handle, every DLPack export) releases it, stream-ordered on the owner.
    """

    @property
    def size(self) -> int: ...

    @property
    def owner(self) -> Queue: ...

    @property
    def address(self) -> int:
        """Device pointer (CUDA/HIP), host pointer (host backend); 0 on Vulkan."""

    @property
    def adopted(self) -> bool: ...

    @property
    def valid(self) -> bool: ...

    @property
    def ready_after(self) -> TimelinePoint: ...

    def release(self) -> TimelinePoint:
        """
        Stream-ordered free on the owner queue; returns the free point (adopted memory: the point after which the engine may reuse it). Refused while DLPack exports are alive.
        """

    def release_after(self, point: TimelinePoint) -> TimelinePoint:
        """Stream-ordered free once the owner has waited for `point`."""

    def release_unordered(self) -> TimelinePoint:
        """
        Adopted memory only: end ferry's use without making the owner wait for a copy in flight; returns the point at which every ferry access completes. The caller orders the memory's reuse after it (see DeviceBuffer::release_unordered in ferry/pool.hpp).
        """

    def view(self, offset: int, size: int) -> BufferView:
        """A byte range of the buffer."""

    def __dlpack__(self, *, stream: object | None = None, max_version: object | None = None, dl_device: object | None = None, copy: object | None = None) -> object:
        """
        DLPack export (versioned when the consumer asks with max_version >= (1, 0)) of the whole buffer as 1-D uint8. `stream` (CUDA/HIP) waits on the device for the owner's work so far and the last copy into the buffer; None or a default stream waits on the host; -1 skips synchronization. On the host backend the host waits. The export shares the buffer: it is released, stream-ordered on the owner, when the handle and every export are gone.
        """

    def __dlpack_device__(self) -> tuple: ...

class HostBuffer:
    """
    Pinned (DMA-able) host memory, Python memory registered with the device, or an engine's page-locked memory adopted with HostPool.adopt. Supports the buffer protocol (memoryview(h), numpy.frombuffer(h, ...)) for filling and reading. Pool and registered memory stays alive while a copy uses it, even after the handle is dropped; adopted memory is the engine's, kept alive by it until each copy's point is reached.
    """

    @property
    def size(self) -> int: ...

    @property
    def address(self) -> int: ...

    @property
    def registered(self) -> bool: ...

    @property
    def adopted(self) -> bool:
        """True for an engine's page-locked memory adopted with HostPool.adopt."""

    def __len__(self) -> int: ...

    def memoryview(self) -> object:
        """A writable memoryview of the bytes (keeps the buffer alive)."""

class DevicePool:
    """The device's stream-ordered memory pool (Device.pool)."""

    def allocate(self, nbytes: int, owner: Queue, tag: str = '', first_writer: Queue | None = None) -> DeviceBuffer:
        """Allocate `nbytes` (> 0) owned by `owner`. `first_writer`: the queue that writes the block first when it is not the owner (a Transfer's executor); the block's ready_after then covers its previous use (AllocationOptions::first_writer)."""

    def budget(self) -> PoolBudget:
        """Cheap statistics."""

    def statistics(self) -> PoolDetailedStatistics:
        """Slow statistics (walks every block)."""

    def reset_peaks(self) -> None: ...

    def trim(self) -> int:
        """Return idle segments to the backend; returns the bytes returned."""

    def validate(self) -> None:
        """
        Check every invariant (ferry.Error('internal_error') names a broken one).
        """

    def snapshot(self) -> MemorySnapshot: ...

    def clear_events(self) -> None: ...

class HostPool:
    """Pinned host memory of a device (Device.host_pool)."""

    def allocate(self, nbytes: int) -> HostBuffer:
        """Allocate `nbytes` (> 0) of pinned host memory."""

    def register(self, memory: object) -> HostBuffer:
        """
        Register a writable contiguous Python buffer for DMA; the result keeps it alive. ferry.Error('unsupported') where the backend cannot register memory.
        """

    def adopt(self, address: int, nbytes: int) -> HostBuffer:
        """
        Adopt `nbytes` at `address`, host memory an engine already page-locked for this device (a pinned torch tensor's data_ptr()), as a HostBuffer that every pinned path copies by DMA directly. ferry never frees it and holds no reference to its owner: keep the memory alive and unchanged until each copy's point is reached. ferry.Error('invalid_argument') for a null address, 0 bytes, a wrapping range or (CUDA/HIP) memory that is not page-locked for the device; ('unsupported') where the backend cannot adopt host memory.
        """

    @property
    def pinned_bytes(self) -> int: ...

class Device:
    """One device opened through one backend."""

    @staticmethod
    def open(backend: Backend = Backend.host, ordinal: int = 0, host_latency_us: int = -1, record_events: bool = True) -> Device:
        """
        Open a device. ferry.Error('unsupported') when the backend was not built or has no device.
        """

    @staticmethod
    def open_default() -> Device:
        """Open the best device present (GPUs first, the host backend last)."""

    @staticmethod
    def count(backend: Backend) -> int:
        """Number of devices a backend sees."""

    @staticmethod
    def built_with(backend: Backend) -> bool:
        """Whether the backend was compiled into this build."""

    @staticmethod
    def runtime_present(backend: Backend) -> bool:
        """Whether the backend was built and the vendor library it opens at run time loads here (libcuda.so.1, libamdhip64, libvulkan.so.1); opening a backend without it raises ferry.Error('unsupported') naming the library."""

    @property
    def backend(self) -> Backend: ...

    @property
    def ordinal(self) -> int: ...

    @property
    def capabilities(self) -> Capabilities: ...

    def queue(self, role: QueueRole) -> Queue:
        """The device's default queue of a role."""

    def create_queue(self, role: QueueRole, name: str = '', priority: int = 0) -> Queue: ...

    def adopt_queue(self, stream: object, role: QueueRole = QueueRole.compute, name: str = '') -> Queue:
        """
        Adopt an engine's stream (an int cudaStream_t/hipStream_t, an object with __cuda_stream__ such as torch.cuda.Stream). ferry never destroys it; keep it alive while ferry uses the queue. The same handle gives the same Queue.
        """

    def adopt_memory(self, pointer: int, size: int, owner: Queue, ready_after: TimelinePoint = ..., tag: str = '', keep: object | None = None, on_release: Callable[[TimelinePoint], None] | None = None) -> DeviceBuffer:
        """
        Adopt an engine's memory (a host pointer on the host backend, a device pointer on CUDA/HIP) as a DeviceBuffer owned by `owner`. ferry never frees it; the engine keeps it allocated until the buffer's release point is reached. `keep` (optional) is held until the buffer is released and its handle and every DLPack export are gone: pass the object that owns the memory (a torch tensor) and its stream-ordered free on the owner then follows the release, which orders the owner after every ferry copy. `on_release` (optional, a callable) is called once, with the GIL, when the handle and every export are gone: with the release point (a TimelinePoint on the owner, empty once the device is closed), before `keep` is dropped. Memory reused on another queue after that point is never reused under a ferry copy or an owner's read before it.
        """

    def create_semaphore(self, initial: int = 0) -> TimelineSemaphore: ...

    @property
    def pool(self) -> DevicePool: ...

    @property
    def host_pool(self) -> HostPool: ...

    @property
    def host_waits(self) -> int: ...

    @property
    def is_open(self) -> bool: ...

    def close(self) -> None:
        """Wait for all work, free everything, invalidate handles. Idempotent."""

    def __eq__(self, arg: Device, /) -> bool: ...

    def __repr__(self) -> str: ...

class Upload:
    """An upload's destination and the point it is ready at."""

    @property
    def buffer(self) -> DeviceBuffer: ...

    @property
    def ready(self) -> TimelinePoint: ...

class UploadBatch:
    """
    A batch upload: one owner-owned buffer holding every input at 256-aligned offsets.
    """

    @property
    def buffer(self) -> DeviceBuffer: ...

    @property
    def offsets(self) -> list[int]: ...

    @property
    def sizes(self) -> list[int]: ...

    @property
    def ready(self) -> TimelinePoint: ...

    @property
    def views(self) -> list[BufferView]:
        """Input i's range of the buffer, as a BufferView (DLPack-exportable)."""

class Priority(enum.Enum):
    """
    A copy's class: bulk (the default) copies keep their order and are cut into pieces that let a copy engine serve other queues; urgent copies run on a queue of their own, never behind bulk pieces, and may complete before bulk copies enqueued earlier.
    """

    bulk = 0

    urgent = 1

class Transfer:
    """
    The transfer engine: copies on an executing queue into memory owned by other queues. Calls are serialized internally and may come from several threads.
    """

    def __init__(self, device: Device, executor: object | None = None, staging_chunk_bytes: int = 16777216, staging_chunks: int = 4, staging: bool = True, staging_threads: int = -1, urgent_executor: object | None = None, bulk_piece_bytes: int = 0) -> None: ...

    @property
    def executor(self) -> Queue: ...

    @property
    def urgent_executor(self) -> Queue:
        """The queue of urgent copies (made now if no urgent call made it yet)."""

    @property
    def bulk_piece_bytes(self) -> int:
        """The most bytes a bulk copy moves between two yield points (0: not cut)."""

    def upload(self, source: object, owner: Queue, *, tag: str = '', overlap: bool = False, owner_waits: bool = True, wait: Sequence[TimelinePoint] = [], signal: Sequence[TimelinePoint] = [], priority: Priority = Priority.bulk) -> Upload:
        """
        Copy host memory to a new device buffer owned by `owner`: a HostBuffer (pinned: DMA from it, kept alive until the copy completes) or any contiguous buffer (pageable: staged through the pinned ring before the call returns). Keyword options (every upload): tag (label of the destination in pool events), overlap (grow the pool rather than wait for the owner's pending free), owner_waits (enqueue owner.wait(ready) in the call; default True), wait (points the copy waits for), signal (user points signalled once the copy is complete), priority (Priority.bulk, the default, or Priority.urgent: see Priority).
        """

    def upload_batch(self, sources: Sequence[object], owner: Queue, *, tag: str = '', overlap: bool = False, owner_waits: bool = True, wait: Sequence[TimelinePoint] = [], signal: Sequence[TimelinePoint] = [], priority: Priority = Priority.bulk) -> UploadBatch:
        """
        Upload many contiguous buffers (empty ones allowed) in one call into one owner-owned allocation, staged through the pinned ring; the sources may be reused when it returns.
        """

    def upload_into(self, source: object, destination: DeviceBuffer, offsets: object | None = None, *, owner_waits: bool = True, wait: Sequence[TimelinePoint] = [], signal: Sequence[TimelinePoint] = [], destination_unused: bool = False, source_offset: int = 0, size: int | None = None, priority: Priority = Priority.bulk) -> TimelinePoint:
        """
        Copy into a caller-supplied destination: a HostBuffer (pinned: DMA from it; `offsets`, when given, is the one destination offset it goes to, the other bytes are kept), or a list of contiguous buffers placed at `offsets` (staged; none may be empty). The executor waits for the destination owner's work so far (only for its ready_after and ferry's earlier copies with destination_unused, the caller's guarantee that nothing used the buffer since its allocation: UploadIntoOptions::destination_unused); the owner waits for the copy when owner_waits. Returns the point at which every byte is in place.
        """

    def download(self, source: DeviceBuffer, destination: object, offset: int = 0, *, wait: Sequence[TimelinePoint] = [], signal: Sequence[TimelinePoint] = [], priority: Priority = Priority.bulk) -> object:
        """
        Copy a device buffer to host memory. A HostBuffer (pinned) destination returns the point to wait for before reading; any writable contiguous buffer (pageable) blocks until the bytes are there (the GIL is released) and returns None.
        """

    def download_batch(self, batch: UploadBatch, destinations: Sequence[object]) -> None:
        """
        Download a batch's inputs into writable buffers of their sizes (blocking).
        """

    def copy(self, source: DeviceBuffer, destination: DeviceBuffer, nbytes: int = 0, *, priority: Priority = Priority.bulk) -> TimelinePoint:
        """Device-to-device copy (0 = all of source)."""

    def synchronize(self, timeout: float = 60.0) -> None:
        """Host wait for every copy enqueued so far (the GIL is released)."""

    def close(self) -> None:
        """Wait for the in-flight copies and free the staging ring. Idempotent."""

def backend_name(backend: Backend) -> str: ...

def parse_backend(name: str) -> Backend: ...

class _torch:
    """ferry.torch's glue (python/src/torch/); not a public API: ferry.torch is its one caller."""
    ALIGNMENT: int
    DMA_MIN_BYTES: int

    class ReleasePoints:
        """The release points of the ranges let go of on one target stream."""
        def __init__(self) -> None: ...
        def wait_for(self, pointer: int, nbytes: int) -> TimelinePoint | None: ...
        def record(self, pointer: int, nbytes: int, point: TimelinePoint) -> None: ...
        @property
        def pending(self) -> int: ...

    class Adoptions:
        """Engine ranges adopted together by one batched call."""
        def release(self) -> TimelinePoint: ...
        def __len__(self) -> int: ...

    @staticmethod
    def setup(native: Any, tensor_type: type, stream_type: type | None) -> None: ...
    @staticmethod
    def to(transfer: Transfer, leaves: Sequence[Any], device_index: int, target_stream: Any,
           wait_stream: Any) -> list[Any] | int: ...
    @staticmethod
    def to_fast(obj: Any, target_stream: Any, wait_stream: Any) -> Any | None: ...
    @staticmethod
    def forget() -> None: ...
    @staticmethod
    def hold(point: TimelinePoint, tensors: list[Any]) -> None: ...
    @staticmethod
    def release_reached() -> None: ...
    @staticmethod
    def held_count() -> int: ...
    @staticmethod
    def held_clear() -> None: ...
    @staticmethod
    def download_adopted(transfer: Transfer, pointers: Sequence[int], sizes: Sequence[int], owner: Queue,
                         ready_after: TimelinePoint, host: HostBuffer, host_offsets: Sequence[int], tag: str = '',
                         owner_waits: bool = True) -> TimelinePoint: ...
    @staticmethod
    def upload_adopted(transfer: Transfer, pointers: Sequence[int], sizes: Sequence[int], owner: Queue,
                       ready_after: TimelinePoint, host: HostBuffer, host_offsets: Sequence[int],
                       tag: str = '') -> tuple[TimelinePoint, "_torch.Adoptions"]: ...
