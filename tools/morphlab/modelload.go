package main

import (
	"flag"
	"fmt"

	"github.com/morphlab/morphlab/engine/model"
	"github.com/morphlab/morphlab/engine/tokenizer"
	"github.com/morphlab/morphlab/internal/flagalias"
	"github.com/morphlab/morphlab/kernels/cpu"
	"github.com/morphlab/morphlab/quant"
)

// modelFlags are the flags of every command that runs a model: the checkpoint, its tokenizer, the precision to
// run its layers in, its KV cache type and the thread count.
type modelFlags struct {
	path, tokenizer, format, classifier, kv string
	threads                                 int
}

func (f *modelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.path, "model", "", "checkpoint: a llama2.c or GGUF `file` (told apart by content), or a safetensors file or folder with config.json")
	fs.StringVar(&f.tokenizer, "tokenizer", "", "llama2.c tokenizer.bin `file` (GGUF files carry their own vocabulary)")
	fs.StringVar(&f.format, "dtype", "", "run every decoder layer in `format` (f32, f16, int8, int4, q8_0, q4_0); default: as stored")
	flagalias.Deprecate(fs, "format", "dtype")
	fs.StringVar(&f.classifier, "classifier-format", "", "store the classifier in `format` (f32, f16, int8, int4, q8_0, q4_0); default: as stored")
	fs.StringVar(&f.kv, "kv-cache-dtype", "f32", "KV cache element `type`: f32, f16 (half the bytes, keys and values rounded) or int8 (a quarter, and a scale a row of each KV head)")
	flagalias.Deprecate(fs, "kv-type", "kv-cache-dtype")
	fs.IntVar(&f.threads, "threads", 0, "kernel threads (default GOMAXPROCS)")
}

// load opens the checkpoint, builds the model (every layer switched to --dtype when given) and finds its
// vocabulary.
func (f *modelFlags) load() (*model.Model, *tokenizer.Vocab, error) {
	if f.path == "" {
		return nil, nil, usagef("--model is required")
	}
	cpu.SetThreads(f.threads)
	ck, err := model.Load(f.path)
	if err != nil {
		return nil, nil, err
	}
	defer ck.Close()
	m, err := model.FromCheckpoint(ck)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", f.path, err)
	}
	if f.format != "" {
		if err := setFormat(m, f.format); err != nil {
			return nil, nil, err
		}
	}
	if m.SequenceKV, err = model.ParseKVType(f.kv); err != nil {
		return nil, nil, usagef("--kv-cache-dtype: %v", err)
	}
	if f.classifier != "" {
		cf, err := quant.ParseFormat(f.classifier)
		if err != nil {
			return nil, nil, usagef("--classifier-format: %v", err)
		}
		if err := m.SetOutputFormat(cf); err != nil {
			return nil, nil, err
		}
	}
	vocab := ck.Vocab
	if f.tokenizer != "" {
		if vocab, err = tokenizer.LoadBin(f.tokenizer); err != nil {
			return nil, nil, err
		}
	}
	if vocab == nil {
		return nil, nil, usagef("%s has no vocabulary: give --tokenizer", f.path)
	}
	if vocab.Len() != m.Config.VocabSize {
		return nil, nil, fmt.Errorf("tokenizer has %d tokens, the model %d", vocab.Len(), m.Config.VocabSize)
	}
	return m, vocab, nil
}

// setFormat prepares and activates a round-to-nearest variant of every layer in the named format.
func setFormat(m *model.Model, name string) error {
	f, err := quant.ParseFormat(name)
	if err != nil {
		return usagef("--dtype: %v", err)
	}
	for l := range m.Layers {
		if _, err := m.AddVariant(l, f); err != nil {
			return err
		}
		if err := m.SetPrecision(l, f); err != nil {
			return err
		}
	}
	return nil
}
