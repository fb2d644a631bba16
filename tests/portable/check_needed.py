#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Every ferry binary loads without a vendor runtime: no CUDA, HIP/ROCm or Vulkan library (and
nothing else outside the allowlist) among its NEEDED entries.

    check_needed.py --readelf READELF BINARY...

Reads each binary's dynamic section with `readelf -d` and fails, naming the binary and the
entry, on a NEEDED library that is neither a C/C++ runtime library nor one of ferry's own.
The backends open their vendor libraries at run time (docs/building.md, "At run time"), so a
vendor library here means a program linked to ferry would fail in the dynamic loader on a
machine without that vendor's runtime.
"""
import argparse
import re
import subprocess
import sys

# The C and C++ runtime, and ferry's own libraries (a tool links libferry, ferry-export and
# ferry-testkit). Nothing else: a new dependency must be added here with its reason.
ALLOWED = [
    r"libc\.so\.\d+", r"libm\.so\.\d+", r"libdl\.so\.\d+", r"libpthread\.so\.\d+", r"librt\.so\.\d+",
    r"libstdc\+\+\.so\.\d+", r"libgcc_s\.so\.\d+", r"ld-linux-x86-64\.so\.\d+", r"ld-linux-aarch64\.so\.\d+",
    r"libferry\.so\.\d+", r"libferry-export\.so\.\d+", r"libferry-testkit\.so\.\d+",
]
# Named in the message, so a failure says which vendor came back.
VENDOR = re.compile(r"cuda|cudart|nvrtc|nvidia|amdhip|hsa|roc|amd_comgr|vulkan", re.IGNORECASE)


def needed(readelf, binary):
    out = subprocess.run([readelf, "-d", "-W", binary], check=True, capture_output=True, text=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--readelf", default="readelf")
    parser.add_argument("binaries", nargs="+")
    args = parser.parse_args()
    failures = []
    for binary in args.binaries:
        entries = needed(args.readelf, binary)
        print(f"{binary}: NEEDED {', '.join(entries) or '(none)'}")
        for entry in entries:
            if any(re.fullmatch(a, entry) for a in ALLOWED):
                continue
            why = "a vendor runtime, which ferry must open at run time" if VENDOR.search(entry) else "not in the allowlist"
            failures.append(f"{binary}: NEEDED {entry}: {why}")
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
