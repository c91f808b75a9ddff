package trace

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/morphlab/morphlab/internal/datadir"
)

// BenchmarkLoad times Load (reading the file included) on each shared trace; the target is the full 1-hour Azure
// conversation trace in under 100 ms. file=generated-azure is its twin without the shared data: a generated
// Azure CSV with as many requests.
func BenchmarkLoad(b *testing.B) {
	cases := []struct{ name, rel string }{
		{"azure-conv", "traces/azure2023/AzureLLMInferenceTrace_conv.csv"},
		{"azure-code", "traces/azure2023/AzureLLMInferenceTrace_code.csv"},
		{"vidur-conv", "traces/vidur/splitwise_conv.csv"},
		{"mooncake", "traces/mooncake/conversation_trace.jsonl"},
		{"sharegpt-lengths", "traces/lengths/sharegpt_8k_filtered_stats_llama2_tokenizer.csv"},
	}
	for _, c := range cases {
		b.Run("file="+c.name, func(b *testing.B) {
			benchLoad(b, datadir.ForTest(b, c.rel))
		})
	}
	b.Run("file=generated-azure", func(b *testing.B) {
		tr, err := Generate(Spec{Process: Poisson{5.53}, Lengths: Independent{LogNormal{1020, 0.9}, LogNormal{129, 0.8}}, N: 19366}, 1)
		if err != nil {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		if err := Write(&buf, tr, Azure); err != nil {
			b.Fatal(err)
		}
		path := filepath.Join(b.TempDir(), "generated.csv")
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			b.Fatal(err)
		}
		benchLoad(b, path)
	})
}

func benchLoad(b *testing.B, path string) {
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(st.Size())
	var n int
	for b.Loop() {
		tr, err := Load(path, LoadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		n = len(tr.Requests)
	}
	b.ReportMetric(float64(n), "requests")
	b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/op")
}
