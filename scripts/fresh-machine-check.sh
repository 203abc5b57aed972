#!/usr/bin/env bash
# What a new user's first run does, on this machine: each of the README's commands, in the README's
# order, as the very first command in a fresh clone of its own with every cache (the engines'
# venvs, the release wheels, pip's downloads, Hugging Face's) in a new empty folder: `make demo`,
# `make demo ENGINE=sglang`, `make test-quick` (--full: and `make test`). Prints each step's time
# and the disk it used, and removes each step's folder once it has passed.
#
#   scripts/fresh-machine-check.sh [--full]     (make fresh-machine-check; FULL=1 for --full)
#
# --full also runs the whole `make test` (about an hour more, set-up included). Needs about 17 GB
# free in $TMPDIR (default /tmp) while a step runs. It clones the commit checked out here (HEAD),
# not the work tree: commit first.
set -Eeuo pipefail

FULL=0
for arg in "$@"; do
  case "$arg" in
    --full) FULL=1 ;;
    *) echo "usage: $0 [--full]" >&2; exit 2 ;;
  esac
done

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KEPT_DIR=${TMPDIR:-/tmp}
log() { printf '[fresh-machine-check] %s\n' "$*" >&2; }
WORK=
cleanup() { [[ -z $WORK ]] || rm -rf "$WORK"; }
trap cleanup EXIT
trap 'log "FAILED: \`$BASH_COMMAND\` (exit $?); the steps above say how far it got"' ERR

# A new user has none of this project's variables set, and the plugin refuses unknown ones.
while read -r name; do unset "$name"; done < <(compgen -v ENGINE_PLUGINS_ || true)

STEPS=()
# step NAME COMMAND...: a new folder with an empty cache, a fresh clone of HEAD, then COMMAND
# as the first command run in it.
step() {
  local name=$1 start rc=0 seconds disk caches
  shift
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/engine-plugins-fresh.XXXXXX")
  export XDG_CACHE_HOME=$WORK/cache PIP_CACHE_DIR=$WORK/cache/pip
  mkdir -p "$XDG_CACHE_HOME"
  git clone --quiet "$REPO_ROOT" "$WORK/clone"
  log "$name: \`$*\` in a fresh clone of $(git -C "$WORK/clone" rev-parse --short HEAD), caches in $XDG_CACHE_HOME"
  start=$EPOCHREALTIME
  (cd "$WORK/clone" && "$@") >"$WORK/$name.log" 2>&1 || rc=$?
  seconds=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }')
  disk=$(du -sh "$WORK" 2>/dev/null | cut -f1)
  caches="engines $(du -sh "$XDG_CACHE_HOME/engine-plugins" 2>/dev/null | cut -f1 || echo 0), pip $(du -sh "$PIP_CACHE_DIR" 2>/dev/null | cut -f1 || echo 0), clone $(du -sh "$WORK/clone" | cut -f1)"
  STEPS+=("$(printf '%-12s %-28s %6s s   disk %s (%s)' "$name" "$*" "$seconds" "$disk" "$caches")")
  # The step's whole output stays for the reader: what a new user saw.
  cp "$WORK/$name.log" "$KEPT_DIR/fresh-machine-check-$name.log"
  if (( rc != 0 )); then
    tail -40 "$WORK/$name.log" >&2
    log "FAILED: $name (exit $rc): \`$*\`; its last lines are above, its whole output in $KEPT_DIR/fresh-machine-check-$name.log"
    exit "$rc"
  fi
  log "$name: ok in $seconds s (disk $disk: $caches); its output in $KEPT_DIR/fresh-machine-check-$name.log"
  rm -rf "$WORK"; WORK=
}

TOTAL=$EPOCHREALTIME
step demo-vllm make demo
step demo-sglang make demo ENGINE=sglang
step test-quick make test-quick
if (( FULL )); then step test make test; fi

log "summary ($(git -C "$REPO_ROOT" rev-parse --short HEAD), each step first in a fresh clone with empty caches):"
printf '  %s\n' "${STEPS[@]}" >&2
log "total: $(awk -v a="$TOTAL" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }') s"
