#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Host time of one ``ferry.torch.to`` call, per call and per leaf, beside PyTorch's own
``Tensor.to(non_blocking=True)`` of the same leaves.

    PYTHONPATH=build/python python3 lab/python/call_cost.py [--device cuda|cpu] [--leaves 1,16,67]
        [--calls 300] [--pinned] [--big 64M] [--record-events] [--json FILE]

Each structure is a dict of ``--leaves`` small tensors (alternately float32 and int64, 3 to 70
elements: TorchRec's many small per-feature tensors), pageable unless ``--pinned``. Every call
is host-timed on its own after a warm-up, the ways of one structure in turns within one loop;
the median is printed. On CUDA the target is the current stream and the GPU is synchronized
every 64 calls, outside the timing, so that queues never fill; on the CPU (ferry's host
backend) each call also waits for its copy, as ``ferry.torch.to(..., "cpu")`` does. The torch
row moves each leaf with ``t.to(device, non_blocking=True)``: the glue a structure-aware copy
has to beat. On the CPU that row is no reference (a CPU tensor's ``.to("cpu")`` returns the
tensor itself); there the ferry rows measure ferry.torch's glue and the host backend's copy.

``--big SIZE`` (CUDA with ``--pinned``; 0 skips it) adds one pinned tensor of SIZE bytes, the
seed's batch, in two orders: on the current stream (``ft.to(t, "cuda")`` beside
``t.to("cuda", non_blocking=True)``), and the seed's (under ``with torch.cuda.stream(side):``,
``ft.to(t, "cuda", target_stream=main)`` beside PyTorch's side-stream copy with
``record_stream(main)``). Each result is dropped at once. The two ways of an order are timed
in turns within one loop, and their ratio printed: the host's speed drifts by more than the
difference between them.
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


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    if t and t[-1] in units:
        return int(t[:-1]) * units[t[-1]]
    return int(t)


def paired_medians_us(fns, calls: int, sync) -> list:
    """The median host time of each of `fns`, timed in turns within one loop (call i runs
    them in rotated order), so that every way sees the same host: its speed drifts between
    and within runs by more than the differences measured here."""
    for _ in range(min(50, calls)):
        for fn in fns:
            fn()
    sync()
    times = [[] for _ in fns]
    for i in range(calls):
        if i and i % 64 == 0:
            sync()  # untimed: queues never fill up
        for j in range(len(fns)):
            k = (i + j) % len(fns)
            t0 = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - t0)
    sync()
    return [statistics.median(ts) * 1e6 for ts in times]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--leaves", default="1,16,67", help="comma-separated leaf counts")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--pinned", action="store_true", help="pinned sources (CUDA only)")
    ap.add_argument("--big", default="64M", help="size of the one large pinned tensor (CUDA, --pinned); 0 skips it")
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    ap.add_argument("--record-events", action="store_true",
                    help="ferry.torch's device records pool events and queue activity (ft.RECORD_EVENTS)")
    args = ap.parse_args(argv)

    import torch
    import ferry.torch as ft
    ft.RECORD_EVENTS = args.record_events

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
    try:
        big = parse_size(args.big)
    except ValueError:
        ap.error(f"--big must be a size such as 64M, got {args.big!r}")
    if big < 0:
        ap.error("--big must be >= 0")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    rows = []
    print(f"ferry.torch.to host time on {device} ({'pinned' if args.pinned else 'pageable'} sources, "
          f"median of {args.calls} calls), torch {torch.__version__}, "
          f"glue: {'ferry._torch_native' if getattr(ft, '_native_to', True) else 'DLPack'}, "
          f"events {'recorded' if args.record_events else 'not recorded'}")
    print(f"{'leaves':>6} {'way':24} {'us/call':>9} {'us/leaf':>8}")
    for n in counts:
        obj = structure(torch, n, args.pinned)
        ways = [("ferry.torch", lambda: ft.to(obj, device))]
        ways.append(("torch .to per leaf", lambda: {k: v.to(device, non_blocking=True) for k, v in obj.items()}))
        for (name, _), us in zip(ways, paired_medians_us([fn for _, fn in ways], args.calls, sync)):
            rows.append({"device": device, "pinned": args.pinned, "leaves": n, "way": name,
                         "host_us_per_call": us, "host_us_per_leaf": us / n})
            print(f"{n:6d} {name:24} {us:9.1f} {us / n:8.2f}")
        ft.synchronize()
    if device == "cuda" and args.pinned and big:
        t = torch.empty(big, dtype=torch.uint8).pin_memory()
        main_stream, side = torch.cuda.current_stream(), torch.cuda.Stream()

        def torch_side():
            with torch.cuda.stream(side):
                x = t.to(device, non_blocking=True)
                x.record_stream(main_stream)

        def ferry_side():
            with torch.cuda.stream(side):
                ft.to(t, device, target_stream=main_stream)

        pairs = [("current stream", (("ferry.torch", lambda: ft.to(t, device)),
                                     ("torch .to", lambda: t.to(device, non_blocking=True)))),
                 ("seed order", (("ferry.torch", ferry_side),
                                 ("torch .to + record_stream", torch_side)))]
        print(f"one pinned tensor of {big / (1 << 20):.0f} MiB, result dropped at once; each order's two "
              "ways timed in turns")
        for order, ways in pairs:
            meds = paired_medians_us([fn for _, fn in ways], args.calls, sync)
            for (name, _), us in zip(ways, meds):
                rows.append({"device": device, "pinned": True, "leaves": 1, "bytes": big, "order": order,
                             "way": name, "host_us_per_call": us, "host_us_per_leaf": us})
                print(f"{order:>14} {name:26} {us:9.1f}")
            print(f"{order:>14} {'ferry / torch':26} {meds[0] / meds[1]:9.2f}")
        ft.synchronize()
    if device == "cpu":
        print("(on the CPU, torch's .to of a CPU tensor returns it unchanged: no reference)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
