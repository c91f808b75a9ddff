// Package tokenizer is a SentencePiece-style BPE tokenizer as llama2.c's run.c runs it: a vocabulary of pieces
// with scores, a dummy-prefix space, byte-fallback tokens for text the vocabulary cannot spell, and greedy merging
// of the adjacent pair whose merged piece scores highest. It loads llama2.c tokenizer.bin files and GGUF vocabulary
// metadata (the model package reads the GGUF file and hands the arrays to NewSentencePiece).
package tokenizer

import (
	"fmt"
	"slices"
	"strings"
)

// TokenType is a token's kind, with GGUF's tokenizer.ggml.token_type numbering.
type TokenType int32

// The token kinds. Only Normal and UserDefined pieces can be produced from text; Byte tokens are the fallback
// for bytes no piece covers; Control tokens (BOS, EOS) are only added by flag.
const (
	Normal      TokenType = 1
	Unknown     TokenType = 2
	Control     TokenType = 3
	UserDefined TokenType = 4
	Unused      TokenType = 5
	Byte        TokenType = 6
)

// Vocab is a tokenizer vocabulary. Pieces use plain spaces (GGUF's U+2581 '▁' is replaced when loading).
// Treat it as read-only after New: Encode uses lookup tables built from Pieces and Types.
type Vocab struct {
	Pieces []string
	Scores []float32
	Types  []TokenType
	BOS    int // beginning-of-sequence id, -1 if none
	EOS    int // end-of-sequence id, -1 if none
	UNK    int // id used for a byte with no byte token, -1 if none

	// AddDummyPrefix makes Encode put a space before non-empty text, as SentencePiece's add_dummy_prefix does
	// (and run.c always does).
	AddDummyPrefix bool

	lookup   map[string]int // text-producible pieces (Normal, UserDefined) -> lowest id
	byteID   [256]int       // id of <0xXX>, or UNK
	maxSpell int            // the most text bytes one token of Encode spells; 0 when Encode may drop a byte
}

// New makes a vocabulary from pieces that already use plain spaces. types may be nil: it is then inferred as
// llama2.c's tokenizer.bin implies: unk Unknown, bos and eos Control, "<0xXX>" pieces Byte, the rest Normal.
// bos, eos and unk are token ids, or -1 for none.
func New(pieces []string, scores []float32, types []TokenType, bos, eos, unk int) (*Vocab, error) {
	n := len(pieces)
	if n == 0 {
		return nil, fmt.Errorf("tokenizer: empty vocabulary")
	}
	if len(scores) != n {
		return nil, fmt.Errorf("tokenizer: %d scores for %d pieces", len(scores), n)
	}
	if types != nil && len(types) != n {
		return nil, fmt.Errorf("tokenizer: %d token types for %d pieces", len(types), n)
	}
	for _, f := range []struct {
		name string
		id   int
	}{{"bos", bos}, {"eos", eos}, {"unk", unk}} {
		if f.id < -1 || f.id >= n {
			return nil, fmt.Errorf("tokenizer: %s id %d outside vocabulary of %d", f.name, f.id, n)
		}
	}
	v := &Vocab{Pieces: pieces, Scores: scores, Types: types, BOS: bos, EOS: eos, UNK: unk, AddDummyPrefix: true}
	if v.Types == nil {
		v.Types = make([]TokenType, n)
		for id, p := range pieces {
			_, isByte := parseByte(p)
			switch {
			case id == unk:
				v.Types[id] = Unknown
			case id == bos || id == eos:
				v.Types[id] = Control
			case isByte:
				v.Types[id] = Byte
			default:
				v.Types[id] = Normal
			}
		}
	}
	v.lookup = make(map[string]int, n)
	for i := range v.byteID {
		v.byteID[i] = unk
	}
	for id, p := range pieces {
		switch v.Types[id] {
		case Normal, UserDefined:
			if _, dup := v.lookup[p]; !dup {
				v.lookup[p] = id
			}
		case Byte:
			if b, ok := parseByte(p); ok && (v.byteID[b] == unk || v.Types[v.byteID[b]] != Byte) {
				v.byteID[b] = id
			}
		}
	}
	// A token of Encode is a byte token or UNK (one byte), or a text piece, or a merge of these whose piece is a
	// text piece: it spells at most max(1, the longest text piece) bytes.
	v.maxSpell = 1
	for p := range v.lookup {
		v.maxSpell = max(v.maxSpell, len(p))
	}
	if slices.Contains(v.byteID[:], -1) {
		v.maxSpell = 0
	}
	return v, nil
}

// MinTokens is a lower bound of the number of tokens Encode makes of any text of n bytes (BOS and EOS not
// counted), known without encoding it: Encode spells every byte of a text with a token, and no token spells more
// bytes than the longest text piece. A server refuses a text too long for its context with it before spending
// work and memory on encoding it in full. It is 0 when the vocabulary has neither a byte token nor UNK for some
// byte, since Encode then drops such bytes.
func (v *Vocab) MinTokens(n int) int {
	if v.maxSpell == 0 {
		return 0
	}
	return (n + v.maxSpell - 1) / v.maxSpell
}

// NewSentencePiece makes a vocabulary from SentencePiece pieces (as GGUF stores them), replacing '▁' (U+2581)
// with a space.
func NewSentencePiece(pieces []string, scores []float32, types []TokenType, bos, eos, unk int) (*Vocab, error) {
	plain := make([]string, len(pieces))
	for i, p := range pieces {
		plain[i] = strings.ReplaceAll(p, "\u2581", " ")
	}
	return New(plain, scores, types, bos, eos, unk)
}

// Len is the number of tokens.
func (v *Vocab) Len() int { return len(v.Pieces) }

// Lookup returns the id of a piece that text can produce (a Normal or UserDefined piece).
func (v *Vocab) Lookup(piece string) (int, bool) {
	id, ok := v.lookup[piece]
	return id, ok
}

// parseByte recognises a byte-fallback piece "<0xXX>" (two upper- or lower-case hex digits).
func parseByte(p string) (byte, bool) {
	if len(p) != 6 || p[:3] != "<0x" || p[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexDigit(p[3])
	lo, ok2 := hexDigit(p[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Decode returns the bytes that token tok prints as when it follows prev, as run.c's decode does: a piece's
// leading space is dropped right after BOS, and a byte token "<0xXX>" is the raw byte XX.
func (v *Vocab) Decode(prev, tok int) []byte {
	if tok < 0 || tok >= len(v.Pieces) {
		return nil
	}
	p := v.Pieces[tok]
	if v.Types[tok] == Byte {
		if b, ok := parseByte(p); ok {
			return []byte{b}
		}
	}
	if prev == v.BOS && v.BOS >= 0 && strings.HasPrefix(p, " ") {
		p = p[1:]
	}
	return []byte(p)
}

// DecodeAll concatenates Decode over tokens, each following the one before it (the first follows nothing).
// Control tokens (BOS, EOS) print nothing.
func (v *Vocab) DecodeAll(tokens []int) string {
	var sb strings.Builder
	prev := -1
	for _, t := range tokens {
		if t < 0 || t >= len(v.Types) || v.Types[t] != Control {
			sb.Write(v.Decode(prev, t))
		}
		prev = t
	}
	return sb.String()
}
