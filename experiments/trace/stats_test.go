package trace

import (
	"strings"
	"testing"
)

// TestWriteSummaries: a column per trace, named by its file's base name; a length-only table's time figures are
// "-"; a BurstGPT trace adds the failed row and a reordered one the out-of-order row.
func TestWriteSummaries(t *testing.T) {
	timed := &Trace{Source: "/data/a.csv", Format: BurstGPT, Transforms: []string{"thin=0.5"}, Failed: 3, Reordered: 1,
		Requests: []Request{{Arrival: 0, PromptTokens: 10, OutputTokens: 4}, {Arrival: 2, PromptTokens: 30, OutputTokens: 6}}}
	lengths := &Trace{Source: "/data/b.csv", Format: "lengths", NoArrivals: true, Requests: []Request{{PromptTokens: 7, OutputTokens: 1}}}
	var b strings.Builder
	if err := WriteSummaries(&b, []Summary{Summarize(timed), Summarize(lengths)}); err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for line := range strings.SplitSeq(b.String(), "\n") {
		var cells []string
		for c := range strings.SplitSeq(strings.Trim(line, "|"), "|") {
			cells = append(cells, strings.TrimSpace(c))
		}
		rows[cells[0]] = cells[1:]
	}
	for name, want := range map[string]string{
		"statistic": "a.csv b.csv", "transforms": "thin=0.5 ", "requests": "2 1", "duration (s)": "2.000 -", "mean rate (req/s)": "1.000 -",
		"prompt min / max": "10 / 30 7 / 7", "failed (skipped unless --keep-failed)": "3 0", "records out of order (sorted)": "1 0",
	} {
		if got := strings.Join(rows[name], " "); got != want {
			t.Errorf("row %q: %q, want %q\n%s", name, got, want, b.String())
		}
	}
}
