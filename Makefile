# botrun: `make run` starts the example bot with a chat page; `make test` runs
# every test.
GO ?= go
GUEST_ENV = GOOS=wasip1 GOARCH=wasm GOWORK=off CGO_ENABLED=0
FUZZTIME ?= 3s

.PHONY: all build examples run test fuzz bench vet clean

all: build examples

build:
	$(GO) build -o bin/botrun ./cmd/botrun

examples/echo/echo.wasm: $(wildcard examples/echo/*.go examples/echo/go.mod guest-sdk/go/*.go guest-sdk/go/go.mod)
	cd examples/echo && $(GUEST_ENV) $(GO) build -buildmode=c-shared -o echo.wasm .

examples: examples/echo/echo.wasm

run: build examples
	./bin/botrun bot.toml.example

vet:
	$(GO) vet ./...
	cd guest-sdk/go && $(GO) vet ./... && $(GUEST_ENV) $(GO) vet ./...
	@test -z "$$(gofmt -l . | tee /dev/stderr)" || (echo "gofmt: the files above need formatting" && exit 1)

test: vet examples
	$(GO) test -race -count=1 ./...
	cd guest-sdk/go && $(GO) test -count=1 ./...
	$(MAKE) fuzz

fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeSendRequest$$' -fuzztime=$(FUZZTIME) ./abi
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) ./host/config
	$(GO) test -run='^$$' -fuzz='^FuzzDecodePost$$' -fuzztime=$(FUZZTIME) ./host/provider/webchat

bench: examples
	$(GO) test -run='^$$' -bench=. -benchtime=2s ./...

clean:
	rm -rf bin data examples/echo/echo.wasm
