// Package faultproxy is a TCP proxy that tests put between leasectl and its
// store to make network partitions on demand: replies dropped while
// requests still arrive (the case where the store acts on a request whose
// answer never comes back), both directions dropped, or every connection
// cut. It is imported only by tests.
//
// Dropped bytes are read and thrown away, so connections stay open, as
// they do across a real partition: the client sees no answer, not an error.
package faultproxy

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what the proxy does with the bytes it carries.
type Mode int32

// Modes of a Proxy.
const (
	// Pass carries every byte both ways.
	Pass Mode = iota
	// DropReplies carries requests to the server and drops its replies,
	// except the first a connection gets: its handshake (a Redis client's
	// HELLO), so that a new connection still gets to send its command.
	DropReplies
	// DropBoth drops requests and replies.
	DropBoth
)

// Proxy forwards TCP connections from its own loopback address to a
// target, subject to its mode.
type Proxy struct {
	ln     net.Listener
	target string
	mode   atomic.Int32
	delay  atomic.Int64 // replies are held this long (ns) before they go on

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// Start listens on a free loopback port and forwards every connection to
// target (host:port).
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address (host:port), to give the client instead of
// the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set switches the proxy to mode m, for the bytes it reads from now on.
func (p *Proxy) Set(m Mode) { p.mode.Store(int32(m)) }

// Delay holds every reply read from now on for d before passing it on: a
// slow link, one way (0: none).
func (p *Proxy) Delay(d time.Duration) { p.delay.Store(int64(d)) }

// Cut closes every connection open now; new ones are still accepted.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.track(client, server)
		p.wg.Add(2)
		go p.carry(server, client, false)
		go p.carry(client, server, true)
	}
}

func (p *Proxy) track(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

// carry copies from src to dst, dropping what the mode says to drop:
// replies when reply is set (src is the server), requests otherwise. When
// either side ends, both are closed.
func (p *Proxy) carry(dst, src net.Conn, reply bool) {
	defer p.wg.Done()
	defer func() {
		_ = src.Close()
		_ = dst.Close()
		p.untrack(src)
		p.untrack(dst)
	}()
	buf := make([]byte, 32<<10)
	for first := true; ; first = false {
		n, err := src.Read(buf)
		if n > 0 {
			m := Mode(p.mode.Load())
			drop := m == DropBoth || m == DropReplies && reply && !first
			if d := time.Duration(p.delay.Load()); reply && d > 0 && !drop {
				time.Sleep(d)
			}
			if !drop {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}
