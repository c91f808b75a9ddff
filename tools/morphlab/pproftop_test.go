package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestPprofTopFlag: a command given --cpuprofile and --pprof-top prints the two tables on stderr; --pprof-top alone
// is a usage error.
func TestPprofTopFlag(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "cpu.prof")
	code, _, stderr := runCLI("probe", "--quick", "--out", "", "--cpuprofile", prof, "--pprof-top", "3")
	if code != 0 {
		t.Fatalf("probe --pprof-top: exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"CPU profile " + prof + ": ", "top 3 by flat time", "top 3 by cumulative time", "| flat", "| function"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	code, _, stderr = runCLI("probe", "--quick", "--out", "", "--pprof-top", "3")
	if code != 2 || stderr != "morphlab probe: --pprof-top needs --cpuprofile\n" {
		t.Errorf("probe --pprof-top without --cpuprofile: exit %d, stderr %q", code, stderr)
	}
}
