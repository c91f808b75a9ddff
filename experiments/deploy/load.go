package deploy

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/morphlab/morphlab/engine/executor"
	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/tokenizer"
	"github.com/morphlab/morphlab/experiments/catalog"
	"github.com/morphlab/morphlab/kernels/cpu"
	"github.com/morphlab/morphlab/profiling/sensitivity"
	"github.com/morphlab/morphlab/quant"
)

// Loaded is a deployment whose model is ready to serve: the weights loaded and the policy's variants prepared
// (cpu), or the cost model built (sim); the swap order and the layers' full-precision formats known. Start builds
// the serving stack over it, once (the executor owns the weights).
type Loaded struct {
	// Deployment is the deployment with its defaults filled in; a caller may still change its KV size before
	// Start (serve sizes it by what the process has left once the model is loaded).
	Deployment Deployment
	// Name is the model as results name it: the file, the catalog name, or the name and the weights' seed.
	Name   string
	Config model.Config
	// Weights is the model the cpu executor runs (nil on the sim).
	Weights *model.Model
	// Vocab is the model's vocabulary (from the checkpoint, the tokenizer file, or a named model's synthetic one);
	// nil on the sim and for a checkpoint without one and no tokenizer file.
	Vocab *tokenizer.Vocab
	// Order is the swap order, Base each layer's full-precision format.
	Order []int
	Base  []quant.Format
	// KVType is the KV cache's element type.
	KVType model.KVType

	cost    *costmodel.Model   // sim
	hw      costmodel.Hardware // sim
	formats []quant.Format     // sim: the layers' formats, full precision first
	started bool
}

// Load loads the deployment's model and prepares it for its policy.
func (d Deployment) Load() (*Loaded, error) {
	d, err := d.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Loaded{Deployment: d}
	if d.Executor != "sim" {
		err = l.loadWeights()
	} else {
		err = l.loadCost()
	}
	if err != nil {
		return nil, err
	}
	if l.Order, err = swapOrder(d.Profile, l.Config); err != nil {
		return nil, err
	}
	return l, nil
}

// Build loads the deployment's model and starts it.
func (d Deployment) Build() (*Instance, error) {
	l, err := d.Load()
	if err != nil {
		return nil, err
	}
	return l.Start()
}

// isFile reports whether the model names a file rather than a catalog model.
func isFile(name string) bool {
	_, err := os.Stat(name)
	return err == nil || strings.ContainsAny(name, `/\`) || !errors.Is(err, os.ErrNotExist)
}

// namedConfig is a catalog model's shape, or a named llama2.c shape (model.Shapes).
func namedConfig(name string) (model.Config, error) {
	if m, err := catalog.ModelByName(name); err == nil {
		return m.Config, nil
	} else if cfg, shapeErr := model.ShapeByName(name); shapeErr == nil {
		return cfg, nil
	} else {
		return model.Config{}, fmt.Errorf("model %q is neither a file nor a model name: %v", name, err)
	}
}

// ModelConfig is the shape of a model as a Deployment names it: a checkpoint file's, or a catalog model's.
func ModelConfig(name string) (model.Config, error) {
	if !isFile(name) {
		return namedConfig(name)
	}
	ck, err := model.Load(name)
	if err != nil {
		return model.Config{}, err
	}
	defer ck.Close()
	return ck.Config, nil
}

// loadWeights loads or synthesizes the weights, sets the layers to DType, and prepares the policy's variants.
func (l *Loaded) loadWeights() error {
	d := l.Deployment
	cpu.SetThreads(d.Threads)
	var ck *model.Checkpoint
	if isFile(d.Model) {
		var err error
		if ck, err = model.Load(d.Model); err != nil {
			return err
		}
		defer ck.Close()
		l.Name = d.Model
	} else {
		cfg, err := namedConfig(d.Model)
		if err != nil {
			return err
		}
		// The cuda executor's 16-bit models are drawn in their type: no float32 copy of a 7B model is held.
		typ := model.F32
		if d.Executor == "cuda" && (d.DType == "f16" || d.DType == "bf16") {
			typ = map[string]model.TensorType{"f16": model.F16, "bf16": model.BF16}[d.DType]
		}
		if ck, err = model.SynthesizeAs(cfg, d.WeightsSeed, typ); err != nil {
			return err
		}
		l.Name = fmt.Sprintf("%s (synthetic, seed %d)", d.Model, d.WeightsSeed)
	}
	m, err := model.FromCheckpoint(ck)
	if err != nil {
		return fmt.Errorf("%s: %w", d.Model, err)
	}
	if d.DType != "" {
		f, err := quant.ParseFormat(d.DType)
		if err != nil {
			return fmt.Errorf("deploy: dtype: %v", err)
		}
		err = eachLayer(len(m.Layers), func(i int) error {
			if _, err := m.AddVariant(i, f); err != nil {
				return err
			}
			return m.SetPrecision(i, f)
		})
		if err != nil {
			return err
		}
	}
	if d.Classifier != "" {
		f, err := quant.ParseFormat(d.Classifier)
		if err != nil {
			return fmt.Errorf("deploy: classifier: %v", err)
		}
		if err := m.SetOutputFormat(f); err != nil {
			return err
		}
	}
	l.Vocab = ck.Vocab
	if d.Tokenizer != "" {
		if l.Vocab, err = tokenizer.LoadBin(d.Tokenizer); err != nil {
			return err
		}
		if l.Vocab.Len() != m.Config.VocabSize {
			return fmt.Errorf("deploy: tokenizer %s has %d tokens, the model %d", d.Tokenizer, l.Vocab.Len(), m.Config.VocabSize)
		}
	}
	for _, layer := range m.Layers {
		l.Base = append(l.Base, layer.Active)
	}
	err = eachLayer(len(m.Layers), func(i int) error {
		for _, f := range d.Policy.Needs() {
			if _, err := m.AddVariant(i, f); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if l.KVType, err = kvType(d.KV.DType, l.Base[0]); err != nil {
		return err
	}
	m.SequenceKV = l.KVType
	l.Weights, l.Config = m, m.Config
	return nil
}

// eachLayer runs f for layers 0..n-1, GOMAXPROCS at a time (a layer's variants are its own), and returns the
// first error by layer.
func eachLayer(n int, f func(layer int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			errs[i] = f(i)
			<-sem
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// loadCost builds the sim's cost model of the model on the device: the catalog's ceilings with the efficiencies
// fitted to Vidur's profiles, or this CPU's calibration.
func (l *Loaded) loadCost() error {
	d := l.Deployment
	var err error
	if l.Config, err = ModelConfig(d.Model); err != nil {
		return err
	}
	l.Name = d.Model
	if l.hw, err = catalog.HardwareByName(d.Device); err != nil {
		return fmt.Errorf("deploy: %v", err)
	}
	calib := d.Calibrated
	if d.Calibration != "" {
		if calib, err = costmodel.LoadCalibration(d.Calibration); err != nil {
			return err
		}
	}
	full := quant.F16
	switch {
	case d.DType != "":
		if full, err = quant.ParseFormat(d.DType); err != nil {
			return fmt.Errorf("deploy: dtype: %v", err)
		}
	case calib != nil && calib.Check(l.Config, []quant.Format{quant.F16}) != nil:
		full = quant.F32
	}
	kvName := d.KV.DType
	if calib != nil && (kvName == "" || kvName == "auto") {
		kvName = calib.KV
	}
	if l.KVType, err = kvType(kvName, full); err != nil {
		return err
	}
	if l.cost, err = costmodel.New(l.Config, l.hw, catalog.Params(), l.KVType, quant.F16); err != nil {
		return err
	}
	l.cost.Calibration = calib
	l.formats = []quant.Format{full}
	for _, f := range d.Policy.Needs() {
		if !slices.Contains(l.formats, f) {
			l.formats = append(l.formats, f)
		}
	}
	l.Base = slices.Repeat([]quant.Format{full}, l.Config.NLayers)
	return nil
}

// kvType reads a KV element type; "" and "auto" follow the layers' full precision: f16 for f16 and bf16 layers,
// f32 for any other.
func kvType(name string, full quant.Format) (model.KVType, error) {
	if name == "" || name == "auto" {
		if full == quant.F16 || full == quant.BF16 {
			return model.KVF16, nil
		}
		return model.KVF32, nil
	}
	t, err := model.ParseKVType(name)
	if err != nil {
		return 0, fmt.Errorf("deploy: KV dtype: %v", err)
	}
	return t, nil
}

// swapOrder is the profile's order, checked against the model, or front to back.
func swapOrder(profile string, cfg model.Config) ([]int, error) {
	if profile == "" {
		return sensitivity.FrontToBack(cfg.NLayers), nil
	}
	p, err := sensitivity.Load(profile)
	if err != nil {
		return nil, err
	}
	if p.Model.Config != cfg {
		return nil, fmt.Errorf("%s: profiled a model of shape %+v, this one is %+v", profile, p.Model.Config, cfg)
	}
	return p.Order, nil
}

// pool is the executor's budget: the deployment's KV blocks or memory, or its default size.
func (l *Loaded) pool() executor.Pool {
	d, kv := l.Deployment, l.Deployment.KV
	switch {
	case kv.Blocks > 0:
		return executor.Pool{Blocks: kv.Blocks}
	case d.Memory > 0:
		return executor.Pool{Bytes: d.Memory}
	case d.Executor == "sim":
		u := d.MemoryUtilization
		if u == 0 {
			u = DefaultMemoryUtilization
		}
		return executor.Pool{Bytes: int64(u * float64(l.hw.Memory))}
	}
	return executor.Pool{Blocks: DefaultSequences * ((l.Config.SeqLen + kv.BlockSize - 1) / kv.BlockSize)}
}
