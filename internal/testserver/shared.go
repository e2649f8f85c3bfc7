package testserver

import (
	"fmt"
	"os"
	"slices"
	"testing"
)

// Server is a test server that can be stopped.
type Server interface{ Stop() error }

// Shared is a server a test package's tests share: Run starts it before
// they run and stops it after; each test gets it with Get.
type Shared[S Server] struct {
	what    string
	start   func() (S, error)
	owned   bool // Run stops it
	started bool // Run started it (or tried)
	srv     S
	err     error // why it could not be started
}

// Share is a server that start starts with opts once, when Run is called;
// what names it in the failure of a test that needs it and did not get it.
func Share[S Server, O any](what string, start func(O) (S, error), opts O) *Shared[S] {
	return &Shared[S]{what: what, start: func() (S, error) { return start(opts) }, owned: true}
}

// Borrow is a server another process started and stops, such as a parent
// test process's, which the tests share as they would one of their own.
func Borrow[S Server](what string, srv S) *Shared[S] {
	return &Shared[S]{what: what, start: func() (S, error) { return srv, nil }}
}

// Get returns the server, failing t when it could not be started.
func (s *Shared[S]) Get(t testing.TB) S {
	t.Helper()
	if !s.started {
		t.Fatalf("%s: not started: the package's TestMain must pass it to testserver.Run", s.what)
	}
	if s.err != nil {
		t.Fatalf("%s: %v", s.what, s.err)
	}
	return s.srv
}

func (s *Shared[S]) up() {
	s.srv, s.err = s.start()
	s.started = true
}

func (s *Shared[S]) down() {
	if s.err != nil || !s.owned {
		return
	}
	if err := s.srv.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}

// Lifecycle is a Shared server as Run sees it.
type Lifecycle interface {
	up()
	down()
}

// Run starts the servers in order, runs the package's tests, stops the
// servers it started in the reverse order (one started after another may
// depend on it) and returns the tests' exit code, for TestMain to exit
// with. A server that could not be started fails only the tests that Get
// it.
func Run(m *testing.M, servers ...Lifecycle) int {
	for _, s := range servers {
		s.up()
	}
	defer func() {
		for _, s := range slices.Backward(servers) {
			s.down()
		}
	}()
	return m.Run()
}
