# SPDX-License-Identifier: MIT
"""Fixtures shared by the Python suites."""
import pytest


@pytest.fixture(params=["python", "native"])
def stash_ops(request, monkeypatch):
    """Runs a stash case once with each implementation of the stash's per-tensor work:
    ferry.torch's Python path and ferry._torch_native (skipped where it is not built for the
    running torch). Both must meet the same contract."""
    torch = pytest.importorskip("torch")  # noqa: F841 - ferry.torch needs it
    import ferry.torch as ft
    if request.param == "python":
        ops = ft._PythonStashOps
    else:
        ops = ft._native_module()
        if ops is None:
            pytest.skip("ferry._torch_native is not built for this torch")
    monkeypatch.setattr(ft, "_stash_ops", ops)
    return request.param


@pytest.fixture(params=["dlpack", "native"])
def to_glue(request):
    """Runs a ferry.torch.to case once with each glue of its binding path to PyTorch: DLPack
    with the caching allocator's Python functions, and ferry._torch_native's entry points
    (skipped where they cannot serve: not built for the running torch, or no CUDA)."""
    torch = pytest.importorskip("torch")
    import ferry.torch as ft
    before = ft._native_to
    ft._use_to_glue(request.param == "native")
    if ft._native_to != (request.param == "native"):
        ft._use_to_glue(before)
        pytest.skip("ferry._torch_native's entry points are not built for this torch, or there is no CUDA")
    yield request.param
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    ft._use_to_glue(before)
