# Mooncake-Go developer entry points. See docs/build.md.
#
#   make demo    set up, then run demo/demo.py
#   make demo-cluster  set up, then run the main demo job across two hosts
#                (network namespaces; needs root): demo/demo_cluster.py
#   make test    set up, then go vet, go test -race, the fuzzers briefly, pytest
#   make faults  the fault tests repeated under load (scripts/faults.sh)
#   make test-torch-next  the plugin built against the newest torch, and the
#                collectives and EP tests run against it (scripts/torch_next.sh)
#   make fuzz    every Go fuzz target for longer (FUZZTIME, default 60s)
#   make setup   scripts/setup.sh: etcd/redis, .venv, build + install the package
#   make build   go build ./... and (re)install the Python package
#   make lint    gofmt, go vet, ruff
#   make bench   benchmarks/run_all.sh
#   make proto   regenerate kvstore/masterpb from kvstore/proto (needs protoc)
#   make clean   remove build outputs (keeps .venv)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

export PATH := $(PATH):/usr/local/go/bin
export CGO_CFLAGS := -Wno-deprecated-declarations

GO ?= go
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: all setup build lint test test-torch-next faults fuzz demo demo-cluster bench proto clean

all: build

setup:
	scripts/setup.sh

build:
	$(GO) build ./...
	scripts/setup.sh

lint: setup
	@out="$$(gofmt -l $$($(GO) list -f '{{.Dir}}' ./...))"; \
	if [ -n "$$out" ]; then echo "gofmt: these files need formatting:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(VENV)/bin/ruff check $(wildcard python tests benchmarks)

test: setup
	$(GO) vet ./...
	$(GO) test -race -timeout 20m ./...
	FUZZTIME=3s scripts/fuzz.sh
	@rc=0; $(PY) -m pytest -q --durations=25 -m "not long" tests || rc=$$?; \
	if [ $$rc -eq 5 ] && [ -z "$$(find tests -name 'test_*.py' -o -name '*_test.py')" ]; then \
		echo "pytest: no Python test files in tests/ yet"; rc=0; \
	fi; \
	exit $$rc

faults: setup
	scripts/faults.sh

test-torch-next:
	scripts/torch_next.sh

fuzz:
	FUZZTIME=$${FUZZTIME:-60s} scripts/fuzz.sh

demo: setup
	$(PY) demo/demo.py

demo-cluster: setup
	$(PY) demo/demo_cluster.py

bench: setup
	@if [ -f benchmarks/run_all.sh ]; then bash benchmarks/run_all.sh; \
	else echo "bench: benchmarks/run_all.sh does not exist yet"; fi

# Code generators, pinned; installed into build/tools on first use.
TOOLS := $(CURDIR)/build/tools
PROTOC_GEN_GO := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1

proto:
	@command -v protoc >/dev/null || { echo "proto: protoc missing (apt-get install protobuf-compiler)"; exit 1; }
	GOBIN=$(TOOLS) $(GO) install $(PROTOC_GEN_GO)
	GOBIN=$(TOOLS) $(GO) install $(PROTOC_GEN_GO_GRPC)
	PATH=$(TOOLS):$$PATH protoc -I kvstore/proto \
		--go_out=kvstore/masterpb --go_opt=paths=source_relative \
		--go-grpc_out=kvstore/masterpb --go-grpc_opt=paths=source_relative \
		kvstore/proto/master.proto kvstore/proto/disk.proto
	PATH=$(TOOLS):$$PATH protoc -I backend/proto \
		--go_out=backend/coordpb --go_opt=paths=source_relative \
		--go-grpc_out=backend/coordpb --go-grpc_opt=paths=source_relative \
		backend/proto/coordinator.proto

clean:
	rm -rf build dist python/mooncake/lib python/mooncake/bin .pytest_cache .ruff_cache
	find . \( -path ./$(VENV) -o -path ./$(VENV)-torch-next \) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
