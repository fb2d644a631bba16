#!/usr/bin/env bash
# Sourced by tools/test.sh, tools/bench.sh and .ci/run: installs the Debian packages ferry's
# build and tests need, only when some are missing (checked with dpkg -s, so a prepared
# machine starts at once). FERRY_SKIP_INSTALL=1 skips the check.

ferry_packages=(meson ninja-build g++ pkg-config cmake doctest-dev libvulkan-dev
                mesa-vulkan-drivers vulkan-validationlayers glslang-tools libamdhip64-dev python3
                python3-dev python3-pip)

# What the Python package's build and tests (meson's -Dpython, suite `python`) need from PyPI,
# for the python3 that meson finds on PATH: nanobind (whose sources build the extension),
# pytest, numpy and torch (the CUDA wheel, which also runs without a GPU).
ferry_python_packages=(nanobind pytest numpy torch)

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
# prepared machine starts at once). Where the interpreter is the distribution's, pip needs
# --break-system-packages (PEP 668); it is tried only after a plain install failed.
ferry_install_python_deps() {
  local py=python3 missing=() m
  command -v "$py" >/dev/null 2>&1 || return 0
  for m in "${ferry_python_packages[@]}"; do
    "$py" -c "import $m" >/dev/null 2>&1 || missing+=("$m")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "ferry: pip installing ${missing[*]} for $(command -v "$py")"
  "$py" -m pip install --quiet "${missing[@]}" ||
    "$py" -m pip install --quiet --break-system-packages "${missing[@]}"
}

# CUDA is not a Debian package here: use /usr/local/cuda when the machine has it.
if [ -d /usr/local/cuda/bin ] && [[ ":$PATH:" != *":/usr/local/cuda/bin:"* ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
