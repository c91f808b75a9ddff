package numfmt

import "testing"

func TestFigure(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 12345678: "12345678", 1234.4: "1234", 123.44: "123.4",
		12.344: "12.34", 1.2344: "1.234", 0.12344: "0.1234", -5.5: "-5.500"} {
		if got := Figure(v); got != want {
			t.Errorf("Figure(%v) = %q, want %q", v, got, want)
		}
	}
}
