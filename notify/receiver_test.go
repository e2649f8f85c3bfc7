package notify

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// receiver is a real local HTTP receiver of webhooks: it answers 503 while
// down, and keeps every event it accepted (2xx), with its headers.
type receiver struct {
	*httptest.Server
	down atomic.Bool

	mu       sync.Mutex
	accepted []received
	refused  int
	arrived  chan struct{} // a value per accepted event
}

type received struct {
	header http.Header
	body   []byte
	event  Event
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{arrived: make(chan struct{}, 1000)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil || req.Method != http.MethodPost {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.down.Load() {
			r.refused++
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		var e Event
		_ = json.Unmarshal(body, &e)
		r.accepted = append(r.accepted, received{header: req.Header.Clone(), body: body, event: e})
		r.arrived <- struct{}{}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

// byKey counts the accepted events by their Idempotency-Key header.
func (r *receiver) byKey() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := map[string]int{}
	for _, a := range r.accepted {
		keys[a.header.Get(HeaderIdempotencyKey)]++
	}
	return keys
}

func (r *receiver) events() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.accepted...)
}
