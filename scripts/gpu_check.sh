#!/usr/bin/env bash
# The device check of Mooncake-Go (docs/gpu.md): GPU memory through every
# layer, on a machine with one NVIDIA GPU, its own torch, and no network.
#
#   scripts/gpu_check.sh prepare   on the build machine (Go toolchain, no GPU
#                                  needed): builds libmooncake.so, the binaries
#                                  and the Go test binaries, packed into
#                                  .gpu_check/bundle.tar.xz (git-ignored; about
#                                  20 MiB: carry it to the GPU machine)
#   scripts/gpu_check.sh [run]     on the GPU machine, from the repository root
#                                  with .gpu_check/ beside it: builds the torch
#                                  plugin against that machine's torch, runs the
#                                  Go driver tests and scripts/gpu_check/, prints
#                                  one report; exit status 0 when all passed
#
# Environment: PYTHON (default python3), MC_GPU_CHECK_WORK (scratch folder,
# default /tmp/mc_gpu_check), OUT (if set, the report and JSON results are
# also written there). Extra arguments after "run" go to run_checks.py
# (e.g. --only te,store).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PREP=$ROOT/.gpu_check

prepare() {
    export PATH=$PATH:/usr/local/go/bin CGO_ENABLED=1 CGO_CFLAGS=-Wno-deprecated-declarations
    rm -rf "$PREP"
    local stage=$PREP/stage
    local pkg=$stage/pkg/mooncake
    mkdir -p "$pkg/lib" "$pkg/bin" "$stage/gotest"
    cp -r python/mooncake/. "$pkg/"
    rm -rf "$pkg/lib"/* "$pkg/bin"/* "$pkg"/_pg_ext*.so "$pkg"/_pg_build.py
    find "$pkg" -name __pycache__ -prune -exec rm -rf {} +
    # Stripped (-s -w): the carried tree must stay under the device tool's limit.
    go build -trimpath -buildmode=c-shared \
        -ldflags="-s -w -extldflags=-Wl,-soname,libmooncake.so" -o "$pkg/lib/libmooncake.so" ./capi
    rm -f "$pkg/lib/libmooncake.h"
    cp capi/mooncake.h "$pkg/lib/"
    go build -trimpath -ldflags="-s -w" -o "$pkg/bin/" ./cmd/mooncake ./cmd/mooncake_master
    go test -c -trimpath -ldflags="-s -w" -o "$stage/gotest/gpu.test" ./gpu
    go test -c -trimpath -ldflags="-s -w" -o "$stage/gotest/discovery.test" ./gpu/discovery
    go test -c -trimpath -ldflags="-s -w" -o "$stage/gotest/transfer.test" ./transfer
    # Packed: the carried tree must stay well under the device tool's 64 MiB.
    tar -C "$stage" -cJf "$PREP/bundle.tar.xz" pkg gotest
    rm -rf "$stage"
    ls -la "$PREP/bundle.tar.xz"
    echo "prepared $PREP: carry it with the tree and run scripts/gpu_check.sh there"
}

run() {
    local py=${PYTHON:-python3} work=${MC_GPU_CHECK_WORK:-/tmp/mc_gpu_check}
    if [ ! -f "$PREP/bundle.tar.xz" ]; then
        echo "gpu_check: $PREP/bundle.tar.xz is missing: run 'scripts/gpu_check.sh prepare' on the build machine and carry .gpu_check" >&2
        exit 2
    fi
    rm -rf "$work" && mkdir -p "$work"
    "$py" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        "$PREP/bundle.tar.xz" "$work"
    mv "$work/pkg" "$work/site"
    local gotest=$work/gotest
    echo "== GPU"
    nvidia-smi -L || echo "nvidia-smi: not available"
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())'
    echo "== torch plugin, built against this machine's torch"
    MAX_JOBS=${MAX_JOBS:-8} "$py" torch_plugin/build_ext.py --lib-dir "$work/site/mooncake/lib" \
        --include-dir capi --out-dir "$work/site/mooncake" --build-temp "$work/build" \
        > "$work/plugin.log" 2>&1 || { tail -50 "$work/plugin.log"; exit 1; }
    ls "$work/site/mooncake"/_pg_ext*.so
    export PYTHONPATH=$work/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
    local status=0
    echo "== Go against the real GPU: the CUDA driver loaded at run time, NVML discovery,"
    echo "   and the engine's device transfers (each test runs on the fake and the real device)"
    { "$gotest/gpu.test" -test.count=1 -test.v \
        -test.run 'TestRangeAndCopy|TestStagedStreams|TestSystemWithoutCUDA' &&
      "$gotest/discovery.test" -test.count=1 -test.v -test.run 'TestDiscover' &&
      "$gotest/transfer.test" -test.count=1 -test.v -test.run 'TestDevice|TestLocalTopology'; } \
        > "$work/go.log" 2>&1 || status=1
    grep -E '^ *(--- |PASS|FAIL|ok)' "$work/go.log" || true
    [ $status = 0 ] || tail -40 "$work/go.log"
    echo "== Python checks"
    local json=()
    [ -n "${OUT:-}" ] && json=(--json "$OUT/gpu_check.json")
    "$py" scripts/gpu_check/run_checks.py --device cuda --require-device "${json[@]}" "$@" \
        2>&1 | tee "$work/report.txt" || status=1
    [ -n "${OUT:-}" ] && cp "$work/report.txt" "$work/go.log" "$OUT/" || true
    echo "== gpu_check: $([ $status = 0 ] && echo ALL PASSED || echo FAILED)"
    exit $status
}

case "${1:-run}" in
    prepare) prepare ;;
    run) shift || true; run "$@" ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' ;;
    *) echo "usage: scripts/gpu_check.sh [prepare|run [run_checks.py args]]" >&2; exit 2 ;;
esac
