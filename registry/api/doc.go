// Package api is the wire form of leasectl's execution registry
// (`leasectl serve`): its paths and headers, the JSON bodies of requests and
// answers, the one error shape with its stable codes, and the conversions
// between them and leasestore's types and typed errors. The server
// (package registry) and the remote store driver (leasestore/httpstore)
// both use it, so that they cannot disagree; docs/registry-openapi.yaml
// describes the same API for other clients.
//
// Conventions: snake_case keys; times are RFC 3339 strings in UTC with
// nanoseconds; durations are whole milliseconds in keys ending in _ms,
// rounded up when a duration is converted (a TTL never shrinks, as on the
// Redis store); fencing tokens are integers below 2^53.
//
// What it does not do: I/O. It validates requests (naming the field at
// fault) and converts; it never talks to a store or a network.
package api
