package deploy

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/morphlab/morphlab/engine/morph"
	"github.com/morphlab/morphlab/experiments/catalog"
	"github.com/morphlab/morphlab/internal/flagalias"
)

// Flags fill a Deployment from the command line. Every command that deploys a model registers them, so a setting
// has one name, one default and one unit everywhere; the names are vLLM's where vLLM has the knob
// (--max-num-batched-tokens, --max-num-seqs, --block-size, --kv-cache-dtype, --gpu-memory-utilization, --dtype,
// --enable-prefix-caching and --no-enable-prefix-caching).
// Older names still work for one release, with a warning and out of -h (internal/flagalias): --shape (--model),
// --format (--dtype), --gpu (--device), --kv-type (--kv-cache-dtype), --max-tokens (--max-num-batched-tokens),
// --max-seqs (--max-num-seqs), --memory-utilization (--gpu-memory-utilization).
type Flags struct {
	d      Deployment
	policy string
	memory string
}

// boolSwitch is one of a pair of boolean flags setting one switch, --name and --no-name, the last given winning
// (Python's BooleanOptionalAction, which vLLM's switches use).
type boolSwitch struct {
	v      *bool
	negate bool
}

func (b boolSwitch) String() string {
	if b.v == nil {
		return ""
	}
	return strconv.FormatBool(*b.v != b.negate)
}

func (b boolSwitch) Set(s string) error {
	x, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*b.v = x != b.negate
	return nil
}

func (b boolSwitch) IsBoolFlag() bool { return true }

// Register registers every deployment flag on fs, with executor the command's default executor (cpu or sim).
func (f *Flags) Register(fs *flag.FlagSet, executor string) {
	f.RegisterModel(fs)
	d := &f.d
	fs.StringVar(&d.Tokenizer, "tokenizer", "", "llama2.c tokenizer.bin `file`, for a checkpoint without a vocabulary")
	dtype := "`format` of the decoder layers at full precision: f32, f16, bf16 (or int8, int4, q8_0, q4_0 on the cpu executor); default: as stored (the sim: f16)"
	fs.StringVar(&d.DType, "dtype", "", dtype)
	flagalias.Deprecate(fs, "format", "dtype")
	fs.StringVar(&d.Classifier, "classifier-format", "", "store the classifier in `format` (cpu executor; default: as stored)")
	fs.StringVar(&d.Executor, "executor", executor, "`executor`: cpu (the real kernels), sim (the cost model in virtual time) or cuda (GPU 0; -tags cuda)")
	fs.StringVar(&d.Device, "device", "", "catalog `device`: the sim's (l4, a40, a100, h100, h200, or cpu with --calibration), or the GPU the cuda executor runs on, which results name")
	flagalias.Deprecate(fs, "gpu", "device")
	fs.StringVar(&d.Calibration, "calibration", "", "CPU step-time calibration `file` from 'morphlab calibrate' (the sim on device cpu)")
	fs.IntVar(&d.KV.Blocks, "kv-blocks", 0, "KV pool: `N` blocks beside the full-precision weights and the workspace (vLLM's --num-gpu-blocks-override)")
	fs.IntVar(&d.KV.Blocks, "num-gpu-blocks-override", 0, "alias of --kv-blocks")
	fs.StringVar(&f.memory, "memory", "", "the executor's memory budget `size` (512MiB, 2GiB, 1000000): weights, workspace and KV (cuda: on the GPU)")
	fs.Float64Var(&d.MemoryUtilization, "gpu-memory-utilization", 0, "without --kv-blocks or --memory, this `share` of the device's memory (the sim or cuda on a GPU; default 0.9)")
	flagalias.Deprecate(fs, "memory-utilization", "gpu-memory-utilization")
	fs.IntVar(&d.KV.BlockSize, "block-size", DefaultBlockSize, "KV block size in `tokens`")
	fs.Var(boolSwitch{v: &d.KV.NoPrefixCaching, negate: true}, "enable-prefix-caching", "automatic prefix caching: requests share the KV blocks of equal prompt prefixes and skip their prefill (continuous batching)")
	fs.Var(boolSwitch{v: &d.KV.NoPrefixCaching}, "no-enable-prefix-caching", "turn automatic prefix caching off")
	fs.StringVar(&d.Scheduler.Kind, "scheduler", "continuous", "batching: continuous, static or dynamic")
	fs.IntVar(&d.Scheduler.MaxBatchedTokens, "max-num-batched-tokens", DefaultMaxBatchedTokens, "`tokens` one iteration feeds at most (chunked prefill budget; the workspace is sized for it)")
	flagalias.Deprecate(fs, "max-tokens", "max-num-batched-tokens")
	fs.IntVar(&d.Scheduler.MaxNumSeqs, "max-num-seqs", DefaultMaxNumSeqs, "running `sequences` at most (continuous batching)")
	flagalias.Deprecate(fs, "max-seqs", "max-num-seqs")
	fs.IntVar(&d.Scheduler.BatchSize, "batch-size", 0, "batch `size` of static and dynamic batching (default 32, at most --max-num-batched-tokens)")
	fs.DurationVar(&d.Scheduler.MaxDelay, "max-delay", DefaultMaxDelay, "dynamic batching: the longest a request waits for its batch to fill")
	fs.StringVar(&f.policy, "policy", "fp16", "serving `policy`: NAME[:params], NAME one of "+strings.Join(morph.Names(), ", ")+
		" (static:int8|int4, selective:N[:int8|int4], morph:MODE[:k=v...]; go doc ./engine/morph)")
	fs.StringVar(&d.Profile, "profile", "", "layer swap order from a 'morphlab profile' `file` (default front to back)")
	fs.BoolVar(&d.BlockingSwaps, "blocking-swaps", false, "the sim: a swap's transfer blocks the step that applies it (default: overlapped)")
	fs.Uint64Var(&d.SimSeed, "sim-seed", 1, "`seed` of the tokens the sim draws")
}

// RegisterModel registers the flags that choose the model and how the cpu executor runs it: --model,
// --weights-seed, --kv-cache-dtype, --threads and --clock (what `morphlab calibrate` takes).
func (f *Flags) RegisterModel(fs *flag.FlagSet) {
	d := &f.d
	fs.StringVar(&d.Model, "model", "", "checkpoint `file` (llama2.c, GGUF, safetensors) or model name (the catalog's: llama-2-7b, stories110M, ...)")
	flagalias.Deprecate(fs, "shape", "model")
	fs.Uint64Var(&d.WeightsSeed, "weights-seed", 1, "`seed` of a named model's random weights (cpu executor)")
	fs.StringVar(&d.KV.DType, "kv-cache-dtype", "auto", "KV cache element `type`: auto (f16 for f16 and bf16 layers, else f32; a calibration's type on the sim), f32, f16 or int8")
	flagalias.Deprecate(fs, "kv-type", "kv-cache-dtype")
	fs.IntVar(&d.Threads, "threads", 0, "kernel `threads` (cpu executor; default GOMAXPROCS)")
	fs.StringVar(&d.Clock, "clock", "", "`clock` of the cpu executor: wall, cpu (virtual time advanced by each step's process CPU time over the threads) or thread (by its thread's CPU time, with --threads 1); default wall, the sim runs in virtual time")
}

// Deployment checks the flags and returns the deployment they describe, with its defaults filled in. Its errors
// name the flag.
func (f *Flags) Deployment() (Deployment, error) {
	d := f.d
	if f.policy != "" {
		p, err := morph.Parse(f.policy)
		if err != nil {
			return d, fmt.Errorf("--policy: %v", err)
		}
		d.Policy = p
	}
	if f.memory != "" {
		n, err := ParseBytes(f.memory)
		if err != nil {
			return d, fmt.Errorf("--memory: %v", err)
		}
		d.Memory = n
	}
	if d.Model == "" {
		return d, fmt.Errorf("--model is required")
	}
	if !isFile(d.Model) {
		if _, err := namedConfig(d.Model); err != nil {
			return d, fmt.Errorf("--model: %v", err)
		}
	}
	if d.Device != "" {
		if _, err := catalog.HardwareByName(d.Device); err != nil {
			return d, fmt.Errorf("--device: %v", err)
		}
	}
	d, err := d.withDefaults()
	if err != nil {
		return d, errors.New(strings.TrimPrefix(err.Error(), "deploy: "))
	}
	return d, nil
}

// ParseBytes reads a size: a number with an optional unit, B, KiB, MiB, GiB (powers of 1024) or KB, MB, GB (powers
// of 1000); a bare number is bytes.
func ParseBytes(s string) (int64, error) {
	n, err := humanize.ParseBytes(s)
	if err != nil || n == 0 || n > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q, want a positive size such as 512MiB, 2GiB or 1000000", s)
	}
	return int64(n), nil
}

// FleetFlags fill a Fleet of a deployment's replicas from the command line: --replicas, --router, admission
// (--max-queue, --rate-limit with --rate-burst), the autoscaler (--autoscale METRIC=TARGET,
// --autoscale-controller, --min-replicas, --max-replicas, --scale-interval, --scale-delay, --scale-cooldown,
// --scale-max-wait) and faults (--fail-replica REPLICA@AT+DOWN,..., with the proxy's --fail-detect, --fail-restart
// and --fail-response).
type FleetFlags struct {
	replicas, maxQueue, burst, minReplicas, maxReplicas int
	router, autoscale, controller, faults, response     string
	rate                                                float64
	interval, delay, coolDown, maxWait, detect, restart time.Duration
}

// The failover flags' defaults: HAProxy's health checks by default run every 2 s, mark a server down after 3
// failures and up after 2 successes.
const (
	DefaultFailDetect  = 6 * time.Second
	DefaultFailRestart = 4 * time.Second
)

// Register registers the fleet flags on fs.
func (f *FleetFlags) Register(fs *flag.FlagSet) {
	fs.IntVar(&f.replicas, "replicas", 1, "replicas of the deployment at the start (more than one, or --autoscale: a fleet)")
	fs.StringVar(&f.router, "router", "round-robin", "a fleet's `router`: "+strings.Join(RouterNames(), ", "))
	fs.IntVar(&f.maxQueue, "max-queue", 0, "a fleet's admission: turn a request away when `N` wait for their first step (0: no cap)")
	fs.Float64Var(&f.rate, "rate-limit", 0, "a fleet's admission: a token bucket of this many `requests` a second (with --rate-burst)")
	fs.IntVar(&f.burst, "rate-burst", 0, "the token bucket's `size`")
	fs.StringVar(&f.autoscale, "autoscale", "", "target-tracking autoscaler `metric=target`, the metric one of "+strings.Join(ScaleMetricNames(), ", ")+
		" (kv: the share of KV blocks in use; outstanding: requests a replica; waiting: those not yet running)")
	fs.StringVar(&f.controller, "autoscale-controller", "hpa", "the autoscaler's `rule`: "+strings.Join(ScalerNames(), ", ")+
		" (hpa: the HPA's; morph-aware: scale out only for load the replicas' morphing cannot absorb, in only over replicas restored with no queue)")
	fs.IntVar(&f.minReplicas, "min-replicas", 1, "the autoscaler's fewest replicas")
	fs.IntVar(&f.maxReplicas, "max-replicas", 16, "the autoscaler's most replicas")
	fs.DurationVar(&f.interval, "scale-interval", DefaultScaleInterval, "how often the autoscaler evaluates")
	fs.DurationVar(&f.delay, "scale-delay", DefaultScaleDelay, "from asking for a replica to its serving (provisioning and model load)")
	fs.DurationVar(&f.coolDown, "scale-cooldown", DefaultCoolDown, "how long the autoscaler must want fewer replicas before it removes any")
	fs.DurationVar(&f.maxWait, "scale-max-wait", DefaultMaxWait, "the morph-aware controller counts a queue whose oldest request has waited this long as one morphing does not absorb")
	fs.StringVar(&f.faults, "fail-replica", "", "kill replicas and start them again: `REPLICA@AT+DOWN,...` such as 1@60s+30s (replica 1 dies 60 s in, restarts 30 s later)")
	fs.DurationVar(&f.detect, "fail-detect", DefaultFailDetect, "from a replica's death to the proxy marking it down (health-check interval x fall); meanwhile requests routed to it are sent on")
	fs.DurationVar(&f.restart, "fail-restart", DefaultFailRestart, "from a replica's restart to its serving again (model load, then health-check interval x rise)")
	fs.StringVar(&f.response, "fail-response", "admission", "when a response begins, after which a dead replica's request is lost rather than sent on: admission (headers once the engine takes it in, as morphlab serve) or first-token")
}

// Fleet returns the fleet of d's replicas the flags describe, and whether they describe one (more than one
// replica, an autoscaler, or faults). Its errors name the flag.
func (f *FleetFlags) Fleet(d Deployment) (Fleet, bool, error) {
	fl := Fleet{Router: f.router, Admission: Admission{MaxQueue: f.maxQueue, Rate: f.rate, Burst: f.burst}}
	if f.replicas < 1 {
		return fl, false, fmt.Errorf("--replicas %d, want at least 1", f.replicas)
	}
	if _, err := NewRouter(f.router); err != nil {
		return fl, false, fmt.Errorf("--%v", strings.TrimPrefix(err.Error(), "deploy: "))
	}
	if err := fl.Admission.check(); err != nil {
		return fl, false, fmt.Errorf("--max-queue, --rate-limit, --rate-burst: %v", strings.TrimPrefix(err.Error(), "deploy: "))
	}
	for range f.replicas {
		fl.Replicas = append(fl.Replicas, d)
	}
	if f.faults != "" {
		faults, err := ParseFaults(f.faults)
		if err != nil {
			return fl, false, fmt.Errorf("--fail-replica: %v", err)
		}
		response, err := ParseResponseStart(f.response)
		if err != nil {
			return fl, false, fmt.Errorf("--fail-response: %v", err)
		}
		fl.Faults, fl.Failover = faults, Failover{Detect: f.detect, Restart: f.restart, Response: response}
		if err := fl.checkFaults(); err != nil {
			return fl, false, fmt.Errorf("--fail-replica, --fail-detect, --fail-restart: %v", strings.TrimPrefix(err.Error(), "deploy: "))
		}
	}
	if _, err := NewScaler(f.controller); err != nil {
		return fl, false, fmt.Errorf("--autoscale-controller: %v", strings.TrimPrefix(err.Error(), "deploy: "))
	}
	if f.autoscale != "" {
		metric, target, ok := strings.Cut(f.autoscale, "=")
		x, err := strconv.ParseFloat(target, 64)
		if !ok || err != nil {
			return fl, false, fmt.Errorf("--autoscale %q, want metric=target such as outstanding=16", f.autoscale)
		}
		fl.Autoscale = &Autoscale{Template: d, Metric: metric, Target: x, Min: f.minReplicas, Max: f.maxReplicas,
			Interval: f.interval, Delay: f.delay, CoolDown: f.coolDown, Controller: f.controller, MaxWait: f.maxWait}
		if err := fl.Autoscale.defaults(f.replicas); err != nil {
			return fl, false, fmt.Errorf("--autoscale: %v", strings.TrimPrefix(err.Error(), "deploy: "))
		}
	}
	return fl, f.replicas > 1 || fl.Autoscale != nil || fl.Faults != nil, nil
}
