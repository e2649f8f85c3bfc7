package leasestore

import "fmt"

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
				"character %q at byte %d is not allowed (use A-Z a-z 0-9 . _ - : / @ + =)", rune(id[i]), i)}
		}
	}
	return nil
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

// ValidateNamespace checks a --namespace value: 1–64 bytes of the job ID
// character set, since it becomes part of every key.
func ValidateNamespace(ns string) error {
	if ns == "" || len(ns) > 64 {
		return fmt.Errorf("invalid namespace %q: it must be 1 to 64 bytes long", ns)
	}
	for i := 0; i < len(ns); i++ {
		if !jobIDByte(ns[i]) {
			return fmt.Errorf("invalid namespace %q: character %q at byte %d is not allowed (use A-Z a-z 0-9 . _ - : / @ + =)", ns, rune(ns[i]), i)
		}
	}
	return nil
}
