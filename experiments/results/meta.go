package results

import (
	"encoding/json"
	"runtime/debug"
	"time"

	"github.com/morphlab/morphlab/engine/executor/costmodel"
)

// Deployment is a served model as a run records it (experiments/deploy.Deployment after its defaults): every
// field, under JSON names of its own that stay when the Go names change.
type Deployment struct {
	Model       string `json:"model"`        // a checkpoint file or a catalog name
	Tokenizer   string `json:"tokenizer"`    // a llama2.c tokenizer.bin file, or ""
	WeightsSeed uint64 `json:"weights_seed"` // a named model's random weights (cpu and cuda executors)
	DType       string `json:"dtype"`        // the layers' full precision; "" as stored
	Classifier  string `json:"classifier_dtype"`
	Executor    string `json:"executor"`
	Device      string `json:"device"`
	// Calibration is the sim's CPU calibration, nil without one.
	Calibration *Calibration `json:"calibration"`
	// Memory is the budget asked for in bytes; 0 sizes it by the KV blocks or the device's utilization.
	Memory int64 `json:"memory_bytes"`
	// MemoryUtilization is the share of the device's memory the budget takes, without Memory or KV blocks.
	MemoryUtilization float64   `json:"gpu_memory_utilization"`
	KV                KV        `json:"kv"`
	Scheduler         Scheduler `json:"scheduler"`
	Policy            string    `json:"policy"`
	// Params are a morphing policy's parameters (morph.Params), which the policy's name must give again.
	Params json.RawMessage `json:"params"`
	// Profile is the `morphlab profile` file whose order is the swap order, nil for front to back.
	Profile       *File  `json:"profile"`
	BlockingSwaps bool   `json:"blocking_swaps"`
	Clock         string `json:"clock"`
	Threads       int    `json:"threads"` // 0: GOMAXPROCS
	SimSeed       uint64 `json:"sim_seed"`
}

// KV is a deployment's KV cache.
type KV struct {
	Blocks        int    `json:"blocks"` // the pool in blocks beside the full-precision weights (0: by memory)
	BlockSize     int    `json:"block_size"`
	DType         string `json:"dtype"` // "", auto, f32, f16 or int8
	PrefixCaching bool   `json:"prefix_caching"`
}

// Scheduler is a deployment's batching and its limits.
type Scheduler struct {
	Kind             string        `json:"kind"`
	MaxBatchedTokens int           `json:"max_num_batched_tokens"`
	MaxNumSeqs       int           `json:"max_num_seqs"`
	BatchSize        int           `json:"batch_size"`
	MaxDelay         time.Duration `json:"max_delay_ns"`
}

// File is an input file and the sha256 of its bytes when the run read it.
type File struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

// Calibration is the sim's CPU calibration: a file, or one that was in memory, inline.
type Calibration struct {
	File   *File                  `json:"file,omitempty"`
	Inline *costmodel.Calibration `json:"inline,omitempty"`
}

// FleetSpec is a fleet as a run records it (experiments/deploy.Fleet after its defaults).
type FleetSpec struct {
	Replicas  []Deployment `json:"replicas"` // those serving from the start
	Router    string       `json:"router"`
	Admission Admission    `json:"admission"`
	Autoscale *Autoscale   `json:"autoscale"` // nil: a fixed fleet
	// Faults are the replicas killed during the run and started again, and Failover what the proxy in front
	// does about them (both left out without faults).
	Faults   []FaultSpec   `json:"faults,omitempty"`
	Failover *FailoverSpec `json:"failover,omitempty"`
}

// FaultSpec is one replica killed during a fleet's run: its index among those the fleet starts with, when it
// dies and how long until it is started again.
type FaultSpec struct {
	Replica int           `json:"replica"`
	At      time.Duration `json:"at_ns"`
	Down    time.Duration `json:"down_ns"`
}

// FailoverSpec is how the proxy in front of a fleet handles a replica that dies: the time to mark it down, the
// time from its restart to its serving, and when a response begins (admission or first-token).
type FailoverSpec struct {
	Detect   time.Duration `json:"detect_ns"`
	Restart  time.Duration `json:"restart_ns"`
	Response string        `json:"response"`
}

// Admission is a fleet's admission control (0: no limit).
type Admission struct {
	MaxQueue int     `json:"max_queue"`
	Rate     float64 `json:"rate_per_s"`
	Burst    int     `json:"burst"`
}

// Autoscale is a fleet's autoscaler and the replica it adds.
type Autoscale struct {
	Template Deployment    `json:"template"`
	Metric   string        `json:"metric"`
	Target   float64       `json:"target"`
	Min      int           `json:"min_replicas"`
	Max      int           `json:"max_replicas"`
	Interval time.Duration `json:"interval_ns"`
	Delay    time.Duration `json:"delay_ns"`
	CoolDown time.Duration `json:"cooldown_ns"`
	// Controller is the rule turning the metric into replicas (empty: hpa, as before it was recorded); MaxWait the
	// morph-aware controller's queue wait bound.
	Controller string        `json:"controller,omitempty"`
	MaxWait    time.Duration `json:"max_wait_ns,omitempty"`
}

// Replay is how the trace was replayed: the seed of the prompts' tokens, and what the results kept.
type Replay struct {
	PromptSeed uint64 `json:"prompt_seed"`
	KeepTokens bool   `json:"keep_tokens"`
	KeepSteps  bool   `json:"keep_steps"`
}

// BuildInfo is the morphlab that ran: its module version and VCS revision, as the binary's build information gives
// them ("(devel)" and no revision for a test binary or a build outside version control).
type BuildInfo struct {
	Version  string `json:"version"`
	Revision string `json:"revision"`
	Modified bool   `json:"modified"` // the working tree had changes
}

// ThisBuild is this binary's BuildInfo.
func ThisBuild() BuildInfo {
	var b BuildInfo
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.Version = info.Main.Version
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// UnmarshalJSON reads a meta, of schema 1 too: its "hardware" is the device.
func (m *Meta) UnmarshalJSON(b []byte) error {
	type meta Meta // without this method
	var v struct {
		meta
		Hardware string `json:"hardware"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*m = Meta(v.meta)
	if m.Device == "" {
		m.Device = v.Hardware
	}
	return nil
}
