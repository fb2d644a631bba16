#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Where the host time of one ``ferry.torch.to`` call of a pinned tensor goes, on CUDA: the
whole call (its result dropped at once, or kept), the binding call alone (the general one and
the one-tensor entry), and each part the binding does, timed alone, beside
``Tensor.to(non_blocking=True)``. It names the glue in use (ferry._torch_native's entry points,
or DLPack and the allocator's Python functions; ``FERRY_TORCH_NATIVE=0`` picks the latter).

    PYTHONPATH=build/python python3 lab/python/call_breakdown.py [BYTES]   (default 64 MiB)

Each row is the median of 300 calls after a warm-up; the GPU is synchronized every 64 calls,
outside the timing. Private parts of ferry.torch are timed, so this tool follows them. An
extension built with ``-Dcpp_args=-DFERRY_TORCH_PHASES`` also prints the binding's own split of
the call into its parts (the mean host time of each per call).
"""
import statistics
import sys
import time

import torch

import ferry.torch as ft
from ferry import _ferry

if not torch.cuda.is_available():
    sys.exit("call_breakdown.py needs a CUDA device")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 64 << 20
t = torch.empty(N, dtype=torch.uint8).pin_memory()
small = torch.arange(30, dtype=torch.float32).pin_memory()
dev, xfer = ft.engine(_ferry.Backend.cuda, 0)
print(f"torch {torch.__version__}, glue: {'ferry._torch_native' if ft._native_to else 'DLPack'}")
h = torch._C._cuda_getCurrentRawStream(0)
dest = ft._destinations(0, h)
alloc_stream = ft._allocation_stream_of(0, h).alloc.cuda_stream
keep = []

def med(fn, calls=300, sync_every=64):
    for _ in range(30):
        fn()
    torch.cuda.synchronize(); keep.clear()
    ts = []
    for i in range(calls):
        if i and i % sync_every == 0:
            torch.cuda.synchronize(); keep.clear()
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    torch.cuda.synchronize(); keep.clear()
    return statistics.median(ts) * 1e6

raw_alloc = torch._C._cuda_cudaCachingAllocator_raw_alloc
raw_delete = torch._C._cuda_cudaCachingAllocator_raw_delete
q = ft._adopted_queue((_ferry.Backend.cuda, 0), dev, torch.cuda.current_stream())
rows = [
    ("ft.to big, dropped", lambda: ft.to(t, "cuda")),
    ("ft.to big, kept", lambda: keep.append(ft.to(t, "cuda"))),
    ("ft.to small, dropped", lambda: ft.to(small, "cuda")),
    ("_torch_to big, dropped", lambda: _ferry._torch_to(xfer, ft._EXCHANGE, [t], dest, 0, h, h)),
    ("_torch_to big, kept", lambda: keep.append(_ferry._torch_to(xfer, ft._EXCHANGE, [t], dest, 0, h, h))),
    ("_torch_to_fast big, dropped", lambda: _ferry._torch_to_fast(t, None, None, -1 if ft._native_to else 0)),
    ("Tensor.to big, dropped", lambda: t.to("cuda", non_blocking=True)),
    ("Tensor.to small, dropped", lambda: small.to("cuda", non_blocking=True)),
    ("host_pool.adopt", lambda: dev.host_pool.adopt(t.data_ptr(), N)),
    ("raw_alloc+delete", lambda: raw_delete(raw_alloc(N, alloc_stream))),
    ("destinations allocate+release", lambda: dest.release(dest.allocate(N)[0], N, q.mark())),
    ("adopt_memory+release", lambda: adopt_rel()),
    ("getDevice+rawstream", lambda: (torch._C._cuda_getDevice(), torch._C._cuda_getCurrentRawStream(0))),
    ("q.mark", lambda: q.mark()),
    ("q.mark().reached()", lambda: q.mark().reached()),
]
ptr = raw_alloc(N, alloc_stream)
def adopt_rel():
    b = dev.adopt_memory(ptr, N, q)
    b.release()
hb = dev.host_pool.adopt(t.data_ptr(), N)
def adopt_up_rel():
    b = dev.adopt_memory(ptr, N, q)
    xfer.upload_into(hb, b, 0, owner_waits=True, destination_unused=True)
    b.release()
rows.append(("adopt+upload_into+release", adopt_up_rel))
for name, fn in rows:
    print(f"{name:34} {med(fn):8.2f} us", flush=True)
raw_delete(ptr)
if hasattr(_ferry, "_torch_phases"):
    for name, fn in rows[3:6]:
        _ferry._torch_phases()  # reset: the sums below are this timing's, its warm-up included
        med(fn)
        print(f"-- the binding's parts, {name} (mean per call)")
        for part, ns, calls in _ferry._torch_phases():
            print(f"   {part:44} {ns / 1000:8.2f} us  ({calls} calls)")
