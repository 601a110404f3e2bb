package wasm

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/botrun/botrun/abi"
)

// validate checks a compiled module against ABI v1 and names every problem.
func (e *Engine) validate(name string, cm wazero.CompiledModule) error {
	var problems []string
	exports := cm.ExportedFunctions()
	if _, ok := exports[abi.ExportMarker]; !ok {
		return fmt.Errorf("module %s is not a botrun ABI v1 module: missing export %q (build it with a botrun guest SDK; see abi/SPEC.md)", name, abi.ExportMarker)
	}
	if fn, ok := exports[abi.ExportOnEvent]; !ok {
		problems = append(problems, fmt.Sprintf("missing export %q", abi.ExportOnEvent))
	} else if got := signature(fn); got != "(i32) -> (i32)" {
		problems = append(problems, fmt.Sprintf("export %q has signature %s, want (i32) -> (i32)", abi.ExportOnEvent, got))
	}
	for _, hook := range []string{abi.ExportBeforeSend, abi.ExportAfterSend} {
		if fn, ok := exports[hook]; ok && signature(fn) != "(i32) -> (i32)" {
			problems = append(problems, fmt.Sprintf("export %q has signature %s, want (i32) -> (i32)", hook, signature(fn)))
		}
	}
	if _, ok := cm.ExportedMemories()[abi.ExportMemory]; !ok {
		problems = append(problems, fmt.Sprintf("missing export %q (the guest's linear memory)", abi.ExportMemory))
	}
	for _, mem := range cm.ImportedMemories() {
		mod, n, _ := mem.Import()
		problems = append(problems, fmt.Sprintf("imports memory %q.%q; a guest must define and export its own memory", mod, n))
	}
	for _, fn := range cm.ImportedFunctions() {
		mod, n, _ := fn.Import()
		funcs, ok := e.known[mod]
		if !ok {
			problems = append(problems, fmt.Sprintf("unknown import %q.%q (unknown module %q; known: %s)", mod, n, mod, strings.Join(e.modules(), ", ")))
			continue
		}
		want, ok := funcs[n]
		if !ok {
			problems = append(problems, fmt.Sprintf("unknown import %q.%q (known in %q: %s)", mod, n, mod, strings.Join(sortedKeys(funcs), ", ")))
			continue
		}
		if got, w := signature(fn), signature(want); got != w {
			problems = append(problems, fmt.Sprintf("import %q.%q has signature %s, want %s", mod, n, got, w))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("module %s: %s", name, strings.Join(problems, "; "))
	}
	return nil
}

func (e *Engine) modules() []string {
	return sortedKeys(e.known)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func signature(fn api.FunctionDefinition) string {
	names := func(ts []api.ValueType) string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = api.ValueTypeName(t)
		}
		return strings.Join(s, ", ")
	}
	return "(" + names(fn.ParamTypes()) + ") -> (" + names(fn.ResultTypes()) + ")"
}
