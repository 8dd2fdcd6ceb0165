# Slackline build. `make run` starts a local single-node cluster; `make test`
# runs every test (privileged ones too when run as root).
SHELL := /bin/bash
GO ?= go
BIN := bin
# Short fuzzing runs that `make test` includes (seconds per target).
FUZZTIME ?= 10s

.PHONY: all build generate check-generate test fuzz bench run lint clean

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

# The eBPF accuracy tests compare latencies with and without contention, so
# they run alone first; everything else runs in parallel afterwards.
test:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 10m ./bpf/...
	$(GO) test -count=1 -timeout 15m $$($(GO) list ./... | grep -v '/bpf')
	$(MAKE) fuzz

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./resources
	$(GO) test -run '^$$' -fuzz '^FuzzValidateLaunch$$' -fuzztime $(FUZZTIME) ./coordinator
	$(GO) test -run '^$$' -fuzz '^FuzzAllocator$$' -fuzztime $(FUZZTIME) ./coordinator/allocator

bench:
	$(GO) test -run '^$$' -bench . -benchmem -timeout 60m ./...
	$(GO) run ./scripts/bench/offerlatency
	$(GO) run ./scripts/bench/scale
	$(GO) run ./cmd/slackline-backtest run
	@if [ "$$(id -u)" = 0 ]; then \
		$(GO) run ./scripts/bench/agent && \
		$(GO) run ./scripts/bench/slack --trials 5 -- --monitor-interval 100ms --estimator-window 2s --estimator-peak-half-life 500ms && \
		$(GO) run ./scripts/bench/colocation --out colocation.png; \
	else echo "bench: the agent, slack and colocation benchmarks need root; skipped"; fi

run: build
	./scripts/run-local.sh

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/'))" || { gofmt -l $$(git ls-files '*.go' | grep -v '^gen/'); exit 1; }
	$(GO) vet ./...
	$(GO) tool buf lint

clean:
	rm -rf $(BIN) .run
