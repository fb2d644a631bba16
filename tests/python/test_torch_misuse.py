# SPDX-License-Identifier: MIT
"""Misuse of ferry.torch.to: each case raises a typed ferry.Error (or PyTorch's own error where
PyTorch defines the refusal) before anything is allocated or copied, names what was wrong and
the caller's line, and leaves the sources and earlier results intact. The cases that need a
GPU (a stream of the wrong device, a tensor on another GPU) skip without one."""
import inspect

import warnings

import pytest

import ferry

torch = pytest.importorskip("torch")
import ferry.torch as ft  # noqa: E402

has_cuda = torch.cuda.is_available() and ferry.Device.built_with(
    ferry.Backend.hip if getattr(torch.version, "hip", None) else ferry.Backend.cuda)
needs_cuda = pytest.mark.skipif(not has_cuda, reason="needs a CUDA/HIP GPU and ferry built with its backend")
device = "cuda" if has_cuda else "cpu"


def refused(code, fn, *words):
    """Run `fn`, expecting ferry.Error(code) whose message holds every word and whose location
    is this file (the caller of ferry.torch.to, not the package)."""
    with pytest.raises(ferry.Error) as e:
        fn()
    assert e.value.code == code, e.value.message
    for w in words:
        assert w in e.value.message, e.value.message
    assert e.value.filename == __file__
    return e.value


def intact(before, src):
    """The source of a refused call still holds its bytes."""
    assert torch.equal(before, src)


@pytest.mark.parametrize("stream", [42, "main", object(), torch.device("cpu")])
def test_a_target_stream_that_is_not_a_stream_is_refused(stream):
    src = torch.arange(1000, dtype=torch.int32)
    e = refused("invalid_argument", lambda: ft.to(src, "cuda", target_stream=stream), "target_stream",
                type(stream).__name__, "torch.cuda.Stream")
    assert "has no attribute" not in e.message


def test_a_wait_stream_that_is_not_a_stream_is_refused():
    refused("invalid_argument", lambda: ft.to(torch.ones(4), "cuda", wait_stream=7), "wait_stream", "int")


def test_streams_are_refused_for_the_host_device():
    s = torch.cuda.Stream() if has_cuda else None
    if s is None:
        pytest.skip("a torch.cuda.Stream needs a GPU")
    refused("invalid_argument", lambda: ft.to(torch.ones(4), "cpu", target_stream=s), "cpu")
    refused("invalid_argument", lambda: ft.to(torch.ones(4), "cpu", wait_stream=s), "cpu")


def test_an_unknown_device_is_refused():
    refused("invalid_argument", lambda: ft.to(torch.ones(4), "gpu0"), "not a torch device")
    refused("unsupported", lambda: ft.to(torch.ones(4), "meta"), "meta")


def leaf_cases():
    dense = torch.arange(12, dtype=torch.float32).view(3, 4)
    cases = [
        ("sparse_coo", lambda: dense.to_sparse(), "unsupported", "sparse_coo"),
        ("sparse_csr", lambda: dense.to_sparse_csr(), "unsupported", "sparse_csr"),
        ("quantized", lambda: torch.quantize_per_tensor(dense, 0.1, 0, torch.qint8), "unsupported", "quantized"),
        ("meta", lambda: torch.empty(3, 4, device="meta"), "invalid_argument", "meta"),
        ("nested", lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]), "unsupported", "nested"),
        ("requires_grad", lambda: dense.clone().requires_grad_(), "invalid_argument", "requires grad"),
    ]
    return [pytest.param(make, code, word, id=name) for name, make, code, word in cases]


@pytest.mark.parametrize("make,code,word", leaf_cases())
def test_a_leaf_ferry_cannot_copy_byte_for_byte_is_refused_before_any_copy(make, code, word):
    bad = make()
    good = torch.arange(1 << 16, dtype=torch.int64)
    before = good.clone()
    dev, _ = ft.engine(ferry.Backend.cuda if device == "cuda" else ferry.Backend.host, 0)
    active = dev.pool.budget().active_bytes
    e = refused(code, lambda: ft.to({"good": good, "bad": [bad]}, device), word, "leaf 1")
    assert "ferry.torch.to" in e.message
    intact(before, good)
    # Nothing allocated for the refused call (blocks of earlier calls may be freed meanwhile).
    assert dev.pool.budget().active_bytes <= active
    # The same structure without the bad leaf still moves, byte for byte.
    r = ft.to({"good": good}, device)
    if device == "cuda":
        torch.cuda.current_stream().synchronize()
    assert torch.equal(r["good"].cpu(), before)


def test_a_detached_copy_of_a_tensor_requiring_grad_moves():
    w = torch.arange(16, dtype=torch.float32).requires_grad_()
    r = ft.to(w.detach(), device)
    assert not r.requires_grad and torch.equal(r.cpu(), w.detach())


def test_an_object_whose_to_moves_different_tensors_on_its_two_calls_is_refused():
    a, b = torch.ones(8), torch.zeros(8)

    class Fickle:
        calls = 0

        def to(self, dev, non_blocking=False):
            Fickle.calls += 1
            return (a if Fickle.calls == 1 else b).to(dev, non_blocking=non_blocking)

    refused("invalid_argument", lambda: ft.to(Fickle(), device), "Fickle.to moved different tensors")
    assert torch.equal(a, torch.ones(8)) and torch.equal(b, torch.zeros(8))


def test_an_object_whose_to_moves_fewer_tensors_on_its_second_call_is_refused():
    a, b = torch.ones(8), torch.zeros(8)

    class Shrinking:
        calls = 0

        def to(self, dev, non_blocking=False):
            Shrinking.calls += 1
            moved = [a.to(dev, non_blocking=non_blocking)]
            if Shrinking.calls == 1:
                moved.append(b.to(dev, non_blocking=non_blocking))
            return moved

    refused("invalid_argument", lambda: ft.to(Shrinking(), device), "Shrinking.to moved 1 tensors")


@needs_cuda
def test_a_stream_of_another_device_is_refused():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    other = torch.cuda.Stream(device=1)
    refused("invalid_argument", lambda: ft.to(torch.ones(4), "cuda:0", target_stream=other), "cuda:1", "cuda:0")
    refused("invalid_argument", lambda: ft.to(torch.ones(4), "cuda:0", wait_stream=other), "wait_stream")


@needs_cuda
def test_a_tensor_already_on_another_gpu_moves_with_tensor_to():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    src = torch.arange(1 << 20, dtype=torch.int32, device="cuda:1")
    r = ft.to({"peer": src, "host": torch.ones(3)}, "cuda:0")
    torch.cuda.synchronize(0)
    assert r["peer"].device == torch.device("cuda:0")
    assert torch.equal(r["peer"].cpu(), src.cpu()) and torch.equal(r["host"].cpu(), torch.ones(3))


@needs_cuda
def test_a_tensor_requiring_grad_on_the_target_device_is_returned_as_it_is():
    # Already in place: nothing is copied, so nothing leaves the graph (Tensor.to does the same).
    w = torch.ones(4, device="cuda", requires_grad=True)
    r = ft.to({"w": w}, "cuda")
    assert r["w"] is w


@pytest.mark.parametrize("bad, what", [
    ([], "no tensors"),
    ([3], "not a tensor"),
    ([torch.zeros(4)], "not a CUDA device"),
])
def test_stash_refuses_what_it_cannot_stash(bad, what):
    refused("invalid_argument", lambda: ft.stash(bad), what)


def _quantized():
    return torch.quantize_per_tensor(torch.ones(4), 0.5, 0, torch.quint8)


def _nested():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's prototype-stage notice
        return torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])


@pytest.mark.parametrize("make, what", [
    (lambda: torch.zeros(4).to_sparse(), "torch.sparse_coo"),
    (lambda: torch.eye(3).to_sparse_csr(), "torch.sparse_csr"),
    (_quantized, "quantized"),
    (_nested, "nested"),
])
def test_stash_refuses_a_tensor_that_is_not_plain_strided(make, what):
    # Checked before the device: the message names the layout, and nothing is touched.
    good = torch.zeros(4)
    bad = make()
    refused("unsupported", lambda: ft.stash([bad, good]), "tensor 0", "not a plain strided tensor", what)
    assert good.device.type == "cpu" and int(good.sum()) == 0


def test_stash_refuses_a_stream_that_is_not_a_stream():
    with pytest.raises(ferry.Error) as e:
        ft.stash([torch.zeros(4)], stream=42)
    assert e.value.code == "invalid_argument" and "torch.cuda.Stream" in e.value.message


def test_stash_refuses_an_unknown_free_order():
    t = torch.zeros(4)
    refused("invalid_argument", lambda: ft.stash([t], free="later"), "free", "'ordered' or 'deferred'")
    assert t.device.type == "cpu" and int(t.sum()) == 0  # untouched
