package redistest

import (
	"net"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/testserver"
)

func start(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := Start(opts)
	return testserver.Own(t, s, err)
}

func TestStartDoRestartStop(t *testing.T) {
	s := start(t, Options{})
	if _, port, _ := net.SplitHostPort(s.Addr); port == "6379" {
		t.Fatalf("server on the shared port 6379")
	}
	if got, err := s.Do("SET", "k", "v"); err != nil || got != "OK" {
		t.Fatalf("SET = %q, %v", got, err)
	}
	if got, err := s.Do("GET", "k"); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v", got, err)
	}
	if got, err := s.Do("CONFIG", "GET", "save"); err != nil || got != "save\n" {
		t.Fatalf("CONFIG GET save = %q, %v; want persistence off", got, err)
	}
	if _, err := s.Do("NOSUCHCOMMAND"); err == nil {
		t.Fatal("an unknown command gave no error")
	}
	addr := s.Addr
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.Addr != addr {
		t.Fatalf("Restart moved the server from %s to %s", addr, s.Addr)
	}
	if got, err := s.Do("GET", "k"); err != nil || got != "" {
		t.Fatalf("GET after Restart = %q, %v; want the data gone", got, err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("server still accepts connections after Stop")
	}
}

func TestFreezeThaw(t *testing.T) {
	s := start(t, Options{})
	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("PING\r\n"))
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Read(make([]byte, 16)); err == nil {
		t.Fatal("a frozen server answered")
	}
	if err := s.Thaw(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Do("PING"); err != nil || got != "PONG" {
		t.Fatalf("PING after Thaw = %q, %v", got, err)
	}
}

func TestRequirePass(t *testing.T) {
	s := start(t, Options{Args: []string{"--requirepass", "s3cret"}})
	if got, err := s.Do("PING"); err != nil || got != "PONG" {
		t.Fatalf("PING with the password from Args = %q, %v", got, err)
	}
}

func TestBadArgsFailClearly(t *testing.T) {
	s, err := Start(Options{Args: []string{"--no-such-option", "1"}})
	if err == nil {
		s.Stop()
		t.Fatal("Start accepted an unknown redis-server option")
	}
}
