# Shared by the one-call GPU scripts (sourced): `step`, bounded by the caller's `deadline`
# (seconds on bash's SECONDS clock), writing each step's output to the caller's `out`;
# `build_tree`; `python_path`.
step() {  # step NAME LIMIT_S COMMAND...: the command's output in OUTDIR/NAME.log
  local name=$1 limit=$2 left=$((deadline - SECONDS))
  shift 2
  if [ "$left" -le 5 ]; then
    echo "step $name: not run (deadline)"
    return 1
  fi
  [ "$limit" -le "$left" ] || limit=$left
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "step $name: rc $rc, $((SECONDS - t0)) s"
  [ "$rc" = 0 ] || tail -n 25 "$out/$name.log"
  return $rc
}

build_tree() {  # build_tree SRC DIR MESON_OPTIONS...: configure once, then build (FERRY_BUILD_JOBS jobs)
  local src=$1 dir=$2
  shift 2
  { [ -f "$dir/build.ninja" ] || meson setup "$dir" "$src" "$@"; } && ninja -C "$dir" -j"${FERRY_BUILD_JOBS:-12}"
}
export -f build_tree

python_path() {  # python_path BUILD_DIR: sets pp, the package's path, with torchrec's wheel where needed
  pp=$1/python
  if ! python3 -c 'import torchrec' >/dev/null 2>&1 && ls .whl/torchrec-*.whl >/dev/null 2>&1; then
    # TorchRec's pure-Python wheel, with the test suite's stand-ins for an fbgemm-gpu that does
    # not load beside this torch.
    mkdir -p "$1/torchrec-wheel"
    python3 -m zipfile -e .whl/torchrec-*.whl "$1/torchrec-wheel"
    pp="$pp:$1/torchrec-wheel"
    export FERRY_TORCHREC_STANDINS=1
  fi
}
