#!/usr/bin/env bash
# Run one conformance test case N times on one backend and print how many runs passed.
#   bash tools/repeat-case.sh [--under-load] BACKEND 'CASE NAME' [N]        (N defaults to 50)
# e.g. on the H200, after `source .deps/bootstrap.sh`:
#   bash tools/repeat-case.sh vulkan_cuda 'ordering: the executor never overwrites a block still in use' 50
# --under-load: every run while every core is kept busy by a loop the script starts after the
# build and stops when it exits (each loop also ends on its own after FERRY_LOAD_MAX_S seconds,
# default 3600), as tools/test.sh --under-load runs its suites.
# BACKEND names the executable conformance-BACKEND in the build (FERRY_BUILD_DIR, default
# build; it is built first). The case is chosen with doctest's --test-case filter (the exact
# name; doctest wildcards * and ? work, commas separate alternatives). Each run gets the
# environment `meson test` gives that suite (the Vulkan validation layer with synchronization
# validation for vulkan and the pairs). A run passes when the executable exits 0 and doctest
# reports at least one case run and none failed; a run that selects no case, or is skipped
# (exit 77: no device), stops the script. Logs of failing runs are kept in
# FERRY_REPEAT_LOGS (default: a temporary directory, printed).
# Prints "k/N passed" last; exits 0 when every run passed, 1 otherwise.
set -euo pipefail
under_load=0
if [ "${1:-}" = --under-load ]; then
  under_load=1
  shift
fi
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
backend=$1
case_name=$2
runs=${3:-50}
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
  echo "repeat-case: N must be a positive integer, got '$runs'" >&2
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${FERRY_BUILD_DIR:-build}
exe="$build/tests/conformance-$backend"
if [ ! -f "$build/build.ninja" ]; then
  echo "repeat-case: $build is not a configured build directory (meson setup $build)" >&2
  exit 2
fi
ninja -C "$build" "tests/conformance-$backend" >/dev/null
if [ ! -x "$exe" ]; then
  echo "repeat-case: $exe was not built (is the $backend backend enabled?)" >&2
  exit 2
fi
case "$backend" in
  vulkan|vulkan_cuda|cuda_vulkan)
    export VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation
    export VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT
    ;;
esac
logs=${FERRY_REPEAT_LOGS:-$(mktemp -d /tmp/ferry-repeat.XXXXXX)}
mkdir -p "$logs"

source tools/cpu-load.sh  # start_load, stop_load
if [ "$under_load" = 1 ]; then
  start_load repeat-case
fi
passed=0
for ((i = 1; i <= runs; i++)); do
  log="$logs/run-$i.log"
  set +e
  "$exe" "--test-case=$case_name" >"$log" 2>&1
  rc=$?
  set -e
  summary=$(grep -E '^\[doctest\] test cases:' "$log" | tail -1 || true)
  ran=$(sed -E 's/.*test cases: *([0-9]+).*/\1/' <<<"$summary")
  failed=$(sed -E 's/.*\| *([0-9]+) failed.*/\1/' <<<"$summary")
  if [ "$rc" -eq 77 ]; then
    echo "repeat-case: run $i skipped (exit 77): $(tail -1 "$log")" >&2
    exit 77
  fi
  if [ -z "$summary" ] && [ "$rc" -eq 0 ]; then
    echo "repeat-case: run $i printed no doctest summary (see $log)" >&2
    exit 1
  fi
  if [ "${ran:-0}" = 0 ]; then
    echo "repeat-case: no test case matches '$case_name' in $exe (list them: $exe --list-test-cases)" >&2
    exit 1
  fi
  if [ "$rc" -eq 0 ] && [ "$failed" = 0 ]; then
    passed=$((passed + 1))
    rm -f "$log"
    echo "run $i/$runs: pass"
  else
    echo "run $i/$runs: FAIL (exit $rc; log $log)"
  fi
done
echo "$case_name on conformance-$backend: $passed/$runs passed$([ "$under_load" = 1 ] && echo " under load")"
[ "$passed" -eq "$runs" ]
