// Package chaos holds leasectl's fault-injection tests. Several supervisors
// loop `leasectl run --wait` on one job against a real redis-server while
// supervisors, children and the Redis itself are killed, frozen and restarted
// at random. Each child records its fencing token and a CLOCK_MONOTONIC
// timestamp at start, every few milliseconds while alive, and at exit;
// afterwards the records must show that no two children were ever alive at
// once and that every new holder had a higher token than the last.
//
// The check can only see what the children wrote: a child SIGKILLed between
// two records lived a little longer than its last record says, so a very
// short overlap can go unseen, but every overlap reported is real.
//
// The runs' logs also say which crashes were counted, and for whom. A run
// whose worker did not die (its supervisor exited by itself) yet whose
// crash was counted is a false crash unless its real outcome reached the
// store late, from the run itself or through the host's outbox (delivered
// at the end by a scan, as the host's next leasectl would). On the stores
// that keep every write they acknowledged (a single Redis frozen or with
// its replies dropped, etcd, PostgreSQL) a false crash fails the test;
// Sentinel and Cluster report the figure, since a failover may lose a
// release, which is not waited for on replicas.
//
// TestChaosEtcd runs the same loop against a 3-member etcd cluster, with the
// leader SIGKILLed (and restarted) and SIGSTOPped among the faults, and a
// member silent for up to three safety windows: a follower frozen, or the
// member the runs list first blackholed by a proxy that stops forwarding
// without closing. The Sentinel modes freeze a Sentinel or a replica too.
//
// TestChaosSlots runs the loop with --slots 3 on every kind of store: at most
// three children alive at once, tokens in grant order, every waiter served
// within the bound waitBound states, and no false crash.
//
// CHAOS_SECONDS sets how long the fault run lasts (default 20); `make chaos`
// runs it for 60 seconds, and with it the Sentinel and Cluster modes without
// min_replicas, which measure how often children overlap where nothing
// promises they will not, and the kills of Cluster primaries; `make test`
// skips those. The package has no code
// outside its tests.
package chaos
