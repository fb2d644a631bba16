# SPDX-License-Identifier: MIT
"""lab/python/call_cost.py on ferry's host backend: it runs, prints a row per leaf count and
way, and writes the same rows as JSON. Its figures are host times of this machine, not
checked (a benchmark prints numbers; tests check behaviour)."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "lab" / "python" / "call_cost.py"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ))


def test_rows_for_every_leaf_count_and_way(tmp_path):
    out = tmp_path / "cost.json"
    r = run("--device", "cpu", "--calls", "3", "--leaves", "1,5", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text(encoding="utf-8"))["rows"]
    assert sorted((x["leaves"], x["way"]) for x in rows) == sorted(
        (n, w) for n in (1, 5) for w in ("ferry.torch", "torch .to per leaf"))
    for x in rows:
        assert x["host_us_per_call"] > 0
        assert x["host_us_per_leaf"] == pytest.approx(x["host_us_per_call"] / x["leaves"])
    assert "ferry.torch " in r.stdout


def test_bad_arguments_are_refused():
    for args in (["--leaves", "0"], ["--leaves", "x"], ["--calls", "0"], ["--device", "cpu", "--pinned"]):
        r = run("--device", "cpu", *args) if "--device" not in args else run(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
