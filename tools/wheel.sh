#!/usr/bin/env bash
# Build ferry's wheel as a user's pip does (build isolation: meson-python and nanobind from
# PyPI, every backend whose headers are present), show what auditwheel makes of it (its
# manylinux tag, and that it grafts no vendor library in: the extension links none), then
# install it into a fresh virtual environment and import it outside the source tree.
#   bash tools/wheel.sh [OUTDIR]          (default: dist)
# Needs network access to PyPI (the build's requirements and auditwheel).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out=${1:-dist}
mkdir -p "$out"
echo "=== wheel: pip wheel . (build isolation)"
python3 -m pip wheel . --no-deps --wheel-dir "$out"
whl=$(ls -t "$out"/ferry-*.whl | head -n 1)
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
# A fresh virtual environment: auditwheel (from PyPI) runs there, and the wheel is installed
# there, away from the source tree (Debian needs python3-venv). It sees the system's packages,
# so that where torch is installed, ferry.torch from the wheel is tried as a pip user gets it.
venv=$(mktemp -d)/venv
python3 -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install --quiet auditwheel
echo "=== wheel: auditwheel show"
show=$("$venv/bin/python" -m auditwheel show "$whl")
echo "$show"
if ! grep -q "manylinux_" <<<"$show"; then
  echo "wheel: auditwheel reports no manylinux platform tag for $whl" >&2
  exit 1
fi
if grep -qiE "libcuda|libcudart|libamdhip|libhsa|libvulkan|rocm" <<<"$show"; then
  echo "wheel: auditwheel would graft a vendor library into $whl" >&2
  exit 1
fi
echo "=== wheel: installed in a fresh virtual environment"
"$venv/bin/python" -m pip install --quiet "$whl"
(cd "$(dirname "$venv")" && FERRY_TORCH_NATIVE_CACHE="$(dirname "$venv")/native" "$venv/bin/python" - <<'PY'
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
rm -rf "$(dirname "$venv")"
