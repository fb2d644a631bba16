# Shared by the one-call GPU scripts (sourced): `step`, bounded by the caller's `deadline`
# (seconds on bash's SECONDS clock), writing each step's output to the caller's `out`.
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
