package loadtest

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/gonum/stat"

	"github.com/morphlab/morphlab/internal/datadir"
	"github.com/morphlab/morphlab/internal/openai"
)

// TestArrivals checks the schedule: first at 0, last at (n-1)/rate, and gaps whose coefficient of variation is
// that of a gamma with shape burstiness, 1/sqrt(burstiness).
func TestArrivals(t *testing.T) {
	const n = 20001
	for _, c := range []struct{ rate, burstiness float64 }{{4, 1}, {0.5, 0.25}, {10, 4}} {
		at, err := Arrivals(c.rate, c.burstiness, n, 7)
		if err != nil {
			t.Fatal(err)
		}
		if at[0] != 0 {
			t.Errorf("first arrival %v, want 0", at[0])
		}
		if want := time.Duration(float64(n-1) / c.rate * float64(time.Second)); absDur(at[n-1]-want) > time.Microsecond {
			t.Errorf("rate %v: last arrival %v, want %v", c.rate, at[n-1], want)
		}
		gaps := make([]float64, n-1)
		for i := range gaps {
			gaps[i] = (at[i+1] - at[i]).Seconds()
		}
		mean, std := stat.MeanStdDev(gaps, nil)
		if cv, want := std/mean, 1/math.Sqrt(c.burstiness); math.Abs(cv/want-1) > 0.05 {
			t.Errorf("rate %v burstiness %v: gaps' coefficient of variation %.3f, want %.3f within 5%%", c.rate, c.burstiness, cv, want)
		}
		again, _ := Arrivals(c.rate, c.burstiness, n, 7)
		other, _ := Arrivals(c.rate, c.burstiness, n, 8)
		if !reflect.DeepEqual(at, again) || reflect.DeepEqual(at, other) {
			t.Errorf("the same seed must give the same arrivals, another seed others")
		}
	}
	if at, err := Arrivals(2, 1, 1, 0); err != nil || !reflect.DeepEqual(at, []time.Duration{0}) {
		t.Errorf("one arrival: %v, %v", at, err)
	}
	for _, bad := range [][2]float64{{0, 1}, {math.Inf(1), 1}, {math.NaN(), 1}, {1, 0}, {1, -1}} {
		if _, err := Arrivals(bad[0], bad[1], 10, 0); err == nil {
			t.Errorf("Arrivals(rate %v, burstiness %v) gave no error", bad[0], bad[1])
		}
	}
}

func absDur(d time.Duration) time.Duration { return max(d, -d) }

func TestPromptWorkload(t *testing.T) {
	ps := []openai.Prompt{{Text: "a"}, {Tokens: []int{4, 5}}}
	reqs := PromptWorkload([]time.Duration{0, time.Second, 2 * time.Second}, ps, 9)
	want := []Request{
		{Arrival: 0, Prompt: ps[0], MaxTokens: 9},
		{Arrival: time.Second, Prompt: ps[1], PromptTokens: 2, MaxTokens: 9},
		{Arrival: 2 * time.Second, Prompt: ps[0], MaxTokens: 9},
	}
	if !reflect.DeepEqual(reqs, want) {
		t.Errorf("workload %+v\nwant %+v", reqs, want)
	}
}

func TestLengthWorkload(t *testing.T) {
	at := []time.Duration{0, 1500 * time.Millisecond}
	reqs, err := LengthWorkload(at, []int{3, 5}, []int{7, 1}, 100, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		if r.Arrival != at[i] || len(r.Prompt.Tokens) != []int{3, 5}[i] || r.PromptTokens != len(r.Prompt.Tokens) || r.MaxTokens != []int{7, 1}[i] {
			t.Errorf("request %d: %+v", i, r)
		}
	}
	for _, bad := range []struct{ p, o []int }{{[]int{1}, []int{1, 1}}, {[]int{0, 1}, []int{1, 1}}, {[]int{1, 1}, []int{1, 0}}} {
		if _, err := LengthWorkload(at, bad.p, bad.o, 100, 2); err == nil {
			t.Errorf("LengthWorkload(%v, %v) gave no error", bad.p, bad.o)
		}
	}
}

// TestRandomLengths: ratio 0 gives the lengths themselves; ratio 0.5 of 64 and 10 covers exactly [32, 96] and
// [5, 15], every integer of them, with the mean of the range; the same seed repeats.
func TestRandomLengths(t *testing.T) {
	p, o, err := RandomLengths(5, 64, 10, 0, 1)
	if err != nil || !reflect.DeepEqual(p, []int{64, 64, 64, 64, 64}) || !reflect.DeepEqual(o, []int{10, 10, 10, 10, 10}) {
		t.Errorf("ratio 0: %v, %v, %v; want 64s and 10s", p, o, err)
	}
	const n = 20000
	p, o, err = RandomLengths(n, 64, 10, 0.5, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		got    []int
		lo, hi int
	}{{"prompt", p, 32, 96}, {"output", o, 5, 15}} {
		seen := map[int]int{}
		sum := 0
		for _, v := range c.got {
			seen[v]++
			sum += v
		}
		for v := range seen {
			if v < c.lo || v > c.hi {
				t.Errorf("%s length %d outside [%d, %d]", c.name, v, c.lo, c.hi)
			}
		}
		if len(seen) != c.hi-c.lo+1 {
			t.Errorf("%s lengths take %d values, want all %d of [%d, %d]", c.name, len(seen), c.hi-c.lo+1, c.lo, c.hi)
		}
		if mean, want := float64(sum)/n, float64(c.lo+c.hi)/2; math.Abs(mean-want) > 0.01*want {
			t.Errorf("%s mean %.2f, want %.1f within 1%%", c.name, mean, want)
		}
	}
	p2, o2, _ := RandomLengths(n, 64, 10, 0.5, 1)
	if !reflect.DeepEqual(p, p2) || !reflect.DeepEqual(o, o2) {
		t.Error("the same seed gave other lengths")
	}
	for _, bad := range []struct {
		n, p, o int
		r       float64
	}{{0, 1, 1, 0}, {1, 0, 1, 0}, {1, 1, 0, 0}, {1, 1, 1, 1}, {1, 1, 1, -0.1}, {1, 1, 1, math.NaN()}} {
		if _, _, err := RandomLengths(bad.n, bad.p, bad.o, bad.r, 1); err == nil {
			t.Errorf("RandomLengths(%d, %d, %d, %v) gave no error", bad.n, bad.p, bad.o, bad.r)
		}
	}
}

func TestSyntheticPrompts(t *testing.T) {
	ps, err := SyntheticPrompts(3, 50, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if len(p.Tokens) != 50 || p.Text != "" {
			t.Fatalf("prompt %+v, want 50 token ids", p)
		}
		for _, id := range p.Tokens {
			if id < 3 || id >= 10 {
				t.Fatalf("token id %d outside [3, 10)", id)
			}
		}
	}
	if reflect.DeepEqual(ps[0], ps[1]) {
		t.Errorf("prompts are all the same")
	}
	if _, err := SyntheticPrompts(1, 0, 10, 1); err == nil {
		t.Errorf("no error for 0 tokens")
	}
	if _, err := SyntheticPrompts(1, 1, 3, 1); err == nil {
		t.Errorf("no error for a vocabulary of 3")
	}
}

func TestLoadPrompts(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name, body string
		want       []string
		err        string
	}{
		{"q.jsonl", `{"question_id": 1, "turns": ["first?", "second?"]}` + "\n\n" + `{"prompt": "p"}` + "\n" + `{"text": "t"}`, []string{"first?", "p", "t"}, ""},
		{"lines.txt", "What is a hobbit?\n\n  Why?  \n", []string{"What is a hobbit?", "Why?"}, ""},
		{"bad.jsonl", `{"turns": ["a"]}` + "\n" + `{"turns": [`, nil, "bad.jsonl:2: not a JSON record"},
		{"empty-turn.jsonl", `{"turns": ["a"]}` + "\n" + `{"turns": [""]}`, nil, "empty-turn.jsonl:2: no prompt"},
		{"empty.txt", "\n\n", nil, "empty.txt: no prompts"},
	} {
		ps, err := LoadPrompts(write(c.name, c.body))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want %q", c.name, err, c.err)
			}
			continue
		}
		var got []string
		for _, p := range ps {
			got = append(got, p.Text)
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}

// FuzzLoadPrompts checks that any file either loads as non-empty prompts or gives an error naming the file.
func FuzzLoadPrompts(f *testing.F) {
	f.Add([]byte(`{"question_id": 81, "category": "writing", "turns": ["Compose a post.", "Rewrite it."]}` + "\n"))
	f.Add([]byte("What is quantum field theory?\nWhy?\n"))
	f.Add([]byte(`{"turns": []}`))
	f.Add([]byte("{\n"))
	path := filepath.Join(f.TempDir(), "p.jsonl")
	f.Fuzz(func(t *testing.T, body []byte) {
		if err := os.WriteFile(path, body, 0o644); err != nil {
			t.Fatal(err)
		}
		ps, err := LoadPrompts(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if len(ps) == 0 {
			t.Fatalf("no prompts and no error")
		}
		for i, p := range ps {
			if strings.TrimSpace(p.Text) == "" {
				t.Fatalf("prompt %d is empty", i)
			}
		}
	})
}

// The shared prompt files load: MT-Bench's 80 questions, Vicuna's 80, and llama.cpp's one-per-line questions.
func TestLoadSharedPrompts(t *testing.T) {
	for _, c := range []struct {
		file  string
		n     int
		first string
	}{
		{"eval/prompts/mt_bench_question.jsonl", 80, "Compose an engaging travel blog post"},
		{"eval/prompts/vicuna_bench_question.jsonl", 80, "How can I improve my time management skills?"},
		{"eval/prompts/llamacpp_parallel-questions.txt", 0, "What do you know about Hobbits?"},
	} {
		ps, err := LoadPrompts(datadir.ForTest(t, c.file))
		if err != nil {
			t.Fatal(err)
		}
		if (c.n != 0 && len(ps) != c.n) || !strings.HasPrefix(ps[0].Text, c.first) {
			t.Errorf("%s: %d prompts, first %q; want %d, %q...", c.file, len(ps), ps[0].Text, c.n, c.first)
		}
	}
}
