package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
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
	Status  int
	Message string
	Type    string
	Param   string // the request field at fault, "" for none
	Code    string
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
	"stream_options":      {"null"}, // handled below; listed so that an unknown-field error never names it
}

// fields lists the parameters each endpoint reads.
var fields = map[bool][]string{
	false: {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "n", "stream", "stream_options", "user", "ignore_eos"},
	true:  {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed", "stop", "n", "stream", "stream_options", "user", "ignore_eos"},
}

// maxStops is how many stop strings a request may give (OpenAI's limit).
const maxStops = 4

// parseRequest parses a /v1/completions (chat false) or /v1/chat/completions body. Every error is a 400 naming
// the field at fault; fields the server does not know or does not implement are refused by name, except the no-op
// values in noops.
func parseRequest(body []byte, chat bool) (*apiRequest, *apiError) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil || obj == nil {
		what := "want a JSON object"
		if err != nil {
			what = err.Error()
		}
		return nil, badRequest("", "malformed JSON body: %s", what)
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if slices.Contains(fields[chat], k) {
			continue
		}
		ok, known := noops[k]
		if !known {
			return nil, badRequest(k, "unsupported parameter %q", k)
		}
		if !slices.ContainsFunc(ok, func(v string) bool { return sameJSON(v, obj[k]) }) {
			return nil, badRequest(k, "parameter %q is not supported except as %s", k, strings.Join(ok, " or "))
		}
	}
	r := &apiRequest{Chat: chat, Temperature: 1, TopP: 1, MaxName: "max_tokens"}
	if err := field(obj, "model", &r.Model); err != nil {
		return nil, err
	}
	if _, ok := obj["model"]; !ok || r.Model == "" {
		return nil, badRequest("model", "model: required")
	}
	if chat {
		text, err := parseMessages(obj["messages"])
		if err != nil {
			return nil, err
		}
		r.PromptText = text
	} else if err := parsePrompt(obj["prompt"], r); err != nil {
		return nil, err
	}
	if chat && !isNull(obj["max_completion_tokens"]) {
		r.MaxName = "max_completion_tokens"
	}
	var maxTokens *int64
	if err := field(obj, r.MaxName, &maxTokens); err != nil {
		return nil, err
	}
	if maxTokens != nil {
		if *maxTokens <= 0 || *maxTokens > math.MaxInt32 {
			return nil, badRequest(r.MaxName, "%s=%d, want at least 1", r.MaxName, *maxTokens)
		}
		r.MaxTokens = int(*maxTokens)
	}
	var temp, topP *float64
	var topK *int64
	var seed *int64
	if err := firstErr(field(obj, "temperature", &temp), field(obj, "top_p", &topP), field(obj, "top_k", &topK), field(obj, "seed", &seed)); err != nil {
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
	if topK != nil {
		switch {
		case *topK == -1: // vLLM's "all tokens"
		case *topK < 0 || *topK > math.MaxInt32:
			return nil, badRequest("top_k", "top_k=%d, want -1 or 0 (all tokens) or a count", *topK)
		default:
			r.TopK = int(*topK)
		}
	}
	if seed != nil {
		r.Seed, r.HasSeed = uint64(*seed), true
	}
	if err := parseStop(obj["stop"], r); err != nil {
		return nil, err
	}
	var n *int64
	if err := field(obj, "n", &n); err != nil {
		return nil, err
	}
	if n != nil && *n != 1 {
		return nil, badRequest("n", "n=%d, only n=1 is supported", *n)
	}
	var user string
	if err := firstErr(field(obj, "stream", &r.Stream), field(obj, "user", &user), field(obj, "ignore_eos", &r.IgnoreEOS)); err != nil {
		return nil, err
	}
	if raw := obj["stream_options"]; !isNull(raw) {
		if !r.Stream {
			return nil, badRequest("stream_options", "stream_options is only allowed with stream: true")
		}
		var so map[string]json.RawMessage
		if err := json.Unmarshal(raw, &so); err != nil || so == nil {
			return nil, badRequest("stream_options", "stream_options: want an object")
		}
		for k, v := range so {
			switch {
			case k == "include_usage":
				if err := json.Unmarshal(v, &r.IncludeUsage); err != nil {
					return nil, badRequest("stream_options.include_usage", "stream_options.include_usage: want true or false")
				}
			case k == "continuous_usage_stats" && compact(v) == "false":
			default:
				return nil, badRequest("stream_options."+k, "unsupported parameter stream_options.%s", k)
			}
		}
	}
	return r, nil
}

// field decodes obj[name] into dst when present and not null; a value of the wrong type is a 400 naming it.
func field[T any](obj map[string]json.RawMessage, name string, dst *T) *apiError {
	raw, ok := obj[name]
	if !ok || isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return badRequest(name, "%s: want %s, got %s", name, typeName(dst), abbrev(raw))
	}
	return nil
}

func typeName(v any) string {
	switch v.(type) {
	case *string:
		return "a string"
	case *bool:
		return "true or false"
	case **int64:
		return "an integer"
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
func sameJSON(v string, raw json.RawMessage) bool {
	var a, b any
	return json.Unmarshal([]byte(v), &a) == nil && json.Unmarshal(raw, &b) == nil && reflect.DeepEqual(a, b)
}

func isNull(raw json.RawMessage) bool { return raw == nil || compact(raw) == "null" }

// compact is raw without insignificant white space, for comparing small values.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// abbrev quotes the start of a raw value for an error message.
func abbrev(raw json.RawMessage) string {
	s := compact(raw)
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}

// parsePrompt reads a completion's prompt: a string, an array of token ids, or an array holding one of these
// (OpenAI's batched form, with a batch of one).
func parsePrompt(raw json.RawMessage, r *apiRequest) *apiError {
	if isNull(raw) {
		return badRequest("prompt", "prompt: required")
	}
	if json.Unmarshal(raw, &r.PromptText) == nil {
		return nil
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return promptTokens(ids, r)
	}
	var batch []json.RawMessage
	if json.Unmarshal(raw, &batch) == nil && len(batch) > 0 {
		if len(batch) != 1 {
			return badRequest("prompt", "prompt: a batch of %d prompts, only one prompt per request is supported", len(batch))
		}
		if json.Unmarshal(batch[0], &r.PromptText) == nil {
			return nil
		}
		if json.Unmarshal(batch[0], &ids) == nil && len(ids) > 0 {
			return promptTokens(ids, r)
		}
	}
	return badRequest("prompt", "prompt: want a string or a non-empty array of token ids, got %s", abbrev(raw))
}

func promptTokens(ids []int64, r *apiRequest) *apiError {
	r.IsTokens = true
	r.PromptTokens = make([]int32, len(ids))
	for i, id := range ids {
		if id < 0 || id > math.MaxInt32 {
			return badRequest("prompt", "prompt[%d]=%d, want a token id >= 0", i, id)
		}
		r.PromptTokens[i] = int32(id)
	}
	return nil
}

// parseStop reads stop: a string or an array of at most maxStops non-empty strings.
func parseStop(raw json.RawMessage, r *apiRequest) *apiError {
	if isNull(raw) {
		return nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		r.Stop = []string{one}
	} else if json.Unmarshal(raw, &r.Stop) != nil {
		return badRequest("stop", "stop: want a string or an array of strings, got %s", abbrev(raw))
	}
	if len(r.Stop) > maxStops {
		return badRequest("stop", "stop: %d strings, at most %d", len(r.Stop), maxStops)
	}
	for i, s := range r.Stop {
		if s == "" {
			return badRequest("stop", "stop[%d] is empty", i)
		}
	}
	return nil
}

// parseMessages reads a chat's messages and renders them with the plain template (see renderChat).
func parseMessages(raw json.RawMessage) (string, *apiError) {
	if isNull(raw) {
		return "", badRequest("messages", "messages: required")
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &msgs); err != nil || len(msgs) == 0 {
		return "", badRequest("messages", "messages: want a non-empty array of {role, content} objects")
	}
	turns := make([]turn, len(msgs))
	for i, m := range msgs {
		at := fmt.Sprintf("messages[%d]", i)
		for k := range m {
			if k != "role" && k != "content" && k != "name" {
				return "", badRequest(at+"."+k, "unsupported parameter %s.%s", at, k)
			}
		}
		if json.Unmarshal(m["role"], &turns[i].role) != nil {
			return "", badRequest(at+".role", "%s.role: want a string", at)
		}
		switch turns[i].role {
		case "system", "developer", "user", "assistant":
		default:
			return "", badRequest(at+".role", "%s.role=%q, want system, developer, user or assistant", at, turns[i].role)
		}
		content, err := parseContent(m["content"], at+".content")
		if err != nil {
			return "", err
		}
		turns[i].content = content
	}
	return renderChat(turns), nil
}

// parseContent reads a message's content: a string, or an array of {"type": "text", "text": ...} parts, joined.
func parseContent(raw json.RawMessage, at string) (string, *apiError) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return "", badRequest(at, "%s: want a string or an array of text parts", at)
	}
	var sb strings.Builder
	for j, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", badRequest(fmt.Sprintf("%s[%d]", at, j), "%s[%d]: only {\"type\": \"text\", \"text\": ...} parts are supported", at, j)
		}
		sb.WriteString(*p.Text)
	}
	return sb.String(), nil
}

type turn struct{ role, content string }

// renderChat is the plain chat template for models without one of their own: each message on a line of its own
// as "Role: content", then "Assistant:" for the model to continue.
func renderChat(turns []turn) string {
	var sb strings.Builder
	for _, t := range turns {
		role := t.role
		if role == "developer" {
			role = "system"
		}
		sb.WriteString(strings.ToUpper(role[:1]) + role[1:] + ": " + t.content + "\n")
	}
	sb.WriteString("Assistant:")
	return sb.String()
}
