package fence_test

import (
	"context"
	"errors"
	"log"
	"net/http"

	"github.com/leasectl/leasectl/fence"
	"github.com/leasectl/leasectl/leasestore"
	_ "github.com/leasectl/leasectl/leasestore/redisstore" // redis://
)

// A service that takes writes over HTTP: the middleware refuses stale
// tokens with 409 before the handler runs.
func ExampleChecker_Middleware() {
	ctx := context.Background()
	store, err := leasestore.Open(ctx, "redis://127.0.0.1:6379", "leasectl")
	if err != nil {
		log.Print(err)
		return
	}
	defer store.Close()
	checker, err := fence.New(store, fence.Options{Pattern: fence.WriteThrough})
	if err != nil {
		log.Print(err)
		return
	}
	defer checker.Close()

	mux := http.NewServeMux()
	mux.Handle("PUT /reports/{name}", checker.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Write the report: no write with an older token runs meanwhile
		// or lands after this one.
		w.WriteHeader(http.StatusNoContent)
	})))
	if err := http.ListenAndServe("127.0.0.1:8080", mux); err != nil {
		log.Print(err)
	}
}

// Outside HTTP: admit the write, do it, and say when it is done.
func ExampleChecker_Admit() {
	ctx := context.Background()
	store, err := leasestore.Open(ctx, "redis://127.0.0.1:6379", "leasectl")
	if err != nil {
		log.Print(err)
		return
	}
	defer store.Close()
	checker, err := fence.New(store, fence.Options{Pattern: fence.BoundedStaleness})
	if err != nil {
		log.Print(err)
		return
	}
	defer checker.Close()

	job, token := "nightly-report", int64(1767225600000000) // from the writer's request
	done, err := checker.Admit(ctx, job, token)
	var stale *fence.StaleError
	switch {
	case errors.As(err, &stale):
		log.Printf("refused: %v (newest token %d)", err, stale.Newest)
		return
	case err != nil:
		log.Printf("could not check the token, not writing: %v", err)
		return
	}
	defer done()
	// ... the write ...
}
