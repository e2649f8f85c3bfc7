// Package registry is leasectl's execution registry (`leasectl serve`): an
// HTTP/JSON server in front of any leasestore.Store, so that workers that
// cannot reach the store itself (a Redis or an etcd closed to them) acquire, heartbeat, complete and release jobs through it, and
// on-call tools see and act on them. Package api holds the wire form;
// leasestore/httpstore is the client that makes a registry a store again.
//
// What it guarantees: every operation is one call of the store behind it,
// so the store's guarantees hold unchanged (one live lease per job, rising
// fencing tokens, crashes counted once); an answer is the store's answer,
// and a refusal keeps the data of the store's typed error under a stable
// code; a request is bounded by the time its client said it would wait
// (api.HeaderTimeout) and by a limit of its own, and one that arrives after
// its sender's deadline (api.HeaderDeadline, on the registry's clock) is
// refused without being run (intime.go); a retried request is safe
// (acquire and heartbeat are idempotent in the store, and the answers of
// complete, release, quarantine and scan are remembered by Idempotency-Key);
// bearer tokens are compared in constant time and never logged; every
// request is authenticated and allowed by its token's role, except
// /healthz.
//
// It also serves an on-call page at / (ui*.go): the jobs, a job's record
// and history, the quarantined jobs, followed live over server-sent
// events; a login with a registry token starts a session, and operators
// quarantine and release jobs, and stop their runs, from it. Every string
// the page shows is escaped by its HTML writer, its script and style are
// embedded, every POST needs the session's CSRF token, and the role is
// checked on the server whatever the page shows. The page lists the first
// 10,000 jobs the store knows, by ID, and every live or quarantined one.
//
// What it does not guarantee: that a client's notification of a release
// arrives (a subscription lives in one registry process, and a restart
// drops it: the client subscribes again and wakes its waiter once, as a
// store's best-effort notifications allow); that an answer the client did
// not receive was not acted on (as with any store, the operation may or
// may not have happened); fairness between clients beyond a per-address
// rate limit. The registry keeps nothing of its own across a restart: the
// store is the authority.
package registry
