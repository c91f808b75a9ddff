package model

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// tinyConfig is a small GQA shape whose sizes are all different, so a swapped dimension cannot go unnoticed.
func tinyConfig(tied bool) Config {
	return Config{Dim: 64, HiddenDim: 96, NLayers: 2, NHeads: 4, NKVHeads: 2, VocabSize: 80, SeqLen: 32,
		RopeTheta: 10000, NormEps: 1e-5, TiedEmbeddings: tied}
}

// randomCheckpoint fills every tensor the config requires with seeded values in [-1, 1).
func randomCheckpoint(cfg Config, seed uint64) *Checkpoint {
	r := rand.New(rand.NewPCG(seed, 7))
	ck := &Checkpoint{Config: cfg, Tensors: map[string]*Tensor{}}
	for _, s := range cfg.Tensors() {
		n, _ := elements(s.Shape...)
		v := make([]float32, n)
		for i := range v {
			v[i] = 2*r.Float32() - 1
		}
		ck.Tensors[s.Name] = NewF32Tensor(s.Name, s.Shape, v)
	}
	return ck
}

// sameTensors fails unless a and b hold the same tensor names with equal types, shapes and bytes.
func sameTensors(t *testing.T, a, b *Checkpoint) {
	t.Helper()
	if a.Config != b.Config {
		t.Fatalf("config %+v, want %+v", b.Config, a.Config)
	}
	var na, nb []string
	for n := range a.Tensors {
		na = append(na, n)
	}
	for n := range b.Tensors {
		nb = append(nb, n)
	}
	slices.Sort(na)
	slices.Sort(nb)
	if !slices.Equal(na, nb) {
		t.Fatalf("tensors %v, want %v", nb, na)
	}
	for _, n := range na {
		x, y := a.Tensors[n], b.Tensors[n]
		if x.Type != y.Type || !slices.Equal(x.Shape, y.Shape) || x.GroupSize != y.GroupSize {
			t.Fatalf("tensor %s: %v %v gs %d, want %v %v gs %d", n, y.Type, y.Shape, y.GroupSize, x.Type, x.Shape,
				x.GroupSize)
		}
		if !bytes.Equal(x.Data, y.Data) {
			t.Fatalf("tensor %s: data differs", n)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := tinyConfig(true).Validate(); err != nil {
		t.Fatal(err)
	}
	cfg := tinyConfig(true)
	if cfg.HeadDim() != 16 || cfg.KVDim() != 32 {
		t.Fatalf("HeadDim %d KVDim %d, want 16 and 32", cfg.HeadDim(), cfg.KVDim())
	}
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Dim = 0 }, "dim=0"},
		{func(c *Config) { c.HiddenDim = -3 }, "hidden_dim=-3"},
		{func(c *Config) { c.VocabSize = 1 << 30 }, "vocab_size=1073741824"},
		{func(c *Config) { c.NHeads = 3 }, "dim=64 is not a multiple of n_heads=3"},
		{func(c *Config) { c.NKVHeads = 3 }, "n_heads=4 is not a multiple of n_kv_heads=3"},
		{func(c *Config) { c.Dim, c.NHeads = 60, 4 }, "head dim 15"},
		{func(c *Config) { c.RopeTheta = math.NaN() }, "rope_theta"},
		{func(c *Config) { c.NormEps = 0 }, "norm_eps"},
	} {
		cfg := tinyConfig(true)
		c.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v, want an error containing %q", err, c.want)
		}
	}
}

func TestTensorTypeBytes(t *testing.T) {
	for _, c := range []struct {
		typ       TensorType
		n, gs     int
		want      int
		wantError bool
	}{
		{F32, 64, 0, 256, false}, {F16, 64, 0, 128, false}, {BF16, 64, 0, 128, false},
		{Q8_0, 64, 0, 68, false}, {Q4_0, 64, 0, 36, false}, {Q8Group, 64, 16, 64 + 16, false},
		{Q8_0, 40, 0, 0, true}, {Q8Group, 64, 0, 0, true}, {TensorType(99), 4, 0, 0, true},
	} {
		got, err := c.typ.Bytes(c.n, c.gs)
		if got != c.want || (err != nil) != c.wantError {
			t.Errorf("%v.Bytes(%d, %d) = %d, %v; want %d, error %v", c.typ, c.n, c.gs, got, err, c.want, c.wantError)
		}
	}
}

func TestTensorAccessors(t *testing.T) {
	want := []float32{1.5, -2, 3.25}
	x := NewF32Tensor("x", []int{3}, want)
	if got := x.F32(); !reflect.DeepEqual(got, want) {
		t.Fatalf("F32() = %v, want %v", got, want)
	}
	// Unaligned data is copied, not aliased.
	buf := append([]byte{0}, x.Data...)
	y := &Tensor{Name: "y", Type: F32, Shape: []int{3}, Data: buf[1:]}
	if got := y.F32(); !reflect.DeepEqual(got, want) {
		t.Fatalf("unaligned F32() = %v, want %v", got, want)
	}
	q := QuantizeQ8Group([]float32{0.5, -1, 0.25, 0, 0, 0, 0, 0}, 4)
	qs, scales := q.Q8Group()
	if !reflect.DeepEqual(qs, []int8{64, -127, 32, 0, 0, 0, 0, 0}) || !reflect.DeepEqual(scales, []float32{1.0 / 127, 0}) {
		t.Fatalf("QuantizeQ8Group = %v %v, want [64 -127 32 0 0 0 0 0] [1/127 0]", qs, scales)
	}
}

func TestCheckErrors(t *testing.T) {
	for _, c := range []struct {
		edit func(*Checkpoint)
		want string
	}{
		{func(ck *Checkpoint) { delete(ck.Tensors, LayerTensor(1, AttnK)) }, "f.bin: tensor blk.1.attn_k.weight missing"},
		{func(ck *Checkpoint) { ck.Tensors[LayerTensor(0, FFNDown)].Shape = []int{96, 64} },
			"f.bin: tensor blk.0.ffn_down.weight: shape [96 64], want [64 96]"},
		{func(ck *Checkpoint) { ck.Tensors[OutputNorm].Data = ck.Tensors[OutputNorm].Data[:8] },
			"f.bin: tensor output_norm.weight: 8 data bytes, want 256"},
		{func(ck *Checkpoint) { ck.Config.TiedEmbeddings = true }, "output.weight present"},
		{func(ck *Checkpoint) { ck.Config.NKVHeads = 0 }, "f.bin: config: n_kv_heads=0"},
	} {
		ck := randomCheckpoint(tinyConfig(false), 1)
		c.edit(ck)
		if err := ck.Check("f.bin"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check() = %v, want an error containing %q", err, c.want)
		}
	}
}

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// writeAllFormats writes ck into dir as llama2.c v0 and v2, GGUF and a safetensors directory, returning the paths.
func writeAllFormats(tb testing.TB, ck *Checkpoint, dir string) map[string]string {
	tb.Helper()
	paths := map[string]string{"llama2c-v0": filepath.Join(dir, "m.bin"), "llama2c-v2": filepath.Join(dir, "q.bin"),
		"gguf": filepath.Join(dir, "m.gguf"), "safetensors": filepath.Join(dir, "hf")}
	var v0, v2, gg bytes.Buffer
	if err := WriteLlama2c(&v0, ck, 0, 0); err != nil {
		tb.Fatal(err)
	}
	if err := WriteLlama2c(&v2, ck, 2, 32); err != nil {
		tb.Fatal(err)
	}
	if err := WriteGGUF(&gg, ck); err != nil {
		tb.Fatal(err)
	}
	os.WriteFile(paths["llama2c-v0"], v0.Bytes(), 0o644)
	os.WriteFile(paths["llama2c-v2"], v2.Bytes(), 0o644)
	os.WriteFile(paths["gguf"], gg.Bytes(), 0o644)
	os.Mkdir(paths["safetensors"], 0o755)
	os.WriteFile(filepath.Join(paths["safetensors"], "config.json"), hfConfigJSON(ck.Config), 0o644)
	os.WriteFile(filepath.Join(paths["safetensors"], "model.safetensors"), encodeSafetensors(toHF(ck)), 0o644)
	return paths
}

func TestLoadDetectsFormat(t *testing.T) {
	ck := randomCheckpoint(tinyConfig(false), 20)
	for format, path := range writeAllFormats(t, ck, t.TempDir()) {
		got, err := Load(path)
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		wantType := F32
		if format == "llama2c-v2" {
			wantType = Q8Group
		}
		if got.Config != ck.Config || got.Tensors[LayerTensor(1, FFNUp)].Type != wantType {
			t.Fatalf("%s: config %+v, ffn_up %v", format, got.Config, got.Tensors[LayerTensor(1, FFNUp)].Type)
		}
		if err := got.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkLoad opens (memory-maps, parses, shape-checks) and closes a stories15M-shaped checkpoint (15.2M
// parameters, 61 MB as F32) in each format.
func BenchmarkLoad(b *testing.B) {
	cfg := Config{Dim: 288, HiddenDim: 768, NLayers: 6, NHeads: 6, NKVHeads: 6, VocabSize: 32000, SeqLen: 256,
		RopeTheta: 10000, NormEps: 1e-5, TiedEmbeddings: true}
	paths := writeAllFormats(b, randomCheckpoint(cfg, 21), b.TempDir())
	for _, format := range []string{"llama2c-v0", "llama2c-v2", "gguf", "safetensors"} {
		b.Run("format="+format, func(b *testing.B) {
			for b.Loop() {
				ck, err := Load(paths[format])
				if err != nil {
					b.Fatal(err)
				}
				ck.Close()
			}
		})
	}
}

func TestCheckedParams(t *testing.T) {
	for _, tied := range []bool{true, false} {
		cfg := tinyConfig(tied)
		want := 0
		for _, s := range cfg.Tensors() {
			n, _ := elements(s.Shape...)
			want += n
		}
		if got, ok := cfg.checkedParams(); got != want || !ok {
			t.Errorf("tied=%v: checkedParams() = %d, %v; want %d (sum over Tensors)", tied, got, ok, want)
		}
	}
	huge := Config{Dim: 1 << 24, HiddenDim: 1 << 24, NLayers: 1 << 24, NHeads: 2, NKVHeads: 2, VocabSize: 1 << 24,
		SeqLen: 1, RopeTheta: 1, NormEps: 1}
	if _, ok := huge.checkedParams(); ok {
		t.Error("checkedParams accepted 2^72 weights")
	}
}
