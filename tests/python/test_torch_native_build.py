# SPDX-License-Identifier: MIT
"""ferry.torch builds ferry._torch_native against the running torch at first use where none
was built with ferry for it (a wheel's case), caches the build, and reports which it took.
FERRY_TORCH_NATIVE=build takes that path in a build tree that has the prebuilt module too."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

CODE = """
import torch
import ferry.torch as ft
out = ft.to({"a": torch.arange(6), "b": [torch.ones(3, dtype=torch.float64)]}, "cpu")
assert torch.equal(out["a"], torch.arange(6)) and torch.equal(out["b"][0], torch.ones(3, dtype=torch.float64))
print(ft.NATIVE)
"""


def run(env):
    return subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=600)


def test_the_native_half_is_built_at_first_use_and_cached(tmp_path, exported_names):
    env = dict(os.environ, FERRY_TORCH_NATIVE="build", FERRY_TORCH_NATIVE_CACHE=str(tmp_path))
    first = run(env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.strip().startswith(f"built at first use in {tmp_path}"), first.stdout
    built = [p for p in tmp_path.rglob("_torch_native*.so")]
    assert len(built) == 1, built
    stamp = built[0].stat().st_mtime_ns
    if exported_names is not None:  # the module exports its PyInit_ function alone (python/src/extension.map)
        exported = exported_names(built[0])
        assert exported == ["PyInit__torch_native"], exported[:20]
    again = run(env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.strip() == first.stdout.strip()
    assert built[0].stat().st_mtime_ns == stamp, "the cached build was built again"
    plain = run({k: v for k, v in os.environ.items() if k not in ("FERRY_TORCH_NATIVE", "FERRY_TORCH_NATIVE_CACHE")})
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert plain.stdout.strip() == "prebuilt"


def test_a_build_that_cannot_be_made_names_why(tmp_path):
    blocked = tmp_path / "cache"
    blocked.write_text("a file where the cache directory would be")
    env = dict(os.environ, FERRY_TORCH_NATIVE="build", FERRY_TORCH_NATIVE_CACHE=str(blocked))
    r = run(env)
    assert r.returncode != 0
    assert "ferry: unsupported" in r.stderr and "FERRY_TORCH_NATIVE_CACHE" in r.stderr, r.stderr
