#!/usr/bin/env bash
# Runs a command with only the environment an engine set-up may depend on, so that the venvs it
# builds are the same whatever shell or make target runs it.
#
#   scripts/clean-env.sh COMMAND [ARG ...]
#
# Kept: the user's basics (HOME, PATH, locale, TMPDIR, terminal), the XDG folders (pip reads its
# config from them, the caches live under them), proxies and CA bundles, the set-up's own
# ENGINE_PLUGINS_ENGINES_DIR / _WHEELS_DIR / _PYTHON, and the pip variables that say where
# packages come from (index, find-links, certificates, cache, timeouts, config file). Dropped:
# everything else, above all PYTHONPATH, PYTHONHOME, VIRTUAL_ENV (a caller's packages would be
# seen by the engine venv's interpreter and its `pip check`) and pip variables that change what
# is installed (PIP_USER, PIP_TARGET, PIP_NO_DEPS, PIP_PRE, ...).
set -euo pipefail

(( $# > 0 )) || { echo "usage: $0 COMMAND [ARG ...]" >&2; exit 2; }

KEEP=(
  HOME PATH USER LOGNAME SHELL TERM LANG LANGUAGE TZ TMPDIR
  XDG_CACHE_HOME XDG_CONFIG_HOME XDG_CONFIG_DIRS XDG_DATA_HOME XDG_RUNTIME_DIR
  http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY ALL_PROXY all_proxy
  SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE CURL_CA_BUNDLE
  ENGINE_PLUGINS_ENGINES_DIR ENGINE_PLUGINS_WHEELS_DIR ENGINE_PLUGINS_PYTHON
  PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_FIND_LINKS PIP_NO_INDEX PIP_TRUSTED_HOST PIP_CERT
  PIP_CLIENT_CERT PIP_PROXY PIP_TIMEOUT PIP_DEFAULT_TIMEOUT PIP_RETRIES PIP_CACHE_DIR
  PIP_NO_CACHE_DIR PIP_CONFIG_FILE PIP_DISABLE_PIP_VERSION_CHECK
)

declare -A keep=()
for name in "${KEEP[@]}"; do keep[$name]=1; done
kept=()
# Exported variables only: bash itself sets SHELL and TERM as plain shell variables.
for name in $(compgen -e); do
  if [[ -n ${keep[$name]:-} || $name == LC_* ]]; then kept+=("$name=${!name}"); fi
done
exec env -i "${kept[@]}" "$@"
