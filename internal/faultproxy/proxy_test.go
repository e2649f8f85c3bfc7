package faultproxy

import (
	"bufio"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// TestModes sends lines through the proxy to a server that reports each line
// it receives and echoes it back.
func TestModes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	received := make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					received <- sc.Text()
					if _, err := c.Write([]byte(sc.Text() + "\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	p, err := Start(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	send := func(line string) {
		t.Helper()
		if _, err := c.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	arrives := func(line string) {
		t.Helper()
		select {
		case got := <-received:
			if got != line {
				t.Fatalf("server received %q, want %q", got, line)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("server never received %q", line)
		}
	}
	// Silence is checked for a moment: what a partition looks like.
	const silence = 200 * time.Millisecond
	answered := func() (string, bool) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(silence))
		line, err := r.ReadString('\n')
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return "", false
		}
		if err != nil {
			t.Fatal(err)
		}
		return line, true
	}

	send("one")
	arrives("one")
	if line, ok := answered(); !ok || line != "one\n" {
		t.Fatalf("in Pass (or a handshake): answer %q %v, want one", line, ok)
	}

	p.Set(DropReplies)
	send("two")
	arrives("two")
	if line, ok := answered(); ok {
		t.Fatalf("in DropReplies: answered %q, want nothing", line)
	}

	p.Set(DropBoth)
	send("three")
	select {
	case got := <-received:
		t.Fatalf("in DropBoth: server received %q", got)
	case <-time.After(silence):
	}

	p.Set(Pass)
	send("four")
	arrives("four")
	if line, ok := answered(); !ok || line != "four\n" {
		t.Fatalf("healed: answer %q %v, want four (the dropped ones are gone)", line, ok)
	}
}
