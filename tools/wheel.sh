#!/usr/bin/env bash
# Build ferry's wheel as a user's pip does (build isolation: meson-python and nanobind from
# PyPI, every backend whose headers are present), show what auditwheel makes of it (its
# manylinux tag, and that it grafts no vendor library in: the extension links none), then
# install it into a fresh virtual environment and, away from the source tree, import it and
# run the Python suite's modules that test the installed package (the host backend's cases
# everywhere, the CUDA cases where a GPU is present), with no CUDA toolkit directory on the
# library path: only the driver and what torch's own wheels bring.
#   bash tools/wheel.sh [OUTDIR]          (default: dist)
# Needs network access to PyPI (the build's requirements and auditwheel).
#   FERRY_WHEEL=FILE bash tools/wheel.sh  installs and tests a wheel built elsewhere, offline
#                                         (no build, no auditwheel): a GPU machine's check.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out=${1:-dist}
mkdir -p "$out"
if [ -n "${FERRY_WHEEL:-}" ]; then
  whl=$FERRY_WHEEL
else
  echo "=== wheel: pip wheel . (build isolation)"
  python3 -m pip wheel . --no-deps --wheel-dir "$out"
  whl=$(ls -t "$out"/ferry-*.whl | head -n 1)
fi
echo "=== wheel: $whl"
listing=$(python3 -m zipfile -l "$whl")
echo "$listing" | sed -n '1,40p'
# Every module of the package's source tree is in the wheel.
for f in $(cd python && git ls-files 'ferry/*.py' 'ferry/*.pyi'); do
  if ! grep -q "^$f " <<<"$listing"; then
    echo "wheel: $whl lacks $f" >&2
    exit 1
  fi
done
tmp=$(mktemp -d)
venv=$tmp/venv
if [ -z "${FERRY_WHEEL:-}" ]; then
  # auditwheel (from PyPI) in a virtual environment of its own.
  python3 -m venv "$tmp/auditwheel"
  "$tmp/auditwheel/bin/python" -m pip install --quiet auditwheel
  echo "=== wheel: auditwheel show"
  show=$("$tmp/auditwheel/bin/python" -m auditwheel show "$whl")
  echo "$show"
  if ! grep -q "manylinux_" <<<"$show"; then
    echo "wheel: auditwheel reports no manylinux platform tag for $whl" >&2
    exit 1
  fi
  if grep -qiE "libcuda|libcudart|libamdhip|libhsa|libvulkan|rocm" <<<"$show"; then
    echo "wheel: auditwheel would graft a vendor library into $whl" >&2
    exit 1
  fi
fi
# The wheel goes into a fresh virtual environment, away from the source tree, that sees the
# system's packages, so that where torch is installed ferry.torch is tried as a pip user gets
# it (Debian needs python3-venv). An interpreter that is itself a virtual environment's (where
# torch lives in that environment, which a new one would not see) gets a fresh target
# directory on its path instead.
if python3 -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
  echo "=== wheel: installed in a fresh directory on the path of $(command -v python3)"
  python3 -m pip install --quiet --no-deps --no-index --target "$venv" "$whl"
  py=python3
  export PYTHONPATH=$venv
else
  echo "=== wheel: installed in a fresh virtual environment"
  python3 -m venv --system-site-packages "$venv"
  "$venv/bin/python" -m pip install --quiet --no-deps --no-index "$whl"
  py=$venv/bin/python
fi
# No CUDA toolkit directory on the library path: a pip user's machine has the driver and
# torch's own CUDA wheels, not /usr/local/cuda.
LD_LIBRARY_PATH=$(tr ':' '\n' <<<"${LD_LIBRARY_PATH:-}" | grep -v -e '^$' -e 'cuda' | paste -sd: || true)
export LD_LIBRARY_PATH
(cd "$tmp" && FERRY_TORCH_NATIVE_CACHE="$tmp/native" "$py" - <<'PY'
import ferry
B = ferry.Backend
rows = []
for b in (B.host, B.cuda, B.hip, B.vulkan):
    rows.append(f"{b.name}: built {ferry.Device.built_with(b)}, runtime present {ferry.Device.runtime_present(b)}, "
                f"devices {ferry.Device.count(b)}")
print("import ferry from the wheel:", ferry.__file__)
print("\n".join(rows))
assert ferry.Device.built_with(B.host) and ferry.Device.count(B.host) >= 1
try:
    import torch
except ImportError:
    print("torch is not installed: ferry.torch not tried")
else:
    # The wheel has no ferry._torch_native (build isolation hides the user's torch): ferry.torch
    # builds it against this torch at first use.
    import ferry.torch as ft
    out = ft.to({"a": torch.arange(4)}, "cpu")
    assert torch.equal(out["a"], torch.arange(4))
    print(f"ferry.torch from the wheel under torch {torch.__version__}: native {ft.NATIVE}")
PY
)
echo "=== wheel: the Python suite against the installed package"
# Run from outside the source tree, so that `import ferry` finds the installed wheel (the
# first module checks that it does). The first-use build test expects a build tree's prebuilt
# native module, which a wheel does not have, so it is not among them.
(cd "$tmp" && FERRY_EXPECT_PACKAGE="$venv" FERRY_TORCH_NATIVE_CACHE="$tmp/native" \
  "$py" -m pytest -q -rs -p no:cacheprovider "$root/tests/python/test_installed.py" \
  "$root/tests/python/test_core.py" "$root/tests/python/test_torch_cpu.py" "$root/tests/python/test_torch_misuse.py" \
  "$root/tests/python/test_torch_cuda.py" "$root/tests/python/test_torchrec.py")
rm -rf "$tmp"
