package cmd

import (
	"os"
	"testing"

	"github.com/leasectl/leasectl/internal/testenv"
)

// TestMain removes the binary that the CLI tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}
