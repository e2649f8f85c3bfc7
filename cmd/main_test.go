package cmd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/internal/testenv"
)

// TestMain removes the binary that the CLI tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

// reportError prints err as one line on stderr, unless its message is empty,
// and returns the exit code.
func reportError(w io.Writer, err error) int {
	code := exitCode(err)
	if err != nil {
		var ee *exitError
		if !errors.As(err, &ee) || ee.err != nil {
			msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", " ")
			fmt.Fprintf(w, "leasectl: %s\n", msg)
		}
	}
	return code
}
