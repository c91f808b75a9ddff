package costmodel

import (
	"fmt"
	"math"
	"math/bits"

	"gonum.org/v1/gonum/optimize"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/quant"
)

// Measurement is one measured operator time: an operator (by its Vidur name) of a model on a device at a token
// count, with F16 weights.
type Measurement struct {
	Op       string
	Tokens   int
	Config   model.Config
	Hardware Hardware
	Seconds  float64
}

// OpTime returns the predicted time of the named operator at n tokens with weights in f (per-layer operators
// and the embedding, final norm and classifier; attention needs a Work, see AttentionTimes).
func (m *Model) OpTime(op string, n int, f quant.Format) (OpTime, error) {
	for _, t := range m.LayerOpTimes(n, f) {
		if t.Op == op {
			t.Count = 1
			return t, nil
		}
	}
	for _, t := range m.OuterOpTimes(Work{Tokens: n, Sampled: n}) {
		if t.Op == op {
			return t, nil
		}
	}
	return OpTime{}, fmt.Errorf("costmodel: no operator %q", op)
}

// point is a measurement reduced to what the fit varies over: its class's roofline inputs.
type point struct {
	class              Class
	flops, peak, bytes float64
	bw, n, seconds     float64
	weight             float64 // 1 / the points of its operator in its octave of token counts
}

func points(ms []Measurement) ([]point, error) {
	pts := make([]point, 0, len(ms))
	for i, ms := range ms {
		c, ok := OpClass(ms.Op)
		if !ok {
			return nil, fmt.Errorf("costmodel: measurement %d: unknown operator %q", i, ms.Op)
		}
		if !(ms.Seconds > 0) || ms.Tokens <= 0 {
			return nil, fmt.Errorf("costmodel: measurement %d (%s at %d tokens): time %g s, want tokens and time > 0", i, ms.Op, ms.Tokens, ms.Seconds)
		}
		m, err := New(ms.Config, ms.Hardware, Params{}, model.KVF16, quant.F16)
		if err != nil {
			return nil, fmt.Errorf("costmodel: measurement %d: %v", i, err)
		}
		t, err := m.OpTime(ms.Op, ms.Tokens, quant.F16)
		if err != nil {
			return nil, err
		}
		peak := ms.Hardware.Peak(quant.F16)
		if c != ClassLinear {
			peak = ms.Hardware.VectorFLOPS
		}
		pts = append(pts, point{c, t.FLOPs, peak, t.Bytes, ms.Hardware.Bandwidth, float64(ms.Tokens), ms.Seconds, 0})
	}
	// Profiles sample token counts densely at the large end (every 8 tokens up to 4096 in Vidur's); weighing
	// each octave alike keeps the few small batches, which are every decode step, from being outvoted.
	type octave struct {
		op string
		k  int
	}
	count := map[octave]int{}
	for _, m := range ms {
		count[octave{m.Op, bits.Len(uint(m.Tokens))}]++
	}
	for i, m := range ms {
		pts[i].weight = 1 / float64(count[octave{m.Op, bits.Len(uint(m.Tokens))}])
	}
	return pts, nil
}

// Predict is the time in seconds that p predicts for each measurement.
func Predict(p Params, ms []Measurement) ([]float64, error) {
	pts, err := points(ms)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(pts))
	for i, pt := range pts {
		out[i] = p.Roofline(pt.class).Time(pt.flops, pt.peak, pt.bytes, pt.bw, pt.n)
	}
	return out, nil
}

// APE is each prediction's absolute percentage error against its measurement.
func APE(pred []float64, ms []Measurement) []float64 {
	out := make([]float64, len(ms))
	for i := range ms {
		out[i] = math.Abs(pred[i]/ms[i].Seconds-1) * 100
	}
	return out
}

// The fit works on unconstrained coordinates: a Max through a logistic (so it stays in (0, 1)), Half, Shape and
// Floor through exp (so they stay positive).
func logistic(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
func logit(p float64) float64    { return math.Log(p / (1 - p)) }

func encodeEff(e Efficiency) []float64 {
	return []float64{logit(e.Max), math.Log(e.Half), math.Log(e.Shape)}
}

func decodeEff(x []float64) Efficiency {
	return Efficiency{Max: logistic(x[0]), Half: math.Exp(x[1]), Shape: math.Exp(x[2])}
}

// Start is the fit's starting point for every class: 70% of a ceiling, half of it at 64 tokens, a 2 µs floor.
var Start = Roofline{
	Compute: Efficiency{Max: 0.7, Half: 64, Shape: 1},
	Memory:  Efficiency{Max: 0.7, Half: 64, Shape: 1},
	Floor:   2e-6,
}

// Fit fits each class's roofline to the measurements of its operators, minimizing the sum of squared log
// errors (so that a 1-token and a 4096-token time weigh alike), each octave of token counts weighing alike,
// with Nelder–Mead; a class without measurements keeps Start. What each class fits:
//   - linear: a compute efficiency that grows with the token count (small batches leave tiles idle), a
//     constant memory efficiency (a projection streams its weights alike at any batch size) and the floor;
//   - add and embedding: a constant memory efficiency and the floor (an add's one FLOP an element never binds,
//     and the embedding counts none): an add is the purest stream of activations there is;
//   - norm, rope, act: a constant compute efficiency and the floor, their memory efficiency being the add's. On
//     one device a compute and a memory term that both grow with the tokens cannot be told apart; tying the
//     stream's efficiency to the add's, measured where nothing else binds, leaves the rest of the time to
//     arithmetic, which is what differs between devices with different vector rates.
//
// Elementwise efficiencies are constants because their small batches are launch-bound: the floor, the same on
// an A40 as on an A100 in Vidur's profiles, explains them, where a token-dependent efficiency would scale them
// with the device's ceilings.
//
// The result depends only on the measurements.
func Fit(ms []Measurement) (Params, error) {
	pts, err := points(ms)
	if err != nil {
		return Params{}, err
	}
	var p Params
	for c := range numClasses {
		*p.Roofline(c) = Start
	}
	p.Add.Compute = Efficiency{Max: 1}
	p.Embedding.Compute = Efficiency{} // a gather counts no FLOPs
	for _, c := range []Class{ClassLinear, ClassAdd, ClassEmbedding, ClassNorm, ClassRoPE, ClassAct} {
		var cls []point
		for _, pt := range pts {
			if pt.class == c {
				cls = append(cls, pt)
			}
		}
		if len(cls) == 0 {
			continue
		}
		r := p.Roofline(c)
		switch c {
		case ClassLinear:
			err = fitRoofline(cls, r, &r.Compute, constant{&r.Memory}, &r.Floor)
		case ClassAdd, ClassEmbedding:
			err = fitRoofline(cls, r, constant{&r.Memory}, &r.Floor)
		default:
			r.Memory = p.Add.Memory
			err = fitRoofline(cls, r, constant{&r.Compute}, &r.Floor)
		}
		if err != nil {
			return Params{}, fmt.Errorf("costmodel: fit %v: %v", c, err)
		}
	}
	return p, nil
}

// constant marks an efficiency fitted as a constant (Half 0: Max at every token count).
type constant struct{ e *Efficiency }

// fitRoofline fits the free parameters of r (pointers into its fields: *Efficiency for a token-dependent
// efficiency, constant for a constant one, *float64 for the floor) to pts, its other fields held at their values.
func fitRoofline(pts []point, r *Roofline, free ...any) error {
	// need is the efficiency at which e's term alone explains the slowest point: a fit starts there, because a
	// term that never binds leaves the objective flat in its parameters and the simplex stuck.
	need := func(e *Efficiency) float64 {
		n := 0.0
		for _, pt := range pts {
			if e == &r.Compute {
				n = max(n, pt.flops/(pt.peak*pt.seconds))
			} else {
				n = max(n, pt.bytes/(pt.bw*pt.seconds))
			}
		}
		return min(max(n, 1e-6), 0.99)
	}
	var x0 []float64
	for _, f := range free {
		switch v := f.(type) {
		case *Efficiency:
			x0 = append(x0, encodeEff(Efficiency{Max: need(v), Half: 64, Shape: 1})...)
		case constant:
			x0 = append(x0, logit(need(v.e)))
		case *float64:
			x0 = append(x0, math.Log(*v))
		}
	}
	set := func(x []float64) {
		i := 0
		for _, f := range free {
			switch v := f.(type) {
			case *Efficiency:
				*v = decodeEff(x[i : i+3])
				i += 3
			case constant:
				*v.e = Efficiency{Max: logistic(x[i])}
				i++
			case *float64:
				*v = math.Exp(x[i])
				i++
			}
		}
	}
	problem := optimize.Problem{Func: func(x []float64) float64 {
		set(x)
		s := 0.0
		for _, pt := range pts {
			d := math.Log(r.Time(pt.flops, pt.peak, pt.bytes, pt.bw, pt.n) / pt.seconds)
			s += pt.weight * d * d
		}
		if math.IsNaN(s) {
			return math.Inf(1)
		}
		return s
	}}
	// Nelder–Mead restarted from its own result until the objective stops improving: a simplex can collapse
	// before it reaches the minimum.
	best := math.Inf(1)
	for range 8 {
		res, err := optimize.Minimize(problem, x0, &optimize.Settings{Concurrent: 1, MajorIterations: 20000}, &optimize.NelderMead{})
		if res == nil {
			return err
		}
		if res.F >= best*(1-1e-9) {
			break
		}
		best, x0 = res.F, res.X
	}
	set(x0)
	return nil
}
