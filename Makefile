# botrun: `make run` starts the example bot with a chat page; `make test` runs
# every test.
GO ?= go
GUEST_ENV = GOOS=wasip1 GOARCH=wasm GOWORK=off CGO_ENABLED=0
# A count, not a duration: a duration-based -fuzztime races the fuzz
# coordinator's own deadline on a loaded machine and fails with "context
# deadline exceeded" without any failing input (golang/go#75804, fixed in
# Go 1.27).
FUZZTIME ?= 20000x

.PHONY: all build install examples available-examples run test soak fuzz bench bench-peers bench-dryrun vet clean

all: build examples

build:
	$(GO) build -o bin/botrun ./cmd/botrun

# botrun on your PATH: go install puts it in $(go env GOBIN), else $(go env GOPATH)/bin.
install:
	$(GO) install ./cmd/botrun
	@dir=$$($(GO) env GOBIN); dir=$${dir:-$$($(GO) env GOPATH)/bin}; \
		echo "installed $$dir/botrun"; \
		case ":$$PATH:" in *":$$dir:"*) ;; *) echo "$$dir is not on your PATH: add it (export PATH=\"$$dir:\$$PATH\")";; esac

examples/echo/echo.wasm: $(wildcard examples/echo/*.go examples/echo/go.mod guest-sdk/go/*.go guest-sdk/go/go.mod)
	cd examples/echo && $(GUEST_ENV) $(GO) build -trimpath -buildmode=c-shared -o echo.wasm .

examples/flow/flow.wasm: $(wildcard examples/flow/*.go examples/flow/go.mod guest-sdk/go/*.go guest-sdk/go/go.mod)
	cd examples/flow && $(GUEST_ENV) $(GO) build -trimpath -buildmode=c-shared -o flow.wasm .

examples/buttons/buttons.wasm: $(wildcard examples/buttons/*.go examples/buttons/go.mod guest-sdk/go/*.go guest-sdk/go/go.mod)
	cd examples/buttons && $(GUEST_ENV) $(GO) build -trimpath -buildmode=c-shared -o buttons.wasm .

examples/orders/orders.wasm: $(wildcard examples/orders/*.go examples/orders/go.mod guest-sdk/go/*.go guest-sdk/go/go.mod)
	cd examples/orders && $(GUEST_ENV) $(GO) build -trimpath -buildmode=c-shared -o orders.wasm .

examples/assistant/assistant.wasm: $(wildcard examples/assistant/*.go examples/assistant/go.mod guest-sdk/go/*.go guest-sdk/go/go.mod)
	cd examples/assistant && $(GUEST_ENV) $(GO) build -trimpath -buildmode=c-shared -o assistant.wasm .

C_GUEST = clang --target=wasm32-wasi --sysroot=/usr -O2 -mexec-model=reactor -Wl,--strip-debug -Wall -Werror -I guest-sdk/c
examples/c-echo/echo.wasm: examples/c-echo/echo.c guest-sdk/c/botrun.c guest-sdk/c/botrun.h
	$(C_GUEST) -o $@ examples/c-echo/echo.c guest-sdk/c/botrun.c

examples/c-flow/flow.wasm: examples/c-flow/flow.c guest-sdk/c/botrun.c guest-sdk/c/botrun.h
	$(C_GUEST) -o $@ examples/c-flow/flow.c guest-sdk/c/botrun.c

RUSTC = /usr/bin/rustc --edition 2021 --target wasm32-unknown-unknown -C opt-level=s -C panic=abort
guest-sdk/rust/libbotrun.rlib: $(wildcard guest-sdk/rust/src/*.rs)
	$(RUSTC) --crate-type=rlib --crate-name botrun -o $@ guest-sdk/rust/src/lib.rs

examples/rust-%/echo.wasm examples/rust-%/flow.wasm: guest-sdk/rust/libbotrun.rlib
	$(RUSTC) --crate-type=cdylib -C strip=debuginfo -D warnings --extern botrun=$< -o $@ $(dir $@)src/lib.rs

examples/rust-buttons/buttons.wasm: guest-sdk/rust/libbotrun.rlib examples/rust-buttons/src/lib.rs
	$(RUSTC) --crate-type=cdylib -C strip=debuginfo -D warnings --extern botrun=$< -o $@ examples/rust-buttons/src/lib.rs

node_modules/.bin/asc: package.json
	npm install --no-audit --no-fund
	touch $@

examples/as-%/echo.wasm examples/as-%/flow.wasm: node_modules/.bin/asc $(wildcard guest-sdk/assemblyscript/assembly/*.ts)
	cd $(dir $@) && ../../node_modules/.bin/asc assembly/index.ts -o $(notdir $@) --optimize

# Every example (C needs clang and wasi-libc, Rust Debian's rustc with the
# wasm32 std, AssemblyScript npm: see .ci/run); make run needs only Go.
GO_EXAMPLES = examples/echo/echo.wasm examples/flow/flow.wasm examples/buttons/buttons.wasm examples/orders/orders.wasm examples/assistant/assistant.wasm
C_EXAMPLES = examples/c-echo/echo.wasm examples/c-flow/flow.wasm
RUST_EXAMPLES = examples/rust-echo/echo.wasm examples/rust-flow/flow.wasm examples/rust-buttons/buttons.wasm
AS_EXAMPLES = examples/as-echo/echo.wasm examples/as-flow/flow.wasm
examples: $(GO_EXAMPLES) $(C_EXAMPLES) $(RUST_EXAMPLES) $(AS_EXAMPLES)

# The examples this machine's toolchains can build; make test names each
# toolchain it skips (the Go tests that need it skip too, or fail under CI=true).
HAVE_C := $(shell command -v clang >/dev/null 2>&1 && command -v wasm-ld >/dev/null 2>&1 && test -d /usr/lib/wasm32-wasi && echo yes)
HAVE_RUST := $(shell test -x /usr/bin/rustc && test -d /usr/lib/rustlib/wasm32-unknown-unknown && echo yes)
HAVE_NPM := $(shell command -v npm >/dev/null 2>&1 && echo yes)
AVAILABLE_EXAMPLES = $(GO_EXAMPLES) $(if $(HAVE_C),$(C_EXAMPLES)) $(if $(HAVE_RUST),$(RUST_EXAMPLES)) $(if $(HAVE_NPM),$(AS_EXAMPLES))

available-examples: $(AVAILABLE_EXAMPLES)
	@$(if $(HAVE_C),,echo "make test: SKIPPING the C examples: clang, lld and wasi-libc are not installed (bash .ci/run installs them)")
	@$(if $(HAVE_RUST),,echo "make test: SKIPPING the Rust examples: Debian's rustc with libstd-rust-dev-wasm32 is not installed (bash .ci/run installs it)")
	@$(if $(HAVE_NPM),,echo "make test: SKIPPING the AssemblyScript examples: npm is not installed (bash .ci/run installs it)")

run: build examples/echo/echo.wasm
	./bin/botrun bot.toml.example

vet:
	$(GO) vet ./...
	cd guest-sdk/go && $(GO) vet ./... && $(GUEST_ENV) $(GO) vet ./...
	@test -z "$$(gofmt -l . | tee /dev/stderr)" || (echo "gofmt: the files above need formatting" && exit 1)

test: vet available-examples
	@start=$$(date +%s); $(GO) test -race -count=1 -timeout 45m ./...; rc=$$?; \
		echo "make test: go test -race ./... took $$(( $$(date +%s) - start )) s"; exit $$rc
	cd guest-sdk/go && $(GO) test -count=1 ./...
	$(MAKE) fuzz

# Longer runs than make test, under -race: 1,000 seeded random crash points
# per backend, the SIGKILL and failover tests, and the conformance suites'
# 42,000-record state lists on the journals that rewrite a whole snapshot per
# commit.
soak: examples
	BOTRUN_SOAK=1 $(GO) test -race -count=1 -timeout 90m -run 'CrashMatrix|SIGKILL|Failover|Partition|CutOff|FullDisk|ClockJumps' ./host/ ./cmd/botrun/
	BOTRUN_SOAK=1 $(GO) test -race -count=1 -timeout 30m -run 'FaultAtEveryOperation|RandomFaults' ./durability/file/
	BOTRUN_SOAK=1 $(GO) test -race -count=1 -timeout 90m -run 'Conformance|ClusterMasterKilled|ClusterPartition' ./durability/...

# Every parser of untrusted bytes has a fuzz target; each runs FUZZTIME inputs.
FUZZ_TARGETS = \
	./abi:FuzzDecodeSendRequest \
	./abi:FuzzDecodeBroadcastRequest \
	./abi:FuzzDecodeEditRequest \
	./abi:FuzzDecodeFetchRequest \
	./host/config:FuzzParse \
	./host/channel/webchat:FuzzDecodePost \
	./host/channel/httpchan:FuzzDecodeInbound \
	./host/channel/telegram:FuzzDecodeUpdate \
	./host/channel/metawhatsapp:FuzzDecodeNotification \
	./host/channel/twilio:FuzzDecodeWebhook \
	./host/channel/graph/messaging:FuzzDecodeNotification \
	./host/channel/discord:FuzzDecodeInteraction \
	./host/channel/discord:FuzzDecodePayload \
	./host/channel/gupshup:FuzzDecodeWebhook \
	./host/channel/gohighlevel:FuzzDecodeWebhook \
	./host/channel/tiktok:FuzzDecodeWebhook \
	./host/channel/tiktok:FuzzDecodeSignature \
	./host/channel/email:FuzzDecodeMessage \
	./host/channel/whatsappweb:FuzzDecodeMessage \
	./host/channel/whatsappweb:FuzzDecodeMediaRef \
	./host/channel/internal/gateway:FuzzDecodeMedia \
	./host/channel/evolution:FuzzDecodeWebhook \
	./host/channel/evolution:FuzzDecodeJWT \
	./host/channel/wppconnect:FuzzDecodeWebhook \
	./durability:FuzzDecodeInboxRecord \
	./durability:FuzzDecodeOutboxRecord \
	./durability/file:FuzzDecodeLog \
	./durability/file:FuzzDecodeSnapshot \
	./eventjournal:FuzzDecodeRecord \
	./durability/events:FuzzInboundEvent \
	./host/internal/fetch:FuzzJoinPath

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$name ($$pkg, $(FUZZTIME))"; \
		$(GO) test -run='^$$' -fuzz="^$$name$$" -fuzztime=$(FUZZTIME) $$pkg > /tmp/botrun-fuzz.log 2>&1 || { cat /tmp/botrun-fuzz.log; exit 1; }; \
	done
	cd guest-sdk/go && $(GO) test -run='^$$' -fuzz='^FuzzDecodeEvent$$' -fuzztime=$(FUZZTIME) .
	cd guest-sdk/go && $(GO) test -run='^$$' -fuzz='^FuzzDecodeFlow$$' -fuzztime=$(FUZZTIME) .

# botrun and its peer, the same echo bot built on River (bench/river, its own
# module), run alternately through HTTP on SQLite FULL and PostgreSQL; prints
# the ratios.
bench-peers: examples
	$(GO) test -run='^$$' -bench='^BenchmarkPeers$$' -benchtime=1x -timeout 60m ./bench/

# The real path first (HTTP in, webchat transcript out, per backend and worker
# count, latency at half load, 10,000 idle chats, a restart's backlog), then
# durable end-to-end messages/s on every backend (PostgreSQL and Redis with 1
# and 3 replicas: BOTRUN_TEST_POSTGRES_URL / BOTRUN_TEST_REDIS_URL, or servers
# started from the machine's binaries), and the Go guest's share; docs/performance.md
# quotes these.
bench: examples
	$(GO) test -run='^$$' -bench='^BenchmarkRealPath$$' -benchtime=1x -timeout 60m ./bench/
	$(GO) test -run='^$$' -bench='^BenchmarkRestartBacklog$$' -benchtime=1x ./host/
	$(GO) test -run='^$$' -bench='^BenchmarkDurableEcho$$' -benchtime=20000x ./host/
	$(GO) test -run='^$$' -bench='^BenchmarkReplicas$$' -benchtime=10000x ./host/
	$(GO) test -run='^$$' -bench='^BenchmarkFetch$$' -benchtime=2000x ./host/
	$(GO) test -run='^$$' -bench='^BenchmarkFetchWaits$$' -benchtime=1x ./host/
	$(GO) test -run='^$$' -bench='^BenchmarkReloadLatency$$' -benchtime=5x ./host/
	$(GO) test -run='^$$' -bench=. -benchtime=20000x ./host/wasm/
	$(GO) test -run='^$$' -bench='^BenchmarkWebhook$$' ./host/channel/telegram/ ./host/channel/metawhatsapp/ ./host/channel/twilio/ ./host/channel/discord/
	$(MAKE) bench-dryrun

# botrun replay --dry-run's engine: 10,000 journaled records (SQLite, read
# only) through the C echo guest; docs/performance.md quotes it.
bench-dryrun:
	$(GO) test -run='^$$' -bench='^BenchmarkDryRun10k$$' -benchtime=1x ./host/dryrun/

clean:
	rm -rf bin data examples/*/*.wasm guest-sdk/rust/libbotrun.rlib
