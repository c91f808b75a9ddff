package main

import (
	"encoding/json"
	"flag"

	"github.com/morphlab/morphlab/experiments/metrics"
	"github.com/morphlab/morphlab/experiments/results"
	"github.com/morphlab/morphlab/experiments/trace"
)

// replayFlags are the flags of a replay beside the deployment's: the trace and its transforms, the SLO and where
// the results go.
type replayFlags struct {
	trace    trace.Flags
	path     string
	loadtest string
	slo      string
	out      string
	json     bool
}

func (f *replayFlags) register(fs *flag.FlagSet) {
	f.trace.Register(fs)
	fs.StringVar(&f.path, "trace", "", "request trace `file` (any format experiments/trace reads)")
	fs.StringVar(&f.loadtest, "loadtest", "", "instead of --trace, serve the requests of every rate of a 'morphlab loadtest --json' `report`")
	fs.StringVar(&f.slo, "slo", "ttft=2s", "SLO `limits` for violations and goodput: ttft=..,tpot=..,e2el=..")
	fs.StringVar(&f.out, "out", "", "output `directory`")
	fs.BoolVar(&f.json, "json", false, "print the aggregates as JSON instead of a table")
}

// parse checks the flags and returns the SLO.
func (f *replayFlags) parse() (metrics.SLO, error) {
	slo, err := metrics.ParseSLO(f.slo)
	if err != nil {
		return metrics.SLO{}, usagef("--slo: %v", err)
	}
	switch {
	case f.path == "" && f.loadtest == "":
		return metrics.SLO{}, usagef("--trace is required")
	case f.path != "" && f.loadtest != "":
		return metrics.SLO{}, usagef("give one of --trace and --loadtest")
	case f.out == "":
		return metrics.SLO{}, usagef("--out is required")
	}
	return slo, nil
}

// load loads the trace with its transforms.
func (f *replayFlags) load() (*trace.Trace, error) { return f.trace.Load(f.path) }

// write closes events, writes the results beside them under --out and prints the aggregates.
func (f *replayFlags) write(e *env, r *results.Run, events *results.EventLog) error {
	if err := events.Close(); err != nil {
		return err
	}
	if err := r.WriteResults(f.out); err != nil {
		return err
	}
	if f.json {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r.Aggregates)
	}
	return results.WriteTable(e.stdout, []*results.Run{r})
}
