package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/morphlab/morphlab/engine/tokenizer"
)

// apiRequest is a completion or chat request as parsed from its JSON body, before it meets the model: the prompt
// is still text or token ids.
type apiRequest struct {
	Chat         bool
	Model        string
	PromptText   string  // completions: a text prompt; chat: the rendered messages
	PromptTokens []int32 // completions: a prompt of token ids (IsTokens)
	IsTokens     bool
	MaxTokens    int    // 0: not given (the context left)
	MaxName      string // the field that gave MaxTokens: max_tokens, or max_completion_tokens in a chat
	Temperature  float64
	TopP         float64
	TopK         int
	Seed         uint64
	HasSeed      bool
	Stop         []string
	Stream       bool
	IncludeUsage bool
	IgnoreEOS    bool // vLLM's ignore_eos: EOS and BOS do not end the request
}

// apiError is an error answered in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
type apiError struct {
	Status     int
	Message    string
	Type       string
	Param      string // the request field at fault, "" for none
	Code       string
	RetryAfter int // seconds, for a Retry-After header; 0 for none

	truncated bool // malformed JSON that ends early: where the body is only a start, the rest may mend it
}

func (e *apiError) Error() string { return e.Message }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Message: fmt.Sprintf(format, args...)}
}

// noops are parameters the server does not implement but accepts at the value that asks for nothing (clients
// send some of them with their defaults). Any other value is a 400 naming the field.
var noops = map[string][]string{
	"presence_penalty":    {"0"},
	"frequency_penalty":   {"0"},
	"repetition_penalty":  {"1"},
	"logprobs":            {"null", "false", "0"},
	"top_logprobs":        {"null", "0"},
	"echo":                {"false"},
	"best_of":             {"null", "1"},
	"logit_bias":          {"null", "{}"},
	"suffix":              {"null", `""`},
	"parallel_tool_calls": {"null"},
	"tools":               {"null", "[]"},
	"tool_choice":         {"null", `"none"`},
	"response_format":     {"null", `{"type":"text"}`},
}

// fields lists the parameters each endpoint reads.
var fields = map[bool][]string{
	false: {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "n", "stream", "stream_options", "user", "ignore_eos"},
	true:  {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed", "stop", "n", "stream", "stream_options", "user", "ignore_eos"},
}

// maxStops is how many stop strings a request may give (OpenAI's limit).
const maxStops = 4

// limits are what the served model allows a request. parseRequest refuses a request beyond them as soon as that
// is certain: another model as soon as its name is read, a prompt text from its length before it is tokenized,
// token ids before the rest of the array is read.
type limits struct {
	model   string           // the served model's name
	context int              // the model's context in tokens: a prompt has at most context-1
	vocab   *tokenizer.Vocab // token ids are below vocab.Len(); a text of n bytes has at least vocab.MinTokens(n)
}

// modelNotFound is the 404 for a request for another model than the served one, whose name starts with name.
func (l limits) modelNotFound(name string) *apiError {
	return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("model %q does not exist; this server serves %q", clip(name), l.model)}
}

// longestName is the longest, in bytes as the body writes it, that a name or a model's name the server reads
// may be: the served model's name with every character escaped, or maxName.
func (l limits) longestName() int { return max(maxName, len(`"`)+6*len(l.model)+len(`"`)) }

// contextError is the 400 for a prompt (field) of count tokens, count saying how many ("512 tokens", "at least
// 513 tokens").
func (l limits) contextError(field, count string) *apiError {
	return badRequest(field, "%s has %s, the model's context is %d tokens (a prompt may have at most %d, leaving one for the output)",
		field, count, l.context, l.context-1)
}

// textTooLong is the 400 for a prompt text (field) of n bytes whose tokens, BOS included, certainly do not fit in
// the context; nil when they may.
func (l limits) textTooLong(field string, n int) *apiError {
	least := l.vocab.MinTokens(n)
	if least == 0 {
		return nil
	}
	if l.vocab.BOS >= 0 {
		least++
	}
	if least < l.context {
		return nil
	}
	return l.contextError(field, fmt.Sprintf("at least %d tokens (%d bytes of text)", least, n))
}

// parseRequest parses a /v1/completions (chat false) or /v1/chat/completions body. It streams through the body,
// so that the request is checked against lim while it is read: the prompt's text is decoded at most once, not at
// all when its length refuses it, and never tokenized here; a name it does not know is refused as it is met,
// before its value is read, and a long one before it is decoded.
// Every error is a 400 naming the field at fault, but a 404 for another model than lim's; fields the server does
// not know or does not implement are refused by name, except the no-op values in noops.
func parseRequest(body []byte, chat bool, lim limits) (*apiRequest, *apiError) {
	return parse(body, chat, lim, false)
}

// refusal is the answer that the start of a body already makes certain, whatever follows it: the error
// parseRequest gives the whole body, found before start ends. It is nil when it takes more of the body to know.
// A server that refuses a body from its start need not read, nor hold, the rest.
func refusal(start []byte, chat bool, lim limits) *apiError {
	// A string start ends inside may be one the whole body refuses as too long, from its start, before it reads
	// it (longString): unless it is already that long, it is left out. Otherwise start is cut after its last
	// byte that no number or literal holds, so that none ends early where start does (1.5e1, cut after 1.5, is
	// not an integer). The decoder then finds unfinished what is cut short.
	open := -1 // where the string that start ends inside begins
	for i := 0; i < len(start); i++ {
		switch {
		case open >= 0 && start[i] == '\\':
			i++
		case start[i] == '"' && open >= 0:
			open = -1
		case start[i] == '"':
			open = i
		}
	}
	switch {
	case open < 0:
		start = start[:bytes.LastIndexAny(start, ",:[]{}\" \t\r\n")+1]
	case len(start)-open < lim.longestName()+2: // longString judges by the byte at the limit or the next
		start = start[:open]
	}
	if _, e := parse(start, chat, lim, true); e != errUnfinished {
		return e
	}
	return nil
}

// errUnfinished is parse's answer for the start of a body that is no refusal yet.
var errUnfinished = &apiError{Status: http.StatusBadRequest, Message: "the body is unfinished"}

// parse is parseRequest for the whole body, or for its start (start true): then only the errors found while the
// members are read count, and errUnfinished stands for the rest.
func parse(body []byte, chat bool, lim limits, start bool) (*apiRequest, *apiError) {
	r := &apiRequest{Chat: chat, Temperature: 1, TopP: 1, MaxName: "max_tokens"}
	dec := jsontext.NewDecoder(bytes.NewBuffer(body))
	if dec.PeekKind() != '{' {
		if _, err := dec.ReadValue(); err != nil {
			if e := malformed(err); !start || !e.truncated {
				return nil, e
			}
			return nil, errUnfinished
		}
		return nil, badRequest("", "malformed JSON body: want a JSON object")
	}
	promptField := "prompt"
	if chat {
		promptField = "messages"
	}
	obj := map[string]jsontext.Value{}
	prompted, streamOptions := false, false
	e := members(dec, func(name string) *apiError {
		switch {
		case name == promptField:
			prompted = true
			if chat {
				return readMessages(dec, r, lim)
			}
			return readPrompt(dec, r, lim)
		case name == "model":
			return readModel(dec, r, lim)
		case name == "stream_options":
			streamOptions = dec.PeekKind() != 'n'
			return readStreamOptions(dec, r)
		case !slices.Contains(fields[chat], name) && noops[name] == nil:
			return badRequest(clip(name), "unsupported parameter %q", clip(name))
		}
		v, err := dec.ReadValue()
		if err != nil {
			return malformed(err)
		}
		obj[name] = v.Clone()
		return nil
	})
	switch {
	case start && (e == nil || e.truncated):
		return nil, errUnfinished
	case e != nil:
		return nil, e
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		if err == nil {
			return nil, badRequest("", "malformed JSON body: data after the JSON object")
		}
		return nil, malformed(err)
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if ok := noops[k]; ok != nil && !slices.ContainsFunc(ok, func(v string) bool { return sameJSON(v, obj[k]) }) {
			return nil, badRequest(k, "parameter %q is not supported except as %s", k, strings.Join(ok, " or "))
		}
	}
	if r.Model == "" {
		return nil, badRequest("model", "model: required")
	}
	if !prompted {
		return nil, badRequest(promptField, "%s: required", promptField)
	}
	if chat && !isNull(obj["max_completion_tokens"]) {
		r.MaxName = "max_completion_tokens"
	}
	maxTokens, err := wholeNumber(obj, r.MaxName)
	if err != nil {
		return nil, err
	}
	if maxTokens != nil {
		switch n := *maxTokens; {
		case n < 1:
			return nil, badRequest(r.MaxName, "%s=%s, want at least 1", r.MaxName, number(n))
		case n >= float64(lim.context):
			return nil, badRequest(r.MaxName, "%s=%s exceeds the model's context of %d tokens (at most %d, with a prompt of one token)",
				r.MaxName, number(n), lim.context, lim.context-1)
		}
		r.MaxTokens = int(*maxTokens)
	}
	var temp, topP *float64
	if err := firstErr(field(obj, "temperature", &temp), field(obj, "top_p", &topP)); err != nil {
		return nil, err
	}
	seed, err := readSeed(obj["seed"])
	if err != nil {
		return nil, err
	}
	if temp != nil {
		if *temp < 0 || *temp > 2 {
			return nil, badRequest("temperature", "temperature=%g, want 0..2", *temp)
		}
		r.Temperature = *temp
	}
	if topP != nil {
		if *topP <= 0 || *topP > 1 {
			return nil, badRequest("top_p", "top_p=%g, want in (0, 1]", *topP)
		}
		r.TopP = *topP
	}
	topK, err := wholeNumber(obj, "top_k")
	if err != nil {
		return nil, err
	}
	if topK != nil {
		switch {
		case *topK == -1: // vLLM's "all tokens"
		case *topK < 0:
			return nil, badRequest("top_k", "top_k=%s, want -1 or 0 (all tokens) or a count", number(*topK))
		default:
			r.TopK = int(min(*topK, math.MaxInt32))
		}
	}
	if seed != nil {
		r.Seed, r.HasSeed = uint64(*seed), true
	}
	if err := parseStop(obj["stop"], r); err != nil {
		return nil, err
	}
	n, err := wholeNumber(obj, "n")
	if err != nil {
		return nil, err
	}
	if n != nil && *n != 1 {
		return nil, badRequest("n", "n=%s, only n=1 is supported", number(*n))
	}
	var user string
	if err := firstErr(field(obj, "stream", &r.Stream), field(obj, "user", &user), field(obj, "ignore_eos", &r.IgnoreEOS)); err != nil {
		return nil, err
	}
	if streamOptions && !r.Stream {
		return nil, badRequest("stream_options", "stream_options is only allowed with stream: true")
	}
	return r, nil
}

// readModel reads the model's name into r, refusing another model than lim's at once: one whose name is longer
// in the body than the served one's could be even with every character escaped, before it is decoded.
func readModel(dec *jsontext.Decoder, r *apiRequest, lim limits) *apiError {
	if start, long := longString(dec, lim.longestName()); long {
		return lim.modelNotFound(start)
	}
	v, err := dec.ReadValue()
	switch {
	case err != nil:
		return malformed(err)
	case isNull(v):
		return nil
	case json.Unmarshal(v, &r.Model) != nil:
		return badRequest("model", "model: want a string, got %s", abbrev(v))
	case r.Model != "" && r.Model != lim.model:
		return lim.modelNotFound(r.Model)
	}
	return nil
}

// readStreamOptions reads stream_options into r: null, or an object of include_usage (true or false) and
// continuous_usage_stats (false only).
func readStreamOptions(dec *jsontext.Decoder, r *apiRequest) *apiError {
	if dec.PeekKind() != '{' {
		v, err := dec.ReadValue()
		switch {
		case err != nil:
			return malformed(err)
		case isNull(v):
			return nil
		}
		return badRequest("stream_options", "stream_options: want an object")
	}
	return members(dec, func(name string) *apiError {
		if name != "include_usage" && name != "continuous_usage_stats" {
			return badRequest("stream_options."+clip(name), "unsupported parameter %q", "stream_options."+clip(name))
		}
		v, err := dec.ReadValue()
		switch {
		case err != nil:
			return malformed(err)
		case name == "include_usage":
			if isNull(v) {
				return nil
			}
			if json.Unmarshal(v, &r.IncludeUsage) != nil {
				return badRequest("stream_options.include_usage", "stream_options.include_usage: want true or false")
			}
			return nil
		case name == "continuous_usage_stats" && compact(v) == "false":
			return nil
		}
		return badRequest("stream_options."+clip(name), "unsupported parameter %q", "stream_options."+clip(name))
	})
}

// malformed is the 400 for a body that is not valid JSON (RFC 8259, which includes valid UTF-8).
func malformed(err error) *apiError {
	what := strings.TrimPrefix(err.Error(), "jsontext: ")
	var syn *jsontext.SyntacticError
	switch {
	case errors.Is(err, io.EOF):
		what = "empty, want a JSON object"
	case errors.As(err, &syn) && syn.Err == jsontext.ErrDuplicateName: // its message quotes the whole name
		what = fmt.Sprintf("duplicate object member name %q within %q", clip(syn.JSONPointer.LastToken()), clip(string(syn.JSONPointer.Parent())))
	}
	e := badRequest("", "malformed JSON body: %s", what)
	e.truncated = errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
	return e
}

// members reads the object dec is at, calling read for each member with dec at the member's value, which read
// must consume. A name longer than maxName bytes in the body is no name the server knows: read gets its start
// (clipped, with "..."), with dec still before it, and must refuse it.
func members(dec *jsontext.Decoder, read func(name string) *apiError) *apiError {
	if _, err := dec.ReadToken(); err != nil {
		return malformed(err)
	}
	for dec.PeekKind() != '}' {
		if start, long := longString(dec, maxName); long {
			if e := read(start); e != nil {
				return e
			}
			return badRequest("", "unsupported parameter %q", start) // what read should have said
		}
		name, err := dec.ReadToken()
		if err != nil {
			return malformed(err)
		}
		if e := read(name.String()); e != nil {
			return e
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return malformed(err)
	}
	return nil
}

// field decodes obj[name] into dst when present and not null; a value of the wrong type is a 400 naming it.
func field[T any](obj map[string]jsontext.Value, name string, dst *T) *apiError {
	raw, ok := obj[name]
	if !ok || isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return badRequest(name, "%s: want %s, got %s", name, typeName(dst), abbrev(raw))
	}
	return nil
}

// wholeNumber reads obj[name] as a whole number written as an integer or not (16, 16.0, 1.6e1, as pydantic and
// so vLLM read an integer field); nil when absent or null.
func wholeNumber(obj map[string]jsontext.Value, name string) (*float64, *apiError) {
	var f *float64
	if field(obj, name, &f) != nil || f != nil && *f != math.Trunc(*f) {
		return nil, badRequest(name, "%s: want an integer, got %s", name, abbrev(obj[name]))
	}
	return f, nil
}

// readSeed reads seed: an integer within int64's range (vLLM's bounds), written as one or as a whole number
// (1.0, 1e3) as counts may be; nil when absent or null. An integer is read exactly, as Python reads it; any
// other number as a float64, as Python reads it too.
func readSeed(raw jsontext.Value) (*int64, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	lit := compact(raw)
	notInteger := badRequest("seed", "seed: want an integer, got %s", abbrev(raw))
	outOfRange := badRequest("seed", "seed=%s is out of range: want %d to %d (int64, as vLLM's)", clip(lit), math.MinInt64, math.MaxInt64)
	if raw.Kind() != '0' {
		return nil, notInteger
	}
	if !strings.ContainsAny(lit, ".eE") {
		v, err := strconv.ParseInt(lit, 10, 64)
		if err != nil {
			return nil, outOfRange
		}
		return &v, nil
	}
	f, _ := strconv.ParseFloat(lit, 64) // ±Inf beyond float64's range
	switch {
	case f != math.Trunc(f):
		return nil, notInteger
	case f < math.MinInt64 || f >= -math.MinInt64:
		return nil, outOfRange
	}
	v := int64(f)
	return &v, nil
}

// number writes a whole number as digits (1e12 as 1000000000000).
func number(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func typeName(v any) string {
	switch v.(type) {
	case *string:
		return "a string"
	case *bool:
		return "true or false"
	case **float64:
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}

func firstErr(errs ...*apiError) *apiError {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// sameJSON reports whether raw is the value v writes (so that 0 and 0.0 are the same).
func sameJSON(v string, raw jsontext.Value) bool {
	var a, b any
	return json.Unmarshal([]byte(v), &a) == nil && json.Unmarshal(raw, &b) == nil && reflect.DeepEqual(a, b)
}

func isNull(raw jsontext.Value) bool { return raw == nil || compact(raw) == "null" }

// compact is raw without insignificant white space, for comparing small values.
func compact(raw jsontext.Value) string {
	c := raw.Clone()
	if c.Compact() != nil {
		return string(raw)
	}
	return string(c)
}

// abbrev quotes the start of a raw value for an error message.
func abbrev(raw jsontext.Value) string { return clip(compact(raw)) }

// maxName bounds, in bytes as the body writes them, the names of members the server reads: the names it knows
// are far shorter, even with every character escaped. A longer one is refused from its start, never decoded.
const maxName = 256

// longString reports whether the string dec is at next (a member's name or a value) is longer than limit bytes as
// the body writes it, its quotes included, and then returns its first maxEcho characters and "...", read from the
// body without decoding the rest: its length, UTF-8 and escapes are then never checked. The decoder reads the
// body from a bytes.Buffer, so that its unread buffer is the rest of the body.
func longString(dec *jsontext.Decoder, limit int) (start string, long bool) {
	rest := bytes.TrimLeft(dec.UnreadBuffer(), " \t\r\n")
	if len(rest) > 0 && (rest[0] == ',' || rest[0] == ':') { // before a name, or a value
		rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	}
	if len(rest) == 0 || rest[0] != '"' {
		return "", false
	}
	for i := 1; i < len(rest); i++ {
		switch {
		case i >= limit:
			return stringStart(rest), true
		case rest[i] == '\\':
			i++
		case rest[i] == '"':
			return "", false
		}
	}
	return "", false // the body ends inside the string: the decoder says so
}

// stringStart decodes the first maxEcho characters of the JSON string at the start of raw, followed by "...".
func stringStart(raw []byte) string {
	end := 1
	for n := 0; n < maxEcho && end < len(raw) && raw[end] != '"'; n++ {
		_, size := utf8.DecodeRune(raw[end:])
		switch {
		case raw[end] != '\\':
		case end+1 < len(raw) && raw[end+1] == 'u':
			size = 6
		default:
			size = 2
		}
		if end+size > len(raw) {
			break
		}
		end += size
	}
	s, _ := jsontext.AppendUnquote(nil, append(raw[:end:end], '"')) // invalid UTF-8 or escapes as U+FFFD
	return string(s) + "..."
}

// maxEcho is the most characters of a name or value the client sent that an error message quotes: enough to
// recognise it, and an answer never grows with the request.
const maxEcho = 40

// clip is s cut to its first maxEcho characters, "..." marking a cut.
func clip(s string) string {
	n := 0
	for i := range s {
		if n == maxEcho {
			return s[:i] + "..."
		}
		n++
	}
	return s
}

// readPrompt reads a completion's prompt from dec: a string, an array of token ids, or an array holding one of
// these (OpenAI's batched form, with a batch of one).
func readPrompt(dec *jsontext.Decoder, r *apiRequest, lim limits) *apiError {
	switch dec.PeekKind() {
	case '"':
		return readText(dec, &r.PromptText, "prompt", 0, lim)
	case '[':
	default:
		v, err := dec.ReadValue()
		if err != nil {
			return malformed(err)
		}
		if isNull(v) {
			return badRequest("prompt", "prompt: required")
		}
		return badRequest("prompt", "prompt: want a string or a non-empty array of token ids, got %s", abbrev(v))
	}
	if _, err := dec.ReadToken(); err != nil {
		return malformed(err)
	}
	switch dec.PeekKind() {
	case '0':
		return readTokens(dec, r, "prompt", lim)
	case '"', '[':
	case ']':
		dec.ReadToken()
		return badRequest("prompt", "prompt: want a string or a non-empty array of token ids, got []")
	default:
		v, err := dec.ReadValue()
		if err != nil {
			return malformed(err)
		}
		return badRequest("prompt", "prompt[0]: want a string or a token id, got %s", abbrev(v))
	}
	var e *apiError
	if dec.PeekKind() == '"' {
		e = readText(dec, &r.PromptText, "prompt", 0, lim)
	} else if _, err := dec.ReadToken(); err != nil {
		return malformed(err)
	} else {
		e = readTokens(dec, r, "prompt[0]", lim)
	}
	if e != nil {
		return e
	}
	n := 1
	for ; dec.PeekKind() != ']'; n++ {
		if err := dec.SkipValue(); err != nil {
			return malformed(err)
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return malformed(err)
	}
	if n > 1 {
		return badRequest("prompt", "prompt: a batch of %d prompts, only one prompt per request is supported", n)
	}
	return nil
}

// readTokens reads the token ids of an array whose '[' dec has read, through its ']'; at names the array in
// errors. It stops at the context.
func readTokens(dec *jsontext.Decoder, r *apiRequest, at string, lim limits) *apiError {
	r.IsTokens = true
	for i := 0; dec.PeekKind() != ']'; i++ {
		if dec.PeekKind() != '0' {
			v, err := dec.ReadValue()
			if err != nil {
				return malformed(err)
			}
			return badRequest("prompt", "%s[%d]: want a token id, got %s", at, i, abbrev(v))
		}
		tok, err := dec.ReadToken()
		if err != nil {
			return malformed(err)
		}
		id, _ := tok.Float() // ±Inf when out of range
		switch {
		case id != math.Trunc(id):
			return badRequest("prompt", "%s[%d]=%s: a token id must be an integer", at, i, clip(tok.String()))
		case id < 0:
			return badRequest("prompt", "%s[%d]=%s, want a token id >= 0", at, i, clip(tok.String()))
		case id >= float64(lim.vocab.Len()):
			return badRequest("prompt", "%s[%d]=%s is outside the vocabulary of %d tokens", at, i, clip(tok.String()), lim.vocab.Len())
		}
		r.PromptTokens = append(r.PromptTokens, int32(id))
		if len(r.PromptTokens) == lim.context {
			return lim.contextError("prompt", fmt.Sprintf("at least %d tokens", lim.context))
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return malformed(err)
	}
	if len(r.PromptTokens) == 0 {
		return badRequest("prompt", "prompt: want a string or a non-empty array of token ids, got []")
	}
	return nil
}

// readText reads a string that is prompt text into dst: the text of field, which has before bytes of text before
// it. Text too long for the context is refused before it is tokenized.
func readText(dec *jsontext.Decoder, dst *string, field string, before int, lim limits) *apiError {
	v, err := dec.ReadValue()
	if err != nil {
		return malformed(err)
	}
	// Without an escape the text is the bytes between the quotes (the decoder has checked that they are UTF-8):
	// a long one is refused before it is decoded.
	if bytes.IndexByte(v, '\\') < 0 {
		if e := lim.textTooLong(field, before+len(v)-2); e != nil {
			return e
		}
	}
	if err := json.Unmarshal(v, dst); err != nil {
		return malformed(err)
	}
	return lim.textTooLong(field, before+len(*dst))
}

// parseStop reads stop: a string or an array of at most maxStops non-empty strings.
func parseStop(raw jsontext.Value, r *apiRequest) *apiError {
	if isNull(raw) {
		return nil
	}
	var one string
	var many []jsontext.Value
	switch {
	case json.Unmarshal(raw, &one) == nil:
		many = []jsontext.Value{raw}
	case json.Unmarshal(raw, &many) != nil:
		return badRequest("stop", "stop: want a string or an array of strings, got %s", abbrev(raw))
	case len(many) > maxStops:
		return badRequest("stop", "stop: %d strings, at most %d", len(many), maxStops)
	}
	for i, v := range many {
		var s string
		switch {
		case isNull(v):
			return badRequest("stop", "stop[%d] is null, want a string", i)
		case json.Unmarshal(v, &s) != nil:
			return badRequest("stop", "stop[%d]: want a string, got %s", i, abbrev(v))
		case s == "":
			return badRequest("stop", "stop[%d] is empty", i)
		}
		r.Stop = append(r.Stop, s)
	}
	return nil
}

// readMessages reads a chat's messages from dec and renders them with the plain template (see renderChat). The
// text they render to is checked against the context as it is read: each message's content, and each whole
// message's line, which counts even when its content is empty.
func readMessages(dec *jsontext.Decoder, r *apiRequest, lim limits) *apiError {
	shape := badRequest("messages", "messages: want a non-empty array of {role, content} objects")
	if dec.PeekKind() != '[' {
		v, err := dec.ReadValue()
		switch {
		case err != nil:
			return malformed(err)
		case isNull(v):
			return badRequest("messages", "messages: required")
		}
		return shape
	}
	if _, err := dec.ReadToken(); err != nil {
		return malformed(err)
	}
	var turns []turn
	text := len(chatEnd) // bytes of the rendered text so far, counting the end it will have
	for i := 0; dec.PeekKind() != ']'; i++ {
		if dec.PeekKind() != '{' {
			if _, err := dec.ReadValue(); err != nil {
				return malformed(err)
			}
			return shape
		}
		at := fmt.Sprintf("messages[%d]", i)
		var t turn
		hasRole, hasContent := false, false
		e := members(dec, func(name string) *apiError {
			switch name {
			case "role":
				hasRole = true
				if start, long := longString(dec, maxName); long { // no role's name is
					return badRequest(at+".role", "%s.role=%q, want system, developer, user or assistant", at, start)
				}
				v, err := dec.ReadValue()
				if err != nil {
					return malformed(err)
				}
				if json.Unmarshal(v, &t.role) != nil {
					return badRequest(at+".role", "%s.role: want a string", at)
				}
				switch t.role {
				case "system", "developer", "user", "assistant":
					return nil
				}
				return badRequest(at+".role", "%s.role=%q, want system, developer, user or assistant", at, clip(t.role))
			case "content":
				hasContent = true
				before := text
				if hasRole {
					before += t.rendered()
				}
				if dec.PeekKind() == '"' {
					return readText(dec, &t.content, "messages", before, lim)
				}
				if e := readParts(dec, &t.content, at+".content"); e != nil {
					return e
				}
				return lim.textTooLong("messages", before+len(t.content))
			case "name":
				if err := dec.SkipValue(); err != nil {
					return malformed(err)
				}
				return nil
			}
			return badRequest(at+"."+clip(name), "unsupported parameter %q", at+"."+clip(name))
		})
		switch {
		case e != nil:
			return e
		case !hasRole:
			return badRequest(at+".role", "%s.role: want a string", at)
		case !hasContent:
			return badRequest(at+".content", "%s.content: want a string or an array of text parts", at)
		}
		turns = append(turns, t)
		text += t.rendered()
		if e := lim.textTooLong("messages", text); e != nil {
			return e
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return malformed(err)
	}
	if len(turns) == 0 {
		return shape
	}
	r.PromptText = renderChat(turns)
	return nil
}

// readParts reads a message's content that is not a string into dst: an array of {"type": "text", "text": ...}
// parts, joined.
func readParts(dec *jsontext.Decoder, dst *string, at string) *apiError {
	v, err := dec.ReadValue()
	if err != nil {
		return malformed(err)
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if json.Unmarshal(v, &parts) != nil {
		return badRequest(at, "%s: want a string or an array of text parts", at)
	}
	var sb strings.Builder
	for j, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return badRequest(fmt.Sprintf("%s[%d]", at, j), "%s[%d]: only {\"type\": \"text\", \"text\": ...} parts are supported", at, j)
		}
		sb.WriteString(*p.Text)
	}
	*dst = sb.String()
	return nil
}

type turn struct{ role, content string }

// chatEnd ends the plain chat template, for the model to continue.
const chatEnd = "Assistant:"

// renderChat is the plain chat template for models without one of their own: each message on a line of its own
// as "Role: content", then "Assistant:" for the model to continue.
func renderChat(turns []turn) string {
	var sb strings.Builder
	for _, t := range turns {
		sb.WriteString(t.speaker() + ": " + t.content + "\n")
	}
	sb.WriteString(chatEnd)
	return sb.String()
}

// speaker is the name a message's line starts with: its role, capitalised, a developer's as the system's.
func (t turn) speaker() string {
	role := t.role
	if role == "developer" {
		role = "system"
	}
	return strings.ToUpper(role[:1]) + role[1:]
}

// rendered is the length in bytes of the message's line in renderChat's text.
func (t turn) rendered() int { return len(t.speaker()) + len(": ") + len(t.content) + len("\n") }
