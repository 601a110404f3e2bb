package main

import (
	"os"
	"strings"
	"testing"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/provider"
)

// section returns the part of md from the heading line to the next heading
// of the same or a higher level.
func section(t *testing.T, md, heading string) string {
	t.Helper()
	i := strings.Index(md, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README.md has no %q section", heading)
	}
	rest := md[i+len(heading)+2:]
	level := heading[:strings.IndexByte(heading, ' ')+1]
	for j := 0; j < len(rest); {
		k := strings.Index(rest[j:], "\n#")
		if k < 0 {
			break
		}
		line := rest[j+k+1:]
		if h := line[:strings.IndexAny(line, " \n")+1]; len(h) <= len(level) && strings.Trim(h, "# ") == "" {
			return rest[:j+k]
		}
		j += k + 1
	}
	return rest
}

// TestREADMENamesEveryPlugin: the README documents every channel type and
// every backend this program registers, so adding one without its docs fails.
func TestREADMENamesEveryPlugin(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	channels := section(t, md, "## Channels")
	for _, typ := range provider.Types() {
		if !strings.Contains(channels, "`type = \""+typ+"\"`") && !strings.Contains(channels, "- `"+typ+"`:") {
			t.Errorf("README.md's Channels section does not document type %q (a heading with (`type = %q`) or an item \"- `%s`:\")", typ, typ, typ)
		}
	}
	backends := section(t, md, "### Backends")
	for _, name := range durability.Drivers() {
		if !strings.Contains(backends, "| `"+name+"`") {
			t.Errorf("README.md's Backends table has no row for %q", name)
		}
	}
	if len(provider.Types()) < 5 || len(durability.Drivers()) < 5 {
		t.Errorf("cmd/botrun registers %v and %v; the built-in set is larger", provider.Types(), durability.Drivers())
	}
}
