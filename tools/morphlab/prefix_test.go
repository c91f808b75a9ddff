package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPrefixCommand runs the prefix-caching study on stories260K's shape over a small Mooncake trace whose requests
// continue a few conversations: four runs' files and the table come out, fp16's greedy outputs are the same with
// and without the cache (0% quality loss), the cache finds prompt tokens, and a trace without hash ids, or a
// --policy, is refused.
func TestPrefixCommand(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "conv.jsonl")
	var lines string
	for i := range 30 {
		ids := []string{"0"}
		for j := range 1 + i/6 {
			ids = append(ids, fmt.Sprint(100*(i%6)+j+1)) // conversation i%6, turn i/6
		}
		lines += fmt.Sprintf(`{"timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": [%s]}`+"\n",
			i, 512*len(ids)-100, 10+i, strings.Join(ids, ", "))
	}
	if err := os.WriteFile(tr, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	code, stdout, stderr := runCLI("prefix", "--model", "stories260K", "--trace", tr, "--length-scale", "0.0625,1", "--kv-blocks", "40",
		"--clock", "thread", "--threads", "1", "--out", out)
	if code != 0 {
		t.Fatalf("prefix: exit %d, %q", code, stderr)
	}
	for _, want := range []string{"| stories260K | fp16          | off           |", "| stories260K | fp16          | on (baseline) |", "| 0.000%       |",
		"the cache alone cuts fp16's by"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if row := lineWith(stdout, "on (baseline)"); row == "" || strings.Contains(row, "| 0.0% (") {
		t.Errorf("fp16 with the cache found nothing cached: %q", row)
	}
	for _, f := range []string{"table.md", "fp16/results.json", "fp16_no-prefix-caching/results.json", "morph_default/results.json", "morph_default_no-prefix-caching/events.jsonl"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	plain := filepath.Join(dir, "plain.csv")
	os.WriteFile(plain, []byte("arrived_at,num_prefill_tokens,num_decode_tokens\n0,30,5\n"), 0o644)
	if code, _, stderr := runCLI("prefix", "--model", "stories260K", "--trace", plain, "--out", out); code != 1 || !strings.Contains(stderr, "no request has hash ids") {
		t.Errorf("a trace without hash ids: exit %d, %q", code, stderr)
	}
	if code, _, stderr := runCLI("prefix", "--model", "stories260K", "--trace", tr, "--policy", "fp16", "--out", out); code != 2 || !strings.Contains(stderr, "--policy") {
		t.Errorf("--policy: exit %d, %q", code, stderr)
	}
}

// lineWith returns the first line of s containing sub, or "".
func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}
