// Command fence-service is an example of a service that fences the writes
// of `leasectl run` children: it stores reports as files, and refuses a
// write whose fencing token has been overtaken (409) with package fence.
// Copy it, and replace the file write with your own.
//
// Serve, on the store the runs use (their --store and --namespace):
//
//	fence-service serve --store redis://localhost:6379 --dir /srv/reports --addr 127.0.0.1:8080
//
// Write from inside a run; put sends the run's job, token and slot
// (LEASECTL_JOB_ID, LEASECTL_FENCING_TOKEN, LEASECTL_SLOT, so that the runs
// of a job of several slots are fenced each in its slot) with the report
// and exits 0 when it was written, 1 when it was refused as stale, 2 on any
// other failure:
//
//	leasectl run --job nightly -- sh -c './build-report | fence-service put http://127.0.0.1:8080/reports/nightly'
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/leasectl/leasectl/fence"
	"github.com/leasectl/leasectl/leasestore"
	_ "github.com/leasectl/leasectl/leasestore/filestore"  // file:///dir, the embedded store
	_ "github.com/leasectl/leasectl/leasestore/redisstore" // redis://, rediss://
)

// Exit codes of put.
const (
	exitWritten = 0
	exitStale   = 1
	exitFailed  = 2
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: fence-service serve [flags] | fence-service put URL < report")
		os.Exit(exitFailed)
	}
	var err error
	code := exitFailed
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "put":
		code, err = put(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: serve or put", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence-service:", err)
		os.Exit(code)
	}
}

// serve runs the report service until SIGINT or SIGTERM.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	storeURL := fs.String("store", "", "the runs' store URL (required): redis://host:port or file:///dir")
	namespace := fs.String("namespace", "leasectl", "the runs' namespace")
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	dir := fs.String("dir", "", "folder the reports are written to (required)")
	pattern := fs.String("pattern", "write-through", "authoritative, bounded-staleness or write-through")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *storeURL == "" || *dir == "" {
		return errors.New("serve needs --store and --dir")
	}
	opts := fence.Options{}
	switch *pattern {
	case "authoritative":
	case "bounded-staleness":
		opts.Pattern = fence.BoundedStaleness
	case "write-through":
		opts.Pattern = fence.WriteThrough
	default:
		return fmt.Errorf("unknown --pattern %q", *pattern)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	store, err := leasestore.Open(ctx, *storeURL, *namespace)
	if err != nil {
		return err
	}
	defer store.Close()
	checker, err := fence.New(store, opts)
	if err != nil {
		return err
	}
	defer checker.Close()

	mux := http.NewServeMux()
	mux.Handle("PUT /reports/{name}", checker.Middleware(reportWriter(*dir)))
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Printf("listening on %s\n", l.Addr())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// reportWriter stores the request body as the report. The middleware runs
// it only for a token that may be used, and holds the job's fence while it
// runs: no write with an older token can land after it.
func reportWriter(dir string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if !filepath.IsLocal(name) {
			http.Error(w, "bad report name", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "reading the report: "+err.Error(), http.StatusBadRequest)
			return
		}
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, body, 0o644); err != nil {
			http.Error(w, "writing the report: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			http.Error(w, "writing the report: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// put sends stdin to URL with the run's job, token and slot.
func put(args []string) (int, error) {
	if len(args) != 1 {
		return exitFailed, errors.New("usage: fence-service put URL < report")
	}
	job, token := os.Getenv("LEASECTL_JOB_ID"), os.Getenv("LEASECTL_FENCING_TOKEN")
	if job == "" || token == "" {
		return exitFailed, errors.New("put runs inside `leasectl run`: LEASECTL_JOB_ID and LEASECTL_FENCING_TOKEN are not set")
	}
	body, err := io.ReadAll(os.Stdin)
	if err != nil {
		return exitFailed, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, args[0], bytes.NewReader(body))
	if err != nil {
		return exitFailed, err
	}
	req.Header.Set(fence.HeaderJob, job)
	req.Header.Set(fence.HeaderToken, token)
	if slot := os.Getenv("LEASECTL_SLOT"); slot != "" {
		req.Header.Set(fence.HeaderSlot, slot)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return exitFailed, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode/100 == 2:
		return exitWritten, nil
	case resp.StatusCode == http.StatusConflict:
		var r fence.Refusal
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return exitStale, fmt.Errorf("refused as stale (%s)", resp.Status)
		}
		return exitStale, fmt.Errorf("refused: %s", r.Message)
	default:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return exitFailed, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(msg))
	}
}
