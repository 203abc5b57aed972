#!/usr/bin/env bash
# Runs a set-up command with its output in a log file instead of the terminal, so that a make
# target's own lines are what the user reads; on failure, the log's tail and its path.
#
#   scripts/logged.sh LOG COMMAND [ARG ...]      (appends to LOG)
set -uo pipefail

(( $# >= 2 )) || { echo "usage: $0 LOG COMMAND [ARG ...]" >&2; exit 2; }
log=$1
shift
mkdir -p "$(dirname "$log")"
printf '$ %s\n' "$*" >>"$log"
"$@" >>"$log" 2>&1
rc=$?
if (( rc != 0 )); then
  tail -n 30 "$log" >&2
  echo "FAILED (exit $rc): $*" >&2
  echo "  its whole output: $log" >&2
fi
exit "$rc"
