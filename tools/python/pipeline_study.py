#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""TorchRec's own train pipelines feeding a small recommendation model, the batch copied host
to GPU the ways TorchRec offers and through ferry, every way in one process on one GPU.

    PYTHONPATH=build/python python3 tools/python/pipeline_study.py [--batch-mib 1024]
        [--leaves 26] [--source pinned] [--pipeline base] [--steps 12] [--json FILE]

The batch is a user's ``Pipelineable`` dataclass: ``--leaves`` - 3 dense float tensors
(``--rows`` rows each, together ``--batch-mib`` MiB), a ``KeyedJaggedTensor`` of ids (values
and lengths) and the labels, in ``--source`` memory (pinned, or pageable as TorchRec's own data
loaders give it unless asked to pin). The model: an ``EmbeddingBagCollection`` over the ids, a
mean of every dense tensor, an MLP of ``--layers`` × ``--width``, a logistic loss; SGD. Three
distinct batches cycle, so every way trains on the same data in the same order from the same
initialization (deterministic algorithms on).

The ways, each a fresh model and pipeline (``--pipeline base``: ``TrainPipelineBase``;
``sparse_dist``: ``TrainPipelineSparseDist``, single rank):

- ``shipped``: the pipeline as shipped: the batch's ``.to`` on the memcpy stream, then
  ``record_stream``.
- ``inplace``: ``enable_inplace_copy_batch=True`` with the batch's
  ``.to(data_copy_stream=)`` written by hand as TorchRec's users write it: destinations on the
  current stream, ``copy_`` per leaf on the memcpy stream after the current stream's work.
- ``async`` (``sparse_dist`` only, the class that has it): the same with
  ``async_inplace_copy=True``, the copy loop on TorchRec's background thread.
- ``ferry``: ``enable_inplace_copy_batch=True`` and the one-line change,
  ``pipeline.progress(ferry.torch.batches(dataloader))``.

Printed per way: ms per step (wall time of the measured steps, after ``--warmup``, over their
number), peak reserved and peak allocated, host ms in ``progress()`` per step (which includes
waits for the GPU when the launch queue is full), host ms in the batch's copy call (the
pipeline's ``_to_device``, the batch's ``.to``: what ``async_inplace_copy`` moves to a thread,
whose time on that thread is shown beside), the memory the
caching allocator holds at the end by the stream it belongs to, and whether every loss is
bit-identical to the ``shipped`` way's. With ``inplace`` and ``ferry`` among the ways, the batch's
forward and its copy are then timed each alone, giving the least step of any way whose peak
reserved is within the footprint bar: it holds one batch and the bar's headroom, so the next
batch's copy can write only that headroom before the forward has read the batch. Then the bars.
"""
import argparse
import collections
import dataclasses
import json
import os
import statistics
import sys
import time

import torch

WAYS = {"base": ("shipped", "inplace", "ferry"), "sparse_dist": ("shipped", "inplace", "async", "ferry")}
KEYS = ("f0", "f1", "f2", "f3")


def _dense_mean(dense):
    """The per-row mean of every dense tensor, side by side: one leaf of the model's graph for
    the pipelines that trace it (a list of tensors cannot be iterated under tracing)."""
    return torch.stack([t.mean(dim=1) for t in dense], dim=1)


torch.fx.wrap("_dense_mean")


def _torchrec():
    """TorchRec's modules, or exit naming why they do not import."""
    if os.environ.get("FERRY_TORCHREC_STANDINS") == "1":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "python"))
        import importlib
        # The test module's stand-ins for fbgemm_gpu, tensordict and pyre_extensions, for a
        # machine whose torch has no matching fbgemm-gpu; installed before torchrec imports.
        standins = importlib.import_module("torchrec_standins")
        standins.install()
    try:
        import torchrec
        from torchrec.distributed.train_pipeline import TrainPipelineBase, TrainPipelineSparseDist
        from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
        from torchrec.streamable import Pipelineable
    except Exception as exc:  # noqa: BLE001 - any failure to import is the reason named
        print(f"pipeline_study: torchrec does not import beside torch {torch.__version__}: {exc}", file=sys.stderr)
        sys.exit(2)
    return torchrec, TrainPipelineBase, TrainPipelineSparseDist, KeyedJaggedTensor, Pipelineable


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch-mib", type=int, default=1024)
    ap.add_argument("--leaves", type=int, default=26, help="tensors per batch (at least 4)")
    ap.add_argument("--source", choices=("pinned", "pageable"), default="pinned")
    ap.add_argument("--pipeline", choices=tuple(WAYS), default="base")
    ap.add_argument("--ways", default=None, help="a comma-separated subset of the pipeline's ways")
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--grad-mib", type=int, default=0,
                    help="a parameter of this size whose gradient each backward makes anew (a model whose "
                         "backward allocates as much as the batch, after its dense tensors died)")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the rows and bars to this file")
    ap.add_argument("--profile-copy", action="store_true",
                    help="print where the ferry way's copy call spends its host time (cProfile)")
    ap.add_argument("--cpu", action="store_true",
                    help="a smoke run on the CPU (no memcpy stream, so no in-place branch; no memory figures)")
    args = ap.parse_args(argv)
    if args.leaves < 4:
        ap.error("--leaves: at least 4 (a dense tensor, the ids' values and lengths, the labels)")
    ways = WAYS[args.pipeline] if args.ways is None else tuple(w for w in args.ways.split(",") if w)
    if not ways or any(w not in WAYS[args.pipeline] for w in ways) or ways[0] != "shipped":
        ap.error(f"--ways: 'shipped' first, then ways of {WAYS[args.pipeline]}")
    cuda = not args.cpu
    if cuda and not torch.cuda.is_available():
        print("pipeline_study: needs a CUDA GPU (--cpu for a smoke run)", file=sys.stderr)
        return 2
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torchrec, TrainPipelineBase, TrainPipelineSparseDist, KeyedJaggedTensor, Pipelineable = _torchrec()
    import ferry.torch as ft

    @dataclasses.dataclass
    class StudyBatch(Pipelineable):
        """A user's batch: dense tensors, the ids, the labels."""

        dense: list
        sparse: KeyedJaggedTensor
        labels: torch.Tensor

        def to(self, device, non_blocking=False, data_copy_stream=None):
            if data_copy_stream is None:
                return StudyBatch([t.to(device, non_blocking=non_blocking) for t in self.dense],
                                  self.sparse.to(device, non_blocking=non_blocking),
                                  self.labels.to(device, non_blocking=non_blocking))
            # TorchRec's in-place protocol, by hand: the destinations are the current stream's
            # memory; the copies run on data_copy_stream after the current stream's work (a
            # destination may be memory that work, the last step's backward, still reads).
            srcs = list(self.dense) + [self.sparse.values(), self.sparse.lengths(), self.labels]
            dsts = [torch.empty_like(t, device=device) for t in srcs]
            data_copy_stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(data_copy_stream):
                for d, s in zip(dsts, srcs):
                    d.copy_(s, non_blocking=non_blocking)
            n = len(self.dense)
            ids = KeyedJaggedTensor(keys=self.sparse.keys(), values=dsts[n], lengths=dsts[n + 1],
                                    stride=self.sparse.stride(), length_per_key=self.sparse.length_per_key())
            return StudyBatch(dsts[:n], ids, dsts[n + 2])

        def record_stream(self, stream):
            for t in self.dense:
                t.record_stream(stream)
            self.sparse.record_stream(stream)
            self.labels.record_stream(stream)

        def pin_memory(self):
            return StudyBatch([t.pin_memory() for t in self.dense], self.sparse.pin_memory(), self.labels.pin_memory())

    class Model(torch.nn.Module):
        def __init__(self, n_dense, device):
            super().__init__()
            torch.manual_seed(0)
            dim = 64
            tables = [torchrec.EmbeddingBagConfig(name=f"t_{k}", embedding_dim=dim, num_embeddings=100_000,
                                                  feature_names=[k]) for k in KEYS]
            self.ebc = torchrec.EmbeddingBagCollection(tables=tables, device=device)
            self.dense_in = torch.nn.Linear(n_dense, args.width, device=device)
            self.sparse_in = torch.nn.Linear(dim * len(KEYS), args.width, device=device)
            self.mlp = torch.nn.Sequential(*[m for _ in range(args.layers) for m in
                                             (torch.nn.Linear(args.width, args.width, device=device), torch.nn.ReLU())])
            self.out = torch.nn.Linear(args.width, 1, device=device)
            self.grad_param = torch.nn.Parameter(torch.zeros((args.grad_mib << 20) // 4, device=device)) \
                if args.grad_mib else None
            self.losses = []

        def forward(self, batch):
            d = _dense_mean(batch.dense)
            s = self.ebc(batch.sparse).values()
            x = self.mlp(self.dense_in(d) + self.sparse_in(s))
            logit = self.out(x).squeeze(1)
            if self.grad_param is not None:
                logit = logit + self.grad_param.sum()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, batch.labels)
            if not isinstance(loss, torch.fx.Proxy):  # TrainPipelineSparseDist traces the model first
                self.losses.append(loss.detach())
            return loss, logit.detach()

    # The batches: three distinct ones, cycled.
    n_dense = args.leaves - 3
    dense_bytes = args.batch_mib << 20
    cols = max(1, dense_bytes // (n_dense * args.rows * 4))
    g = torch.Generator().manual_seed(1)
    base = torch.rand(args.rows * cols + 3 * 4096, generator=g)
    batches = []
    print(f"[pipeline_study] making 3 batches of {n_dense} x {args.rows} x {cols} fp32 "
          f"({n_dense * args.rows * cols * 4 / (1 << 20):.0f} MiB) in {args.source} memory", file=sys.stderr, flush=True)
    for b in range(3):
        dense = []
        for j in range(n_dense):
            o = (b * 7919 + j * 131) % 4096
            dense.append(base[o:o + args.rows * cols].view(args.rows, cols).clone())
        lengths = torch.randint(0, 8, (len(KEYS) * args.rows,), generator=g, dtype=torch.int32)
        values = torch.randint(0, 100_000, (int(lengths.sum()),), generator=g, dtype=torch.int64)
        ids = KeyedJaggedTensor(keys=list(KEYS), values=values, lengths=lengths, stride=args.rows)
        # The lengths per key, known on the host as a data loader knows them: the model's
        # embedding lookup then needs no device-to-host read, and progress()'s host time is
        # the pipeline's and the copy's, not a wait for the GPU.
        ids.length_per_key()
        labels = torch.randint(0, 2, (args.rows,), generator=g).float()
        batch = StudyBatch(dense, ids, labels)
        batches.append(batch.pin_memory() if args.source == "pinned" and cuda else batch)
    del base
    batch_bytes = sum(t.numel() * t.element_size() for t in batches[0].dense) + \
        batches[0].sparse.values().nbytes + batches[0].sparse.lengths().nbytes + batches[0].labels.nbytes

    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")

    def sync():
        if cuda:
            torch.cuda.synchronize()
    total_steps = args.warmup + args.steps

    def loader():
        for k in range(total_steps + 2):  # the pipeline reads ahead
            yield batches[k % 3]

    import threading
    from torchrec.distributed.train_pipeline import train_pipelines as tp_module
    from torchrec.distributed.train_pipeline import utils as tp_utils
    copy_s = {"main": 0.0, "worker": 0.0}

    profiler = {"on": False, "prof": None}

    def timed(original):
        def to_device(*a, **k):
            t0 = time.perf_counter()
            try:
                if profiler["on"] and threading.current_thread() is threading.main_thread():
                    return profiler["prof"].runcall(original, *a, **k)
                return original(*a, **k)
            finally:
                side = "main" if threading.current_thread() is threading.main_thread() else "worker"
                copy_s[side] += time.perf_counter() - t0
        return to_device

    # The batch's copy call (the pipeline's _to_device: the batch's .to), timed on whichever
    # thread makes it.
    tp_module._to_device = timed(tp_module._to_device)
    tp_utils._to_device = timed(tp_utils._to_device)

    def run(way):
        sync()
        if cuda:
            torch.cuda.empty_cache()
        model = Model(n_dense, dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        sync()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        kwargs = {}
        if way != "shipped":
            kwargs["enable_inplace_copy_batch"] = True
        if way == "async":
            kwargs["async_inplace_copy"] = True
        cls = TrainPipelineBase if args.pipeline == "base" else TrainPipelineSparseDist
        pipeline = cls(model, opt, dev, **kwargs)
        it = ft.batches(loader()) if way == "ferry" else loader()
        if way == "ferry":
            from ferry.torch._engine import gpu_backend
            engine_dev = ft.engine(gpu_backend(), dev.index)[0] if cuda else None
            waits0 = engine_dev.host_waits if cuda else 0
        host = []
        start = None
        if args.profile_copy and way == "ferry":
            import cProfile
            profiler["prof"] = cProfile.Profile()
        for k in range(total_steps):
            if k == args.warmup:
                sync()
                start = time.perf_counter()
                copy_s["main"] = copy_s["worker"] = 0.0
                profiler["on"] = profiler["prof"] is not None
            t0 = time.perf_counter()
            pipeline.progress(it)
            host.append(time.perf_counter() - t0)
        host_waits = engine_dev.host_waits - waits0 if way == "ferry" and cuda else 0
        sync()
        step_ms = (time.perf_counter() - start) * 1e3 / args.steps
        if profiler["on"]:
            import pstats
            profiler["on"] = False
            print(f"[pipeline_study] where {way}'s copy call spent its host time over {args.steps} steps:", file=sys.stderr)
            pstats.Stats(profiler["prof"], stream=sys.stderr).sort_stats("tottime").print_stats(14)
            profiler["prof"] = None
        by_stream = collections.Counter()
        named = {}
        if cuda:
            for seg in torch.cuda.memory_snapshot():
                by_stream[seg["stream"]] += seg["total_size"]
            streams = {"current": torch.cuda.current_stream(dev).cuda_stream}
            memcpy = getattr(pipeline, "_memcpy_stream", None)
            if memcpy is not None:
                streams["memcpy"] = memcpy.cuda_stream
            named = {v: k for k, v in streams.items()}
        row = {"way": way, "step_ms": step_ms, "peak_reserved": torch.cuda.max_memory_reserved() if cuda else 0,
               "peak_allocated": torch.cuda.max_memory_allocated() if cuda else 0,
               "host_ms": 1e3 * sum(host[args.warmup:]) / args.steps,
               "copy_host_ms": 1e3 * copy_s["main"] / args.steps, "ferry_host_waits": host_waits, "copy_worker_ms": 1e3 * copy_s["worker"] / args.steps,
               "reserved_by_stream": {named.get(s, hex(s)): n for s, n in by_stream.items()},
               "losses": [float(x) for x in torch.stack(model.losses).cpu()],
               "loss_bits": torch.stack(model.losses).cpu().view(torch.int32).tolist()}
        if hasattr(pipeline, "_shutdown_async_inplace_copy"):
            pipeline._shutdown_async_inplace_copy()
        del pipeline, model, opt, it
        return row

    def alone(reps=5):
        """The batch's forward and its copy, each alone on the GPU (median ms of `reps`, CUDA
        events): what bounds the step of a way that holds one batch."""
        model = Model(n_dense, dev)
        side = torch.cuda.Stream(dev)
        fwd, copy = [], []
        on_gpu = batches[0].to(dev, non_blocking=True)
        for _ in range(reps + 1):
            for times, fn, stream in ((copy, lambda: batches[1].to(dev, non_blocking=True), side),
                                      (fwd, lambda: model(on_gpu), torch.cuda.current_stream(dev))):
                sync()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                with torch.cuda.stream(stream):
                    a.record()
                    out = fn()
                    b.record()
                sync()
                times.append(a.elapsed_time(b))
                del out
        del model, on_gpu
        sync()
        return statistics.median(fwd[1:]), statistics.median(copy[1:])

    rows = []
    for way in ways:
        print(f"[pipeline_study] {way}", file=sys.stderr, flush=True)
        rows.append(run(way))
    bound = None
    if cuda and "inplace" in ways and "ferry" in ways:
        fwd_ms, copy_ms = alone()
        by = {r["way"]: r for r in rows}
        # A way within the footprint bar holds the batch being read plus what the forward
        # allocates (the peak allocated, the same in every way), and at most the bar's headroom
        # more: the next batch's copy writes no more than that headroom before this batch's
        # forward releases its memory, and the rest after it.
        headroom = max(0.0, 1.02 * by["inplace"]["peak_reserved"] - by["inplace"]["peak_allocated"])
        early = min(1.0, headroom / batch_bytes)
        bound = {"forward_ms": fwd_ms, "copy_ms": copy_ms, "headroom_bytes": headroom,
                 "step_ms": fwd_ms + copy_ms * (1.0 - early)}
    ref = rows[0]
    for r in rows:
        r["bit_identical"] = r["loss_bits"] == ref["loss_bits"]
    gib = 1 << 30
    device_name = torch.cuda.get_device_name() if cuda else "the CPU (smoke run)"
    print(f"pipeline study on {device_name} (torch {torch.__version__}, torchrec "
          f"{getattr(torchrec, '__version__', '?')}): TorchRec's {args.pipeline} pipeline, batches of "
          f"{batch_bytes / (1 << 20):.0f} MiB in {args.leaves} leaves, {args.source}; {args.steps} steps after "
          f"{args.warmup}" + (f"; a {args.grad_mib} MiB gradient made in each backward" if args.grad_mib else ""))
    print(f"{'way':<9} {'ms/step':>8} {'peak reserved GiB':>18} {'peak alloc GiB':>15} {'host ms/progress':>17} "
          f"{'copy host ms':>13} {'losses':>14}  reserved at the end by stream (GiB)")
    for r in rows:
        held = ", ".join(f"{k} {v / gib:.2f}" for k, v in sorted(r["reserved_by_stream"].items(), key=lambda kv: -kv[1]))
        print(f"{r['way']:<9} {r['step_ms']:>8.2f} {r['peak_reserved'] / gib:>18.3f} {r['peak_allocated'] / gib:>15.3f} "
              f"{r['host_ms']:>17.2f} {r['copy_host_ms']:>13.2f} {'bit-identical' if r['bit_identical'] else 'DIFFER':>14}  "
              f"{held}" + (f" (copy on TorchRec's thread: {r['copy_worker_ms']:.2f} ms/step)" if r["copy_worker_ms"] else "")
              + (f" (ferry's host waits: {r['ferry_host_waits']})" if r["ferry_host_waits"] else ""))
    by = {r["way"]: r for r in rows}
    bars = []
    if "ferry" in by:
        f = by["ferry"]
        torchrec_ways = [w for w in by if w != "ferry"]
        best = min(by[w]["step_ms"] for w in torchrec_ways)
        bars.append(("losses bit-identical to shipped's", f["bit_identical"], True, "eq"))
        if "inplace" in by:
            bars.append(("peak reserved ≤ 1.02 × inplace's", f["peak_reserved"], 1.02 * by["inplace"]["peak_reserved"], "le"))
        bars.append(("peak reserved < shipped's", f["peak_reserved"], by["shipped"]["peak_reserved"], "lt"))
        limit = 1.0 if args.source == "pinned" else 0.5
        bars.append((f"step ≤ {limit} × the best TorchRec way's", f["step_ms"], limit * best, "le"))
        if "inplace" in by and args.leaves >= 500:
            bars.append(("host time of the copy call ≤ 0.25 × inplace's", f["copy_host_ms"],
                         0.25 * by["inplace"]["copy_host_ms"], "le"))
    if bound is not None:
        print(f"  one batch of memory: forward alone {bound['forward_ms']:.2f} ms, the batch's copy alone "
              f"{bound['copy_ms']:.2f} ms, the footprint bar's headroom {bound['headroom_bytes'] / gib:.3f} GiB: "
              f"a way within 1.02 x inplace's peak reserved steps in at least {bound['step_ms']:.2f} ms "
              f"(forward + the copy less what the headroom lets it write early)")
    verdicts = []
    for name, value, limit, op in bars:
        ok = {"eq": value == limit, "le": value <= limit, "lt": value < limit}[op]
        verdicts.append({"name": name, "value": value, "limit": limit, "pass": bool(ok)})
        shown = value if isinstance(value, bool) else f"{value:.4g} (limit {limit:.4g})"
        print(f"  {'PASS' if ok else 'FAIL'} {name}: {shown}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"tool": "pipeline_study", "device": device_name, "torch": torch.__version__,
                       "args": vars(args), "batch_bytes": batch_bytes, "rows": rows, "bars": verdicts,
                       "one_batch_bound": bound}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
