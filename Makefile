# Slackline build. `make run` starts a local single-node cluster; `make test`
# runs every test (privileged ones too when run as root).
SHELL := /bin/bash
GO ?= go
BIN := bin
# Short fuzzing runs that `make test` includes (seconds per target).
FUZZTIME ?= 10s

.PHONY: all build generate check-generate test fuzz bench run lint clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/... ./examples/...

generate:
	rm -rf gen
	$(GO) tool buf generate

# Fails when a generated file is stale or missing: regenerates and asks git.
check-generate: generate
	@if [ -n "$$(git status --porcelain -- gen)" ]; then \
		echo "generated code is stale; run 'make generate' and commit:"; git status --porcelain -- gen; exit 1; \
	fi

test:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 15m ./...
	$(MAKE) fuzz

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./resources
	$(GO) test -run '^$$' -fuzz '^FuzzValidateLaunch$$' -fuzztime $(FUZZTIME) ./coordinator
	$(GO) test -run '^$$' -fuzz '^FuzzAllocator$$' -fuzztime $(FUZZTIME) ./coordinator/allocator

bench:
	$(GO) test -run '^$$' -bench . -benchmem -timeout 60m ./...
	$(GO) run ./scripts/bench/offerlatency
	$(GO) run ./scripts/bench/scale
	@if [ "$$(id -u)" = 0 ]; then $(GO) run ./scripts/bench/agent; else echo "bench: agent launch latency needs root; skipped"; fi

run: build
	./scripts/run-local.sh

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/'))" || { gofmt -l $$(git ls-files '*.go' | grep -v '^gen/'); exit 1; }
	$(GO) vet ./...
	$(GO) tool buf lint

clean:
	rm -rf $(BIN) .run
