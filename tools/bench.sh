#!/usr/bin/env bash
# The main job: build ferry and run the benchmark on the best device present (CUDA, then
# Vulkan on a GPU, then HIP, then Vulkan on a CPU driver, then the host backend).
#   bash tools/bench.sh [program arguments...]
# Runs build/tools/ferry-bench (every copy strategy side by side in the seed and the pipeline
# workload, each with its bars: footprint, bandwidth, host cost, step time); its options pass
# through, e.g. --sizes 64M --snapshot out/ --out out/. See --help.
# Only the bench and what it links are built, so a fresh clone gets to the bench quickly.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
source tools/deps.sh
ferry_install_deps

build=${FERRY_BUILD_DIR:-build}
[ -f "$build/build.ninja" ] || meson setup "$build"
if ! ninja -C "$build" tools/ferry-bench; then
  [ -f "$build/tools/ferry-bench" ] ||
    echo "ferry: $build/tools/ferry-bench was not built (configured with -Dtools=false?)" >&2
  exit 1
fi
# results.json records the tree that ran: FERRY_COMMIT when set, else this checkout's HEAD (never
# an enclosing checkout's, for a copy without git metadata of its own).
if [ -z "${FERRY_COMMIT:-}" ] && [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$root" ]; then
  FERRY_COMMIT=$(git rev-parse --short HEAD 2>/dev/null) && export FERRY_COMMIT
fi
exec "$build/tools/ferry-bench" "$@"
