#!/usr/bin/env bash
# A/B of ferry-bench's bars on one backend: an earlier tree's build and this tree's, run in
# turns in one call, so both see the same host and GPU (bars such as the seed step at 64M
# move between machines by more than a change under test).
#   git archive REV | tar -x -C .prev        # here, once (.prev/ is git-ignored)
#   bash lab/ab-bench.sh OUTDIR [ROUNDS] [BENCH ARGS...]   # on the GPU machine
# Builds .prev in build-ab-prev and this tree in build-ab (ferry-bench only, no tests, no
# Python), then runs `ferry-bench --quiet BENCH ARGS` from each in turn, ROUNDS times (default
# 2; default args: --backend cuda --sizes 64M --batch-study off --no-images), and prints each
# run's step, bandwidth and host-cost bars.
set -u
out=${1:?usage: ab-bench.sh OUTDIR [ROUNDS] [BENCH ARGS...]}
n=${2:-2}
shift $(($# < 2 ? $# : 2))
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--backend cuda --sizes 64M --batch-study off --no-images)
mkdir -p "$out"
[ -d .prev ] || { echo "no .prev/: git archive REV | tar -x -C .prev first" >&2; exit 2; }
opts=(-Dvulkan=auto -Dhip=disabled -Dtests=false -Dpython=disabled)
for side in prev new; do
  src=.prev dir=build-ab-prev
  [ "$side" = new ] && src=. dir=build-ab
  [ -f "$dir/build.ninja" ] || meson setup "$dir" "$src" "${opts[@]}" >"$out/$side-setup.log" 2>&1
  ninja -C "$dir" tools/ferry-bench >"$out/$side-build.log" 2>&1 || { echo "$side build failed"; tail -20 "$out/$side-build.log"; exit 1; }
done
for i in $(seq 1 "$n"); do
  for side in prev new; do
    dir=build-ab-prev
    [ "$side" = new ] && dir=build-ab
    timeout 300 "$dir/tools/ferry-bench" --quiet "${args[@]}" >"$out/bench-$side-$i.txt" 2>&1
    echo "== round $i, $side"
    grep -E '^\[(PASS|FAIL)\].*(step time|bandwidth|of cudaMemcpyAsync|upload call)' "$out/bench-$side-$i.txt"
  done
done
