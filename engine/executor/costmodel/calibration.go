package costmodel

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/quant"
)

// CalibrationVersion is the version of the calibration file that Save writes and LoadCalibration accepts.
const CalibrationVersion = 2

// Calibration is a step-time model of one model shape on one CPU, fitted to the CPU executor's measured steps:
//
//	t = Σ_f layers_f·(Layer_f + LayerToken_f·tokens + Band_f(tokens))
//	    + layers·(PrefillKey·prefill keys + DecodeKey·decode keys) + Sampled·sampled
//
// where layers_f counts the decoder layers in format f: a layer reads its weights once a step (Layer_f) and
// multiplies every token by them (LayerToken_f); attention costs each attended key (prompt chunks and decode
// differ: one is a tiled matrix product, the other a stream over the cache); the classifier costs each sampled
// row. A step's fixed overhead has no term of its own: the layers always add up to the model's, so it cannot be
// told from the per-layer costs and is spread over them.
//
// Band_f is a layer's cost at few tokens, apart from the line: the kernels run a step's matrix products by a
// different loop as its token count grows (matrix-vector loops for one token; few-token loops over four tokens,
// then over tiles of eight, each tile reading the weights again, up to 64; packed products past that), so a
// step's time is a staircase in its tokens, not a line, and a line fitted through decode steps of four sequences
// and of five and through prompt chunks over-predicts the fours and the chunks both. Each band of TokenBands gets
// a fixed cost a layer of its own, fitted where the steps have enough of it (minBandSteps) and otherwise merged
// into the band above; steps past the last band carry none.
type Calibration struct {
	Version int          `json:"version"`
	Machine string       `json:"machine"` // the CPU's model name, as probe reports it
	Model   string       `json:"model"`   // what was timed (a shape name or a checkpoint)
	Config  model.Config `json:"config"`
	KV      string       `json:"kv"`
	Threads int          `json:"threads"`
	Clock   string       `json:"clock,omitempty"` // how steps were timed: wall, or cpu (CPU time over the threads)

	Formats    []FormatTerms `json:"formats"`
	PrefillKey float64       `json:"prefill_key_s"`
	DecodeKey  float64       `json:"decode_key_s"`
	Sampled    float64       `json:"sampled_s"`

	// Steps is how many measured steps the fit used, MAPE its median absolute percentage error on them;
	// HeldOutSteps and HeldOutMAPE the same over steps timed alike but left out of the fit.
	Steps        int     `json:"steps"`
	MAPE         float64 `json:"mape_percent"`
	HeldOutSteps int     `json:"held_out_steps"`
	HeldOutMAPE  float64 `json:"held_out_mape_percent"`
}

// FormatTerms are the per-layer terms of one weight format.
type FormatTerms struct {
	Format     string  `json:"format"`
	Layer      float64 `json:"layer_s"`
	LayerToken float64 `json:"layer_token_s"`
	Bands      []Band  `json:"bands,omitempty"` // by UpTo, ascending
}

// Band is the fixed cost a layer adds in a step of at most UpTo tokens and more than the band below's.
type Band struct {
	UpTo  int     `json:"max_tokens"`
	Layer float64 `json:"layer_s"`
}

// TokenBands are the bands of a step's token count (their upper bounds) that FitCalibration gives a cost of
// their own: one token, the few-token kernels' four, one and two tiles of eight, and the rest of the few-token
// loops (up to 64).
var TokenBands = []int{1, 4, 8, 16, 64}

// minBandSteps is the fewest steps of a format in a band for the band to be fitted apart: the grid calibration
// times two or three steps a band, a real run's steps thousands.
const minBandSteps = 2

// band is the fixed cost a layer of the format adds in a step of tokens tokens.
func (t FormatTerms) band(tokens int) float64 {
	if i := slices.IndexFunc(t.Bands, func(b Band) bool { return tokens <= b.UpTo }); i >= 0 {
		return t.Bands[i].Layer
	}
	return 0
}

// Sample is one measured step: its work, its layers' formats and its time.
type Sample struct {
	Work    Work
	Layers  []LayerFormat
	Seconds float64
}

// terms returns the format's terms, or false when the calibration has none.
func (c *Calibration) terms(f quant.Format) (FormatTerms, bool) {
	for _, t := range c.Formats {
		if t.Format == f.String() {
			return t, true
		}
	}
	return FormatTerms{}, false
}

// seconds is the predicted time of a step in seconds.
func (c *Calibration) seconds(w Work, layers []LayerFormat, nLayers int) float64 {
	t := c.Sampled*float64(w.Sampled) +
		float64(nLayers)*(c.PrefillKey*float64(w.PrefillKeys)+c.DecodeKey*float64(w.DecodeKeys))
	for _, lf := range layers {
		ft, _ := c.terms(lf.Format)
		t += float64(lf.Layers) * (ft.Layer + ft.LayerToken*float64(w.Tokens) + ft.band(w.Tokens))
	}
	return t
}

// StepTime is the predicted time of a step. A format the calibration did not time costs nothing; Check reports it.
func (c *Calibration) StepTime(w Work, layers []LayerFormat, nLayers int) time.Duration {
	return time.Duration(c.seconds(w, layers, nLayers) * 1e9)
}

// Check reports whether the calibration covers cfg with the formats given.
func (c *Calibration) Check(cfg model.Config, formats []quant.Format) error {
	if c.Config != cfg {
		return fmt.Errorf("calibration of %s (%+v) does not match the model (%+v); run morphlab calibrate for it", c.Model, c.Config, cfg)
	}
	for _, f := range formats {
		if _, ok := c.terms(f); !ok {
			return fmt.Errorf("calibration of %s has no %v terms; calibrate with --format including %v", c.Model, f, f)
		}
	}
	return nil
}

// FitCalibration fits the calibration's terms to samples by least squares on relative error, so that short
// decode steps count as much as long prompt chunks. nLayers is the model's layer count.
//
// The error is relative to the fitted time, not to the measured one: weighting each row by 1/measured gives a
// step that ran slow (a burst of other work, a cache miss) less weight than one that ran fast, which biases every
// term low, and a replay simulated with such terms runs short of the real one (TestCalibrationFitUnbiased shows
// the bias on steps with multiplicative noise). So the fit is iterated (iteratively reweighted least squares, as
// a Gamma GLM is fitted): the first pass weights by 1/measured, each next one by 1/its predecessor's prediction,
// which leaves the prediction unbiased in the mean when the noise is multiplicative.
func FitCalibration(samples []Sample, nLayers int) (*Calibration, error) {
	var formats []quant.Format
	for _, s := range samples {
		for _, lf := range s.Layers {
			if lf.Layers > 0 && !slices.Contains(formats, lf.Format) {
				formats = append(formats, lf.Format)
			}
		}
	}
	slices.Sort(formats)
	bands := make([][]int, len(formats)) // per format, the bands fitted (their upper bounds)
	for i, f := range formats {
		bands[i] = fittedBands(samples, f)
	}
	// Columns: per format its layer, layer·token and band terms, then prefill key, decode key, sampled.
	first := make([]int, len(formats)+1) // each format's first column
	for i := range formats {
		first[i+1] = first[i] + 2 + len(bands[i])
	}
	cols := first[len(formats)] + 3
	if len(samples) < cols {
		return nil, fmt.Errorf("costmodel: %d measured steps for %d terms, want at least as many", len(samples), cols)
	}
	raw := mat.NewDense(len(samples), cols, nil) // the terms' coefficients, unweighted
	for i, s := range samples {
		if !(s.Seconds > 0) {
			return nil, fmt.Errorf("costmodel: measured step %d took %g s, want > 0", i, s.Seconds)
		}
		row := raw.RawRowView(i)
		for _, lf := range s.Layers {
			fi := slices.Index(formats, lf.Format)
			j := first[fi]
			row[j] += float64(lf.Layers)
			row[j+1] += float64(lf.Layers) * float64(s.Work.Tokens)
			if b := bandIndex(bands[fi], s.Work.Tokens); b >= 0 {
				row[j+2+b] += float64(lf.Layers)
			}
		}
		k := first[len(formats)]
		row[k] = float64(nLayers) * float64(s.Work.PrefillKeys)
		row[k+1] = float64(nLayers) * float64(s.Work.DecodeKeys)
		row[k+2] = float64(s.Work.Sampled)
	}
	scale := make([]float64, len(samples)) // the time each row's error is relative to
	for i, s := range samples {
		scale[i] = s.Seconds
	}
	var x, pred mat.VecDense
	a := mat.NewDense(len(samples), cols, nil)
	b := mat.NewVecDense(len(samples), nil)
	for pass := range calibrationPasses {
		for i := range samples {
			for j, v := range raw.RawRowView(i) {
				a.Set(i, j, v/scale[i])
			}
			b.SetVec(i, samples[i].Seconds/scale[i])
		}
		if err := x.SolveVec(a, b); err != nil {
			return nil, fmt.Errorf("costmodel: calibration fit: %v (the grid must vary tokens, keys and sampled rows)", err)
		}
		if pass == calibrationPasses-1 {
			break
		}
		pred.MulVec(raw, &x)
		for i := range scale {
			if p := pred.AtVec(i); p > 0 {
				scale[i] = p // a row predicted at 0 or below keeps its previous scale
			}
		}
	}
	c := &Calibration{Version: CalibrationVersion, Steps: len(samples)}
	for i, f := range formats {
		j := first[i]
		ft := FormatTerms{Format: f.String(), Layer: x.AtVec(j), LayerToken: x.AtVec(j + 1)}
		for b, maxTokens := range bands[i] {
			ft.Bands = append(ft.Bands, Band{UpTo: maxTokens, Layer: x.AtVec(j + 2 + b)})
		}
		c.Formats = append(c.Formats, ft)
	}
	k := first[len(formats)]
	c.PrefillKey, c.DecodeKey, c.Sampled = x.AtVec(k), x.AtVec(k+1), x.AtVec(k+2)
	errs := make([]float64, len(samples))
	for i, s := range samples {
		errs[i] = math.Abs(c.seconds(s.Work, s.Layers, nLayers)/s.Seconds-1) * 100
	}
	c.MAPE = Median(errs)
	return c, nil
}

// fittedBands returns the bands of TokenBands that the samples' steps with layers in format f fill enough to
// fit apart: going up, a band of fewer than minBandSteps steps merges into the one above, and when the steps past
// the last band are that few, the last band merges into them (its cost is then the format's line alone).
func fittedBands(samples []Sample, f quant.Format) []int {
	counts := make([]int, len(TokenBands)+1) // the last: steps past every band
	for _, s := range samples {
		if !slices.ContainsFunc(s.Layers, func(lf LayerFormat) bool { return lf.Format == f && lf.Layers > 0 }) {
			continue
		}
		if b := bandIndex(TokenBands, s.Work.Tokens); b >= 0 {
			counts[b]++
		} else {
			counts[len(TokenBands)]++
		}
	}
	var out []int
	carried := 0
	for b, maxTokens := range TokenBands {
		if carried += counts[b]; carried >= minBandSteps {
			out = append(out, maxTokens)
			carried = 0
		}
	}
	if carried+counts[len(TokenBands)] < minBandSteps && len(out) > 0 {
		out = out[:len(out)-1]
	}
	return out
}

// bandIndex is the index of the band of bounds that holds tokens, or -1 past them.
func bandIndex(bounds []int, tokens int) int {
	return slices.IndexFunc(bounds, func(b int) bool { return tokens <= b })
}

// calibrationPasses is how many reweighted least-squares passes FitCalibration makes: the weights settle within
// a few (the terms of a stories110M run's steps move by under 0.1% after the fourth).
const calibrationPasses = 5

// Save writes the calibration as JSON to path.
func (c *Calibration) Save(path string) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// LoadCalibration reads a calibration file written by Save.
func LoadCalibration(path string) (*Calibration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c Calibration
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if c.Version != CalibrationVersion {
		return nil, fmt.Errorf("%s: calibration version %d, want %d", path, c.Version, CalibrationVersion)
	}
	if err := c.Config.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	for _, t := range c.Formats {
		if _, err := quant.ParseFormat(t.Format); err != nil {
			return nil, fmt.Errorf("%s: formats: %v", path, err)
		}
		for i, b := range t.Bands {
			if b.UpTo < 1 || i > 0 && b.UpTo <= t.Bands[i-1].UpTo {
				return nil, fmt.Errorf("%s: formats: %s: bands: max_tokens %d, want >= 1 and above the band before's", path, t.Format, b.UpTo)
			}
		}
	}
	return &c, nil
}

// Median is the median of xs (0 for none); xs is not changed.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
