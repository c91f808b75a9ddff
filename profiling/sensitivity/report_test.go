package sensitivity

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/profiling/eval"
)

// TestReport: the random orders' curves are averaged into one at each k, the tables show every order and the
// additivity rows, and the plot draws each curve.
func TestReport(t *testing.T) {
	pt := func(k int, ppl float64) eval.Point {
		return eval.Point{K: k, Comparison: eval.Comparison{PPL: ppl, KL: ppl / 100}}
	}
	one, two := uint64(1), uint64(2)
	p := &Profile{Order: []int{1, 0}, Layers: []Scores{{Layer: 0, LIS: 0.9}, {Layer: 1, LIS: 0.95}},
		Baseline: &eval.Point{Comparison: eval.Comparison{PPL: 5, Tokens: 100}},
		Orders: []OrderEval{
			{Name: "lis", Order: []int{1, 0}, Curve: []eval.Point{pt(1, 5.1), pt(2, 5.3)}},
			{Name: "random", Seed: &one, Order: []int{0, 1}, Curve: []eval.Point{pt(1, 5.2), pt(2, 5.3)}},
			{Name: "random", Seed: &two, Order: []int{1, 0}, Curve: []eval.Point{pt(1, 5.1), pt(2, 5.3)}},
		},
		Additivity: []eval.Marginal{{Layer: 1, Alone: 0.1, Added: 0.1}},
	}
	cs := curves(p)
	if len(cs) != 2 || cs[0].label != "lis [1 0]" || cs[1].label != "random (mean of 2)" || math.Abs(cs[1].points[0].PPL-5.15) > 1e-12 {
		t.Fatalf("curves %+v, want lis and the mean of 2 random orders (5.15 at k=1)", cs)
	}
	var b strings.Builder
	if err := WriteTables(&b, p); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| lis [1 0]", "| random (mean of 2) | 5.1500 (0.0515)", "full precision PPL 5.0000 on 100 tokens", "| 1     | +0.1000 | +0.1000 |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("tables lack %q:\n%s", want, b.String())
		}
	}
	svg := filepath.Join(t.TempDir(), "curves.svg")
	if err := Plot(svg, p); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "random (mean of 2)", "lis [1 0]", "perplexity"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("%s lacks %q", svg, want)
		}
	}
	if err := Plot(svg, &Profile{}); err == nil {
		t.Error("a profile without an evaluation plotted")
	}
}
