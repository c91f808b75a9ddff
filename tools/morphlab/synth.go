package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/tokenizer"
	"github.com/morphlab/morphlab/internal/mdtable"
	"github.com/morphlab/morphlab/internal/numfmt"
)

func init() {
	register(&command{name: "synth", summary: "write a checkpoint of a named Llama shape with seeded random weights", run: runSynth})
}

func synthHelp() string {
	var lines []string
	for _, s := range model.Shapes {
		c := s.Config
		tied := "untied"
		if c.TiedEmbeddings {
			tied = "tied"
		}
		lines = append(lines, fmt.Sprintf("  %-12s dim %d, hidden %d, %d layers, %d heads, %d kv heads, vocab %d, context %d, "+
			"rope theta %g, %s (%s parameters)", s.Name, c.Dim, c.HiddenDim, c.NLayers, c.NHeads, c.NKVHeads, c.VocabSize,
			c.SeqLen, c.RopeTheta, tied, numfmt.Count(c.Params())))
	}
	return `
Synth writes a checkpoint of a named Llama shape with seeded random weights (engine/model.SynthesizeAs): the same
shape, seed and type always give the same bytes. Matrices (embedding and classifier included) are stored as
--type, norms as f32. Quantized types are made row block by row block, so a 7B model at q4_0 (about 3.8 GB) never
exists in f32. A .gguf file carries a synthetic byte-level vocabulary of the shape's size (<unk>, <s>, </s>, the
256 byte tokens, then filler pieces), so 'morphlab generate --model FILE' runs on it; a .bin file is llama2.c v0
(f32 only), whose vocabulary goes to --tokenizer-out if given. f16/q8_0/q4_0 need widths that are multiples of 32
(stories260K's hidden 172 is not: f32, f16 and bf16 only).

shapes:
` + strings.Join(lines, "\n")
}

// tensorTypes are the storage types the file commands write, by flag name.
var tensorTypes = map[string]model.TensorType{
	"f32": model.F32, "f16": model.F16, "bf16": model.BF16, "q8_0": model.Q8_0, "q4_0": model.Q4_0,
}

func parseTensorType(flag, s string) (model.TensorType, error) {
	if t, ok := tensorTypes[s]; ok {
		return t, nil
	}
	return 0, usagef("%s=%q, want f32, f16, bf16, q8_0 or q4_0", flag, s)
}

func runSynth(e *env, args []string) error {
	fs := e.flags("--shape NAME --out FILE [flags]", synthHelp())
	shape := fs.String("shape", "", "model shape `name` (see the list above)")
	seed := fs.Uint64("seed", 1, "random `seed`")
	typ := fs.String("type", "f32", "matrix storage `type`: f32, f16, bf16, q8_0 or q4_0")
	out := fs.String("out", "", "output `file`: .gguf, or .bin for llama2.c v0 (f32)")
	tokOut := fs.String("tokenizer-out", "", "also write the vocabulary as a llama2.c tokenizer.bin `file`")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *shape == "" || *out == "" {
		return usagef("--shape and --out are required")
	}
	cfg, err := model.ShapeByName(*shape)
	if err != nil {
		return usagef("--shape: %v", err)
	}
	tt, err := parseTensorType("--type", *typ)
	if err != nil {
		return err
	}
	if err := checkOutName(*out, tt); err != nil {
		return err
	}
	start := time.Now()
	ck, err := model.SynthesizeAs(cfg, *seed, tt)
	if err != nil {
		return err
	}
	synthSec := time.Since(start).Seconds()
	start = time.Now()
	size, err := writeCheckpoint(*out, ck)
	if err != nil {
		return err
	}
	writeSec := time.Since(start).Seconds()
	if *tokOut != "" {
		if err := writeVocab(*tokOut, ck.Vocab); err != nil {
			return err
		}
	}
	if *asJSON {
		return writeJSON(e.stdout, map[string]any{"shape": *shape, "seed": *seed, "type": *typ, "file": *out,
			"params": cfg.Params(), "bytes": size, "synth_seconds": synthSec, "write_seconds": writeSec})
	}
	return mdtable.Write(e.stdout, []string{"shape", "type", "params", "file", "size", "synth s", "write s"}, [][]string{
		{*shape, *typ, numfmt.Count(cfg.Params()), *out, numfmt.Figure(float64(size)/(1<<20)) + " MiB", numfmt.Figure(synthSec), numfmt.Figure(writeSec)}})
}

// checkOutName accepts a .gguf file of any type, or a .bin file (llama2.c v0) of f32.
func checkOutName(out string, tt model.TensorType) error {
	switch {
	case strings.HasSuffix(out, ".gguf"):
	case strings.HasSuffix(out, ".bin"):
		if tt != model.F32 {
			return usagef("--out %s: llama2.c .bin files hold f32 weights; use a .gguf file for %v", out, tt)
		}
	default:
		return usagef("--out %s: want a .gguf or .bin file name", out)
	}
	return nil
}

// writeCheckpoint writes ck to path as GGUF (.gguf) or llama2.c v0 (.bin) and returns the file's size. A failed
// write removes the partial file.
func writeCheckpoint(path string, ck *model.Checkpoint) (int64, error) {
	f, err := createFile(path)
	if err != nil {
		return 0, err
	}
	if strings.HasSuffix(path, ".gguf") {
		err = model.WriteGGUF(f, ck)
	} else {
		err = model.WriteLlama2c(f, ck, 0, 0)
	}
	var size int64
	if err == nil {
		var st os.FileInfo
		if st, err = f.Stat(); err == nil {
			size = st.Size()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return size, nil
}

// writeVocab writes v as a llama2.c tokenizer.bin file.
func writeVocab(path string, v *tokenizer.Vocab) error {
	if v == nil {
		return fmt.Errorf("%s: the checkpoint has no vocabulary to write", path)
	}
	f, err := createFile(path)
	if err != nil {
		return err
	}
	err = tokenizer.WriteBin(f, v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
