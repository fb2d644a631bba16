#!/usr/bin/env bash
# One GPU call that runs the named steps in the order given, each bounded, within
# FERRY_DEADLINE seconds (default 540): the device time of a session is short, so a call does
# the most valuable steps first and reports each as it ends. The build (everything but HIP,
# plus FERRY_GPU_OPTS; `.prev/` and `.prev2/`, earlier trees from `git archive REV`, beside it
# for the A/B steps) and the wheel build run first.
#   bash lab/gpu-run.sh OUTDIR STEP...      (carry .deps, .whl, .prev, .prev2)
# Steps:
#   test-cuda test-vulkan pairs    the conformance suites (Vulkan ones under the validation layers)
#   test-vulkan-prio               conformance-vulkan's priority cases alone, under the validation layers
#   sanitizer sanitizer-prio       compute-sanitizer memcheck over the CUDA upload / priority cases
#   python wheel                   the Python suite on CUDA; the wheel's suite in a fresh venv
#   contention contention-vk       ferry-bench's contention section and its bars
#   contention-vk-ab               Vulkan's: the urgent queue in the transfer family, the compute family, and
#                                  the transfer family with concurrent sharing
#   bench                          ferry-bench's other bars on CUDA at 64M
#   pipes stash footprint          the pipeline and stash studies; the pipeline footprint test
#   mut-views mut-owner mut-smcopy a test on a tree broken on purpose, which must fail
#   ab hostcost pipes-ab           this tree beside .prev (and .prev2): host costs, pipelines
#   api-pipe                       the CUDA API calls of a pipeline run under Nsight Systems
#   phases                         where the glue's copy call spends its host time (a probe patch)
set -u
out=${1:?usage: gpu-run.sh OUTDIR STEP...}
shift
mkdir -p "$out"
deadline=$((SECONDS + ${FERRY_DEADLINE:-540}))
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
export PYTHONUNBUFFERED=1
. "$(dirname "${BASH_SOURCE[0]}")/gpu-lib.sh"  # step, build_tree, python_path
wheel_build() {
  python3 -m pip install -q --no-deps --no-index .whl/meson_python-*.whl .whl/pyproject_metadata-*.whl &&
    python3 -m pip wheel . --no-build-isolation --no-deps -w "$1"
}
export -f wheel_build
want() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }
STEPS=" $* "
step build 300 bash -c 'build_tree "$@"' _ . build-gpu -Dhip=disabled -Dpython=enabled -Dtorch_native=enabled -Dprobes=false \
  ${FERRY_GPU_OPTS:-} &
built=$!
for p in prev prev2; do
  if [ -d ".$p" ] && { want ab || want pipes-ab; }; then
    step "build-$p" 300 nice -n 10 bash -c 'build_tree "$@"' _ ".$p" "build-$p" -Dhip=disabled -Dpython=enabled \
      -Dtorch_native=enabled -Dtests=false -Dvulkan=disabled -Dprobes=false &
  elif [ -d ".$p" ] && want hostcost; then  # ferry-bench alone
    step "build-$p" 300 bash -c 'build_tree "$@"' _ ".$p" "build-$p" -Dhip=disabled -Dpython=disabled \
      -Dtorch_native=disabled -Dtests=false -Dvulkan=disabled &
  fi
done
if want wheel; then
  step wheel-build 240 nice -n 5 bash -c 'wheel_build "$@"' _ build-wheel >"$out/wheel-build.txt" 2>&1 &
fi
wait $built || exit 1
python_path build-gpu
export pp out
pipe_mut() {  # pipe_mut NAME SED: the footprint test on a mutated _pipeline.py of the build tree
  local f=build-gpu/python/ferry/torch/_pipeline.py
  cp "$f" /tmp/_pipeline.py.orig && sed -i "$2" "$f" && ! cmp -s "$f" /tmp/_pipeline.py.orig || { echo "mutation $1 did not apply"; return 3; }
  PYTHONPATH="$pp" python3 -m pytest -q -p no:cacheprovider tests/python/test_torchrec.py -k footprint
  local rc=$?
  cp /tmp/_pipeline.py.orig "$f"
  return $rc
}
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
smmut() {
  cp backends/cuda/vendor/cuda.hpp /tmp/cuda.hpp.orig &&
    sed -i 's/const bool wide = ((dst | src | bytes) \& 15u) == 0;/const bool wide = ((dst | src) \& 15u) == 0;/' \
      backends/cuda/vendor/cuda.hpp && ! cmp -s backends/cuda/vendor/cuda.hpp /tmp/cuda.hpp.orig &&
    ninja -C build-gpu tests/conformance-cuda >/dev/null; cp /tmp/cuda.hpp.orig backends/cuda/vendor/cuda.hpp
  build-gpu/tests/conformance-cuda -tc='priority: urgent uploads of every size*'
  local rc=$?
  ninja -C build-gpu tests/conformance-cuda >/dev/null
  return $rc
}
phases() {  # the glue's phases (lab/probe/glue-phases.patch) and the Python side's profile, ferry way only
  local so=python/ferry/_ferry.cpython-312-x86_64-linux-gnu.so
  patch -p1 <lab/probe/glue-phases.patch && ninja -C build-gpu "$so" >/dev/null
  patch -R -p1 <lab/probe/glue-phases.patch
  PYTHONPATH="$pp" python3 tools/python/pipeline_study.py --batch-mib 1024 --leaves 500 --source pinned \
    --ways shipped,ferry --profile-copy
  local rc=$?
  echo "[glue-phases] the same leaves on an idle GPU and beside a busy stream:"
  PYTHONPATH="$pp" timeout 60 python3 lab/python/copy_probe.py --leaves 500 --mib 2 --reps 8
  ninja -C build-gpu "$so" >/dev/null
  return $rc
}
export -f pipe_mut vmut smmut phases
for s in "$@"; do
  case $s in
  test-cuda) step test-cuda 150 meson test -C build-gpu --no-rebuild --print-errorlogs --suite conformance-cuda ;;
  python)
    step python 240 env PYTHONPATH="$pp" FERRY_REQUIRE_TORCHREC=1 python3 -X faulthandler -m pytest \
      -q -rfEs -p no:cacheprovider tests/python ${FERRY_DESELECT:-}
    grep -E "passed|failed|^FAILED|^ERROR|Fatal|line [0-9]+ in test" "$out/python.log" | tail -n 12 ;;
  wheel)
    wait
    w=$(ls build-wheel/ferry-*.whl 2>/dev/null | head -n 1)
    if [ -n "$w" ]; then step wheel 200 env FERRY_WHEEL="$w" bash tools/wheel.sh build-wheel; tail -n 8 "$out/wheel.log"
    else echo "no wheel"; tail -n 20 "$out/wheel-build.txt"; fi ;;
  contention)
    step contention 100 build-gpu/tools/ferry-bench --backend cuda --contention-only --out "$out/contention-cuda"
    grep -E '^\[(PASS|FAIL)\]' "$out/contention.log" ;;
  contention-vk)
    step contention-vk 120 build-gpu/tools/ferry-bench --backend vulkan --contention-only --out "$out/contention-vk"
    grep -E '^\[(PASS|FAIL)\]' "$out/contention-vk.log" ;;
  contention-vk-ab)  # the same, the urgent queue in the transfer family (the default), in the compute family,
    # and in the transfer family with concurrent sharing (no queue-family ownership transfers)
    for fam in transfer compute concurrent; do
      sharing=exclusive; [ "$fam" = concurrent ] && sharing=concurrent
      step "contention-vk-$fam" 120 env FERRY_VULKAN_URGENT_FAMILY=${fam/concurrent/transfer} \
        FERRY_VULKAN_SHARING=$sharing build-gpu/tools/ferry-bench --backend vulkan \
        --contention-only --out "$out/contention-vk-$fam"
      grep -E "^\[(PASS|FAIL)\]|^  (ferry|vulkan) .*(alone|urgent) " "$out/contention-vk-$fam.log" | sed "s/^/$fam: /"
    done ;;
  mut-views) step mut-views 150 bash -c vmut; grep -E "passed|failed" "$out/mut-views.log" | tail -1 ;;
  mut-owner)
    step mut-owner 90 bash -c 'pipe_mut owner "s/move(batch, dev, current, data_copy_stream, method)/move(batch, dev, data_copy_stream, data_copy_stream, method)/"'
    grep -E "passed|failed" "$out/mut-owner.log" | tail -1 ;;
  mut-smcopy) step mut-smcopy 150 bash -c smmut; grep -E "differs|test cases" "$out/mut-smcopy.log" | head -3 ;;
  sanitizer)
    step sanitizer 120 compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/conformance-cuda \
      -tc='*upload*' -tce='*overtake*'
    grep -E "ERROR SUMMARY|test cases" "$out/sanitizer.log" | tail -2 ;;
  sanitizer-prio)  # the priority cases, overtaking included, at the small runs' sizes
    step sanitizer-prio 200 env FERRY_TEST_SMALL=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
      build-gpu/tests/conformance-cuda -tc='priority*'
    grep -E "ERROR SUMMARY|test cases" "$out/sanitizer-prio.log" | tail -2 ;;
  test-vulkan-prio)  # the priority cases alone (urgent queues), under the validation layers
    step test-vulkan-prio 100 env VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation \
      VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT build-gpu/tests/conformance-vulkan \
      -tc='priority*'
    grep -hE "test cases:" "$out/test-vulkan-prio.log" ;;
  test-vulkan)
    step test-vulkan 150 env VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation build-gpu/tests/conformance-vulkan
    grep -hE "test cases:" "$out/test-vulkan.log" ;;
  pairs)
    for p in vulkan_cuda cuda_vulkan; do
      step "test-$p" 150 env VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation "build-gpu/tests/conformance-$p"
      grep -hE "test cases:" "$out/test-$p.log"
    done ;;
  pipes)
    pipes=${FERRY_PIPES:-1024:500:pinned,3072:26:pinned}
    for c in ${pipes//,/ }; do
      set -- ${c//:/ }
      step "pipe-$1-$2-$3" 80 env PYTHONPATH="$pp" python3 tools/python/pipeline_study.py --batch-mib "$1" --leaves "$2" \
        --source "$3" --json "$out/pipe-$1-$2-$3.json"
      grep -vE "^W[0-9]|warn|^\[pipeline_study\]" "$out/pipe-$1-$2-$3.log" | tail -n 10
    done ;;
  pipes-ab)
    wait
    for side in prev2 prev gpu; do
      [ -d "build-$side/python" ] || continue
      p="build-$side/python"; [ "$side" = gpu ] && p=$pp || p="$p${pp#build-gpu/python}"
      step "pipeab-$side" 60 env PYTHONPATH="$p" python3 tools/python/pipeline_study.py --batch-mib 1024 --leaves 500 \
        --source pinned --ways shipped,ferry
      grep -E "^(shipped|ferry) " "$out/pipeab-$side.log" | sed "s/^/$side: /"
    done ;;
  hostcost)
    wait
    for r in 1 2; do for side in prev gpu; do
      [ -x "build-$side/tools/ferry-bench" ] || continue
      step "hostcost-$side-$r" 40 "build-$side/tools/ferry-bench" --quiet --backend cuda --host-cost-only
      grep -E "Transfer::upload\(|upload \+ release|cudaMemcpy|64K upload call" "$out/hostcost-$side-$r.log" | sed "s/^/$side $r: /"
    done; done ;;
  bench)
    step bench 120 build-gpu/tools/ferry-bench --quiet --backend cuda --sizes 64M --batch-study off --no-images \
      --contention off
    grep -E '^\[(PASS|FAIL)\]' "$out/bench.log" ;;
  phases)
    step phases 150 bash -c phases
    grep -vE "^W[0-9]|warn" "$out/phases.log" | grep -E "glue-phases|^(shipped|ferry) |tottime|^ +[0-9]+ +[0-9.]+ +[0-9.]+|ms|us" | head -n 70 ;;
  api-pipe)  # the CUDA calls of the ferry way's steps at 1 GiB in 500 leaves: counts and host time
    if command -v nsys >/dev/null; then
      step api-pipe 150 env PYTHONPATH="$pp" nsys profile -t cuda,osrt -o "$out/pipe" --force-overwrite true \
        python3 tools/python/pipeline_study.py --batch-mib 1024 --leaves 500 --source pinned --ways shipped,ferry \
        --steps 6 --warmup 2
      nsys stats --report cuda_api_sum --format csv "$out/pipe.nsys-rep" >"$out/api-pipe.csv" 2>&1
      head -n 25 "$out/api-pipe.csv"
    else
      echo "api-pipe: no nsys on this machine"
    fi ;;
  footprint)
    step footprint 120 env PYTHONPATH="$pp" python3 -m pytest -q -p no:cacheprovider tests/python/test_torchrec.py -k footprint
    tail -n 3 "$out/footprint.log" ;;
  stash)
    step stash 90 env PYTHONPATH=build-gpu/python python3 lab/python/stash_study.py --workloads mixed,reuse \
      --json "$out/stash.json"
    tail -n 15 "$out/stash.log" ;;
  ab)
    wait
    for r in 1 2; do for side in prev gpu; do
      [ -x "build-$side/tools/ferry-bench" ] || continue
      step "hostcost-$side-$r" 40 "build-$side/tools/ferry-bench" --quiet --backend cuda --host-cost-only
      grep -iE "host|µs|us" "$out/hostcost-$side-$r.log" | tail -4 | sed "s/^/$side: /"
      step "cost-$side-$r" 60 env PYTHONPATH="build-$side/python" python3 lab/python/call_cost.py --pinned --big 64M \
        --leaves 1,67 --calls 2000
      sed "s/^/$side: /" "$out/cost-$side-$r.log"
    done; done ;;
  *) echo "unknown step $s" ;;
  esac
done
