package fence

import (
	"testing"
)

// BenchmarkCheckFromMemory times a check the cached patterns answer from
// memory, on one goroutine and on all, and in a slot (CheckSlot, a job
// fenced per slot), with the system clock; store-checks reports how many
// asked the (fake) store, which should be none or a few.
func BenchmarkCheckFromMemory(b *testing.B) {
	for _, p := range []Pattern{BoundedStaleness, WriteThrough} {
		s := newFakeStore()
		token, slotted := s.grant("job"), s.grant("slotted")
		c, err := New(s, Options{Pattern: p})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(p.String(), func(b *testing.B) {
			before := c.Stats().StoreChecks
			for b.Loop() {
				if err := c.Check(b.Context(), "job", token); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(c.Stats().StoreChecks-before), "store-checks")
		})
		b.Run(p.String()+"/parallel", func(b *testing.B) {
			before := c.Stats().StoreChecks
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := c.Check(b.Context(), "job", token); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(c.Stats().StoreChecks-before), "store-checks")
		})
		b.Run(p.String()+"/slot", func(b *testing.B) {
			before := c.Stats().StoreChecks
			for b.Loop() {
				if err := c.CheckSlot(b.Context(), "slotted", 0, slotted); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(c.Stats().StoreChecks-before), "store-checks")
		})
		_ = c.Close()
	}
}
