#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Host time of one ``ferry.torch.to`` call, per call and per leaf, beside PyTorch's own
``Tensor.to(non_blocking=True)`` of the same leaves.

    PYTHONPATH=build/python python3 tools/python/call_cost.py [--device cuda|cpu] [--leaves 1,16,67]
        [--calls 300] [--pinned] [--json FILE]

Each structure is a dict of ``--leaves`` small tensors (alternately float32 and int64, 3 to
70 elements: TorchRec's many small per-feature tensors), pageable unless ``--pinned``. Every
call is host-timed on its own after a warm-up; the median is printed. On CUDA the target is
the current stream and the GPU is synchronized every 64 calls, outside the timing, so that
queues never fill; on the CPU (ferry's host backend) each call also waits for its copy, as
``ferry.torch.to(..., "cpu")`` does. The torch row moves each leaf with
``t.to(device, non_blocking=True)``: the glue a structure-aware copy has to beat. On the CPU
that row is no reference (a CPU tensor's ``.to("cpu")`` returns the tensor itself); there the
ferry rows measure ferry.torch's glue and the host backend's copy.
"""
import argparse
import json
import statistics
import sys
import time


def structure(torch, leaves: int, pinned: bool):
    out = {}
    for i in range(leaves):
        t = torch.arange(3 + i % 68, dtype=torch.int64 if i % 2 else torch.float32)
        out[f"f{i}"] = t.pin_memory() if pinned else t
    return out


def median_us(fn, calls: int, sync) -> float:
    for _ in range(min(50, calls)):
        fn()
    sync()
    times = []
    for i in range(calls):
        if i and i % 64 == 0:
            sync()  # untimed: queues never fill up
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    sync()
    return statistics.median(times) * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--leaves", default="1,16,67", help="comma-separated leaf counts")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--pinned", action="store_true", help="pinned sources (CUDA only)")
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    args = ap.parse_args(argv)

    import torch
    import ferry.torch as ft

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.pinned and device != "cuda":
        ap.error("--pinned needs --device cuda")
    if args.calls < 1:
        ap.error("--calls must be >= 1")
    try:
        counts = [int(x) for x in args.leaves.split(",") if x]
    except ValueError:
        ap.error(f"--leaves must be comma-separated integers, got {args.leaves!r}")
    if not counts or min(counts) < 1:
        ap.error("--leaves needs counts >= 1")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    rows = []
    print(f"ferry.torch.to host time on {device} ({'pinned' if args.pinned else 'pageable'} sources, "
          f"median of {args.calls} calls), torch {torch.__version__}")
    print(f"{'leaves':>6} {'way':24} {'us/call':>9} {'us/leaf':>8}")
    for n in counts:
        obj = structure(torch, n, args.pinned)
        ways = [(f"ferry.torch mode={m}", (lambda m=m: ft.to(obj, device, mode=m))) for m in ("torch", "ferry")]
        ways.append(("torch .to per leaf", lambda: {k: v.to(device, non_blocking=True) for k, v in obj.items()}))
        for name, fn in ways:
            us = median_us(fn, args.calls, sync)
            rows.append({"device": device, "pinned": args.pinned, "leaves": n, "way": name,
                         "host_us_per_call": us, "host_us_per_leaf": us / n})
            print(f"{n:6d} {name:24} {us:9.1f} {us / n:8.2f}")
        ft.synchronize()
    if device == "cpu":
        print("(on the CPU, torch's .to of a CPU tensor returns it unchanged: no reference)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
