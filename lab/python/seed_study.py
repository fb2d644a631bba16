#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The seed's copy-strategy study inside PyTorch: one process, one GPU, the same compute for
every strategy, and the bars checked against PyTorch's own copies measured in the same run.

    PYTHONPATH=build/python python3 lab/python/seed_study.py [--quick] [--out DIR]
        [--sizes 64M,512M] [--steps 30] [--large-steps 12] [--strategies LIST]
        [--workloads seed,pipeline] [--orders seed,compute_first,copy_first]
        [--sources pinned,pageable,kjt] [--kjt-gb 1] [--kjt-memory pageable]
        [--profile-steps 3] [--device cuda|cpu]

Strategies (each moves one batch per step to the GPU):

- ``blocking``: ``batch.to("cuda")`` on the main stream (non_blocking=False). It uses no side
  stream, so its call is on the main stream in every order.
- ``side_stream``: ``batch.to("cuda", non_blocking=True)`` under a side stream, then
  ``main.wait_stream(side)`` and ``record_stream(main)`` on every tensor.
- ``preallocated``: the seed's preallocated_non_blocking_copy: destinations allocated once on
  the main stream (one per batch in flight), ``dst.copy_(src, non_blocking=True)`` on a side
  stream that waits for an event recorded after main's last use of that destination; main waits
  for an event recorded after the copy. In the ``seed`` order the side stream waits for main
  (``side.wait_stream(main)``) before the copy, as users write it, and the step's
  ``main.wait_stream(side)`` orders the use.
- ``ferry_torch``: ``ferry.torch.to(batch, "cuda", target_stream=main)`` (``--strategies
  ferry`` selects it): its figures are the order bars below.

Workloads (``--workloads``) and their orders (``--orders``; order is part of the workload):

- ``seed``: compute on the main stream (``--matmuls`` matmuls of ``--matmul-n`` square
  ``--matmul-dtype`` matrices that do not read the batch) runs while the batch is copied,
  then a short pass reads the batch (its sum). Orders:

  - ``seed`` (what users write): the copy call under ``with torch.cuda.stream(side)`` first,
    then the compute enqueued on main, then ``main.wait_stream(side)``, then the read (and
    ``record_stream(main)`` for side_stream). Compute enqueued after the call can overlap the
    copy only if the call leaves the main stream free.
  - ``compute_first``: the compute is enqueued first, then the copy call (on the strategy's own
    streams), then the read.
- ``pipeline`` (TorchRec's TrainPipelineSparseDist): the step's compute reads batch i (the same
  sum, then the matmuls) while batch i+1 is copied; the copy call of batch i+1 is issued before
  the step's compute is enqueued (order ``copy_first``) or after it (``compute_first``).

``--orders`` lists the orders to run; each workload runs those of its own that are listed.

Sources (``--sources``): ``pinned`` and ``pageable`` float32 tensors of each ``--sizes`` entry,
and ``kjt``: a KeyedJaggedTensor-shaped batch (26 features: int64 values, int32 lengths,
float32 weights on half of them, two empty features, a dense block and labels: 67 tensors,
``--kjt-gb`` GiB in all) whose class only implements ``.to()``, as TorchRec's does; its
memory is ``--kjt-memory`` (pageable, pinned, or both).

Figures per strategy, workload, order and source (one line each, on stdout and in
DIR/results.json):

- peak allocated / peak reserved: ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``
  after ``empty_cache`` and ``reset_peak_memory_stats``; ferry's own pool's peak reserved is
  added to peak reserved (and given apart): peak reserved is the footprint. Also
  ``torch.cuda.mem_get_info``'s used bytes, peak over the run's samples less the figure before
  the run, which counts whatever either holds.
- copy GB/s: the strategy's copies alone on an idle GPU, as a burst of back-to-back calls (4
  to 16, about 4 GiB): a CUDA event on the main stream before the first call, one after the
  last copy (main waits for every strategy's copy), so each call's host time overlaps the
  copies before it as in a loop. Also given: one call alone (``--copy-reps`` repetitions,
  median), timed with events around the call on the stream it runs on (the side stream for
  side_stream and preallocated; the main stream for blocking and ferry), which counts the
  host's time in the call before its copy starts. Torch-stream strategies also give the rate
  inside the workload.
- host µs per copy call (``time.perf_counter_ns`` around the call and, when the batch is
  consumed later, around making main wait for it), median over the steps.
- wall ms per step: ``synchronize``, the steps, ``synchronize``, divided by the steps; the
  compute-only step (no copy) and ``step / max(compute-only step, pinned copy time)``.
- kernel overlap: the share of the host-to-device copies' time during which a kernel runs,
  from a CUDA trace of ``torch.profiler`` (CUDA activity only) over a rerun of
  ``--profile-steps`` steps after one unmeasured step: |union of kernel intervals ∩ union of
  HtoD memcpy intervals| / |union of HtoD memcpy intervals|. ferry's copies run on its own
  stream in the same process and appear in the trace as memcpy activities like PyTorch's. The
  reruns come after every timed figure of the study (the profiler's hooks can slow the work
  that follows them), one profiler session per batch, its rows told apart by a marker kernel
  (``torch.cuda._sleep``) alone on the idle GPU before and after each; the trace goes to
  DIR/traces/.

A memory snapshot of every run (``torch.cuda.memory._record_memory_history`` over a short
rerun of ``--snapshot-steps`` steps, then ``_dump_snapshot``; and ferry's pool snapshot in
memory_viz form for ferry strategies) goes to DIR/snapshots/. Progress lines go to stderr.

Bars (PASS/FAIL, measured in the same run):

- Order bars, for the default ferry mode in every workload and order, against the torch
  strategies in the same workload and order: ms per step ≤ 1.02 × min(side_stream's,
  preallocated's); kernel overlap ≥ 0.9 × preallocated's; peak reserved ≤ 1.02 × blocking's.
  The other mode's figures are reported beside them. A bar whose figure is missing (no trace)
  reads ``----`` and is not counted.
- Seed workload, compute_first order: ferry's peak reserved ≤ 1.02 × blocking's and ferry's
  wall per step ≤ 1.02 × side_stream's, for both modes.
- ferry's copy GB/s ≥ 0.98 × torch's pinned ``.to(non_blocking=True)``; from pageable sources
  ferry's host time in the call ≤ 0.25 × and its bandwidth ≥ 4 × torch's pageable
  ``.to(non_blocking=True)``; the KJT-shaped batch in one allocation and one upload per call;
  every strategy's data equal to the source.
- Reported: the pipeline workload's footprint against blocking (seed workload) plus one batch.

``--device cpu`` runs a small smoke mode without CUDA (ferry's host backend, no streams, events
timed on the host, "pinned" sources are pageable, no profiler: kernel overlap is null): it
exercises every code path and writes the same JSON, whose numbers mean nothing. Without CUDA
and without ``--device cpu`` the script exits with status 2 and says so.
"""
from __future__ import annotations

import argparse
import bisect
import contextlib
import gc
import inspect
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import time

import torch

MIB = 1 << 20
GIB = float(1 << 30)
TORCH_STRATEGIES = ("blocking", "side_stream", "preallocated")
# Each ferry strategy by the `mode` of ferry.torch.to it runs: "torch" is the one mode of a
# `to` that takes no `mode` argument (PyTorch's caching allocator).
FERRY_STRATEGIES = {"ferry_torch": "torch"}
ALL_STRATEGIES = TORCH_STRATEGIES + tuple(FERRY_STRATEGIES)
WORKLOADS = ("seed", "pipeline")
ORDERS = ("seed", "compute_first", "copy_first")
# The orders each workload runs, in run order.
WORKLOAD_ORDERS = {"seed": ("seed", "compute_first"), "pipeline": ("compute_first", "copy_first")}
SOURCES = ("pinned", "pageable", "kjt")
KJT_FEATURES = 26
KJT_EMPTY = (7, 19)  # features with no ids in the batch

DEFAULTS = dict(sizes="64M,512M", steps=30, large_steps=12, warmup=2, kjt_gb=1.0, copy_reps=5, snapshot_steps=2,
                profile_steps=3, matmul_n=4096, matmuls=20)
QUICK = dict(sizes="16M,64M", steps=6, large_steps=6, warmup=1, kjt_gb=0.25, copy_reps=3, snapshot_steps=1,
             profile_steps=2, matmul_n=4096, matmuls=20)
# Batches from this size on run min(--steps, --large-steps) steps, as the seed ran 512 MB.
LARGE_BATCH = 256 * MIB

_t_start = time.perf_counter()


def progress(msg):
    print(f"[{time.perf_counter() - _t_start:7.1f} s] {msg}", file=sys.stderr, flush=True)


def parse_size(text):
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    num = t[:-1] if t[-1:] in "KMG" else t
    try:
        v = int(float(num) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"size {text!r} is not a number with an optional K/M/G suffix") from None
    if v <= 0 or v % 4:
        raise argparse.ArgumentTypeError(f"size {text!r} must be a positive multiple of 4 bytes")
    return v


def size_label(n):
    for shift, suffix in ((30, "G"), (20, "M"), (10, "K")):
        if n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return f"{n}B"


def split_list(text, allowed, what):
    items = [s.strip() for s in text.split(",") if s.strip()]
    out = []
    for s in items:
        expanded = list(FERRY_STRATEGIES) if what == "strategy" and s == "ferry" else [s]
        for e in expanded:
            if e not in allowed:
                sys.exit(f"seed_study: unknown {what} {e!r} (choose from {', '.join(allowed)})")
            if e not in out:
                out.append(e)
    if not out:
        sys.exit(f"seed_study: empty {what} list")
    return out


# ---------------------------------------------------------------------------------------------
# Device: CUDA streams and events, or their host stand-ins for the CPU smoke mode.


class _HostEvent:
    """Stands in for torch.cuda.Event on the host: records the host clock."""

    def __init__(self):
        self.t = None

    def record(self, stream=None):
        self.t = time.perf_counter_ns()

    def elapsed_time(self, end):
        return (end.t - self.t) / 1e6


class _HostStream:
    """Stands in for torch.cuda.Stream on the host, where every call has finished on return."""

    def wait_stream(self, other):
        pass

    def wait_event(self, event):
        pass


class Env:
    """What the study uses of the device: main and side streams, events, memory counters."""

    def __init__(self, kind):
        self.cuda = kind == "cuda"
        if self.cuda:
            self.device = torch.device("cuda", torch.cuda.current_device())
            self.main = torch.cuda.current_stream(self.device)
            self.side = torch.cuda.Stream(self.device)
            self.name = torch.cuda.get_device_name(self.device)
        else:
            self.device = torch.device("cpu")
            self.main = _HostStream()
            self.side = _HostStream()
            self.name = "cpu (smoke mode: no GPU, figures are not measurements)"
        self.ferry_dev = None  # ferry's device once a ferry strategy has run

    def stream(self, s):
        return torch.cuda.stream(s) if self.cuda else contextlib.nullcontext()

    def event(self):
        return torch.cuda.Event(enable_timing=True) if self.cuda else _HostEvent()

    def synchronize(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def record_stream(self, t, stream):
        if self.cuda:
            t.record_stream(stream)

    def pinned(self):
        return self.cuda

    def used_bytes(self):
        if not self.cuda:
            return 0
        free, total = torch.cuda.mem_get_info(self.device)
        return total - free

    def reset(self):
        """Frees what earlier runs left and resets every peak counter."""
        gc.collect()
        self.synchronize()
        if self.ferry_dev is not None:
            self.ferry_dev.pool.trim()
            self.ferry_dev.pool.reset_peaks()
            self.ferry_dev.pool.clear_events()
        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)

    def peaks(self):
        """(peak allocated, torch peak reserved, ferry pool peak reserved) since reset()."""
        alloc = resv = 0
        if self.cuda:
            alloc = torch.cuda.max_memory_allocated(self.device)
            resv = torch.cuda.max_memory_reserved(self.device)
        fp = self.ferry_dev.pool.budget().peak_reserved_bytes if self.ferry_dev is not None else 0
        return alloc, resv, fp


# ---------------------------------------------------------------------------------------------
# Batches: a tensor, or a KeyedJaggedTensor-shaped structure that only implements .to().


class KJTLike:
    """A KeyedJaggedTensor-shaped batch: per feature int64 values and int32 lengths, float32
    weights on every other feature, plus a dense block and labels. Like TorchRec's KJT and
    ModelInput it implements ``.to()`` and nothing a structure walker could recognise."""

    def __init__(self, keys, values, lengths, weights, dense, labels):
        self.keys, self.values, self.lengths, self.weights = keys, values, lengths, weights
        self.dense, self.labels = dense, labels

    def map(self, fn):
        return KJTLike(self.keys, [fn(v) for v in self.values], [fn(n) for n in self.lengths],
                       [None if w is None else fn(w) for w in self.weights], fn(self.dense), fn(self.labels))

    def to(self, device, non_blocking=False):
        return self.map(lambda t: t.to(device, non_blocking=non_blocking))

    def leaves(self):
        return [*self.values, *self.lengths, *(w for w in self.weights if w is not None), self.dense, self.labels]


def build_kjt(total_bytes, pinned, batch_size=8192, seed=0):
    g = torch.Generator().manual_seed(seed)
    weighted = [f % 2 == 0 for f in range(KJT_FEATURES)]
    share = [0 if f in KJT_EMPTY else 1 + (f * 7) % 5 for f in range(KJT_FEATURES)]  # uneven features
    fixed = KJT_FEATURES * batch_size * 4 + batch_size * 14 * 4  # lengths, dense, labels
    budget = max(total_bytes - fixed, 0)
    unit = budget / sum(s * (12 if w else 8) for s, w in zip(share, weighted))

    def alloc(n, dtype):
        return torch.empty(n, dtype=dtype, pin_memory=pinned and n > 0)

    values, lengths, weights = [], [], []
    for f in range(KJT_FEATURES):
        n = int(share[f] * unit)
        base, rem = divmod(n, batch_size)
        jitter = torch.randint(0, base // 2 + 1, (batch_size,), generator=g)
        ln = base + jitter - jitter[torch.randperm(batch_size, generator=g)]  # jagged, same sum
        ln[:rem] += 1
        lt = alloc(batch_size, torch.int32)
        lt.copy_(ln)
        v = alloc(n, torch.int64)
        v.random_(0, 1 << 40, generator=g)
        values.append(v)
        lengths.append(lt)
        if weighted[f]:
            w = alloc(n, torch.float32)
            w.uniform_(generator=g)
            weights.append(w)
        else:
            weights.append(None)
    dense = alloc(batch_size * 13, torch.float32).view(batch_size, 13)
    dense.uniform_(generator=g)
    labels = alloc(batch_size, torch.float32)
    labels.uniform_(generator=g)
    return KJTLike([f"f{f}" for f in range(KJT_FEATURES)], values, lengths, weights, dense, labels)


def build_tensor(nbytes, pinned, seed=0):
    t = torch.empty(nbytes // 4, dtype=torch.float32, pin_memory=pinned)
    t.uniform_(generator=torch.Generator().manual_seed(seed))  # every page touched
    return t


def leaves(b):
    return b.leaves() if isinstance(b, KJTLike) else [b]


def nbytes_of(b):
    return sum(t.nbytes for t in leaves(b))


def map_batch(b, fn):
    return b.map(fn) if isinstance(b, KJTLike) else fn(b)


def pinned_twin(b, env):
    """The same batch in pinned memory (the pinned-DMA copy time is the bound's copy term)."""
    if not env.pinned():
        return b
    if all(t.is_pinned() for t in leaves(b) if t.numel()):
        return b
    return map_batch(b, lambda t: t.pin_memory() if t.numel() else t)


def use(b):
    """The short pass that reads the whole batch: one float32 sum per non-empty tensor."""
    if isinstance(b, KJTLike):
        parts = [t.sum(dtype=torch.float32) for t in b.leaves() if t.numel()]
        return torch.stack(parts).sum()
    return b.sum(dtype=torch.float32)


# ---------------------------------------------------------------------------------------------
# Strategies: issue(src) enqueues the copy, acquire() makes the main stream able to use it,
# release() ends main's use of it. In the seed order the step calls issue() under the side
# stream and makes main wait for the side stream itself (main.wait_stream(side)) before
# acquire(p, waited=True), which then does only what remains (record_stream for side_stream).


class Pending:
    __slots__ = ("batch", "slot", "host_ns", "events")

    def __init__(self, batch, slot=None, host_ns=0, events=None):
        self.batch, self.slot, self.host_ns, self.events = batch, slot, host_ns, events


class Strategy:
    #: whether events around the copy on a torch stream time the copy alone inside a workload
    events_in_workload = True

    def __init__(self, env, slots, order=None):
        self.env = env

    def acquire(self, p, waited=False):
        return p.batch

    def release(self, p):
        p.batch = None


class Blocking(Strategy):
    def issue(self, src, ev=None):
        env = self.env
        # No side stream: the copy and its allocation are on main whatever stream is current.
        with env.stream(env.main):
            if ev:
                ev[0].record(env.main)
            d = src.to(env.device)
            if ev:
                ev[1].record(env.main)
        return Pending(d)


class SideStream(Strategy):
    def issue(self, src, ev=None):
        env = self.env
        with env.stream(env.side):
            if ev:
                ev[0].record(env.side)
            d = src.to(env.device, non_blocking=True)
            if ev:
                ev[1].record(env.side)
        return Pending(d)

    def acquire(self, p, waited=False):
        env = self.env
        if not waited:
            env.main.wait_stream(env.side)
        for t in leaves(p.batch):
            env.record_stream(t, env.main)
        return p.batch


class Preallocated(Strategy):
    def __init__(self, env, slots, order=None):
        super().__init__(env, slots, order)
        # The seed order orders the copy by streams, as users write it: the side stream waits
        # for main's work so far (the last use of the destination among it), and the step makes
        # main wait for the side stream. The other orders use the seed's events.
        self.by_streams = order == "seed"
        self.dst = [None] * slots
        self.free = [None] * slots
        self.ready = [env.event() for _ in range(slots)]
        self.next = 0

    def issue(self, src, ev=None):
        env = self.env
        k = self.next % len(self.dst)
        self.next += 1
        if self.dst[k] is None:
            with env.stream(env.main):
                self.dst[k] = map_batch(src, lambda t: torch.empty(t.shape, dtype=t.dtype, device=env.device))
        if self.by_streams:
            env.side.wait_stream(env.main)
        elif self.free[k] is not None:
            env.side.wait_event(self.free[k])
        with env.stream(env.side):
            if ev:
                ev[0].record(env.side)
            for d, s in zip(leaves(self.dst[k]), leaves(src)):
                d.copy_(s, non_blocking=True)
            if ev:
                ev[1].record(env.side)
            self.ready[k].record(env.side)
        return Pending(self.dst[k], slot=k)

    def acquire(self, p, waited=False):
        if not waited:
            self.env.main.wait_event(self.ready[p.slot])
        return p.batch

    def release(self, p):
        e = self.env.event()
        e.record(self.env.main)
        self.free[p.slot] = e
        p.batch = None


class Ferry(Strategy):
    # The copy runs on ferry's transfer stream: events on the main stream bracket it only when
    # main is idle (the isolated copies), not inside a workload.
    events_in_workload = False

    def __init__(self, env, slots, ft, mode, order=None):
        super().__init__(env, slots, order)
        self.ft, self.mode = ft, mode
        # A `to` without a `mode` argument has the one mode, "torch".
        self.kwargs = {"mode": mode} if "mode" in inspect.signature(ft.to).parameters else {}

    def issue(self, src, ev=None):
        env = self.env
        if ev:
            ev[0].record(env.main)
        if env.cuda:
            # Called as PyTorch users call a side-stream copy (TorchRec's pipelines included):
            # under the side stream with target_stream=main, so the side stream waits for the
            # copy and main's compute enqueued after the call does not; acquire() (or the seed
            # order's step) makes main wait for the side stream.
            with env.stream(env.side):
                d = self.ft.to(src, env.device, target_stream=env.main, **self.kwargs)
        else:
            d = self.ft.to(src, "cpu", **self.kwargs)
        if ev:
            ev[1].record(env.main)
        return Pending(d)

    def acquire(self, p, waited=False):
        if not waited and self.env.cuda:
            self.env.main.wait_stream(self.env.side)
        return p.batch


def make_strategy(name, env, slots, ft, order=None):
    if name == "blocking":
        return Blocking(env, slots, order)
    if name == "side_stream":
        return SideStream(env, slots, order)
    if name == "preallocated":
        return Preallocated(env, slots, order)
    s = Ferry(env, slots, ft, FERRY_STRATEGIES[name], order)
    if env.ferry_dev is None:
        from ferry import Backend
        backend, ordinal = Backend.host, 0
        if env.cuda:
            backend = Backend.hip if getattr(torch.version, "hip", None) else Backend.cuda
            ordinal = env.device.index
        env.ferry_dev = ft.engine(backend, ordinal)[0]
    return s


class PlainTo(Strategy):
    """The reference: ``batch.to(device, non_blocking=True)`` on the current stream."""

    def issue(self, src, ev=None):
        env = self.env
        if ev:
            ev[0].record(env.main)
        d = src.to(env.device, non_blocking=True)
        if ev:
            ev[1].record(env.main)
        return Pending(d)


# ---------------------------------------------------------------------------------------------
# Measurements.


class Compute:
    """The step's compute on the main stream: `matmuls` products of two n×n matrices."""

    def __init__(self, env, n, count, dtype):
        self.count = count
        # Allocated in every run, so each strategy's peaks hold the same compute buffers.
        self.a = torch.full((n, n), 1.0 / n, dtype=dtype, device=env.device)
        self.b = torch.full((n, n), 1.0 / n, dtype=dtype, device=env.device)
        self.c = torch.empty(n, n, dtype=dtype, device=env.device)
        self.acc = torch.zeros((), dtype=torch.float32, device=env.device)

    def matmuls(self):
        for _ in range(self.count):
            torch.mm(self.a, self.b, out=self.c)

    def read(self, batch):
        self.acc.add_(use(batch))


# A burst of back-to-back calls moves about this much (4 to 16 calls).
BURST_BYTES = 4 << 30


def burst_gbps(env, strategy, src):
    """GB/s of back-to-back calls, GPU-timed from an event on the idle main stream before the
    first call to one on main after the last copy (main waits for every copy). Each call's
    host time overlaps the copies before it, as in a loop, so the figure is the rate of the
    copies on the device, with one call's enqueue latency in it instead of one per copy."""
    nbytes = nbytes_of(src)
    n = max(4, min(16, BURST_BYTES // max(nbytes, 1)))
    env.synchronize()
    e0, e1 = env.event(), env.event()
    pending = []
    e0.record(env.main)
    for _ in range(n):
        p = strategy.issue(src)
        strategy.acquire(p)
        pending.append(p)
    e1.record(env.main)
    env.synchronize()
    ms = e0.elapsed_time(e1)
    for p in pending:
        strategy.release(p)
    del pending
    return n * nbytes / max(ms, 1e-6) / 1e6


def copy_alone(env, strategy, src, reps):
    """The strategy's copy on an idle GPU: (GB/s of a burst, median host µs per call, median
    GB/s of one call alone). The one-call rate is timed with events on its stream around the
    call, so it counts the host's time in the call before the copy starts (events on an idle
    GPU complete as soon as they are enqueued); the burst's rate does not (burst_gbps)."""
    gbps, host = [], []
    nbytes = nbytes_of(src)
    for r in range(reps + 1):
        env.synchronize()
        ev = (env.event(), env.event())
        t0 = time.perf_counter_ns()
        p = strategy.issue(src, ev)
        strategy.acquire(p)
        t1 = time.perf_counter_ns()
        env.synchronize()
        ms = ev[0].elapsed_time(ev[1])
        strategy.release(p)
        del p
        if r == 0:
            continue  # first use: allocator growth, ferry's engine and staging ring
        gbps.append(nbytes / max(ms, 1e-6) / 1e6)
        host.append((t1 - t0) / 1e3)
    return burst_gbps(env, strategy, src), statistics.median(host), statistics.median(gbps)


def packed_runs(tensors) -> int:
    """How many allocations the non-empty tensors lie in, as runs of packed memory: sorted by
    address, a tensor starting more than one leaf alignment (256 bytes) past the end of those
    before it begins another allocation. Views of one storage and tensors over ranges of
    one block count once either way."""
    spans = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in tensors if t.numel())
    runs, end = 0, None
    for start, stop in spans:
        if end is None or start - end > 256:
            runs += 1
        end = stop if end is None else max(end, stop)
    return runs


def verify(env, strategy, src, ref, ft):
    """One copy compared with the reference copy; for ferry, allocations and uploads per call."""
    uploads = [0]
    patched = []
    glue = sys.modules.get("ferry.torch._to")
    if glue is not None and isinstance(strategy, Ferry):
        # Each call into ferry.torch's glue that copies counts once (the one-tensor entry's
        # None hands the call to the general one; the general one's int asks for plain leaves).
        for fname in ("_to", "_to_fast"):
            orig = getattr(glue, fname)

            def counting(*a, _orig=orig, **k):
                out = _orig(*a, **k)
                uploads[0] += isinstance(out, list) or (out is not None and not isinstance(out, int))
                return out
            setattr(glue, fname, counting)
            patched.append((fname, orig))
    try:
        p = strategy.issue(src)
        d = strategy.acquire(p)
    finally:
        for fname, orig in patched:
            setattr(glue, fname, orig)
    env.synchronize()
    out, want = leaves(d), leaves(ref)
    mismatched = sum(1 for a, b in zip(out, want)
                     if not (a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)))
    mismatched += abs(len(out) - len(want))
    storages = packed_runs(out)
    strategy.release(p)
    del p, d, out
    return {"mismatched_tensors": mismatched, "tensors": len(want), "allocations_per_call": storages,
            "uploads_per_call": uploads[0] if patched else None}


def run_workload(env, name, ft, src, workload, order, steps, warmup, args, record_events=True, window=None):
    """One strategy in one workload and order: returns the step figures (the caller reads the
    peaks). `window`, when given, has start() and stop(): called on the idle device after the
    warmup steps and after the measured steps have completed (the profiled rows' bounds)."""
    slots = 2 if workload == "pipeline" else 1
    strategy = make_strategy(name, env, slots, ft, order)
    comp = Compute(env, args.matmul_n, args.matmuls, args.dtype)
    timed = record_events and strategy.events_in_workload
    host_us, copy_ms = [], []
    used_peak = [env.used_bytes()]
    nbytes = nbytes_of(src)

    def issue():
        ev = (env.event(), env.event()) if timed else None
        t0 = time.perf_counter_ns()
        p = strategy.issue(src, ev)
        p.host_ns = time.perf_counter_ns() - t0
        p.events = ev
        return p

    def acquire(p, waited=False):
        t0 = time.perf_counter_ns()
        if waited:
            env.main.wait_stream(env.side)  # the user's wait, part of the call's host cost
        d = strategy.acquire(p, waited)
        p.host_ns += time.perf_counter_ns() - t0
        return d

    done = []  # pending handles of the measured steps, for their host time and events
    nxt = issue() if workload == "pipeline" else None
    t_start = None
    for i in range(warmup + steps):
        if i == warmup:
            env.synchronize()
            if window is not None:
                window.start()
            t_start = time.perf_counter()
        if workload == "seed" and order == "seed":
            with env.stream(env.side):
                p = issue()
            comp.matmuls()  # on main, enqueued after the call
            d = acquire(p, waited=True)
            comp.read(d)
        elif workload == "seed":
            comp.matmuls()
            p = issue()
            d = acquire(p)
            comp.read(d)
        else:
            p = nxt
            d = acquire(p)
            if order == "copy_first":
                nxt = issue()
            comp.read(d)
            comp.matmuls()
            if order == "compute_first":
                nxt = issue()
        strategy.release(p)
        del d
        if i >= warmup:
            done.append(p)
        del p
        used_peak.append(env.used_bytes())
    env.synchronize()
    wall_ms = (time.perf_counter() - t_start) * 1e3 / steps
    if window is not None:
        window.stop()
    if nxt is not None:
        acquire(nxt)
        strategy.release(nxt)
        nxt = None
    env.synchronize()
    used_peak.append(env.used_bytes())
    for p in done:
        host_us.append(p.host_ns / 1e3)
        if p.events:
            copy_ms.append(p.events[0].elapsed_time(p.events[1]))
    del comp, strategy, done
    gbps = statistics.median(nbytes / max(ms, 1e-6) / 1e6 for ms in copy_ms) if copy_ms else None
    return {"wall_ms_per_step": wall_ms, "host_us_per_call": statistics.median(host_us),
            "host_us_per_call_mean": statistics.fmean(host_us), "copy_gbps_in_workload": gbps,
            "mem_get_info_peak_abs": max(used_peak)}


def compute_only(env, src, steps, warmup, args):
    """The step's kernels with the batch already on the device: no copy."""
    comp = Compute(env, args.matmul_n, args.matmuls, args.dtype)
    d = src.to(env.device)
    for i in range(warmup + steps):
        if i == warmup:
            env.synchronize()
            t0 = time.perf_counter()
        comp.matmuls()
        comp.read(d)
    env.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / steps
    del d, comp
    return ms


def snapshot_run(env, name, ft, src, workload, order, args, stem):
    """A short rerun with PyTorch's memory history (and ferry's pool events) recorded."""
    out = {"snapshot": None, "ferry_snapshot": None}
    if args.snapshot_steps <= 0:
        return out
    env.reset()
    if env.cuda:
        record = torch.cuda.memory._record_memory_history
        kw = {"clear_history": True} if "clear_history" in inspect.signature(record).parameters else {}
        record(enabled="all", context="all", stacks="python", max_entries=200000, **kw)
    try:
        run_workload(env, name, ft, src, workload, order, args.snapshot_steps, 0, args, record_events=False)
        env.synchronize()
        if env.cuda:
            path = args.snapshot_dir / f"{stem}.torch.pickle"
            try:
                torch.cuda.memory._dump_snapshot(str(path))
                out["snapshot"] = str(path)
            except (RuntimeError, OSError) as e:  # a lost snapshot must not end the study
                progress(f"warning: torch memory snapshot {path} not written: {e}")
    finally:
        if env.cuda:
            torch.cuda.memory._record_memory_history(enabled=None)
    if name in FERRY_STRATEGIES and env.ferry_dev is not None:
        path = args.snapshot_dir / f"{stem}.ferry.pickle"
        env.ferry_dev.pool.snapshot().write_memory_viz_pickle(str(path))
        out["ferry_snapshot"] = str(path)
    return out


# ---------------------------------------------------------------------------------------------
# Kernel overlap: from a torch.profiler CUDA trace, the share of the host-to-device copies' time
# during which a kernel runs.

#: The kernel of torch.cuda._sleep: alone on the idle device before and after each profiled
#: row, it bounds the row's events in a trace that holds several rows.
MARKER_KERNEL = "spin_kernel"
MARKER_CYCLES = 1000
# A host-to-device memcpy activity, whatever the profiler's label: "Memcpy HtoD (Pinned ->
# Device)", "Memcpy HtoD (Pageable -> Device)", "Memcpy H2D", ...
_HTOD = re.compile(r"htod|h2d|host\s*to\s*device|(host|pinned|pageable|managed)\s*->\s*device", re.I)


def event_kind(ev):
    """What one chrome-trace event is to the overlap: "marker", "kernel", "htod" (a
    host-to-device memcpy activity) or None (host API calls, other copies, memsets, flows)."""
    if ev.get("ph", "X") != "X" or "ts" not in ev or "dur" not in ev:
        return None
    name = str(ev.get("name", ""))
    cat = str(ev.get("cat", "")).lower()
    if cat == "kernel":
        return "marker" if MARKER_KERNEL in name else "kernel"
    # The memcpy activity itself (category gpu_memcpy), never the runtime or driver call that
    # enqueued it (cudaMemcpyAsync, cuMemcpyHtoDAsync: host time, category cuda_runtime/driver).
    if "memcpy" in cat or name.lower().startswith("memcpy"):
        return "htod" if _HTOD.search(name) else None
    return None


def merge_intervals(intervals):
    """The union of (start, end) intervals as sorted disjoint intervals; empty ones dropped."""
    out = []
    for lo, hi in sorted(intervals):
        if hi <= lo:
            continue
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def intersection_length(a, b):
    """Total length of the intersection of two sorted disjoint interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def kernel_overlap(copies, kernels):
    """(share, copy time, overlapped time): the copies' time is the length of the union of their
    intervals (copies that run at once count once), the overlapped time that of its
    intersection with the union of the kernels' intervals; share is None without copies."""
    c, k = merge_intervals(copies), merge_intervals(kernels)
    copy_t = sum(hi - lo for lo, hi in c)
    both = intersection_length(c, k)
    return (both / copy_t if copy_t > 0 else None), copy_t, both


def trace_event_list(doc):
    """The events of a chrome trace: its "traceEvents", or the document when it is a list."""
    return doc.get("traceEvents", []) if isinstance(doc, dict) else list(doc)


def trace_windows(events):
    """Per profiled row, in run order, the intervals of its events: {"copies": [...], "kernels":
    [...]}, those between the row's start marker and its end marker (events between one row's
    end marker and the next row's start marker belong to no row). Raises ValueError when the
    markers do not come in pairs."""
    marks, spans = [], []
    for ev in events:
        kind = event_kind(ev)
        if kind is None:
            continue
        lo = float(ev["ts"])
        hi = lo + float(ev["dur"])
        (marks if kind == "marker" else spans).append((lo, hi, kind))
    marks.sort()
    if len(marks) % 2:
        raise ValueError(f"{len(marks)} marker kernels: not a start and an end per row")
    bounds = [(marks[i][1], marks[i + 1][0]) for i in range(0, len(marks), 2)]
    starts = [lo for lo, _ in bounds]
    rows = [{"copies": [], "kernels": []} for _ in bounds]
    for lo, hi, kind in spans:
        k = bisect.bisect_right(starts, lo) - 1
        if k < 0 or lo >= bounds[k][1]:
            continue
        rows[k]["copies" if kind == "htod" else "kernels"].append((lo, min(hi, bounds[k][1])))
    return rows


def function_events_to_trace(events):
    """torch.profiler's prof.events() (FunctionEvent objects) as chrome-trace events: the device
    events, memcpy and memset activities by their names, every other one a kernel."""
    out = []
    for e in events:
        if "cuda" not in str(getattr(e, "device_type", "")).lower():
            continue
        low = e.name.lower()
        cat = "gpu_memcpy" if low.startswith("memcpy") else "gpu_memset" if low.startswith("memset") else "kernel"
        tr = e.time_range
        out.append({"ph": "X", "name": e.name, "cat": cat, "ts": tr.start, "dur": tr.end - tr.start})
    return out


class MarkedWindow:
    """A profiled row's bounds: the marker kernel alone on the idle device at start and stop."""

    def __init__(self, env):
        self.env = env

    def mark(self):
        if self.env.cuda:
            torch.cuda._sleep(MARKER_CYCLES)
            self.env.synchronize()

    start = stop = mark


def profiled_windows(prof, path, rows):
    """The rows' windows of one profiler session: from its exported chrome trace (kept at
    `path`), else from prof.events(); None with a warning when neither has a pair of markers
    per row."""
    tried = []
    try:
        prof.export_chrome_trace(str(path))
        with open(path, encoding="utf-8") as f:
            windows = trace_windows(trace_event_list(json.load(f)))
        if len(windows) == rows:
            return windows
        tried.append(f"chrome trace: {len(windows)} marked rows")
    except (OSError, ValueError, RuntimeError) as e:
        tried.append(f"chrome trace: {e}")
    try:
        windows = trace_windows(function_events_to_trace(prof.events()))
        if len(windows) == rows:
            return windows
        tried.append(f"prof.events(): {len(windows)} marked rows")
    except (ValueError, RuntimeError, AttributeError) as e:
        tried.append(f"prof.events(): {e}")
    progress(f"warning: no kernel overlap from {path} ({rows} rows wanted; {'; '.join(tried)})")
    return None


PROFILE_FIELDS = ("kernel_overlap", "profile_copies", "profile_kernels", "profile_copy_us_per_step",
                  "profile_overlap_us_per_step", "trace")


def profile_pass(args, env, ft, batches):
    """Kernel overlap of every row: a rerun of --profile-steps steps (after one unmeasured step)
    per row under torch.profiler with CUDA activity only, one session and trace per batch. It
    runs after every timed figure of the study: the profiler's hooks can slow the work that
    follows them. Without CUDA the reruns run unprofiled (their code paths) and the figures
    stay None."""
    if args.profile_steps <= 0:
        return
    if env.cuda:
        args.trace_dir.mkdir(parents=True, exist_ok=True)
    for (source, mem, size), label, rows in batches:
        if not rows:
            continue
        src = build_source(env, source, mem, size)
        path = args.trace_dir / ("_".join(x for x in (source, mem, size_label(size)) if x) + ".trace.json")
        prof = None
        if env.cuda:
            from torch.profiler import ProfilerActivity, profile
            prof = profile(activities=[ProfilerActivity.CUDA])
        try:
            with prof if prof is not None else contextlib.nullcontext():
                for row in rows:
                    env.reset()
                    run_workload(env, row["strategy"], ft, src, row["workload"], row.get("order"), args.profile_steps,
                                 1, args, record_events=False, window=MarkedWindow(env))
                env.synchronize()
        except RuntimeError as e:  # a profiler that cannot start must not end the study
            progress(f"warning: {label}: profiled reruns failed: {e}")
            prof = None
        del src
        env.reset()
        windows = profiled_windows(prof, path, len(rows)) if prof is not None else None
        for row, w in zip(rows, windows or [None] * len(rows)):
            if w is None:
                continue
            share, copy_t, both = kernel_overlap(w["copies"], w["kernels"])
            row.update(kernel_overlap=share, profile_copies=len(w["copies"]), profile_kernels=len(w["kernels"]),
                       profile_copy_us_per_step=copy_t / args.profile_steps,
                       profile_overlap_us_per_step=both / args.profile_steps, trace=str(path))
        if windows:
            progress(f"{label}: kernel overlap over {args.profile_steps} profiled steps: " +
                     ", ".join(f"{r['workload']}/{r['order']} {r['strategy']} " +
                               ("-" if r["kernel_overlap"] is None else f"{r['kernel_overlap']:.0%}") for r in rows))
            missing = [r for r in rows if not r["profile_copies"]]
            if missing:
                progress(f"warning: {label}: no host-to-device copy in the trace for " +
                         ", ".join(f"{r['workload']}/{r['order']} {r['strategy']}" for r in missing))


# ---------------------------------------------------------------------------------------------
# The study.


def orders_of(args, workload):
    """The orders that `workload` runs: its own orders among --orders, in run order."""
    return [o for o in WORKLOAD_ORDERS[workload] if o in args.orders]


def cases(args):
    """(source, kjt memory or None, size in bytes) per batch, in run order."""
    out = []
    for source in args.sources:
        if source == "kjt":
            for mem in args.kjt_memory:
                out.append(("kjt", mem, int(args.kjt_gb * GIB)))
        else:
            for size in args.sizes:
                out.append((source, None, size))
    return out


def build_source(env, source, mem, size):
    pinned = env.pinned() and (source == "pinned" or mem == "pinned")
    if source == "kjt":
        return build_kjt(size, pinned)
    return build_tensor(size, pinned)


def study(args, env, ft):
    results, references, baselines, checks = [], [], [], []
    batches = []  # ((source, kjt memory, size), label, rows) for the profile pass
    for source, mem, size in cases(args):
        src = build_source(env, source, mem, size)
        nbytes = nbytes_of(src)
        label = batch_name(dict(source=source, size_bytes=nbytes if source == "kjt" else size, kjt_memory=mem))
        steps = args.steps
        if args.large_steps > 0 and (nbytes >= LARGE_BATCH):
            steps = min(steps, args.large_steps)
        key = dict(source=source, size_bytes=nbytes if source == "kjt" else size)
        if mem:
            key["kjt_memory"] = mem
        progress(f"{label}: {len(leaves(src))} tensors, {nbytes / MIB:.1f} MiB, {steps} steps")

        # References: torch's own .to(non_blocking=True) of this source and of its pinned twin.
        env.reset()
        ref_gbps, ref_host, ref_single = copy_alone(env, PlainTo(env, 1), src, args.copy_reps)
        twin = pinned_twin(src, env)
        if twin is src:
            dma_gbps = ref_gbps
        else:
            dma_gbps, _, _ = copy_alone(env, PlainTo(env, 1), twin, args.copy_reps)
        del twin
        references.append(dict(key, name="torch_to_non_blocking", copy_gbps=ref_gbps, host_us_per_call=ref_host,
                               copy_gbps_single_call=ref_single, pinned_dma_gbps=dma_gbps))
        copy_bound_ms = nbytes / (dma_gbps * 1e6)
        env.reset()
        comp_ms = compute_only(env, src, steps, args.warmup, args)
        baselines.append(dict(key, compute_only_ms_per_step=comp_ms, copy_bound_ms=copy_bound_ms))
        progress(f"{label}: torch .to(non_blocking) {ref_gbps:.1f} GB/s, {ref_host:.0f} µs in the call; pinned DMA "
                 f"{dma_gbps:.1f} GB/s; compute-only step {comp_ms:.2f} ms")

        # Data and call-shape check of every strategy, then its copy alone.
        env.reset()
        ref = src.to(env.device)
        env.synchronize()
        alone = {}
        for name in args.strategies:
            c = verify(env, make_strategy(name, env, 1, ft), src, ref, ft)
            checks.append(dict(key, strategy=name, **c))
        del ref
        for name in args.strategies:
            env.reset()
            alone[name] = copy_alone(env, make_strategy(name, env, 1, ft), src, args.copy_reps)
        progress(f"{label}: copies alone (burst GB/s, one call's GB/s, host µs): " +
                 ", ".join(f"{n} {g:.1f} {g1:.1f} {h:.0f}" for n, (g, h, g1) in alone.items()))

        batch_rows = []
        batches.append(((source, mem, size), label, batch_rows))
        for workload in args.workloads:
            for order in orders_of(args, workload):
                for name in args.strategies:
                    env.reset()
                    base_used = env.used_bytes()
                    r = run_workload(env, name, ft, src, workload, order, steps, args.warmup, args)
                    alloc, resv, fresv = env.peaks()
                    stem = "_".join(x for x in (workload, order, source, mem, size_label(key["size_bytes"]), name) if x)
                    snaps = snapshot_run(env, name, ft, src, workload, order, args, stem)
                    bound = max(comp_ms, copy_bound_ms)
                    row = dict(strategy=name, workload=workload, order=order, **key)
                    n_leaves = len(leaves(src))
                    row.update(steps=steps, leaves=n_leaves, peak_allocated_bytes=alloc, peak_reserved_bytes=resv + fresv,
                               torch_peak_reserved_bytes=resv, ferry_pool_peak_reserved_bytes=fresv,
                               mem_get_info_used_bytes=max(r["mem_get_info_peak_abs"] - base_used, 0),
                               mem_get_info_baseline_bytes=base_used,
                               copy_gbps=alone[name][0], copy_host_us=alone[name][1],
                               copy_gbps_single_call=alone[name][2],
                               copy_gbps_in_workload=r["copy_gbps_in_workload"],
                               host_us_per_call=r["host_us_per_call"], host_us_per_call_mean=r["host_us_per_call_mean"],
                               host_us_per_leaf=r["host_us_per_call"] / n_leaves,
                               wall_ms_per_step=r["wall_ms_per_step"], compute_only_ms_per_step=comp_ms,
                               copy_bound_ms=copy_bound_ms, step_over_bound=r["wall_ms_per_step"] / bound, **snaps)
                    row.update(dict.fromkeys(PROFILE_FIELDS), profile_steps=args.profile_steps)
                    results.append(row)
                    batch_rows.append(row)
                    progress(f"{label} {workload}{'/' + order if order else ''} {name}: "
                             f"{row['wall_ms_per_step']:.2f} ms/step ({row['step_over_bound']:.2f} × bound), "
                             f"reserved {row['peak_reserved_bytes'] / GIB:.3f} GiB, "
                             f"mem_get_info +{row['mem_get_info_used_bytes'] / GIB:.3f} GiB, "
                             f"host {row['host_us_per_call']:.0f} µs")
        del src
        env.reset()
    profile_pass(args, env, ft, batches)
    return results, references, baselines, checks


# ---------------------------------------------------------------------------------------------
# Bars.


def batch_name(r):
    if r["source"] == "kjt":
        return f"kjt/{r.get('kjt_memory', 'pageable')} {r['size_bytes'] / GIB:.2f} GiB"
    return f"{r['source']} {size_label(r['size_bytes'])}"


def batch_key(r):
    return r["source"], r["size_bytes"], r.get("kjt_memory")


class Bars:
    """The bars' list: a verdict per bar, with the row it is about."""

    def __init__(self):
        self.items = []

    def add(self, name, value, limit, ok, unit, row, **extra):
        bar = {"name": name, "value": value, "limit": limit, "pass": None if ok is None else bool(ok), "unit": unit,
               "strategy": row["strategy"], "source": row["source"], "size_bytes": row["size_bytes"]}
        for k in ("workload", "order", "kjt_memory"):
            if row.get(k):
                bar[k] = row[k]
        bar.update(extra)
        self.items.append(bar)


def default_strategy(mode):
    """The ferry strategy of ferry.torch.to's default mode (None when unknown)."""
    return next((name for name, m in FERRY_STRATEGIES.items() if m == mode), None)


def default_mode(ft):
    """The mode ferry.torch.to takes when none is given, read from its signature ("torch" when
    it takes no `mode`: its one mode)."""
    try:
        params = inspect.signature(ft.to).parameters
    except (AttributeError, TypeError, ValueError):
        return None
    if "mode" not in params:
        return "torch"
    mode = params["mode"].default
    return mode if isinstance(mode, str) else None


def order_bars(bars, results, rows, mode):
    """The bars of the default mode in every workload and order, against the torch strategies
    in the same workload, order and batch; the other mode's figures reported beside them."""
    default = default_strategy(mode)
    for r in results:
        if r["strategy"] not in FERRY_STRATEGIES:
            continue
        report = r["strategy"] != default
        where = (f"{r['workload']}/{r['order']} {batch_name(r)}: {r['strategy']} "
                 f"({'default mode' if not report else 'not the default mode'})")

        def same(strategy):
            return rows.get((r["workload"], r.get("order"), strategy) + batch_key(r))

        torch_steps = {n: same(n)["wall_ms_per_step"] for n in ("side_stream", "preallocated") if same(n)}
        if torch_steps:
            lim = 1.02 * min(torch_steps.values())
            bars.add(f"{where} ms per step ≤ 1.02 × min({', '.join(torch_steps)})", r["wall_ms_per_step"], lim,
                     r["wall_ms_per_step"] <= lim, "ms", r, report_only=report, family="order",
                     detail=", ".join(f"{n} {v:.3f} ms" for n, v in torch_steps.items()))
        p = same("preallocated")
        if p:
            mine, theirs = r.get("kernel_overlap"), p.get("kernel_overlap")
            lim = None if theirs is None else 0.9 * theirs
            ok = None if mine is None or lim is None else mine >= lim
            bars.add(f"{where} kernel overlap ≥ 0.9 × preallocated's", mine, lim, ok, "share", r,
                     report_only=report, family="order",
                     detail="preallocated " + ("-" if theirs is None else f"{theirs:.1%}"))
        b = same("blocking")
        if b:
            lim = 1.02 * b["peak_reserved_bytes"]
            bars.add(f"{where} peak reserved ≤ 1.02 × blocking's", r["peak_reserved_bytes"], lim,
                     r["peak_reserved_bytes"] <= lim, "bytes", r, report_only=report, family="order",
                     detail=f"blocking {b['peak_reserved_bytes'] / GIB:.3f} GiB")


def compute_bars(results, references, checks, mode="torch"):
    """Every bar's verdict; `mode` is ferry.torch.to's default mode (the order bars' subject)."""
    bars = Bars()
    rows = {(r["workload"], r.get("order"), r["strategy"]) + batch_key(r): r for r in results}

    def seed_row(r, strategy):
        # The seed workload's compute_first rows: the order these bars have always been for.
        return rows.get(("seed", "compute_first", strategy) + batch_key(r))

    order_bars(bars, results, rows, mode)
    for r in results:
        if r["workload"] != "seed" or r.get("order") != "compute_first" or r["strategy"] not in FERRY_STRATEGIES:
            continue
        where = f"seed/compute_first {batch_name(r)}: {r['strategy']}"
        b = seed_row(r, "blocking")
        if b:
            lim = 1.02 * b["peak_reserved_bytes"]
            bars.add(f"{where} peak reserved ≤ 1.02 × blocking", r["peak_reserved_bytes"], lim,
                     r["peak_reserved_bytes"] <= lim, "bytes", r)
        s = seed_row(r, "side_stream")
        if s:
            # The seed's step calls the copy after enqueueing its compute: both modes take a
            # block whose free point ferry knows, so the copy overlaps that compute. Within
            # 2% of the side stream's step, the tolerance of the order bars.
            lim = 1.02 * s["wall_ms_per_step"]
            bars.add(f"{where} wall per step ≤ 1.02 × side_stream's", r["wall_ms_per_step"], lim,
                     r["wall_ms_per_step"] <= lim, "ms", r)

    # The copies alone are measured once per batch and strategy: the seed rows carry them.
    alone = {}
    for r in results:
        alone.setdefault((r["strategy"],) + batch_key(r), dict(r, workload=None, order=None))
    for ref in references:
        pageable = ref["source"] == "pageable" or ref.get("kjt_memory") == "pageable"
        for name in FERRY_STRATEGIES:
            r = alone.get((name,) + batch_key(ref))
            if r is None:
                continue
            where = f"{batch_name(r)}: {name}"
            if not pageable:
                lim = 0.98 * ref["copy_gbps"]
                bars.add(f"{where} copy GB/s ≥ 0.98 × torch pinned .to(non_blocking=True)", r["copy_gbps"], lim,
                         r["copy_gbps"] >= lim, "GB/s", r)
                continue
            lim = 0.25 * ref["host_us_per_call"]
            bars.add(f"{where} host µs in the call ≤ 0.25 × torch pageable .to(non_blocking=True)",
                     r["copy_host_us"], lim, r["copy_host_us"] <= lim, "us", r)
            lim = 4 * ref["copy_gbps"]
            bars.add(f"{where} copy GB/s ≥ 4 × torch pageable .to(non_blocking=True)", r["copy_gbps"], lim,
                     r["copy_gbps"] >= lim, "GB/s", r)

    for c in checks:
        where = f"{batch_name(c)}: {c['strategy']}"
        bars.add(f"{where} data equal to the source (tensors differing)", c["mismatched_tensors"], 0,
                 c["mismatched_tensors"] == 0, "count", c)
        if c["source"] == "kjt" and c["strategy"] in FERRY_STRATEGIES:
            bars.add(f"{where} uploads the {c['tensors']}-tensor structure in one allocation (allocations per call)",
                     c["allocations_per_call"], 1, c["allocations_per_call"] == 1, "count", c)
            if c["uploads_per_call"] is not None:
                bars.add(f"{where} uploads the structure in one call (ferry uploads per call)",
                         c["uploads_per_call"], 1, c["uploads_per_call"] == 1, "count", c)

    # Reported, not a bar of the seed study: every overlapping schedule holds one batch more.
    for r in results:
        b = None
        if r["workload"] == "pipeline":
            b = seed_row(r, "blocking") or rows.get(("seed", "seed", "blocking") + batch_key(r))
        if b:
            lim = 1.02 * (b["peak_reserved_bytes"] + r["size_bytes"])
            bars.add(f"pipeline/{r['order']} {batch_name(r)}: {r['strategy']} peak reserved ≤ 1.02 × "
                     f"(blocking + one batch)", r["peak_reserved_bytes"], lim, r["peak_reserved_bytes"] <= lim,
                     "bytes", r, report_only=True)
    return bars.items


def fmt_value(v, unit):
    if v is None:
        return "-"
    if unit == "bytes":
        return f"{v / GIB:.3f} GiB"
    if unit == "count":
        return str(int(v))
    if unit == "share":
        return f"{v:.1%}"
    return f"{v:.4g} {'µs' if unit == 'us' else unit}"


def print_report(doc):
    print(f"seed study on {doc['device']} (torch {doc['torch']}, ferry {doc.get('ferry_commit') or '?'})")
    print()
    print("references (torch .to(non_blocking=True), copies alone: a burst, and one call):")
    for r in doc["references"]:
        print(f"  {batch_name(r):24} {r['copy_gbps']:7.1f} GB/s  (one call {r['copy_gbps_single_call']:.1f})  "
              f"{r['host_us_per_call']:10.0f} µs in the call  (pinned DMA {r['pinned_dma_gbps']:.1f} GB/s)")
    print()
    hdr = (f"{'workload':22} {'batch':22} {'strategy':13} {'alloc GiB':>9} {'resv GiB':>9} {'used GiB':>9} "
           f"{'copy GB/s':>9} {'1 call':>7} {'host µs':>9} {'µs/leaf':>8} {'ms/step':>8} {'/bound':>6} {'overlap':>7}")
    print("peaks: allocated and reserved (torch's, plus ferry's pool), used = mem_get_info's used bytes above the "
          "run's start; copy GB/s of a burst of copies alone, and of one call alone (its host time included); "
          "host µs per copy call (median) and per leaf tensor of the "
          "batch; ms per step and step / "
          "max(compute-only step, pinned copy); overlap = share of the HtoD copies' time with a kernel running "
          "(profiled rerun)")
    print(hdr)
    print("-" * len(hdr))
    for r in doc["results"]:
        w = r["workload"] + ("/" + r["order"] if r.get("order") else "")
        ov = r.get("kernel_overlap")
        print(f"{w:22} {batch_name(r):22} {r['strategy']:13} {r['peak_allocated_bytes'] / GIB:9.3f} "
              f"{r['peak_reserved_bytes'] / GIB:9.3f} {r['mem_get_info_used_bytes'] / GIB:9.3f} {r['copy_gbps']:9.1f} "
              f"{r['copy_gbps_single_call']:7.1f} "
              f"{r['host_us_per_call']:9.0f} {r['host_us_per_leaf']:8.1f} {r['wall_ms_per_step']:8.2f} "
              f"{r['step_over_bound']:6.2f} {'-' if ov is None else f'{ov:.1%}':>7}")
    met = checked = unmeasured = 0
    mode = doc.get("ferry_default_mode")
    groups = (("order", f"order bars (ferry.torch.to's default mode: mode={mode!r}; the other mode reported):"),
              (None, "bars:"))
    for family, title in groups:
        items = [b for b in doc["bars"] if b.get("family") == family]
        if not items:
            continue
        print()
        print(title)
        for b in items:
            verdict = "----" if b["pass"] is None else ("PASS" if b["pass"] else "FAIL")
            tag = " (report)" if b.get("report_only") else ""
            detail = f"; {b['detail']}" if b.get("detail") else ""
            print(f"  {verdict}{tag} {b['name']}: {fmt_value(b['value'], b['unit'])} "
                  f"(limit {fmt_value(b['limit'], b['unit'])}{detail})")
            if b.get("report_only"):
                continue
            if b["pass"] is None:
                unmeasured += 1
                continue
            checked += 1
            met += bool(b["pass"])
    per_order = {}
    for b in doc["bars"]:
        if b.get("family") == "order" and not b.get("report_only"):
            n = per_order.setdefault(f"{b['workload']}/{b['order']}", [0, 0, 0])
            n[0 if b["pass"] else 1 if b["pass"] is False else 2] += 1
    if per_order:
        print()
        print(f"order bars of the default mode (mode={mode!r}) per order: " + "; ".join(
            f"{o} {n[0]} of {n[0] + n[1]} met" + (f" ({n[2]} not measured)" if n[2] else "")
            for o, n in per_order.items()))
    print(f"{met} of {checked} bars met" + (f", {unmeasured} not measured" if unmeasured else "") +
          (" (cpu smoke mode: not measurements)" if not doc["cuda"] else ""))


def ferry_commit():
    """The commit of the tree that runs: $FERRY_COMMIT when set (a `git archive` copy has no
    git metadata of its own), else HEAD of the repository whose top level holds this script.
    A copy nested inside another checkout reports None rather than that checkout's HEAD."""
    if os.environ.get("FERRY_COMMIT"):
        return os.environ["FERRY_COMMIT"]
    root = pathlib.Path(__file__).resolve().parent.parent.parent

    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    try:
        top = git("rev-parse", "--show-toplevel")
        if not top or pathlib.Path(top).resolve() != root:
            return None
        return git("rev-parse", "--short", "HEAD") or None
    except (OSError, subprocess.SubprocessError):
        return None


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cuda (the study) or cpu (a smoke run of the code paths on ferry's host backend)")
    ap.add_argument("--quick", action="store_true", help=f"small run (< 2 min on an H200): {QUICK}")
    ap.add_argument("--sizes", help=f"tensor batch sizes, K/M/G binary units (default {DEFAULTS['sizes']})")
    ap.add_argument("--steps", type=int, help=f"measured steps per run (default {DEFAULTS['steps']})")
    ap.add_argument("--large-steps", type=int,
                    help=f"steps for batches of {LARGE_BATCH >> 20} MiB or more: min(--steps, this); 0: --steps "
                         f"everywhere (default {DEFAULTS['large_steps']})")
    ap.add_argument("--warmup", type=int, help=f"unmeasured steps first (default {DEFAULTS['warmup']})")
    ap.add_argument("--strategies", default=",".join(ALL_STRATEGIES),
                    help="comma list of " + ", ".join(ALL_STRATEGIES) + " ('ferry' = both ferry modes)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--orders", default=",".join(ORDERS),
                    help="comma list of orders; each workload runs its own among them: seed workload: seed (the call "
                         "under the side stream, then the compute on main, main.wait_stream(side), the read), "
                         "compute_first (the compute, then the call); pipeline: compute_first (the next batch's call "
                         "after the step's compute is enqueued), copy_first (before it)")
    ap.add_argument("--sources", default=",".join(SOURCES))
    ap.add_argument("--kjt-gb", type=float, help=f"KJT-shaped batch size in GiB (default {DEFAULTS['kjt_gb']})")
    ap.add_argument("--kjt-memory", default="pageable", help="pageable, pinned or both (comma list)")
    ap.add_argument("--copy-reps", type=int, help=f"copies alone per strategy (default {DEFAULTS['copy_reps']})")
    ap.add_argument("--snapshot-steps", type=int,
                    help=f"steps of the recorded rerun per run, 0: no snapshots (default {DEFAULTS['snapshot_steps']})")
    ap.add_argument("--profile-steps", type=int,
                    help="steps of the torch.profiler rerun per row for the kernel overlap, after all timed runs; "
                         f"0: no profiling (default {DEFAULTS['profile_steps']})")
    ap.add_argument("--matmul-n", type=int, help=f"matrix size of the compute (default {DEFAULTS['matmul_n']})")
    ap.add_argument("--matmuls", type=int, help=f"matmuls per step (default {DEFAULTS['matmuls']})")
    ap.add_argument("--matmul-dtype", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--rejudge", metavar="RESULTS_JSON",
                    help="judge a results.json again with this version's bars (rewrites its bars; runs nothing)")
    ap.add_argument("--out", default="seed-study", help="output directory (results.json, snapshots/, traces/)")
    args = ap.parse_args(argv)
    preset = QUICK if args.quick else DEFAULTS
    for k, v in preset.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    try:
        args.sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    except argparse.ArgumentTypeError as e:
        ap.error(str(e))
    if not args.sizes and any(s != "kjt" for s in args.sources.split(",")):
        ap.error("--sizes: empty list")
    for k in ("steps", "copy_reps", "matmul_n", "matmuls"):
        if getattr(args, k) < 1:
            ap.error(f"--{k.replace('_', '-')} must be at least 1")
    for k in ("warmup", "large_steps", "snapshot_steps", "profile_steps"):
        if getattr(args, k) < 0:
            ap.error(f"--{k.replace('_', '-')} must not be negative")
    if args.kjt_gb <= 0:
        ap.error("--kjt-gb must be positive")
    args.strategies = split_list(args.strategies, ALL_STRATEGIES, "strategy")
    args.workloads = split_list(args.workloads, WORKLOADS, "workload")
    args.orders = split_list(args.orders, ORDERS, "order")
    for w in args.workloads:
        if not orders_of(args, w):
            ap.error(f"--orders: none of the {w} workload's orders ({', '.join(WORKLOAD_ORDERS[w])}) is listed")
    args.sources = split_list(args.sources, SOURCES, "source")
    args.kjt_memory = split_list(args.kjt_memory.replace("both", "pageable,pinned"), ("pageable", "pinned"),
                                 "kjt memory")
    args.dtype = torch.bfloat16 if args.matmul_dtype == "bf16" else torch.float32
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.rejudge:
        # The stored measurements, judged again by this version's bars: nothing is run.
        path = pathlib.Path(args.rejudge)
        doc = json.loads(path.read_text(encoding="utf-8"))
        doc["bars"] = compute_bars(doc["results"], doc["references"], doc["checks"], doc["ferry_default_mode"])
        path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        print_report(doc)
        print(f"rewrote the bars of {path} ({len(doc['bars'])} bars)")
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"seed_study: CUDA is not available to torch {torch.__version__} (built for CUDA "
              f"{torch.version.cuda or 'none'}): run it on a GPU machine, or pass --device cpu for the host smoke "
              f"run of its code paths", file=sys.stderr)
        return 2
    ft = None
    if any(s in FERRY_STRATEGIES for s in args.strategies):
        try:
            import ferry.torch as ft
            # ferry's pool snapshots of the ferry strategies hold its events.
            ft.RECORD_EVENTS = args.snapshot_steps > 0
        except ImportError as e:
            print(f"seed_study: cannot import ferry.torch ({e}): build with -Dpython=enabled and set "
                  f"PYTHONPATH=<build>/python, or leave the ferry strategies out (--strategies)", file=sys.stderr)
            return 2
    out = pathlib.Path(args.out)
    args.snapshot_dir = out / "snapshots"
    args.snapshot_dir.mkdir(parents=True, exist_ok=True)
    args.trace_dir = out / "traces"
    env = Env(args.device)
    progress(f"device {env.name}, torch {torch.__version__}; strategies {','.join(args.strategies)}; "
             f"workloads {','.join(args.workloads)}; sources {','.join(args.sources)}")
    results, references, baselines, checks = study(args, env, ft)
    mode = default_mode(ft) if ft is not None else None
    if ft is not None and mode is None:
        progress("warning: ferry.torch.to's default mode is not readable from its signature: every order bar is "
                 "reported, none checked")
    doc = {
        "tool": "seed_study",
        "device": env.name,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda": env.cuda,
        "ferry_commit": ferry_commit(),
        "ferry_default_mode": mode,
        "config": {
            "sizes": args.sizes, "steps": args.steps, "large_steps": args.large_steps, "warmup": args.warmup,
            "strategies": args.strategies, "workloads": args.workloads, "orders": args.orders,
            "sources": args.sources, "kjt_gb": args.kjt_gb, "kjt_memory": args.kjt_memory,
            "copy_reps": args.copy_reps, "snapshot_steps": args.snapshot_steps,
            "profile_steps": args.profile_steps, "matmul_n": args.matmul_n,
            "matmuls": args.matmuls, "matmul_dtype": args.matmul_dtype, "quick": args.quick,
        },
        "references": references,
        "compute_only": baselines,
        "checks": checks,
        "results": results,
        "bars": compute_bars(results, references, checks, mode),
        "elapsed_s": time.perf_counter() - _t_start,
    }
    path = out / "results.json"
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print_report(doc)
    print(f"wrote {path} ({len(results)} results, {len(doc['bars'])} bars) in {doc['elapsed_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
