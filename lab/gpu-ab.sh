#!/usr/bin/env bash
# A/B of this tree against an earlier one on one GPU machine, in phases that each fit one
# device call (the build directories survive between calls while the machine stays warm):
#   git archive REV | tar -x -C .prev        # here, once (.prev/ is git-ignored; carry it)
#   bash lab/gpu-ab.sh OUTDIR build test     # build both; this tree's GPU suites
#   bash lab/gpu-ab.sh OUTDIR ab             # the figures, each way in turns
# build: this tree in build-gpu (everything but HIP) and .prev in build-prev (the Python
#   package and ferry-bench), in parallel.
# test: this tree's CUDA, Vulkan (validation layers, synchronization validation) and pair
#   conformance suites and the Python suite with its CUDA cases.
# ab: ferry-bench's bars on CUDA at 64M, ferry.torch.to's host time (lab/python/call_cost.py)
#   and the seed study's quick run, earlier tree then this tree, ROUNDS times (default 2);
#   with `glues`, the earlier tree's `to` through each of its glues beside Tensor.to.
# studies: this tree's Python package alone: tools/python/pipeline_study.py over the configs of
#   FERRY_PIPELINE_CONFIGS ("MIB LEAVES pinned|pageable base|sparse_dist [STUDY ARGS];...") and
#   lab/python/stash_study.py --trace; torchrec from .whl/ with stand-ins where it does not import.
# FERRY_AB_DEADLINE (seconds, default 560) bounds a call; each step's log is in OUTDIR.
set -u
out=${1:?usage: gpu-ab.sh OUTDIR PHASE...}
shift
deadline=$((SECONDS + ${FERRY_AB_DEADLINE:-560}))
rounds=${FERRY_AB_ROUNDS:-2}
mkdir -p "$out"
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
export PYTHONUNBUFFERED=1

. "$(dirname "${BASH_SOURCE[0]}")/gpu-lib.sh"  # step, build_tree, python_path
export FERRY_BUILD_JOBS=${FERRY_BUILD_JOBS:-8}  # two trees build at once

for phase in "$@"; do
  case $phase in
    build)
      [ -d .prev ] || { echo "no .prev/: git archive REV | tar -x -C .prev first" >&2; exit 2; }
      step build-new 420 bash -c 'build_tree "$@"' _ . build-gpu -Dhip=disabled -Dpython=enabled -Dtorch_native=enabled &
      step build-prev 420 bash -c 'build_tree "$@"' _ .prev build-prev -Dhip=disabled -Dpython=enabled -Dtorch_native=enabled \
        -Dtests=false -Dvulkan=disabled &
      wait
      ;;
    test)
      step test-cuda 150 meson test -C build-gpu --no-rebuild --print-errorlogs --suite conformance-cuda
      step test-vulkan 150 meson test -C build-gpu --no-rebuild --print-errorlogs --suite conformance-vulkan
      for p in vulkan_cuda cuda_vulkan; do
        step "test-$p" 120 env VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation \
          VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT "build-gpu/tests/conformance-$p"
      done
      step python 200 env PYTHONPATH=build-gpu/python python3 -m pytest -q -rs -p no:cacheprovider tests/python
      grep -hE "^(Ok|Fail|Skipped):|passed|failed" "$out"/test-*.log "$out"/python.log | sort | uniq -c
      ;;
    ab)
      for i in $(seq 1 "$rounds"); do
        for side in prev new; do
          dir=build-gpu
          [ "$side" = prev ] && dir=build-prev
          step "bench-$side-$i" 120 "$dir/tools/ferry-bench" --quiet --backend cuda --sizes 64M --batch-study off \
            --no-images
          grep -E '^\[(PASS|FAIL)\]' "$out/bench-$side-$i.log" | sed "s/^/$side $i: /" | head -40
          step "cost-$side-$i" 90 env PYTHONPATH="$dir/python" python3 lab/python/call_cost.py --pinned --big 64M \
            --leaves 1,67 --calls 2000
          sed "s/^/$side $i: /" "$out/cost-$side-$i.log"
        done
      done
      for side in prev new; do
        dir=build-gpu script=lab/python/seed_study.py
        [ "$side" = prev ] && dir=build-prev script=.prev/tools/python/seed_study.py
        step "seed-$side" 150 env PYTHONPATH="$dir/python" python3 "$script" --quick --snapshot-steps 0 \
          --out "$out/seed-$side"
        grep -E "ferry_torch|FAIL" "$out/seed-$side.log" | sed "s/^/$side: /" | head -40
      done
      ;;
    cost)  # the host-time A/B alone, on builds of the Python package only
      step build-new 300 bash -c 'build_tree "$@"' _ . build-py -Dhip=disabled -Dvulkan=disabled -Dtests=false \
        -Dpython=enabled -Dtorch_native=enabled &
      step build-prev 300 bash -c 'build_tree "$@"' _ .prev build-py-prev -Dhip=disabled -Dvulkan=disabled \
        -Dtests=false -Dpython=enabled -Dtorch_native=enabled &
      wait
      for i in $(seq 1 "$rounds"); do
        for side in prev new; do
          dir=build-py
          [ "$side" = prev ] && dir=build-py-prev
          step "cost-$side-$i" 90 env PYTHONPATH="$dir/python" python3 lab/python/call_cost.py --pinned --big 64M \
            --leaves 1,67 --calls 2000
          sed "s/^/$side $i: /" "$out/cost-$side-$i.log"
        done
      done
      step pytest-torch 150 env PYTHONPATH=build-py/python python3 -m pytest -q -rs -p no:cacheprovider \
        tests/python/test_torch_cuda.py tests/python/test_torch_misuse.py tests/python/test_torch_cpu.py
      tail -n 3 "$out/pytest-torch.log"
      if ls .whl/torchrec-*.whl >/dev/null 2>&1; then
        step pytest-torchrec 150 bash tools/python/torchrec-gpu-test.sh build-py .whl/torchrec-*.whl
        tail -n 12 "$out/pytest-torchrec.log"
      fi
      ;;
    quick)  # this tree alone, the Python package only: ferry.torch's host cost and the TorchRec suite
      step build-new 240 bash -c 'build_tree "$@"' _ . build-py -Dhip=disabled -Dvulkan=disabled -Dtests=false \
        -Dpython=enabled -Dtorch_native=enabled
      step cost-new 90 env PYTHONPATH=build-py/python python3 lab/python/call_cost.py --pinned --big 64M \
        --leaves 1,67 --calls 2000
      cat "$out/cost-new.log"
      if ls .whl/torchrec-*.whl >/dev/null 2>&1; then
        step pytest-torchrec 150 bash tools/python/torchrec-gpu-test.sh build-py .whl/torchrec-*.whl
        tail -n 12 "$out/pytest-torchrec.log"
      fi
      ;;
    studies)  # this tree alone, the Python package only: the TorchRec pipeline study and the stash study
      step build-new 240 bash -c 'build_tree "$@"' _ . build-py -Dhip=disabled -Dvulkan=disabled -Dtests=false \
        -Dpython=enabled -Dtorch_native=enabled
      python_path build-py
      step pytest-studies 200 env PYTHONPATH="$pp" FERRY_REQUIRE_TORCHREC=1 python3 -m pytest -q -rs -p no:cacheprovider \
        tests/python/test_torchrec.py tests/python/test_torch_cuda.py
      tail -n 4 "$out/pytest-studies.log"
      IFS=';' read -ra cfgs <<<"${FERRY_PIPELINE_CONFIGS:-1024 26 pinned base;1024 26 pageable base;1024 500 pinned base;1024 500 pinned sparse_dist;3072 26 pinned base;1024 500 pageable base;3072 26 pageable base}"
      for cfg in "${cfgs[@]}"; do
        set -- $cfg
        name="pipeline-$1-$2-$3-$4${5:+-extra}"
        step "$name" 150 env PYTHONPATH="$pp" python3 tools/python/pipeline_study.py --batch-mib "$1" \
          --leaves "$2" --source "$3" --pipeline "$4" ${FERRY_PIPELINE_ARGS:-} "${@:5}" --json "$out/$name.json"
        grep -vE "^\[|Warning|warn|^W[0-9]" "$out/$name.log" | tail -n 12
      done
      step stash 240 env PYTHONPATH=build-py/python python3 lab/python/stash_study.py --workloads "${FERRY_STASH_WORKLOADS:-mixed,reuse}" \
        --steps 12 --trace --json "$out/stash.json"
      grep -vE "^\[" "$out/stash.log" | head -n 200
      ;;
    glues)
      step glues 120 env PYTHONPATH=build-prev/python python3 - <<'EOF'
import statistics, time
import torch
import ferry.torch as ft
t = torch.empty(64 << 20, dtype=torch.uint8).pin_memory()
small = {f"k{i}": torch.ones(1024).pin_memory() for i in range(67)}
ways = {
    "native glue": lambda x: (ft._use_to_glue(True), ft.to(x, "cuda")),
    "DLPack exchange glue": lambda x: (ft._use_to_glue(False), ft.to(x, "cuda")),
    "Python path (mode=ferry)": lambda x: ft.to(x, "cuda", mode="ferry"),
}
for name, obj in (("one pinned 64 MiB tensor", t), ("67 small pinned tensors", small)):
    ref = (lambda x=obj: x.to("cuda", non_blocking=True)) if isinstance(obj, torch.Tensor) else \
        (lambda x=obj: {k: v.to("cuda", non_blocking=True) for k, v in x.items()})
    for way, fn in ways.items():
        fn(obj)
        a, b = [], []
        for _ in range(1000):  # in turns with PyTorch's own call
            t0 = time.perf_counter(); fn(obj); a.append(time.perf_counter() - t0)
            t0 = time.perf_counter(); ref(); b.append(time.perf_counter() - t0)
            torch.cuda.current_stream().synchronize()
        ma, mb = statistics.median(a) * 1e6, statistics.median(b) * 1e6
        print(f"{name:28} {way:26} {ma:8.1f} us  torch {mb:8.1f} us  ratio {ma / mb:5.2f}")
ft._use_to_glue(True)
EOF
      cat "$out/glues.log"
      ;;
    *) echo "unknown phase $phase" >&2; exit 2 ;;
  esac
done
