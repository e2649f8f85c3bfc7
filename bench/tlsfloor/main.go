// Command tlsfloor is the registry's floor in `make bench`: the least a
// registry written in Go with net/http does for a fleet's requests. It
// answers HTTP/1.1 over TLS, reads each request to its end and writes a
// canned answer, the same size and shape as leasectl serve's, with no store,
// no token check and no validation. What serve costs above it in the same
// run is leasectl's own; what it costs, no such registry can avoid.
//
//	tlsfloor -cert FILE -key FILE -answers FILE
//
// The answers file is JSON, {"header": {NAME: [VALUE]}, "bodies": {PATH:
// BODY}}: a POST to PATH is answered 200 with the header and BODY, any
// other request 404. It listens on a free loopback port and writes
// {"url":"https://127.0.0.1:PORT"} to stderr, as serve logs its own.
package main

import (
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"os"
	"time"
)

// The HTTP server's timeouts and header bound, the same as leasectl
// serve's (registry/serve.go). What they cost is that they are set: each
// request's read and write then sets a deadline on its connection, which
// every registry that cuts off stalled clients pays; their values do not
// change what a request costs.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 15 * time.Second
	writeTimeout      = 45 * time.Second
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 32 << 10
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "tlsfloor: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	certFile := flag.String("cert", "", "the server's PEM certificate")
	keyFile := flag.String("key", "", "its PEM key")
	answersFile := flag.String("answers", "", "the JSON file of the canned answers")
	flag.Parse()
	h, err := readAnswers(*answersFile)
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		return fmt.Errorf("certificate %s and key %s: %w", *certFile, *keyFile, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}},
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		// serve logs these at debug level only.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	started, err := json.Marshal(struct {
		URL string `json:"url"`
	}{"https://" + ln.Addr().String()})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%s\n", started)
	return srv.ServeTLS(ln, "", "")
}

// canned answers a POST to each of its paths with that path's body.
type canned struct {
	header http.Header
	bodies map[string][]byte
}

// readAnswers reads the canned answers from file.
func readAnswers(file string) (*canned, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var a struct {
		Header http.Header       `json:"header"`
		Bodies map[string]string `json:"bodies"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fmt.Errorf("answers %s: %w", file, err)
	}
	c := &canned{header: a.Header, bodies: map[string][]byte{}}
	for path, body := range a.Bodies {
		c.bodies[path] = []byte(body)
	}
	return c, nil
}

func (c *canned) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Every registry reads the request to its end, where net/http starts
	// its read that notices a client going away.
	_, _ = io.Copy(io.Discard, r.Body)
	body, ok := c.bodies[r.URL.Path]
	if !ok || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	maps.Copy(w.Header(), c.header)
	_, _ = w.Write(body)
}
