#!/usr/bin/env bash
# One GPU call that validates a tree whose CUDA backend and Python layer both changed, most
# valuable steps first, each bounded, within FERRY_FINAL_DEADLINE seconds (default 320):
# build (everything but HIP), the CUDA conformance suite, the Python suite on CUDA (TorchRec
# from .whl/ with stand-ins where it does not import), the pair suites, first launch, the
# portable suite, lab/python/copy_probe.py and a pipeline study whose copy call is profiled.
#   bash lab/gpu-final.sh OUTDIR
set -u
out=${1:?usage: gpu-final.sh OUTDIR}
mkdir -p "$out"
deadline=$((SECONDS + ${FERRY_FINAL_DEADLINE:-320}))
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
export PYTHONUNBUFFERED=1
step() {  # step NAME LIMIT COMMAND...
  local name=$1 limit=$2 left=$((deadline - SECONDS))
  shift 2
  if [ "$left" -le 5 ]; then echo "step $name: not run (deadline)"; return 1; fi
  [ "$limit" -le "$left" ] || limit=$left
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "step $name: rc $rc, $((SECONDS - t0)) s"
  [ "$rc" = 0 ] || tail -n 30 "$out/$name.log"
  return $rc
}
b=build-gpu
[ -f $b/build.ninja ] || step setup 60 meson setup $b -Dhip=disabled -Dpython=enabled -Dtorch_native=enabled
step build 200 ninja -C $b -j16 || exit 1
step test-cuda 90 meson test -C $b --no-rebuild --print-errorlogs --suite conformance-cuda
grep -E "^(Ok|Fail|Skipped):" "$out/test-cuda.log"
pp=$b/python
if ! python3 -c 'import torchrec' >/dev/null 2>&1 && ls .whl/torchrec-*.whl >/dev/null 2>&1; then
  mkdir -p $b/torchrec-wheel && python3 -m zipfile -e .whl/torchrec-*.whl $b/torchrec-wheel
  pp="$pp:$b/torchrec-wheel"
  export FERRY_TORCHREC_STANDINS=1
fi
step python 150 env PYTHONPATH="$pp" FERRY_REQUIRE_TORCHREC=1 python3 -m pytest -q -rfs -p no:cacheprovider tests/python
grep -E "passed|failed|^FAILED|^ERROR" "$out/python.log" | tail -n 12
for p in vulkan_cuda cuda_vulkan; do
  step "test-$p" 60 env VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation "$b/tests/conformance-$p"
  grep -E "test cases:|assertions:" "$out/test-$p.log" | tail -n 2
done
step first-launch 30 $b/tests/conformance-cuda '--test-case=first launch:*'
step portable 30 meson test -C $b --no-rebuild --print-errorlogs --suite portable
step probe 30 env PYTHONPATH="$pp" python3 lab/python/copy_probe.py
cat "$out/probe.log"
step pipeline 60 env PYTHONPATH="$pp" python3 tools/python/pipeline_study.py --batch-mib 1024 --leaves 26 --profile-copy
grep -vE "^W[0-9]|warn|^\[pipeline_study\] (making|shipped|inplace|ferry)$" "$out/pipeline.log" | tail -n 40
