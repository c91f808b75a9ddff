package tokenizer

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/morphlab/morphlab/internal/datadir"
)

// tinyVocab is a llama2.c-style vocabulary the tests build: unk, BOS, EOS, 256 byte tokens, then pieces whose
// scores decide the merge order.
func tinyVocab(t testing.TB) *Vocab {
	t.Helper()
	pieces := []string{"<unk>", "\n<s>\n", "\n</s>\n"}
	scores := []float32{0, 0, 0}
	for b := 0; b < 256; b++ {
		pieces = append(pieces, fmt.Sprintf("<0x%02X>", b))
		scores = append(scores, 0)
	}
	for i, p := range []string{" ", "a", "b", "c", "é", " a", "ab", " ab", "bc", "abc", "aa", "\n"} {
		pieces = append(pieces, p)
		scores = append(scores, float32(-i)) // earlier in the list = higher score
	}
	scores[len(scores)-3] = 5 // "abc" merges before anything else that could apply
	v, err := New(pieces, scores, nil, 1, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func ids(v *Vocab, pieces ...string) []int {
	var out []int
	for _, p := range pieces {
		if id, ok := v.Lookup(p); ok {
			out = append(out, id)
		} else if b, ok := parseByte(p); ok {
			out = append(out, v.byteID[b])
		} else {
			panic("no piece " + p)
		}
	}
	return out
}

func TestEncodeTiny(t *testing.T) {
	v := tinyVocab(t)
	cases := []struct {
		text   string
		bos    bool
		eos    bool
		pieces []string
	}{
		{"", false, false, nil},
		{"a", false, false, []string{" a"}},
		// " "+"abc": candidates " a"(-5) "ab"(-6) "bc"(-8); " a" wins, then " a"+"b" -> " ab" (-7); "bc" is gone.
		{"abc", false, false, []string{" ab", "c"}},
		// "bbc": " ", "b", "b", "c": only "bc" merges.
		{"bbc", false, false, []string{" ", "b", "bc"}},
		// "aabc": " a" first, then "abc" (score 5) beats " a"+"a" (no such piece) and "aa" is blocked.
		{"aabc", false, false, []string{" a", "abc"}},
		// 'z' and the 3-byte '€' have no piece: byte fallback, one token per byte.
		{"z€é", false, false, []string{" ", "<0x7A>", "<0xE2>", "<0x82>", "<0xAC>", "é"}},
		{"a\n", true, true, nil},
	}
	cases[len(cases)-1].pieces = nil
	for _, c := range cases[:len(cases)-1] {
		got := v.Encode(c.text, c.bos, c.eos)
		want := ids(v, c.pieces...)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Encode(%q) = %v, want %v (%q)", c.text, got, want, c.pieces)
		}
	}
	got := v.Encode("a\n", true, true)
	want := append(append([]int{v.BOS}, ids(v, " a", "\n")...), v.EOS)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Encode(\"a\\n\", bos, eos) = %v, want %v", got, want)
	}
	v.AddDummyPrefix = false
	if got, want := v.Encode("abc", false, false), ids(v, "abc"); !reflect.DeepEqual(got, want) {
		t.Errorf("without dummy prefix Encode(\"abc\") = %v, want %v", got, want)
	}
}

func TestDecode(t *testing.T) {
	v := tinyVocab(t)
	sp := ids(v, " a")[0]
	if got := string(v.Decode(v.BOS, sp)); got != "a" {
		t.Errorf("Decode(BOS, ' a') = %q, want the leading space stripped", got)
	}
	if got := string(v.Decode(sp, sp)); got != " a" {
		t.Errorf("Decode(' a', ' a') = %q, want %q", got, " a")
	}
	if got := v.Decode(sp, v.byteID[0xE2]); !bytes.Equal(got, []byte{0xE2}) {
		t.Errorf("Decode(byte token <0xE2>) = %q, want the raw byte", got)
	}
	if got := v.DecodeAll([]int{v.BOS, sp, sp, v.EOS}); got != "a a" {
		t.Errorf("DecodeAll = %q, want %q", got, "a a")
	}
}

// referenceEncode is run.c's encode written as plainly as it is there: rescan every adjacent pair after each merge
// and merge the first one with the strictly highest score. Encode must agree with it on every input.
func referenceEncode(v *Vocab, text string) []int {
	if text != "" && v.AddDummyPrefix {
		text = " " + text
	}
	var toks []int
	for i := 0; i < len(text); {
		j := i + 1
		for j < len(text) && j-i < 4 && text[j]&0xC0 == 0x80 {
			j++
		}
		if id, ok := v.lookup[text[i:j]]; ok {
			toks = append(toks, id)
		} else {
			for k := i; k < j; k++ {
				toks = append(toks, v.byteID[text[k]])
			}
		}
		i = j
	}
	for {
		best, bestID, bestIdx := float32(0), -1, -1
		for i := 0; i+1 < len(toks); i++ {
			if v.Types[toks[i]] == Byte || v.Types[toks[i+1]] == Byte {
				continue
			}
			id, ok := v.lookup[v.Pieces[toks[i]]+v.Pieces[toks[i+1]]]
			if ok && (bestIdx < 0 || v.Scores[id] > best) {
				best, bestID, bestIdx = v.Scores[id], id, i
			}
		}
		if bestIdx < 0 {
			return toks
		}
		toks[bestIdx] = bestID
		toks = append(toks[:bestIdx+1], toks[bestIdx+2:]...)
	}
}

func randomText(r *rand.Rand, alphabet []string, n int) string {
	var sb strings.Builder
	for range n {
		sb.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	return sb.String()
}

func TestEncodeMatchesReference(t *testing.T) {
	v := tinyVocab(t)
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "c", " ", "é", "z", "\n", "€", "\xff"}
	for i := range 2000 {
		text := randomText(r, alphabet, r.IntN(40))
		if got, want := v.Encode(text, false, false), referenceEncode(v, text); !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d: Encode(%q) = %v, reference %v", i, text, got, want)
		}
	}
}

// TestMinTokens: MinTokens never exceeds the tokens Encode makes of a text of that length, and reaches them when
// the text is the longest piece repeated; a vocabulary that drops bytes it cannot spell bounds nothing.
func TestMinTokens(t *testing.T) {
	v := tinyVocab(t) // longest text pieces: " ab", "abc" (3 bytes)
	r := rand.New(rand.NewPCG(5, 6))
	alphabet := []string{"a", "b", "c", " ", "é", "z", "\n", "€", "\xff", "abc", " ab"}
	for i := range 2000 {
		text := randomText(r, alphabet, r.IntN(60))
		if n, low := len(v.Encode(text, false, false)), v.MinTokens(len(text)); low > n {
			t.Fatalf("case %d: MinTokens(%d) = %d, but Encode(%q) makes %d tokens", i, len(text), low, text, n)
		}
	}
	if got := v.MinTokens(9); got != 3 {
		t.Errorf("MinTokens(9) = %d, want 3 (nine bytes can be three tokens of the 3-byte pieces)", got)
	}
	if got := v.MinTokens(4 << 20); got != (4<<20+2)/3 {
		t.Errorf("MinTokens(4 MiB) = %d, want %d", got, (4<<20+2)/3)
	}
	noFallback, err := New([]string{"a", "b", "ab"}, []float32{0, 0, 1}, []TokenType{Normal, Normal, Normal}, -1, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	if got := noFallback.MinTokens(100); got != 0 || len(noFallback.Encode("zzzz", false, false)) != 0 {
		t.Errorf("a vocabulary without byte tokens or UNK: MinTokens(100) = %d, want 0 (it drops what it cannot spell)", got)
	}
}

// spmIDs are the ids that SentencePiece's spm_encode gives with the Llama 2 tokenizer.model for these lines
// (Encode was also checked line by line against spm_encode on all of eval/tinystories_val.txt and
// eval/wiki.test.raw: identical).
var spmIDs = []struct {
	text string
	ids  []int
}{
	{"Hello world", []int{15043, 3186}},
	{"Once upon a time, there was a little girl named Lily.",
		[]int{9038, 2501, 263, 931, 29892, 727, 471, 263, 2217, 7826, 4257, 365, 2354, 29889}},
	{"héllo 你好 🤗", []int{298, 3610, 417, 29871, 30919, 31076, 29871, 243, 162, 167, 154}},
}

func TestLlama2Vocab(t *testing.T) {
	v, err := LoadBin(datadir.ForTest(t, "models/tokenizer.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if v.Len() != 32000 {
		t.Fatalf("tokenizer.bin: %d tokens, want 32000", v.Len())
	}
	for _, c := range spmIDs {
		got := v.Encode(c.text, true, false)
		want := append([]int{1}, c.ids...)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, want)
		}
		if dec := v.DecodeAll(got); dec != c.text {
			t.Errorf("DecodeAll(Encode(%q)) = %q", c.text, dec)
		}
	}
}

func TestTok512(t *testing.T) {
	v, err := LoadBin(datadir.ForTest(t, "models/tok512.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if v.Len() != 512 || v.BOS != 1 || v.EOS != 2 || v.Types[3] != Byte || v.Pieces[258] != "<0xFF>" {
		t.Fatalf("tok512.bin: %d tokens, bos %d eos %d, token 3 type %d, token 258 %q", v.Len(), v.BOS, v.EOS,
			v.Types[3], v.Pieces[258])
	}
	text := "Once upon a time, there was a little girl named Lily."
	want := []int{1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426}
	if got := v.Encode(text, true, false); !reflect.DeepEqual(got, want) {
		t.Errorf("Encode(%q) = %v, want %v", text, got, want)
	}
	r := rand.New(rand.NewPCG(3, 4))
	words := []string{"Once", " upon", " a", " time", ",", " Lily", " 你", "\n", " the", "dog", "!", " ", "é"}
	for i := range 300 {
		text := randomText(r, words, r.IntN(30))
		got := v.Encode(text, true, false)
		if ref := append([]int{1}, referenceEncode(v, text)...); !reflect.DeepEqual(got, ref) {
			t.Fatalf("case %d: Encode(%q) = %v, reference %v", i, text, got, ref)
		}
		if dec := v.DecodeAll(got); dec != text {
			t.Fatalf("case %d: DecodeAll(Encode(%q)) = %q", i, text, dec)
		}
	}
}

func TestBinRoundTrip(t *testing.T) {
	v := tinyVocab(t)
	var buf bytes.Buffer
	if err := WriteBin(&buf, v); err != nil {
		t.Fatal(err)
	}
	w, err := ParseBin(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(v.Pieces, w.Pieces) || !reflect.DeepEqual(v.Scores, w.Scores) ||
		!reflect.DeepEqual(v.Types, w.Types) {
		t.Fatal("tokenizer.bin round trip changed the vocabulary")
	}
}

func TestParseBinErrors(t *testing.T) {
	var good bytes.Buffer
	if err := WriteBin(&good, tinyVocab(t)); err != nil {
		t.Fatal(err)
	}
	b := good.Bytes()
	neg := append([]byte(nil), b...)
	copy(neg[8:], []byte{0xff, 0xff, 0xff, 0x7f}) // token 0's length: 2^31-1
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"zero max length", []byte{0, 0, 0, 0}, "max_token_length=0"},
		{"truncated record", b[:len(b)-1], "token 270"},
		{"huge length", neg, "token 0: length 2147483647"},
		{"too few tokens", b[:4+8+5], "at least unk, BOS and EOS"},
	} {
		_, err := ParseBin(c.data)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want one line containing %q", c.name, err, c.want)
		}
	}
}

func TestSentencePieceNormalisation(t *testing.T) {
	v, err := NewSentencePiece([]string{"<unk>", "<s>", "</s>", "\u2581a", "a", "\u2581"},
		[]float32{0, 0, 0, -1, -2, -3}, []TokenType{Unknown, Control, Control, Normal, Normal, Normal}, 1, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Encode("a a", false, false); !reflect.DeepEqual(got, []int{3, 3}) {
		t.Errorf("Encode(\"a a\") = %v, want [3 3] (' a' twice)", got)
	}
}

func FuzzParseBin(f *testing.F) {
	var buf bytes.Buffer
	if err := WriteBin(&buf, tinyVocab(f)); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:100])
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := ParseBin(data)
		if err != nil {
			return
		}
		v.DecodeAll(v.Encode(string(data[:min(len(data), 64)]), true, true))
	})
}

func FuzzEncode(f *testing.F) {
	v := tinyVocab(f)
	for _, s := range []string{"", "abc", "aabc z€é", "\xff\xfe", "  a\n\nb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		got := v.Encode(text, true, false)
		if ref := append([]int{v.BOS}, referenceEncode(v, text)...); !reflect.DeepEqual(got, ref) {
			t.Fatalf("Encode(%q) = %v, reference %v", text, got, ref)
		}
		// Invalid UTF-8 need not round-trip: like run.c, a stray continuation byte joins the dummy-prefix space
		// into one unknown "character", and the space's byte token then keeps its space after BOS.
		if dec := v.DecodeAll(got); utf8.ValidString(text) && dec != text {
			t.Fatalf("DecodeAll(Encode(%q)) = %q", text, dec)
		}
	})
}

// BenchmarkEncode encodes one paragraph-sized text (about 1 KB) with the tiny vocabulary and, when the shared data
// is present, with the Llama 2 vocabulary; bytes/s is input text.
func BenchmarkEncode(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	text := randomText(r, []string{"Once", " upon", " a", " time", ",", " Lily", " saw", " the", " dog", ".", "\n"}, 250)
	vocabs := map[string]*Vocab{"tiny": tinyVocab(b)}
	if p, err := datadir.Path("models/tokenizer.bin"); err == nil {
		v, err := LoadBin(p)
		if err != nil {
			b.Fatal(err)
		}
		vocabs["llama2"] = v
	}
	for _, name := range []string{"tiny", "llama2"} {
		v, ok := vocabs[name]
		if !ok {
			continue
		}
		b.Run("vocab="+name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				v.Encode(text, true, false)
			}
		})
	}
}
