# SPDX-License-Identifier: MIT
"""ferry.torch.to on the host backend (device="cpu"): flattening, packing and rebuilding."""
import collections
import dataclasses
import inspect
import os
import subprocess
import sys

import pytest

import ferry

torch = pytest.importorskip("torch")
import ferry.torch as ft  # noqa: E402

P = collections.namedtuple("P", "a b")


@dataclasses.dataclass
class Batch:
    dense: torch.Tensor
    label: str = "x"


class ModelInput:
    """Implements only .to(), like TorchRec's KeyedJaggedTensor and ModelInput."""

    def __init__(self, values, lengths, weights=None):
        self.values, self.lengths, self.weights = values, lengths, weights

    def to(self, device, non_blocking=False):
        return ModelInput(self.values.to(device, non_blocking=non_blocking),
                          self.lengths.to(device, non_blocking=non_blocking),
                          None if self.weights is None else self.weights.to(device, dtype=torch.float64))


def packed(tensors, within=None):
    """Whether the tensors lie in one packed allocation of at most `within` bytes (default: of
    their own aligned sizes): each at a multiple of ALIGNMENT from the first, none overlapping."""
    spans = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in tensors)
    if within is None:
        within = aligned_bytes(tensors)
    base, end = spans[0][0], spans[0][0]
    for start, stop in spans:
        if (start - base) % ft.ALIGNMENT or start < end:
            return False
        end = stop
    return end - base <= within


def aligned_bytes(tensors):
    return sum(-(-t.numel() * t.element_size() // ft.ALIGNMENT) * ft.ALIGNMENT for t in tensors)


def same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(a.view(-1).view(torch.uint8) if a.numel() else a, b.view(-1).view(torch.uint8) if b.numel() else b)


def test_nested_structure_with_empty_leaves_round_trips():
    g = torch.Generator().manual_seed(3)
    obj = {
        "ids": torch.randint(0, 1 << 40, (1000,), generator=g),
        "empty": torch.empty(0, 13),
        "list": [torch.rand(7, 3, generator=g).to(torch.float16), (torch.ones(5, dtype=torch.bool), "tag")],
        "nt": P(torch.arange(6, dtype=torch.int32).view(2, 3)[:, 1], None),
        "dc": Batch(torch.rand(4, 4, generator=g)),
        "od": collections.OrderedDict(z=torch.empty(0, dtype=torch.int64), a=torch.tensor(3.5)),
        "dd": collections.defaultdict(list, k=torch.arange(3)),
        "n": 42,
    }
    r = ft.to(obj, "cpu")
    same(r["ids"], obj["ids"])
    same(r["empty"], obj["empty"])
    same(r["list"][0], obj["list"][0])
    same(r["list"][1][0], obj["list"][1][0])
    assert r["list"][1][1] == "tag" and isinstance(r["list"][1], tuple)
    assert isinstance(r["nt"], P) and r["nt"].b is None
    same(r["nt"].a, obj["nt"].a.contiguous())
    assert isinstance(r["dc"], Batch) and r["dc"].label == "x"
    same(r["dc"].dense, obj["dc"].dense)
    assert list(r["od"].keys()) == ["z", "a"] and isinstance(r["od"], collections.OrderedDict)
    same(r["od"]["a"], obj["od"]["a"])
    assert isinstance(r["dd"], collections.defaultdict) and r["dd"].default_factory is list
    assert r["n"] == 42
    # The copy never aliases its source, and every non-empty leaf sits in one allocation.
    assert r["ids"].data_ptr() != obj["ids"].data_ptr()
    every = [r["ids"], r["empty"], r["list"][0], r["list"][1][0], r["nt"].a, r["dc"].dense, r["od"]["z"],
             r["od"]["a"], r["dd"]["k"]]
    assert packed([r["ids"], r["list"][0], r["dc"].dense, r["od"]["a"]], within=aligned_bytes(every))


def test_leaves_are_aligned_in_one_allocation():
    leaves = [torch.ones(1, dtype=torch.uint8), torch.ones(3, dtype=torch.float64), torch.ones(1, dtype=torch.int16)]
    r = ft.to(leaves, "cpu")
    offsets = [t.data_ptr() - r[0].data_ptr() for t in r]
    assert offsets == [0, ft.ALIGNMENT, 2 * ft.ALIGNMENT]


def _count_glue_calls(monkeypatch):
    """Counts ferry.torch's calls into its glue, and how often the glue handed a leaf back."""
    from ferry.torch import _to
    calls = {"glue": 0, "declined": 0}
    orig = _to._to

    def counting(*a, **k):
        calls["glue"] += 1
        out = orig(*a, **k)
        calls["declined"] += isinstance(out, int)
        return out
    monkeypatch.setattr(_to, "_to", counting)
    return calls


def test_plain_leaves_take_one_glue_call_and_every_dtype_round_trips(monkeypatch):
    calls = _count_glue_calls(monkeypatch)
    g = torch.Generator().manual_seed(5)
    leaves = {
        "f32": torch.rand(33, 7, generator=g),
        "f16": torch.rand(5, generator=g).half(),
        "bf16": torch.rand(9, generator=g).bfloat16(),
        "i64": torch.randint(-(1 << 60), 1 << 60, (300,), generator=g),
        "u8": torch.randint(0, 255, (3, 3, 3), dtype=torch.uint8, generator=g),
        "bool": torch.rand(17, generator=g) > 0.5,
        "c64": torch.randn(4, dtype=torch.complex64, generator=g),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.empty(0, 3),
        "sliced": torch.arange(100, dtype=torch.int32)[37:],  # contiguous, at an offset of its storage
        "big": torch.arange(1 << 18, dtype=torch.int64),      # above DMA_MIN_BYTES: copied from its own memory
    }
    r = ft.to(leaves, "cpu")
    assert calls == {"glue": 1, "declined": 0}
    for k, v in leaves.items():
        same(r[k], v)
        assert r[k].device.type == "cpu" and not r[k].requires_grad
    assert r["big"].data_ptr() != leaves["big"].data_ptr()
    assert packed([t for t in r.values() if t.numel()])
    # Dropping every result at once hands the memory back; the sources are not held.
    del r
    assert ft.held_sources() == 0


@pytest.mark.parametrize("leaf, why", [
    (lambda: torch.arange(12.).view(3, 4).t(), "not contiguous"),
    (lambda: torch.ones(3, dtype=torch.complex64).conj(), "a conjugate view"),
    (lambda: torch.arange(6.)[::2], "strided with gaps"),
    (lambda: torch._neg_view(torch.arange(3.)), "a negative view"),
])
def test_leaves_the_glue_does_not_read_as_they_are_are_made_plain(monkeypatch, leaf, why):
    calls = _count_glue_calls(monkeypatch)
    x = leaf()
    r = ft.to([torch.ones(2), x], "cpu")
    assert calls == {"glue": 2, "declined": 1}, why
    assert torch.equal(r[1].resolve_conj().resolve_neg(), x.resolve_conj().resolve_neg()) and r[1].is_contiguous()
    assert not r[1].is_conj() and not r[1].is_neg()


def test_a_leaf_requiring_grad_is_refused_before_anything_is_copied(monkeypatch):
    # The glue reads every leaf before it allocates or copies; it declines this one, and the
    # checks then name it.
    calls = _count_glue_calls(monkeypatch)
    with pytest.raises(ferry.Error) as e:
        ft.to([torch.ones(2), torch.ones(3, requires_grad=True)], "cpu")
    assert e.value.code == "invalid_argument" and "requires grad" in str(e.value)
    assert calls == {"glue": 1, "declined": 1}


def test_the_destinations_wait_for_the_latest_overlapping_release_point():
    """The record each destination of `to` keeps: a reused range waits for the latest release
    point it overlaps that is not reached, and for nothing else."""
    dev, _ = ft.engine(ferry.Backend.host)
    sem = dev.create_semaphore(0)
    d = ft.glue.ReleasePoints()
    assert d.wait_for(4096, 256) is None
    d.record(4096, 256, sem.at(1))
    d.record(4096, 128, sem.at(2))  # a later user of the same range
    assert d.pending == 2
    assert d.wait_for(4096, 512).value == 2  # overlaps both: waits for the later one
    assert d.wait_for(4096 + 128, 64).value == 1  # only the first one's range
    assert d.wait_for(8192, 256) is None  # elsewhere: waits for nothing
    sem.signal(2)
    assert d.wait_for(4096, 64) is None and d.pending == 0
    d.record(8192, 256, sem.at(2))  # a reached point is dropped by the next query
    assert d.wait_for(8192, 256) is None and d.pending == 0


def test_the_release_record_finds_every_overlapping_range_among_many():
    """Hundreds of ranges in use at once (a batch's leaves, each released as its tensor dies),
    of many lengths, some overlapping, a few much longer than the rest: every query waits for
    the latest point among the ranges it overlaps, as a pass over all of them finds it, also
    for a range that starts far before the asked one and reaches into it."""
    import random

    dev, _ = ft.engine(ferry.Backend.host)
    sem = dev.create_semaphore(0)
    d = ft.glue.ReleasePoints()
    rng = random.Random(7)
    held = []  # (start, end, value): nothing is signalled, so every range stays held
    for value in range(1, 601):
        start = rng.randrange(0, 1 << 24)
        length = rng.choice((1, 64, 4096, 1 << 16, 1 << 18)) if value % 97 else 1 << 22
        d.record(start, length, sem.at(value))
        held.append((start, start + length, value))
        if value % 3 == 0:
            q = rng.randrange(0, 1 << 24)
            n = rng.choice((1, 256, 4096, 1 << 16))
            want = max((v for a, b, v in held if a < q + n and q < b), default=None)
            got = d.wait_for(q, n)
            assert (None if got is None else got.value) == want, (q, n, want, got)
    # The long ranges reach far past their start: queries inside them, away from any start.
    for a, b, _ in [h for h in held if h[1] - h[0] == 1 << 22]:
        q = a + (1 << 21)
        want = max(v for x, y, v in held if x < q + 1 and q < y)
        assert d.wait_for(q, 1).value == want
    assert d.pending == len(held)
    sem.signal(600)
    assert d.wait_for(0, 1 << 25) is None and d.pending == 0


def test_only_empty_leaves_need_no_copy():
    r = ft.to([torch.empty(0), torch.empty(0, 4, dtype=torch.int32)], "cpu")
    assert r[0].shape == (0,) and r[1].shape == (0, 4) and r[1].dtype == torch.int32


def test_objects_with_only_to_are_rebuilt_from_ferry_tensors():
    m = ModelInput(torch.arange(10), torch.tensor([3, 0, 7], dtype=torch.int32), torch.rand(10))
    r = ft.to({"m": m, "x": torch.ones(2)}, "cpu")
    assert isinstance(r["m"], ModelInput)
    same(r["m"].values, m.values)
    same(r["m"].lengths, m.lengths)
    assert r["m"].weights.dtype == torch.float64 and torch.allclose(r["m"].weights, m.weights.double())
    # Packed with the other leaves (the float64 weights are a conversion made after the copy).
    assert packed([r["m"].values, r["m"].lengths, r["x"]], within=aligned_bytes([m.values, m.lengths, m.weights, r["x"]]))


def test_an_object_whose_to_changes_its_tensors_is_refused():
    class Fickle:
        calls = 0

        def to(self, device, non_blocking=False):
            Fickle.calls += 1
            return torch.ones(Fickle.calls).to(device)

    with pytest.raises(ferry.Error) as e:
        ft.to(Fickle(), "cpu")
    assert e.value.code == "invalid_argument"


def test_another_threads_tensor_to_is_not_captured_while_an_object_is_moved():
    # ferry reads an object's tensors by intercepting its .to's Tensor.to calls; another
    # thread's Tensor.to in the meantime is PyTorch's own, and nothing stays replaced after.
    import threading

    inside, release = threading.Event(), threading.Event()
    seen = {}

    class Slow:
        def __init__(self, t):
            self.t = t

        def to(self, device, non_blocking=False):
            out = Slow(self.t.to(device, non_blocking=non_blocking))
            inside.set()
            assert release.wait(10)
            return out

    def other():
        assert inside.wait(10)
        seen["meta"] = torch.ones(3).to("meta")  # PyTorch's .to: a meta tensor
        release.set()

    original = torch.Tensor.to
    worker = threading.Thread(target=other)
    worker.start()
    r = ft.to(Slow(torch.arange(5)), "cpu")
    worker.join()
    assert seen["meta"].device.type == "meta", "another thread's Tensor.to was captured"
    same(r.t, torch.arange(5))
    assert torch.Tensor.to is original


def test_errors_name_the_callers_line_not_ferry_torch():
    with pytest.raises(ferry.Error) as e:
        line = inspect.currentframe().f_lineno; ft.to(torch.ones(1), "cpu", target_stream=3)  # noqa: E702
    assert e.value.code == "invalid_argument"
    assert (e.value.filename, e.value.lineno) == (__file__, line)
    with pytest.raises(ferry.Error) as e:
        ft.to(torch.ones(1), "meta")
    assert e.value.code == "unsupported"


def test_pinned_and_pageable_sources_both_copy():
    pinned_ok = torch.cuda.is_available()
    srcs = [torch.arange(1 << 20, dtype=torch.int32)]
    if pinned_ok:
        srcs.append(torch.arange(1 << 20, dtype=torch.int32).pin_memory())
    for s in srcs:
        r = ft.to(s, "cpu")
        same(r, s)


@pytest.mark.parametrize("nbytes", [1 << 10, (1 << 17) - 4, 1 << 17, 1 << 20])
def test_sources_on_both_sides_of_the_dma_threshold_copy_and_nothing_stays_held(nbytes):
    # The host backend adopts any memory, so a source of DMA_MIN_BYTES or more is copied from
    # its own memory here, and a smaller one is staged; on the CPU the call waits for its
    # copy, so it holds no source once it returns.
    assert ft.DMA_MIN_BYTES == 1 << 17
    a = torch.randint(0, 255, (nbytes,), dtype=torch.uint8)
    b = torch.randn(3, 5, dtype=torch.float64)
    r = ft.to({"a": a, "b": b, "e": torch.empty(0)}, "cpu")
    same(r["a"], a)
    same(r["b"], b)
    assert r["e"].shape == (0,)
    assert ft.held_sources() == 0
    a.zero_()  # the results never alias the sources
    assert int(r["a"].sum()) != 0 or nbytes < 64


def test_engines_are_closed_at_interpreter_exit():
    # A handler registered before ferry.torch is imported runs after ferry.torch's (atexit
    # runs the last registered first): it sees the engine's device closed, not left open to
    # the interpreter's teardown.
    script = """
import atexit
seen = {}
atexit.register(lambda: print("device open at exit:", seen["dev"].is_open))
import torch
import ferry
import ferry.torch as ft
out = ft.to({"a": torch.arange(1000), "b": torch.ones(3)}, "cpu")
assert int(out["a"].sum()) == 499500
seen["dev"] = ft.engine(ferry.Backend.host)[0]
"""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "device open at exit: False" in r.stdout, r.stdout + r.stderr
    assert "leaked" not in r.stderr, r.stderr


def test_threads_share_the_glue_and_a_release_record():
    """Several threads call `to` at once (the glue releases the GIL while it copies) and
    share one release record while its points are reached; every result is exact and every
    record is dropped once its point is reached."""
    import threading

    dev, _ = ft.engine(ferry.Backend.host)
    sem = dev.create_semaphore(0)
    d = ft.glue.ReleasePoints()
    errors = []

    def work(seed):
        try:
            g = torch.Generator().manual_seed(seed)
            for i in range(40):
                leaves = [torch.randint(0, 1 << 30, (1 + i * 37 % 500,), generator=g),
                          torch.rand(3, 1 + seed, generator=g)]
                r = ft.to(leaves, "cpu")
                assert all(torch.equal(a, b) for a, b in zip(r, leaves))
                base = (seed * 1000 + i) * 4096
                d.wait_for(base, 256)
                d.record(base, 256, sem.at(seed * 1000 + i + 1))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for v in range(1, 4000, 97):
        sem.signal(v)  # the points are reached while the threads record and query them
    for t in threads:
        t.join()
    assert errors == []
    sem.signal(10_000)
    assert d.wait_for(0, 1) is None and d.pending == 0


@pytest.fixture(scope="module")
def native_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("torch-native")


@pytest.mark.parametrize("stub", ["None", "types.SimpleNamespace(TORCH_VERSION='0.0')"],
                         ids=["missing", "built for another torch"])
def test_ferry_torch_builds_its_native_half_where_none_matches_this_torch(stub, native_cache):
    # ferry._torch_native is built against one torch's C++ ABI: where it is missing (a wheel)
    # or was built for another torch, importing ferry.torch builds one against the running
    # torch instead of loading the wrong one, and says so.
    script = f"""
import sys, types
import torch
import ferry
sys.modules["ferry._torch_native"] = {stub}
import ferry.torch as ft
assert torch.equal(ft.to(torch.arange(3), "cpu"), torch.arange(3))
print(ft.NATIVE)
"""
    env = dict(os.environ, FERRY_TORCH_NATIVE_CACHE=str(native_cache))
    env.pop("FERRY_TORCH_NATIVE", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith(f"built at first use in {native_cache}"), r.stdout


@pytest.mark.parametrize("record", [False, True])
def test_record_events_decides_whether_the_engine_logs_each_call(record, monkeypatch):
    # Off by default: a log entry per call costs host time and memory that grows with the run.
    import json
    ft._close_engines()
    monkeypatch.setattr(ft, "RECORD_EVENTS", record)
    try:
        ft.to(torch.ones(1000), "cpu")
        snap = json.loads(ft.engine(ferry.Backend.host)[0].pool.snapshot().to_json())
        assert (len(snap["activity"]) > 0) == record, snap["activity"]
    finally:
        ft._close_engines()
