#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Regenerate the ferry-bench tables of docs/benchmarks.md from a run's output.

    python3 tools/bench_tables.py PATH [PATH ...] [--seed-study SEED.json] [--commit HASH]
                                  [--doc docs/benchmarks.md] [--stdout]

Each PATH is a ferry-bench results.json (`ferry-bench --out DIR` writes DIR/results.json) or a
directory, searched recursively for results*.json: files written by ferry-bench become a
backend's rows (give one per backend, e.g. the CUDA and the Vulkan run), a file written by
lab/python/seed_study.py becomes the PyTorch rows. The tables replace the block between the
lines `<!-- bench-table:begin -->` and `<!-- bench-table:end -->` of the document (both kept),
or are printed with --stdout. A run with the contention section gets a table of its rows after
the bars. Nothing but the files' figures goes into the tables; the header
names each run's device, commit (the JSON's, else --commit) and command (the JSON's, else one
rebuilt from the run's configuration).

--seed-study SEED.json names the PyTorch seed study's JSON explicitly. It is read in
ferry-bench's shape: {"device": ..., "results": [{"strategy": NAME, "size_bytes": N,
"peak_reserved_bytes": N, "copy_gbps": X (optional), "workload": "seed" (optional, default
seed), "overlap" or "step_over_bound": X (optional), "source": "pinned" | "pageable" | "kjt"
(optional, default pinned), "order": NAME (optional)}, ...]}; a row per strategy, source and
order, labelled "PyTorch NAME" for pinned sources and "PyTorch NAME (SOURCE, ORDER)" otherwise.
"""
import argparse
import json
import pathlib
import sys

BEGIN = "<!-- bench-table:begin -->"
END = "<!-- bench-table:end -->"
GIB = float(1 << 30)
BACKEND_LABEL = {"cuda": "CUDA", "vulkan": "Vulkan", "hip": "HIP", "host": "host", "vulkan_cuda": "Vulkan→CUDA",
                 "cuda_vulkan": "CUDA→Vulkan"}
# The strategies each workload's table shows, in order (the bars of docs/benchmarks.md).
ROWS = {
    "seed": ["blocking", "executor_owned", "owner_owned"],
    "pipeline": ["blocking", "executor_owned", "owner_owned", "owner_owned+overlap"],
}


def size_label(n):
    for shift, suffix in ((30, "G"), (20, "M"), (10, "K")):
        if n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return f"{n}B"


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"bench_tables: cannot read {path}: {e}")


def require(doc, key, path):
    if key not in doc:
        sys.exit(f"bench_tables: {path} has no '{key}' (is it a ferry-bench results.json?)")
    return doc[key]


def fmt(v, spec):
    return "–" if v is None else format(v, spec)


def overlap_of(r):
    return r.get("overlap", r.get("step_over_bound"))


def seed_row_name(r):
    """A seed-study row's label: the strategy, with its source unless pinned and its order."""
    parts = [r["source"]] if r.get("source", "pinned") != "pinned" else []
    if r.get("order"):
        parts.append(r["order"])
    return r["strategy"] + (f" ({', '.join(parts)})" if parts else "")


def table_rows(label_prefix, results, sizes, workload, strategies, bold=()):
    by_key = {}
    for r in results:
        by_key[(r.get("workload", "seed"), r["strategy"], r["size_bytes"])] = r
    lines = []
    for strategy in strategies:
        cells = [by_key.get((workload, strategy, s)) for s in sizes]
        if not any(cells):
            continue
        resv = [fmt(c and c["peak_reserved_bytes"] / GIB, ".3f") for c in cells]
        step = [fmt(c and overlap_of(c), ".3f") for c in cells]
        copy = [fmt(c and c.get("copy_gbps"), ".1f") for c in cells]
        name = f"{label_prefix} {strategy}"
        if strategy in bold:
            resv = [f"**{x}**" for x in resv]
        lines.append(f"| {name} | " + " | ".join(resv) + " | " + " | ".join(step) + " | " + " / ".join(copy) + " |")
    return lines


def verdict_summary(doc):
    checked = [v for v in doc.get("verdicts", []) if v.get("pass") is not None]
    failed = [v for v in checked if not v["pass"]]
    return len(checked), failed


def references(doc):
    parts = []
    vendor = [r["vendor"]["h2d_gbps"] for r in doc.get("raw_copy", []) if r.get("vendor")]
    if vendor:
        parts.append("`cudaMemcpyAsync` " + " / ".join(f"{v:.1f}" for v in vendor) + " GB/s")
    vk = [r["raw_vulkan"]["h2d_gbps"] for r in doc.get("raw_copy", []) if r.get("raw_vulkan")]
    if vk:
        parts.append("raw Vulkan loop " + " / ".join(f"{v:.1f}" for v in vk) + " GB/s")
    raw = [r["gbps"] for r in doc.get("raw_copy", []) if r.get("gbps") is not None]
    if raw and not parts:
        parts.append("ferry's raw copy loop " + " / ".join(f"{v:.1f}" for v in raw) + " GB/s")
    return parts


def contention_table(doc):
    """The contention section's rows (urgent latency beside a bulk copy), when the run has them."""
    c = doc.get("contention")
    if not c or not c.get("rows"):
        return []
    out = [f"ferry {backend_label(doc)} contention: a {size_label(c['bulk_bytes'])} pinned bulk copy beside a "
           f"{size_label(c['urgent_bytes'])} pinned urgent upload every {c['period_us']} us:", "",
           "| path | row | urgent p50 µs | urgent p99 µs | urgent max µs | bulk GB/s |", "|---|---|---|---|---|---|"]
    for r in c["rows"]:
        out.append(f"| {r['path']} | {r['name']} | {fmt(r.get('urgent_p50_us'), '.1f')} | "
                   f"{fmt(r.get('urgent_p99_us'), '.1f')} | {fmt(r.get('urgent_max_us'), '.1f')} | "
                   f"{fmt(r.get('bulk_gbps'), '.2f')} |")
    return out + [""]


def backend_label(doc):
    return BACKEND_LABEL.get(doc["backend"], doc["backend"])


def commit_text(commit):
    return f"`{commit}`" if commit else "not recorded"


def bench_command(doc):
    """The ferry-bench command line of a run: as recorded, else rebuilt from its configuration."""
    if doc.get("command"):
        return doc["command"]
    cfg = doc["config"]
    parts = ["ferry-bench", "--backend", doc["backend"], "--sizes", ",".join(size_label(n) for n in cfg["sizes"])]
    if cfg.get("steps") is not None:
        parts += ["--steps", str(cfg["steps"])]
    if cfg.get("workloads"):
        parts += ["--workloads", ",".join(cfg["workloads"])]
    return " ".join(parts + ["--out", "DIR"])


def generate(docs, paths, seed_study, commit=None):
    sizes = []
    for doc, path in zip(docs, paths):
        for s in require(require(doc, "config", path), "sizes", path):
            if s not in sizes:
                sizes.append(s)
    sizes.sort()
    labels = [size_label(s) for s in sizes]
    workloads = []
    for doc in docs:
        for w in doc["config"].get("workloads", ["pipeline"]):
            if w not in workloads:
                workloads.append(w)
    out = ["Generated by `tools/bench_tables.py` from these runs:", ""]
    for doc in docs:
        out.append(f"- ferry {backend_label(doc)}: {doc.get('device', '?')}, commit {commit_text(doc.get('commit') or commit)}, "
                   f"ferry {doc.get('version', '?')}, {doc['config'].get('steps')} steps, "
                   f"{doc['config'].get('compute_units')} compute units: `{bench_command(doc)}`")
    if seed_study:
        s = seed_study[0]
        cfg = s.get("config", {})
        sizes_arg = ",".join(size_label(n) for n in cfg.get("sizes", []))
        out.append(f"- PyTorch: {s.get('device', '?')}, commit {commit_text(s.get('ferry_commit'))}, torch "
                   f"{s.get('torch', '?')}: `lab/python/seed_study.py"
                   + (f" --sizes {sizes_arg}" if sizes_arg else "") + " --out DIR`")
    out.append("")
    for w in workloads:
        title = {"seed": "**seed** workload (compute on an unrelated buffer while the batch is copied, then a short "
                         "pass reads it; bar: owner_owned reserved ≤ 1.02 × blocking and step ≤ 1.05 × bound)",
                 "pipeline": "**pipeline** workload (compute reads the whole batch while the next one is copied; "
                             "bar: owner_owned+overlap reserved ≤ 1.02 × (blocking + one batch), step ≤ 1.05 × bound)"
                 }.get(w, w)
        out.append(title + ":")
        out.append("")
        out.append("| strategy | " + " | ".join(f"{l} peak reserved GiB" for l in labels) + " | " +
                   " | ".join(f"{l} step / max(compute, copy)" for l in labels) + " | copy GB/s (" +
                   " / ".join(labels) + ") |")
        out.append("|---|" + "---|" * (2 * len(labels) + 1))
        if seed_study:
            rows = [dict(r, strategy=seed_row_name(r)) for r in seed_study[0].get("results", [])]
            names = []
            for r in rows:
                if r.get("workload", "seed") == w and r["strategy"] not in names:
                    names.append(r["strategy"])
            out += table_rows("PyTorch", rows, sizes, w, names)
        for doc in docs:
            label = "ferry " + backend_label(doc)
            bold = ("owner_owned",) if w == "seed" else ("owner_owned+overlap",)
            out += table_rows(label, doc.get("results", []), sizes, w, ROWS.get(w, []), bold)
        out.append("")
    for doc in docs:
        n, failed = verdict_summary(doc)
        refs = references(doc)
        line = f"ferry {backend_label(doc)}: "
        if refs:
            line += "references in the same run: " + ", ".join(refs) + ". "
        line += f"{n - len(failed)} of {n} checked bars met"
        if failed:
            line += "; missed: " + "; ".join(v["text"] for v in failed)
        out.append(line + ".")
        out.append("")
    for doc in docs:
        out += contention_table(doc)
    return "\n".join(out).rstrip() + "\n"


def rewrite(doc_path, block):
    text = doc_path.read_text(encoding="utf-8")
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        sys.exit(f"bench_tables: {doc_path} needs exactly one '{BEGIN}' line followed by one '{END}' line")
    before, rest = text.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    doc_path.write_text(before + BEGIN + "\n" + block + END + after, encoding="utf-8")


def collect(paths):
    """The JSON files a command line names: files as given, directories searched for results*.json."""
    files = []
    for p in map(pathlib.Path, paths):
        if p.is_dir():
            found = sorted(p.rglob("results*.json"))
            if not found:
                sys.exit(f"bench_tables: {p} holds no results*.json")
            files += found
        else:
            files.append(p)
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="ferry-bench results.json files or run output directories")
    ap.add_argument("--seed-study", help="the PyTorch seed study's JSON (found in the directories otherwise)")
    ap.add_argument("--commit", help="the commit of ferry-bench runs whose JSON names none")
    ap.add_argument("--doc", default=str(pathlib.Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"),
                    help="the document whose bench-table block is replaced (default: docs/benchmarks.md)")
    ap.add_argument("--stdout", action="store_true", help="print the tables instead of rewriting the document")
    args = ap.parse_args()
    docs, paths, seed = [], [], None
    named = set(map(pathlib.Path, args.paths))
    for path in collect(args.paths):
        doc = load(path)
        tool = doc.get("tool") if isinstance(doc, dict) else None
        if tool == "ferry-bench":
            require(doc, "results", path)
            require(require(doc, "config", path), "sizes", path)
            docs.append(doc)
            paths.append(str(path))
        elif tool == "seed_study" and not args.seed_study:
            if seed:
                sys.exit(f"bench_tables: two seed studies, {seed[1]} and {path}: name one with --seed-study")
            seed = (doc, str(path))
        elif tool != "seed_study" and path in named:  # a directory's other JSON files are skipped
            sys.exit(f"bench_tables: {path} was not written by ferry-bench or the seed study")
    if args.seed_study:
        seed = (load(args.seed_study), args.seed_study)
    if not docs:
        sys.exit("bench_tables: no ferry-bench results among " + ", ".join(args.paths))
    block = generate(docs, paths, seed, args.commit)
    if args.stdout:
        sys.stdout.write(block)
    else:
        rewrite(pathlib.Path(args.doc), block)
        print(f"bench_tables: rewrote the bench tables of {args.doc}")


if __name__ == "__main__":
    main()
