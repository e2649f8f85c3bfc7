package leasestore

import (
	"regexp"
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
		{"redis://u:s3cret@h/%zz", "redis://u:xxxxx@h/%zz"},
		{"redis://127.0.0.1:notaport", "redis://127.0.0.1:notaport"},
		{"redis://app:s3c:ret@h:notaport/0?password=s3cret&db=1", "redis://app:xxxxx@h:notaport/0?password=xxxxx&db=1"},
		{"redis://app:s3c/ret@h:6379", "redis://app:xxxxx@h:6379"},
		{"etcd://", "etcd://"},
		{"postgres://", "postgres://"},
		{"etcd://u:s3cret@", "etcd://u:xxxxx@"},
		{"127.0.0.1:6379", "127.0.0.1:6379"},
		{"redis://u:12#s3cret@h", "redis://u:xxxxx@h"},
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

// FuzzRedactHidesThePassword: whatever surrounds it, and whether the URL
// parses or not, a password given as user:PASSWORD@ is never shown.
func FuzzRedactHidesThePassword(f *testing.F) {
	f.Add("redis", "app", "s3cQret", "h:6379/0")
	f.Add("redis", "app", "s3c:Qret", "h:notaport")
	f.Add("etcd", "", "pa/sQs#w", "m1:2379,m2:2379")
	f.Add("postgres", "u", "p%zzQword", "db/x?sslmode=disable")
	f.Fuzz(func(t *testing.T, scheme, user, password, rest string) {
		// A password is told from the rest by a Q, which nothing else
		// holds and percent-encoding never writes.
		if !regexp.MustCompile(`^[a-z][a-z0-9+.-]*$`).MatchString(scheme) || !strings.Contains(password, "Q") ||
			strings.Contains(user+rest, "Q") || strings.ContainsAny(user, ":@") || strings.Contains(password, "@") {
			return
		}
		raw := scheme + "://" + user + ":" + password + "@" + rest
		if got := Redact(raw); strings.Contains(got, "Q") {
			t.Fatalf("Redact(%q) = %q shows the password", raw, got)
		}
	})
}
