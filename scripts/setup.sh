#!/usr/bin/env bash
# Idempotent setup of a development machine (Debian) for Mooncake-Go:
#   1. etcd, redis-server, cmake, iproute2 and nftables from Debian, if missing (root only); the
#      services are left stopped: tests start their own on free ports;
#   2. .venv with the pinned packages of requirements-dev.txt (skipped while
#      the file is unchanged since the last successful install);
#   3. the project itself, built (Go -> libmooncake.so + binaries) and
#      installed into .venv with pip.
# Progress goes to stderr. Safe to run again; a warm run takes seconds.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'setup: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

export PATH="$PATH:/usr/local/go/bin"
export CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}"

# --- 1. system packages -------------------------------------------------------

stop_services() {
	local svc
	for svc in etcd redis-server; do
		if [[ -d /run/systemd/system ]]; then
			systemctl disable --now "$svc" >/dev/null 2>&1 || true
		elif [[ -x /etc/init.d/$svc ]]; then
			"/etc/init.d/$svc" stop >/dev/null 2>&1 || true
			update-rc.d "$svc" disable >/dev/null 2>&1 || true
		fi
	done
}

apt_missing=()
command -v etcd >/dev/null 2>&1 || apt_missing+=(etcd-server)
command -v redis-server >/dev/null 2>&1 || apt_missing+=(redis-server)
command -v cmake >/dev/null 2>&1 || apt_missing+=(cmake)
command -v ip >/dev/null 2>&1 || apt_missing+=(iproute2)   # tests/cluster hosts
command -v nft >/dev/null 2>&1 || apt_missing+=(nftables)  # tests/cluster partitions

if ((${#apt_missing[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		log "warning: missing ${apt_missing[*]} and not root; install them with" \
			"'sudo apt-get install -y ${apt_missing[*]}' (tests that need them will fail)"
	else
		log "installing ${apt_missing[*]} ..."
		# Keep the packages' maintainer scripts from starting their daemons.
		policy=/usr/sbin/policy-rc.d
		own_policy=0
		if [[ ! -e $policy ]]; then
			printf '#!/bin/sh\nexit 101\n' >"$policy"
			chmod 755 "$policy"
			own_policy=1
			trap 'rm -f /usr/sbin/policy-rc.d' EXIT
		fi
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >&2
		apt-get install -y -qq --no-install-recommends "${apt_missing[@]}" >&2
		if ((own_policy)); then
			rm -f "$policy"
			trap - EXIT
		fi
		stop_services
	fi
fi

command -v go >/dev/null 2>&1 || die "go not found (expected on PATH or in /usr/local/go/bin); install Go >= $(sed -n 's/^go //p' go.mod)"

# --- 2. Python environment -----------------------------------------------------

PY=.venv/bin/python
if [[ ! -x $PY ]]; then
	log "creating .venv with $(python3 --version 2>&1) ..."
	python3 -m venv .venv
fi

stamp=.venv/.requirements-dev.stamp
want="$(sha256sum requirements-dev.txt | cut -d' ' -f1) $("$PY" -c 'import sys; print(sys.version.split()[0])')"
if [[ -f $stamp && "$(cat "$stamp")" == "$want" ]]; then
	log "python dependencies up to date (requirements-dev.txt unchanged)"
else
	# pip's own cache stays empty with this registry (no cache headers), so
	# wheels are kept in a wheelhouse outside the checkout: a fresh clone (CI)
	# installs torch from disk instead of downloading ~4 GB again.
	wheelhouse="${MOONCAKE_WHEELHOUSE:-$HOME/.cache/mooncake-go/wheels}"
	mkdir -p "$wheelhouse"
	log "fetching python dependencies into $wheelhouse (torch is large: minutes the first time) ..."
	"$PY" -m pip download -q -d "$wheelhouse" -r requirements-dev.txt >&2
	log "installing python dependencies from $wheelhouse ..."
	"$PY" -m pip install -q --no-index --find-links "$wheelhouse" -r requirements-dev.txt >&2
	printf '%s\n' "$want" >"$stamp"
fi

# --- 2b. vLLM's KV event classes (tests/test_store_kv_events.py) -------------
# The KV event tests decode the master's events with vLLM's own msgspec
# classes. vLLM itself is not installed (its dependencies are huge): its
# wheel is fetched without dependencies into the wheelhouse and only its
# Python sources are unpacked into .venv/vllm-src, which the test imports
# from.
VLLM_VERSION=0.33.0
vllm_src=.venv/vllm-src
if [[ "$(cat "$vllm_src/.version" 2>/dev/null)" != "$VLLM_VERSION" ]]; then
	wheelhouse="${MOONCAKE_WHEELHOUSE:-$HOME/.cache/mooncake-go/wheels}"
	mkdir -p "$wheelhouse"
	if ! compgen -G "$wheelhouse/vllm-$VLLM_VERSION-*.whl" >/dev/null; then
		log "fetching the vllm $VLLM_VERSION wheel (no dependencies) into $wheelhouse ..."
		"$PY" -m pip download -q --no-deps -d "$wheelhouse" "vllm==$VLLM_VERSION" >&2
	fi
	rm -rf "$vllm_src"
	"$PY" - "$vllm_src" "$wheelhouse"/vllm-"$VLLM_VERSION"-*.whl <<'PYEOF'
import sys, zipfile
dest, wheel = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith("vllm/") and name.endswith(".py"):
            z.extract(name, dest)
PYEOF
	printf '%s\n' "$VLLM_VERSION" >"$vllm_src/.version"
	log "vllm $VLLM_VERSION sources unpacked into $vllm_src"
fi

# --- 3. the project ------------------------------------------------------------

log "building and installing mooncake-go into .venv (go build + pip install) ..."
"$PY" -m pip install -q --no-build-isolation --no-deps . >&2
log "done: $("$PY" -c 'import mooncake._lib as l; print("libmooncake", l.version(), "at", l.lib_path())')"
