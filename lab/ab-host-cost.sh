#!/usr/bin/env bash
# A/B host cost of the upload call: an earlier tree's ferry-bench and this tree's, alternating
# in one run, so both see the same host (its speed varies between calls on the GPU machine).
#   git archive REV | tar -x -C .prev        # here, once (.prev/ is git-ignored locally:
#                                            #  echo /.prev/ >> .git/info/exclude)
#   bash lab/ab-host-cost.sh OUTDIR [ROUNDS]   # on the GPU machine, after gpu-validate.sh build
# Builds .prev in build-prev (CUDA only, no tests), then runs `ferry-bench --backend cuda
# --host-cost-only` from build-prev and build-gpu in turn, ROUNDS times (default 4), and prints
# each round's upload median beside the raw CUDA ordered sequence of the same run.
set -u
out=${1:?usage: ab-host-cost.sh OUTDIR [ROUNDS]}
n=${2:-4}
mkdir -p "$out"
[ -d .prev ] || { echo "no .prev/: git archive REV | tar -x -C .prev first" >&2; exit 2; }
[ -f build-prev/build.ninja ] || meson setup build-prev .prev -Dvulkan=disabled -Dhip=disabled -Dtests=false >"$out/prev-setup.log" 2>&1
ninja -C build-prev tools/ferry-bench >"$out/prev-build.log" 2>&1 || { echo "prev build failed"; tail -20 "$out/prev-build.log"; exit 1; }
field() { grep -m1 "$2" "$1" | awk -v f="$3" '{print $f}'; }
for i in $(seq 1 "$n"); do
  timeout 40 build-prev/tools/ferry-bench --backend cuda --host-cost-only --quiet >"$out/hc-prev-$i.txt" 2>&1
  timeout 40 build-gpu/tools/ferry-bench --backend cuda --host-cost-only --quiet >"$out/hc-new-$i.txt" 2>&1
  echo "round $i: prev $(field "$out/hc-prev-$i.txt" 'Transfer::upload' 3) new $(field "$out/hc-new-$i.txt" 'Transfer::upload' 3)" \
       "raw-ordered-prev $(field "$out/hc-prev-$i.txt" 'ordered both' 8) new $(field "$out/hc-new-$i.txt" 'ordered both' 8)"
done
