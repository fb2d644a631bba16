#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""ferry.pc serves a consumer on a machine with no GPU toolkit: it requires no other package.

ferry opens its backends' drivers at run time (dlopen), so nothing a consumer compiles or links
needs vulkan.pc (or CUDA's, or HIP's). pkg-config resolves Requires.private for --cflags as
well as for --static, so a required package that is absent makes `pkg-config --cflags ferry`
fail outright. ferry-export.pc and ferry-testkit.pc require ferry.pc and nothing else: their
headers take libferry's types, so their consumers get libferry's flags with them. Checks, in
order:
  1. the generated ferry.pc (meson-private) has no Requires or Requires.private line, and
     ferry-export.pc and ferry-testkit.pc have `Requires: ferry` only;
  2. with a search path holding only those files, `pkg-config --cflags --libs` succeeds for
     ferry, ferry-export and ferry-testkit;
  3. after `meson install --destdir`, a consumer compiled and linked with only the staged
     ferry.pc's flags (PKG_CONFIG_SYSROOT_DIR = the staging dir) runs on the host backend, and
     so do a consumer of ferry-export and one of ferry-testkit, each built with only its own
     .pc file's flags.
Exit 77 (skip) for a step whose tool (pkg-config, meson) is missing, after the steps before it.
"""
import argparse
import os
import shutil
import sys
import tempfile

from consumer_common import fail, find_one, install_staged, run, run_consumer


def pkg_env(path_dir: str, sysroot: str = "") -> dict:
    env = dict(os.environ)
    env.pop("PKG_CONFIG_PATH", None)
    env["PKG_CONFIG_LIBDIR"] = path_dir  # the only directory searched: no system .pc files
    if sysroot:
        env["PKG_CONFIG_SYSROOT_DIR"] = sysroot
    else:
        env.pop("PKG_CONFIG_SYSROOT_DIR", None)
    return env


def requires_lines(pc_file: str) -> list:
    """(field, value) of every Requires / Requires.private line, field lowercased."""
    with open(pc_file, encoding="utf-8") as f:
        lines = f.read().splitlines()
    out = []
    for line in lines:
        field, _, value = line.partition(":")
        if field.strip().lower() in ("requires", "requires.private"):
            out.append((field.strip().lower(), value.strip()))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-root", required=True)
    ap.add_argument("--consumer", required=True, help="the consumer's C++ source")
    ap.add_argument("--export-consumer", required=True, help="the ferry-export consumer's source")
    ap.add_argument("--testkit-consumer", required=True, help="the ferry-testkit consumer's source")
    ap.add_argument("--meson", default="")
    ap.add_argument("cxx", nargs="+", help="the project's C++ compiler command")
    a = ap.parse_args()

    generated = os.path.join(a.build_root, "meson-private", "ferry.pc")
    with open(generated, encoding="utf-8") as f:
        text = f.read()
    requires = [line for line in text.splitlines() if line.split(":")[0].strip().lower()
                in ("requires", "requires.private")]
    if requires:
        fail(f"{generated} requires other packages: {requires}")
    print(f"ok: {generated} has no Requires lines")
    for dependent in ("ferry-export", "ferry-testkit"):
        generated_dependent = os.path.join(a.build_root, "meson-private", dependent + ".pc")
        requires = requires_lines(generated_dependent)
        if requires != [("requires", "ferry")]:
            fail(f"{generated_dependent} should require ferry (publicly) and nothing else: {requires}")
        print(f"ok: {generated_dependent} requires ferry only")

    pkg_config = shutil.which("pkg-config")
    if pkg_config is None:
        print("SKIPPED: pkg-config not installed (steps 2 and 3)")
        return 77
    for package in ("ferry", "ferry-export", "ferry-testkit"):
        run([pkg_config, "--cflags", "--libs", package], env=pkg_env(os.path.dirname(generated)))
    print("ok: pkg-config resolves ferry, ferry-export and ferry-testkit with no other .pc file present")

    meson = a.meson or shutil.which("meson")
    if not meson:
        print("SKIPPED: meson not found (step 3)")
        return 77
    with tempfile.TemporaryDirectory(prefix="ferry-pc-") as tmp:
        stage = os.path.join(tmp, "stage")
        install_staged(meson, a.build_root, stage)
        env = pkg_env(os.path.dirname(find_one(stage, "ferry.pc")), sysroot=stage)
        for package, source in (("ferry", a.consumer), ("ferry-export", a.export_consumer),
                                ("ferry-testkit", a.testkit_consumer)):
            flags = run([pkg_config, "--cflags", "--libs", package], env=env).split()
            exe = os.path.join(tmp, "consumer-" + package)
            run(a.cxx + ["-std=c++20", "-Wall", "-Wextra", "-Werror", source, "-o", exe] + flags)
            run_consumer(exe, [flag[2:] for flag in flags if flag.startswith("-L")])
    print("ok: consumers built from the installed ferry.pc, ferry-export.pc and ferry-testkit.pc alone run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
