package supervise

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Defaults of Config. Each trades safety against tolerance of a slow store.
const (
	// DefaultTTL is the lease's liveness TTL. Longer survives longer store
	// outages without killing the child; shorter hands a crashed job to the
	// next worker sooner.
	DefaultTTL = 30 * time.Second
	// DefaultEvidenceTTL keeps a crashed run's evidence long enough for a
	// reaper that runs at least hourly to count it. A TTL longer than half
	// of it makes the default twice the TTL, so that --ttl alone never
	// breaks the rule evidence-ttl > ttl + 1m.
	DefaultEvidenceTTL = time.Hour
	// DefaultMaxCrashes quarantines a job after three crashes in a row: one
	// crash can be bad luck, three is a pattern worth a human's look.
	DefaultMaxCrashes = 3
	// maxDefaultGrace bounds the default SIGTERM-to-SIGKILL grace period: long
	// enough for a clean shutdown, short enough that an operator's Ctrl-C
	// takes effect promptly.
	maxDefaultGrace = 10 * time.Second
	// minEvidenceMargin is how much longer than the TTL the evidence must
	// live, so that a reaper sees a crash before its evidence disappears.
	minEvidenceMargin = time.Minute
	// MinTTL is the shortest lease a real store can honour: a grant and each
	// renewal must be confirmed within --safety (ttl/2 by default), a round
	// trip plus the scheduling of three processes on a loaded host, and
	// Redis keeps expiries in whole milliseconds. Shorter would trade
	// nothing for a run that mostly fails with 69 or 125; 100 ms still lets
	// tests and quick handoffs use sub-second leases.
	MinTTL = 100 * time.Millisecond
)

// Config is one run's configuration. Zero durations take their defaults in
// SetDefaults; Validate checks the timing rules of docs/design.md §4.
type Config struct {
	Job      string
	Command  []string
	WorkerID string
	Host     string
	PID      int

	TTL         time.Duration // liveness TTL
	Heartbeat   time.Duration // renewal period; default TTL/3
	Safety      time.Duration // kill this long after the last confirmed renewal's send time; default TTL/2
	EvidenceTTL time.Duration // default max(DefaultEvidenceTTL, 2×TTL)
	MaxCrashes  int
	Grace       time.Duration // SIGTERM → SIGKILL; default min(10s, TTL)
	MaxRuntime  time.Duration // 0: no limit
	MinInterval time.Duration // 0: off
	Wait        bool
	WaitTimeout time.Duration // 0: wait for ever (with Wait)
	// Region is the worker's region: a job first granted in a region is
	// refused to workers of others (*leasestore.RegionError). "": any.
	Region string
	// Deadline is the job's hard deadline (--ttl-deadline): past
	// it by the store's clock (on etcd, the acquiring host's), the job is
	// refused for good (*leasestore.DeadlineError), with --wait too. Zero:
	// none.
	Deadline time.Time
	// Expect is the job's expectation (--expect-every, --expect-grace),
	// recorded with the grant, last writer wins; nil leaves the job's as
	// it is.
	Expect *leasestore.Expectation
	// Slots is how many runs of the job may run at once across every host
	// sharing the store (--slots), each in a slot of its own; all runs of a
	// job must agree on it (*leasestore.SlotsError). Default 1.
	Slots int
}

// ConfigError names the timing rule a Config breaks.
type ConfigError struct {
	Rule string
	// Flags are the flags the rule relates, as Rule names them ("--safety",
	// "--heartbeat"), so that a caller can say which of them took its
	// default.
	Flags []string
}

// Error is the rule, in words.
func (e *ConfigError) Error() string { return e.Rule }

// SetDefaults fills the zero fields that have defaults.
func (c *Config) SetDefaults() {
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = c.TTL / 3
	}
	if c.Safety == 0 {
		c.Safety = c.TTL / 2
	}
	if c.EvidenceTTL == 0 {
		c.EvidenceTTL = DefaultEvidenceTTL
		if c.TTL > DefaultEvidenceTTL/2 {
			c.EvidenceTTL = c.TTL + min(c.TTL, math.MaxInt64-c.TTL)
		}
	}
	if c.MaxCrashes == 0 {
		c.MaxCrashes = DefaultMaxCrashes
	}
	if c.Grace == 0 {
		c.Grace = min(maxDefaultGrace, c.TTL)
	}
	if c.Slots == 0 {
		c.Slots = 1
	}
	if c.WaitTimeout > 0 {
		c.Wait = true
	}
}

// Validate checks the job ID, the command and the timing rules, returning a
// *ConfigError (or *leasestore.InvalidJobIDError) naming the first rule
// broken. Call SetDefaults first.
func (c *Config) Validate() error {
	if err := leasestore.ValidateJobID(c.Job); err != nil {
		return err
	}
	if c.Region != "" {
		if err := leasestore.ValidateRegion(c.Region); err != nil {
			return &ConfigError{Rule: fmt.Sprintf("--region %q: %v", c.Region, err)}
		}
	}
	if len(c.Command) == 0 || c.Command[0] == "" {
		return &ConfigError{Rule: "no command to run: give it after --, as in: leasectl run --job ID -- CMD [ARGS...]"}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"--ttl", c.TTL}, {"--heartbeat", c.Heartbeat}, {"--safety", c.Safety},
		{"--evidence-ttl", c.EvidenceTTL}, {"--grace", c.Grace},
		{"--max-runtime", c.MaxRuntime}, {"--min-interval", c.MinInterval}, {"--wait-timeout", c.WaitTimeout},
	} {
		if d.v < 0 {
			return &ConfigError{Rule: fmt.Sprintf("%s must be positive, got %s", d.name, d.v)}
		}
	}
	if c.TTL > 0 && c.TTL < MinTTL {
		return &ConfigError{Rule: fmt.Sprintf("--ttl %s is shorter than %s, the shortest lease a store can honour", c.TTL, MinTTL)}
	}
	// After SetDefaults these are never zero (a TTL of MinTTL gives a 33 ms
	// heartbeat); a caller that skipped it is told which one is.
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--ttl", c.TTL}, {"--heartbeat", c.Heartbeat}, {"--safety", c.Safety}, {"--evidence-ttl", c.EvidenceTTL}, {"--grace", c.Grace}} {
		if d.v == 0 {
			return &ConfigError{Rule: fmt.Sprintf("%s must be positive, got 0", d.name)}
		}
	}
	// The relations are written so that no product or sum can overflow.
	switch {
	case c.Heartbeat > c.TTL/3:
		return &ConfigError{Rule: fmt.Sprintf("--heartbeat %s must be at most --ttl/3 (%s)", c.Heartbeat, c.TTL/3), Flags: []string{"--heartbeat", "--ttl"}}
	case c.Safety <= c.Heartbeat:
		return &ConfigError{Rule: fmt.Sprintf("--safety %s must be longer than --heartbeat %s", c.Safety, c.Heartbeat), Flags: []string{"--safety", "--heartbeat"}}
	case c.Safety >= c.TTL:
		return &ConfigError{Rule: fmt.Sprintf("--safety %s must be shorter than --ttl %s, so the child dies before the lease can expire", c.Safety, c.TTL), Flags: []string{"--safety", "--ttl"}}
	case c.Grace > c.TTL:
		return &ConfigError{Rule: fmt.Sprintf("--grace %s must be at most --ttl %s", c.Grace, c.TTL), Flags: []string{"--grace", "--ttl"}}
	case c.EvidenceTTL-minEvidenceMargin <= c.TTL:
		return &ConfigError{Rule: fmt.Sprintf("--evidence-ttl %s must be longer than --ttl + 1m (%s)", c.EvidenceTTL, c.TTL+minEvidenceMargin), Flags: []string{"--evidence-ttl", "--ttl"}}
	case c.MaxCrashes < 2:
		return &ConfigError{Rule: fmt.Sprintf("--max-crashes %d must be at least 2", c.MaxCrashes)}
	case c.Slots < 1 || c.Slots > leasestore.MaxSlots:
		return &ConfigError{Rule: fmt.Sprintf("--slots %d must be between 1 and %d", c.Slots, leasestore.MaxSlots)}
	}
	if c.Expect != nil {
		if err := c.Expect.Validate(); err != nil {
			return &ConfigError{Rule: fmt.Sprintf("--expect-every %s --expect-grace %s: %v", c.Expect.Every, c.Expect.Grace, err)}
		}
	}
	return nil
}

// CheckStore checks --slots against the slots a store of lim grants a
// job and the TTL against the range it honours, when it declares one,
// returning a *ConfigError that names the store's limit. It does no I/O.
func (c *Config) CheckStore(lim leasestore.Limits) error {
	var le *leasestore.LimitError
	if !errors.As(lim.Check(c.TTL, c.Slots), &le) {
		return nil
	}
	if le.TTLLimit() {
		return &ConfigError{Rule: "--ttl " + le.Error()}
	}
	return &ConfigError{Rule: fmt.Sprintf("--slots %d: this store runs at most %d per job", c.Slots, lim.Slots())}
}

// IsConfigError reports whether err is a usage error found by Validate.
func IsConfigError(err error) bool {
	var ce *ConfigError
	var ie *leasestore.InvalidJobIDError
	return errors.As(err, &ce) || errors.As(err, &ie)
}
