package tokenizer

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
)

// llama2.c's run.c fixes these ids for its tokenizer.bin files.
const (
	binUNK = 0
	binBOS = 1
	binEOS = 2
)

// LoadBin reads a llama2.c tokenizer.bin file (see ParseBin).
func LoadBin(path string) (*Vocab, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v, err := ParseBin(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// ParseBin parses llama2.c's tokenizer.bin: int32 max_token_length, then for each token until the end of the
// data a float32 score, an int32 byte length and the piece's bytes (all little-endian). The token count is not
// stored; it is however many records the data holds. Ids 0, 1, 2 are unk, BOS and EOS, as run.c assumes.
func ParseBin(data []byte) (*Vocab, error) {
	if len(data) < 4 {
		return nil, fmt.Errorf("tokenizer.bin: %d bytes, too short for the max_token_length header", len(data))
	}
	maxLen := int32(binary.LittleEndian.Uint32(data))
	if maxLen <= 0 {
		return nil, fmt.Errorf("tokenizer.bin: max_token_length=%d, want > 0", maxLen)
	}
	var pieces []string
	var scores []float32
	for off := 4; off < len(data); {
		id := len(pieces)
		if len(data)-off < 8 {
			return nil, fmt.Errorf("tokenizer.bin: token %d: truncated record header at byte %d", id, off)
		}
		score := math.Float32frombits(binary.LittleEndian.Uint32(data[off:]))
		n := int32(binary.LittleEndian.Uint32(data[off+4:]))
		off += 8
		if n < 0 || n > maxLen || int(n) > len(data)-off {
			return nil, fmt.Errorf("tokenizer.bin: token %d: length %d (max_token_length %d, %d bytes left)",
				id, n, maxLen, len(data)-off)
		}
		pieces = append(pieces, string(data[off:off+int(n)]))
		scores = append(scores, score)
		off += int(n)
	}
	if len(pieces) <= binEOS {
		return nil, fmt.Errorf("tokenizer.bin: %d tokens, want at least unk, BOS and EOS", len(pieces))
	}
	return New(pieces, scores, nil, binBOS, binEOS, binUNK)
}

// WriteBin writes v in llama2.c's tokenizer.bin format (pieces as they are, with plain spaces).
func WriteBin(w io.Writer, v *Vocab) error {
	bw := bufio.NewWriter(w)
	maxLen := 1
	for _, p := range v.Pieces {
		maxLen = max(maxLen, len(p))
	}
	var rec [8]byte
	binary.LittleEndian.PutUint32(rec[:4], uint32(maxLen))
	bw.Write(rec[:4])
	for i, p := range v.Pieces {
		binary.LittleEndian.PutUint32(rec[:4], math.Float32bits(v.Scores[i]))
		binary.LittleEndian.PutUint32(rec[4:], uint32(len(p)))
		bw.Write(rec[:])
		bw.WriteString(p)
	}
	return bw.Flush()
}
