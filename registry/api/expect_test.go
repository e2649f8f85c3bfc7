package api

import (
	"errors"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

func TestExpectRequestValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		req   ExpectRequest
		field string // the field at fault; "" when valid
		want  *leasestore.Expectation
	}{
		{"set", ExpectRequest{JobID: "j", By: "alice", Expect: &Expectation{EveryMS: 3_600_000, GraceMS: 60_000}}, "",
			&leasestore.Expectation{Every: time.Hour, Grace: time.Minute}},
		{"clear", ExpectRequest{JobID: "j", By: "alice"}, "", nil},
		{"no period", ExpectRequest{JobID: "j", By: "alice", Expect: &Expectation{GraceMS: 1}}, "expect", nil},
		{"a negative grace", ExpectRequest{JobID: "j", By: "alice", Expect: &Expectation{EveryMS: 1, GraceMS: -1}}, "expect", nil},
		{"beyond a year", ExpectRequest{JobID: "j", By: "alice", Expect: &Expectation{EveryMS: 400 * 24 * 3_600_000}}, "expect", nil},
		{"signed as leasectl", ExpectRequest{JobID: "j", By: leasestore.ByLeasectl, Expect: &Expectation{EveryMS: 1}}, "by", nil},
		{"a bad job", ExpectRequest{JobID: "a b", By: "alice", Expect: &Expectation{EveryMS: 1}}, "job_id", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job, x, note, err := tc.req.Validate()
			var fe *FieldError
			switch {
			case tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field):
				t.Fatalf("Validate() = %v, want a field error on %s", err, tc.field)
			case tc.field != "":
			case err != nil:
				t.Fatalf("Validate() = %v", err)
			case job != "j" || note.By != "alice" || (x == nil) != (tc.want == nil) || x != nil && !x.Same(*tc.want):
				t.Errorf("Validate() = %s, %+v, %+v; want j, %+v, alice", job, x, note, tc.want)
			}
		})
	}
}
