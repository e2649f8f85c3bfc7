package leasestore

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateJobID(t *testing.T) {
	tests := []struct {
		id      string
		wantErr string // substring of the error; "" means valid
	}{
		{"nightly-report", ""},
		{"a", ""},
		{"team/app@prod:encode+v2=1.0_x", ""},
		{strings.Repeat("x", MaxJobIDLen), ""},
		{"", "empty"},
		{strings.Repeat("x", MaxJobIDLen+1), "201 bytes"},
		{"a b", `' ' at byte 1`},
		{"job*", `'*' at byte 3`},
		{"{job}", `'{' at byte 0`},
		{"job\n", `'\n' at byte 3`},
		{"jöb", `'ö' at byte 1`},
		{"café", `'é' at byte 3`},
		{"日本", `'日' at byte 0`},
		{"x\xffy", `'\xff' at byte 1`},
		{"job?", `'?'`},
		{"a[b]", `'['`},
	}
	for _, tt := range tests {
		err := ValidateJobID(tt.id)
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("ValidateJobID(%q) = %v, want nil", tt.id, err)
			}
			continue
		}
		var ie *InvalidJobIDError
		if !errors.As(err, &ie) {
			t.Errorf("ValidateJobID(%q) = %v, want *InvalidJobIDError", tt.id, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ValidateJobID(%q) = %q, want it to mention %q", tt.id, err, tt.wantErr)
		}
	}
}

// FuzzValidateJobID checks that every accepted ID is safe to embed in a key
// (no glob, hash-tag, whitespace or control bytes) and that every refusal
// is a one-line *InvalidJobIDError.
func FuzzValidateJobID(f *testing.F) {
	for _, s := range []string{"nightly-report", "", "a b", "{x}", "job*", "x\x00y", strings.Repeat("z", 201)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := ValidateJobID(id)
		if err != nil {
			var ie *InvalidJobIDError
			if !errors.As(err, &ie) {
				t.Fatalf("error %v is not *InvalidJobIDError", err)
			}
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("error is not one line: %q", err)
			}
			return
		}
		if len(id) == 0 || len(id) > MaxJobIDLen {
			t.Fatalf("accepted ID of length %d", len(id))
		}
		if strings.ContainsAny(id, "{}*?[]\\ \t\n\r\x00") {
			t.Fatalf("accepted unsafe ID %q", id)
		}
	})
}
