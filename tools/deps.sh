#!/usr/bin/env bash
# Sourced by tools/test.sh, tools/bench.sh and .ci/run: installs the Debian packages ferry's
# build and tests need, only when some are missing (checked with dpkg -s, so a prepared
# machine starts at once). FERRY_SKIP_INSTALL=1 skips the check.

ferry_packages=(meson ninja-build g++ pkg-config cmake doctest-dev libvulkan-dev
                mesa-vulkan-drivers vulkan-validationlayers glslang-tools libamdhip64-dev python3
                python3-dev python3-pip)

# What the Python package's build and tests (meson's -Dpython, suite `python`) need from PyPI,
# for the python3 that meson finds on PATH: nanobind (whose sources build the extension),
# pytest, numpy and torch (the CUDA wheel, which also runs without a GPU; installed as
# ferry_torch_pin, below).
ferry_python_packages=(nanobind pytest numpy torch)

# TorchRec for tests/python/test_torchrec.py, which runs TorchRec's own classes and train
# pipelines. torchrec is pure Python, but `import torchrec` loads fbgemm-gpu, and each
# fbgemm-gpu(-cpu) release is built against one torch minor and fails to load beside another
# (fbgemm-gpu-cpu 1.9.0 beside torch 2.15: "Could not load this library: fbgemm_gpu_py.so").
# So torch is pinned to the newest set released together that installs on CPython 3.11 x86_64
# Linux: torch 2.14.0 (2026-09-02), fbgemm-gpu-cpu 1.9.0 (2026-09-21, built for torch 2.14),
# torchrec 1.9.2 (2026-10-14, the 1.9 series that goes with fbgemm 1.9). torchrec declares
# `fbgemm-gpu` (the CUDA build), so it is installed with --no-deps beside fbgemm-gpu-cpu and
# its other requirements: torchmetrics as torchrec pins it, and tensordict (whose releases also
# follow torch's) at the version seen working with this set. Move them together.
# ferry._torch_native is built against the torch the build's python3 imports, so torch must be
# installed before meson configures (tools/test.sh and .ci/run install first).
ferry_torch_pin=2.14.0
ferry_torchrec_pin=1.9.2
ferry_torchrec_packages=(fbgemm-gpu-cpu==1.9.0 tensordict==0.15.3 torchmetrics==1.0.3 tqdm pyre-extensions)

ferry_install_deps() {
  if [ "${FERRY_SKIP_INSTALL:-0}" != 0 ] || ! command -v dpkg >/dev/null 2>&1; then
    return 0
  fi
  local missing=() p
  for p in "${ferry_packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
      echo "ferry: installing ${missing[*]}"
      export DEBIAN_FRONTEND=noninteractive
      apt-get update
      apt-get install -y --no-install-recommends "${missing[@]}"
    else
      echo "ferry: missing packages: ${missing[*]}" >&2
      echo "ferry: run as root, or: sudo apt-get install ${missing[*]}" >&2
      return 1
    fi
  fi
  ferry_install_python_deps || echo "ferry: PyPI packages missing: the python suite skips what needs them" >&2
}

# pip-installs the missing ferry_python_packages for python3 (checked by importing them, so a
# prepared machine starts at once; torch is installed as torch==ferry_torch_pin), then the
# TorchRec set (ferry_install_torchrec). Where the interpreter is the distribution's, pip needs
# --break-system-packages (PEP 668); it is tried only after a plain install failed.
ferry_install_python_deps() {
  local py=python3 missing=() m
  command -v "$py" >/dev/null 2>&1 || return 0
  for m in "${ferry_python_packages[@]}"; do
    if ! "$py" -c "import $m" >/dev/null 2>&1; then
      [ "$m" = torch ] && m="torch==$ferry_torch_pin"
      missing+=("$m")
    fi
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "ferry: pip installing ${missing[*]} for $(command -v "$py")"
    ferry_pip "$py" "${missing[@]}" || return 1
  fi
  ferry_install_torchrec "$py" || true
}

ferry_pip() {
  local py=$1
  shift
  "$py" -m pip install --quiet "$@" || "$py" -m pip install --quiet --break-system-packages "$@"
}

# Installs torchrec and fbgemm-gpu-cpu for python3 ($1) where its torch is ferry_torch_pin; a
# torch of another version is left alone (other builds on the machine are built against it)
# and test_torchrec.py skips naming the mismatch, unless FERRY_PIN_TORCH=1 (CI), which replaces
# it with the pinned one first. Versions are read from the installed metadata, without
# importing torch. Returns 0 when the pinned set is installed.
ferry_install_torchrec() {
  local py=${1:-python3} have
  have=$("$py" -c 'import importlib.metadata as m
def v(p):
    try:
        return m.version(p)
    except m.PackageNotFoundError:
        return "-"
print(v("torch").split("+")[0], v("torchrec"), v("fbgemm-gpu-cpu"), v("tensordict"))' 2>/dev/null) || return 1
  read -r torch_v torchrec_v fbgemm_v tensordict_v <<<"$have"
  if [ "$torch_v" != "$ferry_torch_pin" ]; then
    if [ "${FERRY_PIN_TORCH:-0}" != 1 ]; then
      echo "ferry: torch $torch_v is not $ferry_torch_pin (FERRY_PIN_TORCH=1 replaces it): torchrec not installed" >&2
      return 1
    fi
    echo "ferry: pip installing torch==$ferry_torch_pin (was $torch_v) for TorchRec"
    ferry_pip "$py" "torch==$ferry_torch_pin" || return 1
  fi
  if [ "$torchrec_v" = "$ferry_torchrec_pin" ] && [ "$fbgemm_v" = "${ferry_torchrec_packages[0]#*==}" ] &&
     [ "$tensordict_v" = "${ferry_torchrec_packages[1]#*==}" ]; then
    return 0
  fi
  echo "ferry: pip installing torchrec==$ferry_torchrec_pin ${ferry_torchrec_packages[*]}"
  ferry_pip "$py" "torch==$ferry_torch_pin" "${ferry_torchrec_packages[@]}" &&
    ferry_pip "$py" --no-deps "torchrec==$ferry_torchrec_pin"
}

# CUDA is not a Debian package here: use /usr/local/cuda when the machine has it.
if [ -d /usr/local/cuda/bin ] && [[ ":$PATH:" != *":/usr/local/cuda/bin:"* ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
