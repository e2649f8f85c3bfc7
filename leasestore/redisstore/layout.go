package redisstore

import "strconv"

// The key layout (docs/redis-layout.md has the reasoning and the figures).
// Jobs are spread over a fixed number of shards by a hash of their ID; the
// shard number is the hash tag of every key, so that one job's keys and its
// shard's index and quarantine set live in one Redis Cluster slot:
//
//	<ns>:{<shard>}:<job>:e     evidence of the run in slot 0: one packed
//	                           string whose Redis TTL is the evidence TTL
//	<ns>:{<shard>}:<job>:e<S>  evidence of the run in slot S >= 1, alike
//	<ns>:{<shard>}:<job>:q     the job's queue of waiters: a list
//	<ns>:{<shard>}:<job>:r     record: a small hash
//	<ns>:{<shard>}:<job>:h     history: a list of packed events
//	<ns>:{<shard>}:<job>:n     the job's notification channel (not a key):
//	                           grants, ends of runs, quarantine releases
//	<ns>:{<shard>}:hb          the shard's token feed heartbeat channel
//	<ns>:{<shard>}:live        the shard's liveness index: sorted set
//	                           job -> liveness expiry (µs) of its run in
//	                           slot 0
//	<ns>:{<shard>}:slots       the same for the runs in slots >= 1:
//	                           job NUL S -> liveness expiry (µs)
//	<ns>:{<shard>}:quarantined the shard's quarantined jobs: a set
//	<ns>:{<shard>}:jobs        the shard's known jobs: a sorted set, every
//	                           score 0, read in lexical order (Jobs)
//
// Every transition of one job is a script over the keys of one slot, legal
// on Redis Cluster; heartbeats spread over the shards' index keys instead of
// landing on one; and Scan reads each shard's index from its oldest expiry,
// so it costs what the crashed jobs cost plus one small script per shard.
// A job of one slot has exactly the keys a leasectl older than slots
// writes, so both read it alike; the runs in slots >= 1 live in keys an
// older leasectl never reads.

// shards is the number of shards. More shards spread heartbeats and slots
// more finely over a cluster's primaries; fewer keep Scan, Leases and Counts
// (one script per shard, pipelined) cheap. 64 shards give 3 to 16 primaries
// an even share within a few percent, and an idle Scan costs 64 tiny scripts
// in one round trip per primary.
const shards = 64

// shardOf is the shard of job: FNV-1a of its ID, modulo shards. It must
// never change once data is written: a job's keys are found through it.
func shardOf(job string) int {
	h := uint32(2166136261)
	for i := 0; i < len(job); i++ {
		h ^= uint32(job[i])
		h *= 16777619
	}
	return int(h % shards)
}

// shardPrefix is what every key of shard starts with: <ns>:{<shard>}:.
func (s *Store) shardPrefix(shard int) string {
	return s.ns + ":{" + strconv.Itoa(shard) + "}:"
}

// jobKeys are the declared KEYS of every per-job script: evidence, record,
// history, the shard's index, quarantine set, known jobs, due index and
// slots index (lua/lib.lua, declared_keys).
func (s *Store) jobKeys(job string) []string {
	p := s.shardPrefix(shardOf(job))
	j := p + job + ":"
	return []string{j + "e", j + "r", j + "h", p + "live", p + "quarantined", p + "jobs", p + "due", p + "slots"}
}

// shardKeys are the declared KEYS of every per-shard script: the shard's
// index, quarantine set, known jobs, due index and slots index.
func (s *Store) shardKeys(shard int) []string {
	p := s.shardPrefix(shard)
	return []string{p + "live", p + "quarantined", p + "jobs", p + "due", p + "slots"}
}

// channel is job's notification channel.
func (s *Store) channel(job string) string {
	return s.shardPrefix(shardOf(job)) + job + ":n"
}

// waiterChannel is the channel on which waiter of job is woken in its turn
// (lua/runs.lua, wake_waiters): '#' is in no job ID, so it is no job's
// channel.
func (s *Store) waiterChannel(job, waiter string) string {
	return s.channel(job) + "#" + waiter
}

// heartbeatChannel is shard's token feed heartbeat channel (lua/sync.lua).
func (s *Store) heartbeatChannel(shard int) string {
	return s.shardPrefix(shard) + "hb"
}
