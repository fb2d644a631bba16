# SPDX-License-Identifier: MIT
"""TorchRec's own classes and train pipelines through ferry.torch.pipeline_to and
ferry.torch.batches: KeyedJaggedTensor, JaggedTensor, KeyedTensor, torchrec.datasets.utils.Batch
and a user dataclass Pipelineable come back bit-identical to their own ``.to``, over ferry's
copies; TorchRec's TrainPipelineBase and TrainPipelineSparseDist train a small model with the
one-line change (``progress(ferry.torch.batches(...))``) to losses bit-identical to the
unmodified pipeline's. On CPU the pipelines' memcpy stream is None, so the in-place branch
(``data_copy_stream``) runs only in the CUDA cases, which skip without a GPU.

The module skips, naming why, where torchrec is not installed or does not work beside this
torch (fbgemm-gpu is built for one torch minor); FERRY_REQUIRE_TORCHREC=1 (CI, which installs
the pinned set) turns that skip into a failure. FERRY_TORCHREC_STANDINS=1 (for a machine whose
torch has no matching fbgemm-gpu) first makes fbgemm_gpu, tensordict and pyre_extensions inert
stand-in modules and registers fbgemm's asynchronous_complete_cumsum as plain torch: TorchRec's
own classes still run, and a warning in pytest's summary says so.
"""
import dataclasses
import gc
import json
import os
import subprocess
import sys
import warnings

import pytest

import ferry

torch = pytest.importorskip("torch")

import torchrec_standins  # noqa: E402 - needs torch

STANDINS = os.environ.get("FERRY_TORCHREC_STANDINS") == "1"


def _skip(reason):
    if os.environ.get("FERRY_REQUIRE_TORCHREC") == "1":
        pytest.fail(f"FERRY_REQUIRE_TORCHREC=1 and {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


try:
    import ferry.torch as ft
except ferry.Error as exc:
    _skip(f"ferry.torch does not import: {exc}")

_standin_lib = None
if STANDINS:
    _standin_lib = torchrec_standins.install()
    warnings.warn("FERRY_TORCHREC_STANDINS=1: fbgemm_gpu, tensordict and pyre_extensions are inert stand-ins and "
                  "fbgemm's asynchronous_complete_cumsum is plain torch; TorchRec's own classes run")
try:
    import torchrec
    from torchrec.datasets.utils import Batch
    from torchrec.distributed.train_pipeline import TrainPipelineBase, TrainPipelineSparseDist
    from torchrec.sparse.jagged_tensor import JaggedTensor, KeyedJaggedTensor, KeyedTensor
    from torchrec.streamable import Pipelineable
except Exception as exc:  # noqa: BLE001 - any failure to import is the reason named
    _skip(f"torchrec does not import beside torch {torch.__version__}: {type(exc).__name__}: {exc}")
try:
    # The one fbgemm op a KJT needs (its offsets): absent where fbgemm-gpu's library did not
    # load beside this torch, which torchrec's import tolerates.
    torch.ops.fbgemm.asynchronous_complete_cumsum(torch.tensor([1, 2], dtype=torch.int64))
except Exception as exc:  # noqa: BLE001
    _skip(f"torchrec {torchrec.__version__ if hasattr(torchrec, '__version__') else '?'} imports but fbgemm's "
          f"ops do not run beside torch {torch.__version__} (a mismatched fbgemm-gpu): {type(exc).__name__}: {exc}")

has_cuda = torch.cuda.is_available() and ferry.Device.built_with(ferry.Backend.cuda)
needs_cuda = pytest.mark.skipif(not has_cuda, reason="needs a CUDA GPU and ferry built with its CUDA backend")
CPU = torch.device("cpu")


@dataclasses.dataclass
class UserBatch(Pipelineable):
    """A user's Pipelineable: a dataclass whose .to moves some fields and converts one."""

    dense: torch.Tensor
    ids: KeyedJaggedTensor
    labels: torch.Tensor
    name: str = "user"

    def to(self, device, non_blocking=False):
        return UserBatch(self.dense.to(device, non_blocking=non_blocking),
                         self.ids.to(device, non_blocking=non_blocking),
                         self.labels.to(device=device, dtype=torch.float64, non_blocking=non_blocking), self.name)

    def record_stream(self, stream):
        self.dense.record_stream(stream)
        self.ids.record_stream(stream)
        self.labels.record_stream(stream)


def kjt(seed, batch=4, keys=("f1", "f2"), weighted=False):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 4, (len(keys) * batch,), generator=g, dtype=torch.int32)
    values = torch.randint(0, 100, (int(lengths.sum()),), generator=g, dtype=torch.int64)
    weights = torch.rand(values.numel(), generator=g) if weighted else None
    return KeyedJaggedTensor(keys=list(keys), values=values, lengths=lengths, weights=weights)


def torchrec_batch(seed, batch=4, pin=False):
    g = torch.Generator().manual_seed(seed + 1000)
    b = Batch(dense_features=torch.randn(batch, 8, generator=g), sparse_features=kjt(seed, batch),
              labels=torch.randint(0, 2, (batch,), generator=g).float())
    return b.pin_memory() if pin else b


def tensors_of(obj):
    """Every tensor an object's result holds, with a name, in a fixed order."""
    if isinstance(obj, torch.Tensor):
        return [("", obj)]
    if isinstance(obj, KeyedJaggedTensor):
        out = [("values", obj.values()), ("lengths", obj.lengths()), ("offsets", obj.offsets())]
        if obj.weights_or_none() is not None:
            out.append(("weights", obj.weights()))
        return out
    if isinstance(obj, JaggedTensor):
        out = [("values", obj.values()), ("lengths", obj.lengths()), ("offsets", obj.offsets())]
        if obj.weights_or_none() is not None:
            out.append(("weights", obj.weights()))
        return out
    if isinstance(obj, KeyedTensor):
        return [("values", obj.values())]
    if dataclasses.is_dataclass(obj):
        return [(f"{f.name}.{n}", t) for f in dataclasses.fields(obj) for n, t in tensors_of(getattr(obj, f.name))]
    return []


def same(a, b):
    """`a` and `b` are the same type with bit-identical tensors (dtype, shape, device, bytes)
    and the same keys, strides and lengths per key where TorchRec keeps them."""
    assert type(a) is type(b)
    ta, tb = tensors_of(a), tensors_of(b)
    assert [n for n, _ in ta] == [n for n, _ in tb]
    for (n, x), (_, y) in zip(ta, tb):
        assert x.dtype == y.dtype and x.shape == y.shape and x.device == y.device, n
        assert torch.equal(x.view(torch.uint8) if x.numel() else x, y.view(torch.uint8) if y.numel() else y), n
    if isinstance(a, KeyedJaggedTensor):
        assert a.keys() == b.keys() and a.stride() == b.stride() and a.length_per_key() == b.length_per_key()
    if isinstance(a, KeyedTensor):
        assert a.keys() == b.keys() and a.length_per_key() == b.length_per_key() and a.key_dim() == b.key_dim()


def no_alias(src, out):
    """ferry copied every tensor (TorchRec's own .to("cpu") returns the sources themselves)."""
    srcs = {t.untyped_storage().data_ptr() for _, t in tensors_of(src) if t.numel()}
    for n, t in tensors_of(out):
        if t.numel():
            assert t.untyped_storage().data_ptr() not in srcs, f"{n} is its source, not ferry's copy"


def structures():
    jt = JaggedTensor(values=torch.arange(10, dtype=torch.float32), lengths=torch.tensor([3, 0, 7]),
                      weights=torch.rand(10))
    kt = KeyedTensor(keys=["a", "b"], length_per_key=[2, 3], values=torch.randn(4, 5))
    user = UserBatch(torch.randn(3, 5), kjt(7, batch=3, weighted=True), torch.tensor([1, 0, 1]))
    return {"KeyedJaggedTensor": kjt(1, weighted=True), "JaggedTensor": jt, "KeyedTensor": kt,
            "Batch": torchrec_batch(2), "UserBatch": user, "Tensor": torch.randn(6, 2)}


@pytest.mark.parametrize("name", list(structures()))
def test_torchrec_classes_match_their_own_to_on_cpu(name):
    src = structures()[name]
    ref = src.to(CPU, non_blocking=False)
    out = ft.pipeline_to(src, CPU, non_blocking=True, data_copy_stream=None)
    same(ref, out)
    no_alias(src, out)
    wrapped = next(ft.batches([src])).to(device=CPU, non_blocking=True)
    same(ref, wrapped)
    no_alias(src, wrapped)


def test_the_wrapper_is_a_pipelineable_of_its_batch():
    src = torchrec_batch(3)
    w = next(ft.batches(iter([src])))
    assert isinstance(w, Pipelineable) and w.batch is src
    assert w.dense_features is src.dense_features  # other attributes are the batch's
    assert list(ft.batches([None])) == [None]


def test_a_method_replaces_the_batch_to():
    class Own(UserBatch):
        def to(self, device, non_blocking=False, data_copy_stream=None):
            return ft.pipeline_to(self, device, non_blocking, data_copy_stream, method=UserBatch.to)

    u = structures()["UserBatch"]
    src = Own(u.dense, u.ids, u.labels)
    out = src.to(CPU, non_blocking=True)
    same(UserBatch.to(src, CPU), out)
    no_alias(src, out)


def test_bad_arguments_are_refused():
    b = torchrec_batch(4)
    for call, words in [
        (lambda: ft.pipeline_to(b, "nowhere"), ["nowhere", "not a torch device"]),
        (lambda: ft.pipeline_to(b, CPU, non_blocking=1), ["non_blocking", "int"]),
        (lambda: ft.pipeline_to(b, CPU, data_copy_stream=3), ["data_copy_stream", "torch.cuda.Stream"]),
        (lambda: ft.pipeline_to(object(), CPU), ["object", "no .to"]),
        (lambda: ft.pipeline_to(b, CPU, method=5), ["method", "callable"]),
        (lambda: ft.batches(5), ["source", "iterable"]),
    ]:
        with pytest.raises(ferry.Error) as e:
            call()
        assert e.value.code == "invalid_argument"
        for w in words:
            assert w in e.value.message, e.value.message


# ---- TorchRec's train pipelines -------------------------------------------------------------

class Model(torch.nn.Module):
    """A small recommendation model of TorchRec's modules: an EmbeddingBagCollection over the
    batch's KJT, a dense layer, and a loss; returns (loss, prediction) as the pipelines expect."""

    def __init__(self, device, seen=None):
        super().__init__()
        torch.manual_seed(0)
        tables = [torchrec.EmbeddingBagConfig(name=f"t_{k}", embedding_dim=4, num_embeddings=100,
                                              feature_names=[k]) for k in ("f1", "f2")]
        self.ebc = torchrec.EmbeddingBagCollection(tables=tables, device=device)
        self.dense = torch.nn.Linear(8, 4, device=device)
        self.over = torch.nn.Linear(12, 1, device=device)
        self.seen = seen

    def forward(self, batch):
        if self.seen is not None and not isinstance(batch, torch.fx.Proxy):  # SparseDist traces it first
            self.seen.append(batch)
        sparse = self.ebc(batch.sparse_features).values()
        x = torch.cat([self.dense(batch.dense_features), sparse], dim=1)
        pred = self.over(x).squeeze(1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(pred, batch.labels)
        return loss, pred.detach()


def train(pipeline_class, device, wrap, steps=6, pin=False, **kwargs):
    """Losses and predictions of `steps` steps of a fresh model under `pipeline_class`; with
    `wrap` the dataloader goes through ferry.torch.batches (the one-line change)."""
    data = [torchrec_batch(s, pin=pin) for s in range(steps)]
    seen = []
    model = Model(device, seen)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    pipeline = pipeline_class(model, opt, device, **kwargs)
    it = ft.batches(data) if wrap else iter(data)
    out = []
    while True:
        try:
            out.append(pipeline.progress(it))
        except StopIteration:
            break
    if device.type == "cuda":
        torch.cuda.synchronize()
    params = [p.detach().cpu() for p in model.parameters()]
    return [o.cpu() for o in out], params, seen, data


def assert_bit_identical(a, b):
    (out_a, par_a, seen_a, _), (out_b, par_b, seen_b, data_b) = a, b
    assert len(out_a) == len(out_b) and out_a
    for x, y in zip(out_a + par_a, out_b + par_b):
        assert torch.equal(x.view(torch.uint8), y.view(torch.uint8))
    assert all(type(s) is Batch for s in seen_b), [type(s) for s in seen_b]


@pytest.mark.parametrize("inplace", [False, True])
def test_train_pipeline_base_on_cpu(inplace):
    ref = train(TrainPipelineBase, CPU, wrap=False, enable_inplace_copy_batch=inplace)
    got = train(TrainPipelineBase, CPU, wrap=True, enable_inplace_copy_batch=inplace)
    assert_bit_identical(ref, got)
    _, _, seen, data = got
    for s, d in zip(seen, data):
        no_alias(d, s)  # the model got ferry's copies, not the dataloader's tensors


def _sparse_dist(device, wrap, **kwargs):
    try:
        return train(TrainPipelineSparseDist, device, wrap, **kwargs)
    except (RuntimeError, ValueError, AssertionError) as exc:
        if "process group" in str(exc) or "init_process_group" in str(exc):
            pytest.skip(f"TrainPipelineSparseDist needs a process group here: {exc}")
        raise


def test_train_pipeline_sparse_dist_on_cpu():
    ref = _sparse_dist(CPU, wrap=False)
    got = _sparse_dist(CPU, wrap=True)
    assert_bit_identical(ref, got)
    _, _, seen, data = got
    for s, d in zip(seen, data):
        no_alias(d, s)


# ---- CUDA: the in-place branch --------------------------------------------------------------

@needs_cuda
@pytest.mark.parametrize("pin", [False, True], ids=["pageable", "pinned"])
@pytest.mark.parametrize("pipeline_class", [TrainPipelineBase, TrainPipelineSparseDist],
                         ids=["TrainPipelineBase", "TrainPipelineSparseDist"])
def test_inplace_pipeline_on_cuda(pipeline_class, pin):
    dev = torch.device("cuda", torch.cuda.current_device())
    run = train if pipeline_class is TrainPipelineBase else (lambda c, d, w, **k: _sparse_dist(d, w, **k))
    ref = run(pipeline_class, dev, False, pin=pin)  # TorchRec's shipped way: side stream + record_stream
    got = run(pipeline_class, dev, True, pin=pin, enable_inplace_copy_batch=True)
    assert_bit_identical(ref, got)


@needs_cuda
def test_inplace_copy_is_the_current_streams_memory_ordered_for_the_memcpy_stream():
    dev = torch.device("cuda", torch.cuda.current_device())
    memcpy = torch.cuda.Stream(dev)
    main = torch.cuda.current_stream(dev)
    src = torchrec_batch(5, batch=1 << 12, pin=True)
    calls = []
    orig = torch.Tensor.record_stream

    def spy(self, s):
        calls.append(s)
        return orig(self, s)
    torch.Tensor.record_stream = spy
    try:
        with torch.cuda.stream(memcpy):
            torch.cuda._sleep(50_000_000)  # the memcpy stream is busy: the copy waits behind it
        out = next(ft.batches([src])).to(device=dev, non_blocking=True, data_copy_stream=memcpy)
        assert torch.cuda.current_stream(dev) == main
        main.wait_stream(memcpy)  # the pipeline's ordering
        got = out.to(CPU)
    finally:
        torch.Tensor.record_stream = orig
    assert not calls
    same(src.to(CPU), got)
    with pytest.raises(ferry.Error) as e:
        ft.pipeline_to(src, CPU, data_copy_stream=memcpy)
    assert "not 'cpu'" in e.value.message


@dataclasses.dataclass
class WideBatch(Pipelineable):
    """A batch whose bytes are in many dense tensors, with TorchRec's in-place ``.to`` written by
    hand as its users write it: destinations on the current stream, ``copy_`` per leaf on
    data_copy_stream after the current stream's work."""

    dense: list
    ids: KeyedJaggedTensor
    labels: torch.Tensor

    def to(self, device, non_blocking=False, data_copy_stream=None):
        if data_copy_stream is None:
            return WideBatch([t.to(device, non_blocking=non_blocking) for t in self.dense],
                             self.ids.to(device, non_blocking=non_blocking), self.labels.to(device, non_blocking=non_blocking))
        srcs = list(self.dense) + [self.ids.values(), self.ids.lengths(), self.labels]
        dsts = [torch.empty_like(t, device=device) for t in srcs]
        data_copy_stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(data_copy_stream):
            for d, s in zip(dsts, srcs):
                d.copy_(s, non_blocking=non_blocking)
        n = len(self.dense)
        return WideBatch(dsts[:n], KeyedJaggedTensor(keys=self.ids.keys(), values=dsts[n], lengths=dsts[n + 1],
                                                     stride=self.ids.stride()), dsts[n + 2])

    def record_stream(self, stream):
        for t in self.dense:
            t.record_stream(stream)
        self.ids.record_stream(stream)
        self.labels.record_stream(stream)


class WideModel(torch.nn.Module):
    """Reads every dense tensor (which then dies with the batch, after the forward) and the
    ids (which the embedding's backward keeps); with `late_read`, the GPU first spins for that
    many cycles, so that the forward's reads come long after the host let the batch go."""

    def __init__(self, device, n_dense, late_read=0):
        super().__init__()
        self.late_read = late_read
        torch.manual_seed(0)
        tables = [torchrec.EmbeddingBagConfig(name=f"t_{k}", embedding_dim=4, num_embeddings=100,
                                              feature_names=[k]) for k in ("f1", "f2")]
        self.ebc = torchrec.EmbeddingBagCollection(tables=tables, device=device)
        self.dense = torch.nn.Linear(n_dense, 4, device=device)
        self.over = torch.nn.Linear(12, 1, device=device)

    def forward(self, batch):
        if self.late_read:
            torch.cuda._sleep(self.late_read)
        d = torch.stack([t.mean(dim=1) for t in batch.dense], dim=1)
        x = torch.cat([self.dense(d), self.ebc(batch.ids).values()], dim=1)
        pred = self.over(x).squeeze(1)
        return torch.nn.functional.binary_cross_entropy_with_logits(pred, batch.labels), pred.detach()


def _wide_footprint(dev, wrap, steps=6, leaves=8, leaf_bytes=16 << 20, late_read=0):
    """Peak reserved bytes and the predictions of TrainPipelineBase with in-place copies of
    WideBatches (pinned), ferry's (`wrap`) or the hand-written ones."""
    rows = 1024
    g = torch.Generator().manual_seed(5)
    data = []
    for s in range(3):
        dense = [torch.rand(rows, leaf_bytes // (rows * 4), generator=g) for _ in range(leaves)]
        data.append(WideBatch(dense, kjt(s, batch=rows), torch.randint(0, 2, (rows,), generator=g).float()))
    data = [WideBatch([t.pin_memory() for t in b.dense], b.ids.pin_memory(), b.labels.pin_memory()) for b in data]
    gc.collect()  # earlier tests' pipelines (reference cycles) and their batches go first
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    model = WideModel(dev, leaves, late_read)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    pipeline = TrainPipelineBase(model, opt, dev, enable_inplace_copy_batch=True)
    source = (data[k % 3] for k in range(steps))
    it = ft.batches(source) if wrap else source
    preds = []
    while True:
        try:
            preds.append(pipeline.progress(it))
        except StopIteration:
            break
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_reserved()
    out = [p.cpu() for p in preds]
    del pipeline, model, opt, preds
    torch.cuda.empty_cache()
    return peak, out


def footprint_child():
    """The footprint test's runs, in a process of its own (see the test); prints them as JSON."""
    dev = torch.device("cuda", torch.cuda.current_device())
    ref_peak, ref = _wide_footprint(dev, wrap=False)
    peak, got = _wide_footprint(dev, wrap=True)
    _, late = _wide_footprint(dev, wrap=True, late_read=100_000_000)

    def same(xs):
        return len(xs) == len(ref) and all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(ref, xs))
    print(json.dumps({"ref_peak": ref_peak, "peak": peak, "same": same(got), "same_late": same(late)}))


@needs_cuda
def test_inplace_pipeline_footprint_is_the_inplace_ways():
    """TorchRec's pipeline with ferry's in-place copies holds no more than with the hand-written
    ones, with bit-identical results: a batch's memory is given back as its tensors die and
    serves the next batch, and only once the training stream has read it: with the forward's
    reads held back on the GPU the results stay bit-identical (memory released in the memcpy
    stream's order, or a copy that does not wait for the release, would be overwritten by the
    next batch first). The runs have a process of their own: blocks that earlier tests left in
    the caching allocator would otherwise count in the peak."""
    child = subprocess.run([sys.executable, "-c", "import test_torchrec; test_torchrec.footprint_child()"],
                           cwd=os.path.dirname(os.path.abspath(__file__)), capture_output=True, text=True,
                           timeout=600, check=False)
    assert child.returncode == 0, child.stderr[-4000:]
    r = json.loads(child.stdout.strip().splitlines()[-1])
    assert r["same"], "ferry's pipeline predictions differ from the hand-written in-place copy's"
    assert r["same_late"], "with the forward's reads late on the GPU, the next batch's copy overwrote the batch first"
    assert r["peak"] <= max(1.02 * r["ref_peak"], r["ref_peak"] + (4 << 20)), r


def _big_and_small(seed):
    g = torch.Generator().manual_seed(seed)
    # An odd size, which no other test's block in ferry's pool has.
    return [torch.rand((3 << 20) + 77777, generator=g).pin_memory(), torch.arange(8, dtype=torch.int64).pin_memory()]


@needs_cuda
def test_inplace_leaf_memory_is_reused_once_its_tensor_dies_after_its_last_read():
    """Under data_copy_stream each leaf has its own block: a leaf that died is reused by the next
    copy while the batch's other leaves live on (one block for the batch would live as long as
    its longest-lived leaf), and that copy waits for the training stream's work that read the
    leaf before it died, and for nothing later."""
    dev = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # no free block of earlier tests' may serve the second call
    memcpy = torch.cuda.Stream(dev)
    main = torch.cuda.current_stream(dev)
    # What pipeline_to does under data_copy_stream: the current stream's memory, waited for by
    # the memcpy stream.
    first = ft.to(_big_and_small(1), dev, target_stream=main, wait_stream=memcpy)
    main.wait_stream(memcpy)
    big, small = first
    expect = float(big.double().sum().cpu())
    old = big.data_ptr()
    torch.cuda._sleep(200_000_000)  # the training stream is busy: its read of `big` comes late
    total = big.double().sum()
    del big, first
    second = ft.to(_big_and_small(2), dev, target_stream=main, wait_stream=memcpy)
    assert second[0].data_ptr() == old, "the dead leaf's block was not reused while its batch's other leaf lives"
    main.wait_stream(memcpy)
    assert float(total.cpu()) == expect, "the copy overwrote the leaf before the training stream's read of it"
    assert torch.equal(small.cpu(), torch.arange(8))
    assert torch.equal(second[0].cpu(), _big_and_small(2)[0])
