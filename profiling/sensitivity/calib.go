package sensitivity

import "github.com/morphlab/morphlab/engine/tokenizer"

// CalibrationTokens encodes paragraphs in order (each with BOS, cut to seqLen tokens) until they hold maxTokens
// tokens (or one less), cutting the last one to fit, and returns the sequences and how many paragraphs they used. A paragraph
// of BOS alone is skipped; maxTokens <= 0 takes every paragraph.
func CalibrationTokens(vocab *tokenizer.Vocab, paragraphs []string, maxTokens, seqLen int) ([][]int32, int) {
	var seqs [][]int32
	total := 0
	for i, p := range paragraphs {
		if maxTokens > 0 && maxTokens-total < 2 {
			return seqs, i
		}
		ids := vocab.Encode(p, true, false)
		n := min(len(ids), seqLen)
		if maxTokens > 0 {
			n = min(n, maxTokens-total)
		}
		if n < 2 {
			continue
		}
		s := make([]int32, n)
		for j := range s {
			s[j] = int32(ids[j])
		}
		seqs = append(seqs, s)
		total += n
	}
	return seqs, len(paragraphs)
}
