# Slackline build. `make run` starts a local single-node cluster; `make test`
# runs every test (privileged ones too when run as root), fuzz seed corpora
# included; `make fuzz` runs timed fuzzing; `make lint` the static checks.
SHELL := /bin/bash
GO ?= go
BIN := bin
# Length of each target's run in `make fuzz` (timed fuzzing is never part of
# `make test`: the fuzzing engine can time out on a loaded machine).
FUZZTIME ?= 10s

.PHONY: all build generate check-generate test test-vm test-vm-cluster fuzz bench run lint clean

# eBPF objects (bpf/*_bpfel.o and .go) are built by bpf2go with this pinned
# clang (Debian bookworm's clang-14) and flags; the outputs are committed.
BPF_CLANG ?= clang-14
BPF_STRIP ?= llvm-strip-14
BPF_CFLAGS ?= -O2 -g -Wall -Werror

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/... ./examples/...

generate:
	rm -rf gen
	$(GO) tool buf generate
	@if command -v $(BPF_CLANG) >/dev/null 2>&1; then \
		BPF2GO_CC=$(BPF_CLANG) BPF2GO_STRIP=$(BPF_STRIP) BPF2GO_CFLAGS="$(BPF_CFLAGS)" $(GO) generate ./bpf/...; \
	else \
		echo "generate: $(BPF_CLANG) not found: eBPF objects not regenerated (apt-get install clang-14 llvm-14)"; \
	fi

# Fails when a generated file is stale or missing: regenerates and asks git.
# Needs the pinned clang, so that the eBPF objects are checked too.
check-generate:
	@command -v $(BPF_CLANG) >/dev/null 2>&1 || { echo "check-generate needs $(BPF_CLANG) (apt-get install clang-14 llvm-14)"; exit 1; }
	$(MAKE) generate
	@if [ -n "$$(git status --porcelain -- gen bpf)" ]; then \
		echo "generated code is stale; run 'make generate' and commit:"; git status --porcelain -- gen bpf; exit 1; \
	fi

# The eBPF accuracy tests compare latencies with and without contention, and
# the network QoS tests measure throughput, so they run alone first;
# everything else runs in parallel afterwards. Plain `go test` runs every
# Fuzz target's seed corpus (f.Add and testdata/fuzz). Then the packages
# whose goroutines share state (the daemons' cores, sessions, the monitor,
# the bpf package's concurrent reads) run again under the race detector:
# the slow measuring packages (bpf's accuracy studies, network, the
# containerizer, e2e) are left out for time.
RACE_PACKAGES ?= ./agent ./agent/monitor ./agent/history ./agent/session ./agent/shadow ./agent/settings \
	./coordinator ./coordinator/core ./coordinator/allocator ./coordinator/profiles ./coordinator/leader \
	./coordinator/store ./jobs ./jobs/service ./internal/server ./internal/auth ./internal/leaderclient \
	./frameworkapi ./sim ./qos
test:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 15m -p 1 ./bpf/... ./agent/network/...
	$(GO) test -count=1 -timeout 15m $$($(GO) list ./... | grep -v -e '/bpf' -e '/agent/network')
	$(GO) test -race -count=1 -timeout 15m $(RACE_PACKAGES)
	$(GO) test -race -count=1 -timeout 5m -run '^TestStatsBesideFullReads$$' ./bpf

# The privileged tests of the cgroup v2 and eBPF code paths in pure cgroup
# v2 guests (QEMU, Debian's 6.1 and 6.12 kernels; docs/vm.md): builds the
# guests' assets once (cached), checks the harness (again only when it or
# the assets changed), then runs each package's
# static test binary in a guest per kernel. Needs root. VM_QUICK=1 (CI)
# leaves out the long accuracy studies listed in scripts/vm/skip.
VM_KERNELS ?= 6.1 6.12
VM_PACKAGES ?= ./agent/containerizer/... ./agent/monitor ./qos ./bpf/... ./agent/network
VM_QUICK ?=
test-vm:
	scripts/vm/setup
	scripts/vm/selftest --once
	scripts/vm/test --kernels "$(VM_KERNELS)" $(if $(VM_QUICK),--quick) $(VM_PACKAGES)

# Several hosts (docs/vm.md): the coordinator on this host, agents in two
# guests (6.1 and 6.12) on a private link; static binaries built into bin/,
# which the guests run from the repository's share. Needs root.
test-vm-cluster:
	scripts/vm/setup
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ ./cmd/... ./examples/...
	SLACKLINE_VM_CLUSTER=1 SLACKLINE_E2E_BIN_DIR=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 30m -v -run '^TestVMCluster$$' ./e2e

# Timed fuzzing, one target at a time (go test -fuzz takes one package).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./resources
	$(GO) test -run '^$$' -fuzz '^FuzzValidateLaunch$$' -fuzztime $(FUZZTIME) ./coordinator
	$(GO) test -run '^$$' -fuzz '^FuzzAllocator$$' -fuzztime $(FUZZTIME) ./coordinator/allocator
	$(GO) test -run '^$$' -fuzz '^FuzzEstimateBounds$$' -fuzztime $(FUZZTIME) ./estimator

bench:
	$(GO) test -run '^$$' -bench . -benchmem -timeout 60m ./...
	$(GO) run ./scripts/bench/offerlatency
	$(GO) run ./scripts/bench/auth
	$(GO) run ./scripts/bench/scale
	$(GO) run ./scripts/bench/jobs
	$(GO) run ./cmd/slackline-backtest run
	@if [ "$$(id -u)" = 0 ]; then \
		$(GO) run ./scripts/bench/agent && \
		$(GO) run ./scripts/bench/slack --trials 20 && \
		$(GO) run ./scripts/bench/colocation --out colocation.png && \
		$(GO) run ./scripts/bench/network; \
	else echo "bench: the agent, slack, colocation and network benchmarks need root; skipped"; fi

# Builds only what it runs (with progress), then starts the cluster.
run:
	GO=$(GO) ./scripts/run-local.sh

# Static checks: gofmt (generated code excluded), vet, buf lint and
# staticcheck (pinned in go.mod's tool block, default checks).
lint:
	@unformatted="$$(find . \( -path './.*' -o -path ./gen \) -prune -o -name '*.go' -not -name '*_bpfel.go' -print0 | xargs -0 gofmt -l)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt -l: these files need gofmt -w:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool buf lint
	$(GO) tool staticcheck ./...

clean:
	rm -rf $(BIN) .run
