#!/usr/bin/env bash
# Long stress runs, kept out of tools/test.sh because they take minutes: the conformance stress
# case on the host backend with 1e6 operations, plain and under latency injection
# (FERRY_HOST_LATENCY_US=200), then the block allocator's randomized run with 1e6 operations
# per configuration. Meson's suite stress-long holds the same runs
# (`meson test -C build --suite stress-long`); this script also lets the environment choose:
#   FERRY_STRESS_OPS (default 1000000), FERRY_STRESS_SEED, FERRY_ALLOCATOR_OPS (default
#   1000000), FERRY_UNIT_SEED, and FERRY_BUILD_DIR (default build-stress-long).
#   bash tools/stress-long.sh [meson setup options...]    e.g. -Db_sanitize=address,undefined
# Ends with one line "stress-long: N passed, N failed"; exits non-zero if a run failed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
source tools/deps.sh
ferry_install_deps

build=${FERRY_BUILD_DIR:-build-stress-long}
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "$@"
elif [ $# -gt 0 ]; then
  meson configure "$build" "$@"
fi
ninja -C "$build" tests/conformance-host tests/unit/ferry-unit

export FERRY_STRESS_OPS=${FERRY_STRESS_OPS:-1000000}
export FERRY_ALLOCATOR_OPS=${FERRY_ALLOCATOR_OPS:-1000000}
passed=0 failed=0

run() {
  local start=$SECONDS rc=0
  echo "=== stress-long: $*"
  "$@" || rc=$?
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
    echo "=== stress-long: passed in $((SECONDS - start)) s"
  else
    failed=$((failed + 1))
    echo "=== stress-long: FAILED (exit $rc) after $((SECONDS - start)) s"
  fi
}

run "$build/tests/conformance-host" --test-case='stress:*'
run env FERRY_HOST_LATENCY_US=200 "$build/tests/conformance-host" --test-case='stress:*'
run "$build/tests/unit/ferry-unit" --test-case='randomized*'

echo "stress-long: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
