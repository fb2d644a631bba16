#!/usr/bin/env bash
# One GPU call that validates a tree, most valuable steps first, each bounded, within
# FERRY_FINAL_DEADLINE seconds (default 480): build (everything but HIP, with the probes) and,
# where .prev/ holds an earlier tree (git archive REV | tar -x -C .prev), that tree's Python
# package and ferry-bench beside it; the CUDA conformance suite; ferry-bench's contention
# section and the contention probes; the Python suite on CUDA (TorchRec from .whl/ with
# stand-ins where it does not import; the earlier tree's run of this tree's CUDA torch tests
# shows which of them it fails); the pipeline and stash studies; ferry-bench's bars and
# ferry.torch.to's host cost, each tree in turn; the wheel built there (meson-python from .whl/,
# no build isolation: the machine has no PyPI) and its suite; the pair and Vulkan suites.
#   bash lab/gpu-final.sh OUTDIR     (carry .deps, .whl and .prev)
# A command given to `timeout` must be a program: shell functions run through `bash -c`.
set -u
out=${1:?usage: gpu-final.sh OUTDIR}
mkdir -p "$out"
deadline=$((SECONDS + ${FERRY_FINAL_DEADLINE:-480}))
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
export PYTHONUNBUFFERED=1
step() {  # step NAME LIMIT COMMAND...: the command's output in OUTDIR/NAME.log
  local name=$1 limit=$2 left=$((deadline - SECONDS))
  shift 2
  if [ "$left" -le 5 ]; then echo "step $name: not run (deadline)"; return 1; fi
  [ "$limit" -le "$left" ] || limit=$left
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "step $name: rc $rc, $((SECONDS - t0)) s"
  [ "$rc" = 0 ] || tail -n 25 "$out/$name.log"
  return $rc
}
build_tree() {  # build_tree DIR [SRC] MESON_OPTIONS...: configure once, then build
  local dir=$1
  shift
  { [ -f "$dir/build.ninja" ] || meson setup "$dir" "$@"; } && ninja -C "$dir" -j12
}
wheel_build() {  # wheel_build OUTDIR
  python3 -m pip install -q --no-deps --no-index .whl/meson_python-*.whl .whl/pyproject_metadata-*.whl &&
    python3 -m pip wheel . --no-build-isolation --no-deps -w "$1"
}
export -f build_tree wheel_build
sides=gpu
step build 300 bash -c 'build_tree "$@"' _ build-gpu -Dhip=disabled -Dpython=enabled -Dtorch_native=enabled \
  -Dprobes=$([ -n "${FERRY_SKIP_PROBES:-}" ] && echo false || echo true) &
built=$!
if [ -d .prev ]; then
  sides="prev gpu"
  step build-prev 300 nice -n 10 bash -c 'build_tree "$@"' _ build-prev .prev -Dhip=disabled -Dpython=enabled \
    -Dtorch_native=enabled -Dtests=false -Dvulkan=disabled &
  wait $!
fi
wait $built || exit 1
pp=build-gpu/python
if ! python3 -c 'import torchrec' >/dev/null 2>&1 && ls .whl/torchrec-*.whl >/dev/null 2>&1; then
  mkdir -p build-gpu/torchrec-wheel && python3 -m zipfile -e .whl/torchrec-*.whl build-gpu/torchrec-wheel
  pp="$pp:build-gpu/torchrec-wheel"
  export FERRY_TORCHREC_STANDINS=1
fi
[ -z "${FERRY_SKIP_WHEEL:-}" ] && ls .whl/meson_python-*.whl >/dev/null 2>&1 && step wheel-build 240 bash -c 'wheel_build "$@"' _ build-wheel \
  >"$out/wheel-build.txt" 2>&1 &
wheel=$!
step test-cuda 150 meson test -C build-gpu --no-rebuild --print-errorlogs --suite conformance-cuda
step bench-contention 100 build-gpu/tools/ferry-bench --backend cuda --contention-only --out "$out/contention-bench"
grep -E '^\[(PASS|FAIL)\]' "$out/bench-contention.log"
[ -n "${FERRY_SKIP_PROBES:-}" ] || for kib in 8192 32768; do  # what a given piece buys on a backend that cuts nothing by default
  step "bench-contention-$kib" 60 build-gpu/tools/ferry-bench --backend cuda --contention-only --contention-piece-kib "$kib" \
    --contention-reps 1
  grep -E '^\[(PASS|FAIL)\]' "$out/bench-contention-$kib.log"
done
if [ -z "${FERRY_SKIP_PROBES:-}" ]; then
  step probe 90 build-gpu/lab/probe/ferry-probe-contention --json "$out/contention.json"
  tail -n 35 "$out/probe.log"
fi
step python 240 env PYTHONPATH="$pp" FERRY_REQUIRE_TORCHREC=1 python3 -X faulthandler -m pytest \
  -q -rfEs -p no:cacheprovider tests/python ${FERRY_DESELECT:-}
grep -E "passed|failed|^FAILED|^ERROR|Fatal|line [0-9]+ in test" "$out/python.log" | tail -n 12
step bench-contention-vk 100 build-gpu/tools/ferry-bench --backend vulkan --contention-only --out "$out/contention-vk"
grep -E '^\[(PASS|FAIL)\]' "$out/bench-contention-vk.log"
[ -d build-prev ] && step prev-torch-cuda 90 env PYTHONPATH=build-prev/python python3 -m pytest -q -p no:cacheprovider \
  tests/python/test_torch_cuda.py && true
pipes=${FERRY_PIPES:-1024:500:pinned,3072:26:pinned,1024:26:pinned}  # MiB:leaves:source, comma-separated
for c in ${pipes//,/ }; do
  set -- ${c//:/ }
  step "pipe-$1-$2-$3" 80 env PYTHONPATH="$pp" python3 tools/python/pipeline_study.py --batch-mib "$1" --leaves "$2" \
    --source "$3" --json "$out/pipe-$1-$2-$3.json"
  grep -vE "^W[0-9]|warn|^\[pipeline_study\]" "$out/pipe-$1-$2-$3.log" | tail -n 10
done
step stash 90 env PYTHONPATH=build-gpu/python python3 lab/python/stash_study.py --workloads mixed,reuse \
  --json "$out/stash.json"
tail -n 15 "$out/stash.log"
# The footprint test must fail when ferry's in-place copy is broken: destinations of the memcpy
# stream (stranded there, as the shipped way strands them).
pipe_mut() {  # pipe_mut NAME SED: the test on a mutated copy of the build tree's _pipeline.py
  local f=build-gpu/python/ferry/torch/_pipeline.py
  cp "$f" /tmp/_pipeline.py.orig && sed -i "$2" "$f" && ! cmp -s "$f" /tmp/_pipeline.py.orig || { echo "mutation $1 did not apply"; return 3; }
  PYTHONPATH="$pp" python3 -m pytest -q -p no:cacheprovider tests/python/test_torchrec.py -k footprint
  local rc=$?
  cp /tmp/_pipeline.py.orig "$f"
  return $rc
}
export -f pipe_mut
export pp
step mutation-memcpy-owner 90 bash -c 'pipe_mut owner "s/move(batch, dev, current, data_copy_stream, method)/move(batch, dev, data_copy_stream, data_copy_stream, method)/"'
# The views test must fail when the restore gives the passed tensors a new storage instead of
# memory to the old one (whatever else held the storage then keeps an empty one).
vmut() {
  patch -p1 <lab/mutations/stash-views-restore.patch &&
    ninja -C build-gpu python/ferry/_torch_native.cpython-312-x86_64-linux-gnu.so >/dev/null
  patch -R -p1 <lab/mutations/stash-views-restore.patch
  PYTHONPATH=build-gpu/python python3 -m pytest -q -p no:cacheprovider tests/python/test_torch_cuda.py \
    -k "holders_that_were_not_passed or identity_views"
  local rc=$?
  ninja -C build-gpu python/ferry/_torch_native.cpython-312-x86_64-linux-gnu.so >/dev/null
  return $rc
}
export -f vmut
step mutation-views 150 bash -c vmut
grep -E "passed|failed" "$out/mutation-views.log" | tail -1
for side in $sides; do
  # The contention section has its own step above; a tree from before it has no such option.
  skip=()
  "build-$side/tools/ferry-bench" --help 2>&1 | grep -q -- --contention && skip=(--contention off)
  step "bench-$side" 100 "build-$side/tools/ferry-bench" --quiet --backend cuda --sizes 64M --batch-study off --no-images \
    "${skip[@]}"
  grep -E '^\[(PASS|FAIL)\]' "$out/bench-$side.log" | sed "s/^/$side: /"
  step "cost-$side" 60 env PYTHONPATH="build-$side/python" python3 lab/python/call_cost.py --pinned --big 64M \
    --leaves 1,67 --calls 2000
  sed "s/^/$side: /" "$out/cost-$side.log"
done
wait $wheel 2>/dev/null
w=$(ls build-wheel/ferry-*.whl 2>/dev/null | head -n 1)
[ -n "$w" ] && step wheel 150 env FERRY_WHEEL="$w" bash tools/wheel.sh build-wheel && true
tail -n 8 "$out/wheel.log" 2>/dev/null
step sanitizer-cuda 100 compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/conformance-cuda \
  -tc='priority*,*upload*'
grep -E "ERROR SUMMARY|test cases" "$out/sanitizer-cuda.log" | tail -2
[ -n "${FERRY_SKIP_PROBES:-}" ] || step probe-vk 60 build-gpu/lab/probe/ferry-probe-contention-vk
for p in vulkan_cuda cuda_vulkan; do
  step "test-$p" 150 env VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation "build-gpu/tests/conformance-$p"
done
step test-vulkan 150 env VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation build-gpu/tests/conformance-vulkan
step portable 30 meson test -C build-gpu --no-rebuild --print-errorlogs --suite portable
grep -hE "test cases:|assertions:" "$out"/test-*.log
# The SM copy's case must fail on a broken kernel choice: 16-byte words for a size that is no
# multiple of 16 drops the tail. The tree is put back; the build stays broken (last step).
mut() {
  cp backends/cuda/vendor/cuda.hpp /tmp/cuda.hpp.orig &&
    sed -i 's/const bool wide = ((dst | src | bytes) \& 15u) == 0;/const bool wide = ((dst | src) \& 15u) == 0;/' \
      backends/cuda/vendor/cuda.hpp && ! cmp -s backends/cuda/vendor/cuda.hpp /tmp/cuda.hpp.orig &&
    ninja -C build-gpu tests/conformance-cuda >/dev/null; cp /tmp/cuda.hpp.orig backends/cuda/vendor/cuda.hpp
  build-gpu/tests/conformance-cuda -tc='priority: urgent uploads of every size*'
}
export -f mut
step mutation-smcopy 120 bash -c mut
grep -E "differs|test cases" "$out/mutation-smcopy.log" | head -3
