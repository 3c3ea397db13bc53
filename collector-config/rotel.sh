#!/usr/bin/env bash
# Run rotel in the foreground with the wt-otel processor, exporting to `wt-otel serve`.
# Settings: rotel.env (the environment wins). Extra arguments go to `rotel start` (e.g. --debug-log traces).
# Needs: the venv with `rotel` installed (pip install -e '.[test]'), and Debian's libpython3.11.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
venv="${WT_OTEL_VENV:-$root/.venv}"

while IFS= read -r line; do
  case "$line" in '' | '#'*) continue ;; esac
  key="${line%%=*}"
  [ -n "${!key+x}" ] || export "$key=${line#*=}"
done < "$here/rotel.env"

for key in ROTEL_OTLP_WITH_TRACE_PROCESSOR ROTEL_OTLP_WITH_LOGS_PROCESSOR; do
  case "${!key:-/}" in /*) ;; *) export "$key=$root/${!key}" ;; esac
done

if ! "$venv/bin/python" -c 'import ctypes.util, sys; sys.exit(ctypes.util.find_library("python3.11") is None)'; then
  echo "rotel.sh: rotel's embedded Python needs Debian's libpython3.11: apt-get install -y libpython3.11" >&2
  exit 1
fi

site_packages="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
export PYTHONPATH="$site_packages:$root${PYTHONPATH:+:$PYTHONPATH}"

rotel_bin="${ROTEL_BIN:-$("$venv/bin/python" -c 'import pathlib, rotel; print(pathlib.Path(rotel.__file__).with_name("rotel-agent"))')}"
exec "$rotel_bin" start "$@"
