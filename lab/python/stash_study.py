#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Stashing GPU state to pinned host memory and back: ``ferry.torch.stash`` beside the ways
PyTorch users do it today, in one process on one GPU.

    PYTHONPATH=build/python python3 lab/python/stash_study.py [--tensors 64] [--mib 32]
        [--steps 24] [--workloads reuse,compute] [--json FILE] [--snapshot DIR]

The state is ``--tensors`` CUDA tensors of ``--mib`` MiB each (optimizer-state-shaped). Each
step updates the state on the main stream (every step's bytes differ), stashes it, runs a
forward, restores the state and makes the main stream wait for it, then checks every state
tensor's bytes on the GPU (the check is outside the host timings). Two forwards (``Workload``): ``reuse`` allocates blocks of the stashed sizes on the main stream
and writes them at once (the memory the stash freed: the NaN bug's setup); ``compute`` runs
``--matmuls`` bf16 matmuls of ``--matmul-n`` operands allocated once (compute that needs none
of the freed memory). The ways:

- ``record_stream``: EMS's way. Pinned CPU buffers; on a D2H side stream after
  ``wait_stream(main)``, ``copy_(non_blocking=True)``; ``record_stream(d2h)`` then
  ``untyped_storage().resize_(0)``. The restore: ``resize_`` back, H2D ``copy_`` on a side
  stream after ``wait_stream(main)`` and ``wait_stream(d2h)`` (it reads the host copy the
  stash writes), ``main.wait_stream(h2d)``.
- ``host_sync``: the same, with a host ``synchronize()`` of the D2H event before
  ``resize_(0)`` instead of ``record_stream``.
- ``unsafe``: the same with neither (the NaN bug): the freed bytes are reused mid-copy.
- ``ferry``: ``s = ferry.torch.stash(state)``, ``s.restore()``, ``s.wait(main)``.
- ``ferry_deferred``: the same with ``stash(state, free="deferred")``.

Printed per workload and way: peak reserved, host time in the stash and restore calls (median
per step), step time (the wall time of back-to-back steps over their number: the byte check
counts on the device, so no step waits on the host for the one before, as in a training loop;
a study whose every step ends in a host wait hides whatever a way serializes across steps),
the kernel overlap of the D2H and of the H2D copies (the share of their time
during which a kernel runs, from a torch.profiler CUDA trace of one more step), and corrupt
steps. Then the D2H and H2D bandwidth of one stash and one restore of the whole state on an
idle GPU beside torch's pinned ``copy_`` of the same bytes, and the interleaving study: the
main stream's small H2D copies while a bulk restore of ``--tables`` tables of ``--table-mib``
runs, idle, beside torch's one bulk ``copy_`` and its 32 MiB chunks.

Bars (same run), for each ferry way in each workload: peak reserved ≤ 1.02 × ``host_sync``'s;
host time ≤ 1.5 × ``record_stream``'s; corrupt steps 0; no host wait in ferry's calls
(``Device.host_waits``); step time ≤ 1.02 × ``record_stream``'s and ≤ 1.02 × ``host_sync``'s
(the same footprint, with a host wait). ``--trace`` prints what each stream ran in two steps of
every way, from which a serialization shows as a gap. Also stash and restore
bandwidth ≥ 0.95 × torch's pinned ``copy_``.
"""
import argparse
import json
import os
import re
import statistics
import sys
import time


def gib(n):
    return n / (1 << 30)


def make_state(torch, count, nbytes):
    return [torch.full((nbytes,), (i % 250) + 1, dtype=torch.uint8, device="cuda") for i in range(count)]


def update(state):
    """The step's update of the state (an optimizer step), on the main stream before the
    stash: every step's bytes differ, so a restore that reads a host copy the stash has not
    written yet shows as corrupt."""
    for t in state:
        t.add_(1)


def corrupt(torch, state, steps_done, bad):
    """Add to the device counter `bad` the bytes of the state that differ from their value
    after `steps_done` updates, on the main stream: no host wait, so the steps pipeline as a
    training loop's do."""
    for i, t in enumerate(state):
        bad += (t != ((i % 250) + 1 + steps_done) % 256).sum()


class Workload:
    """What a step runs between the stash and the restore.

    - ``reuse``: allocates blocks of the stashed sizes on the main stream and writes them at
      once: the memory the stash freed (the NaN bug's setup).
    - ``compute``: ``matmuls`` bf16 matmuls of ``n`` × ``n`` operands allocated once, before
      the run, into an output allocated once: compute that needs none of the freed memory.
    - ``mixed``: a model's forward: the ``reuse`` allocations, then six ``tanh(x @ w)`` of
      4096² fp32 operands allocated once (compute that follows the reuse, as activations do).
    """

    def __init__(self, torch, kind, count, nbytes, matmuls, n):
        self.torch, self.kind, self.count, self.nbytes, self.matmuls = torch, kind, count, nbytes, matmuls
        if kind == "mixed":
            self.x = torch.randn(4096, 4096, device="cuda") / 64
            self.w = torch.randn(4096, 4096, device="cuda") / 64
        if kind == "compute":
            self.a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            self.b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            self.out = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)

    def forward(self):
        torch = self.torch
        if self.kind in ("reuse", "mixed"):
            activations = [torch.full((self.nbytes,), 0xEE, dtype=torch.uint8, device="cuda")
                           for _ in range(self.count)]
            if self.kind == "mixed":
                y = self.x
                for _ in range(6):
                    y = torch.tanh(y @ self.w)
            del activations
            return
        for _ in range(self.matmuls):
            torch.matmul(self.a, self.b, out=self.out)


def torch_way(torch, way, count, nbytes, work):
    """One step of a PyTorch way, as a closure over its state: returns (state, step), where
    step() runs the stash, the forward and the restore and returns the host µs of the calls."""
    main = torch.cuda.current_stream()
    d2h, h2d = torch.cuda.Stream(), torch.cuda.Stream()
    state = make_state(torch, count, nbytes)
    host = [torch.empty(nbytes, dtype=torch.uint8, pin_memory=True) for _ in range(count)]

    def step():
        update(state)
        t0 = time.perf_counter()
        d2h.wait_stream(main)
        with torch.cuda.stream(d2h):
            for t, h in zip(state, host):
                h.copy_(t, non_blocking=True)
        done = torch.cuda.Event()
        done.record(d2h)
        if way == "host_sync":
            done.synchronize()
        for t in state:
            if way == "record_stream":
                t.record_stream(d2h)
            t.untyped_storage().resize_(0)
        stash_us = (time.perf_counter() - t0) * 1e6
        work.forward()
        t0 = time.perf_counter()
        for t in state:
            t.untyped_storage().resize_(nbytes)
        h2d.wait_stream(main)
        h2d.wait_stream(d2h)  # the host copy is written on d2h
        with torch.cuda.stream(h2d):
            for t, h in zip(state, host):
                t.copy_(h, non_blocking=True)
        main.wait_stream(h2d)
        return stash_us + (time.perf_counter() - t0) * 1e6, 0

    return state, step


def ferry_way(torch, ft, free, count, nbytes, work):
    """One step of ``ferry.torch.stash(state, free=free)``, ``restore``, ``wait``; the host
    waits counted in the calls (``Device.host_waits``)."""
    main = torch.cuda.current_stream()
    state = make_state(torch, count, nbytes)
    from ferry.torch._engine import gpu_backend
    dev, _ = ft.engine(gpu_backend(), torch.cuda.current_device())

    def step():
        update(state)
        t0 = time.perf_counter()
        waits = dev.host_waits
        s = ft.stash(state, free=free)
        stash_us = (time.perf_counter() - t0) * 1e6
        work.forward()
        t0 = time.perf_counter()
        s.restore()
        s.wait(main)
        return stash_us + (time.perf_counter() - t0) * 1e6, dev.host_waits - waits

    return state, step


WAYS = ("record_stream", "host_sync", "unsafe", "ferry", "ferry_deferred")


def make_way(torch, ft, way, count, nbytes, work):
    if way == "ferry":
        return ferry_way(torch, ft, "ordered", count, nbytes, work)
    if way == "ferry_deferred":
        return ferry_way(torch, ft, "deferred", count, nbytes, work)
    return torch_way(torch, way, count, nbytes, work)


# A device-to-host memcpy activity, whatever the profiler's label ("Memcpy DtoH (Device ->
# Pinned)", "Memcpy D2H", ...): seed_study's _HTOD, the other way round.
_DTOH = re.compile(r"dtoh|d2h|device\s*to\s*host|device\s*->\s*(host|pinned|pageable|managed)", re.I)


def copy_overlap(torch, step):
    """Kernel overlap of one profiled step: for the device-to-host and the host-to-device
    copies, the share of their time (the union of their intervals) during which a kernel runs,
    from torch.profiler's CUDA activity."""
    from seed_study import _HTOD, function_events_to_trace, kernel_overlap
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    copies = {"d2h": [], "h2d": []}
    kernels = []
    for ev in function_events_to_trace(prof.events()):
        lo, hi = float(ev["ts"]), float(ev["ts"]) + float(ev["dur"])
        name = ev["name"].lower()
        if ev["cat"] == "kernel":
            kernels.append((lo, hi))
        elif ev["cat"] == "gpu_memcpy" and _DTOH.search(name):
            copies["d2h"].append((lo, hi))
        elif ev["cat"] == "gpu_memcpy" and _HTOD.search(name):
            copies["h2d"].append((lo, hi))
    return {k: kernel_overlap(v, kernels)[0] for k, v in copies.items()}


def run_way(torch, ft, way, count, nbytes, steps, work, profile, trace=False, warmup=2):
    """One way's row. The steps run back to back with no host wait between them (the byte
    check counts on the device), as a training loop's do; the step time is the wall time of
    the measured steps, after `warmup` steps, over their number."""
    state, step = make_way(torch, ft, way, count, nbytes, work)
    bads = torch.zeros(warmup + steps, dtype=torch.int64, device="cuda")
    for k in range(warmup):
        step()
        corrupt(torch, state, k + 1, bads[k])
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    host_us, host_waits = [], 0
    start = time.perf_counter()
    for k in range(warmup, warmup + steps):
        us, waits = step()
        host_us.append(us)
        host_waits += waits
        corrupt(torch, state, k + 1, bads[k])
    torch.cuda.synchronize()
    step_us = (time.perf_counter() - start) * 1e6 / steps
    row = {"way": way, "workload": work.kind, "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
           "host_us_per_step": statistics.median(host_us), "step_us": step_us,
           "corrupt_steps": int((bads != 0).sum()), "steps": warmup + steps, "host_waits": host_waits,
           "host_us_each": [round(u) for u in host_us]}
    if profile:
        row["overlap"] = copy_overlap(torch, step)
    if trace:
        row["timeline"] = timeline(torch, step)
    return row


def timeline(torch, step, steps=2, gap_us=50.0):
    """What each stream ran during `steps` back-to-back steps, from a torch.profiler CUDA
    trace: per stream, runs of one kind of activity (kernel, DtoH, HtoD, memset) merged where
    less than `gap_us` apart, as (stream, kind, start ms, duration ms, MiB copied), start
    relative to the first activity. The gaps between runs are where a stream waited."""
    import tempfile
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as fh:
        prof.export_chrome_trace(fh.name)
        with open(fh.name, encoding="utf-8") as f:
            doc = json.load(f)
    acts = []
    for ev in doc.get("traceEvents", []):
        cat = str(ev.get("cat", "")).lower()
        if ev.get("ph") != "X" or cat not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        name = str(ev.get("name", ""))
        kind = ("DtoH" if _DTOH.search(name) else "HtoD" if re.search(r"htod|host\s*to\s*device", name, re.I)
                else "memcpy" if cat == "gpu_memcpy" else "memset" if cat == "gpu_memset" else "kernel")
        args = ev.get("args", {})
        acts.append((args.get("stream", -1), kind, float(ev["ts"]), float(ev["dur"]), float(args.get("bytes", 0))))
    if not acts:
        return []
    t0 = min(a[2] for a in acts)
    runs = []
    for stream in sorted({a[0] for a in acts}):
        cur = None
        for s, kind, ts, dur, nb in sorted((a for a in acts if a[0] == stream), key=lambda a: a[2]):
            if cur and cur[1] == kind and ts - (cur[2] + cur[3]) < gap_us:
                cur[3] = max(cur[3], ts + dur - cur[2])
                cur[4] += nb
                continue
            if cur:
                runs.append(cur)
            cur = [stream, kind, ts, dur, nb]
        runs.append(cur)
    return [(r[0], r[1], round((r[2] - t0) / 1e3, 3), round(r[3] / 1e3, 3), round(r[4] / (1 << 20), 1))
            for r in sorted(runs, key=lambda r: r[2])]


def bandwidth(torch, ft, count, nbytes, reps=3):
    """GB/s of one stash and one restore of the whole state on an idle GPU, and of torch's
    pinned copy_ of the same bytes, best of `reps`."""
    total = count * nbytes
    state = make_state(torch, count, nbytes)
    host = [torch.empty(nbytes, dtype=torch.uint8, pin_memory=True) for _ in range(count)]
    out = {"torch_d2h": 0.0, "torch_h2d": 0.0, "ferry_stash": 0.0, "ferry_restore": 0.0}
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for t, h in zip(state, host):
            h.copy_(t, non_blocking=True)
        torch.cuda.synchronize()
        out["torch_d2h"] = max(out["torch_d2h"], total / (time.perf_counter() - t0) / 1e9)
        t0 = time.perf_counter()
        for t, h in zip(state, host):
            t.copy_(h, non_blocking=True)
        torch.cuda.synchronize()
        out["torch_h2d"] = max(out["torch_h2d"], total / (time.perf_counter() - t0) / 1e9)
        t0 = time.perf_counter()
        s = ft.stash(state)
        s.synchronize()
        out["ferry_stash"] = max(out["ferry_stash"], total / (time.perf_counter() - t0) / 1e9)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        s.restore()
        s.wait()
        torch.cuda.synchronize()
        out["ferry_restore"] = max(out["ferry_restore"], total / (time.perf_counter() - t0) / 1e9)
    return out


def interleave(torch, ft, tables, table_bytes, small_bytes, small_copies, reps=5):
    """The main stream's small H2D copies (an input batch's many small tensors) while a bulk
    restore of `tables` embedding tables of `table_bytes` runs on another stream: GPU time
    from the first small copy's enqueue to the last one's completion, median of `reps`, for
    each way of moving the bulk bytes (idle: no bulk copy). The bulk copy is enqueued first,
    so a copy engine that runs it to the end before the small copies shows as their whole
    latency."""
    main = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    small_host = [torch.full((small_bytes,), 3, dtype=torch.uint8).pin_memory() for _ in range(small_copies)]
    small_dev = [torch.empty(small_bytes, dtype=torch.uint8, device="cuda") for _ in range(small_copies)]
    tables_dev = [torch.full((table_bytes,), i + 1, dtype=torch.uint8, device="cuda") for i in range(tables)]
    tables_host = [torch.empty(table_bytes, dtype=torch.uint8, pin_memory=True) for _ in range(tables)]
    for t, h in zip(tables_dev, tables_host):
        h.copy_(t)
    chunk = 32 << 20

    def bulk_torch(chunked):
        side.wait_stream(main)
        with torch.cuda.stream(side):
            for t, h in zip(tables_dev, tables_host):
                if not chunked:
                    t.copy_(h, non_blocking=True)
                    continue
                for o in range(0, table_bytes, chunk):
                    t[o:o + chunk].copy_(h[o:o + chunk], non_blocking=True)
        return lambda: main.wait_stream(side)

    stashed = []

    def bulk_ferry():
        s = stashed.pop()
        s.restore()
        return lambda: s.wait(main)

    ways = {"idle": None, "torch one copy": lambda: bulk_torch(False),
            "torch 32 MiB chunks": lambda: bulk_torch(True), "ferry restore": bulk_ferry}
    out = {}
    for name, bulk in ways.items():
        times = []
        for _ in range(reps):
            if name == "ferry restore":
                stashed.append(ft.stash(tables_dev))
            torch.cuda.synchronize()
            finish = bulk() if bulk is not None else None
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(main)
            for d, h in zip(small_dev, small_host):
                d.copy_(h, non_blocking=True)
            end.record(main)
            if finish is not None:
                finish()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        out[name] = statistics.median(times)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tensors", type=int, default=64)
    ap.add_argument("--mib", type=int, default=32)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--warmup", type=int, default=2, help="steps run before the measured ones")
    ap.add_argument("--workloads", default="reuse,compute,mixed", help="reuse, compute, mixed (see Workload)")
    ap.add_argument("--trace", action="store_true",
                    help="also print what each stream ran in two steps of every way (torch.profiler)")
    ap.add_argument("--matmuls", type=int, default=24, help="matmuls of the compute workload's forward")
    ap.add_argument("--matmul-n", type=int, default=8192)
    ap.add_argument("--tables", type=int, default=2, help="embedding tables of the interleaving study")
    ap.add_argument("--table-mib", type=int, default=1024)
    ap.add_argument("--small-kib", type=int, default=256, help="size of each of the main stream's small copies")
    ap.add_argument("--small-copies", type=int, default=16)
    ap.add_argument("--json", default=None, help="also write the rows and bars to this file")
    ap.add_argument("--snapshot", default=None, metavar="DIR",
                    help="also write PyTorch memory snapshots of 3 steps of the record_stream way and of "
                         "ferry (DIR/record_stream.pickle, DIR/ferry.pickle; open them in pytorch.org/memory_viz)")
    args = ap.parse_args(argv)
    workloads = [w for w in args.workloads.split(",") if w]
    if not workloads or any(w not in ("reuse", "compute", "mixed") for w in workloads):
        ap.error(f"--workloads {args.workloads!r}: a list of reuse, compute and mixed")
    import torch
    if not torch.cuda.is_available():
        print("stash_study: needs a CUDA GPU", file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # seed_study's trace helpers
    import ferry.torch as ft
    nbytes = args.mib << 20
    rows = []
    for kind in workloads:
        work = Workload(torch, kind, args.tensors, nbytes, args.matmuls, args.matmul_n)
        for way in WAYS:
            print(f"[stash_study] {kind}: {way}", file=sys.stderr, flush=True)
            rows.append(run_way(torch, ft, way, args.tensors, nbytes, args.steps, work, profile=True,
                                trace=args.trace, warmup=args.warmup))
            torch.cuda.empty_cache()
        del work
        torch.cuda.empty_cache()
    bw = bandwidth(torch, ft, args.tensors, nbytes)
    torch.cuda.empty_cache()
    inter = interleave(torch, ft, args.tables, args.table_mib << 20, args.small_kib << 10, args.small_copies)
    torch.cuda.empty_cache()
    state_bytes = args.tensors * nbytes
    serial_ms = (state_bytes / (bw["torch_d2h"] * 1e9) + state_bytes / (bw["torch_h2d"] * 1e9)) * 1e3
    print(f"stash study on {torch.cuda.get_device_name()} (torch {torch.__version__}): "
          f"{args.tensors} x {args.mib} MiB, {args.steps} steps; the stash's per-tensor work in "
          "ferry._torch_native")
    print(f"{'workload':<9} {'way':<15} {'peak reserved GiB':>18} {'host ms/step':>13} {'step ms':>8} "
          f"{'D2H overlap':>12} {'H2D overlap':>12} {'corrupt steps':>14}")

    def pct(v):
        return "-" if v is None else f"{v:.0%}"

    for r in rows:
        o = r.get("overlap", {})
        print(f"{r['workload']:<9} {r['way']:<15} {gib(r['peak_reserved_bytes']):>18.3f} "
              f"{r['host_us_per_step'] / 1e3:>13.3f} {r['step_us'] / 1e3:>8.3f} {pct(o.get('d2h')):>12} "
              f"{pct(o.get('h2d')):>12} {r['corrupt_steps']:>8} of {r['steps']}")
    print("host ms in the calls, step by step:")
    for r in rows:
        print(f"  {r['workload']:<8} {r['way']:<15} " + " ".join(f"{u / 1e3:.1f}" for u in r["host_us_each"]))
    for r in rows:
        if r.get("timeline"):
            print(f"timeline of two steps, {r['workload']} / {r['way']} (stream, kind, start ms, ms, MiB):")
            for e in r["timeline"]:
                print(f"  s{e[0]:<4} {e[1]:<7} {e[2]:>9.3f} {e[3]:>8.3f} {e[4]:>9.1f}")
    print("bandwidth GB/s: " + ", ".join(f"{k} {v:.1f}" for k, v in bw.items()))
    print(f"the state's D2H then H2D at torch's bandwidth: {serial_ms:.1f} ms (a step whose forward reuses the "
          "freed memory and whose footprint does not grow runs the two copies one after the other)")
    print(f"main stream's {args.small_copies} x {args.small_kib} KiB H2D copies while {args.tables} x "
          f"{args.table_mib} MiB are restored (GPU µs, median): " + ", ".join(f"{k} {v:.0f}" for k, v in inter.items()))
    if args.snapshot:
        os.makedirs(args.snapshot, exist_ok=True)
        work = Workload(torch, "reuse", args.tensors, nbytes, args.matmuls, args.matmul_n)
        for way in ("record_stream", "ferry"):
            # Recorded apart from the measured runs: recording slows the host. No stacks, so
            # the files hold the allocator's events and segments only.
            torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python")
            run_way(torch, ft, way, args.tensors, nbytes, 3, work, profile=False)
            path = os.path.join(args.snapshot, f"{way}.pickle")
            torch.cuda.memory._dump_snapshot(path)
            torch.cuda.memory._record_memory_history(enabled=None)
            torch.cuda.empty_cache()
            print(f"memory snapshot of 3 steps of {way}: {path}")
    by = {(r["workload"], r["way"]): r for r in rows}
    bars = [
        ("stash bandwidth ≥ 0.95 × torch D2H copy_", bw["ferry_stash"], 0.95 * bw["torch_d2h"], True),
        ("restore bandwidth ≥ 0.95 × torch H2D copy_", bw["ferry_restore"], 0.95 * bw["torch_h2d"], True),
    ]
    for kind in workloads:
        ems, synced = by[(kind, "record_stream")], by[(kind, "host_sync")]
        for way in ("ferry", "ferry_deferred"):
            f = by[(kind, way)]
            bars += [
                (f"{kind}: {way} peak reserved ≤ 1.02 × host_sync's", f["peak_reserved_bytes"],
                 1.02 * synced["peak_reserved_bytes"], False),
                (f"{kind}: {way} host time ≤ 1.5 × record_stream's", f["host_us_per_step"],
                 1.5 * ems["host_us_per_step"], False),
                (f"{kind}: {way} corrupt steps = 0", f["corrupt_steps"], 0, False),
                (f"{kind}: {way} host waits in stash/restore/wait = 0", f["host_waits"], 0, False),
                (f"{kind}: {way} step time ≤ 1.02 × record_stream's", f["step_us"], 1.02 * ems["step_us"], False),
                (f"{kind}: {way} step time ≤ 1.02 × host_sync's", f["step_us"], 1.02 * synced["step_us"], False),
            ]
    verdicts = []
    for name, value, limit, at_least in bars:
        ok = value >= limit if at_least else value <= limit
        verdicts.append({"name": name, "value": value, "limit": limit, "pass": ok})
        print(f"  {'PASS' if ok else 'FAIL'} {name}: {value:.4g} (limit {limit:.4g})")
    print(f"{sum(v['pass'] for v in verdicts)} of {len(verdicts)} bars met")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "native": True, "rows": rows,
                       "bandwidth_gbps": bw, "serial_copy_ms": serial_ms,
                       "small_copies_us": inter, "bars": verdicts}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
