package model

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/internal/datadir"
)

func writeLlama2c(t testing.TB, ck *Checkpoint, version, groupSize int) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteLlama2c(&buf, ck, version, groupSize); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestLlama2cRoundTripFloat(t *testing.T) {
	for _, version := range []int{0, 1} {
		for _, tied := range []bool{true, false} {
			ck := randomCheckpoint(tinyConfig(tied), 2)
			data := writeLlama2c(t, ck, version, 0)
			got, err := ParseLlama2c("mem", data)
			if err != nil {
				t.Fatalf("v%d tied=%v: %v", version, tied, err)
			}
			sameTensors(t, ck, got)
		}
	}
}

// TestLlama2cV0Layout pins the v0 byte layout: header, where the first weights of each stacked array begin, and
// the total size, computed independently of llama2cOrder.
func TestLlama2cV0Layout(t *testing.T) {
	cfg := tinyConfig(false)
	ck := randomCheckpoint(cfg, 3)
	data := writeLlama2c(t, ck, 0, 0)
	head := make([]int32, 7)
	binary.Read(bytes.NewReader(data), binary.LittleEndian, head)
	if want := []int32{64, 96, 2, 4, 2, -80, 32}; !slicesEqual(head, want) {
		t.Fatalf("header %v, want %v (negative vocab: untied)", head, want)
	}
	d, h, L, kv, v, s := 64, 96, 2, 32, 80, 32
	offWQ := 28 + 4*(v*d+L*d)
	offW1 := offWQ + 4*L*(d*d+2*kv*d+d*d+d)
	size := offW1 + 4*(3*L*d*h+d+s*(d/4)) + 4*v*d
	if len(data) != size {
		t.Fatalf("file %d bytes, want %d", len(data), size)
	}
	if !bytes.Equal(data[offWQ:offWQ+16], ck.Tensors[LayerTensor(0, AttnQ)].Data[:16]) ||
		!bytes.Equal(data[offW1:offW1+16], ck.Tensors[LayerTensor(0, FFNGate)].Data[:16]) {
		t.Fatal("wq or w1 not at the expected offset")
	}
}

func slicesEqual[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestLlama2cV2(t *testing.T) {
	const gs = 32
	for _, tied := range []bool{true, false} {
		ck := randomCheckpoint(tinyConfig(tied), 4)
		data := writeLlama2c(t, ck, 2, gs)
		if binary.LittleEndian.Uint32(data) != 0x616b3432 || data[36] != map[bool]byte{true: 1, false: 0}[tied] ||
			binary.LittleEndian.Uint32(data[37:]) != gs {
			t.Fatalf("v2 header % x", data[:41])
		}
		got, err := ParseLlama2c("mem", data)
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range ck.Tensors {
			g := got.Tensors[name]
			if len(g.Shape) == 1 {
				if g.Type != F32 || !bytes.Equal(g.Data, want.Data) {
					t.Fatalf("%s: norm not kept as exact F32", name)
				}
				continue
			}
			if g.Type != Q8Group || g.GroupSize != gs || !slicesEqual(g.Shape, want.Shape) {
				t.Fatalf("%s: %v gs %d %v, want Q8Group gs %d %v", name, g.Type, g.GroupSize, g.Shape, gs, want.Shape)
			}
			// Every value is within half a step of its group's scale, and each group's largest value is exact.
			q, scales := g.Q8Group()
			w := want.F32()
			for i, x := range w {
				s := scales[i/gs]
				if diff := math.Abs(float64(float32(q[i])*s - x)); diff > float64(s)/2*(1+1e-6) {
					t.Fatalf("%s[%d]: %d*%g = %g, want %g within %g", name, i, q[i], s, float32(q[i])*s, x, s/2)
				}
			}
		}
		// Writing the loaded Q8Group checkpoint again copies the quantized bytes unchanged.
		if again := writeLlama2c(t, got, 2, gs); !bytes.Equal(again, data) {
			t.Fatal("v2 -> load -> v2 changed the file")
		}
	}
}

func TestLlama2cErrors(t *testing.T) {
	good := writeLlama2c(t, randomCheckpoint(tinyConfig(true), 5), 0, 0)
	v2 := writeLlama2c(t, randomCheckpoint(tinyConfig(true), 5), 2, 16)
	edit := func(b []byte, off int, v int32) []byte {
		c := bytes.Clone(b)
		binary.LittleEndian.PutUint32(c[off:], uint32(v))
		return c
	}
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"short", good[:20], "m.bin: 20 bytes, too short"},
		{"truncated", good[:len(good)-3], "m.bin: freq_cis tables: need 2048 bytes"},
		{"truncated weights", good[:70000], "m.bin: tensor blk.1.attn_k.weight: need 8192 bytes at offset 61980"},
		{"too short for config", good[:1000], "m.bin: 1000 bytes cannot hold the 66880 weights of 2 layers"},
		{"trailing", append(bytes.Clone(good), 0, 0, 0, 0), "m.bin: 4 bytes after the last tensor"},
		{"bad heads", edit(good, 12, 5), "m.bin: config: dim=64 is not a multiple of n_heads=5"},
		{"huge dims", edit(edit(good, 0, 1<<24), 4, 1<<24), "m.bin: 269596 bytes cannot hold the over 2^50 weights"},
		{"many layers", edit(edit(edit(good, 0, 8), 12, 2), 8, 1<<24), "cannot hold the 43218109064 weights of 16777216 layers"},
		{"version", edit(v2, 4, 3), "m.bin: llama2.c version 3 not supported"},
		{"group size", edit(v2, 37, 0), "m.bin: group_size=0"},
		{"odd group", edit(v2, 37, 7), "m.bin: tensor token_embd.weight: shape [80 64] does not fit Q8Group"},
	} {
		_, err := ParseLlama2c("m.bin", c.data)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want one line containing %q", c.name, err, c.want)
		}
	}
	ck := randomCheckpoint(tinyConfig(true), 5)
	ck.Config.RopeTheta = 500000
	if err := WriteLlama2c(&bytes.Buffer{}, ck, 0, 0); err == nil || !strings.Contains(err.Error(), "rope_theta") {
		t.Errorf("writing rope_theta 500000 as llama2.c: %v, want an error", err)
	}
}

func TestLoadLlama2cFile(t *testing.T) {
	ck := randomCheckpoint(tinyConfig(false), 6)
	path := filepath.Join(t.TempDir(), "m.bin")
	if err := os.WriteFile(path, writeLlama2c(t, ck, 0, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := LoadLlama2c(path)
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, ck, got)
	if err := got.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadLlama2c(filepath.Join(t.TempDir(), "missing.bin")); err == nil {
		t.Fatal("loading a missing file gave no error")
	}
}

func TestStories260KBin(t *testing.T) {
	path := datadir.ForTest(t, "models/stories260K.bin")
	start := time.Now()
	ck, err := LoadLlama2c(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	t.Logf("loaded %s in %v", filepath.Base(path), time.Since(start))
	want := Config{Dim: 64, HiddenDim: 172, NLayers: 5, NHeads: 8, NKVHeads: 4, VocabSize: 512, SeqLen: 512,
		RopeTheta: 10000, NormEps: 1e-5, TiedEmbeddings: true}
	if ck.Config != want {
		t.Fatalf("config %+v, want %+v", ck.Config, want)
	}
	// Writing it back as v0 reproduces the file byte for byte, apart from the unused freq_cis tables, whose last
	// bits depend on the float32 cos/sin that PyTorch used.
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data := writeLlama2c(t, ck, 0, 0)
	if len(data) != len(orig) {
		t.Fatalf("rewritten file %d bytes, original %d", len(data), len(orig))
	}
	freqStart := len(orig) - 2*4*512*4
	if !bytes.Equal(data[:freqStart], orig[:freqStart]) {
		t.Fatal("rewritten weights differ from the original file")
	}
	a, b := bytesToF32(data[freqStart:]), bytesToF32(orig[freqStart:])
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > 1e-6 {
			t.Fatalf("freq_cis[%d] = %g, original %g", i, a[i], b[i])
		}
	}
}

func FuzzParseLlama2c(f *testing.F) {
	cfg := Config{Dim: 8, HiddenDim: 12, NLayers: 1, NHeads: 2, NKVHeads: 1, VocabSize: 6, SeqLen: 4,
		RopeTheta: 10000, NormEps: 1e-5}
	for _, tied := range []bool{true, false} {
		cfg.TiedEmbeddings = tied
		ck := randomCheckpoint(cfg, 8)
		for _, v := range []int{0, 1, 2} {
			f.Add(writeLlama2c(f, ck, v, 4))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ck, err := ParseLlama2c("fuzz", data)
		if err != nil {
			return
		}
		if err := ck.Check("fuzz"); err != nil {
			t.Fatalf("parsed checkpoint fails Check: %v", err)
		}
	})
}
