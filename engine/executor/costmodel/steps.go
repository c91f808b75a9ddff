package costmodel

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"

	"github.com/morphlab/morphlab/quant"
)

// StepRecord is a measured step as a steps file holds it, one JSON object a line: what `morphlab run --steps`
// writes for every step the engine ran, and what `morphlab calibrate --steps` fits, so that a calibration can
// come from the steps of a real run rather than from a grid timed on its own.
type StepRecord struct {
	Work
	Layers  map[string]int `json:"layers"` // decoder layers by weight format
	Seconds float64        `json:"seconds"`
}

// CountFormats counts the layers in each format, in the order the formats first appear.
func CountFormats(fs []quant.Format) []LayerFormat {
	var out []LayerFormat
	for _, f := range fs {
		i := slices.IndexFunc(out, func(lf LayerFormat) bool { return lf.Format == f })
		if i < 0 {
			out = append(out, LayerFormat{Format: f})
			i = len(out) - 1
		}
		out[i].Layers++
	}
	return out
}

// WriteSteps writes samples as a steps file.
func WriteSteps(w io.Writer, samples []Sample) error {
	sw := NewStepWriter(w)
	for _, s := range samples {
		if err := sw.Write(s); err != nil {
			return err
		}
	}
	return sw.Flush()
}

// StepWriter writes a steps file a step at a time (a server's steps as it runs them), buffered until Flush.
type StepWriter struct {
	bw  *bufio.Writer
	enc *json.Encoder
}

// NewStepWriter returns a StepWriter onto w.
func NewStepWriter(w io.Writer) *StepWriter {
	bw := bufio.NewWriter(w)
	return &StepWriter{bw: bw, enc: json.NewEncoder(bw)}
}

// Write adds one step.
func (sw *StepWriter) Write(s Sample) error {
	r := StepRecord{Work: s.Work, Layers: map[string]int{}, Seconds: s.Seconds}
	for _, lf := range s.Layers {
		r.Layers[lf.Format.String()] += lf.Layers
	}
	return sw.enc.Encode(r)
}

// Flush writes what is buffered.
func (sw *StepWriter) Flush() error { return sw.bw.Flush() }

// ReadSteps reads a steps file of a model of nLayers decoder layers; name (the file's) starts each error, with the
// line and what was wrong.
func ReadSteps(r io.Reader, name string, nLayers int) ([]Sample, error) {
	var out []Sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		s, err := parseStep(text, nLayers)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", name, line, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no steps", name)
	}
	return out, nil
}

func parseStep(text []byte, nLayers int) (Sample, error) {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	var r StepRecord
	if err := dec.Decode(&r); err != nil {
		return Sample{}, err
	}
	if dec.More() {
		return Sample{}, fmt.Errorf("more than one JSON object on the line")
	}
	w := r.Work
	switch {
	case !(r.Seconds > 0) || math.IsInf(r.Seconds, 0):
		return Sample{}, fmt.Errorf("seconds %v, want a time > 0", r.Seconds)
	case w.Tokens < 1 || w.Sampled < 0 || w.PrefillTokens < 0 || w.DecodeSeqs < 0 || w.PrefillKeys < 0 || w.PrefillContext < 0 || w.DecodeKeys < 0:
		return Sample{}, fmt.Errorf("tokens %d, want >= 1, and no count below 0", w.Tokens)
	case w.PrefillTokens+w.DecodeSeqs != w.Tokens:
		return Sample{}, fmt.Errorf("prefill_tokens %d + decode_seqs %d, want tokens %d", w.PrefillTokens, w.DecodeSeqs, w.Tokens)
	case w.Sampled > w.Tokens:
		return Sample{}, fmt.Errorf("sampled %d, want at most tokens %d", w.Sampled, w.Tokens)
	}
	s := Sample{Work: w, Seconds: r.Seconds}
	layers := 0
	for _, name := range slices.Sorted(maps.Keys(r.Layers)) {
		f, err := quant.ParseFormat(name)
		if err != nil {
			return Sample{}, fmt.Errorf("layers: %v", err)
		}
		n := r.Layers[name]
		if n < 1 {
			return Sample{}, fmt.Errorf("layers: %d in %s, want >= 1", n, name)
		}
		s.Layers = append(s.Layers, LayerFormat{Format: f, Layers: n})
		layers += n
	}
	if layers != nLayers {
		return Sample{}, fmt.Errorf("layers: %d in all, want the model's %d", layers, nLayers)
	}
	return s, nil
}
