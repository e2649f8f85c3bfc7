//go:build unix && !(linux && !mips && !mipsle && !mips64 && !mips64le)

package watchdog

import "os/signal"

// ignoreSignals ignores the signals forwarded to the group.
func ignoreSignals() error {
	for _, s := range forwarded {
		signal.Ignore(s)
	}
	return nil
}
