// Package metrics holds the service-level objectives of vLLM's serving benchmark (benchmark_serving's --goodput):
// the latency limits a request must meet to count toward goodput and against the SLO violation rate. A
// simulation, a replay on the real engine and a load test against a server set them alike; experiments/loadtest
// and experiments/results compute the figures against them with vLLM's definitions.
package metrics

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SLO is the service-level objective of goodput: a request is good when it meets every limit given (a zero
// limit is not given). As in vLLM, TPOT is 0 for a request with a single output token.
type SLO struct {
	TTFT time.Duration `json:"ttft_ns,omitempty"`
	TPOT time.Duration `json:"tpot_ns,omitempty"`
	E2EL time.Duration `json:"e2el_ns,omitempty"`
}

// String is the SLO as ParseSLO reads it: "ttft=2s,tpot=50ms" ("none" without a limit).
func (s SLO) String() string {
	var parts []string
	for _, l := range []struct {
		name  string
		limit time.Duration
	}{{"ttft", s.TTFT}, {"tpot", s.TPOT}, {"e2el", s.E2EL}} {
		if l.limit != 0 {
			parts = append(parts, l.name+"="+l.limit.String())
		}
	}
	if parts == nil {
		return "none"
	}
	return strings.Join(parts, ",")
}

// IsZero reports whether no limit is given.
func (s SLO) IsZero() bool { return s == SLO{} }

// ParseSLO parses "ttft=500ms,tpot=50ms,e2el=2s" (any of the three, limits without a unit in milliseconds).
func ParseSLO(s string) (SLO, error) {
	var slo SLO
	for part := range strings.SplitSeq(s, ",") {
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			return SLO{}, fmt.Errorf("slo %q: want name=limit pairs such as ttft=500ms,tpot=50ms", s)
		}
		d, err := ParseLimit(val)
		if err != nil {
			return SLO{}, fmt.Errorf("slo %q: %v", s, err)
		}
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "ttft":
			slo.TTFT = d
		case "tpot":
			slo.TPOT = d
		case "e2el":
			slo.E2EL = d
		default:
			return SLO{}, fmt.Errorf("slo %q: %q, want ttft, tpot or e2el", s, name)
		}
	}
	return slo, nil
}

// ParseLimit parses a latency limit: a positive duration, a bare number being milliseconds (as vLLM's --goodput
// takes them).
func ParseLimit(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	d, err := time.ParseDuration(s)
	if err != nil {
		v, nerr := strconv.ParseFloat(s, 64)
		if nerr != nil {
			return 0, fmt.Errorf("limit %q, want a duration such as 500ms or a number of milliseconds", s)
		}
		d = time.Duration(v * float64(time.Millisecond))
	}
	if d <= 0 {
		return 0, fmt.Errorf("limit %q, want more than 0", s)
	}
	return d, nil
}
