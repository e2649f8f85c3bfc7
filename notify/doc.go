// Package notify sends the store's notices (leasestore.Notices: a crash
// counted, a job quarantined or released, a lease lost, a job overdue or
// back in time) to sinks: webhooks (a JSON body, or Slack-compatible text)
// and commands (the event as JSON on stdin).
//
// A Deliverer runs beside the reaper's scan loop, never in it: it claims
// due notices in the store, sends each to every sink within a timeout, and
// settles it as sent once every sink took it (a 2xx answer, exit status 0),
// or due again after a backoff with jitter otherwise. The notices wait in
// the store, so a sink that is down, or a reaper restarted meanwhile, loses
// nothing; and a notice is claimed by one reaper at a time, so several
// reapers on several hosts send it once.
//
// What it does not guarantee: exactly once. A reaper that dies after a
// sink took a notice and before it settled it, a claim that outlived its
// hold, or one sink of several that failed, sends the notice again, with
// the same idempotency key (Event.IdempotencyKey, the Idempotency-Key
// header), by which a receiver tells it is one event. A notice not sent
// within leasestore.NoticeRetention is dropped.
package notify
