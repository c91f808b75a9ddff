// Package benchpkg holds a small benchmark for the end-to-end test of 'morphlab bench'.
package benchpkg

import (
	"strconv"
	"testing"
)

func BenchmarkSum(b *testing.B) {
	for _, n := range []int{64, 4096} {
		b.Run("n="+strconv.Itoa(n), func(b *testing.B) {
			x := make([]float64, n)
			var s float64
			b.SetBytes(int64(8 * n))
			for b.Loop() {
				for _, v := range x {
					s += v
				}
			}
			b.ReportMetric(float64(n), "elems")
			if s != 0 {
				b.Fatal("sum of zeros is not zero")
			}
		})
	}
}
