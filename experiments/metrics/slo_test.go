package metrics

import (
	"testing"
	"time"
)

func TestParseSLO(t *testing.T) {
	slo, err := ParseSLO("ttft=500ms, tpot=50,E2EL=2s")
	if err != nil || slo != (SLO{TTFT: 500 * time.Millisecond, TPOT: 50 * time.Millisecond, E2EL: 2 * time.Second}) {
		t.Errorf("ParseSLO: %+v, %v", slo, err)
	}
	if slo.IsZero() || !(SLO{}).IsZero() {
		t.Errorf("IsZero: %v for %+v, %v for none", slo.IsZero(), slo, (SLO{}).IsZero())
	}
	for bad, want := range map[string]string{
		"ttft":      `slo "ttft": want name=limit pairs such as ttft=500ms,tpot=50ms`,
		"ttft=fast": `slo "ttft=fast": limit "fast", want a duration such as 500ms or a number of milliseconds`,
		"itl=5ms":   `slo "itl=5ms": "itl", want ttft, tpot or e2el`,
		"ttft=0":    `slo "ttft=0": limit "0", want more than 0`,
		"ttft=-1ms": `slo "ttft=-1ms": limit "-1ms", want more than 0`,
		"":          `slo "": want name=limit pairs such as ttft=500ms,tpot=50ms`,
	} {
		if _, err := ParseSLO(bad); err == nil || err.Error() != want {
			t.Errorf("ParseSLO(%q): %v, want %s", bad, err, want)
		}
	}
}

func TestParseLimit(t *testing.T) {
	for in, want := range map[string]time.Duration{"1.5s": 1500 * time.Millisecond, " 250 ": 250 * time.Millisecond, "0.5": 500 * time.Microsecond} {
		if got, err := ParseLimit(in); err != nil || got != want {
			t.Errorf("ParseLimit(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

// TestSLOString: String writes what ParseSLO reads back.
func TestSLOString(t *testing.T) {
	for _, s := range []SLO{{TTFT: 2 * time.Second}, {TTFT: 500 * time.Millisecond, TPOT: 50 * time.Millisecond, E2EL: 2 * time.Second}, {E2EL: time.Minute}} {
		back, err := ParseSLO(s.String())
		if err != nil || back != s {
			t.Errorf("%+v: %q reads back as %+v, %v", s, s.String(), back, err)
		}
	}
	if got := (SLO{}).String(); got != "none" {
		t.Errorf("no limits: %q, want none", got)
	}
}
