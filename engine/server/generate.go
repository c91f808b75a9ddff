package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/morphlab/morphlab/engine"
	"github.com/morphlab/morphlab/engine/tokenizer"
	"github.com/morphlab/morphlab/internal/openai"
)

// generate submits a prepared request, cancelled with ctx (the client's connection), and writes its tokens to
// out as they come. It gives up the request's place in the bounded queue at its first batch.
func (s *Server) generate(ctx context.Context, j *job, out output, p *place) {
	st := s.eng.SubmitContext(ctx, j.req)
	d := decoder{vocab: s.cfg.Vocab, prev: int(j.req.Prompt[len(j.req.Prompt)-1]), stops: j.Stop}
	started := false
	for ev := range st.Events() {
		switch ev.Kind {
		case engine.Queued:
			started = true
			out.start()
		case engine.Scheduled:
			p.leave()
		case engine.Preempted:
			p.reenter() // waiting for a batch again
		case engine.Token:
			if slices.Contains(j.req.Stop, ev.Token) {
				continue // a stop token has no text; the engine ends the request with it
			}
			// The engine ends the request at the token that completes a stop string (Request.StopWhen runs
			// the same decoder), so the text ends here too.
			if delta, _ := d.add(ev.Token); delta != "" && out.text(delta) != nil {
				s.eng.Cancel(st.ID) // the client is gone
			}
		}
	}
	res := st.Wait()
	p.leave()
	u := openai.Usage{PromptTokens: len(j.req.Prompt), CompletionTokens: len(res.Output), TotalTokens: len(j.req.Prompt) + len(res.Output)}
	switch res.Finish {
	case engine.FinishStop, engine.FinishLength:
		reason := res.Finish.String()
		rest, stopped := d.end() // a character the output left unfinished may complete a stop string
		if stopped {
			reason = engine.FinishStop.String()
		}
		s.metrics.request(res, len(j.req.Prompt), reason)
		if rest != "" {
			out.text(rest)
		}
		out.finish(reason, u)
	case engine.FinishCancelled:
		s.metrics.request(res, len(j.req.Prompt), "abort")
		if ctx.Err() == nil { // not the client: the shutdown deadline
			out.fail(&apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Message: "request cancelled: the server shut down before it finished"}, started)
		}
	case engine.FinishRejected:
		e := s.unavailable()
		if e == nil {
			e = badRequest(j.MaxName, "%v", res.Err) // the pool can never hold the prompt and max_tokens
		}
		out.fail(e, started)
	default:
		out.fail(&apiError{Status: http.StatusInternalServerError, Type: "server_error", Message: fmt.Sprint(res.Err)}, started)
	}
}

// decoder turns output tokens into text deltas. Its text is the text as the client reads it: valid UTF-8, each
// byte of the output that starts no character written as U+FFFD, as JSON writes it; bytes that may yet become a
// character wait until they do or cannot. It finds stop strings in that text, across tokens or inside one, and
// holds back the end of it while it may be the start of a stop string.
type decoder struct {
	vocab *tokenizer.Vocab
	prev  int
	stops []string
	text  []byte
	raw   []byte // output bytes after text: the start of a character that later bytes may complete
	sent  int    // bytes of text handed out
}

// add appends tok's text and returns the text that can be handed out now; stopped reports that a stop string
// appeared, the text then ending just before it.
func (d *decoder) add(tok int32) (delta string, stopped bool) {
	if d.cut(d.push(tok)) {
		return d.take(len(d.text)), true
	}
	return d.take(d.safe()), false
}

// stopped adds tok's text and reports whether a stop string now appears in it, handing nothing out: what the
// engine's loop asks of a request with stop strings at each token.
func (d *decoder) stopped(tok int32) bool { return d.match(d.push(tok)) >= 0 }

// end hands out the rest of the text once the output has ended, a character it left unfinished as U+FFFD;
// stopped reports that a stop string appeared in that last text, the text then ending just before it.
func (d *decoder) end() (rest string, stopped bool) {
	from := len(d.text)
	d.settle(true)
	stopped = d.cut(from)
	return d.take(len(d.text)), stopped
}

// push appends tok's text and returns where its new text starts.
func (d *decoder) push(tok int32) int {
	from := len(d.text)
	if d.vocab.Types[tok] != tokenizer.Control {
		d.raw = append(d.raw, d.vocab.Decode(d.prev, int(tok))...)
		d.settle(false)
	}
	d.prev = int(tok)
	return from
}

// settle moves the bytes of raw whose text is certain to text: a whole character as it is, a byte that starts
// no character as U+FFFD; with end, also an unfinished character, which no byte will now complete.
func (d *decoder) settle(end bool) {
	for len(d.raw) > 0 && (end || utf8.FullRune(d.raw)) {
		r, n := utf8.DecodeRune(d.raw)
		if r == utf8.RuneError && n == 1 {
			d.text = utf8.AppendRune(d.text, utf8.RuneError)
		} else {
			d.text = append(d.text, d.raw[:n]...)
		}
		d.raw = d.raw[n:]
	}
}

// cut ends the text before the first stop string that ends after from, and reports whether there is one.
func (d *decoder) cut(from int) bool {
	i := d.match(from)
	if i >= 0 {
		d.text = d.text[:max(i, d.sent)]
	}
	return i >= 0
}

// match returns where the first stop string starts in the text, or -1; a new occurrence must end after from.
func (d *decoder) match(from int) int {
	first := -1
	for _, s := range d.stops {
		start := max(0, from-len(s)+1)
		if i := bytes.Index(d.text[start:], []byte(s)); i >= 0 && (first < 0 || start+i < first) {
			first = start + i
		}
	}
	return first
}

// safe is the end of the text that can be handed out: not a suffix that begins a stop string.
func (d *decoder) safe() int {
	hold := 0
	for _, s := range d.stops {
		for k := min(len(s)-1, len(d.text)); k > hold; k-- {
			if bytes.HasSuffix(d.text, []byte(s[:k])) {
				hold = k
				break
			}
		}
	}
	return max(len(d.text)-hold, d.sent)
}

func (d *decoder) take(end int) string {
	delta := string(d.text[d.sent:end])
	d.sent = end
	return delta
}

// output is where a request's answer goes: a JSON response or an event stream.
type output interface {
	start()                               // the engine accepted the request
	text(delta string) error              // more text
	finish(reason string, u openai.Usage) // the request ended with its finish reason
	fail(e *apiError, started bool)       // the request ended without finishing
}

type message struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type choice struct {
	Index        int       `json:"index"`
	Text         *string   `json:"text,omitempty"`    // completions
	Message      *message  `json:"message,omitempty"` // chat
	Delta        *message  `json:"delta,omitempty"`   // chat chunks
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type response struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []choice      `json:"choices"`
	Usage   *openai.Usage `json:"usage,omitempty"`
}

func (j *job) response(model string, chunk bool) response {
	obj := "text_completion"
	switch {
	case j.Chat && chunk:
		obj = "chat.completion.chunk"
	case j.Chat:
		obj = "chat.completion"
	}
	return response{ID: j.id, Object: obj, Created: j.created, Model: model, Choices: []choice{}}
}

// jsonOutput collects the text and answers with one JSON response.
type jsonOutput struct {
	w     http.ResponseWriter
	j     *job
	model string
	sb    strings.Builder
}

func (o *jsonOutput) start()                   {}
func (o *jsonOutput) text(delta string) error  { o.sb.WriteString(delta); return nil }
func (o *jsonOutput) fail(e *apiError, _ bool) { writeError(o.w, e) }

func (o *jsonOutput) finish(reason string, u openai.Usage) {
	r := o.j.response(o.model, false)
	text := o.sb.String()
	c := choice{FinishReason: &reason}
	if o.j.Chat {
		c.Message = &message{Role: "assistant", Content: &text}
	} else {
		c.Text = &text
	}
	r.Choices, r.Usage = []choice{c}, &u
	writeJSON(o.w, http.StatusOK, r)
}

// sseOutput streams server-sent events: a chunk a delta, a last chunk with the finish reason, a usage chunk when
// asked for, and "data: [DONE]".
type sseOutput struct {
	w     http.ResponseWriter
	j     *job
	model string
	err   error // the first write error: the client has gone
}

func (o *sseOutput) start() {
	h := o.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	o.w.WriteHeader(http.StatusOK)
	if o.j.Chat {
		empty := ""
		o.chunk(choice{Delta: &message{Role: "assistant", Content: &empty}})
	}
}

func (o *sseOutput) text(delta string) error {
	c := choice{}
	if o.j.Chat {
		c.Delta = &message{Content: &delta}
	} else {
		c.Text = &delta
	}
	o.chunk(c)
	return o.err
}

func (o *sseOutput) finish(reason string, u openai.Usage) {
	c := choice{FinishReason: &reason}
	if o.j.Chat {
		c.Delta = &message{}
	} else {
		empty := ""
		c.Text = &empty
	}
	o.chunk(c)
	if o.j.IncludeUsage {
		r := o.j.response(o.model, true)
		r.Usage = &u
		o.event(r)
	}
	o.done()
}

func (o *sseOutput) fail(e *apiError, started bool) {
	if !started {
		writeError(o.w, e)
		return
	}
	o.event(e.body())
	o.done()
}

func (o *sseOutput) chunk(c choice) {
	r := o.j.response(o.model, true)
	r.Choices = []choice{c}
	o.event(r)
}

func (o *sseOutput) event(v any) {
	b, _ := json.Marshal(v)
	o.write("data: " + string(b) + "\n\n")
}

func (o *sseOutput) done() { o.write("data: [DONE]\n\n") }

func (o *sseOutput) write(s string) {
	if o.err != nil {
		return
	}
	if _, err := io.WriteString(o.w, s); err != nil {
		o.err = err
		return
	}
	if err := http.NewResponseController(o.w).Flush(); err != nil {
		o.err = err
	}
}
