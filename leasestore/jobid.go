package leasestore

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// MaxJobIDLen is the longest job ID, in bytes.
const MaxJobIDLen = 200

// InvalidJobIDError explains why a job ID was refused.
type InvalidJobIDError struct {
	ID     string
	Reason string
}

// Error names the ID and what is wrong with it.
func (e *InvalidJobIDError) Error() string {
	return fmt.Sprintf("invalid job ID %q: %s", e.ID, e.Reason)
}

// ValidateJobID checks that id is 1–200 bytes of A-Z a-z 0-9 . _ - : / @ + =.
// The set keeps glob patterns, hash tags, whitespace and control bytes out of
// store keys. The error names the first offending character and its offset.
func ValidateJobID(id string) error {
	if id == "" {
		return &InvalidJobIDError{ID: id, Reason: "it is empty"}
	}
	if len(id) > MaxJobIDLen {
		return &InvalidJobIDError{ID: id, Reason: fmt.Sprintf("it is %d bytes long, the limit is %d", len(id), MaxJobIDLen)}
	}
	for i := 0; i < len(id); i++ {
		if !jobIDByte(id[i]) {
			return &InvalidJobIDError{ID: id, Reason: fmt.Sprintf(
				"character %s at byte %d is not allowed (use A-Z a-z 0-9 . _ - : / @ + =)", offending(id[i:]), i)}
		}
	}
	return nil
}

// offending shows the character s starts with as a user typed it: 'é', not
// the first byte of its UTF-8 encoding; a byte that starts no valid UTF-8
// character is shown as '\xff'.
func offending(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && size <= 1 {
		return fmt.Sprintf("'\\x%02x'", s[0])
	}
	return strconv.QuoteRune(r)
}

func jobIDByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '.', '_', '-', ':', '/', '@', '+', '=':
		return true
	}
	return false
}

// NamespaceError explains why a namespace was refused.
type NamespaceError struct {
	Namespace string
	Reason    string
}

// Error names the namespace and what is wrong with it.
func (e *NamespaceError) Error() string {
	return fmt.Sprintf("invalid namespace %q: %s", e.Namespace, e.Reason)
}

// ValidateNamespace checks a --namespace value: 1–64 bytes of the job ID
// character set, since it becomes part of every key.
func ValidateNamespace(ns string) error {
	if ns == "" || len(ns) > 64 {
		return &NamespaceError{Namespace: ns, Reason: "it must be 1 to 64 bytes long"}
	}
	for i := 0; i < len(ns); i++ {
		if !jobIDByte(ns[i]) {
			return &NamespaceError{Namespace: ns, Reason: fmt.Sprintf(
				"character %s at byte %d is not allowed (use A-Z a-z 0-9 . _ - : / @ + =)", offending(ns[i:]), i)}
		}
	}
	return nil
}

// MaxRegionLen is the longest region a worker may name.
const MaxRegionLen = 64

// ValidateRegion checks a region (AcquireRequest.Region: the jobs of a
// region run only in it): 1–64 bytes of the job ID character set, since a
// store keeps it on the job's record and may use it in keys.
func ValidateRegion(region string) error {
	if region == "" || len(region) > MaxRegionLen {
		return fmt.Errorf("a region is 1 to %d bytes long", MaxRegionLen)
	}
	if err := ValidateJobID(region); err != nil {
		return fmt.Errorf("a region is made of A-Z a-z 0-9 . _ - : / @ + =")
	}
	return nil
}
