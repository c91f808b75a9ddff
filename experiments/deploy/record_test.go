package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/profiling/sensitivity"
)

// replayed is a run written to its directory and read back, as `morphlab rerun` finds it.
type replayed struct {
	dir string
	run *results.Run
}

// writeRun writes r and its events under dir and loads its results.json back.
func writeRun(t *testing.T, dir string, r *results.Run, events []engine.Event) replayed {
	t.Helper()
	if err := r.Write(dir, events); err != nil {
		t.Fatal(err)
	}
	back, err := results.Load(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	return replayed{dir, back}
}

// rerunFiles reruns a written run into dir and returns the files that differ from the run's.
func rerunFiles(t *testing.T, old replayed, dir string) []string {
	t.Helper()
	r, events, err := Rerun(context.Background(), old.run)
	if err != nil {
		t.Fatalf("%s: %v", old.dir, err)
	}
	if err := r.Write(dir, events); err != nil {
		t.Fatal(err)
	}
	var differ []string
	for _, name := range []string{"results.json", "events.jsonl", "table.md", "steps.jsonl"} {
		a, errA := os.ReadFile(filepath.Join(old.dir, name))
		b, errB := os.ReadFile(filepath.Join(dir, name))
		if (errA == nil) != (errB == nil) || !bytes.Equal(a, b) {
			differ = append(differ, name)
		}
	}
	return differ
}

// stories260KCalibration is a made-up CPU calibration of stories260K's shape with f32 and int4 terms.
func stories260KCalibration(t *testing.T) *costmodel.Calibration {
	cfg, err := model.ShapeByName("stories260K")
	if err != nil {
		t.Fatal(err)
	}
	return &costmodel.Calibration{Version: costmodel.CalibrationVersion, Config: cfg, KV: "f32", Threads: 1,
		Formats:   []costmodel.FormatTerms{{Format: "f32", Layer: 1e-3, LayerToken: 1e-5}, {Format: "int4", Layer: 4e-4, LayerToken: 6e-6}},
		DecodeKey: 1e-7, Sampled: 2e-4}
}

// TestRerunSimulations: simulations replayed from a trace file with transforms and from a generated trace — with
// a policy's overrides, blocking swaps, a sim seed and kept tokens, a prompt seed, a budget in bytes, a CPU
// calibration in memory and in a file, a profile's swap order, dynamic batching, and a fleet with admission and an
// autoscaler — run again from their results.json to the same results.json, events.jsonl and table.md, byte for
// byte. A record short of a transform or with another seed gives other results; a changed calibration or
// profile, or results without a deployment, are one-line errors naming what.
func TestRerunSimulations(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "trace.csv")
	var b bytes.Buffer
	b.WriteString("arrived_at,num_prefill_tokens,num_decode_tokens\n")
	for i := range 120 {
		fmt.Fprintf(&b, "%g,%d,%d\n", 0.05*float64(i)+0.3*float64(i/30), 40+(i*53)%700, 10+(i*29)%200)
	}
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	fileTrace, err := (&trace.Flags{TimeScale: 0.8, MaxPrompt: 600, Thin: 0.9, Seed: 4}).Load(file)
	if err != nil {
		t.Fatal(err)
	}
	calib := stories260KCalibration(t)
	calibFile := filepath.Join(dir, "calib.json")
	if err := calib.Save(calibFile); err != nil {
		t.Fatal(err)
	}
	cfg, _ := model.ShapeByName("stories260K")
	profile := filepath.Join(dir, "profile.json")
	if err := (&sensitivity.Profile{Schema: sensitivity.SchemaVersion, Model: sensitivity.ModelInfo{Name: "stories260K", Config: cfg},
		Order: []int{4, 2, 0, 1, 3}}).Save(profile); err != nil {
		t.Fatal(err)
	}
	small, err := trace.Generate(trace.Spec{Process: trace.Gamma{PerSecond: 40, Burstiness: 0.5}, N: 80,
		Lengths: trace.Independent{Prompt: trace.Uniform{Min: 10, Max: 200}, Output: trace.Uniform{Min: 5, Max: 60}}}, 3)
	if err != nil {
		t.Fatal(err)
	}
	onL4 := Deployment{Model: "llama-2-7b", Executor: "sim", Device: "l4", KV: KV{Blocks: 200}, BlockingSwaps: true, SimSeed: 5,
		Policy: mustPolicy(t, "morph:default:persistence=2:layers_per_action=2")}
	onCPU := Deployment{Model: "stories260K", Executor: "sim", Device: "cpu", Calibrated: calib, Memory: 6 << 20,
		Policy: mustPolicy(t, "static:int4"), Scheduler: Scheduler{Kind: "dynamic", BatchSize: 8}}
	fromFile := onCPU
	fromFile.Calibrated, fromFile.Calibration, fromFile.Profile, fromFile.Policy = nil, calibFile, profile, mustPolicy(t, "selective:2")
	slo := metrics.SLO{TTFT: time.Second, TPOT: 50 * time.Millisecond}

	var runs []replayed
	for i, c := range []struct {
		d Deployment
		t *trace.Trace
		o ReplayOptions
	}{
		{onL4, fileTrace, ReplayOptions{SLO: slo, PromptSeed: 9, KeepTokens: true}},
		{onCPU, small, ReplayOptions{SLO: slo, KeepSteps: true}},
		{fromFile, small, ReplayOptions{SLO: slo}},
	} {
		in, err := c.d.Build()
		if err != nil {
			t.Fatal(err)
		}
		r, events, err := in.Replay(context.Background(), c.t, c.o)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, writeRun(t, filepath.Join(dir, fmt.Sprint("run", i)), r, events))
	}
	tmpl := sim7b(t, "fp16", 150)
	fleet := Fleet{Replicas: []Deployment{sim7b(t, "morph:default", 150), onL4}, Router: "least-kv", Admission: Admission{MaxQueue: 40},
		Autoscale: &Autoscale{Template: tmpl, Metric: "outstanding", Target: 4, Min: 2, Max: 4, Interval: 2 * time.Second, Delay: 5 * time.Second,
			Controller: "morph-aware", MaxWait: 3 * time.Second},
		Faults:   []Fault{{Replica: 1, At: 3 * time.Second, Down: 4 * time.Second}},
		Failover: Failover{Detect: 2 * time.Second, Restart: time.Second, Response: ResponseAtFirstToken}}
	fr, err := fleet.Replay(context.Background(), fileTrace, ReplayOptions{SLO: slo, PromptSeed: 2})
	if err != nil {
		t.Fatal(err)
	}
	if fr.Aggregates.Completed == 0 || len(fr.Fleet.Size) < 3 {
		t.Fatalf("the fleet completed %d requests over %d size points", fr.Aggregates.Completed, len(fr.Fleet.Size))
	}
	runs = append(runs, writeRun(t, filepath.Join(dir, "fleet"), fr, nil))

	m := runs[0].run.Meta
	if d := m.Deployment; d == nil || d.Policy != "morph:default:persistence=2:layers_per_action=2" || !d.BlockingSwaps || d.SimSeed != 5 ||
		d.WeightsSeed != 1 || d.Scheduler.MaxBatchedTokens != DefaultMaxBatchedTokens || !d.KV.PrefixCaching || m.Replay.PromptSeed != 9 ||
		!m.Replay.KeepTokens || m.Trace.SHA256 != fileTrace.SHA256 || !strings.HasPrefix(m.Trace.Transforms[0], "thin=0.9/seed=4") {
		t.Errorf("the simulation's record: %+v, %+v", m.Deployment, m)
	}
	if d := runs[1].run.Meta.Deployment; d.Calibration == nil || d.Calibration.Inline == nil || d.Memory != 6<<20 || d.Scheduler.Kind != "dynamic" || d.KV.PrefixCaching {
		t.Errorf("the calibrated simulation's record: %+v", d)
	}
	if d := runs[2].run.Meta.Deployment; d.Calibration.File == nil || d.Calibration.File.Path != calibFile || d.Profile == nil || d.Profile.Path != profile {
		t.Errorf("the files' record: %+v", d)
	}
	if f := runs[3].run.Meta.Fleet; f == nil || len(f.Replicas) != 2 || f.Replicas[1].SimSeed != 5 || f.Autoscale == nil ||
		f.Autoscale.CoolDown != DefaultCoolDown || f.Autoscale.Controller != "morph-aware" || f.Autoscale.MaxWait != 3*time.Second ||
		f.Autoscale.Template.Scheduler.MaxNumSeqs != DefaultMaxNumSeqs || runs[3].run.Meta.Deployment != nil ||
		len(f.Faults) != 1 || f.Faults[0].Down != 4*time.Second || f.Failover == nil || f.Failover.Response != "first-token" {
		t.Errorf("the fleet's record: %+v", f)
	}
	for i, run := range runs {
		if differ := rerunFiles(t, run, filepath.Join(dir, fmt.Sprint("again", i))); len(differ) > 0 {
			t.Errorf("%s run again: %s differ", run.dir, differ)
		}
	}

	// Another record gives other results (beyond the record itself).
	others := map[string]func(m *results.Meta){
		"without a transform": func(m *results.Meta) { m.Trace.Transforms = slices.Delete(slices.Clone(m.Trace.Transforms), 1, 2) },
		"another sim seed":    func(m *results.Meta) { d := *m.Deployment; d.SimSeed = 6; m.Deployment = &d },
		"another policy":      func(m *results.Meta) { d := *m.Deployment; d.Policy, d.Params = "fp16", nil; m.Deployment = &d },
	}
	for what, change := range others {
		old := *runs[0].run
		change(&old.Meta)
		r, _, err := Rerun(context.Background(), &old)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if a, b := aggregatesAndRequests(t, r), aggregatesAndRequests(t, runs[0].run); a == b {
			t.Errorf("%s: the same requests and aggregates", what)
		}
	}

	old := *runs[0].run
	d := *old.Meta.Deployment
	d.Params = json.RawMessage(`{"usage":0.5}`)
	old.Meta.Deployment = &d
	if _, _, err := Rerun(context.Background(), &old); err == nil || !strings.Contains(err.Error(), "policy morph:default:persistence=2:layers_per_action=2 has the parameters") {
		t.Errorf("parameters other than the policy's: %v", err)
	}
	if err := os.WriteFile(calibFile, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Rerun(context.Background(), runs[2].run); err == nil || !strings.HasPrefix(err.Error(), "deploy: the calibration "+calibFile+" has changed since the run: sha256 ") {
		t.Errorf("a changed calibration: %v", err)
	}
	if err := calib.Save(calibFile); err != nil {
		t.Fatal(err)
	}
	os.Remove(profile)
	if _, _, err := Rerun(context.Background(), runs[2].run); err == nil || !strings.Contains(err.Error(), profile) {
		t.Errorf("a missing profile: %v", err)
	}
	schema1, err := results.Load("../results/testdata/schema1-simulate.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Rerun(context.Background(), schema1); err == nil || err.Error() != "deploy: the results (schema 1) record no deployment: they were written before results recorded one" {
		t.Errorf("schema 1: %v", err)
	}
}

// aggregatesAndRequests is a run's figures and requests as JSON, without its meta.
func aggregatesAndRequests(t *testing.T, r *results.Run) string {
	b, err := json.Marshal([]any{r.Aggregates, r.Requests, r.Fleet})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRerunCPU: a run of the real engine on the CPU-time clock runs again from its record with the same meta and
// the same requests, every one served. Its step times are measured anew, so its timings (and what depends on
// them: batches, swaps) are not compared; that would test the machine's load.
func TestRerunCPU(t *testing.T) {
	d := Deployment{Model: "stories260K", KV: KV{Blocks: 40}, Clock: "cpu", Threads: 1, WeightsSeed: 3,
		Policy: mustPolicy(t, "morph:performance:persistence=1"), Scheduler: Scheduler{MaxBatchedTokens: 128}}
	in, err := d.Build()
	if err != nil {
		t.Fatal(err)
	}
	tr := burst(t, 12, 80, 16)
	r, events, err := in.Replay(context.Background(), tr, ReplayOptions{SLO: metrics.SLO{TTFT: time.Second}, PromptSeed: 4})
	if err != nil {
		t.Fatal(err)
	}
	old := writeRun(t, t.TempDir(), r, events)
	again, _, err := Rerun(context.Background(), old.run)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(old.run.Meta)
	b, _ := json.Marshal(again.Meta)
	if !bytes.Equal(a, b) || old.run.Meta.Deployment.WeightsSeed != 3 || old.run.Meta.Deployment.Threads != 1 {
		t.Errorf("meta run again:\n%s\nwas\n%s", b, a)
	}
	if again.Aggregates.Completed != 12 || old.run.Aggregates.Completed != 12 || len(again.Requests) != 12 {
		t.Fatalf("%d and %d of 12 completed", old.run.Aggregates.Completed, again.Aggregates.Completed)
	}
	for i, q := range again.Requests {
		p := old.run.Requests[i]
		if q.ID != p.ID || q.Arrival != p.Arrival || q.Prompt != p.Prompt || q.MaxTokens != p.MaxTokens {
			t.Errorf("request %d run again: %+v, was %+v", i, q, p)
		}
	}
}
