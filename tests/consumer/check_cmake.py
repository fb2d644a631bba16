#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""An installed ferry serves a CMake consumer: find_package(ferry CONFIG REQUIRED) and
target_link_libraries(... ferry::ferry) are all it writes.

After `meson install --destdir` into a temporary directory, configures tests/consumer/cmake
with CMAKE_PREFIX_PATH = the staged prefix and checks, in order:
  1. find_package read the staged ferryConfig.cmake (ferry_DIR) and ferryConfigVersion.cmake
     (the ferry_VERSION the project prints is this build's version);
  2. every ferry include directory on a compile line lies under the staging directory: the
     config found its prefix from its own location, not from the configured prefix;
  3. consumer.cpp (linking ferry::ferry, no C++ standard of its own: the target brings C++20)
     and consumer_export.cpp (linking ferry::export) build with -Wall -Wextra -Werror and run
     on the host backend.
Exit 77 (skip) when cmake or meson is not installed.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import sys
import tempfile

from consumer_common import fail, find_one, install_staged, run, run_consumer


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-root", required=True)
    ap.add_argument("--project", required=True, help="the consumer's CMake project directory")
    ap.add_argument("--prefix", required=True, help="the build's configured install prefix")
    ap.add_argument("--version", required=True, help="the version this build of ferry has")
    ap.add_argument("--package", required=True, choices=("true", "false"),
                    help="whether the build generated the CMake package")
    ap.add_argument("--meson", default="")
    ap.add_argument("cxx", nargs="+", help="the project's C++ compiler command")
    a = ap.parse_args()

    cmake = shutil.which("cmake")
    if cmake is None:
        print("SKIPPED: cmake not installed")
        return 77
    meson = a.meson or shutil.which("meson")
    if not meson:
        print("SKIPPED: meson not found")
        return 77
    if a.package != "true":
        fail(f"{a.build_root} has no CMake package: cmake was not found when it was configured "
             "(meson setup --reconfigure)")

    with tempfile.TemporaryDirectory(prefix="ferry-cmake-") as tmp:
        stage = os.path.join(tmp, "stage")
        install_staged(meson, a.build_root, stage)
        package_dir = os.path.dirname(find_one(stage, "ferryConfig.cmake"))
        find_one(stage, "ferryConfigVersion.cmake")
        prefix = os.path.join(stage, os.path.relpath(a.prefix, os.sep))  # as --destdir puts it
        build = os.path.join(tmp, "build")
        cmd = [cmake, "-S", a.project, "-B", build, f"-DCMAKE_PREFIX_PATH={prefix}",
               f"-DCMAKE_CXX_COMPILER={a.cxx[-1]}", "-DCMAKE_CXX_FLAGS=-Wall -Wextra -Werror",
               "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", "-DCMAKE_BUILD_TYPE=Debug"]
        if len(a.cxx) > 1:  # a launcher (ccache) before the compiler
            cmd.append("-DCMAKE_CXX_COMPILER_LAUNCHER=" + ";".join(a.cxx[:-1]))
        if shutil.which("ninja"):
            cmd += ["-G", "Ninja"]
        out = run(cmd)

        with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8") as f:
            found_dir = re.search(r"^ferry_DIR:\w+=(.*)$", f.read(), re.M)
        if not found_dir or os.path.realpath(found_dir.group(1)) != os.path.realpath(package_dir):
            fail(f"find_package(ferry) read {found_dir and found_dir.group(1)}, "
                 f"not the staged {package_dir}")
        if f"ferry {a.version} found" not in out:
            fail(f"the consumer project did not report ferry_VERSION {a.version}")
        print(f"ok: find_package(ferry) read the staged package, version {a.version}")

        with open(os.path.join(build, "compile_commands.json"), encoding="utf-8") as f:
            commands = json.load(f)
        stage_real = os.path.realpath(stage)
        for entry in commands:
            args = shlex.split(entry["command"])
            includes = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg in ("-I", "-isystem")]
            includes += [arg[2:] for arg in args if arg.startswith("-I") and len(arg) > 2]
            if not includes:
                fail(f"no include directory on the compile line of {entry['file']}")
            outside = [d for d in includes if not os.path.realpath(d).startswith(stage_real + os.sep)]
            if outside:
                fail(f"{entry['file']} compiles with include directories outside {stage}: {outside}")
        print("ok: every include directory the package gives lies under the staging directory")

        run([cmake, "--build", build])
        # No library path: CMake gives the programs a run path to the imported libraries.
        for exe in ("consumer", "consumer-export"):
            run_consumer(os.path.join(build, exe))
    print("ok: consumers of ferry::ferry and ferry::export built with CMake run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
