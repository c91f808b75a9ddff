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

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{512: "512 B", 32 << 10: "32 KiB", 3 << 19: "1.5 MiB", 256 << 20: "256 MiB", 2 << 30: "2 GiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestCount(t *testing.T) {
	for n, want := range map[int]string{260_000: "260K", 15_191_712: "15.2M", 6_738_415_616: "6.74B"} {
		if got := Count(n); got != want {
			t.Errorf("Count(%d) = %q, want %q", n, got, want)
		}
	}
}
