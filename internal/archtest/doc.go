// Package archtest holds the architecture test: the import rules between
// botrun's layers (durability and abi below the host, the channels and their
// SPI beside the host's internals, the guest SDKs apart from the host),
// checked against `go list -deps` so that a forbidden import fails
// `go test ./...` instead of waiting for a reviewer. The package has no
// code of its own; the rule table is in archtest_test.go.
package archtest
