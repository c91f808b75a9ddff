package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/internal/datadir"
)

// TestDataFetch fetches tok512.bin from a local mirror serving the shared data directory's copy, then again
// (verified in place), then from a mirror that is down.
func TestDataFetch(t *testing.T) {
	src := datadir.ForTest(t, "models/tok512.bin")
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/models/tok512.bin" {
			http.NotFound(w, r)
			return
		}
		w.Write(data)
	}))
	defer srv.Close()
	dir := t.TempDir()
	for _, status := range []string{"fetched", "present"} {
		code, stdout, stderr := runCLI("data", "fetch", "--dir", dir, "--base-url", srv.URL, "models/tok512.bin")
		if code != 0 || !strings.Contains(stdout, "| models/tok512.bin | 6.081 KiB | "+status+" |") {
			t.Errorf("data fetch: exit %d, stdout %q, stderr %q; want 0 and the file %s", code, stdout, stderr, status)
		}
	}
	if got, err := os.ReadFile(filepath.Join(dir, "models/tok512.bin")); err != nil || string(got) != string(data) {
		t.Errorf("fetched file differs (%v)", err)
	}

	srv.Close()
	code, _, stderr := runCLI("data", "fetch", "--dir", t.TempDir(), "--base-url", srv.URL, "models")
	host := strings.TrimPrefix(srv.URL, "http://")
	if code != 1 || stderr != "morphlab data: could not reach "+host+": 5 of 5 files not in place (no network?)\n" {
		t.Errorf("data fetch from a mirror that is down: exit %d, stderr %q", code, stderr)
	}
}

func TestDataUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"data"}, "want a subcommand, fetch or list"},
		{[]string{"data", "frob"}, `unknown subcommand "frob"`},
		{[]string{"data", "fetch", "nosuch"}, `"nosuch" is no data file or directory of the manifest`},
		{[]string{"data", "list", "--frob"}, "flag provided but not defined: -frob"},
	} {
		code, _, stderr := runCLI(tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line with %q", tc.args, code, stderr, tc.want)
		}
	}
	code, stdout, _ := runCLI("data", "list", "traces/azure2023")
	if code != 0 || !strings.Contains(stdout, "| traces/azure2023/AzureLLMInferenceTrace_code.csv | 312.6 KiB | 54e9a6d2a4bd06ba |") ||
		!strings.Contains(stdout, "2 files, 1039305 bytes (1015 KiB)") {
		t.Errorf("data list traces/azure2023: exit %d\n%s", code, stdout)
	}
}
