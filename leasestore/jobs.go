package leasestore

import (
	"slices"
	"strings"
)

// SelectJobs is the selection Operator.Jobs makes, for a store that cannot
// make it as it reads: the IDs of jobs that start with prefix, ordered, at
// most limit of them (0: no limit). It reorders jobs.
func SelectJobs(jobs []string, prefix string, limit int) []string {
	jobs = slices.DeleteFunc(jobs, func(job string) bool { return !strings.HasPrefix(job, prefix) })
	slices.Sort(jobs)
	if limit > 0 && len(jobs) > limit {
		jobs = jobs[:limit]
	}
	return jobs
}
