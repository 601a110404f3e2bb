package registry

import (
	"slices"
	"testing"
)

func TestRegistry(t *testing.T) {
	r := New[int]("thing")
	r.Register("b", 2)
	r.Register("a", 1)
	if v, ok := r.Lookup("b"); !ok || v != 2 {
		t.Fatalf("Lookup(b) = %d, %v", v, ok)
	}
	if _, ok := r.Lookup("c"); ok {
		t.Fatal("Lookup(c) found a thing never registered")
	}
	if got := r.Names(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Names() = %v", got)
	}
	for _, name := range []string{"a", ""} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", name)
				}
			}()
			r.Register(name, 9)
		}()
	}
}
