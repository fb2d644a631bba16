#!/usr/bin/env bash
# Run tests/python/test_torchrec.py, CUDA cases included, on a GPU machine.
#   bash tools/python/torchrec-gpu-test.sh [BUILD_DIR] [TORCHREC_WHEEL]
# Builds as tools/python/gpu-test.sh does. Where torchrec and its fbgemm-gpu import beside the
# machine's torch, the test runs on them. Otherwise pass TorchRec's pure-Python wheel (from
# `pip download --no-deps torchrec==1.9.2` on a machine with network): it is unpacked into a
# temporary directory and the test runs with FERRY_TORCHREC_STANDINS=1 (inert fbgemm_gpu,
# tensordict and pyre_extensions, fbgemm's asynchronous_complete_cumsum in plain torch), which
# this script's output and a warning in pytest's summary say.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${1:-build-py}
wheel=${2:-}
if [ -d /usr/local/cuda/bin ] && [[ ":$PATH:" != *":/usr/local/cuda/bin:"* ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
[ -f "$build/build.ninja" ] || meson setup "$build" -Dpython=enabled -Dvulkan=disabled -Dtests=false -Dtools=false
ninja -C "$build"
pythonpath="$build/python"
if ! python3 -c 'import torchrec, torch; torch.ops.fbgemm.asynchronous_complete_cumsum' >/dev/null 2>&1; then
  if [ -z "$wheel" ]; then
    echo "torchrec-gpu-test: torchrec does not import beside this torch; pass its wheel" >&2
    exit 2
  fi
  deps=$(mktemp -d)
  python3 -m pip install --quiet --no-deps --target "$deps" "$wheel"
  pythonpath="$pythonpath:$deps"
  export FERRY_TORCHREC_STANDINS=1
  echo "torchrec-gpu-test: torchrec from $wheel with stand-ins for fbgemm_gpu, tensordict, pyre_extensions"
fi
PYTHONPATH="$pythonpath" FERRY_REQUIRE_TORCHREC=1 python3 -m pytest -q -rs -p no:cacheprovider -p no:logging \
  tests/python/test_torchrec.py
