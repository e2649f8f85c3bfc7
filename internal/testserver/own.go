package testserver

import "testing"

// Own fails t when what it started came with err, and otherwise stops it
// when t ends, failing t if it cannot: a server of one test's own.
func Own[S Server](t testing.TB, started S, err error) S {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := started.Stop(); err != nil {
			t.Error(err)
		}
	})
	return started
}
