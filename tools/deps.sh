#!/usr/bin/env bash
# Sourced by tools/test.sh, tools/bench.sh and .ci/run: installs the Debian packages ferry's
# build and tests need, only when some are missing (checked with dpkg -s, so a prepared
# machine starts at once). FERRY_SKIP_INSTALL=1 skips the check.

ferry_packages=(meson ninja-build g++ pkg-config cmake doctest-dev libvulkan-dev
                mesa-vulkan-drivers vulkan-validationlayers glslang-tools libamdhip64-dev python3)

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
}

# CUDA is not a Debian package here: use /usr/local/cuda when the machine has it.
if [ -d /usr/local/cuda/bin ] && [[ ":$PATH:" != *":/usr/local/cuda/bin:"* ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
