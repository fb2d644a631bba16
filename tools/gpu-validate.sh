#!/usr/bin/env bash
# Everything ferry checks on a GPU machine (used on the H200; see docs/benchmarks.md): build,
# the CUDA and Vulkan conformance suites (Vulkan under the validation layers with
# synchronization validation), ferry-bench on CUDA and Vulkan, and compute-sanitizer over the
# CUDA suite. Logs and results go to OUTDIR.
#   bash tools/gpu-validate.sh OUTDIR [STEP...]
# STEPs: build test-cuda test-vulkan test-pair bench-cuda bench-vulkan bench-pair memcheck
# racecheck synccheck initcheck (default: all, in that order), and on request probe-cuda,
# probe-front-end, probe-staging and probe-handoff (lab/probe experiments, built only with
# -Dprobes=true: these steps turn the option on in the build directory and build them
# first), memcheck-pair
# (memcheck over the vulkan_cuda suite), first-launch (the first-launch case in a process of
# its own per GPU backend), repeat (the executor-reuse ordering case 50 times on vulkan_cuda,
# a process each: tools/repeat-case.sh), python (the pytest suite on the GPU build: needs
# -Dpython), python-memcheck (the torch-on-CUDA tests under compute-sanitizer memcheck) and
# seed-pinned (lab/python/seed_study.py --quick with pinned sources), asan-cuda (the CUDA
# suite built with AddressSanitizer and UBSan in build-asan-gpu), and trace (ferry-bench
# --trace-steps at 64M on CUDA and Vulkan: where each workload's step time goes, beside the raw
# Vulkan loop's).
# FERRY_GPU_DEADLINE (seconds, default 570) bounds the whole run; each step gets its own limit
# within it, so one slow step cannot eat the rest.
# FERRY_BENCH_SIZES (default 64M,512M) sets the benchmark sizes.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out=${1:?usage: gpu-validate.sh OUTDIR [STEP...]}
shift
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(build test-cuda test-vulkan test-pair bench-cuda bench-vulkan bench-pair memcheck racecheck synccheck initcheck)
deadline=$((SECONDS + ${FERRY_GPU_DEADLINE:-570}))
sizes=${FERRY_BENCH_SIZES:-64M,512M}
build=build-gpu
mkdir -p "$out"

# The probes are not part of a default build: the first probe step configures the build
# directory with -Dprobes=true (setting it up if needed) and builds, once per run.
probes_built=0
build_probes() {
  [ "$probes_built" = 0 ] || return 0
  if [ -f "$build/build.ninja" ]; then
    run_step configure-probes 60 meson configure "$build" -Dprobes=true
  else
    run_step setup 90 meson setup "$build" -Dhip=disabled -Dprobes=true
  fi
  run_step build-probes 240 ninja -C "$build"
  probes_built=1
}

run_step() {  # run_step NAME LIMIT_S COMMAND...
  local name=$1 limit=$2
  shift 2
  local left=$((deadline - SECONDS))
  if [ "$left" -le 5 ]; then
    echo "step $name: not run (deadline)" | tee -a "$out/steps.log"
    return
  fi
  [ "$limit" -le "$left" ] || limit=$left
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "step $name: rc=$rc ($((SECONDS - t0)) s)" | tee -a "$out/steps.log"
  tail -n 3 "$out/$name.log"
  # A failed step's failing cases and checks go into steps.log too, so the summary alone says
  # what failed when the full logs cannot be brought back.
  if [ "$rc" != 0 ]; then
    grep -E "^TEST CASE:|: ERROR: |: FATAL ERROR: |with expansion|MESSAGE:|ERROR SUMMARY|Hazard|^FAIL|Ok: |Fail: " \
      "$out/$name.log" | head -n 40 | sed 's/^/    /' >>"$out/steps.log"
  fi
}

{
  nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader
  nvcc --version | tail -n 2
  date -u
} >"$out/machine.txt" 2>&1

skip='--test-case-exclude=*larger than 1 GiB*'  # minutes under instrumentation, nothing new
# The stress case under a sanitizer: racecheck slows the host side ~20x, so the suite's 20000
# operations would outlast the case's watchdog; FERRY_STRESS_OPS overrides.
sanitizer_ops=${FERRY_STRESS_OPS:-3000}
for s in "${steps[@]}"; do
  case $s in
    build)
      [ -f "$build/build.ninja" ] || run_step setup 90 meson setup "$build" -Dhip=disabled
      run_step build 240 ninja -C "$build" ;;
    test-cuda) run_step test-cuda 150 meson test -C "$build" --suite conformance-cuda --print-errorlogs ;;
    test-vulkan) run_step test-vulkan 150 meson test -C "$build" --suite conformance-vulkan --print-errorlogs ;;
    test-pair)  # run directly: meson's log cuts long outputs, and these print the layer's notes
      for p in vulkan_cuda cuda_vulkan; do
        run_step "test-$p" 120 env VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation \
          VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT "$build/tests/conformance-$p"
      done ;;
    bench-pair)
      for p in vulkan_cuda cuda_vulkan; do
        run_step "bench-$p" 150 "$build/tools/ferry-bench" --backend $p --sizes "$sizes" --quiet --out "$out/bench-$p" --snapshot "$out/snapshot-$p"
      done ;;
    probe-cuda)
      build_probes
      run_step probe-cuda 90 "$build/lab/probe/ferry-probe-cuda" --json "$out/probe-cuda.json" ;;
    probe-front-end)
      build_probes
      run_step probe-front-end 60 "$build/lab/probe/ferry-probe-front-end" --repeat 3 ;;
    probe-staging)
      build_probes
      run_step probe-staging 60 "$build/lab/probe/ferry-probe-staging" ;;
    probe-handoff)
      build_probes
      run_step probe-handoff 60 "$build/lab/probe/ferry-probe-handoff" --rounds 500 \
        --backends cuda,vulkan,cuda_vulkan,vulkan_cuda ;;
    first-launch)
      for p in cuda vulkan_cuda cuda_vulkan; do
        run_step "first-launch-$p" 60 env VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation \
          VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT \
          "$build/tests/conformance-$p" '--test-case=first launch:*'
      done ;;
    repeat)
      run_step repeat 330 env FERRY_BUILD_DIR="$build" FERRY_REPEAT_LOGS="$out/repeat-logs" bash tools/repeat-case.sh \
        vulkan_cuda 'ordering: the executor never overwrites a block still in use' 50 ;;
    python)
      run_step python 120 env PYTHONPATH="$build/python" python3 -m pytest -q -rs -p no:cacheprovider tests/python ;;
    python-memcheck)  # the GPU tests of the Python package under memcheck (torch's kernels included)
      run_step python-memcheck 240 env PYTHONPATH="$build/python" compute-sanitizer --tool memcheck --error-exitcode 9 \
        python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_torch_cuda.py ;;
    seed-pinned)
      run_step seed-pinned 150 env PYTHONPATH="$build/python" python3 lab/python/seed_study.py --quick \
        --sources pinned --out "$out/seed-pinned" ;;
    asan-cuda)  # the CUDA suite (stress case included) under AddressSanitizer and UBSan, own build
      # The CUDA driver maps memory inside ASan's shadow gap, and its own allocations outlive
      # the process's last free: the gap stays unprotected and leak checking off.
      [ -f build-asan-gpu/build.ninja ] || run_step setup-asan 90 meson setup build-asan-gpu \
        -Db_sanitize=address,undefined -Db_lundef=false -Dhip=disabled -Dvulkan=disabled -Dtools=false -Dpython=disabled
      run_step build-asan 240 ninja -C build-asan-gpu tests/conformance-cuda
      run_step asan-cuda 240 env ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0:abort_on_error=1 \
        UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 FERRY_STRESS_OPS="$sanitizer_ops" \
        build-asan-gpu/tests/conformance-cuda "$skip" ;;
    memcheck-pair)
      run_step "$s" 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$build/tests/conformance-vulkan_cuda" "$skip" ;;
    bench-cuda) run_step bench-cuda 150 "$build/tools/ferry-bench" --backend cuda --sizes "$sizes" --quiet --out "$out/bench-cuda" --snapshot "$out/snapshot-cuda" ;;
    trace)
      for b in cuda vulkan; do
        run_step "trace-$b" 90 "$build/tools/ferry-bench" --backend $b --sizes 64M --batch-study off --host-cost off --contention off \
          --trace-steps --quiet
      done ;;
    bench-vulkan) run_step bench-vulkan 150 "$build/tools/ferry-bench" --backend vulkan --sizes "$sizes" --quiet --out "$out/bench-vulkan" --snapshot "$out/snapshot-vulkan" ;;
    memcheck)  # the out-of-memory case makes cudaMalloc fail on purpose: memcheck reports that as an error
      run_step "$s" 150 env FERRY_STRESS_OPS="$sanitizer_ops" compute-sanitizer --tool "$s" --error-exitcode 9 "$build/tests/conformance-cuda" \
        '--test-case-exclude=*larger than 1 GiB*,out of memory:*' ;;
    racecheck|synccheck)
      run_step "$s" 150 env FERRY_STRESS_OPS="$sanitizer_ops" compute-sanitizer --tool "$s" --error-exitcode 9 "$build/tests/conformance-cuda" "$skip" ;;
    initcheck)  # the slowest tool: the footprint cases (minutes under it) are left to the others
      run_step "$s" 150 compute-sanitizer --tool "$s" --error-exitcode 9 "$build/tests/conformance-cuda" \
        '--test-case-exclude=*larger than 1 GiB*,*footprint*' ;;
    *) echo "unknown step $s" >&2 ;;
  esac
done
cp "$build/meson-logs/testlog.txt" "$out/testlog.txt" 2>/dev/null
exit 0
