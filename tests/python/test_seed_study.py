# SPDX-License-Identifier: MIT
"""lab/python/seed_study.py in its host smoke mode (--device cpu): every strategy, workload,
order and source runs, the correctness bars hold, and the JSON has the shape that
tools/bench_tables.py reads. The figures of a CPU run are not measurements; only the shape and
the checks are asserted. The pure parts (the kernel overlap from a profiler trace, the order
bars, the seed order's call sequence) are checked on synthetic input."""
import contextlib
import importlib.util
import itertools
import json
import os
import pathlib
import pickle
import subprocess
import sys
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "lab" / "python" / "seed_study.py"
STRATEGIES = ["blocking", "side_stream", "preallocated", "ferry_torch"]
WORKLOAD_ORDERS = [("seed", "seed"), ("seed", "compute_first"), ("pipeline", "compute_first"),
                   ("pipeline", "copy_first")]
PROFILE_FIELDS = ("kernel_overlap", "profile_copies", "profile_kernels", "profile_copy_us_per_step",
                  "profile_overlap_us_per_step", "trace")
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
                  "--kjt-gb", "0.004", "--matmul-n", "32", "--matmuls", "2", "--profile-steps", "1", out=out)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    return doc, r


def test_every_strategy_workload_order_and_source_has_a_row_with_the_documented_keys(study):
    doc, _ = study
    assert {"device", "torch", "results", "bars", "references", "config"} <= doc.keys()
    want = {(s, w, o, src) for s, (w, o), src in
            itertools.product(STRATEGIES, WORKLOAD_ORDERS, ("pinned", "pageable", "kjt"))}
    got = [(r["strategy"], r["workload"], r["order"], r["source"]) for r in doc["results"]]
    assert sorted(got, key=str) == sorted(want, key=str)
    for r in doc["results"]:
        for k, kind in ROW_KEYS.items():
            assert isinstance(r[k], kind), (k, r)
        assert r["wall_ms_per_step"] > 0 and r["copy_gbps"] > 0 and r["host_us_per_call"] > 0
        assert r["size_bytes"] == SIZE or r["source"] == "kjt"
        # One tensor, or the KJT-like batch's leaves: the per-leaf cost divides the call's.
        assert (r["leaves"] == 1) == (r["source"] != "kjt")
        assert r["host_us_per_leaf"] == pytest.approx(r["host_us_per_call"] / r["leaves"])
        # No profiler without CUDA: the fields are there, null.
        assert all(r[k] is None for k in PROFILE_FIELDS) and r["profile_steps"] == 1, r
    kjt = {r["size_bytes"] for r in doc["results"] if r["source"] == "kjt"}
    assert len(kjt) == 1 and kjt.pop() > 0
    assert {(r["source"], r.get("kjt_memory")) for r in doc["references"]} == {
        ("pinned", None), ("pageable", None), ("kjt", "pageable")}
    assert doc["config"]["orders"] == ["seed", "compute_first", "copy_first"]
    assert doc["ferry_default_mode"] == "torch"


def test_bars_carry_verdicts_and_the_correctness_bars_pass(study):
    doc, r = study
    bars = doc["bars"]
    for b in bars:
        assert {"name", "value", "limit", "pass", "unit"} <= b.keys(), b
        if "kernel overlap" in b["name"]:
            assert b["pass"] is None and b["value"] is None, b  # no trace without CUDA
            assert f"---- {b['name']}" in r.stdout or f"---- (report) {b['name']}" in r.stdout
            continue
        assert isinstance(b["pass"], bool), b
        assert ("PASS" if b["pass"] else "FAIL") in r.stdout
    names = [b["name"] for b in bars]
    for s in ("ferry_torch",):
        for needle in ("peak reserved ≤ 1.02 × blocking", "wall per step ≤ 1.02 × side_stream's",
                       "copy GB/s ≥ 0.98 × torch pinned", "host µs in the call ≤ 0.25 × torch pageable",
                       "copy GB/s ≥ 4 × torch pageable", "structure in one allocation", "structure in one call"):
            assert any(s in n and needle in n for n in names), (s, needle)
    assert any("(blocking + one batch)" in n and b.get("report_only") for n, b in zip(names, bars))
    data = [b for b in bars if "data equal to the source" in b["name"]]
    assert len(data) == len(STRATEGIES) * 3
    assert all(b["pass"] and b["value"] == 0 for b in data), [b for b in data if not b["pass"]]
    one = [b for b in bars if "structure in one" in b["name"]]
    assert len(one) == 2 and all(b["pass"] and b["value"] == 1 for b in one), one


def test_the_default_mode_has_the_three_order_bars_in_every_workload_and_order(study):
    doc, r = study
    default = "ferry_torch"
    order = [b for b in doc["bars"] if b.get("family") == "order"]
    for (w, o), src, name in itertools.product(WORKLOAD_ORDERS, ("pinned", "pageable", "kjt"), STRATEGIES[3:]):
        mine = [b for b in order if (b["workload"], b["order"], b["source"], b["strategy"]) == (w, o, src, name)]
        assert len(mine) == 3, (w, o, src, name, [b["name"] for b in mine])
        assert all(bool(b.get("report_only")) == (name != default) for b in mine), mine
        for needle in ("ms per step ≤ 1.02 × min(side_stream, preallocated)", "kernel overlap ≥ 0.9 × preallocated's",
                       "peak reserved ≤ 1.02 × blocking's"):
            assert any(needle in b["name"] for b in mine), (needle, mine)
    assert "order bars of the default mode" in r.stdout and "seed/seed" in r.stdout


def test_ferry_pool_snapshots_are_memory_viz_pickles(study):
    doc, _ = study
    rows = [r for r in doc["results"] if r["strategy"] == "ferry_torch"]
    assert rows
    for r in rows:
        with open(r["ferry_snapshot"], "rb") as f:
            snap = pickle.load(f)
        assert "segments" in snap


def test_bench_tables_show_the_study_rows(study):
    doc, _ = study
    spec = importlib.util.spec_from_file_location("bench_tables", ROOT / "tools" / "bench_tables.py")
    rt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rt)
    bench = {"tool": "ferry-bench", "backend": "host", "results": [],
             "config": {"sizes": [SIZE], "workloads": ["seed", "pipeline"], "steps": 3, "compute_units": 1}}
    block = rt.generate([bench], ["results.json"], (doc, "seed.json"))
    for label in ("PyTorch blocking (seed) |", "PyTorch ferry_torch (compute_first) |",
                  "PyTorch ferry_torch (pageable, seed) |", "PyTorch side_stream (compute_first) |",
                  "PyTorch preallocated (pageable, copy_first) |"):
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
    copy = outer / "copy" / "lab" / "python"
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


# ---------------------------------------------------------------------------------------------
# The pure parts, on synthetic input.


@pytest.fixture(scope="module")
def seed_study():
    return _load_study(SCRIPT)


def test_intervals_merge_and_intersect(seed_study):
    m = seed_study
    assert m.merge_intervals([(5, 7), (1, 3), (2, 4), (7, 8), (9, 9), (10, 9)]) == [(1, 4), (5, 8)]
    assert m.merge_intervals([]) == []
    assert m.intersection_length([(0, 10)], [(2, 3), (5, 12)]) == 6
    assert m.intersection_length([(0, 1), (2, 3)], [(1, 2)]) == 0
    assert m.intersection_length([], [(0, 1)]) == 0


def test_kernel_overlap_counts_concurrent_copies_and_kernels_once(seed_study):
    m = seed_study
    # Copies (0, 10) and (5, 15) cover 15; kernels (2, 4), (3, 6) and (14, 20) cover 5 of it.
    share, copy_t, both = m.kernel_overlap([(0, 10), (5, 15)], [(2, 4), (3, 6), (14, 20)])
    assert (copy_t, both) == (15, 5) and share == pytest.approx(1 / 3)
    assert m.kernel_overlap([(0, 4)], []) == (0.0, 4, 0.0)
    assert m.kernel_overlap([(0, 4)], [(-1, 9)])[0] == 1.0
    assert m.kernel_overlap([], [(0, 1)]) == (None, 0, 0.0)


@pytest.mark.parametrize("name,cat,kind", [
    ("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", "htod"),
    ("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", "htod"),
    ("Memcpy HtoD", "gpu_memcpy", "htod"),
    ("Memcpy H2D", "Memcpy", "htod"),
    ("CopyHostToDevice", "gpu_memcpy", "htod"),
    ("Memcpy HtoD (Pinned -> Device)", "", "htod"),
    ("Memcpy DtoH (Device -> Pinned)", "gpu_memcpy", None),
    ("Memcpy DtoD (Device -> Device)", "gpu_memcpy", None),
    ("Memset (Device)", "gpu_memset", None),
    ("cudaMemcpyAsync", "cuda_runtime", None),
    ("cuMemcpyHtoDAsync_v2", "cuda_driver", None),
    ("ampere_bf16_s16816gemm_bf16_128x128", "kernel", "kernel"),
    ("spin_kernel(long)", "kernel", "marker"),
    ("aten::mm", "cpu_op", None),
])
def test_trace_events_are_told_apart_whatever_the_copy_label(seed_study, name, cat, kind):
    assert seed_study.event_kind({"ph": "X", "cat": cat, "name": name, "ts": 0, "dur": 1}) == kind


def test_non_complete_trace_events_count_for_nothing(seed_study):
    m = seed_study
    assert m.event_kind({"ph": "f", "cat": "kernel", "name": "k", "ts": 0, "dur": 1}) is None
    assert m.event_kind({"ph": "M", "cat": "kernel", "name": "k"}) is None


def _x(name, cat, ts, dur, **kw):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 7, **kw}


def _marker(ts):
    return _x("spin_kernel(long)", "kernel", ts, 1)


def test_trace_windows_split_one_session_into_its_rows(seed_study):
    m = seed_study
    events = [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        _marker(0),
        _x("cudaMemcpyAsync", "cuda_runtime", 1.5, 0.5),
        _x("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 2, 8, args={"stream": 20}),
        _x("gemm", "kernel", 5, 3),
        _x("gemm", "kernel", 7, 5),
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "ts": 7, "id": 1},
        _marker(20),
        _x("between rows", "kernel", 22, 1),
        _x("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 24, 2),
        _marker(30),
        _x("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 32, 8),
        _x("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 35, 3),  # another stream, at once
        _x("Memcpy DtoH (Device -> Pinned)", "gpu_memcpy", 33, 6),
        _x("Memset (Device)", "gpu_memset", 33, 6),
        _x("sum", "kernel", 39, 6),
        _marker(50),
    ]
    for doc in ({"traceEvents": events[::-1]}, events):  # any event order, either document shape
        rows = m.trace_windows(m.trace_event_list(doc))
        assert len(rows) == 2
        assert rows[0]["copies"] == [(2, 10)] and sorted(rows[0]["kernels"]) == [(5, 8), (7, 12)]
        assert sorted(rows[1]["copies"]) == [(32, 40), (35, 38)] and rows[1]["kernels"] == [(39, 45)]
        assert m.kernel_overlap(**rows[0])[0] == pytest.approx(5 / 8)
        assert m.kernel_overlap(**rows[1])[0] == pytest.approx(1 / 8)
    with pytest.raises(ValueError):
        m.trace_windows(events[:-1])
    assert m.trace_windows([_x("gemm", "kernel", 0, 1)]) == []


def test_profiler_function_events_convert_to_trace_events(seed_study):
    m = seed_study

    def fe(name, device, start, end):
        return SimpleNamespace(name=name, device_type=device, time_range=SimpleNamespace(start=start, end=end))
    events = [fe("spin_kernel(long)", "DeviceType.CUDA", 0, 1), fe("cudaLaunchKernel", "DeviceType.CPU", 1, 2),
              fe("Memcpy HtoD (Pinned -> Device)", "DeviceType.CUDA", 2, 6), fe("gemm", "DeviceType.CUDA", 3, 5),
              fe("Memset (Device)", "DeviceType.CUDA", 3, 9), fe("spin_kernel(long)", "DeviceType.CUDA", 9, 10)]
    trace = m.function_events_to_trace(events)
    assert [e["cat"] for e in trace] == ["kernel", "gpu_memcpy", "kernel", "gpu_memset", "kernel"]
    rows = m.trace_windows(trace)
    assert rows == [{"copies": [(2, 6)], "kernels": [(3, 5)]}]


def _row(strategy, workload="seed", order="seed", *, wall, resv, overlap=None, source="pinned"):
    return {"strategy": strategy, "workload": workload, "order": order, "source": source, "size_bytes": 64 << 20,
            "wall_ms_per_step": wall, "peak_reserved_bytes": resv, "kernel_overlap": overlap}


def test_order_bars_hold_the_default_mode_to_the_torch_strategies_of_its_order(seed_study):
    m = seed_study
    rows = [_row("blocking", wall=5.0, resv=100), _row("side_stream", wall=3.0, resv=1000, overlap=0.97),
            _row("preallocated", wall=3.1, resv=100, overlap=0.95),
            _row("ferry_torch", wall=3.05, resv=102, overlap=0.86)]

    def verdicts(mode):
        bars = [b for b in m.compute_bars(rows, [], [], mode) if b.get("family") == "order"]
        return {(b["strategy"], b["name"].split(") ", 1)[1]): (b["pass"], bool(b.get("report_only")), b["limit"])
                for b in bars}

    v = verdicts("torch")
    step = "ms per step ≤ 1.02 × min(side_stream, preallocated)"
    ov = "kernel overlap ≥ 0.9 × preallocated's"
    fp = "peak reserved ≤ 1.02 × blocking's"
    assert v[("ferry_torch", step)] == (True, False, pytest.approx(3.06))
    assert v[("ferry_torch", ov)] == (True, False, pytest.approx(0.855))
    assert v[("ferry_torch", fp)] == (True, False, pytest.approx(102))
    rows[3]["wall_ms_per_step"] = 4.0
    assert verdicts("torch")[("ferry_torch", step)][0] is False
    rows[3]["wall_ms_per_step"] = 3.05
    # A missing trace leaves the overlap bar unmeasured, not failed.
    rows[2]["kernel_overlap"] = None
    assert verdicts("torch")[("ferry_torch", ov)][0] is None
    # Bars compare within one workload and order only.
    other = [dict(r, order="compute_first", wall_ms_per_step=1.0) for r in rows[:3]]
    assert verdicts("torch")[("ferry_torch", step)][0] is True
    rows += other
    assert verdicts("torch")[("ferry_torch", step)][0] is True


def test_the_default_mode_is_read_from_the_signature(seed_study):
    m = seed_study

    def to(obj, device="cuda", *, target_stream=None, mode="ferry"):
        return obj
    assert m.default_mode(SimpleNamespace(to=to)) == "ferry"
    assert m.default_mode(SimpleNamespace(to=lambda obj: obj)) == "torch"  # no `mode`: the one mode
    assert m.default_mode(SimpleNamespace(to=None)) is None
    assert m.default_strategy("torch") == "ferry_torch" and m.default_strategy(None) is None


def test_each_workload_runs_its_own_listed_orders(seed_study):
    m = seed_study
    a = m.parse_args(["--device", "cpu"])
    assert m.orders_of(a, "seed") == ["seed", "compute_first"]
    assert m.orders_of(a, "pipeline") == ["compute_first", "copy_first"]
    a = m.parse_args(["--device", "cpu", "--orders", "copy_first,seed"])
    assert m.orders_of(a, "seed") == ["seed"] and m.orders_of(a, "pipeline") == ["copy_first"]
    with pytest.raises(SystemExit):
        m.parse_args(["--device", "cpu", "--orders", "copy_first", "--workloads", "seed"])


def test_the_seed_order_calls_under_the_side_stream_before_the_compute(seed_study, monkeypatch):
    m = seed_study
    log = []
    current = ["main"]

    class Stream:
        def __init__(self, name):
            self.name = name

        def wait_stream(self, other):
            log.append(f"{self.name}.wait_stream({other.name})")

        def wait_event(self, event):
            log.append(f"{self.name}.wait_event")

    @contextlib.contextmanager
    def stream(s):
        prev, current[0] = current[0], s.name
        try:
            yield
        finally:
            current[0] = prev

    env = m.Env("cpu")
    env.main, env.side, env.stream = Stream("main"), Stream("side"), stream
    env.ferry_dev = SimpleNamespace()  # no engine to open: the fake ferry below copies
    monkeypatch.setattr(m.Compute, "matmuls", lambda self: log.append(f"compute on {current[0]}"))
    monkeypatch.setattr(m.Compute, "read", lambda self, b: log.append(f"read on {current[0]}"))
    ft = SimpleNamespace(to=lambda src, device, mode: (log.append(f"ferry.torch.to under {current[0]}"),
                                                       src.clone())[1])
    make = m.make_strategy

    def logged(name, env, slots, ft, order=None):
        s = make(name, env, slots, ft, order)
        issue, acquire = s.issue, s.acquire

        def logged_issue(src, ev=None):
            log.append(f"call under {current[0]}")
            return issue(src, ev)

        def logged_acquire(p, waited=False):
            log.append("acquire")
            return acquire(p, waited)
        s.issue, s.acquire = logged_issue, logged_acquire
        return s
    monkeypatch.setattr(m, "make_strategy", logged)
    args = SimpleNamespace(matmul_n=4, matmuls=1, dtype=torch.float32)
    src = torch.ones(64)
    tail = ["compute on main", "main.wait_stream(side)", "acquire", "read on main"]
    want = {
        ("seed", "side_stream"): ["call under side"] + tail,
        ("seed", "preallocated"): ["call under side", "side.wait_stream(main)"] + tail,
        ("seed", "ferry_torch"): ["call under side", "ferry.torch.to under side"] + tail,
        ("compute_first", "side_stream"): ["compute on main", "call under main", "acquire",
                                           "main.wait_stream(side)", "read on main"],
        ("compute_first", "preallocated"): ["compute on main", "call under main", "acquire", "main.wait_event",
                                            "read on main"],
        ("compute_first", "ferry_torch"): ["compute on main", "call under main", "ferry.torch.to under main",
                                           "acquire", "read on main"],
    }
    for (order, name), seq in want.items():
        log.clear()
        m.run_workload(env, name, ft, src, "seed", order, 1, 0, args, record_events=False)
        assert log == seq, (order, name)
