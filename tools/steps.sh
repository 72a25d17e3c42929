# Sourced by .ci/run and tools/test.sh: `step NAME COMMAND...` runs the command and appends its wall time and the
# machine's busy CPU time meanwhile, in seconds, to SAGA_STEP_TIMES (NAME, wall seconds, busy core-seconds, tab-separated,
# a line each), which the test report lists: what each step costs, and which leave the cores idle (busy below twice the
# wall time on 2 cores). Busy time is the whole machine's (/proc/stat), so it counts the servers a step's tests talk
# to (DynamoDB Local, the functions) and anything else that ran meanwhile. It returns the command's status, also where
# `set -e` does not reach (inside `$(...)`). A step run in the background beside others (SAGA_STEP_BESIDE set to the
# name of the step it runs beside) gets that name as a fourth field: the report shows it under that step and leaves it
# out of the totals, whose wall time is the run's. With SAGA_STEP_WINDOWS set, each step's name, start and end (epoch
# seconds) go there too, for the CPU time of each kind of process meanwhile (tools/cpu_by_process.py).
step() {
  local name=$1 began busy status=0
  shift
  began=$(date +%s)
  busy=$(busy_seconds)
  "$@" || status=$?
  if [ -n "${SAGA_STEP_TIMES:-}" ]; then
    printf '%s\t%s\t%s%s\n' "$name" "$(($(date +%s) - began))" \
      "$(awk -v a="$busy" -v b="$(busy_seconds)" 'BEGIN { printf "%.0f", b - a }')" \
      "${SAGA_STEP_BESIDE:+$(printf '\t%s' "$SAGA_STEP_BESIDE")}" >>"$SAGA_STEP_TIMES"
  fi
  # When it began and ended (epoch seconds), for the CPU time by kind of process (tools/cpu_by_process.py) then.
  if [ -n "${SAGA_STEP_WINDOWS:-}" ]; then
    printf '%s\t%s\t%s\n' "$name" "$began" "$(date +%s)" >>"$SAGA_STEP_WINDOWS"
  fi
  return "$status"
}

# The seconds every core of the machine has spent busy since it booted: /proc/stat's first line, all but idle and
# iowait, in clock ticks.
busy_seconds() {
  awk -v hz="$(getconf CLK_TCK)" '$1 == "cpu" { printf "%.1f\n", ($2 + $3 + $4 + $7 + $8 + $9) / hz; exit }' /proc/stat
}

# `joined PID TITLE LOG STATUS_FILE`: waits for the steps run in the background as PID (their output in LOG, their exit
# status written to STATUS_FILE), prints that output under TITLE, and fails when they did.
joined() {
  local pid=$1 title=$2 log=$3 status_file=$4
  wait "$pid" || true
  echo
  echo "== $title: $log"
  cat "$log"
  [ "$(cat "$status_file")" = 0 ] || { echo "$title: failed ($log)" >&2; return 1; }
}

# `sample_cpu DIR`: unless this run's samples are already being taken (SAGA_CPU_SAMPLES set), samples the CPU time of
# each kind of process every 2 s into DIR/cpu-samples.tsv until the calling script ends (tools/cpu_by_process.py), and
# has `step` write each step's start and end to DIR/step-windows.tsv: the report's table of what the steps spend.
sample_cpu() {
  [ -z "${SAGA_CPU_SAMPLES:-}" ] || return 0
  export SAGA_STEP_WINDOWS=$1/step-windows.tsv SAGA_CPU_SAMPLES=$1/cpu-samples.tsv
  : >"$SAGA_STEP_WINDOWS"
  : >"$SAGA_CPU_SAMPLES"
  python3 tools/cpu_by_process.py sample "$SAGA_CPU_SAMPLES" --interval 2 --parent $$ &
}
