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
const CalibrationVersion = 1

// Calibration is a step-time model of one model shape on one CPU, fitted to the CPU executor's measured steps:
//
//	t = Σ_f layers_f·(Layer_f + LayerToken_f·tokens + OneToken_f·[tokens = 1])
//	    + layers·(PrefillKey·prefill keys + DecodeKey·decode keys) + Sampled·sampled
//
// where layers_f counts the decoder layers in format f: a layer reads its weights once a step (Layer_f) and
// multiplies every token by them (LayerToken_f); a step of one token runs the kernels' matrix-vector loops rather
// than their matrix products, whose fixed cost differs (OneToken_f; where a few tokens run the packed products, a
// step of two tokens widens and packs every F16 weight and costs several times one token's); attention costs each
// attended key (prompt chunks and decode differ: one is a tiled matrix product, the other a stream over the cache);
// the classifier costs each sampled row. A step's fixed overhead has no term of its own: the layers always add up
// to the model's, so it cannot be told from the per-layer costs and is spread over them.
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
	OneToken   float64 `json:"one_token_s,omitempty"` // added to Layer in a step of one token (0 when not fitted)
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
		t += float64(lf.Layers) * (ft.Layer + ft.LayerToken*float64(w.Tokens))
		if w.Tokens == 1 {
			t += float64(lf.Layers) * ft.OneToken
		}
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
	// The one-token terms are fitted only when the steps feed one token and more, to tell them apart.
	oneTokens, more := false, false
	for _, s := range samples {
		oneTokens, more = oneTokens || s.Work.Tokens == 1, more || s.Work.Tokens > 1
	}
	per := 2 // columns per format: layer, layer·token, and layer·[one token] when fitted
	if oneTokens && more {
		per = 3
	}
	// Columns: per format, then prefill key, decode key, sampled.
	cols := per*len(formats) + 3
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
			j := per * slices.Index(formats, lf.Format)
			row[j] += float64(lf.Layers)
			row[j+1] += float64(lf.Layers) * float64(s.Work.Tokens)
			if per == 3 && s.Work.Tokens == 1 {
				row[j+2] += float64(lf.Layers)
			}
		}
		k := per * len(formats)
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
		ft := FormatTerms{Format: f.String(), Layer: x.AtVec(per * i), LayerToken: x.AtVec(per*i + 1)}
		if per == 3 {
			ft.OneToken = x.AtVec(per*i + 2)
		}
		c.Formats = append(c.Formats, ft)
	}
	k := per * len(formats)
	c.PrefillKey, c.DecodeKey, c.Sampled = x.AtVec(k), x.AtVec(k+1), x.AtVec(k+2)
	errs := make([]float64, len(samples))
	for i, s := range samples {
		errs[i] = math.Abs(c.seconds(s.Work, s.Layers, nLayers)/s.Seconds-1) * 100
	}
	c.MAPE = Median(errs)
	return c, nil
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
