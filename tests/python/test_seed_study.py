# SPDX-License-Identifier: MIT
"""tools/python/seed_study.py in its host smoke mode (--device cpu): every strategy, workload,
order and source runs, the correctness bars hold, and the JSON has the shape that
tools/readme_table.py reads. The figures of a CPU run are not measurements; only the shape and
the checks are asserted."""
import importlib.util
import itertools
import json
import os
import pathlib
import pickle
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "python" / "seed_study.py"
STRATEGIES = ["blocking", "side_stream", "preallocated", "ferry_torch", "ferry_ferry"]
SIZE = 1 << 20
ROW_KEYS = {"strategy": str, "workload": str, "size_bytes": int, "source": str, "peak_allocated_bytes": int,
            "peak_reserved_bytes": int, "mem_get_info_used_bytes": int, "copy_gbps": float,
            "copy_gbps_single_call": float, "host_us_per_call": float, "host_us_per_leaf": float, "leaves": int, "wall_ms_per_step": float, "step_over_bound": float}


def run_study(*extra, out=None):
    cmd = [sys.executable, str(SCRIPT), *extra] + (["--out", str(out)] if out else [])
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ))


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("seed-study")
    r = run_study("--device", "cpu", "--quick", "--sizes", "1M", "--steps", "3", "--warmup", "1", "--copy-reps", "2",
                  "--kjt-gb", "0.004", "--matmul-n", "32", "--matmuls", "2", out=out)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    return doc, r


def test_every_strategy_workload_order_and_source_has_a_row_with_the_documented_keys(study):
    doc, _ = study
    assert {"device", "torch", "results", "bars", "references", "config"} <= doc.keys()
    want = {(s, "seed", None, src) for s in STRATEGIES for src in ("pinned", "pageable", "kjt")}
    want |= {(s, "pipeline", o, src) for s, o, src in
             itertools.product(STRATEGIES, ("compute_first", "copy_first"), ("pinned", "pageable", "kjt"))}
    got = [(r["strategy"], r["workload"], r.get("order"), r["source"]) for r in doc["results"]]
    assert sorted(got, key=str) == sorted(want, key=str)
    for r in doc["results"]:
        for k, kind in ROW_KEYS.items():
            assert isinstance(r[k], kind), (k, r)
        assert r["wall_ms_per_step"] > 0 and r["copy_gbps"] > 0 and r["host_us_per_call"] > 0
        assert r["size_bytes"] == SIZE or r["source"] == "kjt"
        # One tensor, or the KJT-like batch's leaves: the per-leaf cost divides the call's.
        assert (r["leaves"] == 1) == (r["source"] != "kjt")
        assert r["host_us_per_leaf"] == pytest.approx(r["host_us_per_call"] / r["leaves"])
    kjt = {r["size_bytes"] for r in doc["results"] if r["source"] == "kjt"}
    assert len(kjt) == 1 and kjt.pop() > 0
    assert {(r["source"], r.get("kjt_memory")) for r in doc["references"]} == {
        ("pinned", None), ("pageable", None), ("kjt", "pageable")}


def test_bars_carry_verdicts_and_the_correctness_bars_pass(study):
    doc, r = study
    bars = doc["bars"]
    for b in bars:
        assert {"name", "value", "limit", "pass", "unit"} <= b.keys(), b
        assert isinstance(b["pass"], bool)
        assert ("PASS" if b["pass"] else "FAIL") in r.stdout
    names = [b["name"] for b in bars]
    for s in ("ferry_torch", "ferry_ferry"):
        for needle in ("peak reserved ≤ 1.02 × blocking", "wall per step ≤ side_stream's",
                       "copy GB/s ≥ 0.98 × torch pinned", "host µs in the call ≤ 0.25 × torch pageable",
                       "copy GB/s ≥ 4 × torch pageable", "structure in one allocation", "structure in one call"):
            assert any(s in n and needle in n for n in names), (s, needle)
    assert any("(blocking + one batch)" in n and b.get("report_only") for n, b in zip(names, bars))
    data = [b for b in bars if "data equal to the source" in b["name"]]
    assert len(data) == len(STRATEGIES) * 3
    assert all(b["pass"] and b["value"] == 0 for b in data), [b for b in data if not b["pass"]]
    one = [b for b in bars if "structure in one" in b["name"]]
    assert len(one) == 4 and all(b["pass"] and b["value"] == 1 for b in one), one


def test_ferry_pool_snapshots_are_memory_viz_pickles(study):
    doc, _ = study
    rows = [r for r in doc["results"] if r["strategy"] == "ferry_ferry"]
    assert rows
    for r in rows:
        with open(r["ferry_snapshot"], "rb") as f:
            snap = pickle.load(f)
        assert "segments" in snap


def test_readme_table_shows_the_study_rows(study):
    doc, _ = study
    spec = importlib.util.spec_from_file_location("readme_table", ROOT / "tools" / "readme_table.py")
    rt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rt)
    bench = {"tool": "ferry-bench", "backend": "host", "results": [],
             "config": {"sizes": [SIZE], "workloads": ["seed", "pipeline"], "steps": 3, "compute_units": 1}}
    block = rt.generate([bench], ["results.json"], (doc, "seed.json"))
    for label in ("PyTorch blocking |", "PyTorch ferry_ferry |", "PyTorch ferry_torch (pageable) |",
                  "PyTorch side_stream (compute_first) |", "PyTorch preallocated (pageable, copy_first) |"):
        assert label in block, label


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given without CUDA")
def test_without_cuda_it_exits_with_a_message_naming_the_cpu_mode(tmp_path):
    r = run_study("--quick", out=tmp_path)
    assert r.returncode == 2
    assert "CUDA is not available" in r.stderr and "--device cpu" in r.stderr
    assert not (tmp_path / "results.json").exists()


def _load_study(path):
    spec = importlib.util.spec_from_file_location("seed_study_copy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_recorded_commit_is_the_running_trees_never_an_enclosing_checkouts(tmp_path, monkeypatch):
    # A `git archive` copy unpacked inside another checkout (as on a GPU machine) has no git
    # metadata of its own: git would answer with the enclosing checkout's HEAD.
    outer = tmp_path / "outer"
    copy = outer / "copy" / "tools" / "python"
    copy.mkdir(parents=True)
    git = ["git", "-C", str(outer), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(outer)], check=True)
    subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "outer"], check=True)
    (copy / "seed_study.py").write_text(SCRIPT.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.delenv("FERRY_COMMIT", raising=False)
    study_copy = _load_study(copy / "seed_study.py")
    assert study_copy.ferry_commit() is None
    monkeypatch.setenv("FERRY_COMMIT", "0123abc")
    assert study_copy.ferry_commit() == "0123abc"
