package redistest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sentinelTimeout bounds how long StartSentinel waits, after the servers
// answer, for the replicas to sync and for every Sentinel to know the whole
// topology. On an idle machine this takes two or three seconds (Sentinels
// find each other through hello messages they publish on the primary every
// 2 s); the margin is for a loaded 2-core machine, and only a hang should
// ever reach it.
const sentinelTimeout = 60 * time.Second

// defaultMasterName is the name the Sentinels monitor the primary under when
// SentinelOptions leave it empty.
const defaultMasterName = "leasectl"

// defaultDownAfter is the Sentinels' down-after-milliseconds when
// SentinelOptions leave it 0 (Redis's default is 30 s): how long the primary
// must fail to answer before a Sentinel deems it down, and so most of the
// time a failover takes. Lower is faster but trades the other way: a primary
// starved of CPU for this long on a loaded machine is failed over mid-test.
const defaultDownAfter = time.Second

// defaultFailoverTimeout is the Sentinels' failover-timeout when
// SentinelOptions leave it 0 (Redis's default is 3 minutes). It bounds a
// failover's election and the reconfiguration of the other replicas, and a
// Sentinel tries again a failover that did not happen (a split vote) only
// after twice this. Lower retries sooner but gives up sooner on a replica
// that is slow to follow the new primary on a loaded machine.
const defaultFailoverTimeout = 5 * time.Second

// SentinelOptions configure a test Sentinel topology. The zero value asks
// for a primary, 2 replicas and 3 Sentinels that monitor it as "leasectl",
// without passwords.
type SentinelOptions struct {
	// MasterName is the name the Sentinels monitor the primary under; ""
	// means "leasectl". Letters, digits, '.', '_' and '-' only.
	MasterName string
	// Replicas is the number of replicas of the primary; 0 means 2.
	Replicas int
	// Sentinels is the number of Sentinels; 0 means 3. Their quorum is a
	// majority of them (2 of 3), which is also what a failover needs to
	// elect its leader.
	Sentinels int
	// DownAfter is the Sentinels' down-after-milliseconds, in whole
	// milliseconds; 0 means 1 s.
	DownAfter time.Duration
	// FailoverTimeout is the Sentinels' failover-timeout, in whole
	// milliseconds; 0 means 5 s.
	FailoverTimeout time.Duration
	// Password, if set, is the data password: the primary's and replicas'
	// requirepass and masterauth, and the Sentinels' auth-pass. It must be
	// printable ASCII without spaces, quotes or backslashes: Sentinel 7.0
	// writes auth-pass back into its config file unquoted.
	Password string
	// SentinelPassword, if set, is the Sentinels' own requirepass, which
	// they also use with each other (having no sentinel-pass, a Sentinel
	// authenticates to the others with its own requirepass). It may be
	// any string.
	SentinelPassword string
	// Args are extra redis-server arguments for the primary and the
	// replicas, not the Sentinels, after (and so overriding) those
	// StartSentinel adds. Passwords and replication are set by the fields
	// above: --requirepass, --masterauth and --replicaof are refused.
	Args []string
}

// Sentinel is a running Redis Sentinel topology started by StartSentinel: a
// primary, its replicas and the Sentinels that watch them, each a Server of
// its own. Its methods may be called from several goroutines.
type Sentinel struct {
	// MasterName is the name the Sentinels know the primary by.
	MasterName string

	data             []*Server // the primary as started, then the replicas
	sentinels        []*Server
	password         string
	sentinelPassword string

	mu      sync.Mutex
	primary *Server // the primary at start or as of the last WaitFailover
}

// StartSentinel starts a primary, its replicas (each started with
// --replicaof the primary) and the Sentinels that monitor it, every one a
// redis-server on a free loopback port in its own folder, a Sentinel with a
// config file there that it rewrites. It returns once every replica has
// synced with the primary and every Sentinel sees the primary up and knows
// every replica and every other Sentinel, so that a failover can start at
// once. The caller must Stop it.
func StartSentinel(opts SentinelOptions) (*Sentinel, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	t := &Sentinel{
		MasterName:       opts.MasterName,
		password:         opts.Password,
		sentinelPassword: opts.SentinelPassword,
	}
	if err := t.start(opts); err != nil {
		t.Stop()
		return nil, err
	}
	return t, nil
}

// start starts the servers of t one after the other and waits for each
// stage to be ready; on error the caller stops what was started.
func (t *Sentinel) start(opts SentinelOptions) error {
	dataArgs := []string{
		// A replica's first sync waits this long (5 s by default) for
		// other replicas to join the same transfer; nothing here gains
		// from waiting.
		"--repl-diskless-sync-delay", "0",
	}
	if opts.Password != "" {
		dataArgs = append(dataArgs, "--requirepass", opts.Password, "--masterauth", opts.Password)
	}
	primary, err := startServer(Options{Args: append(slices.Clone(dataArgs), opts.Args...)}, standalone, "")
	if err != nil {
		return err
	}
	t.data, t.primary = append(t.data, primary), primary
	replicaArgs := append(slices.Clone(dataArgs), "--replicaof", "127.0.0.1", strconv.Itoa(primary.port))
	for range opts.Replicas {
		r, err := startServer(Options{Args: append(slices.Clone(replicaArgs), opts.Args...)}, standalone, "")
		if err != nil {
			return err
		}
		t.data = append(t.data, r)
	}

	// The Sentinels start only once the primary lists every replica: they
	// learn of replicas from the primary's INFO, which they ask for at
	// once and then only every 10 s.
	deadline := time.Now().Add(sentinelTimeout)
	if err := poll(deadline, t.replicasInSync); err != nil {
		return fmt.Errorf("redistest: replicas not in sync after %s: %w", sentinelTimeout, err)
	}

	conf := sentinelConfig(opts, primary.port)
	var sentinelArgs []string
	if opts.SentinelPassword != "" {
		sentinelArgs = []string{"--requirepass", opts.SentinelPassword}
	}
	for range opts.Sentinels {
		s, err := startServer(Options{Args: sentinelArgs}, sentinelNode, conf)
		if err != nil {
			return err
		}
		t.sentinels = append(t.sentinels, s)
	}
	err = poll(deadline, func() error {
		for _, s := range t.sentinels {
			if err := t.sentinelReady(s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redistest: Sentinels not ready after %s: %w", sentinelTimeout, err)
	}
	return nil
}

// withDefaults returns opts with its zero fields set to their defaults, or
// an error that names the first rule opts break.
func (opts SentinelOptions) withDefaults() (SentinelOptions, error) {
	if opts.MasterName == "" {
		opts.MasterName = defaultMasterName
	}
	if opts.Replicas == 0 {
		opts.Replicas = 2
	}
	if opts.Sentinels == 0 {
		opts.Sentinels = 3
	}
	if opts.DownAfter == 0 {
		opts.DownAfter = defaultDownAfter
	}
	if opts.FailoverTimeout == 0 {
		opts.FailoverTimeout = defaultFailoverTimeout
	}
	switch {
	case strings.Trim(opts.MasterName, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "":
		return opts, fmt.Errorf("redistest: master name %q has characters other than letters, digits, '.', '_' and '-'", opts.MasterName)
	case opts.Replicas < 0:
		return opts, fmt.Errorf("redistest: replicas must not be negative, not %d", opts.Replicas)
	case opts.Sentinels < 0:
		return opts, fmt.Errorf("redistest: Sentinels must not be negative, not %d", opts.Sentinels)
	case opts.DownAfter < time.Millisecond:
		return opts, fmt.Errorf("redistest: DownAfter must be at least 1ms, not %s", opts.DownAfter)
	case opts.FailoverTimeout < time.Millisecond:
		return opts, fmt.Errorf("redistest: FailoverTimeout must be at least 1ms, not %s", opts.FailoverTimeout)
	case !confSafe(opts.Password):
		return opts, errors.New("redistest: Password must be printable ASCII without spaces, quotes or backslashes (Sentinel 7.0 writes auth-pass to its config file unquoted)")
	}
	for _, a := range opts.Args {
		switch strings.ToLower(a) {
		case "--requirepass", "--masterauth":
			return opts, fmt.Errorf("redistest: %s is not allowed in SentinelOptions.Args: set the Password field", a)
		case "--replicaof", "--slaveof":
			return opts, fmt.Errorf("redistest: %s is not allowed in SentinelOptions.Args: StartSentinel sets up replication", a)
		}
	}
	return opts, nil
}

// confSafe reports whether a password can go into a Sentinel's config file
// as it is, and survive Sentinel's unquoted rewrite of it. (A Sentinel
// password needs no such care: it is a command-line argument, which
// redis-server quotes, and Sentinel rewrites requirepass quoted.)
func confSafe(password string) bool {
	for _, c := range []byte(password) {
		if c <= ' ' || c > '~' || c == '"' || c == '\'' || c == '\\' {
			return false
		}
	}
	return true
}

// sentinelConfig returns the config file each Sentinel starts from: the
// primary to monitor on primaryPort and how. The port, the Sentinel password
// and the rest are command-line arguments, which Sentinel adds to the file
// when it rewrites it. There is no sentinel-pass: the Sentinels share one
// requirepass, which each then uses with the others.
func sentinelConfig(opts SentinelOptions, primaryPort int) string {
	name := opts.MasterName
	var b strings.Builder
	fmt.Fprintf(&b, "sentinel monitor %s 127.0.0.1 %d %d\n", name, primaryPort, opts.Sentinels/2+1)
	fmt.Fprintf(&b, "sentinel down-after-milliseconds %s %d\n", name, opts.DownAfter.Milliseconds())
	fmt.Fprintf(&b, "sentinel failover-timeout %s %d\n", name, opts.FailoverTimeout.Milliseconds())
	if opts.Password != "" {
		fmt.Fprintf(&b, "sentinel auth-pass %s %s\n", name, opts.Password)
	}
	return b.String()
}

// replicasInSync returns nil once the primary as started lists every
// replica and every replica's link to it is up with the first sync done;
// until then an error that says what is missing.
func (t *Sentinel) replicasInSync() error {
	primary, replicas := t.data[0], t.data[1:]
	info, err := primary.Do("INFO", "replication")
	if err != nil {
		return err
	}
	if n := infoField(info, "connected_slaves"); n != strconv.Itoa(len(replicas)) {
		return fmt.Errorf("primary %s: connected_slaves:%s, want %d", primary.Addr, n, len(replicas))
	}
	for _, r := range replicas {
		if err := r.follows(primary); err != nil {
			return err
		}
	}
	return nil
}

// follows returns nil if s is a replica of primary with its link up and
// its first sync done, and otherwise an error that says why not.
func (s *Server) follows(primary *Server) error {
	info, err := s.Do("INFO", "replication")
	if err != nil {
		return err
	}
	if role := infoField(info, "role"); role != "slave" {
		return fmt.Errorf("%s: role:%s, want a replica of %s", s.Addr, role, primary.Addr)
	}
	if port := infoField(info, "master_port"); port != strconv.Itoa(primary.port) {
		return fmt.Errorf("%s: replica of port %s, want %s", s.Addr, port, primary.Addr)
	}
	if link := infoField(info, "master_link_status"); link != "up" {
		return fmt.Errorf("%s: master_link_status:%s", s.Addr, link)
	}
	return nil
}

// sentinelReady returns nil once the Sentinel s sees the primary as started
// up, and every replica and every other Sentinel, each with no flag but its
// kind; until then an error that says what is missing.
func (t *Sentinel) sentinelReady(s *Server) error {
	reply, err := s.Do("SENTINEL", "MASTER", t.MasterName)
	if err != nil {
		return err
	}
	masters := fieldLists(reply)
	if len(masters) != 1 {
		return fmt.Errorf("Sentinel %s: SENTINEL MASTER %s = %q", s.Addr, t.MasterName, reply)
	}
	m := masters[0]
	if addr := net.JoinHostPort(m["ip"], m["port"]); addr != t.data[0].Addr {
		return fmt.Errorf("Sentinel %s: master at %s, want %s", s.Addr, addr, t.data[0].Addr)
	}
	if m["flags"] != "master" {
		return fmt.Errorf("Sentinel %s: master flags %q", s.Addr, m["flags"])
	}
	others := slices.DeleteFunc(slices.Clone(t.sentinels), func(o *Server) bool { return o == s })
	if err := t.knows(s, "REPLICAS", t.data[1:], "slave"); err != nil {
		return err
	}
	return t.knows(s, "SENTINELS", others, "sentinel")
}

// knows returns nil if SENTINEL <what> asked of the Sentinel s lists every
// server of want with flags just so.
func (t *Sentinel) knows(s *Server, what string, want []*Server, flags string) error {
	reply, err := s.Do("SENTINEL", what, t.MasterName)
	if err != nil {
		return err
	}
	got := make(map[string]string)
	for _, e := range fieldLists(reply) {
		got[net.JoinHostPort(e["ip"], e["port"])] = e["flags"]
	}
	for _, w := range want {
		f, ok := got[w.Addr]
		if !ok {
			return fmt.Errorf("Sentinel %s: %s has no %s yet", s.Addr, what, w.Addr)
		}
		if f != flags {
			return fmt.Errorf("Sentinel %s: %s flags %q, want %q", s.Addr, w.Addr, f, flags)
		}
	}
	return nil
}

// fieldLists splits the reply of SENTINEL MASTER, REPLICAS or SENTINELS,
// which Do flattens into field and value lines, into one map per instance;
// each instance's fields begin with "name".
func fieldLists(reply string) []map[string]string {
	var out []map[string]string
	lines := strings.Split(reply, "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		if lines[i] == "name" || len(out) == 0 {
			out = append(out, make(map[string]string))
		}
		out[len(out)-1][lines[i]] = lines[i+1]
	}
	return out
}

// Primary returns the current primary: the server a Sentinel reports with
// SENTINEL GET-MASTER-ADDR-BY-NAME, asked of each running Sentinel in turn
// until one answers. Right after a failover the Sentinels may briefly
// disagree; WaitFailover waits until they agree.
func (t *Sentinel) Primary() (*Server, error) {
	var errs []error
	for _, s := range t.sentinels {
		if s.exited() {
			continue
		}
		p, err := t.primaryOf(s)
		if err == nil {
			return p, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, errors.New("redistest: no Sentinel is running")
	}
	return nil, fmt.Errorf("redistest: no Sentinel reports the primary: %w", errors.Join(errs...))
}

// primaryOf returns the server the Sentinel s reports as the primary.
func (t *Sentinel) primaryOf(s *Server) (*Server, error) {
	reply, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", t.MasterName)
	if err != nil {
		return nil, err
	}
	ip, port, ok := strings.Cut(reply, "\n")
	if !ok {
		return nil, fmt.Errorf("redistest: Sentinel %s knows no master %s", s.Addr, t.MasterName)
	}
	addr := net.JoinHostPort(ip, port)
	for _, d := range t.data {
		if d.Addr == addr {
			return d, nil
		}
	}
	return nil, fmt.Errorf("redistest: Sentinel %s reports primary %s, which StartSentinel did not start", s.Addr, addr)
}

// Replicas returns the servers StartSentinel started, other than the
// current primary (see Primary), in the order they were started. After a
// failover that includes the old primary, as Sentinel itself lists it:
// once it is back, the Sentinels make it a replica of the new one.
func (t *Sentinel) Replicas() ([]*Server, error) {
	p, err := t.Primary()
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(slices.Clone(t.data), func(s *Server) bool { return s == p }), nil
}

// Sentinels returns the Sentinels, in the order of URL's addresses.
func (t *Sentinel) Sentinels() []*Server {
	return slices.Clone(t.sentinels)
}

// URL returns the topology's address in the form go-redis's
// ParseFailoverURL reads: the first Sentinel as the host, with the Sentinel
// password (if any) as the URL's password; the master name; the other
// Sentinels as addr parameters; and the data password (if any) as the
// password parameter, e.g.
// redis://:spw@127.0.0.1:p1?master_name=leasectl&addr=127.0.0.1:p2&addr=127.0.0.1:p3&password=pw.
func (t *Sentinel) URL() string {
	u := url.URL{Scheme: "redis", Host: t.sentinels[0].Addr}
	if t.sentinelPassword != "" {
		u.User = url.UserPassword("", t.sentinelPassword)
	}
	q := "master_name=" + url.QueryEscape(t.MasterName)
	for _, s := range t.sentinels[1:] {
		q += "&addr=" + s.Addr
	}
	if t.password != "" {
		q += "&password=" + url.QueryEscape(t.password)
	}
	u.RawQuery = q
	return u.String()
}

// WaitFailover waits until every running Sentinel reports the same primary,
// different from the one before (the primary at start, or the one the last
// WaitFailover returned), and that server reports role:master; it returns
// the new primary. It does not cause a failover: kill or freeze the primary,
// or send SENTINEL FAILOVER, first. A frozen Sentinel holds it up until it
// is thawed or timeout passes (which a slow answer may overrun by a few
// seconds). The other replicas follow the new primary a moment later.
func (t *Sentinel) WaitFailover(timeout time.Duration) (*Server, error) {
	t.mu.Lock()
	old := t.primary
	t.mu.Unlock()
	var promoted *Server
	err := poll(time.Now().Add(timeout), func() error {
		p, err := t.agreedPrimary()
		if err != nil {
			return err
		}
		if p == old {
			return fmt.Errorf("the Sentinels still report %s", old.Addr)
		}
		info, err := p.Do("INFO", "replication")
		if err != nil {
			return err
		}
		if role := infoField(info, "role"); role != "master" {
			return fmt.Errorf("%s, reported by the Sentinels, has role:%s", p.Addr, role)
		}
		promoted = p
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redistest: no failover from %s within %s: %w", old.Addr, timeout, err)
	}
	t.mu.Lock()
	t.primary = promoted
	t.mu.Unlock()
	return promoted, nil
}

// agreedPrimary returns the primary every running Sentinel reports, or an
// error if one does not answer or they disagree.
func (t *Sentinel) agreedPrimary() (*Server, error) {
	var agreed *Server
	for _, s := range t.sentinels {
		if s.exited() {
			continue
		}
		p, err := t.primaryOf(s)
		if err != nil {
			return nil, err
		}
		if agreed != nil && p != agreed {
			return nil, fmt.Errorf("the Sentinels disagree: %s and %s", agreed.Addr, p.Addr)
		}
		agreed = p
	}
	if agreed == nil {
		return nil, errors.New("no Sentinel is running")
	}
	return agreed, nil
}

// Stop stops every server as Server.Stop does and removes their folders:
// the Sentinels first, so that they start no failover while the others
// stop, then the replicas, so that no primary waits for a replica to catch
// up before it exits, then the primary as of the last WaitFailover.
func (t *Sentinel) Stop() error {
	t.mu.Lock()
	primary := t.primary
	t.mu.Unlock()
	replicas := slices.DeleteFunc(slices.Clone(t.data), func(s *Server) bool { return s == primary })
	errs := []error{stopAll(t.sentinels), stopAll(replicas)}
	if primary != nil {
		errs = append(errs, primary.Stop())
	}
	return errors.Join(errs...)
}

// poll calls ready every pollInterval until it returns nil, and returns nil;
// or, once deadline has passed, the last error it returned.
func poll(deadline time.Time, ready func() error) error {
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(pollInterval)
	}
}
