package mdtable

import (
	"strings"
	"testing"
)

// TestWrite: a Markdown table, columns as wide as their widest cell (by display width), short rows padded.
func TestWrite(t *testing.T) {
	var b strings.Builder
	if err := Write(&b, []string{"name", "value"}, [][]string{{"GEMM", "1.5 ± 3%"}, {"x"}}); err != nil {
		t.Fatal(err)
	}
	want := "| name | value    |\n" +
		"|:-----|:---------|\n" +
		"| GEMM | 1.5 ± 3% |\n" +
		"| x    |          |\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}
