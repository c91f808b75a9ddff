package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/tokenizer"
	"github.com/morphlab/morphlab/internal/mdtable"
	"github.com/morphlab/morphlab/internal/numfmt"
)

func init() {
	register(&command{name: "quantize", summary: "rewrite a checkpoint with chosen layers in another weight format", run: runQuantize})
}

const quantizeHelp = `
Quantize rewrites a checkpoint (llama2.c .bin or GGUF) as a GGUF file with the weight matrices of the chosen
decoder layers (--layers, default all) re-encoded in --format: f32, f16, bf16, q8_0 or q4_0, the types a GGUF
file holds and the engine runs directly (q8_0 and q4_0 byte for byte as ggml's reference quantizers).
--classifier-format re-encodes the classifier too (a model with tied embeddings gets a classifier of its own,
made from the embedding, as 'generate --classifier-format' makes one in memory). Norms, embedding and the
other layers are copied as they are; so is the classifier without the flag. Every matrix is widened to f32
first, so requantizing a quantized file compounds the two roundings.

The engine's own int8 (per-channel, run as W8A8) and int4 (group, run as W4A8) layouts, and the activation-aware AWQ and
SmoothQuant variants, have no GGUF type: they are built from a loaded model at run time (engine/model
AddVariant, AddInt4Variant, AddAWQVariant, AddSmoothQuantVariant; 'morphlab generate' and 'perplexity' take
--format int8 or int4 for the round-to-nearest ones), so this command does not write them.`

func runQuantize(e *env, args []string) error {
	fs := e.flags("--model FILE --out FILE.gguf --format F [flags]", quantizeHelp)
	in := fs.String("model", "", "input checkpoint `file`: llama2.c .bin or .gguf")
	out := fs.String("out", "", "output GGUF `file`")
	format := fs.String("format", "", "matrix `format`: f32, f16, bf16, q8_0 or q4_0")
	layersFlag := fs.String("layers", "", "comma-separated decoder `layers` to convert (default all)")
	classifier := fs.String("classifier-format", "", "also store the classifier in `format`: f32, f16, bf16, q8_0 or q4_0 (default: as it is)")
	tokPath := fs.String("tokenizer", "", "llama2.c tokenizer.bin `file` to store in the output (default: the input's vocabulary, if any)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := e.parse(fs, args); err != nil {
		return err
	}
	if *in == "" || *out == "" || *format == "" {
		return usagef("--model, --out and --format are required")
	}
	if !strings.HasSuffix(*out, ".gguf") {
		return usagef("--out %s: want a .gguf file name", *out)
	}
	tt, err := parseTensorType("--format", *format)
	if err != nil {
		return err
	}
	layers, err := parseLayers(*layersFlag)
	if err != nil {
		return err
	}
	var ct model.TensorType
	if *classifier != "" {
		if ct, err = parseTensorType("--classifier-format", *classifier); err != nil {
			return err
		}
	}
	start := time.Now()
	ck, err := model.Load(*in)
	if err != nil {
		return err
	}
	defer ck.Close()
	if *tokPath != "" {
		if ck.Vocab, err = tokenizer.LoadBin(*tokPath); err != nil {
			return err
		}
	}
	conv, err := model.ConvertLayers(ck, tt, layers)
	if err != nil {
		return fmt.Errorf("%s: %w", *in, err)
	}
	if *classifier != "" {
		if conv, err = model.ConvertClassifier(conv, ct); err != nil {
			return fmt.Errorf("%s: %w", *in, err)
		}
	}
	size, err := writeCheckpoint(*out, conv)
	if err != nil {
		return err
	}
	sec := time.Since(start).Seconds()
	classifierName := *classifier
	if classifierName == "" {
		classifierName = "as stored"
	}
	n := len(layers)
	if layers == nil {
		n = ck.Config.NLayers
	}
	if *asJSON {
		return writeJSON(e.stdout, map[string]any{"model": *in, "out": *out, "format": *format, "layers": n,
			"classifier_format": classifierName, "bytes": size, "seconds": sec})
	}
	return mdtable.Write(e.stdout, []string{"model", "out", "format", "layers", "classifier", "size", "seconds"}, [][]string{
		{*in, *out, *format, fmt.Sprintf("%d of %d", n, ck.Config.NLayers), classifierName,
			numfmt.Figure(float64(size)/(1<<20)) + " MiB", numfmt.Figure(sec)}})
}

// parseLayers reads a comma-separated list of layer indices; "" means all (nil). Ranges are checked against the
// model by ConvertLayers.
func parseLayers(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		l, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || l < 0 {
			return nil, usagef("--layers=%q: %q is not a layer index", s, f)
		}
		out = append(out, l)
	}
	return out, nil
}
