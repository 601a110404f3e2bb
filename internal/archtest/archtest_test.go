package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// module is the main module's path; the patterns below are relative to it.
const module = "github.com/botrun/botrun"

// rule forbids the packages matching from to depend, directly or through
// other packages, on a package matching any of forbidden. A pattern is a
// package path relative to the module: "host" is that package alone,
// "host/..." is host and every package below it. Test files count: a test
// that imports a forbidden package ties the layers together as much as the
// code does.
type rule struct {
	from      string
	forbidden []string
	why       string
}

// rules is the architecture. To add a rule, add a row; to add a module (a
// go.mod of its own) to check, add it to modules.
var rules = []rule{
	{from: "durability/...", forbidden: []string{"host/..."},
		why: "durability is the storage layer below the host: the host uses it, never the reverse"},
	{from: "abi/...", forbidden: []string{"host/..."},
		why: "abi is the guest-host contract, shared by both sides: it cannot depend on one side"},
	{from: "eventjournal/...", forbidden: []string{"host/..."},
		why: "the event journal is a library usable without any bot: the host uses it, never the reverse"},
	{from: "host/channel/...", forbidden: []string{"host", "host/internal/...", "host/ops", "host/admin/...", "host/dryrun"},
		why: "the channels and their SPI sit beside the host's internals: the host wires them, they never reach into it"},
	{from: "host/internal/...", forbidden: []string{"host", "host/ops", "host/admin/...", "host/dryrun"},
		why: "the host's internal packages are the parts the root package assembles: calls run down into them, never back up"},
	{from: "host/ops", forbidden: []string{"host", "host/admin/..."},
		why: "the operator serves both the CLI (no running bot) and the admin API: it reaches a running bot only through what is handed to it"},
	{from: "host/wasm/...", forbidden: []string{"host", "host/internal/...", "host/channel/..."},
		why: "the engine knows the ABI, not the runtime around it"},
	{from: "host/wasm/internal/...", forbidden: []string{"host/wasm"},
		why: "the engine's parts (the host functions) are what the engine assembles: calls run down into them, never back up"},
	{from: "host/config/...", forbidden: []string{"host", "host/internal/..."},
		why: "the config is read before anything is built: it knows the registries, not what they build"},
	{from: "guest-sdk/...", forbidden: []string{"host/..."},
		why: "a guest SDK is compiled into the guest's WebAssembly module: nothing of the host belongs there"},
}

// modules are the directories (relative to the repository's root) whose
// packages are listed, each with the environments to list them in: the Go
// guest SDK has files for wasip1/wasm only.
var modules = []struct {
	dir  string
	envs [][]string
}{
	{dir: ".", envs: [][]string{nil}},
	{dir: "guest-sdk/go", envs: [][]string{{"GOWORK=off"}, {"GOWORK=off", "GOOS=wasip1", "GOARCH=wasm"}}},
}

func TestImportRules(t *testing.T) {
	if testing.Short() {
		t.Skip("lists every package with go list")
	}
	root := repoRoot(t)
	checked := 0
	for _, m := range modules {
		for _, env := range m.envs {
			g := listPackages(t, filepath.Join(root, m.dir), env)
			for _, v := range violations(g) {
				t.Errorf("%s (module %s %s)", v, m.dir, strings.Join(env, " "))
			}
			checked += len(g)
		}
	}
	t.Logf("%d package listings checked against %d rules", checked, len(rules))
}

// TestRulesCatchAForbiddenImport checks the checker on a made-up graph: a
// rule that matches nothing would pass forever.
func TestRulesCatchAForbiddenImport(t *testing.T) {
	g := graph{
		"github.com/botrun/botrun/durability/file": {"github.com/botrun/botrun/durability", "os"},
		"github.com/botrun/botrun/durability":      {"github.com/botrun/botrun/host/config"},
		"github.com/botrun/botrun/durability/x":    {"github.com/botrun/botrun/internal/y"},
		"github.com/botrun/botrun/internal/y":      {"github.com/botrun/botrun/host/wasm"},
		"github.com/botrun/botrun/host/wasm":       {"github.com/botrun/botrun/abi"},
		"github.com/botrun/botrun/abi":             nil,
		"github.com/botrun/botrun/host/config":     nil,
		"github.com/botrun/botrun/host/channel/x":  {"github.com/botrun/botrun/host/channel"},
		"github.com/botrun/botrun/host/channel":    {"github.com/botrun/botrun/durability"},
		"github.com/botrun/botrun/host/internal/y": {"github.com/botrun/botrun/host/internal/z"},
		"github.com/botrun/botrun/host/internal/z": {"github.com/botrun/botrun/host"},
		"github.com/botrun/botrun/host":            nil,
		"os":                                       nil,
	}
	got := violations(g)
	// durability/file is not named: its forbidden import is durability's,
	// reported once, at durability. The channel reaches host/config, not
	// the host's root or internals: allowed.
	want := []string{
		"github.com/botrun/botrun/durability imports github.com/botrun/botrun/host/config",
		"github.com/botrun/botrun/durability/x imports github.com/botrun/botrun/internal/y -> github.com/botrun/botrun/host/wasm",
		"github.com/botrun/botrun/host/internal/z imports github.com/botrun/botrun/host",
	}
	if len(got) != len(want) {
		t.Fatalf("violations = %q, want %d starting with %q", got, len(want), want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]+": ") {
			t.Errorf("violation %d = %q, want it to start with %q", i, got[i], want[i])
		}
	}
}

// graph maps a package (a test variant folded into its package) to the
// packages it imports.
type graph map[string][]string

// violations lists, sorted, every package that breaks a rule, with the chain
// of imports that reaches the forbidden package and the rule's reason.
func violations(g graph) []string {
	var out []string
	for pkg := range g {
		for _, r := range rules {
			if !matches(r.from, pkg) {
				continue
			}
			if chain := findChain(g, pkg, r); chain != nil {
				out = append(out, fmt.Sprintf("%s imports %s: forbidden by the rule %q may not import %q: %s",
					pkg, strings.Join(chain, " -> "), r.from, r.forbidden, r.why))
			}
		}
	}
	sort.Strings(out)
	return out
}

// findChain returns the shortest chain of imports from pkg (excluded) to a
// package forbidden by r, or nil when there is none. The chain does not go
// through the other packages r applies to: each of those is reported on its
// own, so that one forbidden import is one line, at the package that has it.
func findChain(g graph, pkg string, r rule) []string {
	prev := map[string]string{pkg: ""}
	queue := []string{pkg}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, imp := range g[p] {
			if _, seen := prev[imp]; seen {
				continue
			}
			prev[imp] = p
			for _, f := range r.forbidden {
				if matches(f, imp) {
					var chain []string
					for q := imp; q != pkg; q = prev[q] {
						chain = append([]string{q}, chain...)
					}
					return chain
				}
			}
			if !matches(r.from, imp) {
				queue = append(queue, imp)
			}
		}
	}
	return nil
}

// matches reports whether the package path p is matched by pattern (relative
// to the module; "x/..." is x and everything below it).
func matches(pattern, p string) bool {
	rel, ok := strings.CutPrefix(p, module+"/")
	if !ok {
		return false
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == base || strings.HasPrefix(rel, base+"/")
	}
	return rel == pattern
}

// listPackages runs `go list -e -deps -test -json ./...` in dir and returns the
// import graph, test variants ("p [p.test]", "p_test", "p.test") folded into
// their package so that a test's imports count as the package's.
func listPackages(t *testing.T, dir string, env []string) graph {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-deps", "-test", "-json", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v: %s", dir, err, stderr.Bytes())
	}
	g := graph{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list in %s: decoding its output: %v", dir, err)
		}
		name := fold(p.ImportPath)
		for _, imp := range p.Imports {
			if f := fold(imp); f != name {
				g[name] = append(g[name], f)
			}
		}
		if _, ok := g[name]; !ok {
			g[name] = nil
		}
	}
	return g
}

// fold maps a test variant to its package: "p [p.test]", "p_test" and
// "p.test" are all p.
func fold(importPath string) string {
	p, _, _ := strings.Cut(importPath, " ")
	p = strings.TrimSuffix(p, ".test")
	return strings.TrimSuffix(p, "_test")
}

// repoRoot is the directory of the main module's go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatal("go env GOMOD: not in a module; run the test from the repository")
	}
	return filepath.Dir(gomod)
}
