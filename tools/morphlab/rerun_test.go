package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRerun: a simulation and a fleet's, each of a trace file with transforms, run again with 'morphlab rerun' to
// the same results.json, byte for byte (the fleet with its plot); a changed trace is one line naming it, and bad
// arguments are usage errors.
func TestRerun(t *testing.T) {
	dir := t.TempDir()
	tr := burstFile(t, dir, 200)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"sim", []string{"--policy", "morph:default:persistence=2", "--sim-seed", "3", "--prompt-seed", "5", "--keep-tokens"}},
		{"fleet", []string{"--replicas", "2", "--router", "least-kv", "--autoscale", "outstanding=8", "--max-replicas", "3"}},
	} {
		out, again := filepath.Join(dir, c.name), filepath.Join(dir, c.name+"-again")
		args := append([]string{"simulate", "--model", "llama-2-7b", "--device", "l4", "--trace", tr, "--kv-blocks", "300",
			"--time-scale", "2", "--max-prompt", "700", "--out", out}, c.args...)
		if code, _, stderr := runCLI(args...); code != 0 {
			t.Fatalf("simulate %s: %s", c.name, stderr)
		}
		code, stdout, stderr := runCLI("rerun", filepath.Join(out, "results.json"), "--out", again)
		if code != 0 || !strings.Contains(stdout, "| ") {
			t.Fatalf("rerun %s: exit %d, %q, %q", c.name, code, stdout, stderr)
		}
		a, _ := os.ReadFile(filepath.Join(out, "results.json"))
		b, err := os.ReadFile(filepath.Join(again, "results.json"))
		if err != nil || !bytes.Equal(a, b) || !bytes.Contains(a, []byte(`"transforms": [`+"\n"+`    "time-scale=2",`+"\n"+`    "clip=prompt:700,output:0,context:4096"`)) {
			t.Errorf("%s: results.json run again differs (%v)", c.name, err)
		}
		if _, err := os.Stat(filepath.Join(again, "fleet.png")); (err == nil) != (c.name == "fleet") {
			t.Errorf("%s: fleet.png: %v", c.name, err)
		}
	}
	if err := os.WriteFile(tr, []byte("arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := filepath.Join(dir, "sim", "results.json")
	code, _, stderr := runCLI("rerun", res, "--out", filepath.Join(dir, "changed"))
	if want := "morphlab rerun: " + res + ": trace: " + tr + " has changed since the run: sha256 "; code != 1 ||
		!strings.HasPrefix(stderr, want) || strings.Count(stderr, "\n") != 1 {
		t.Errorf("a changed trace: exit %d, stderr %q; want 1 and %q...", code, stderr, want)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"rerun", res}, "morphlab rerun: --out is required\n"},
		{[]string{"rerun", "--out", dir}, "morphlab rerun: want one results.json, have 0 (run 'morphlab rerun -h' for usage)\n"},
	} {
		if code, _, stderr := runCLI(c.args...); code != 2 || stderr != c.want {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}
