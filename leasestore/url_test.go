package leasestore

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	tests := []struct{ raw, want string }{
		{"redis://127.0.0.1:6380/2", "redis://127.0.0.1:6380/2"},
		{"rediss://app:s3cret@redis.example:6380", "rediss://app:xxxxx@redis.example:6380"},
		{"redis://h:1/0?password=s3cret&dial_timeout=1s", "redis://h:1/0?dial_timeout=1s&password=xxxxx"},
		{"redis://h:1?sentinel_password=s3cret&master_name=m", "redis://h:1?master_name=m&sentinel_password=xxxxx"},
		{"redis://h:1?password=s3cret;x", "redis://h:1?<unparsable query>"},
		{"redis://u:pw@h/%zz", "<unparsable URL>"},
		{"file:///var/lib/leasectl", "file:///var/lib/leasectl"},
	}
	for _, tt := range tests {
		got := Redact(tt.raw)
		if strings.Contains(got, "s3cret") {
			t.Errorf("Redact(%q) = %q leaks the password", tt.raw, got)
		}
		if got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.raw, got, tt.want)
		}
	}
}
