#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Generate the README's benchmark table from ferry-bench results (and a PyTorch seed study).

    python3 tools/readme_table.py RESULTS.json [RESULTS.json ...] [--seed-study SEED.json]
                                  [--readme README.md] [--stdout]

Each RESULTS.json is written by `ferry-bench --out DIR` (DIR/results.json); give one per
backend (e.g. the CUDA and the Vulkan run). The table replaces the block between the lines
`<!-- bench-table:begin -->` and `<!-- bench-table:end -->` of the README (both kept), or is
printed with --stdout. Nothing but the JSON files' figures goes into the table.

--seed-study SEED.json adds PyTorch rows from the Python seed study (lab/python/seed_study.py).
It is read in ferry-bench's shape: {"device": ..., "results": [{"strategy": NAME,
"size_bytes": N, "peak_reserved_bytes": N, "copy_gbps": X (optional), "workload": "seed"
(optional, default seed), "overlap" or "step_over_bound": X (optional), "source": "pinned" |
"pageable" | "kjt" (optional, default pinned), "order": NAME (optional)}, ...]}; a row per
strategy, source and order, labelled "PyTorch NAME" for pinned sources and "PyTorch NAME
(SOURCE, ORDER)" otherwise.
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
        sys.exit(f"readme_table: cannot read {path}: {e}")


def require(doc, key, path):
    if key not in doc:
        sys.exit(f"readme_table: {path} has no '{key}' (is it a ferry-bench results.json?)")
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


def generate(docs, paths, seed_study):
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
    out = []
    head = "; ".join(
        f"`{d['backend']}` on {d.get('device', '?')} (ferry {d.get('version', '?')}, {d['config'].get('steps')} steps, "
        f"{d['config'].get('compute_units')} compute units)" for d in docs)
    out.append(f"Generated by `tools/readme_table.py` from {', '.join(f'`{pathlib.Path(p).name}`' for p in paths)}"
               + (f" and `{pathlib.Path(seed_study[1]).name}`" if seed_study else "") + f": {head}.")
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
            label = "ferry " + BACKEND_LABEL.get(doc["backend"], doc["backend"])
            bold = ("owner_owned",) if w == "seed" else ("owner_owned+overlap",)
            out += table_rows(label, doc.get("results", []), sizes, w, ROWS.get(w, []), bold)
        out.append("")
    for doc in docs:
        n, failed = verdict_summary(doc)
        refs = references(doc)
        line = f"ferry {BACKEND_LABEL.get(doc['backend'], doc['backend'])}: "
        if refs:
            line += "references in the same run: " + ", ".join(refs) + ". "
        line += f"{n - len(failed)} of {n} checked bars met"
        if failed:
            line += "; missed: " + "; ".join(v["text"] for v in failed)
        out.append(line + ".")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def rewrite(readme, block):
    text = readme.read_text(encoding="utf-8")
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        sys.exit(f"readme_table: {readme} needs exactly one '{BEGIN}' line followed by one '{END}' line")
    before, rest = text.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    readme.write_text(before + BEGIN + "\n" + block + END + after, encoding="utf-8")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="ferry-bench results.json (one per backend)")
    ap.add_argument("--seed-study", help="the PyTorch seed study's JSON (optional)")
    ap.add_argument("--readme", default=str(pathlib.Path(__file__).resolve().parent.parent / "README.md"))
    ap.add_argument("--stdout", action="store_true", help="print the block instead of rewriting the README")
    args = ap.parse_args()
    docs = [load(p) for p in args.results]
    for doc, path in zip(docs, args.results):
        if doc.get("tool") != "ferry-bench":
            sys.exit(f"readme_table: {path} was not written by ferry-bench")
        require(doc, "results", path)
    seed = (load(args.seed_study), args.seed_study) if args.seed_study else None
    block = generate(docs, args.results, seed)
    if args.stdout:
        sys.stdout.write(block)
    else:
        rewrite(pathlib.Path(args.readme), block)
        print(f"readme_table: rewrote the bench table of {args.readme}")


if __name__ == "__main__":
    main()
