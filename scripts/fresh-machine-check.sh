#!/usr/bin/env bash
# What a new user's first run does, on this machine: a fresh clone in a temporary folder, every
# cache (the engines' venvs, the release wheels, pip's downloads, Hugging Face's) in a new empty
# folder, then the set-up, `make demo` on each engine, the quick tests and make bench's set-up.
# Prints each step's time and the disk it used, and removes the folder at the end.
#
#   scripts/fresh-machine-check.sh [--full]     (make fresh-machine-check; FULL=1 for --full)
#
# --full also runs the whole `make test` (about 45 minutes more). Needs about 17 GB free in
# $TMPDIR (default /tmp) while it runs. It clones the commit checked out here (HEAD), not the work
# tree: commit first.
set -Eeuo pipefail

FULL=0
for arg in "$@"; do
  case "$arg" in
    --full) FULL=1 ;;
    *) echo "usage: $0 [--full]" >&2; exit 2 ;;
  esac
done

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/engine-plugins-fresh.XXXXXX")
log() { printf '[fresh-machine-check] %s\n' "$*" >&2; }
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT
trap 'log "FAILED: \`$BASH_COMMAND\` (exit $?); the steps above say how far it got"' ERR

# A new user has none of this project's variables set, and the plugin refuses unknown ones.
while read -r name; do unset "$name"; done < <(compgen -v ENGINE_PLUGINS_ || true)
export XDG_CACHE_HOME=$WORK/cache PIP_CACHE_DIR=$WORK/cache/pip
mkdir -p "$XDG_CACHE_HOME"

STEPS=()
step() {
  local name=$1 start rc=0
  shift
  log "$name: $*"
  start=$EPOCHREALTIME
  "$@" >"$WORK/$name.log" 2>&1 || rc=$?
  local seconds disk
  seconds=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }')
  disk=$(du -sh "$WORK" 2>/dev/null | cut -f1)
  STEPS+=("$(printf '%-14s %6s s   disk used so far %s' "$name" "$seconds" "$disk")")
  if (( rc != 0 )); then
    tail -40 "$WORK/$name.log" >&2
    # The work folder goes at exit; the failed step's whole log stays for the reader.
    local kept="${TMPDIR:-/tmp}/fresh-machine-check-$name.log"
    cp "$WORK/$name.log" "$kept"
    log "FAILED: $name (exit $rc): \`$*\` in $WORK/clone; its last lines are above, its whole log in $kept"
    exit "$rc"
  fi
  log "$name: ok in $seconds s (disk used so far: $disk)"
}

TOTAL=$EPOCHREALTIME
step clone git clone --quiet "$REPO_ROOT" "$WORK/clone"
cd "$WORK/clone"
log "commit $(git rev-parse --short HEAD); caches in $XDG_CACHE_HOME"
step setup make setup engines
step bench-setup make .venv/.bench-installed
step demo-vllm make demo ENGINE=vllm
step demo-sglang make demo ENGINE=sglang
step test-quick make test-quick
if (( FULL )); then step test make test; fi

log "summary ($(git rev-parse --short HEAD), empty caches):"
printf '  %s\n' "${STEPS[@]}" >&2
log "total: $(awk -v a="$TOTAL" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }') s; caches $(du -sh "$XDG_CACHE_HOME" | cut -f1) (engines $(du -sh "$XDG_CACHE_HOME/engine-plugins" | cut -f1), pip $(du -sh "$PIP_CACHE_DIR" 2>/dev/null | cut -f1 || echo 0)), clone $(du -sh "$WORK/clone" | cut -f1)"
