# shellcheck shell=bash
# Where a run's time goes: `step NAME COMMAND...` runs COMMAND and records
# its wall-clock seconds and the CPU seconds of the processes it waited for
# (user + system, from the shell's `times`). The first script that sources
# this file owns the table and prints it when it exits, pass or fail; the
# scripts it runs add their steps to the same table (HCP_STEPS, exported).
# docs/development.md's CI table is made of these lines.

_steps_cpu() {
  # `times` prints the shell's own line, then its waited-for children's:
  # "1m2.345s 0m3.210s". It runs in this shell, its answer left in
  # _steps_cpu_now: in a subshell (a command substitution) it would count
  # from zero.
  local user system
  times >"$HCP_STEPS.$BASHPID"
  { read -r _ _; read -r user system; } <"$HCP_STEPS.$BASHPID"
  _steps_cpu_now="$(awk -v u="$user" -v s="$system" 'BEGIN { split(u, a, /[ms]/); split(s, b, /[ms]/); printf "%.1f", a[1] * 60 + a[2] + b[1] * 60 + b[2] }')"
}

# step NAME COMMAND...: runs COMMAND, records NAME's wall and CPU seconds
# and its exit code, returns that code.
step() {
  local name="$1"; shift
  local depth="${HCP_STEP_DEPTH:-0}" t0 c0 rc=0
  _steps_cpu
  t0="$(date +%s.%N)" c0="$_steps_cpu_now"
  # A step inside a step (a script run as one) is shown under it and left
  # out of the total.
  HCP_STEP_DEPTH=$((depth + 1)) "$@" || rc=$?
  local t1 c1
  _steps_cpu
  t1="$(date +%s.%N)" c1="$_steps_cpu_now"
  awk -v n="$name" -v d="$depth" -v t0="$t0" -v t1="$t1" -v c0="$c0" -v c1="$c1" -v rc="$rc" \
    'BEGIN { printf "%s\t%d\t%s\t%.0f\t%.0f\t%d\n", t0, d, n, t1 - t0, c1 - c0, rc }' >>"$HCP_STEPS"
  return "$rc"
}

_steps_print() {
  local rc=$?
  if [[ -s "$HCP_STEPS" ]]; then
    {
      echo "steps (wall and CPU seconds, exit code), $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores:"
      sort -n "$HCP_STEPS" | awk -F'\t' '{
          name = sprintf("%*s%s", 2 * $2, "", $3)
          printf "  %-64s %6ds %6ds  %s\n", name, $4, $5, ($6 == 0 ? "" : "exit " $6)
          if ($2 == 0) c += $5 }
        END { printf "  %-64s %6ds %6ds\n", "total (wall: the whole run; steps may overlap)", w, c }' w="$(awk -v t0="$_steps_t0" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.0f", t1 - t0 }')"
    } >&2
  fi
  rm -f "$HCP_STEPS" "$HCP_STEPS".*
  return "$rc"
}

if [[ -z "${HCP_STEPS:-}" ]]; then
  HCP_STEPS="$(mktemp)"
  export HCP_STEPS
  _steps_t0="$(date +%s.%N)"
  trap _steps_print EXIT
fi
