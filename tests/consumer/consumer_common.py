# SPDX-License-Identifier: MIT
"""What the consumer checks share: running a command, installing the build into a temporary
staging directory, and running a consumer program.

A consumer (consumer.cpp, consumer_export.cpp) exits 0 and prints one line ending in " ok"
when its round trip on the host backend worked; run_consumer holds it to both.
"""
import os
import subprocess
import sys


def fail(message: str) -> None:
    print(f"FAIL: {message}")
    sys.exit(1)


def run(cmd, env=None, cwd=None, echo=True) -> str:
    """Runs cmd and returns its stdout; fails the check when it exits non-zero. echo=False keeps
    a successful command's stdout out of the log (machine-read output such as JSON)."""
    print("$ " + " ".join(cmd))
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    if proc.stdout.strip() and (echo or proc.returncode != 0):
        print(proc.stdout.rstrip())
    if proc.returncode != 0:
        print(proc.stderr.rstrip())
        fail(f"{cmd[0]} exited {proc.returncode}")
    return proc.stdout


def install_staged(meson: str, build_root: str, stage: str) -> None:
    """`meson install --destdir stage`: the install as it would land under the configured
    prefix, rooted at stage instead, without rebuilding."""
    run([meson, "install", "-C", build_root, "--no-rebuild", "--quiet", "--destdir", stage])


def find_one(root: str, name: str) -> str:
    """The path of the one file called name under root; fails unless there is exactly one."""
    found = [os.path.join(d, f) for d, _, files in os.walk(root) for f in files if f == name]
    if len(found) != 1:
        fail(f"expected one {name} under {root}, found {found}")
    return found[0]


def run_consumer(exe: str, libdirs=()) -> None:
    """Runs a consumer program, with libdirs searched first for shared libraries, and fails the
    check unless it exits 0 and its last line reports ok."""
    env = dict(os.environ)
    if libdirs:
        # No empty entry: the loader reads one as the current directory.
        paths = list(libdirs) + [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
        env["LD_LIBRARY_PATH"] = os.pathsep.join(paths)
    lines = run([exe], env=env).strip().splitlines()
    if not lines or not lines[-1].endswith(" ok"):
        fail(f"{exe} exited 0 but did not report ok: {lines}")
