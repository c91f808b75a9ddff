package model

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/engine/tokenizer"
	"github.com/morphlab/morphlab/internal/datadir"
)

// testVocab is a SentencePiece-like vocabulary of cfg.VocabSize tokens: unk, BOS, EOS, 64 byte tokens (enough to
// test the metadata; real vocabularies have 256), then pieces.
func testVocab(t testing.TB, n int) *tokenizer.Vocab {
	t.Helper()
	pieces := []string{"<unk>", "<s>", "</s>"}
	types := []tokenizer.TokenType{tokenizer.Unknown, tokenizer.Control, tokenizer.Control}
	for b := 0; len(pieces) < 67; b++ {
		pieces = append(pieces, fmt.Sprintf("<0x%02X>", b))
		types = append(types, tokenizer.Byte)
	}
	for i := 0; len(pieces) < n; i++ {
		pieces = append(pieces, fmt.Sprintf(" w%d", i))
		types = append(types, tokenizer.Normal)
	}
	scores := make([]float32, n)
	for i := range scores {
		scores[i] = -float32(i) / 4
	}
	v, err := tokenizer.New(pieces, scores, types, 1, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// mixedCheckpoint is randomCheckpoint with a vocabulary, an extra tensor, and layer 1 stored in F16, BF16, Q8_0
// and Q4_0 (random raw bytes: the file formats keep bytes, they do not interpret them).
func mixedCheckpoint(t testing.TB, tied bool) *Checkpoint {
	cfg := tinyConfig(tied)
	ck := randomCheckpoint(cfg, 9)
	ck.Vocab = testVocab(t, cfg.VocabSize)
	r := rand.New(rand.NewPCG(10, 11))
	for i, part := range []string{AttnQ, AttnK, FFNGate, FFNDown} {
		old := ck.Tensors[LayerTensor(1, part)]
		typ := []TensorType{F16, BF16, Q8_0, Q4_0}[i]
		size, err := typ.Bytes(old.Elements(), 0)
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		ck.Tensors[old.Name] = &Tensor{Name: old.Name, Type: typ, Shape: old.Shape, Data: data}
	}
	ck.Tensors["rope_freqs.weight"] = NewF32Tensor("rope_freqs.weight", []int{8}, []float32{1, 2, 3, 4, 5, 6, 7, 8})
	return ck
}

func writeGGUF(t testing.TB, ck *Checkpoint) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteGGUF(&buf, ck); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sameVocab(t *testing.T, a, b *tokenizer.Vocab) {
	t.Helper()
	if !reflect.DeepEqual(a.Pieces, b.Pieces) || !reflect.DeepEqual(a.Scores, b.Scores) ||
		!reflect.DeepEqual(a.Types, b.Types) || a.BOS != b.BOS || a.EOS != b.EOS || a.UNK != b.UNK ||
		a.AddDummyPrefix != b.AddDummyPrefix {
		t.Fatal("vocabulary changed in the round trip")
	}
}

func TestGGUFRoundTrip(t *testing.T) {
	for _, tied := range []bool{true, false} {
		ck := mixedCheckpoint(t, tied)
		data := writeGGUF(t, ck)
		got, err := ParseGGUFCheckpoint("mem.gguf", data)
		if err != nil {
			t.Fatal(err)
		}
		sameTensors(t, ck, got)
		sameVocab(t, ck.Vocab, got.Vocab)
		for name, x := range got.Tensors {
			if x.Type == F32 && uintptr(unsafePointer(x.Data))%32 != uintptr(unsafePointer(data))%32 {
				t.Fatalf("tensor %s is not 32-byte aligned in the file", name)
			}
		}
		// Writing what was read gives the same bytes.
		if again := writeGGUF(t, got); !bytes.Equal(again, data) {
			t.Fatal("gguf -> load -> gguf changed the file")
		}
	}
}

// TestGGUFHandMade parses a file assembled byte by byte here, independently of the writer: one metadata entry
// of each kind that matters and one 2x3 F32 tensor at data offset 0 after 32-byte alignment.
func TestGGUFHandMade(t *testing.T) {
	var b []byte
	u32 := func(v uint32) { b = binary.LittleEndian.AppendUint32(b, v) }
	u64 := func(v uint64) { b = binary.LittleEndian.AppendUint64(b, v) }
	str := func(s string) { u64(uint64(len(s))); b = append(b, s...) }
	u32(0x46554747)
	u32(3)
	u64(1) // tensors
	u64(3) // metadata
	str("a.u32")
	u32(4)
	u32(77)
	str("a.strs")
	u32(9)
	u32(8)
	u64(2)
	str("x")
	str("\u2581y")
	str("a.f64")
	u32(12)
	u64(math.Float64bits(2.5))
	str("w")
	u32(2)
	u64(3) // ne[0]: fastest
	u64(2)
	u32(0) // F32
	u64(0)
	for len(b)%32 != 0 {
		b = append(b, 0)
	}
	dataStart := len(b)
	for i := range 6 {
		u32(math.Float32bits(float32(i)))
	}
	g, err := ParseGGUF("hand.gguf", b)
	if err != nil {
		t.Fatal(err)
	}
	want := []GGUFKV{{"a.u32", uint32(77)}, {"a.strs", []string{"x", "\u2581y"}}, {"a.f64", 2.5}}
	if !reflect.DeepEqual(g.Metadata, want) {
		t.Fatalf("metadata %v, want %v", g.Metadata, want)
	}
	w := g.Tensors[0].Tensor
	if g.DataOffset != dataStart || w.Name != "w" || !reflect.DeepEqual(w.Shape, []int{2, 3}) ||
		!reflect.DeepEqual(w.F32(), []float32{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("tensor %s %v %v at %d, want w [2 3] [0..5] at %d", w.Name, w.Shape, w.F32(), g.DataOffset, dataStart)
	}
}

func TestGGUFMetadataTypes(t *testing.T) {
	meta := []GGUFKV{
		{"general.alignment", uint32(64)},
		{"u8", uint8(200)}, {"i8", int8(-100)}, {"u16", uint16(60000)}, {"i16", int16(-30000)},
		{"u32", uint32(4e9)}, {"i32", int32(-2e9)}, {"f32", float32(1.5)}, {"b", true}, {"s", "héllo"},
		{"u64", uint64(1 << 60)}, {"i64", int64(-1 << 60)}, {"f64", math.Pi},
		{"au8", []uint8{1, 2}}, {"ai8", []int8{-1}}, {"au16", []uint16{7}}, {"ai16", []int16{-7}},
		{"au32", []uint32{}}, {"ai32", []int32{1, -1}}, {"af32", []float32{0.25}}, {"ab", []bool{true, false}},
		{"as", []string{"", "x"}}, {"au64", []uint64{9}}, {"ai64", []int64{-9}}, {"af64", []float64{1e300}},
		{"nested", []any{[]int32{1, 2}, []string{"a"}, []any{[]bool{true}}}},
	}
	x := NewF32Tensor("x", []int{2, 2}, []float32{1, 2, 3, 4})
	y := NewF32Tensor("y", []int{3}, []float32{5, 6, 7})
	var buf bytes.Buffer
	if err := WriteGGUFFile(&buf, meta, []*Tensor{y, x}); err != nil {
		t.Fatal(err)
	}
	g, err := ParseGGUF("meta.gguf", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g.Metadata, meta) {
		t.Fatalf("metadata round trip:\n got %v\nwant %v", g.Metadata, meta)
	}
	if g.Alignment != 64 || g.DataOffset%64 != 0 || g.Tensors[1].Offset != 64 ||
		!reflect.DeepEqual(g.Tensors[1].Tensor.F32(), []float32{1, 2, 3, 4}) {
		t.Fatalf("alignment %d, data at %d, x at %d: %v", g.Alignment, g.DataOffset, g.Tensors[1].Offset,
			g.Tensors[1].Tensor.F32())
	}
}

// ggufPatch returns a copy of a GGUF file with the 4 bytes after the first occurrence of marker set to v.
func ggufPatch(t *testing.T, data []byte, marker string, v uint32) []byte {
	t.Helper()
	i := bytes.Index(data, []byte(marker))
	if i < 0 {
		t.Fatalf("%q not in file", marker)
	}
	c := bytes.Clone(data)
	binary.LittleEndian.PutUint32(c[i+len(marker):], v)
	return c
}

func TestGGUFErrors(t *testing.T) {
	good := writeGGUF(t, mixedCheckpoint(t, false))
	embd := "token_embd.weight" + "\x02\x00\x00\x00" + "\x40\x00\x00\x00\x00\x00\x00\x00" +
		"\x50\x00\x00\x00\x00\x00\x00\x00" // name, n_dims 2, ne 64, ne 80; then the type
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"magic", append([]byte("GGUX"), good[4:]...), "f.gguf: not a GGUF file"},
		{"version", ggufPatch(t, good, "GGUF", 1), "f.gguf: GGUF version 1 not supported"},
		{"short", good[:10], "f.gguf: gguf header: unexpected end of file"},
		{"truncated metadata", good[:2000], "f.gguf: gguf metadata tokenizer.ggml.scores: array of 80 values does not fit"},
		{"truncated data", good[:len(good)-100], "f.gguf: gguf tensor output.weight: 20480 bytes at data offset"},
		{"type", ggufPatch(t, good, embd, 12), "f.gguf: gguf tensor token_embd.weight: ggml type 12 (Q4_K) not supported"},
		{"offset", ggufPatch(t, good, embd+"\x00\x00\x00\x00", 4), "offset 4 is not a multiple of the alignment 32"},
		{"shape", ggufPatch(t, good, "llama.feed_forward_length\x04\x00\x00\x00", 32),
			"f.gguf: tensor blk.0.ffn_gate.weight: shape [96 64], want [32 64]"},
		{"many layers", ggufPatch(t, good, "llama.block_count\x04\x00\x00\x00", 1<<24),
			"f.gguf: tensor blk.2.attn_norm.weight missing"},
		{"missing key", bytes.Replace(good, []byte("llama.block_count"), []byte("llama.block_cOunt"), 1),
			"f.gguf: gguf metadata llama.block_count missing"},
		{"arch", bytes.Replace(good, []byte("\x05\x00\x00\x00\x00\x00\x00\x00llama"), []byte("\x05\x00\x00\x00\x00\x00\x00\x00gemma"), 1),
			"f.gguf: gguf metadata general.architecture=gemma, want \"llama\""},
		{"huge array", ggufPatch(t, good, "tokenizer.ggml.tokens\x09\x00\x00\x00\x08\x00\x00\x00", 0xffffffff),
			"does not fit in the"},
		{"huge counts", ggufPatch(t, good, "GGUF\x03\x00\x00\x00", 0xfffffff), "cannot fit in"},
	} {
		_, err := ParseGGUFCheckpoint("f.gguf", c.data)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want one line containing %q", c.name, err, c.want)
		}
	}
	ck := randomCheckpoint(tinyConfig(true), 1)
	ck.Tensors[TokenEmbd] = QuantizeQ8Group(ck.Tensors[TokenEmbd].F32(), 32)
	ck.Tensors[TokenEmbd].Name, ck.Tensors[TokenEmbd].Shape = TokenEmbd, []int{80, 64}
	if err := WriteGGUF(&bytes.Buffer{}, ck); err == nil || !strings.Contains(err.Error(), "token_embd.weight: type Q8Group") {
		t.Errorf("writing Q8Group as GGUF: %v, want an error naming the tensor", err)
	}
}

func TestLoadGGUFFile(t *testing.T) {
	ck := mixedCheckpoint(t, true)
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(path, writeGGUF(t, ck), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := LoadGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	sameTensors(t, ck, got)
}

func TestStories260KGGUF(t *testing.T) {
	binPath := datadir.ForTest(t, "models/stories260K.bin")
	ggufPath := datadir.ForTest(t, "models/stories260K.gguf")
	tokPath := datadir.ForTest(t, "models/tok512.bin")
	start := time.Now()
	g, err := LoadGGUF(ggufPath)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	t.Logf("loaded %s in %v", filepath.Base(ggufPath), time.Since(start))
	b, err := LoadLlama2c(binPath)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// The GGUF copy has a 2048-token context in its metadata and an explicit output.weight (a copy of the
	// embedding); otherwise the configs agree.
	want := Config{Dim: 64, HiddenDim: 172, NLayers: 5, NHeads: 8, NKVHeads: 4, VocabSize: 512, SeqLen: 2048,
		RopeTheta: 10000, NormEps: 1e-5, TiedEmbeddings: false}
	if g.Config != want {
		t.Fatalf("config %+v, want %+v", g.Config, want)
	}
	for _, s := range b.Config.Tensors() {
		if !bytes.Equal(g.Tensors[s.Name].Data, b.Tensors[s.Name].Data) {
			t.Fatalf("tensor %s differs between the .gguf and the .bin", s.Name)
		}
	}
	if !bytes.Equal(g.Tensors[Output].Data, b.Tensors[TokenEmbd].Data) {
		t.Fatal("the .gguf output.weight is not the .bin embedding")
	}
	tok, err := tokenizer.LoadBin(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	if g.Vocab == nil || g.Vocab.Len() != 512 || g.Vocab.BOS != 1 || g.Vocab.EOS != 2 || !g.Vocab.AddDummyPrefix {
		t.Fatalf("gguf vocabulary %+v", g.Vocab)
	}
	for id := 3; id < 512; id++ {
		if g.Vocab.Pieces[id] != tok.Pieces[id] || g.Vocab.Scores[id] != tok.Scores[id] {
			t.Fatalf("token %d: gguf %q %g, tok512.bin %q %g", id, g.Vocab.Pieces[id], g.Vocab.Scores[id],
				tok.Pieces[id], tok.Scores[id])
		}
	}
	texts := []string{"", "Once upon a time, there was a little girl named Lily.", "  two  spaces\n\nand é 你好 🤗"}
	if val, err := datadir.Path("eval/tinystories_val.txt"); err == nil {
		data, err := os.ReadFile(val)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, strings.Split(string(data[:20000]), "\n\n")...)
	}
	for _, text := range texts {
		if x, y := g.Vocab.Encode(text, true, false), tok.Encode(text, true, false); !reflect.DeepEqual(x, y) {
			t.Fatalf("Encode(%q): gguf vocabulary %v, tok512.bin %v", text, x, y)
		}
	}
	// .bin + tok512.bin -> GGUF -> load: the same tensors and the same encodings.
	b.Vocab = tok
	again, err := ParseGGUFCheckpoint("rewritten.gguf", writeGGUF(t, b))
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, b, again)
	if again.Vocab.Pieces[1] != "<s>" || again.Vocab.Pieces[2] != "</s>" {
		t.Fatalf("BOS and EOS written as %q and %q, want <s> and </s>", again.Vocab.Pieces[1], again.Vocab.Pieces[2])
	}
	again.Vocab.Pieces[1], again.Vocab.Pieces[2] = tok.Pieces[1], tok.Pieces[2]
	sameVocab(t, tok, again.Vocab)
}

func FuzzParseGGUF(f *testing.F) {
	cfg := Config{Dim: 32, HiddenDim: 64, NLayers: 1, NHeads: 2, NKVHeads: 1, VocabSize: 70, SeqLen: 4,
		RopeTheta: 10000, NormEps: 1e-5, TiedEmbeddings: true}
	ck := randomCheckpoint(cfg, 12)
	ck.Vocab = testVocab(f, cfg.VocabSize)
	f.Add(writeGGUF(f, ck))
	var buf bytes.Buffer
	WriteGGUFFile(&buf, []GGUFKV{{"n", []any{[]int8{1}, []any{[]string{"x"}}}}, {"general.alignment", uint32(8)}},
		[]*Tensor{NewF32Tensor("t", []int{2, 2}, []float32{1, 2, 3, 4})})
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ParseGGUF("fuzz", data)
		if err != nil {
			return
		}
		// What parses must write back to a file that parses to the same metadata and tensors.
		var tensors []*Tensor
		for _, ti := range g.Tensors {
			tensors = append(tensors, ti.Tensor)
		}
		var out bytes.Buffer
		if err := WriteGGUFFile(&out, g.Metadata, tensors); err != nil {
			t.Fatalf("rewriting a parsed file: %v", err)
		}
		h, err := ParseGGUF("rewritten", out.Bytes())
		if err != nil {
			t.Fatalf("parsing a rewritten file: %v", err)
		}
		if !reflect.DeepEqual(normNaN(g.Metadata), normNaN(h.Metadata)) || len(g.Tensors) != len(h.Tensors) {
			t.Fatal("rewritten file differs")
		}
		for i := range g.Tensors {
			if !bytes.Equal(g.Tensors[i].Tensor.Data, h.Tensors[i].Tensor.Data) {
				t.Fatalf("tensor %d data differs after rewriting", i)
			}
		}
		if ck, err := ParseGGUFCheckpoint("fuzz", data); err == nil {
			if err := ck.Check("fuzz"); err != nil {
				t.Fatalf("parsed checkpoint fails Check: %v", err)
			}
		}
	})
}

// normNaN renders metadata as text so that NaN values (which reflect.DeepEqual never finds equal) compare.
func normNaN(meta []GGUFKV) string { return fmt.Sprintf("%#v", meta) }
