#!/usr/bin/env bash
# make test-torch-next: the torch plugin built against the newest torch we
# support (TORCH_NEXT, beside the torch==... pin of requirements-dev.txt that
# .venv uses) and the collectives and EP tests run against it:
#   1. .venv-torch-next: requirements-dev.txt with torch replaced by
#      torch==$TORCH_NEXT, from the wheelhouse of scripts/setup.sh (skipped
#      while requirements-dev.txt and TORCH_NEXT are unchanged);
#   2. the project installed into it, built in its own build directory
#      (build/torch-next/) so that .venv's plugin is not rebuilt each time;
#   3. pytest tests/test_pg_*.py tests/test_ep_*.py; arguments, if any, are
#      pytest's instead (e.g. one test file).
# Progress goes to stderr. docs/build.md, "The newest torch".
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

TORCH_NEXT="${TORCH_NEXT:-2.15.0}"
VENV=.venv-torch-next
PY=$VENV/bin/python

log() { printf 'torch-next: %s\n' "$*" >&2; }

export PATH="$PATH:/usr/local/go/bin"
export CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}"

if [[ ! -x $PY ]]; then
	log "creating $VENV with $(python3 --version 2>&1) ..."
	python3 -m venv "$VENV"
fi

stamp=$VENV/.requirements.stamp
want="$(sha256sum requirements-dev.txt | cut -d' ' -f1) torch==$TORCH_NEXT $("$PY" -c 'import sys; print(sys.version.split()[0])')"
if [[ -f $stamp && "$(cat "$stamp")" == "$want" ]]; then
	log "python dependencies up to date (torch==$TORCH_NEXT)"
else
	wheelhouse="${MOONCAKE_WHEELHOUSE:-$HOME/.cache/mooncake-go/wheels}"
	mkdir -p "$wheelhouse" build
	reqs=build/requirements-torch-next.txt
	sed "s/^torch==.*/torch==$TORCH_NEXT/" requirements-dev.txt >"$reqs"
	grep -qx "torch==$TORCH_NEXT" "$reqs" || { log "error: no torch== pin in requirements-dev.txt"; exit 1; }
	log "fetching python dependencies (torch==$TORCH_NEXT) into $wheelhouse ..."
	"$PY" -m pip download -q -d "$wheelhouse" -r "$reqs" >&2
	log "installing them into $VENV ..."
	"$PY" -m pip install -q --no-index --find-links "$wheelhouse" -r "$reqs" >&2
	printf '%s\n' "$want" >"$stamp"
fi

log "building and installing mooncake-go into $VENV (plugin against torch==$TORCH_NEXT) ..."
"$PY" -m pip install -q --no-build-isolation --no-deps \
	-C build-dir="build/torch-next/{wheel_tag}" . >&2
"$PY" -c 'import torch, mooncake.pg as pg; print("torch-next: torch", torch.__version__, "plugin built against", pg._ext.TORCH_VERSION_BUILT)' >&2

if (($# == 0)); then
	set -- tests/test_pg_*.py tests/test_ep_*.py
fi
log "pytest -q $* ..."
exec "$PY" -m pytest -q "$@"
