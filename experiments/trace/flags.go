package trace

import (
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Flags are the command-line options that every command replaying a trace shares: how to load it and which
// transforms to apply. Register adds them to a flag set; Apply applies the ones given, always in this order,
// whatever the order on the command line:
//
//	--spread, --window, --busiest (with --busiest-by), --thin, --time-scale, --length-scale,
//	--clip/--max-prompt/--max-output
//
// so a snippet is picked on the trace's own clock and then stretched: "--busiest 72s --time-scale 4.75" replays
// the busiest 72 s of the trace over 342 s, and --spread first refines the file's own clock. The loading flags
// are --trace-format and --sort-arrivals, so that they do not clash with a command's own --format (a layer
// format, for instance).
type Flags struct {
	Format      string  // --trace-format: force a format instead of detecting it
	Sort        bool    // --sort-arrivals: sort out-of-order records instead of failing
	KeepFailed  bool    // --keep-failed: keep BurstGPT's failed requests
	Spread      float64 // --spread RESOLUTION, seconds; 0 for none
	Window      string  // --window OFFSET+DURATION
	Busiest     float64 // --busiest DURATION, seconds; 0 for none
	BusiestBy   string  // --busiest-by requests|tokens
	Thin        float64 // --thin P; 0 or 1 for none
	Seed        uint64  // --seed for thinning (and for generators that take the flags)
	TimeScale   float64 // --time-scale FACTOR; 0 or 1 for none
	LengthScale string  // --length-scale F or PROMPT,OUTPUT
	Clip        int     // --clip CONTEXT
	MaxPrompt   int     // --max-prompt N
	MaxOutput   int     // --max-output N
}

// Register adds the flags to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Format, "trace-format", "", "read the trace as `format` (azure, mooncake, vidur, lengths, burstgpt) instead of detecting it")
	fs.BoolVar(&f.Sort, "sort-arrivals", false, "sort records whose timestamps go backwards instead of failing on them")
	fs.BoolVar(&f.KeepFailed, "keep-failed", false, "keep BurstGPT's failed requests (0 response tokens) instead of skipping them")
	fs.Var((*secondsFlag)(&f.Spread), "spread", "take arrivals as recorded at a `RESOLUTION` (e.g. 1s, Mooncake's clock) and spread the requests sharing one evenly over it")
	fs.StringVar(&f.Window, "window", "", "keep the requests in `OFFSET+DURATION` (e.g. 10s+72s; plain numbers are seconds)")
	fs.Var((*secondsFlag)(&f.Busiest), "busiest", "keep the busiest window of `DURATION` (e.g. 72s), by --busiest-by")
	fs.StringVar(&f.BusiestBy, "busiest-by", ByRequests, "measure of the busiest window: requests or tokens (prompt plus output)")
	fs.Float64Var(&f.Thin, "thin", 0, "keep each request with probability `P` (seeded by --seed)")
	fs.Uint64Var(&f.Seed, "seed", 1, "random `seed` for --thin and generators")
	fs.Float64Var(&f.TimeScale, "time-scale", 0, "multiply inter-arrival times by `FACTOR` (4.75 stretches the trace 4.75x: the paper's \"rate downscaled 4.75x\")")
	fs.StringVar(&f.LengthScale, "length-scale", "", "multiply lengths by `F` (or PROMPT,OUTPUT factors), rounding, at least 1 token")
	fs.IntVar(&f.Clip, "clip", 0, "cut each request to fit a `CONTEXT` of prompt plus output tokens")
	fs.IntVar(&f.MaxPrompt, "max-prompt", 0, "cut prompts to `N` tokens")
	fs.IntVar(&f.MaxOutput, "max-output", 0, "cut outputs to `N` tokens")
}

// LoadOptions returns the loading options the flags give.
func (f *Flags) LoadOptions() LoadOptions {
	return LoadOptions{Format: f.Format, SortArrivals: f.Sort, KeepFailed: f.KeepFailed}
}

// Load loads path with the flags' options and applies their transforms.
func (f *Flags) Load(path string) (*Trace, error) {
	t, err := Load(path, f.LoadOptions())
	if err != nil {
		return nil, err
	}
	return f.Apply(t)
}

// Apply applies the transforms the flags give to t, in the order the Flags doc lists; with none it returns t.
// Errors name the flag.
func (f *Flags) Apply(t *Trace) (*Trace, error) {
	var err error
	step := func(flagName string, do func() (*Trace, error)) {
		if err != nil {
			return
		}
		var out *Trace
		if out, err = do(); err != nil {
			err = fmt.Errorf("--%s: %w", flagName, err)
			return
		}
		t = out
	}
	if f.Spread != 0 {
		step("spread", func() (*Trace, error) { return Spread(t, f.Spread) })
	}
	if f.Window != "" {
		step("window", func() (*Trace, error) {
			off, dur, err := ParseWindow(f.Window)
			if err != nil {
				return nil, err
			}
			return Window(t, off, dur)
		})
	}
	if f.Busiest != 0 {
		step("busiest", func() (*Trace, error) { return Busiest(t, f.Busiest, f.BusiestBy) })
	}
	if f.Thin != 0 && f.Thin != 1 {
		step("thin", func() (*Trace, error) { return Thin(t, f.Thin, f.Seed) })
	}
	if f.TimeScale != 0 && f.TimeScale != 1 {
		step("time-scale", func() (*Trace, error) { return TimeScale(t, f.TimeScale) })
	}
	if f.LengthScale != "" {
		step("length-scale", func() (*Trace, error) {
			p, o, err := parseFactors(f.LengthScale)
			if err != nil {
				return nil, err
			}
			return LengthScale(t, p, o)
		})
	}
	if f.Clip != 0 || f.MaxPrompt != 0 || f.MaxOutput != 0 {
		step("clip", func() (*Trace, error) {
			return Clip(t, Limits{Prompt: f.MaxPrompt, Output: f.MaxOutput, Context: f.Clip})
		})
	}
	return t, err
}

// ParseWindow reads "OFFSET+DURATION", each a Go duration ("1m30s", "72s") or plain seconds.
func ParseWindow(s string) (offset, duration float64, err error) {
	o, d, ok := strings.Cut(s, "+")
	if ok {
		offset, err = ParseSeconds(o)
		if err == nil {
			duration, err = ParseSeconds(d)
		}
	}
	if !ok || err != nil {
		return 0, 0, fmt.Errorf("window %q: want OFFSET+DURATION, e.g. 10s+72s", s)
	}
	return offset, duration, nil
}

// ParseSeconds reads a time as a Go duration ("72s", "1m12s", "500ms") or a plain number of seconds ("72.5").
func ParseSeconds(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
		return f, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("time %q: want a duration like 72s or a number of seconds", s)
	}
	return d.Seconds(), nil
}

// parseFactors reads "F" (both lengths) or "PROMPT,OUTPUT".
func parseFactors(s string) (prompt, output float64, err error) {
	p, o, two := strings.Cut(s, ",")
	prompt, err = strconv.ParseFloat(strings.TrimSpace(p), 64)
	output = prompt
	if err == nil && two {
		output, err = strconv.ParseFloat(strings.TrimSpace(o), 64)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%q: want a factor F or PROMPT,OUTPUT factors", s)
	}
	return prompt, output, nil
}

// secondsFlag is a flag.Value holding seconds, set with ParseSeconds.
type secondsFlag float64

func (s *secondsFlag) String() string {
	if s == nil || *s == 0 {
		return ""
	}
	return seconds(float64(*s))
}

func (s *secondsFlag) Set(v string) error {
	f, err := ParseSeconds(v)
	if err != nil {
		return err
	}
	*s = secondsFlag(f)
	return nil
}
