package memory_test

import (
	"testing"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/durabilitytest"
	"github.com/botrun/botrun/durability/memory"
)

func TestConformance(t *testing.T) {
	durabilitytest.Run(t, func(t *testing.T) durability.Backend { return memory.New() })
}
