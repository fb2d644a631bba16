#!/usr/bin/env bash
# Build ferry and run every test (unit, standalone headers, conformance per backend).
#   bash tools/test.sh [meson setup options...]     e.g. -Dcuda=disabled
#   bash tools/test.sh --under-load [meson setup options...]
# A backend without a device reports its conformance test as SKIP with the reason.
# FERRY_BUILD_DIR picks the build directory (default: build).
#
# --under-load: build as above, then run only the suites whose cases race threads against the
# device, conformance-vulkan (lavapipe under the validation layers) and conformance-host-latency,
# while every core is kept busy by a loop this script starts and stops itself (each loop also
# ends on its own after FERRY_LOAD_MAX_S seconds, default 3600). A case that passes only on an
# idle machine fails here. tools/repeat-case.sh --under-load repeats one case the same way.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

under_load=0
if [ "${1:-}" = --under-load ]; then
  under_load=1
  shift
fi

source tools/deps.sh
ferry_install_deps

build=${FERRY_BUILD_DIR:-build}
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "$@"
elif [ $# -gt 0 ]; then
  meson configure "$build" "$@"
fi
ninja -C "$build"
if [ "$under_load" = 0 ]; then
  meson test -C "$build" --print-errorlogs
  exit
fi

source tools/cpu-load.sh  # start_load, stop_load

suites=(conformance-vulkan conformance-host-latency)
listed=$(meson test -C "$build" --list --no-rebuild 2>/dev/null)
for s in "${suites[@]}"; do
  if ! grep -qE "(^|[:+])$s([+ ]|$)" <<<"$listed"; then
    echo "test.sh: suite $s is not in $build (its backend is not built): not run under load"
  fi
done
start_load test.sh
meson test -C "$build" --print-errorlogs --no-rebuild "${suites[@]/#/--suite=}"
