package results

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/experiments/metrics"
)

// TestLoadSchema1: results.json files of schema 1, written before meta recorded the deployment (a simulation and
// a fleet's, by `morphlab simulate`), still load, their "hardware" read as the device.
func TestLoadSchema1(t *testing.T) {
	r, err := Load("testdata/schema1-simulate.json")
	if err != nil {
		t.Fatal(err)
	}
	m := r.Meta
	if r.Schema != 1 || m.Device != "l4" || m.Policy != "morph:default" || m.KVBlocksFull != 200 || m.Trace.Source != "/tmp/tiny.csv" ||
		m.Deployment != nil || m.Fleet != nil || r.Aggregates.Completed != 4 || len(r.Requests) != 4 || !json.Valid(m.Params) {
		t.Errorf("schema 1 simulation: %+v, %d completed", m, r.Aggregates.Completed)
	}
	f, err := Load("testdata/schema1-fleet.json")
	if err != nil {
		t.Fatal(err)
	}
	if f.Meta.Device != "l4" || f.Fleet == nil || len(f.Fleet.Replicas) != 2 || f.Fleet.Router != "round-robin" || f.Aggregates.Completed != 4 {
		t.Errorf("schema 1 fleet: %+v, %+v", f.Meta, f.Fleet)
	}
}

// TestMetaJSON: the record's JSON names are its own (a golden), and it reads back as written.
func TestMetaJSON(t *testing.T) {
	d := Deployment{Model: "llama-2-7b", WeightsSeed: 1, Executor: "sim", Device: "cpu",
		Calibration: &Calibration{File: &File{Path: "c.json", SHA256: "ef"}},
		KV:          KV{Blocks: 958, BlockSize: 16, DType: "auto", PrefixCaching: true},
		Scheduler:   Scheduler{Kind: "continuous", MaxBatchedTokens: 2048, MaxNumSeqs: 256, BatchSize: 32, MaxDelay: 50 * time.Millisecond},
		Policy:      "morph:default", Params: json.RawMessage(`{"usage":0.85}`), Profile: &File{Path: "p.json", SHA256: "ab"}, Clock: "virtual", SimSeed: 1}
	tmpl := d
	tmpl.Calibration, tmpl.Profile, tmpl.Params, tmpl.Policy = nil, nil, nil, "fp16"
	m := Meta{Command: "simulate", Executor: "sim", Clock: "virtual", Model: "llama-2-7b", Device: "cpu", Policy: "morph:default",
		Trace:      TraceInfo{Source: "t.csv", SHA256: "cd", Format: "vidur", Transforms: []string{"time-scale=2"}, Requests: 3},
		SLO:        metrics.SLO{TTFT: 2 * time.Second},
		Deployment: &d,
		Fleet: &FleetSpec{Replicas: []Deployment{tmpl}, Router: "least-kv", Admission: Admission{MaxQueue: 4, Rate: 2.5, Burst: 3},
			Autoscale: &Autoscale{Template: tmpl, Metric: "kv", Target: 0.8, Min: 1, Max: 4, Interval: time.Second, Delay: 2 * time.Second, CoolDown: 3 * time.Second}},
		Replay:   Replay{PromptSeed: 7, KeepTokens: true},
		Morphlab: BuildInfo{Version: "v1.2.3", Revision: "0123abcd", Modified: true}}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	const tmplJSON = `{"model":"llama-2-7b","tokenizer":"","weights_seed":1,"dtype":"","classifier_dtype":"","executor":"sim","device":"cpu",` +
		`"calibration":null,"memory_bytes":0,"gpu_memory_utilization":0,"kv":{"blocks":958,"block_size":16,"dtype":"auto","prefix_caching":true},` +
		`"scheduler":{"kind":"continuous","max_num_batched_tokens":2048,"max_num_seqs":256,"batch_size":32,"max_delay_ns":50000000},` +
		`"policy":"fp16","params":null,"profile":null,"blocking_swaps":false,"clock":"virtual","threads":0,"sim_seed":1}`
	want := `{"command":"simulate","executor":"sim","clock":"virtual","model":"llama-2-7b","device":"cpu","policy":"morph:default",` +
		`"memory_bytes":0,"kv_blocks_full_precision":0,"block_size":0,` +
		`"trace":{"source":"t.csv","sha256":"cd","format":"vidur","transforms":["time-scale=2"],"requests":3},"slo":{"ttft_ns":2000000000},` +
		`"deployment":{"model":"llama-2-7b","tokenizer":"","weights_seed":1,"dtype":"","classifier_dtype":"","executor":"sim","device":"cpu",` +
		`"calibration":{"file":{"path":"c.json","sha256":"ef"}},` +
		`"memory_bytes":0,"gpu_memory_utilization":0,"kv":{"blocks":958,"block_size":16,"dtype":"auto","prefix_caching":true},` +
		`"scheduler":{"kind":"continuous","max_num_batched_tokens":2048,"max_num_seqs":256,"batch_size":32,"max_delay_ns":50000000},` +
		`"policy":"morph:default","params":{"usage":0.85},"profile":{"path":"p.json","sha256":"ab"},"blocking_swaps":false,"clock":"virtual",` +
		`"threads":0,"sim_seed":1},` +
		`"fleet":{"replicas":[` + tmplJSON + `],"router":"least-kv","admission":{"max_queue":4,"rate_per_s":2.5,"burst":3},` +
		`"autoscale":{"template":` + tmplJSON + `,"metric":"kv","target":0.8,"min_replicas":1,"max_replicas":4,"interval_ns":1000000000,` +
		`"delay_ns":2000000000,"cooldown_ns":3000000000}},` +
		`"replay":{"prompt_seed":7,"keep_tokens":true,"keep_steps":false},` +
		`"morphlab":{"version":"v1.2.3","revision":"0123abcd","modified":true}}`
	if string(b) != want {
		t.Errorf("meta JSON\n%s\nwant\n%s", b, want)
	}
	var back Meta
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back.Deployment.Calibration, m.Deployment.Calibration) ||
		!reflect.DeepEqual(back.Fleet.Autoscale.Template.Scheduler, tmpl.Scheduler) {
		t.Errorf("read back %+v (%v), want %+v", back, err, m)
	}
	// A calibration in memory is inline, in the calibration file's own form.
	m.Deployment.Calibration = &Calibration{Inline: &costmodel.Calibration{Version: 1, KV: "f16", Formats: []costmodel.FormatTerms{{Format: "f16", Layer: 1e-4}}}}
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back.Deployment.Calibration, m.Deployment.Calibration) {
		t.Errorf("inline calibration read back as %+v (%v)", back.Deployment.Calibration, err)
	}
	if again, err := json.Marshal(back); err != nil || !bytes.Equal(again, b) {
		t.Errorf("read back and written again:\n%s\nwant\n%s", again, b)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(`{"hardware":"a100","device":"h100"}`)); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || back.Device != "h100" {
		t.Errorf("device beside hardware: %q, %v; the device wins", back.Device, err)
	}
}

// TestThisBuild: a test binary's build information is recorded as it is: "(devel)" or none, and no revision.
func TestThisBuild(t *testing.T) {
	if b := ThisBuild(); b.Revision != "" || b.Version != "(devel)" && b.Version != "" {
		t.Errorf("a test binary's build: %+v", b)
	}
}
