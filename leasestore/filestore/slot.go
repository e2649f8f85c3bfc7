package filestore

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/leasectl/leasectl/leasestore/rules"
)

// A record file holds two or more slots, each opening with a header line,
//
//	leasectl-record <seq> <length> <sum>\n
//
// followed by length bytes of content (jobDoc.encode). sum is the
// checksum (slotSum) of "<seq> <length>\n" and the content. Slots sit at offset 0 and at powers of
// two from slotAlign on; the record is the whole slot with the highest
// sequence number. A write goes where it cannot touch that slot: at 0 when
// it fits below it, else at the first power of two past its end. A record
// of a few KiB thus lives in a file of twice that size, which never
// shrinks; a bigger one moves its second slot further out.
const slotMagic = "leasectl-record "

// slotAlign is the lowest offset of a slot other than the first.
const slotAlign = 4096

// slotReadTries is how many times a read without the lock reads the file
// again when it found no whole slot in it: each time, a writer finished a
// slot and began the other while it read, which does not happen ten times
// in a row.
const slotReadTries = 10

// record is a job's record as read from its file.
type record struct {
	path string
	doc  *jobDoc
	body []byte // the newest whole slot's content; nil if none
	seq  uint64 // its sequence number
	at   int64  // its offset
	end  int64  // the offset just past it
}

// readRecord reads the record at path. lock, if not nil, is the record file,
// locked, read through it; a read without the lock tries again when it
// meets slots being written. job, if not empty, is the ID the record must
// hold; a missing record is a zero one with that ID.
func readRecord(path string, lock *os.File, job string) (*record, error) {
	rec := &record{path: path, doc: &jobDoc{Record: rules.Record{Job: job}}}
	for try := 1; ; try++ {
		raw, err := readFile(path, lock)
		if err != nil {
			return nil, err
		}
		if rec.newest(raw) || len(raw) == 0 {
			break
		}
		if lock != nil || try == slotReadTries {
			return nil, &fileError{path, &corruptError{errors.New("no whole slot in it")}}
		}
	}
	if rec.body == nil {
		return rec, nil
	}
	if err := rec.doc.decode(rec.body); err != nil {
		return nil, &fileError{path, &corruptError{err}}
	}
	if rec.doc.Job == "" || (job != "" && rec.doc.Job != job) {
		return nil, &fileError{path, &corruptError{fmt.Errorf("record of job %q found for job %q", rec.doc.Job, job)}}
	}
	return rec, nil
}

// readFile reads a record file: through lock when the lock is held, else
// by its path. A missing file is empty.
func readFile(path string, lock *os.File) ([]byte, error) {
	if lock == nil {
		raw, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, &fileError{path, err}
		}
		return raw, nil
	}
	fi, err := lock.Stat()
	if err != nil {
		return nil, &fileError{path, err}
	}
	raw := make([]byte, fi.Size())
	if _, err := lock.ReadAt(raw, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, &fileError{path, err}
	}
	return raw, nil
}

// newest finds the whole slot with the highest sequence number in raw,
// reporting whether there is one.
func (r *record) newest(raw []byte) bool {
	found := false
	for at := int64(0); at < int64(len(raw)); at = max(slotAlign, 2*at) {
		seq, body, end := parseSlot(raw[at:])
		if body != nil && (!found || seq > r.seq) {
			found = true
			r.seq, r.body, r.at, r.end = seq, body, at, at+end
		}
	}
	return found
}

// parseSlot returns a slot's sequence number, content and length, or a nil
// content when there is no whole slot at the start of raw.
func parseSlot(raw []byte) (uint64, []byte, int64) {
	rest, ok := bytes.CutPrefix(raw, []byte(slotMagic))
	if !ok {
		return 0, nil, 0
	}
	line, rest, ok := bytes.Cut(rest, []byte{'\n'})
	if !ok {
		return 0, nil, 0
	}
	fields := strings.Fields(string(line))
	if len(fields) != 3 {
		return 0, nil, 0
	}
	seq, err1 := strconv.ParseUint(fields[0], 10, 64)
	n, err2 := strconv.ParseUint(fields[1], 10, 31)
	sum, err3 := strconv.ParseUint(fields[2], 16, 64)
	if err1 != nil || err2 != nil || err3 != nil || n > uint64(len(rest)) {
		return 0, nil, 0
	}
	body := rest[:n]
	if slotSum(seq, body) != sum {
		return 0, nil, 0
	}
	return seq, body, int64(len(raw) - len(rest) + int(n))
}

// slotSum is a slot's checksum: FNV-1a (64 bits), which needs no table. A
// CRC-32C's tables cost a fresh process 0.2 to 2 ms to make, and every
// leasectl run is a fresh process; what the sum catches is a torn or stale
// slot, not an adversary.
func slotSum(seq uint64, body []byte) uint64 {
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%d %d\n", seq, len(body))
	_, _ = h.Write(body)
	return h.Sum64()
}

// write writes body in a new slot with the next sequence number, in place,
// through lock, the record file, locked.
func (r *record) write(lock *os.File, body []byte) error {
	seq := r.seq + 1
	buf := fmt.Appendf(nil, "%s%d %d %016x\n", slotMagic, seq, len(body), slotSum(seq, body))
	buf = append(buf, body...)
	// At 0 if it ends before the newest slot begins, else at the first
	// aligned offset past the newest slot's end.
	at := int64(0)
	if r.body != nil && int64(len(buf)) > r.at {
		at = slotAlign
		for at < r.end {
			at *= 2
		}
	}
	if _, err := lock.WriteAt(buf, at); err != nil {
		return &fileError{r.path, err}
	}
	return nil
}
