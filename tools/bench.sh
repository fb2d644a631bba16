#!/usr/bin/env bash
# The main job: build ferry and run the benchmark on the best device present (CUDA, then
# Vulkan on a GPU, then HIP, then Vulkan on a CPU driver, then the host backend).
#   bash tools/bench.sh [program arguments...]
# Runs build/tools/ferry-bench; until that exists, the example program
# build/tools/ferry-example (uploads a batch and prints the pool's footprint statistics).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
source tools/deps.sh
ferry_install_deps

build=${FERRY_BUILD_DIR:-build}
[ -f "$build/build.ninja" ] || meson setup "$build"
ninja -C "$build"
for program in "$build/tools/ferry-bench" "$build/tools/ferry-example"; do
  if [ -x "$program" ]; then
    exec "$program" "$@"
  fi
done
echo "ferry: neither $build/tools/ferry-bench nor $build/tools/ferry-example was built" >&2
exit 1
