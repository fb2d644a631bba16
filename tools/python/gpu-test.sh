#!/usr/bin/env bash
# Build the Python package with plain meson (no meson-python) and run its pytest suite,
# including the CUDA cases of tests/python/test_torch_cuda.py, on a GPU machine.
#   bash tools/python/gpu-test.sh [BUILD_DIR] [pytest args...]
# Needs python3 with development headers, nanobind, pytest, numpy and torch (CUDA).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${1:-build-py}
shift || true
if [ -d /usr/local/cuda/bin ] && [[ ":$PATH:" != *":/usr/local/cuda/bin:"* ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
python3 -c 'import nanobind, torch; print("nanobind", nanobind.__version__, "torch", torch.__version__, "cuda", torch.cuda.is_available())'
[ -f "$build/build.ninja" ] || meson setup "$build" -Dpython=enabled -Dvulkan=disabled -Dtests=false -Dtools=false
ninja -C "$build"
PYTHONPATH="$build/python" python3 -m pytest -q -rs -p no:cacheprovider tests/python "$@"
