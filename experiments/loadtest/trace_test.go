package loadtest

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/experiments/trace"
	"github.com/morphlab/morphlab/internal/openai"
)

func TestFromTrace(t *testing.T) {
	tr := &trace.Trace{Source: "t.csv", Requests: []trace.Request{
		{Arrival: 0, PromptTokens: 4, OutputTokens: 2},
		{Arrival: 0.25, PromptTokens: 1, OutputTokens: 9},
		{Arrival: 1.5, PromptTokens: 6, OutputTokens: 1},
	}}
	reqs, err := FromTrace(tr, nil, 50, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range []struct {
		at             time.Duration
		prompt, output int
	}{{0, 4, 2}, {250 * time.Millisecond, 1, 9}, {1500 * time.Millisecond, 6, 1}} {
		r := reqs[i]
		if r.Arrival != w.at || len(r.Prompt.Tokens) != w.prompt || r.PromptTokens != w.prompt || r.MaxTokens != w.output {
			t.Errorf("request %d: %+v, want arrival %v, %d prompt and %d output tokens", i, r, w.at, w.prompt, w.output)
		}
	}
	texts := []openai.Prompt{{Text: "a"}, {Text: "b"}}
	reqs, err = FromTrace(tr, texts, 50, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := []openai.Prompt{reqs[0].Prompt, reqs[1].Prompt, reqs[2].Prompt}; !reflect.DeepEqual(got, []openai.Prompt{texts[0], texts[1], texts[0]}) || reqs[1].MaxTokens != 9 {
		t.Errorf("with text prompts: %+v", reqs)
	}

	for _, c := range []struct {
		tr   *trace.Trace
		want string
	}{
		{&trace.Trace{Source: "e.csv"}, "e.csv: no requests"},
		{&trace.Trace{Source: "l.csv", NoArrivals: true, Requests: tr.Requests}, "l.csv: a length-only table"},
		{&trace.Trace{Source: "f.csv", Requests: []trace.Request{{PromptTokens: 3, OutputTokens: 0}}}, "f.csv: request 0: 3 prompt and 0 output tokens"},
	} {
		if _, err := FromTrace(c.tr, nil, 50, 3); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err %v, want %q", err, c.want)
		}
	}
}
