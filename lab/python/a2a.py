#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Upload a KeyedJaggedTensor-like batch onto each rank's compute stream, then all-to-all it
over NCCL on that stream: the copy strategies side by side, per rank.

    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node=2 lab/python/a2a.py [--mb 256] [--memory pinned]
    python3 lab/python/a2a.py                       # one GPU, one rank

Each rank builds a batch of 26 jagged features (values and lengths per feature, ~--mb MiB in
all) in pageable or pinned host memory, uploads it onto its compute stream with a strategy,
concatenates the values and runs all_to_all_single on the compute stream, then checks what
it received against what the sending rank built. Strategies:
  blocking     tensor.to("cuda") on the compute stream (the host waits for each copy)
  side_stream  tensor.to(non_blocking=True) on a side stream, wait_stream + record_stream
  ferry        ferry.torch.to(batch, "cuda", target_stream=compute): skipped, saying why,
               when the ferry Python package is not importable
Printed per strategy and rank: peak reserved memory, step time, upload bandwidth. With two
ranks or more, the bars: ferry's peak reserved <= 1.02 x blocking's on every rank, and ferry's
step time <= side_stream's. NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before NCCL starts: no multicast objects

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

FEATURES = 26


def build_batch(rank: int, step: int, mib: int, pinned: bool) -> dict:
    """Deterministic per (rank, step): any rank can rebuild what another sent."""
    g = torch.Generator().manual_seed(rank * 1_000_003 + step)
    per_feature = mib * (1 << 20) // FEATURES // 4  # float32 values per feature, on average
    values, lengths = [], []
    for f in range(FEATURES):
        n = int(per_feature * (0.5 + torch.rand(1, generator=g).item()))
        v = torch.arange(n, dtype=torch.float32).remainder_(65521).add_(rank * 7 + f + step)
        rows = max(1, n // 64)
        ln = torch.full((rows,), n // rows, dtype=torch.int32)
        ln[-1] += n - int(ln.sum())
        values.append(v.pin_memory() if pinned else v)
        lengths.append(ln.pin_memory() if pinned else ln)
    return {"values": values, "lengths": lengths}


def flat_values(batch: dict, world: int) -> torch.Tensor:
    flat = torch.cat(batch["values"])
    pad = (-flat.numel()) % world
    return torch.cat([flat, flat.new_zeros(pad)]) if pad else flat


def batch_bytes(batch: dict) -> int:
    return sum(t.nbytes for k in ("values", "lengths") for t in batch[k])


def upload(strategy: str, batch: dict, compute: torch.cuda.Stream, side: torch.cuda.Stream | None, ferry_to):
    dev = torch.device("cuda", torch.cuda.current_device())
    if strategy == "blocking":
        with torch.cuda.stream(compute):
            return {k: [t.to(dev) for t in ts] for k, ts in batch.items()}
    if strategy == "side_stream":
        with torch.cuda.stream(side):
            out = {k: [t.to(dev, non_blocking=True) for t in ts] for k, ts in batch.items()}
        compute.wait_stream(side)
        for ts in out.values():
            for t in ts:
                t.record_stream(compute)
        return out
    return ferry_to(batch, dev, target_stream=compute)


def run(strategy: str, args, rank: int, world: int, ferry_to) -> dict:
    compute = torch.cuda.Stream()
    side = torch.cuda.Stream() if strategy == "side_stream" else None
    hosts = [build_batch(rank, s, args.mb, args.memory == "pinned") for s in range(2)]
    expected_from = {}  # (sender, step parity) -> the chunk it sends to this rank
    for sender in range(world):
        for s in range(2):
            flat = flat_values(build_batch(sender, s, args.mb, False), world)
            expected_from[(sender, s)] = flat.chunk(world)[rank].clone()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    dist.barrier()
    start = time.perf_counter()
    errors = 0
    for step in range(args.steps):
        dev_batch = upload(strategy, hosts[step % 2], compute, side, ferry_to)
        with torch.cuda.stream(compute):
            send = flat_values(dev_batch, world)
            recv = torch.empty_like(send)
            dist.all_to_all_single(recv, send)
            del dev_batch, send
        if step in (0, args.steps - 1) or step % 10 == 0:
            compute.synchronize()
            got = recv.cpu().chunk(world)
            for sender in range(world):
                if not torch.equal(got[sender], expected_from[(sender, step % 2)]):
                    errors += 1
                    print(f"rank {rank}: {strategy}: step {step}: wrong data from rank {sender}", file=sys.stderr)
        del recv
    torch.cuda.synchronize()
    dist.barrier()
    elapsed = time.perf_counter() - start
    step_s = elapsed / args.steps
    nbytes = batch_bytes(hosts[0])
    return {"rank": rank, "strategy": strategy, "peak_reserved": torch.cuda.max_memory_reserved(),
            "step_ms": step_s * 1e3, "gbps": nbytes / step_s / 1e9, "errors": errors}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=int, default=256, help="MiB per rank and batch (100 to 1024 in the study)")
    p.add_argument("--memory", choices=["pageable", "pinned"], default="pageable")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--strategies", default="blocking,side_stream,ferry")
    args = p.parse_args()

    for k, v in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"), ("MASTER_ADDR", "127.0.0.1"),
                 ("MASTER_PORT", "29511")):
        os.environ.setdefault(k, v)
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()

    ferry_to = None
    strategies = [s for s in args.strategies.split(",") if s]
    if "ferry" in strategies:
        try:
            import ferry.torch as ferry_torch  # lazily: the package may not be built here
            ferry_to = ferry_torch.to
        except ImportError as e:
            if rank == 0:
                print(f"a2a: SKIPPED strategy ferry: the ferry Python package is not importable ({e})")
            strategies.remove("ferry")

    results = [run(s, args, rank, world, ferry_to) for s in strategies]
    gathered: list = [None] * world
    dist.all_gather_object(gathered, results)
    ok = all(r["errors"] == 0 for rs in gathered for r in rs)
    if rank == 0:
        print(f"a2a: {world} rank(s), {args.mb} MiB {args.memory} per rank, {args.steps} steps, "
              f"NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')}")
        print(f"{'strategy':<12} {'rank':>4} {'peak reserved MiB':>18} {'step ms':>9} {'upload GB/s':>12} {'errors':>6}")
        for rs in gathered:
            for r in rs:
                print(f"{r['strategy']:<12} {r['rank']:>4} {r['peak_reserved'] / 2**20:>18.1f} "
                      f"{r['step_ms']:>9.2f} {r['gbps']:>12.2f} {r['errors']:>6}")
        by = {(r["strategy"], r["rank"]): r for rs in gathered for r in rs}
        if world >= 2 and all((s, 0) in by for s in ("blocking", "side_stream", "ferry")):
            for rk in range(world):
                f, b, s = by[("ferry", rk)], by[("blocking", rk)], by[("side_stream", rk)]
                mem_ok = f["peak_reserved"] <= 1.02 * b["peak_reserved"]
                time_ok = f["step_ms"] <= s["step_ms"]
                ok = ok and mem_ok and time_ok
                print(f"bar rank {rk}: ferry peak reserved <= 1.02 x blocking: {'PASS' if mem_ok else 'FAIL'} "
                      f"({f['peak_reserved'] / 2**20:.1f} vs {b['peak_reserved'] / 2**20:.1f} MiB); "
                      f"ferry step <= side_stream: {'PASS' if time_ok else 'FAIL'} "
                      f"({f['step_ms']:.2f} vs {s['step_ms']:.2f} ms)")
        print("a2a: OK" if ok else "a2a: FAILED")
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
