package trace

import (
	"fmt"
	"os"
	"slices"
	"time"
)

// Format names, as Trace.Format and LoadOptions.Format spell them.
const (
	Azure     = "azure"
	Mooncake  = "mooncake"
	Vidur     = "vidur"
	Lengths   = "lengths"
	BurstGPT  = "burstgpt"
	Synthetic = "synthetic"
)

// MooncakeBlock is the prompt tokens each of Mooncake's hash ids stands for.
const MooncakeBlock = 512

// Formats lists the formats Load reads, in the order detection tries them.
var Formats = []string{Azure, Mooncake, Vidur, Lengths, BurstGPT}

// Request is one request of a trace.
type Request struct {
	Arrival      float64 // seconds from the trace start
	PromptTokens int
	OutputTokens int
	HashIDs      []int64 // Mooncake prefix block ids (of Trace.HashBlock tokens each), nil elsewhere
	Line         int     // source line (0 for generated requests)
}

// Trace is a list of requests in arrival order with where they came from and what was done to them.
type Trace struct {
	Source string // file path or generator description (as Generate writes it, which Regenerate reads)
	// SHA256 is the hex sha256 of the bytes the trace was read from, or of the length table a generator sampled;
	// "" for a trace drawn from distributions alone.
	SHA256     string
	Format     string   // "azure", "mooncake", "vidur", "lengths", "burstgpt", "synthetic"
	Transforms []string // each transform applied, in order, as a flag-like string ("window=10s+72s", "scale=4.75")
	Requests   []Request
	// HashBlock is the prompt tokens each of a request's HashIDs stands for: Mooncake's 512, scaled by
	// LengthScale (0 where no request has hash ids).
	HashBlock int

	// NoArrivals is set for a length-only table: every Arrival is 0 and only the lengths mean anything, until
	// WithArrivals gives the requests an arrival process.
	NoArrivals bool
	// Origin is the first record's time on the file's own clock (since the Unix epoch for Azure, since the
	// file's zero for the others); it was subtracted from every arrival so that the first request arrives at 0.
	Origin time.Duration
	// Failed counts the failed requests in the source (BurstGPT rows with 0 response tokens); they are in
	// Requests only when LoadOptions.KeepFailed was set.
	Failed int
	// Reordered counts the records that came before an earlier timestamp and were moved by
	// LoadOptions.SortArrivals; without that option such a record is an error.
	Reordered int
}

// LoadOptions choose how Load reads a file.
type LoadOptions struct {
	// Format is one of Formats; "" detects it from the header or the first line.
	Format string
	// KeepFailed keeps BurstGPT's failed requests (0 response tokens) with OutputTokens 0; by default they are
	// skipped and counted in Trace.Failed.
	KeepFailed bool
	// SortArrivals sorts records whose timestamps go backwards into arrival order (stably, so equal times keep
	// their file order) instead of failing on the first one.
	SortArrivals bool
}

// Load reads the trace in path. The format is detected unless opt.Format is set.
func Load(path string, opt LoadOptions) (*Trace, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data, opt)
}

// derive returns a copy of t's description (not its requests) with one more transform recorded.
func (t *Trace) derive(transform string, reqs []Request) *Trace {
	out := *t
	out.Transforms = append(slices.Clip(t.Transforms), transform)
	out.Requests = reqs
	return &out
}

// Duration is the time from the first arrival to the last, in seconds (0 for fewer than two requests or a
// length-only table).
func (t *Trace) Duration() float64 {
	if len(t.Requests) < 2 || t.NoArrivals {
		return 0
	}
	return t.Requests[len(t.Requests)-1].Arrival - t.Requests[0].Arrival
}

// String describes the trace in one line: its source, format, size and transforms.
func (t *Trace) String() string {
	s := fmt.Sprintf("%s (%s, %d requests", t.Source, t.Format, len(t.Requests))
	if !t.NoArrivals {
		s += fmt.Sprintf(" over %.3f s", t.Duration())
	}
	s += ")"
	for _, tr := range t.Transforms {
		s += " " + tr
	}
	return s
}
