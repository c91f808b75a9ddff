package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// parsed is everything Stream gives for one body: the chunks up to the end and how it ended.
type parsed struct {
	Chunks []Chunk
	End    string // "done", "no-done", "api-error: ...", or the error text
}

func parseAll(body []byte) parsed {
	s := NewStream(bytes.NewReader(body))
	var p parsed
	for range len(body) + 1 { // every chunk consumes at least one byte, so this bounds the loop
		c, err := s.Next()
		var apiErr *APIError
		switch {
		case err == nil:
			p.Chunks = append(p.Chunks, c)
			continue
		case err == io.EOF:
			p.End = "done"
		case errors.Is(err, ErrNoDone):
			p.End = "no-done"
		case errors.As(err, &apiErr):
			p.End = "api-error: " + apiErr.Error()
		default:
			p.End = err.Error()
		}
		return p
	}
	p.End = "did not end"
	return p
}

func texts(cs []Chunk) []string {
	var ts []string
	for _, c := range cs {
		ts = append(ts, c.Text)
	}
	return ts
}

func TestStreamRecorded(t *testing.T) {
	cases := []struct {
		file    string
		texts   []string
		usage   *Usage // of the last chunk
		finish  string // of the last chunk with a choice
		end     string
		choices int // chunks with a choice
	}{
		{"openai-completions.sse", []string{"\n\n", "Paris", ".", ""}, &Usage{7, 3, 10}, "stop", "done", 3},
		{"openai-chat.sse", []string{"", "Hello", "!", "", ""}, &Usage{9, 2, 11}, "stop", "done", 4},
		{"vllm-completions.sse", []string{" the", " capital", "", " of", ""}, &Usage{6, 4, 10}, "length", "done", 4},
		{"crlf-comments.sse", []string{"a", "b"}, nil, "length", "done", 2},
		{"vllm-error-midstream.sse", []string{" Once"}, nil, "", "api-error: error event: The engine is dead.", 1},
		{"broken.sse", []string{" a", " b"}, nil, "", "chunk", 2},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("testdata", "streams", c.file))
			if err != nil {
				t.Fatal(err)
			}
			p := parseAll(body)
			if got := texts(p.Chunks); !reflect.DeepEqual(got, c.texts) {
				t.Errorf("texts %q, want %q", got, c.texts)
			}
			if !strings.HasPrefix(p.End, c.end) {
				t.Errorf("end %q, want %q...", p.End, c.end)
			}
			n, finish := 0, ""
			for _, ch := range p.Chunks {
				if ch.Choices > 0 {
					n++
					if ch.FinishReason != "" {
						finish = ch.FinishReason
					}
				}
			}
			if n != c.choices || finish != c.finish {
				t.Errorf("%d chunks with a choice, finish %q; want %d, %q", n, finish, c.choices, c.finish)
			}
			var usage *Usage
			if len(p.Chunks) > 0 {
				usage = p.Chunks[len(p.Chunks)-1].Usage
			}
			if !reflect.DeepEqual(usage, c.usage) {
				t.Errorf("usage %+v, want %+v", usage, c.usage)
			}
		})
	}
}

func TestEventReaderFields(t *testing.T) {
	in := "data:a\ndata: b\n\n: comment\nretry: 10\nid: 7\n\n\n\ndata\n\ndata: last"
	r := NewEventReader(strings.NewReader(in))
	var got []string
	for {
		d, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(d))
	}
	// "data" alone is a data field with an empty value; an event without its blank line is still returned.
	want := []string{"a\nb", "", "last"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

func TestEventReaderBound(t *testing.T) {
	r := NewEventReader(strings.NewReader("data: " + strings.Repeat("x", MaxEventBytes+1)))
	if _, err := r.Next(); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("err %v, want one about the length", err)
	}
}

func TestStreamAfterDone(t *testing.T) {
	s := NewStream(strings.NewReader("data: [DONE]\n\ndata: {\"choices\":[{\"text\":\"late\"}]}\n\n"))
	for range 2 {
		if _, err := s.Next(); err != io.EOF {
			t.Fatalf("err %v, want io.EOF", err)
		}
	}
}

func TestPromptJSON(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Prompt
		err  bool
	}{
		{`"hi there"`, Prompt{Text: "hi there"}, false},
		{`[1, 2, 3]`, Prompt{Tokens: []int{1, 2, 3}}, false},
		{`[1, -2]`, Prompt{}, true},
		{`3`, Prompt{}, true},
		{`["a"]`, Prompt{}, true},
	} {
		var p Prompt
		err := p.UnmarshalJSON([]byte(c.in))
		if (err != nil) != c.err || (!c.err && !reflect.DeepEqual(p, c.want)) {
			t.Errorf("%s: got %+v, %v; want %+v, error %v", c.in, p, err, c.want, c.err)
		}
		if !c.err {
			b, _ := c.want.MarshalJSON()
			var back Prompt
			if err := back.UnmarshalJSON(b); err != nil || !reflect.DeepEqual(back, c.want) {
				t.Errorf("%s: round trip gave %+v, %v", c.in, back, err)
			}
		}
	}
}

// FuzzStream checks that the stream reader ends on any input (done, broken or an error, never a panic or a loop),
// that nothing is read after [DONE], and that LF and CRLF line ends give the same chunks.
func FuzzStream(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "streams", "*.sse"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no seed streams: %v", err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("data: [DONE]"))
	f.Add([]byte("data: {\"choices\":null,\"usage\":{\"completion_tokens\":-1}}\n\n"))
	f.Add([]byte("data: {\"error\":{}}\n\n"))
	f.Add([]byte("\r\r\ndata:\r"))
	f.Fuzz(func(t *testing.T, body []byte) {
		p := parseAll(body)
		if p.End == "did not end" {
			t.Fatalf("stream did not end")
		}
		if !bytes.Contains(body, []byte("[DONE]")) && p.End == "done" {
			t.Fatalf("ended with done without a [DONE]")
		}
		if bytes.IndexByte(body, '\r') < 0 {
			crlf := parseAll(bytes.ReplaceAll(body, []byte("\n"), []byte("\r\n")))
			if !reflect.DeepEqual(p, crlf) {
				t.Fatalf("LF gave %+v, CRLF gave %+v", p, crlf)
			}
		}
	})
}

// FuzzWriteRead checks that what WriteEvent writes, Stream reads back: any text, as a completion and a chat chunk.
func FuzzWriteRead(f *testing.F) {
	f.Add(" Paris", 3)
	f.Add("line\nbreak\r\n", 0)
	f.Add("data: [DONE]\n\n", 1)
	f.Fuzz(func(t *testing.T, text string, tokens int) {
		var buf bytes.Buffer
		usage := &Usage{PromptTokens: 1, CompletionTokens: tokens, TotalTokens: tokens + 1}
		_ = WriteEvent(&buf, Completion{Object: "text_completion", Choices: []CompletionChoice{{Text: text}}})
		_ = WriteEvent(&buf, ChatChunk{Object: "chat.completion.chunk", Choices: []ChatChunkChoice{{Delta: Delta{Content: text}}}})
		_ = WriteEvent(&buf, Completion{Object: "text_completion", Choices: []CompletionChoice{}, Usage: usage})
		_ = WriteDone(&buf)
		p := parseAll(buf.Bytes())
		// json.Marshal replaces each invalid UTF-8 byte with U+FFFD, so compare with what the text becomes in JSON.
		var want string
		b, _ := json.Marshal(text)
		_ = json.Unmarshal(b, &want)
		if p.End != "done" || len(p.Chunks) != 3 || p.Chunks[0].Text != want || p.Chunks[1].Text != want ||
			p.Chunks[2].Choices != 0 || !reflect.DeepEqual(p.Chunks[2].Usage, usage) {
			t.Fatalf("read back %+v for text %q", p, text)
		}
	})
}

// BenchmarkStream measures what reading a stream costs a client per chunk (vLLM-shaped completion chunks), the
// load tester's own share of each measured inter-token gap.
func BenchmarkStream(b *testing.B) {
	const chunks = 1000
	var buf bytes.Buffer
	for i := range chunks {
		_ = WriteEvent(&buf, Completion{ID: "cmpl-5f0c9a1e6b3a4c0d8e2f", Object: "text_completion", Created: 1718000000,
			Model: "meta-llama/Llama-2-7b-hf", Choices: []CompletionChoice{{Text: " tok" + string(rune('a'+i%26))}}})
	}
	_ = WriteEvent(&buf, Completion{Object: "text_completion", Choices: []CompletionChoice{}, Usage: &Usage{1, chunks, chunks + 1}})
	_ = WriteDone(&buf)
	body := buf.Bytes()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		s := NewStream(bytes.NewReader(body))
		n := 0
		for {
			if _, err := s.Next(); err != nil {
				if err != io.EOF {
					b.Fatal(err)
				}
				break
			}
			n++
		}
		if n != chunks+1 {
			b.Fatalf("%d chunks, want %d", n, chunks+1)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(chunks+1), "ns/chunk")
}
