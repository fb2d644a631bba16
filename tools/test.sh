#!/usr/bin/env bash
# Build ferry and run every test (unit, standalone headers, conformance per backend).
#   bash tools/test.sh [meson setup options...]     e.g. -Dcuda=disabled
# A backend without a device reports its conformance test as SKIP with the reason.
# FERRY_BUILD_DIR picks the build directory (default: build).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
source tools/deps.sh
ferry_install_deps

build=${FERRY_BUILD_DIR:-build}
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "$@"
elif [ $# -gt 0 ]; then
  meson configure "$build" "$@"
fi
ninja -C "$build"
meson test -C "$build" --print-errorlogs
