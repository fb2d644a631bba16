#!/usr/bin/env bash
# Sourced by tools/test.sh --under-load and tools/repeat-case.sh --under-load: start_load keeps
# every core busy with one loop per core, each bounded in time (FERRY_LOAD_MAX_S seconds,
# default 3600), and stops them when the sourcing script exits however it exits. A case whose
# verdict depends on how busy the machine is fails under it rather than by chance in CI.
load_pids=()
stop_load() {
  local p
  for p in "${load_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${load_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  load_pids=()
}
start_load() {  # start_load LABEL
  local cores deadline i
  cores=$(nproc)
  deadline=$((SECONDS + ${FERRY_LOAD_MAX_S:-3600}))
  trap stop_load EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  for ((i = 0; i < cores; i++)); do
    ( while ((SECONDS < deadline)); do :; done ) &
    load_pids+=($!)
  done
  echo "$1: $cores busy loops running (one per core)"
}
