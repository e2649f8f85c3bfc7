// Package storetest is the conformance suite and the benchmarks every
// leasectl store driver runs from its own tests, as Go CDK's drivertest is
// for its providers:
//
//	func TestConformance(t *testing.T) { storetest.Run(t, harness{...}) }
//	func BenchmarkStore(b *testing.B)  { storetest.Benchmark(b, harness{...}) }
//
// A Harness makes a fresh store per test and declares the optional
// abilities it has (Abilities). The suite checks the contract documented on
// leasestore.Store with real time: it lets short leases expire by waiting
// past them, so a store under test must keep its own clock.
//
// Besides one subtest per rule, FollowsTheRules runs a random sequence of
// operations against the store and against the pure rules of package
// rules, and compares them step by step. Its seed is in the log; a failure
// prints it with the sequence, and -storetest.seed=N replays it.
//
// The package is imported only by tests.
package storetest
