// Package probe measures the ceilings of the machine it runs on: memory read bandwidth at several working-set
// sizes (from L1 to DRAM), the f32 FMA peak and the int8 dot-product peak, each with the widest vector
// instructions the CPU has (AVX-512, AVX-512 VNNI or AVX-VNNI, AVX2; pure Go under the noasm tag).
//
// Kernel benchmarks divide what they achieve by these ceilings, so that a number means something on a noisy,
// shared machine: "62% of the L2 bandwidth" survives a change of box where "41 GB/s" does not. `morphlab probe`
// writes the ceilings as JSON; benchmarks read them through Cached, from $MORPHLAB_PROBE when it names such a file.
package probe

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"
)

// Ceilings is what one probe run measured.
type Ceilings struct {
	CPU      string   `json:"cpu"`      // model name from /proc/cpuinfo, or GOARCH where there is none
	Cores    int      `json:"cores"`    // logical CPUs usable by the process (runtime.NumCPU)
	Threads  int      `json:"threads"`  // threads that ran the measurements
	Features []string `json:"features"` // vector features present (golang.org/x/sys/cpu), in a fixed order

	// Bandwidth is the read bandwidth at each working-set size, in increasing size. The working set is the
	// total over all threads; each thread reads its own Bytes/Threads slice.
	Bandwidth       []BandwidthPoint `json:"bandwidth"`
	FMAPeakGFLOPS   float64          `json:"fma_peak_gflops"`    // f32 multiply-adds, counted as 2 FLOPs each
	Int8DotPeakGOPS float64          `json:"int8_dot_peak_gops"` // u8 x s8 products into int32, 2 ops each

	// The loops that measured each ceiling ("avx512", "avx512vnni", "avxvnni", "avx2", "avx2fma" or "go").
	ReadKernel string `json:"read_kernel"`
	FMAKernel  string `json:"fma_kernel"`
	Int8Kernel string `json:"int8_kernel"`

	MeasuredAt time.Time `json:"measured_at"`
}

// BandwidthPoint is the read bandwidth measured at one working-set size.
type BandwidthPoint struct {
	Bytes int64   `json:"bytes"`
	GBps  float64 `json:"gbps"` // 1e9 bytes per second
}

// FormatVersion is the version of the JSON file that Save writes and Load accepts.
const FormatVersion = 1

// BandwidthAt returns the read bandwidth in GB/s for a working set of the given size in bytes, interpolated
// linearly in log(size) between the two measured points around it, and the value of the nearest end point
// outside the measured range. It returns 0 when nothing was measured.
func (c Ceilings) BandwidthAt(workingSet int64) float64 {
	pts := c.Bandwidth
	if len(pts) == 0 {
		return 0
	}
	if workingSet <= pts[0].Bytes {
		return pts[0].GBps
	}
	for i := 1; i < len(pts); i++ {
		lo, hi := pts[i-1], pts[i]
		if workingSet <= hi.Bytes {
			t := math.Log(float64(workingSet)/float64(lo.Bytes)) / math.Log(float64(hi.Bytes)/float64(lo.Bytes))
			return lo.GBps + t*(hi.GBps-lo.GBps)
		}
	}
	return pts[len(pts)-1].GBps
}

// MarshalJSON writes the ceilings with the format version, so that a reader can refuse a file it does not know.
func (c Ceilings) MarshalJSON() ([]byte, error) {
	type plain Ceilings
	return json.Marshal(struct {
		Version int `json:"version"`
		plain
	}{FormatVersion, plain(c)})
}

// UnmarshalJSON reads what MarshalJSON writes and rejects other format versions.
func (c *Ceilings) UnmarshalJSON(data []byte) error {
	type plain Ceilings
	var v struct {
		Version int `json:"version"`
		plain
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	if v.Version != FormatVersion {
		return fmt.Errorf("format version %d, want %d", v.Version, FormatVersion)
	}
	*c = Ceilings(v.plain)
	return nil
}

// validate checks what a reader of the ceilings relies on: positive values and increasing sizes.
func (c Ceilings) validate() error {
	if len(c.Bandwidth) == 0 {
		return errors.New("no bandwidth points")
	}
	for i, p := range c.Bandwidth {
		if p.Bytes <= 0 || !(p.GBps > 0) || math.IsInf(p.GBps, 0) {
			return fmt.Errorf("bandwidth[%d] = {bytes %d, gbps %v}, want both positive", i, p.Bytes, p.GBps)
		}
		if i > 0 && p.Bytes <= c.Bandwidth[i-1].Bytes {
			return fmt.Errorf("bandwidth[%d].bytes = %d, want more than the %d before it", i, p.Bytes, c.Bandwidth[i-1].Bytes)
		}
	}
	if !(c.FMAPeakGFLOPS > 0) || !(c.Int8DotPeakGOPS > 0) {
		return fmt.Errorf("fma_peak_gflops = %v, int8_dot_peak_gops = %v, want both positive", c.FMAPeakGFLOPS, c.Int8DotPeakGOPS)
	}
	return nil
}

// Save writes the ceilings to path as indented JSON.
func (c Ceilings) Save(path string) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("probe: save %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("probe: save %s: %w", path, err)
	}
	return nil
}

// Load reads ceilings that Save wrote. Its errors name the file and what was wrong in it.
func Load(path string) (Ceilings, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Ceilings{}, fmt.Errorf("probe: load %s: %w", path, err)
	}
	var c Ceilings
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&c); err != nil {
		return Ceilings{}, fmt.Errorf("probe: load %s: %w", path, err)
	}
	if err := c.validate(); err != nil {
		return Ceilings{}, fmt.Errorf("probe: load %s: %w", path, err)
	}
	return c, nil
}

// EnvFile is the environment variable that names a ceilings file for Cached.
const EnvFile = "MORPHLAB_PROBE"

var (
	cachedOnce sync.Once
	cached     Ceilings
)

// Cached returns the ceilings for this process, found once: loaded from the file named by $MORPHLAB_PROBE when
// it is set, else measured with Measure on min(2, GOMAXPROCS) threads. Kernel benchmarks call it to report their
// ratio to the ceiling; `morphlab bench` sets $MORPHLAB_PROBE so that each test binary does not measure again.
// It panics when $MORPHLAB_PROBE names a file that Load rejects: a benchmark run asked for those ceilings, and
// ratios against different ones would mislead.
func Cached() Ceilings {
	cachedOnce.Do(func() {
		if path := os.Getenv(EnvFile); path != "" {
			c, err := Load(path)
			if err != nil {
				panic(fmt.Sprintf("%v (from $%s)", err, EnvFile))
			}
			cached = c
			return
		}
		cached = Measure(min(2, runtime.GOMAXPROCS(0)))
	})
	return cached
}

// Options control how long and how much Measure measures.
type Options struct {
	Sizes   []int64       // working-set sizes for the bandwidth points, total over all threads
	Repeats int           // timed repeats per point; the median is kept
	Target  time.Duration // the length of one timed repeat (the loop counts are calibrated to it)

	// Progress, when not nil, is called after each measured point with the number done and the total.
	Progress func(done, total int)
}

// DefaultOptions are those of Measure: eight sizes from L1 to DRAM (64 MiB is where the GEMV 4096x4096 and the
// 8M-float elementwise benchmarks sit), five repeats of 20 ms each; about three seconds
// in all, most of it at the DRAM size.
func DefaultOptions() Options {
	return Options{
		Sizes:   []int64{32 << 10, 256 << 10, 1 << 20, 8 << 20, 32 << 20, 64 << 20, 128 << 20, 256 << 20},
		Repeats: 5,
		Target:  20 * time.Millisecond,
	}
}

// QuickOptions measure two cache-sized points once each, in a few milliseconds: for tests, where the numbers
// matter less than the path.
func QuickOptions() Options {
	return Options{Sizes: []int64{32 << 10, 1 << 20}, Repeats: 1, Target: time.Millisecond}
}

// ReadBandwidth measures the read bandwidth in GB/s at one working-set size (bytes, over all threads) on the
// given number of threads, the median of three 20 ms repeats: for benchmarks on a shared machine, whose memory
// bandwidth drifts by tens of percent over minutes, to take their ceiling next to their own timing.
func ReadBandwidth(threads int, bytes int64) float64 {
	return measureBandwidth(readKernels[0], max(threads, 1), bytes, Options{Repeats: 3, Target: 20 * time.Millisecond})
}

// Measure measures the ceilings on the given number of threads (at least 1) with DefaultOptions.
func Measure(threads int) Ceilings {
	return MeasureWith(threads, DefaultOptions())
}

// MeasureWith measures the ceilings on the given number of threads (at least 1) with the given options.
func MeasureWith(threads int, opt Options) Ceilings {
	threads = max(threads, 1)
	opt.Repeats = max(opt.Repeats, 1)
	sizes := slices.Clone(opt.Sizes)
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	total := len(sizes) + 2
	done := 0
	step := func() {
		done++
		if opt.Progress != nil {
			opt.Progress(done, total)
		}
	}

	c := Ceilings{
		CPU:        cpuModel(),
		Cores:      runtime.NumCPU(),
		Threads:    threads,
		Features:   features(),
		ReadKernel: readKernels[0].name,
		FMAKernel:  fmaKernels[0].name,
		Int8Kernel: dotKernels[0].name,
	}
	for _, size := range sizes {
		c.Bandwidth = append(c.Bandwidth, BandwidthPoint{Bytes: size,
			GBps: measureBandwidth(readKernels[0], threads, size, opt)})
		step()
	}
	c.FMAPeakGFLOPS = measureFMA(fmaKernels[0], threads, opt)
	step()
	c.Int8DotPeakGOPS = measureDot(dotKernels[0], threads, opt)
	step()
	c.MeasuredAt = time.Now().UTC().Truncate(time.Second)
	return c
}
