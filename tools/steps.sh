# Sourced by .ci/run and tools/test.sh: `step NAME COMMAND...` runs the command and appends its wall time in seconds
# to SAGA_STEP_TIMES (a tab-separated NAME and seconds a line), which the test report lists, so a change sees what it
# costs. It returns the command's status, also where `set -e` does not reach (inside `$(...)`).
step() {
  local name=$1 began status=0
  shift
  began=$(date +%s)
  "$@" || status=$?
  if [ -n "${SAGA_STEP_TIMES:-}" ]; then
    printf '%s\t%s\n' "$name" "$(($(date +%s) - began))" >>"$SAGA_STEP_TIMES"
  fi
  return "$status"
}
