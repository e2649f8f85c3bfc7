package outbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/leasestore"
)

// Box is the outbox of one store and namespace on this host.
type Box struct {
	dir string
}

// Open returns the outbox of the store at storeURL (as given, the
// password, if any, is left out of what is kept) and namespace, under
// stateDir. It does no I/O: the folder is made by the first Put.
func Open(stateDir, storeURL, namespace string) *Box {
	sum := sha256.Sum256([]byte(leasestore.Redact(storeURL) + "\x00" + namespace))
	return &Box{dir: filepath.Join(stateDir, "outbox", hex.EncodeToString(sum[:8]))}
}

// entry is one outcome, as kept in its file.
type entry struct {
	Late    leasestore.LateOutcome `json:"late"`
	Written time.Time              `json:"written"`
}

// Put keeps late until it is delivered. Outcomes are kept one per run (its
// job and holder): putting the same run's again replaces it.
func (b *Box) Put(late leasestore.LateOutcome) error {
	v, err := json.Marshal(entry{Late: late, Written: time.Now().UTC()})
	if err != nil {
		return fmt.Errorf("encoding the outcome for the outbox: %w", err)
	}
	if err := os.MkdirAll(b.dir, 0o700); err != nil {
		return fmt.Errorf("making the outbox folder: %w", err)
	}
	sum := sha256.Sum256([]byte(late.Job + "\x00" + late.Holder))
	path := filepath.Join(b.dir, hex.EncodeToString(sum[:16])+".json")
	tmp := path + ".new"
	if err := os.WriteFile(tmp, v, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// Dir is the outbox's folder, for messages that tell where an outcome is
// kept.
func (b *Box) Dir() string { return b.dir }

// Pending reports whether the outbox holds an outcome to deliver. It reads
// one folder listing, and is how a process decides, at the cost of a
// system call, whether to deliver at all.
func (b *Box) Pending() bool {
	names, _ := b.names()
	return len(names) > 0
}

func (b *Box) names() ([]string, error) {
	f, err := os.Open(b.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	all, err := f.Readdirnames(-1)
	var names []string
	for _, n := range all {
		if strings.HasSuffix(n, ".json") {
			names = append(names, n)
		}
	}
	return names, err
}

// Recorder is what the outbox delivers to: a store's RecordLate
// (leasestore.Leaser).
type Recorder interface {
	RecordLate(ctx context.Context, late leasestore.LateOutcome) (leasestore.Correction, error)
}

// Deliver records each outcome in the outbox with store.RecordLate, in
// the order they were put, and removes it once recorded. It stops at the
// first the store fails to take (ErrUnavailable: it is down again;
// ErrForbidden: the caller's role may not, another caller's may), and
// returns that error; an outcome the store refuses for good (a value it
// cannot hold) is logged and dropped. ctx bounds the whole delivery. Each
// delivery is logged, with what it corrected.
func (b *Box) Deliver(ctx context.Context, store Recorder, log zerolog.Logger) error {
	names, err := b.names()
	if err != nil {
		return fmt.Errorf("reading the outbox %s: %w", b.dir, err)
	}
	type pending struct {
		entry
		path string
	}
	var all []pending
	for _, n := range names {
		path := filepath.Join(b.dir, n)
		v, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue // delivered meanwhile by another process
		}
		var e entry
		if err == nil {
			err = json.Unmarshal(v, &e)
		}
		if err != nil {
			log.Error().Err(err).Str("file", path).Msg("dropping an outbox file that cannot be read")
			_ = os.Remove(path)
			continue
		}
		all = append(all, pending{e, path})
	}
	slices.SortStableFunc(all, func(x, y pending) int { return x.Written.Compare(y.Written) })
	for _, p := range all {
		late := p.Late
		c, err := store.RecordLate(ctx, late)
		l := log.With().Str("job", late.Job).Str("worker", late.Holder).Int64("token", late.Token).Logger()
		switch {
		case errors.Is(err, leasestore.ErrUnavailable) || errors.Is(err, leasestore.ErrForbidden) || ctx.Err() != nil:
			return err
		case err != nil:
			l.Error().Err(err).Msg("the store refused a late outcome; dropping it")
		default:
			l.Info().Str("outcome", late.Detail()).Bool("released", c.Released).Bool("crash_withdrawn", c.CrashWithdrawn).
				Bool("quarantine_lifted", c.QuarantineLifted).Int("crashes", c.Crashes).
				Dur("late_by", time.Since(p.Written)).Msg("delivered a late outcome: " + c.String())
		}
		if err := os.Remove(p.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing the delivered outcome %s: %w", p.path, err)
		}
	}
	return nil
}
