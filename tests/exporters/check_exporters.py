#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks ferry's snapshot exporters.

Runs the exporters test program (which writes, for each strategy, NAME.pickle, NAME.json,
NAME.trace.json and one report.html) into a temporary folder, then checks:
  (a) the pickle loads with pickle.load and its dict, segments, blocks and trace entries have
      exactly the keys and value types of PyTorch 2.11's snapshot (the fixture);
  (b) the JSON validates against tools/snapshot.schema.json (python3-jsonschema when installed,
      and always a small built-in validator for the subset of JSON Schema the schema uses);
  (c) the HTML parses as XML and has one timeline <g class="timeline"> per strategy, no scripts
      and no external resources;
  (d) the trace JSON has balanced spans per queue (X events with dur >= 0; B/E matched) and a
      thread_name for every queue with spans.

usage: check_exporters.py --program EXE --fixture FIXTURE.json --schema SCHEMA.json [--dir DIR]
       check_exporters.py --no-run --dir DIR --fixture ... --schema ... \
           [--strategies a,b,...] [--suffix=-64M] [--report report-64M.html]
           (check files written elsewhere, e.g. by `ferry-bench --snapshot DIR`)
"""
import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

STRATEGIES = ["executor_owned", "owner_owned"]
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def type_name(v):
    # JSON cannot tell a tuple from a list; PyTorch pickles segment_pool_id as a tuple.
    if isinstance(v, tuple):
        return "list"
    return type(v).__name__


def same_shape(what, obj, ref):
    if not isinstance(obj, dict):
        fail(f"{what}: expected a dict, got {type(obj).__name__}")
        return False
    if set(obj) != set(ref):
        fail(f"{what}: keys {sorted(obj)} differ from PyTorch's {sorted(ref)}")
        return False
    ok = True
    for k, rv in ref.items():
        if type_name(obj[k]) != type_name(rv):
            fail(f"{what}[{k!r}]: type {type_name(obj[k])} (value {obj[k]!r}), PyTorch has {type_name(rv)}")
            ok = False
        elif isinstance(rv, list) and rv and len(obj[k]) and not isinstance(rv[0], dict):
            for x in obj[k]:
                if type_name(x) != type_name(rv[0]):
                    fail(f"{what}[{k!r}] element type {type_name(x)}, PyTorch has {type_name(rv[0])}")
                    ok = False
    return ok


# ---- (a) pickle --------------------------------------------------------------------------------

def check_pickle(path, fixture):
    with open(path, "rb") as f:
        snap = pickle.load(f)
    if not isinstance(snap, dict):
        return fail(f"{path}: top level is {type(snap).__name__}, not dict")
    ref_top = {k: v for k, v in fixture.items() if not k.startswith("_")}
    for key in ("segments", "device_traces"):
        if key not in snap:
            return fail(f"{path}: no {key!r}")
    if set(snap) != set(ref_top):
        fail(f"{path}: top-level keys {sorted(snap)} differ from PyTorch's {sorted(ref_top)}")
    ref_seg = fixture["segments"][0]
    ref_block = ref_seg["blocks"][0]
    ref_trace = fixture["device_traces"][0][0]
    if not snap["segments"]:
        fail(f"{path}: no segments")
    states = set()
    for i, seg in enumerate(snap["segments"]):
        if not same_shape(f"{path}: segments[{i}]", seg, ref_seg):
            continue
        if not isinstance(seg["segment_pool_id"], (tuple, list)) or len(seg["segment_pool_id"]) != 2:
            fail(f"{path}: segments[{i}].segment_pool_id is not a pair")
        if seg["segment_type"] not in ("small", "large"):
            fail(f"{path}: segments[{i}].segment_type {seg['segment_type']!r}")
        total = 0
        addr = seg["address"]
        for j, b in enumerate(seg["blocks"]):
            same_shape(f"{path}: segments[{i}].blocks[{j}]", b, ref_block)
            if b.get("address") != addr:
                fail(f"{path}: segments[{i}].blocks[{j}] not contiguous")
            addr += b.get("size", 0)
            total += b.get("size", 0)
            states.add(b.get("state"))
        if total != seg["total_size"]:
            fail(f"{path}: segments[{i}] blocks cover {total} of {seg['total_size']} bytes")
    if not states <= {"active_allocated", "active_pending_free", "inactive"}:
        fail(f"{path}: unknown block states {states}")
    traces = snap["device_traces"]
    if not isinstance(traces, list) or not traces or not isinstance(traces[0], list):
        return fail(f"{path}: device_traces is not a list of lists")
    actions = set()
    allocated = {}
    for d, trace in enumerate(traces):
        for k, e in enumerate(trace):
            if not same_shape(f"{path}: device_traces[{d}][{k}]", e, ref_trace):
                continue
            actions.add(e["action"])
            # memory_viz's replay: alloc, then free_completed releases the block.
            if e["action"] == "alloc":
                if e["addr"] in allocated:
                    fail(f"{path}: alloc of {e['addr']:#x} while it is still allocated in the trace")
                allocated[e["addr"]] = e["size"]
            elif e["action"] == "free_completed":
                allocated.pop(e["addr"], None)
    known = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free"}
    if not actions <= known:
        fail(f"{path}: unknown actions {actions - known}")
    if "alloc" not in actions or "segment_alloc" not in actions:
        fail(f"{path}: trace lacks alloc/segment_alloc ({sorted(actions)})")


# ---- (b) JSON schema ------------------------------------------------------------------------

JSON_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
SUPPORTED = {"$schema", "$id", "$defs", "$ref", "title", "description", "type", "required", "properties",
             "additionalProperties", "items", "enum", "const", "minimum", "maximum"}


def mini_validate(value, schema, root, where, errors):
    """The subset of JSON Schema tools/snapshot.schema.json uses."""
    unknown = set(schema) - SUPPORTED
    if unknown:
        errors.append(f"schema uses keywords the built-in validator lacks: {sorted(unknown)}")
        return
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/"):
            errors.append(f"{where}: unsupported $ref {ref}")
            return
        target = root
        for part in ref[2:].split("/"):
            target = target[part]
        mini_validate(value, target, root, where, errors)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(JSON_TYPES[t](value) for t in types):
            errors.append(f"{where}: {value!r:.60} is not {schema['type']}")
            return
    if "const" in schema and value != schema["const"]:
        errors.append(f"{where}: {value!r} != const {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} not in {schema['enum']}")
    if "minimum" in schema and JSON_TYPES["number"](value) and value < schema["minimum"]:
        errors.append(f"{where}: {value} < minimum {schema['minimum']}")
    if "maximum" in schema and JSON_TYPES["number"](value) and value > schema["maximum"]:
        errors.append(f"{where}: {value} > maximum {schema['maximum']}")
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{where}: missing required {key!r}")
        props = schema.get("properties", {})
        for key, v in value.items():
            if key in props:
                mini_validate(v, props[key], root, f"{where}.{key}", errors)
            elif schema.get("additionalProperties", True) is False:
                errors.append(f"{where}: unexpected property {key!r}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            mini_validate(v, schema["items"], root, f"{where}[{i}]", errors)


def check_json(path, schema):
    with open(path) as f:
        doc = json.load(f)
    errors = []
    mini_validate(doc, schema, schema, "$", errors)
    for e in errors[:20]:
        fail(f"{path}: {e}")
    try:
        import jsonschema
    except ImportError:
        print(f"note: python3-jsonschema not installed; {path} checked with the built-in validator only")
        return
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    for e in list(cls(schema).iter_errors(doc))[:20]:
        fail(f"{path}: jsonschema: {e.message} at {list(e.absolute_path)}")


# ---- (c) HTML ------------------------------------------------------------------------------------

SVG = "{http://www.w3.org/2000/svg}"


def check_html(path, strategies):
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        return fail(f"{path}: not well-formed XML: {e}")
    groups = [g for g in root.iter(f"{SVG}g") if g.get("class") == "timeline"]
    labels = [g.get("data-strategy") for g in groups]
    if sorted(labels) != sorted(strategies):
        fail(f"{path}: timeline groups {labels}, expected one per strategy {strategies}")
    for g in groups:
        titles = [t.text for t in g.iter(f"{SVG}text") if t.get("class") == "title"]
        for want in ("Active memory timeline", "Active cached segment timeline", "Queue activity"):
            if want not in titles:
                fail(f"{path}: {g.get('data-strategy')}: no {want!r} panel")
        lines = list(g.iter(f"{SVG}polyline"))
        if len(lines) < 2:
            fail(f"{path}: {g.get('data-strategy')}: {len(lines)} plotted lines, expected 2 (allocated, reserved)")
        for line in lines:
            xs = [float(p.split(",")[0]) for p in line.get("points", "").split()]
            if any(b < a for a, b in zip(xs, xs[1:])):
                fail(f"{path}: {g.get('data-strategy')}: a timeline goes back in time")
    for el in root.iter():
        tag = el.tag.split("}")[-1]
        if tag == "script":
            fail(f"{path}: contains a <script>")
        for attr in ("src", "href", "{http://www.w3.org/1999/xlink}href"):
            v = el.get(attr)
            if v and not v.startswith("#"):
                fail(f"{path}: external resource {v!r}")
        if tag == "link":
            fail(f"{path}: contains a <link>")


# ---- (d) trace ----------------------------------------------------------------------------------

def check_trace(path):
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    named = set()
    stacks = {}
    spans = 0
    for i, e in enumerate(events):
        ph = e.get("ph")
        key = (e.get("pid"), e.get("tid"))
        if ph == "M" and e.get("name") == "thread_name":
            named.add(key)
        elif ph == "X":
            spans += 1
            if not isinstance(e.get("dur"), (int, float)) or e["dur"] < 0 or e.get("ts", -1) < 0:
                fail(f"{path}: event {i} has a bad ts/dur: {e}")
            stacks.setdefault(key, [])
        elif ph == "B":
            stacks.setdefault(key, []).append(e.get("name"))
        elif ph == "E":
            if not stacks.get(key):
                fail(f"{path}: event {i}: E without B on {key}")
            else:
                stacks[key].pop()
    for key, stack in stacks.items():
        if stack:
            fail(f"{path}: unclosed spans {stack} on {key}")
        if key not in named:
            fail(f"{path}: queue {key} has spans but no thread_name")
    if spans == 0:
        fail(f"{path}: no spans")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--program")
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--schema", required=True)
    ap.add_argument("--dir")
    ap.add_argument("--no-run", action="store_true")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--suffix", default="", help="file name suffix after the strategy (ferry-bench: -SIZE)")
    ap.add_argument("--report", default="report.html")
    args = ap.parse_args()
    strategies = [x for x in args.strategies.split(",") if x]
    with open(args.fixture) as f:
        fixture = json.load(f)
    with open(args.schema) as f:
        schema = json.load(f)
    tmp = None
    out = args.dir
    if out is None:
        tmp = tempfile.TemporaryDirectory(prefix="ferry-exporters-")
        out = tmp.name
    if not args.no_run:
        env = dict(os.environ, FERRY_EXPORTERS_OUT=out, FERRY_HOST_LATENCY_US="0")
        r = subprocess.run([args.program], env=env)
        if r.returncode != 0:
            print(f"FAIL: {args.program} exited with {r.returncode}")
            return 1
    for s in strategies:
        stem = os.path.join(out, s + args.suffix)
        check_pickle(stem + ".pickle", fixture)
        check_json(stem + ".json", schema)
        check_trace(stem + ".trace.json")
    check_html(os.path.join(out, args.report), strategies)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print(f"exporters OK: {', '.join(strategies)} (pickle, JSON schema, HTML, trace)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
