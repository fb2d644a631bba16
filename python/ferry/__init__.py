# SPDX-License-Identifier: MIT
"""ferry: host<->GPU transfers into memory owned by the consuming queue.

The core API mirrors the C++ headers (include/ferry/*.hpp): a ``Device`` opened through a
backend, its ``Queue`` objects (the device's own, or an engine's stream adopted with
``Device.adopt_queue``), ``TimelinePoint`` ordering, the stream-ordered ``DevicePool`` and
pinned ``HostPool``, the ``Transfer`` engine and ``MemorySnapshot``. ``ferry.torch`` moves
PyTorch structures with it.

Every failure raises ``ferry.Error`` with ``.code`` (the ferry::ErrorCode name) and the
caller's ``.filename``/``.lineno``. Calls that copy, stage or wait release the GIL.

Device buffers and batch views export DLPack (``__dlpack__``/``__dlpack_device__``), so
``numpy.from_dlpack(buffer)`` (host backend) or ``torch.from_dlpack(buffer)`` (CUDA) see
ferry's memory in place.
"""

from ._error import Error
from ._ferry import (
    Backend,
    BufferView,
    Capabilities,
    Device,
    DeviceBuffer,
    DevicePool,
    HostBuffer,
    HostPool,
    MemorySnapshot,
    PoolBudget,
    PoolDetailedStatistics,
    Priority,
    Queue,
    QueueBudget,
    QueueRole,
    TimelinePoint,
    TimelineSemaphore,
    Transfer,
    Upload,
    UploadBatch,
    backend_name,
    parse_backend,
)

__all__ = [
    "Backend", "BufferView", "Capabilities", "Device", "DeviceBuffer", "DevicePool",
    "Error", "HostBuffer", "HostPool", "MemorySnapshot", "PoolBudget", "PoolDetailedStatistics",
    "Priority", "Queue", "QueueBudget", "QueueRole", "TimelinePoint", "TimelineSemaphore", "Transfer",
    "Upload", "UploadBatch", "backend_name", "parse_backend",
]
