#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Host time of one ferry.torch.to of many large pinned tensors, one block (the target waits)
against one block per leaf (a side wait stream), beside Tensor.to per leaf, on an idle GPU and
while the stream that read the last call's results is busy; and whether the sources went by
DMA (held until their copies complete) or were staged.

    PYTHONPATH=build/python python3 lab/python/copy_probe.py [--leaves 26] [--mib 40]
"""
import argparse
import statistics
import time

import torch

import ferry.torch as ft
import ferry.torch._to as to_module


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--leaves", type=int, default=26)
    ap.add_argument("--mib", type=int, default=40)
    ap.add_argument("--reps", type=int, default=8)
    args = ap.parse_args()
    src = [torch.rand((args.mib << 20) // 4).pin_memory() for _ in range(args.leaves)]
    main_s = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    glue_s = [0.0]
    inner = to_module._to

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            glue_s[0] += time.perf_counter() - t0
    to_module._to = timed
    ways = {
        "torch .to per leaf": lambda: [t.to("cuda", non_blocking=True) for t in src],
        "ferry one block": lambda: ft.to(src, "cuda"),
        "ferry per leaf (side wait stream)": lambda: ft.to(src, "cuda", target_stream=main_s, wait_stream=side),
    }
    # busy: as in a training step, the results of the last call die while the stream that
    # read them is still busy (their release points are not reached), and the call comes then.
    for busy in (False, True):
        for name, fn in ways.items():
            times, glue_times, held = [], [], []
            out = None
            for _ in range(args.reps):
                torch.cuda.synchronize()
                if busy:
                    torch.cuda._sleep(50_000_000)
                    if out is not None:
                        for t in out:
                            t.add_(1)  # read after the sleep: released after it
                out = None
                glue_s[0] = 0.0
                t0 = time.perf_counter()
                out = fn()
                times.append(time.perf_counter() - t0)
                glue_times.append(glue_s[0])
                held.append(ft.held_sources())
                main_s.wait_stream(side)
            del out
            print(f"{'busy ' if busy else 'idle '}{name:<36} host ms {statistics.median(times) * 1e3:8.3f}  in the glue "
                  f"{statistics.median(glue_times) * 1e3:8.3f}  held sources after the call {max(held)}")


if __name__ == "__main__":
    main()
