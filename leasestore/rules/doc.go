// Package rules is the lease rules of leasectl, written once: what each
// store operation does to a job's record, as pure functions of the record,
// the request and the store's clock (docs/semantics.md says the same in
// words).
//
// A store that keeps a job as one record read and written with a version
// check (the embedded store, etcd) applies these functions and persists
// what they changed; a store that runs each transition as one server-side
// script (Redis's Lua, PostgreSQL's plpgsql) is held to them by the
// conformance suite, package storetest, whose model-based test
// (FollowsTheRules) runs random operations against the store and the rules
// and compares every answer.
//
// Nothing here does I/O, reads a clock or keeps state: every function takes
// the time as an argument, changes only the record it is given, and says in
// its Step what the store must do besides writing the record back.
package rules
