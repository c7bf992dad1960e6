#!/usr/bin/env bash
# Runs every Go fuzz target of the module for a fixed time each.
#
#   scripts/fuzz.sh [-t DURATION] [-p PATTERN]
#
#   -t DURATION  how long each target runs (go test -fuzztime; default 5s,
#                or $FUZZTIME)
#   -p PATTERN   run only targets whose "package.FuzzName" matches this
#                extended regular expression
#
# Plain `go test` already runs every target's committed seed corpus
# (testdata/fuzz/<FuzzName>/ beside the test); this script also mutates
# inputs. A crash makes `go test` write the failing input under that
# testdata/fuzz directory and exit non-zero; the script then stops with that
# status, after printing which target failed. Each target's last status line
# (execs, new interesting inputs) is printed as it finishes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$PATH:/usr/local/go/bin"
export CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}"

fuzztime="${FUZZTIME:-5s}"
pattern=""
while getopts "t:p:h" opt; do
	case $opt in
	t) fuzztime=$OPTARG ;;
	p) pattern=$OPTARG ;;
	h)
		sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*) exit 2 ;;
	esac
done

# "dir FuzzName" for every fuzz target, found in the test files.
mapfile -t targets < <(grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . |
	grep -v '^./.venv/' | sort | while read -r file; do
	dir=$(dirname "$file")
	grep -oE '^func Fuzz[A-Za-z0-9_]+' "$file" | sed "s|^func |$dir |"
done)

if ((${#targets[@]} == 0)); then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi

ran=0
for t in "${targets[@]}"; do
	read -r dir name <<<"$t"
	label="${dir#./}.$name"
	if [[ -n $pattern && ! $label =~ $pattern ]]; then
		continue
	fi
	printf 'fuzz: %s for %s\n' "$label" "$fuzztime" >&2
	log=$(mktemp)
	if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$dir" >"$log" 2>&1; then
		cat "$log" >&2
		rm -f "$log"
		echo "fuzz: $label FAILED (the failing input is under $dir/testdata/fuzz/$name/)" >&2
		exit 1
	fi
	grep -E '^fuzz: elapsed' "$log" | tail -1 | sed "s|^|  $label: |" >&2 || true
	rm -f "$log"
	ran=$((ran + 1))
done
echo "fuzz: $ran targets ran for $fuzztime each, no failure" >&2
