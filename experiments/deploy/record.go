package deploy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
)

// Rerun runs again what old's meta records, and returns the new results and engine events: the deployment (or
// fleet) rebuilt from its record, the trace made again from its recipe (its file read again and checked against
// the recorded sha256, or its generator drawn again with its seed; every transform reapplied), and the trace
// replayed with the recorded prompt seed, options and SLO; a quality comparison is made again against its
// reference file. A simulation, or a fleet of them, gives the same results.json byte for byte when this build is
// the one that ran it (the meta records the build); the cpu executor on the wall or CPU-time clock times its steps
// anew, so its timings, and what follows from them, differ within the machine's noise. A file that changed or is
// missing is an error naming it.
func Rerun(ctx context.Context, old *results.Run) (*results.Run, []engine.Event, error) {
	m := old.Meta
	if m.Deployment == nil && m.Fleet == nil {
		return nil, nil, fmt.Errorf("deploy: the results (schema %d) record no deployment: they were written before results recorded one", old.Schema)
	}
	t, err := trace.Recipe{Source: m.Trace.Source, SHA256: m.Trace.SHA256, Format: m.Trace.Format, Transforms: m.Trace.Transforms}.Rebuild()
	if err != nil {
		return nil, nil, err
	}
	o := ReplayOptions{SLO: m.SLO, PromptSeed: m.Replay.PromptSeed, KeepTokens: m.Replay.KeepTokens, KeepSteps: m.Replay.KeepSteps}
	var r *results.Run
	var events []engine.Event
	if m.Fleet != nil {
		f, err := fleetOf(*m.Fleet)
		if err != nil {
			return nil, nil, err
		}
		if r, err = f.Replay(ctx, t, o); err != nil {
			return nil, nil, err
		}
	} else {
		d, err := deploymentOf(*m.Deployment)
		if err != nil {
			return nil, nil, err
		}
		in, err := d.Build()
		if err != nil {
			return nil, nil, err
		}
		if r, events, err = in.Replay(ctx, t, o); err != nil {
			return nil, nil, err
		}
	}
	if old.Quality != nil {
		if r.Quality, err = results.Against(r, old.Quality.Reference); err != nil {
			return nil, nil, fmt.Errorf("deploy: the quality's reference: %w", err)
		}
	}
	return r, events, nil
}

// replayMeta is what a replay's results record beside the deployment or fleet: the trace, the replay's options
// and this build.
func replayMeta(t *trace.Trace, o ReplayOptions) results.Meta {
	return results.Meta{Trace: traceInfo(t), SLO: o.SLO, Morphlab: results.ThisBuild(),
		Replay: results.Replay{PromptSeed: max(o.PromptSeed, 1), KeepTokens: o.KeepTokens, KeepSteps: o.KeepSteps}}
}

// traceInfo is what results record of the trace a run replayed.
func traceInfo(t *trace.Trace) results.TraceInfo {
	r := t.Recipe()
	return results.TraceInfo{Source: r.Source, SHA256: r.SHA256, Format: r.Format, Transforms: r.Transforms, Requests: len(t.Requests)}
}

// record is d as results record it. d is a deployment after its defaults (Loaded.Deployment); its calibration
// and profile files are read for their sha256.
func (d Deployment) record() (results.Deployment, error) {
	r := results.Deployment{Model: d.Model, Tokenizer: d.Tokenizer, WeightsSeed: d.WeightsSeed, DType: d.DType, Classifier: d.Classifier,
		Executor: d.Executor, Device: d.Device, Memory: d.Memory, MemoryUtilization: d.MemoryUtilization,
		KV: results.KV{Blocks: d.KV.Blocks, BlockSize: d.KV.BlockSize, DType: d.KV.DType,
			PrefixCaching: d.PrefixCaching()},
		Scheduler: results.Scheduler{Kind: d.Scheduler.Kind, MaxBatchedTokens: d.Scheduler.MaxBatchedTokens,
			MaxNumSeqs: d.Scheduler.MaxNumSeqs, BatchSize: d.Scheduler.BatchSize, MaxDelay: d.Scheduler.MaxDelay},
		Policy: d.Policy.String(), Params: morph.Params(d.Policy), BlockingSwaps: d.BlockingSwaps, Clock: d.Clock,
		Threads: d.Threads, SimSeed: d.SimSeed}
	var err error
	switch {
	case d.Calibration != "":
		r.Calibration = &results.Calibration{}
		if r.Calibration.File, err = fileRecord(d.Calibration); err != nil {
			return r, err
		}
	case d.Calibrated != nil:
		r.Calibration = &results.Calibration{Inline: d.Calibrated}
	}
	if d.Profile != "" {
		if r.Profile, err = fileRecord(d.Profile); err != nil {
			return r, err
		}
	}
	return r, nil
}

// deploymentOf is the deployment r records: its policy parsed again from its name, which must give the recorded
// parameters, and its calibration and profile files checked against their sha256.
func deploymentOf(r results.Deployment) (Deployment, error) {
	d := Deployment{Model: r.Model, Tokenizer: r.Tokenizer, WeightsSeed: r.WeightsSeed, DType: r.DType, Classifier: r.Classifier,
		Executor: r.Executor, Device: r.Device, Memory: r.Memory, MemoryUtilization: r.MemoryUtilization,
		KV: KV{Blocks: r.KV.Blocks, BlockSize: r.KV.BlockSize, DType: r.KV.DType,
			NoPrefixCaching: !r.KV.PrefixCaching},
		Scheduler: Scheduler{Kind: r.Scheduler.Kind, MaxBatchedTokens: r.Scheduler.MaxBatchedTokens, MaxNumSeqs: r.Scheduler.MaxNumSeqs,
			BatchSize: r.Scheduler.BatchSize, MaxDelay: r.Scheduler.MaxDelay},
		BlockingSwaps: r.BlockingSwaps, Clock: r.Clock, Threads: r.Threads, SimSeed: r.SimSeed}
	p, err := morph.Parse(r.Policy)
	if err != nil {
		return d, fmt.Errorf("deploy: the recorded policy: %v", err)
	}
	if got, want := compactJSON(morph.Params(p)), compactJSON(r.Params); got != want {
		return d, fmt.Errorf("deploy: policy %s has the parameters %s in this build, %s in the record", r.Policy, got, want)
	}
	d.Policy = p
	if c := r.Calibration; c != nil {
		switch {
		case c.File != nil:
			if err := checkFile(*c.File, "calibration"); err != nil {
				return d, err
			}
			d.Calibration = c.File.Path
		case c.Inline != nil:
			d.Calibrated = c.Inline
		}
	}
	if r.Profile != nil {
		if err := checkFile(*r.Profile, "profile"); err != nil {
			return d, err
		}
		d.Profile = r.Profile.Path
	}
	return d, nil
}

// compactJSON is a JSON value without its spaces; none is null.
func compactJSON(v json.RawMessage) string {
	var b bytes.Buffer
	if len(v) == 0 || json.Compact(&b, v) != nil {
		return "null"
	}
	return b.String()
}

// fleetRecord is the fleet as results record it: f with its defaults (as Replay set them), its replicas as
// started.
func (r *fleetRun) fleetRecord() (*results.FleetSpec, error) {
	f := r.f
	spec := &results.FleetSpec{Router: f.Router, Admission: results.Admission{MaxQueue: f.Admission.MaxQueue, Rate: f.Admission.Rate,
		Burst: f.Admission.Burst}}
	for _, rep := range r.replicas {
		d, err := rep.in.Deployment.record()
		if err != nil {
			return nil, err
		}
		spec.Replicas = append(spec.Replicas, d)
	}
	if a := f.Autoscale; a != nil {
		full, err := a.Template.withDefaults()
		if err != nil {
			return nil, fmt.Errorf("autoscale template: %w", err)
		}
		tmpl, err := full.record()
		if err != nil {
			return nil, err
		}
		spec.Autoscale = &results.Autoscale{Template: tmpl, Metric: a.Metric, Target: a.Target, Min: a.Min, Max: a.Max,
			Interval: a.Interval, Delay: a.Delay, CoolDown: a.CoolDown, Controller: a.Controller, MaxWait: a.MaxWait}
	}
	for _, ft := range f.Faults {
		spec.Faults = append(spec.Faults, results.FaultSpec{Replica: ft.Replica, At: ft.At, Down: ft.Down})
	}
	if len(f.Faults) > 0 {
		o := f.Failover
		spec.Failover = &results.FailoverSpec{Detect: o.Detect, Restart: o.Restart, Response: o.Response.String()}
	}
	return spec, nil
}

// fleetOf is the fleet r records.
func fleetOf(r results.FleetSpec) (Fleet, error) {
	f := Fleet{Router: r.Router, Admission: Admission{MaxQueue: r.Admission.MaxQueue, Rate: r.Admission.Rate, Burst: r.Admission.Burst}}
	for i, rec := range r.Replicas {
		d, err := deploymentOf(rec)
		if err != nil {
			return f, fmt.Errorf("replica %d: %w", i, err)
		}
		f.Replicas = append(f.Replicas, d)
	}
	if a := r.Autoscale; a != nil {
		tmpl, err := deploymentOf(a.Template)
		if err != nil {
			return f, fmt.Errorf("autoscale template: %w", err)
		}
		f.Autoscale = &Autoscale{Template: tmpl, Metric: a.Metric, Target: a.Target, Min: a.Min, Max: a.Max, Interval: a.Interval,
			Delay: a.Delay, CoolDown: a.CoolDown, Controller: a.Controller, MaxWait: a.MaxWait}
	}
	for _, ft := range r.Faults {
		f.Faults = append(f.Faults, Fault{Replica: ft.Replica, At: ft.At, Down: ft.Down})
	}
	if o := r.Failover; o != nil {
		response, err := ParseResponseStart(o.Response)
		if err != nil {
			return f, fmt.Errorf("failover: %w", err)
		}
		f.Failover = Failover{Detect: o.Detect, Restart: o.Restart, Response: response}
	}
	return f, nil
}

// fileRecord is a file and the sha256 of its bytes.
func fileRecord(path string) (*results.File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	return &results.File{Path: path, SHA256: hex.EncodeToString(sum[:])}, nil
}

// checkFile checks that the file recorded still has its bytes.
func checkFile(rec results.File, what string) error {
	now, err := fileRecord(rec.Path)
	if err != nil {
		return fmt.Errorf("deploy: the %s: %w", what, err)
	}
	if now.SHA256 != rec.SHA256 {
		return fmt.Errorf("deploy: the %s %s has changed since the run: sha256 %s, recorded %s", what, rec.Path, now.SHA256, rec.SHA256)
	}
	return nil
}
