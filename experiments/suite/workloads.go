package suite

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/morphlab/morphlab/experiments/trace"
)

// snippet is how a workload comes out of a trace file, and the synthetic stand-in that replaces a missing file:
// a 72-s draw at the snippet's own rate with log-normal lengths of the trace's medians, stretched the same way.
type snippet struct {
	name, file string
	cut        func(*trace.Trace) (*trace.Trace, error)
	stretch    float64
	standIn    trace.Spec
}

// The stand-ins' rates and medians are the snippets' own (morphlab trace stats on the shared files).
var snippets = []snippet{
	{"azure-conv", "traces/azure2023/AzureLLMInferenceTrace_conv.csv",
		func(t *trace.Trace) (*trace.Trace, error) { return trace.Busiest(t, 72, trace.ByRequests) }, 4.75,
		trace.Spec{Process: trace.Gamma{PerSecond: 8.56, Burstiness: 0.86}, Duration: 72,
			Lengths: trace.Independent{Prompt: trace.LogNormal{Median: 1020, Sigma: 1}, Output: trace.LogNormal{Median: 129, Sigma: 0.9}}}},
	{"azure-code", "traces/azure2023/AzureLLMInferenceTrace_code.csv",
		func(t *trace.Trace) (*trace.Trace, error) { return trace.Window(t, 1073, 72) }, 4.75,
		trace.Spec{Process: trace.Gamma{PerSecond: 6.15, Burstiness: 0.5}, Duration: 72,
			Lengths: trace.Independent{Prompt: trace.LogNormal{Median: 1469, Sigma: 0.9}, Output: trace.LogNormal{Median: 13, Sigma: 1.2}}}},
	{"mooncake-conv", "traces/mooncake/conversation_trace.jsonl",
		func(t *trace.Trace) (*trace.Trace, error) {
			t, err := trace.Spread(t, 1)
			if err != nil {
				return nil, err
			}
			return trace.Busiest(t, 72, trace.ByRequests)
		}, 4.75,
		trace.Spec{Process: trace.Gamma{PerSecond: 5, Burstiness: 0.5}, Duration: 72,
			Lengths: trace.Independent{Prompt: trace.LogNormal{Median: 8000, Sigma: 0.8}, Output: trace.LogNormal{Median: 300, Sigma: 0.8}}}},
}

// load is the snippet's whole trace from the data directory or, when it is not there, its stand-in drawn (for
// duration seconds when that is above 0), with a note saying so.
func (s snippet) load(data string, duration float64) (t *trace.Trace, standIn string, err error) {
	path := filepath.Join(data, filepath.FromSlash(s.file))
	if _, err := os.Stat(path); data != "" && err == nil {
		t, err = trace.Load(path, trace.LoadOptions{})
		return t, "", err
	}
	spec := s.standIn
	if duration > 0 {
		spec.Duration = duration
	}
	t, err = trace.Generate(spec, 1)
	return t, fmt.Sprintf("%s not found: a synthetic stand-in (%s) replays", s.file, spec.Process), err
}

// Workloads returns the suite's workloads: the user's trace alone, or the paper's snippets (or their stand-ins)
// and the burst, which has no trace of its own (each setup replays one sized to it: Run); Quick keeps the Azure
// conversation snippet and the burst.
func Workloads(opt Options) ([]Workload, error) {
	if opt.TraceFile != "" {
		t, err := trace.Load(opt.TraceFile, trace.LoadOptions{SortArrivals: true})
		if err != nil {
			return nil, err
		}
		if t.NoArrivals {
			return nil, fmt.Errorf("%s has no arrival times; give it some with 'morphlab trace gen --lengths'", opt.TraceFile)
		}
		return []Workload{{Name: "user", Trace: t}}, nil
	}
	var out []Workload
	for i, s := range snippets {
		if opt.Quick && i > 0 {
			break
		}
		w := Workload{Name: s.name}
		t, standIn, err := s.load(opt.Data, 0)
		if err != nil {
			return nil, err
		}
		if w.StandIn = standIn; standIn == "" {
			if t, err = s.cut(t); err != nil {
				return nil, err
			}
		}
		t, err = trace.TimeScale(t, s.stretch)
		if err != nil {
			return nil, err
		}
		w.Trace = t
		out = append(out, w)
	}
	return append(out, Workload{Name: "burst", PerSetup: true}), nil
}
