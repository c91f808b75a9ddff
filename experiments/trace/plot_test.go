package trace

import (
	"bytes"
	"image/png"
	"strings"
	"testing"
)

func TestPlot(t *testing.T) {
	tr, err := Generate(Spec{Process: Gamma{5, 0.5}, Lengths: Independent{LogNormal{1020, 0.8}, LogNormal{129, 0.8}}, Duration: 300}, 1)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Plot(&buf, tr, "png"); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	// 8 x 7.8 inches at 110 dpi: three panels.
	if b := img.Bounds(); b.Dx() != 880 || b.Dy() != 858 {
		t.Errorf("PNG is %dx%d, want 880x858", b.Dx(), b.Dy())
	}
	buf.Reset()
	if err := Plot(&buf, tr, "svg"); err != nil {
		t.Fatal(err)
	}
	svg := buf.String()
	for _, want := range []string{"<svg", "requests/s in 1-s bins", "prompt tokens: p50", "output tokens: p50"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	// A length table has no rate panel.
	tab := knownTrace()
	tab.NoArrivals = true
	buf.Reset()
	if err := Plot(&buf, tab, "svg"); err != nil {
		t.Fatal(err)
	}
	if s := buf.String(); strings.Contains(s, "requests/s") || !strings.Contains(s, "prompt tokens: p50 50, mean 50, p99 99, max 100") {
		t.Error("length-table SVG has a rate panel or wrong length figures")
	}
	if err := Plot(&buf, tr, "gif"); err == nil {
		t.Error("gif accepted")
	}
	for path, want := range map[string]string{"a/b.PNG": "png", "x.svg": "svg", "x.pdf": ""} {
		if got, err := PlotFormat(path); got != want || (want == "") != (err != nil) {
			t.Errorf("PlotFormat(%q) = %q, %v", path, got, err)
		}
	}
}
