package trace

import (
	"bytes"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func arrivalsTrace(arr []float64) *Trace {
	t := &Trace{Source: "arrivals", Format: Synthetic, Requests: make([]Request, len(arr))}
	for i, a := range arr {
		t.Requests[i] = Request{Arrival: a, PromptTokens: 1, OutputTokens: 1}
	}
	return t
}

// TestRenewalStatistics draws 100,000 arrivals from each renewal process and checks the mean rate within 1% and
// the inter-arrival coefficient of variation within 2% of their analytic values: 1 for Poisson, 1/sqrt(burstiness)
// for vLLM's gamma arrivals.
func TestRenewalStatistics(t *testing.T) {
	for _, c := range []struct {
		p  Process
		cv float64
	}{
		{Poisson{5}, 1},
		{Gamma{5, 1}, 1},
		{Gamma{5, 0.25}, 2},
		{Gamma{5, 0.5}, 1 / math.Sqrt(0.5)},
		{Gamma{20, 2}, 1 / math.Sqrt(2)},
		{Gamma{0.5, 4}, 0.5},
	} {
		t.Run(c.p.String(), func(t *testing.T) {
			tr, err := Generate(Spec{Process: c.p, Lengths: Independent{Fixed{10}, Fixed{10}}, N: 100_000}, 1)
			if err != nil {
				t.Fatal(err)
			}
			s := Stats(tr)
			if s.Requests != 100_000 {
				t.Fatalf("%d requests, want 100000", s.Requests)
			}
			if d := s.MeanRate/c.p.Rate() - 1; math.Abs(d) > 0.01 {
				t.Errorf("mean rate %.4f/s, want %g/s within 1%% (off by %.2f%%)", s.MeanRate, c.p.Rate(), 100*d)
			}
			if d := s.InterArrivalCV/c.cv - 1; math.Abs(d) > 0.02 {
				t.Errorf("inter-arrival CV %.4f, want %.4f within 2%% (off by %.2f%%)", s.InterArrivalCV, c.cv, 100*d)
			}
			// Counts in 10-s windows of a renewal process have an index of dispersion of about CV².
			if d := s.Dispersion10 / (c.cv * c.cv); d < 0.85 || d > 1.15 {
				t.Errorf("index of dispersion (10 s) %.3f, want about CV² = %.3f", s.Dispersion10, c.cv*c.cv)
			}
		})
	}
}

// TestOnOffStatistics checks the on/off process's long-run rate (a million arrivals: its rate varies with the
// dwell times, so 100,000 would not pin it to 1%) and that it is far burstier than Poisson.
func TestOnOffStatistics(t *testing.T) {
	p := OnOff{OnRate: 20, OffRate: 2, OnMean: 5, OffMean: 20}
	if p.Rate() != 5.6 {
		t.Fatalf("analytic rate %g, want (20*5+2*20)/25 = 5.6", p.Rate())
	}
	s := Stats(arrivalsTrace(p.Arrivals(rand.New(rand.NewPCG(1, 1)), 1_000_000, 0)))
	if d := s.MeanRate/p.Rate() - 1; math.Abs(d) > 0.02 {
		t.Errorf("mean rate %.4f/s, want 5.6/s within 2%% (off by %.2f%%)", s.MeanRate, 100*d)
	}
	if s.InterArrivalCV < 1.5 || s.Dispersion10 < 20 {
		t.Errorf("CV %.3f, dispersion (10 s) %.2f: want a bursty process (CV > 1.5, dispersion > 20)", s.InterArrivalCV, s.Dispersion10)
	}
	// The off state with rate 0 is silence: no arrival falls in an off dwell.
	silent := OnOff{OnRate: 50, OffRate: 0, OnMean: 1, OffMean: 1}
	arr := silent.Arrivals(rand.New(rand.NewPCG(2, 1)), 0, 1000)
	if r := float64(len(arr)) / 1000; math.Abs(r/25-1) > 0.1 {
		t.Errorf("onoff:50:0:1:1 gave %.2f/s over 1000 s, want about 25", r)
	}
}

// TestSchedule checks a 10x spike: each segment's count within 4 standard deviations of its Poisson mean, and
// nothing after the schedule ends.
func TestSchedule(t *testing.T) {
	p, err := ParseProcess("schedule:100s@100,20s@1000,100s@100")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.String(); got != "schedule:100s@100,20s@1000,100s@100" {
		t.Errorf("String() = %q", got)
	}
	if p.Rate() != 40000.0/220 {
		t.Errorf("Rate() = %g, want 40000/220", p.Rate())
	}
	arr := p.Arrivals(rand.New(rand.NewPCG(1, 1)), 0, 0)
	counts := make([]float64, 3)
	for _, a := range arr {
		switch {
		case a < 100:
			counts[0]++
		case a < 120:
			counts[1]++
		case a < 220:
			counts[2]++
		default:
			t.Fatalf("arrival at %g s, after the schedule's 220 s", a)
		}
	}
	for i, want := range []float64{10000, 20000, 10000} {
		if math.Abs(counts[i]-want) > 4*math.Sqrt(want) {
			t.Errorf("segment %d: %g arrivals, want %g ± %g", i, counts[i], want, 4*math.Sqrt(want))
		}
	}
	if !slices.IsSorted(arr) {
		t.Error("arrivals out of order")
	}
	// A count limit stops the draw early; a time limit cuts it.
	if n := len(p.Arrivals(rand.New(rand.NewPCG(1, 1)), 500, 0)); n != 500 {
		t.Errorf("n=500 gave %d arrivals", n)
	}
	cut := p.Arrivals(rand.New(rand.NewPCG(1, 1)), 0, 50)
	if cut[len(cut)-1] >= 50 || !slices.Equal(cut, arr[:len(cut)]) {
		t.Errorf("until=50 gave %d arrivals ending at %g, want the first arrivals before 50 s", len(cut), cut[len(cut)-1])
	}
}

func TestLengthDists(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	const n = 100_000
	draw := func(d Dist) []float64 {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = float64(d.Draw(r))
		}
		slices.Sort(xs)
		return xs
	}
	ln := draw(LogNormal{Median: 1020, Sigma: 0.8})
	if med := ln[n/2]; math.Abs(med/1020-1) > 0.02 {
		t.Errorf("lognormal median %g, want 1020 within 2%%", med)
	}
	// The 84th percentile of a log-normal is the median times e^sigma.
	if p84 := ln[int(0.8413*n)]; math.Abs(p84/(1020*math.Exp(0.8))-1) > 0.03 {
		t.Errorf("lognormal p84 %g, want %g within 3%%", p84, 1020*math.Exp(0.8))
	}
	u := draw(Uniform{10, 19})
	if u[0] != 10 || u[n-1] != 19 {
		t.Errorf("uniform:10:19 drew %g..%g", u[0], u[n-1])
	}
	var mean float64
	for _, x := range u {
		mean += x / n
	}
	if math.Abs(mean-14.5) > 0.05 {
		t.Errorf("uniform:10:19 mean %g, want 14.5", mean)
	}
	if x := draw(Fixed{42}); x[0] != 42 || x[n-1] != 42 {
		t.Error("fixed:42 drew other lengths")
	}
	for _, spec := range []string{"fixed:42", "uniform:10:19", "lognormal:1020:0.8"} {
		d, err := ParseDist(spec)
		if err != nil || d.String() != spec {
			t.Errorf("ParseDist(%q) = %v, %v", spec, d, err)
		}
	}
	for _, spec := range []string{"fixed:0", "uniform:5:4", "lognormal:0:1", "lognormal:100:-1", "normal:5", "fixed:x"} {
		if _, err := ParseDist(spec); err == nil {
			t.Errorf("ParseDist(%q) accepted", spec)
		}
	}
}

// TestTableLengths checks that sampling from a table keeps each request's (prompt, output) pair.
func TestTableLengths(t *testing.T) {
	tab := knownTrace()
	tr, err := Generate(Spec{Process: Poisson{10}, Lengths: Table{tab}, N: 5000}, 3)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, r := range tr.Requests {
		if r.OutputTokens != 2*r.PromptTokens || r.PromptTokens < 1 || r.PromptTokens > 100 {
			t.Fatalf("drew %d/%d, not a row of the table", r.PromptTokens, r.OutputTokens)
		}
		seen[r.PromptTokens] = true
	}
	if len(seen) != 100 {
		t.Errorf("5000 draws saw %d of the 100 rows", len(seen))
	}
}

// TestGenerateDeterministic checks that a seed gives the same trace byte for byte, that another seed gives
// another, that the lengths do not change the arrivals, and pins the output in a golden file so that a change
// of generator shows.
func TestGenerateDeterministic(t *testing.T) {
	spec := Spec{Process: Gamma{4, 0.5}, Lengths: Independent{LogNormal{1020, 0.8}, Uniform{1, 600}}, N: 1000}
	write := func(seed uint64, spec Spec) []byte {
		tr, err := Generate(spec, seed)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := Write(&b, tr, Vidur); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	a, b := write(42, spec), write(42, spec)
	if !bytes.Equal(a, b) {
		t.Fatal("the same seed gave different traces")
	}
	if bytes.Equal(a, write(43, spec)) {
		t.Fatal("seeds 42 and 43 gave the same trace")
	}
	t1, _ := Generate(spec, 42)
	spec2 := spec
	spec2.Lengths = Independent{Fixed{5}, Fixed{5}}
	t2, _ := Generate(spec2, 42)
	for i := range t1.Requests {
		if t1.Requests[i].Arrival != t2.Requests[i].Arrival {
			t.Fatalf("request %d: other lengths moved its arrival", i)
		}
	}
	golden := filepath.Join("testdata", "gamma-4-0.5-seed42.csv")
	if *update {
		if err := os.WriteFile(golden, a, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if !bytes.Equal(a, want) {
		got := golden + ".got"
		os.WriteFile(got, a, 0o644)
		t.Errorf("generated trace differs from %s (wrote %s)", golden, got)
	}
}

func TestGenerateLimits(t *testing.T) {
	tr, err := Generate(Spec{Process: Poisson{10}, Lengths: Independent{Fixed{1}, Fixed{1}}, Duration: 100}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if last := tr.Requests[len(tr.Requests)-1].Arrival; last >= 100 || len(tr.Requests) < 900 || len(tr.Requests) > 1100 {
		t.Errorf("duration 100 s at 10/s gave %d requests ending at %g s", len(tr.Requests), last)
	}
	both, _ := Generate(Spec{Process: Poisson{10}, Lengths: Independent{Fixed{1}, Fixed{1}}, Duration: 100, N: 50}, 1)
	if len(both.Requests) != 50 {
		t.Errorf("n=50 within 100 s gave %d requests", len(both.Requests))
	}
	for _, bad := range []Spec{
		{Process: Poisson{1}, Lengths: Independent{Fixed{1}, Fixed{1}}},
		{Process: Poisson{1}, N: 10},
		{Lengths: Independent{Fixed{1}, Fixed{1}}, N: 10},
		{Process: Poisson{1}, Lengths: Table{&Trace{Source: "empty"}}, N: 10},
	} {
		if _, err := Generate(bad, 1); err == nil {
			t.Errorf("Generate(%+v) accepted", bad)
		}
	}
}

func TestParseProcess(t *testing.T) {
	for _, spec := range []string{"poisson:5", "gamma:5:0.5", "onoff:20:0:5:20", "schedule:60s@2,20s@20,60s@2"} {
		p, err := ParseProcess(spec)
		if err != nil || p.String() != spec {
			t.Errorf("ParseProcess(%q) = %v, %v", spec, p, err)
		}
	}
	for _, spec := range []string{"poisson", "poisson:0", "poisson:-1", "gamma:5", "gamma:5:0", "onoff:1:2:3",
		"onoff:0:1:1:1", "schedule:", "schedule:10@0", "schedule:-1s@3", "schedule:5s", "uniform:3", "poisson:NaN", "poisson:Inf"} {
		if p, err := ParseProcess(spec); err == nil {
			t.Errorf("ParseProcess(%q) accepted: %v", spec, p)
		}
	}
}

// TestWithArrivals gives a length table Poisson arrivals in row order.
func TestWithArrivals(t *testing.T) {
	tab := knownTrace()
	tab.NoArrivals = true
	for i := range tab.Requests {
		tab.Requests[i].Arrival = 0
	}
	tr, err := WithArrivals(tab, Poisson{2}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if tr.NoArrivals || !tab.NoArrivals || tab.Requests[50].Arrival != 0 {
		t.Fatal("WithArrivals changed its input or left NoArrivals set")
	}
	for i, r := range tr.Requests {
		if r.PromptTokens != i+1 || (i > 0 && r.Arrival <= tr.Requests[i-1].Arrival) {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
	if _, err := WithArrivals(tab, Schedule{{Duration: 1, PerSecond: 1}}, 1); err == nil {
		t.Error("a 1-s schedule gave arrivals to 100 requests")
	}
}
