// Package numfmt formats measurements for the tables the command line and the load tester print.
package numfmt

import (
	"fmt"
	"math"
	"strconv"
)

// Figure formats a measurement with about four significant digits and no exponent for large values:
// 12345678, 1234, 123.4, 12.35, 1.235, 0.1235.
func Figure(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1000 || v == 0:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 3, 64)
	default:
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
}

// Bytes formats a size in binary units: 32 KiB, 1 MiB, 1.5 GiB.
func Bytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64) + " " + units[i]
}

// Count formats a count such as a model's parameters with three significant digits: 260K, 15.2M, 6.74B.
func Count(n int) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.3gB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.3gM", float64(n)/1e6)
	}
	return fmt.Sprintf("%.3gK", float64(n)/1e3)
}
