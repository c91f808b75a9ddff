package costmodel

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/morphlab/morphlab/quant"
)

func stepSamples() []Sample {
	var prefill, decode, mixed Work
	prefill.AddSeq(64, 64, true)
	for range 3 {
		decode.AddSeq(1, 100, true)
	}
	mixed.AddSeq(32, 96, false)
	mixed.AddSeq(1, 40, true)
	return []Sample{
		{Work: prefill, Layers: []LayerFormat{{quant.F16, 6}}, Seconds: 0.0125},
		{Work: decode, Layers: []LayerFormat{{quant.F16, 2}, {quant.Int4, 4}}, Seconds: 3.5e-3},
		{Work: mixed, Layers: []LayerFormat{{quant.Int4, 6}}, Seconds: 7e-3},
	}
}

// TestStepsRoundTrip: a steps file reads back as the samples written, formats in a fixed order.
func TestStepsRoundTrip(t *testing.T) {
	want := stepSamples()
	var b bytes.Buffer
	if err := WriteSteps(&b, want); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "\n"); n != len(want) {
		t.Fatalf("%d lines, want %d", n, len(want))
	}
	got, err := ReadSteps(&b, "steps.jsonl", 6)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read back %+v, want %+v", got, want)
	}
}

// TestReadStepsErrors: each bad line is one error naming the file, the line and what was wrong.
func TestReadStepsErrors(t *testing.T) {
	good := `{"tokens":3,"sampled":3,"prefill_tokens":0,"prefill_keys":0,"prefill_context":0,"decode_seqs":3,"decode_keys":300,"layers":{"f16":6},"seconds":0.0035}`
	for _, c := range []struct{ line, want string }{
		{`{"tokens":3,`, "unexpected EOF"},
		{strings.Replace(good, `"seconds":0.0035`, `"seconds":0`, 1), "seconds 0"},
		{strings.Replace(good, `"seconds":0.0035`, `"seconds":-1`, 1), "seconds -1"},
		{strings.Replace(good, `"tokens":3`, `"tokens":0`, 1), "tokens 0"},
		{strings.Replace(good, `"decode_seqs":3`, `"decode_seqs":2`, 1), "prefill_tokens 0 + decode_seqs 2, want tokens 3"},
		{strings.Replace(good, `"sampled":3`, `"sampled":4`, 1), "sampled 4"},
		{strings.Replace(good, `"f16":6`, `"f16":5`, 1), "layers: 5 in all, want the model's 6"},
		{strings.Replace(good, `"f16":6`, `"f17":6`, 1), "layers:"},
		{strings.Replace(good, `"f16":6`, `"f16":6,"int4":0`, 1), "layers: 0 in int4"},
		{strings.Replace(good, `"tokens":3`, `"tokens":3,"extra":1`, 1), `unknown field "extra"`},
		{good + ` {}`, "more than one JSON object"},
	} {
		_, err := ReadSteps(strings.NewReader(good+"\n\n"+c.line+"\n"), "run/steps.jsonl", 6)
		if err == nil || !strings.HasPrefix(err.Error(), "run/steps.jsonl:3: ") || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("line %s: error %v, want one line at run/steps.jsonl:3 with %q", c.line, err, c.want)
		}
	}
	if _, err := ReadSteps(strings.NewReader("\n"), "empty.jsonl", 6); err == nil || err.Error() != "empty.jsonl: no steps" {
		t.Errorf("an empty file: %v", err)
	}
}

// FuzzReadSteps: any input is read or refused with an error, never a panic, and what is read writes back to
// a file that reads the same.
func FuzzReadSteps(f *testing.F) {
	var b bytes.Buffer
	if err := WriteSteps(&b, stepSamples()); err != nil {
		f.Fatal(err)
	}
	f.Add(b.String())
	f.Add(`{"tokens":1,"sampled":1,"decode_seqs":1,"decode_keys":5,"layers":{"int8":6},"seconds":1e-3}`)
	f.Add("{}\n[]\n")
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ReadSteps(strings.NewReader(in), "fuzz", 6)
		if err != nil {
			return
		}
		var w bytes.Buffer
		if err := WriteSteps(&w, got); err != nil {
			t.Fatal(err)
		}
		again, err := ReadSteps(&w, "again", 6)
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("written back, read %+v, %v; want %+v", again, err, got)
		}
	})
}
