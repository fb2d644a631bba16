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
