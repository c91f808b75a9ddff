// Package numfmt formats measurements for the tables the command line and the load tester print.
package numfmt

import (
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
