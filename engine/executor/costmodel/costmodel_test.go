package costmodel

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/quant"
)

var a100 = Hardware{Name: "a100", F16FLOPS: 312e12, Int8OPS: 624e12, F32FLOPS: 19.5e12, VectorFLOPS: 78e12,
	Bandwidth: 2039e9, Memory: 80e9, HostLink: 26e9, ActBytes: 2}

func llama7b(t *testing.T) model.Config {
	c, err := model.ShapeByName("llama2-7b")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestEfficiency(t *testing.T) {
	e := Efficiency{Max: 0.8, Half: 100, Shape: 2}
	for _, c := range []struct{ n, want float64 }{{100, 0.4}, {200, 0.8 * 4 / 5}, {50, 0.8 * 0.25 / 1.25}} {
		if got := e.At(c.n); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("At(%g) = %g, want %g", c.n, got, c.want)
		}
	}
	if got := (Efficiency{Max: 0.6}).At(3); got != 0.6 {
		t.Errorf("Half 0: %g, want 0.6", got)
	}
	r := Roofline{Compute: Efficiency{Max: 0.5}, Memory: Efficiency{Max: 0.25}, Floor: 1e-6}
	if got := r.Time(1e12, 1e15, 1e6, 1e12, 1); got != 2e-3 {
		t.Errorf("compute-bound time %g, want 2e-3", got)
	}
	if got := r.Time(1, 1e15, 1e9, 1e12, 1); got != 4e-3 {
		t.Errorf("memory-bound time %g, want 4e-3", got)
	}
	if got := r.Time(1, 1e15, 1, 1e12, 1); got != 1e-6 {
		t.Errorf("floor %g, want 1e-6", got)
	}
}

// TestLayerBytesMatchModel: the byte counts are exactly what the model's variants hold.
func TestLayerBytesMatchModel(t *testing.T) {
	cfg, _ := model.ShapeByName("stories260K")
	m, err := model.FromCheckpoint(model.Synthesize(cfg, 1))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []quant.Format{quant.F32, quant.F16, quant.Int8, quant.Int4} { // stories260K's 172-wide rows hold no q8_0 blocks
		v, err := m.AddVariant(0, f)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := LayerBytes(cfg, f), int64(v.Bytes()); got != want {
			t.Errorf("%v: %d bytes, the model's variant %d", f, got, want)
		}
	}
	if got, want := OuterBytes(cfg, quant.F32)+int64(cfg.NLayers)*LayerBytes(cfg, quant.F32), int64(m.WeightBytes()); got != want {
		t.Errorf("weights %d, the model's %d", got, want)
	}
}

// TestOpTimes: the roofline's inputs for the projections are the shapes' FLOPs and bytes, formats change the
// bytes (and Int8 the peak), and a step adds its operators up.
func TestOpTimes(t *testing.T) {
	cfg := llama7b(t)
	r := Roofline{Compute: Efficiency{Max: 0.5}, Memory: Efficiency{Max: 0.5}}
	m, err := New(cfg, a100, Params{Linear: r, Norm: r, RoPE: r, Act: r, Add: r, Embedding: r}, model.KVF16, quant.F16)
	if err != nil {
		t.Fatal(err)
	}
	up, err := m.OpTime(OpUpProj, 1, quant.F16)
	if err != nil {
		t.Fatal(err)
	}
	if up.FLOPs != 2*4096*22016 || up.Bytes != 2*4096*22016+2*(4096+22016) {
		t.Fatalf("mlp_up_proj at 1 token: %+v", up)
	}
	if want := up.Bytes / (2039e9 * 0.5); up.Seconds != want {
		t.Errorf("memory-bound time %g, want %g", up.Seconds, want)
	}
	q4, _ := m.OpTime(OpUpProj, 1, quant.Int4)
	if q4.Bytes != float64(22016*4096/2+5*22016*4096/128+2*(4096+22016)) {
		t.Errorf("int4 bytes %g", q4.Bytes)
	}
	big8, _ := m.OpTime(OpUpProj, 4096, quant.Int8)
	big16, _ := m.OpTime(OpUpProj, 4096, quant.F16)
	if math.Abs(big16.Seconds/big8.Seconds-2) > 1e-9 {
		t.Errorf("compute-bound int8 %g s vs f16 %g s, want half (the INT8 peak is twice)", big8.Seconds, big16.Seconds)
	}
	if _, err := m.OpTime("nope", 1, quant.F16); err == nil {
		t.Error("an unknown op was accepted")
	}
	var w Work
	w.AddSeq(1, 100, true)
	w.AddSeq(64, 64, true)
	sum := 0.0
	for _, op := range m.LayerOpTimes(w.Tokens, quant.F16) {
		sum += op.Seconds * float64(op.Count)
	}
	pre, dec := m.AttentionTimes(w)
	sum = 32 * (sum + pre.Seconds + dec.Seconds)
	for _, op := range m.OuterOpTimes(w) {
		sum += op.Seconds
	}
	if got, want := m.StepTime(w, []LayerFormat{{quant.F16, 32}}), time.Duration(sum*1e9); got != want {
		t.Errorf("step %v, want the operators' sum %v", got, want)
	}
	if pre.FLOPs != 4*4096*float64(64*64-64*63/2) || dec.Bytes != float64(2*4096*2*100+2*2*4096) {
		t.Errorf("attention: prefill %+v decode %+v", pre, dec)
	}
	if _, err := New(cfg, Hardware{Name: "none"}, Params{}, model.KVF16, quant.F16); err == nil {
		t.Error("hardware without ceilings was accepted")
	}
}

// TestBreakdown: a step's operators in the order they run, each op's time as OpTime gives it, and the prefill
// step (to the nanosecond) the layer's operators times the layers plus the embedding, the final norm and the
// classifier over the one row a prompt chunk samples.
func TestBreakdown(t *testing.T) {
	r := Roofline{Compute: Efficiency{Max: 0.5}, Memory: Efficiency{Max: 0.5}}
	m, err := New(llama7b(t), a100, Params{Linear: r, Norm: r, RoPE: r, Act: r, Add: r, Embedding: r}, model.KVF16, quant.F16)
	if err != nil {
		t.Fatal(err)
	}
	b := m.Breakdown(256, 1024, quant.Int8)
	var names []string
	for _, op := range b.Ops {
		names = append(names, op.Op)
	}
	want := []string{OpEmbedding, OpInputNorm, OpPreProj, OpRoPE, OpAttnPrefill, OpAttnDecode, OpPostProj, OpAdd, OpPostAttnNorm,
		OpUpProj, OpAct, OpDownProj, OpFinalNorm, OpClassifier}
	if !slices.Equal(names, want) {
		t.Fatalf("ops %v, want %v", names, want)
	}
	up, _ := m.OpTime(OpUpProj, 256, quant.Int8)
	if b.Ops[9] != up {
		t.Errorf("mlp_up_proj %+v, want %+v", b.Ops[9], up)
	}
	layer := 0.0
	for _, op := range b.Ops[1:12] {
		if op.Op != OpAttnDecode {
			layer += op.Seconds * float64(op.Count)
		}
	}
	row, _ := m.OpTime(OpClassifier, 1, quant.F16)
	sum := 32*layer + b.Ops[0].Seconds + b.Ops[12].Seconds + row.Seconds
	if got := b.Prefill.Seconds(); math.Abs(got-sum) > 1e-9 || b.Decode <= 0 {
		t.Errorf("prefill step %g s, want the operators' sum %g s; decode %v", got, sum, b.Decode)
	}
	if one := m.Breakdown(1, 64, quant.F16); one.Ops[4].Op != OpAttnPrefill || one.Ops[4].Seconds <= 0 || one.Ops[5].Seconds <= 0 {
		t.Errorf("one token: attention %+v and %+v, want both timed", one.Ops[4], one.Ops[5])
	}
}

// TestFitRecovers: fitting times generated by known efficiencies of the fit's family recovers their
// predictions.
func TestFitRecovers(t *testing.T) {
	cfg := llama7b(t)
	truth := Params{
		Linear: Roofline{Compute: Efficiency{Max: 0.6, Half: 150, Shape: 1}, Memory: Efficiency{Max: 0.5}, Floor: 8e-6},
		Add:    Roofline{Compute: Efficiency{Max: 1}, Memory: Efficiency{Max: 0.4}, Floor: 3e-6},
	}
	truth.Norm = Roofline{Compute: Efficiency{Max: 0.02}, Memory: truth.Add.Memory, Floor: 6e-6}
	var ms []Measurement
	for _, op := range []string{OpPreProj, OpUpProj, OpDownProj, OpAdd, OpInputNorm} {
		for n := 1; n <= 4096; n *= 2 {
			ms = append(ms, Measurement{Op: op, Tokens: n, Config: cfg, Hardware: a100, Seconds: 1})
		}
	}
	pred, err := Predict(truth, ms)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ms {
		ms[i].Seconds = pred[i]
	}
	p, err := Fit(ms)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := Predict(p, ms)
	if e := slices.Max(APE(got, ms)); e > 1 {
		t.Errorf("refit's largest error %.2f%% on its own data, want < 1%%", e)
	}
	ms[0].Seconds = 0
	if _, err := Fit(ms); err == nil {
		t.Error("a zero time was accepted")
	}
}

// TestCalibrationFit: least squares recovers the terms that generated the samples (the token bands' included:
// those with steps in them, the empty 5-8 merged into 9-16), and the file round-trips.
func TestCalibrationFit(t *testing.T) {
	cfg, _ := model.ShapeByName("stories15M")
	want := Calibration{Formats: []FormatTerms{
		{"f32", 2e-3, 1e-4, []Band{{1, -5e-4}, {4, 2e-4}, {16, -1e-4}, {64, 3e-4}}},
		{"int8", 1e-3, 4e-5, []Band{{1, 3e-4}, {4, 1e-4}, {16, 2e-4}, {64, -2e-4}}},
	}, PrefillKey: 3e-8, DecodeKey: 5e-7, Sampled: 9e-4}
	var samples []Sample
	for _, layers := range [][]LayerFormat{{{quant.F32, 6}}, {{quant.Int8, 6}}, {{quant.F32, 3}, {quant.Int8, 3}}} {
		for _, shape := range [][2]int{{16, 16}, {64, 64}, {64, 200}, {1, 50}, {1, 200}} {
			for seqs := 1; seqs <= 4; seqs *= 2 {
				var w Work
				for range seqs {
					w.AddSeq(shape[0], shape[1], true)
				}
				samples = append(samples, Sample{Work: w, Layers: layers, Seconds: want.seconds(w, layers, 6)})
			}
		}
	}
	c, err := FitCalibration(samples, 6)
	if err != nil {
		t.Fatal(err)
	}
	close := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Abs(b) }
	if len(c.Formats) != 2 || !close(c.PrefillKey, 3e-8) || !close(c.DecodeKey, 5e-7) || !close(c.Sampled, 9e-4) || c.MAPE > 1e-6 {
		t.Fatalf("fit %+v, want %+v", c, want)
	}
	for i, ft := range c.Formats {
		w := want.Formats[i]
		same := ft.Format == w.Format && close(ft.Layer, w.Layer) && close(ft.LayerToken, w.LayerToken) && len(ft.Bands) == len(w.Bands)
		for b := 0; same && b < len(w.Bands); b++ {
			same = ft.Bands[b].UpTo == w.Bands[b].UpTo && close(ft.Bands[b].Layer, w.Bands[b].Layer)
		}
		if !same {
			t.Errorf("fitted %+v, want %+v", ft, w)
		}
	}
	c.Config, c.Model = cfg, "stories15M"
	path := filepath.Join(t.TempDir(), "cpu.json")
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	back, err := LoadCalibration(path)
	if err != nil {
		t.Fatal(err)
	}
	if back.Check(cfg, []quant.Format{quant.F32, quant.Int8}) != nil || back.Check(cfg, []quant.Format{quant.Int4}) == nil {
		t.Error("Check: want f32 and int8 covered, int4 not")
	}
	back.Formats[1].Bands[2].UpTo = 4
	if err := back.Save(path); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCalibration(path); err == nil || !strings.Contains(err.Error(), "int8: bands: max_tokens 4") {
		t.Errorf("bands out of order: error %v, want one naming int8's bands", err)
	}
	if _, err := FitCalibration(samples[:3], 6); err == nil {
		t.Error("fewer samples than terms were accepted")
	}
}

// TestFittedBands: a band with fewer than minBandSteps steps of the format merges into the band above, and the
// last band into the steps past it when those are too few.
func TestFittedBands(t *testing.T) {
	step := func(tokens int, f quant.Format) Sample {
		return Sample{Work: Work{Tokens: tokens}, Layers: []LayerFormat{{f, 4}}}
	}
	var samples []Sample
	for _, tokens := range []int{1, 1, 1, 3, 12, 20, 40, 100, 300} {
		samples = append(samples, step(tokens, quant.F16))
	}
	for _, tokens := range []int{1, 1, 2, 3, 6, 30, 200} {
		samples = append(samples, step(tokens, quant.Int4))
	}
	samples = append(samples, step(7, quant.Int8)) // another format's steps do not count
	if got := fittedBands(samples, quant.F16); !slices.Equal(got, []int{1, 16, 64}) {
		t.Errorf("f16 bands %v, want [1 16 64] (2-4 and 9-16 merged into the bands above)", got)
	}
	if got := fittedBands(samples, quant.Int4); !slices.Equal(got, []int{1, 4}) {
		t.Errorf("int4 bands %v, want [1 4] (5-64 too few apart from the one step past them)", got)
	}
	c := Calibration{Formats: []FormatTerms{{"f16", 1, 0, []Band{{1, 10}, {16, 20}, {64, 30}}}}}
	for tokens, want := range map[int]float64{1: 11, 2: 21, 16: 21, 17: 31, 64: 31, 65: 1} {
		if got := c.seconds(Work{Tokens: tokens}, []LayerFormat{{quant.F16, 1}}, 1); got != want {
			t.Errorf("a layer at %d tokens: %v s, want %v", tokens, got, want)
		}
	}
}

// TestCalibrationFitUnbiased: on steps with multiplicative noise of mean 1 the fitted times add up to the measured
// ones (a fit weighted by 1/measured alone comes out several percent low).
func TestCalibrationFitUnbiased(t *testing.T) {
	truth := Calibration{Formats: []FormatTerms{{"f16", 5e-4, 2.8e-4, []Band{{1, 1e-3}, {4, -2e-4}, {8, 1e-4}}}}, PrefillKey: 3e-6, DecodeKey: 1.5e-5, Sampled: 1.7e-3}
	layers := []LayerFormat{{quant.F16, 12}}
	noise := []float64{0.6, 0.8, 0.9, 1, 1.1, 1.2, 1.4} // mean 1
	var samples []Sample
	for i := range 700 {
		var w Work
		for s := range 1 + i%7 {
			w.AddSeq(1, 50+37*s+i%200, true)
		}
		if i%5 == 0 {
			w.AddSeq(16+i%96, 16+i%96+i%300, true)
		}
		samples = append(samples, Sample{Work: w, Layers: layers, Seconds: truth.seconds(w, layers, 12) * noise[(i/7)%len(noise)]})
	}
	c, err := FitCalibration(samples, 12)
	if err != nil {
		t.Fatal(err)
	}
	var measured, predicted float64
	for _, s := range samples {
		measured += s.Seconds
		predicted += c.seconds(s.Work, s.Layers, 12)
	}
	if r := predicted / measured; math.Abs(r-1) > 0.01 {
		t.Errorf("fitted times add up to %.4f of the measured ones, want within 1%%", r)
	}
}
