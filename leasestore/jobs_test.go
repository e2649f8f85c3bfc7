package leasestore

import (
	"slices"
	"testing"
)

func TestSelectJobs(t *testing.T) {
	jobs := []string{"nightly/b", "backup", "nightly/a", "nightly", "nightly/c"}
	for _, tc := range []struct {
		prefix string
		limit  int
		want   []string
	}{
		{"", 0, []string{"backup", "nightly", "nightly/a", "nightly/b", "nightly/c"}},
		{"nightly/", 0, []string{"nightly/a", "nightly/b", "nightly/c"}},
		{"nightly/", 2, []string{"nightly/a", "nightly/b"}},
		{"", 1, []string{"backup"}},
		{"weekly", 0, []string{}},
	} {
		got := SelectJobs(slices.Clone(jobs), tc.prefix, tc.limit)
		if !slices.Equal(got, tc.want) {
			t.Errorf("SelectJobs(%q, %d) = %q, want %q", tc.prefix, tc.limit, got, tc.want)
		}
	}
}
