package host

import (
	"go/build"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInternalPackagesNeverImportHost: calls run one way, down from the
// composition root (host) to the packages of one concept each under
// host/internal, and from those to durability, abi and the channel SPI;
// what an internal package tells the host goes through values handed to it
// at construction, never by importing host.
func TestInternalPackagesNeverImportHost(t *testing.T) {
	const root = "github.com/botrun/botrun/host"
	dirs, err := os.ReadDir("internal")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		pkg, err := build.ImportDir(filepath.Join("internal", d.Name()), 0)
		if err != nil {
			t.Fatalf("host/internal/%s: %v", d.Name(), err)
		}
		for _, imp := range append(pkg.Imports, pkg.TestImports...) {
			if imp == root || strings.HasPrefix(imp, root+"/admin") {
				t.Errorf("host/internal/%s imports %s: pass what it needs down at construction instead", d.Name(), imp)
			}
		}
	}
}
