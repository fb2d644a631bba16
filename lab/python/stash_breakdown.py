#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Where the host time of ``ferry.torch.stash`` and ``Stash.restore`` goes, on CUDA, beside
EMS's ``record_stream`` way over the same state (the setup of ``stash_study.py``'s host-time
row, with no forward between the calls).

    PYTHONPATH=build/python python3 lab/python/stash_breakdown.py [--tensors 64] [--mib 32]

Printed: the median host µs per step of each way's stash and restore calls over ``--steps``
steps (ferry's with its per-tensor work in ferry._torch_native, where built, and in Python), then each way's calls under cProfile (µs per step of every function and builtin, by
own time, the profiler's overhead included, so compare rows, not totals), then the binding's
batch calls timed alone. The GPU is synchronized after each step, outside the timings. Private
parts of ferry.torch are timed, so this tool follows them.
"""
import argparse
import cProfile
import pstats
import statistics
import sys
import time

import torch

import ferry.torch as ft
from ferry import _ferry


def ems_way(state, host, d2h, h2d, main):
    def stash():
        d2h.wait_stream(main)
        with torch.cuda.stream(d2h):
            for t, h in zip(state, host):
                h.copy_(t, non_blocking=True)
        for t in state:
            t.record_stream(d2h)
            t.untyped_storage().resize_(0)

    def restore():
        for t, h in zip(state, host):
            t.untyped_storage().resize_(h.nbytes)
        h2d.wait_stream(main)
        h2d.wait_stream(d2h)
        with torch.cuda.stream(h2d):
            for t, h in zip(state, host):
                t.copy_(h, non_blocking=True)
        main.wait_stream(h2d)
    return stash, restore


def ferry_way(state, main, ops):
    """ferry.torch's stash with `ops` doing its per-tensor work (ferry._torch_native or the
    Python path, _PythonStashOps)."""
    held = []

    def stash():
        ft._stash_ops = ops  # a Stash keeps the ops it was made with for its restore
        held.append(ft.stash(state))

    def restore():
        s = held.pop()
        s.restore()
        s.wait(main)
    return stash, restore


def timed(stash, restore, steps):
    st, rt = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        stash()
        t1 = time.perf_counter()
        restore()
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        st.append((t1 - t0) * 1e6)
        rt.append((t2 - t1) * 1e6)
    return statistics.median(st), statistics.median(rt)


def profiled(name, stash, restore, steps, top):
    prof = cProfile.Profile()
    for _ in range(steps):
        prof.enable()
        stash()
        restore()
        prof.disable()
        torch.cuda.synchronize()
    stats = pstats.Stats(prof)
    rows = []
    for (file, line, fn), (cc, nc, tt, ct, _) in stats.stats.items():
        where = fn if file == "~" else f"{file.rsplit('/', 1)[-1]}:{line}({fn})"
        rows.append((tt / steps * 1e6, ct / steps * 1e6, nc / steps, where))
    rows.sort(reverse=True)
    print(f"-- {name} under cProfile: µs per step (own, cumulative), calls per step")
    for tt, ct, nc, where in rows[:top]:
        print(f"   {tt:9.1f} {ct:9.1f} {nc:7.1f}  {where[:90]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tensors", type=int, default=64)
    ap.add_argument("--mib", type=int, default=32)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--top", type=int, default=22)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("stash_breakdown.py needs a CUDA device")
    nbytes = a.mib << 20
    main_stream = torch.cuda.current_stream()
    state = [torch.full((nbytes,), i % 250 + 1, dtype=torch.uint8, device="cuda") for i in range(a.tensors)]
    host = [torch.empty(nbytes, dtype=torch.uint8, pin_memory=True) for _ in range(a.tensors)]
    d2h, h2d = torch.cuda.Stream(), torch.cuda.Stream()
    ways = {"record_stream": ems_way(state, host, d2h, h2d, main_stream)}
    native = ft._native_module()
    if native is not None:
        ways["ferry"] = ferry_way(state, main_stream, native)
    ways["ferry, Python path" if native is not None else "ferry"] = ferry_way(state, main_stream, ft._PythonStashOps)
    for name, (s, r) in ways.items():
        timed(s, r, 5)  # warm-up: pools, engines, the caching allocator's blocks
    print(f"{a.tensors} x {a.mib} MiB, median of {a.steps} steps, host µs")
    print(f"{'way':20} {'stash':>9} {'restore':>9} {'sum':>9}")
    for _ in range(2):  # twice, interleaved, to show the run-to-run spread
        for name, (s, r) in ways.items():
            st, rt = timed(s, r, a.steps)
            print(f"{name:20} {st:9.1f} {rt:9.1f} {st + rt:9.1f}", flush=True)
    for name, (s, r) in ways.items():
        profiled(name, s, r, a.steps, a.top)

    # The binding's batch calls alone, on blocks of the caching allocator.
    dev, _ = ft.engine(_ferry.Backend.cuda, 0)
    down = ft._stash_transfer(_ferry.Backend.cuda, 0, dev)
    owner = ft._adopted_queue((_ferry.Backend.cuda, 0), dev, main_stream)
    whole = torch.empty(nbytes * a.tensors, dtype=torch.uint8, pin_memory=True)
    hb = dev.host_pool.adopt(whole.data_ptr(), whole.nbytes)
    ptrs = [t.data_ptr() for t in state]
    sizes = [nbytes] * a.tensors
    offsets = [i * nbytes for i in range(a.tensors)]

    def once(fn, reps=a.steps):
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e6)
            torch.cuda.synchronize()
        return statistics.median(ts)

    def blocks():
        return [torch.empty(nbytes, dtype=torch.uint8, device="cuda") for _ in range(a.tensors)]

    print("-- parts alone, host µs per call")
    rows = [
        ("_download_adopted_raw, owner waits",
         lambda: down._download_adopted_raw(ptrs, sizes, owner, owner.mark(), hb, offsets, "b", True)),
        ("_upload_adopted_raw + release",
         lambda: down._upload_adopted_raw(ptrs, sizes, owner, owner.mark(), hb, offsets, "b")[1].release()),
        (f"{a.tensors} torch.empty on CUDA, dropped", blocks),
        ("pinned torch.empty of the whole", lambda: torch.empty(whole.nbytes, dtype=torch.uint8, pin_memory=True)),
        ("host_pool.adopt of the whole", lambda: dev.host_pool.adopt(whole.data_ptr(), whole.nbytes)),
        ("owner.mark()", owner.mark),
    ]
    for name, fn in rows:
        print(f"   {name:40} {once(fn):9.1f}", flush=True)


if __name__ == "__main__":
    main()
