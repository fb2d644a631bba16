#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""As a meson subproject, ferry builds its library only.

A parent's dependency('ferry') falls back to the subproject; the parent must then get no
tests, tools or examples of ferry's (its `meson test` runs its own tests) and need nothing that
only ferry's tests need (doctest). Configures tests/consumer/parent in a temporary directory
whose subprojects/ferry links to the source tree, with consumer.cpp and consumer_export.cpp
copied beside it, and checks:
  1. by default, the parent's tests are its own and the subproject has no executables
     (`meson introspect`), and the configure log never looked for doctest;
  2. with those default options, the parent's consumer (dependency('ferry')) and
     consumer-export (dependency('ferry-export')) build, with libferry compiled as the
     subproject, and run on the host backend;
  3. with -Dferry:tests=true -Dferry:tools=true, ferry's tests and executables are there
     (configured only).
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

from consumer_common import fail, run, run_consumer


def introspect(meson: str, build: str, what: str):
    return json.loads(run([meson, "introspect", build, what], echo=False))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--meson", required=True)
    a = ap.parse_args()
    fixture = os.path.join(a.source_root, "tests", "consumer", "parent")

    with tempfile.TemporaryDirectory(prefix="ferry-parent-") as tmp:
        parent = os.path.join(tmp, "parent")
        shutil.copytree(fixture, parent)
        for source in ("consumer.cpp", "consumer_export.cpp"):
            shutil.copy(os.path.join(a.source_root, "tests", "consumer", source), parent)
        os.mkdir(os.path.join(parent, "subprojects"))
        os.symlink(os.path.abspath(a.source_root), os.path.join(parent, "subprojects", "ferry"))
        build = os.path.join(tmp, "build")
        # Fallback forced, so an installed ferry.pc cannot stand in for the subproject; no
        # CUDA/HIP probing, which this check does not need.
        run([a.meson, "setup", build, parent, "--force-fallback-for=ferry",
             "-Dferry:cuda=disabled", "-Dferry:hip=disabled"], echo=False)

        tests = [t["name"] for t in introspect(a.meson, build, "--tests")]
        if tests != ["parent-own"]:
            fail(f"the parent's tests are {tests}, expected only its own ['parent-own']")
        executables = [t["name"] for t in introspect(a.meson, build, "--targets")
                       if t.get("subproject") == "ferry" and t["type"] == "executable"]
        if executables:
            fail(f"ferry as a subproject builds executables: {executables}")
        with open(os.path.join(build, "meson-logs", "meson-log.txt"), encoding="utf-8") as f:
            if "doctest" in f.read().lower():
                fail("configuring the parent looked for doctest")
        print("ok: by default ferry adds no tests and no executables and needs no doctest")

        run([a.meson, "compile", "-C", build, "consumer", "consumer-export"], echo=False)
        for exe in ("consumer", "consumer-export"):
            run_consumer(os.path.join(build, exe))
        print("ok: the consumers built against ferry as a subproject run")

        run([a.meson, "setup", "--reconfigure", build, parent,
             "-Dferry:tests=true", "-Dferry:tools=true"], echo=False)
        tests = [t["name"] for t in introspect(a.meson, build, "--tests")]
        executables = [t["name"] for t in introspect(a.meson, build, "--targets")
                       if t.get("subproject") == "ferry" and t["type"] == "executable"]
        if len(tests) < 2 or "ferry-bench" not in executables:
            fail(f"-Dferry:tests=true -Dferry:tools=true gave tests {tests}, "
                 f"executables {executables}")
        print(f"ok: asked for, ferry adds {len(tests) - 1} tests and {len(executables)} executables")
    return 0


if __name__ == "__main__":
    sys.exit(main())
