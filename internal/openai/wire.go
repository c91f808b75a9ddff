// Package openai holds the wire shapes of the OpenAI-compatible HTTP API that morphlab serves and load-tests:
// the request and response bodies of POST /v1/completions and /v1/chat/completions, their streaming chunks,
// the usage object, the error body, and a reader and writer for the server-sent events that carry a stream.
//
// A streamed response is a sequence of SSE events, each one line `data: <JSON chunk>` followed by a blank line,
// ending with `data: [DONE]`. Every chunk carries "usage": null except, when the request set
// stream_options.include_usage, one last chunk before [DONE] with no choices and the usage of the whole request:
//
//	data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" Hi","logprobs":null,"finish_reason":null}],"usage":null}
//
//	data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}
//
//	data: [DONE]
//
// Errors are JSON bodies {"error": {"message", "type", "param", "code"}} with a 4xx or 5xx status.
// Package openaitest has a fake server that speaks all of this, for tests of clients and as the reference for
// servers.
package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Prompt is a completion prompt: text, or token ids (the API accepts either; token ids give a prompt of an exact
// length whatever the server's tokenizer). Exactly one of the two is set.
type Prompt struct {
	Text   string
	Tokens []int
}

// MarshalJSON writes the prompt as a JSON string or an array of token ids.
func (p Prompt) MarshalJSON() ([]byte, error) {
	if p.Tokens != nil {
		return json.Marshal(p.Tokens)
	}
	return json.Marshal(p.Text)
}

// UnmarshalJSON reads a JSON string or an array of non-negative token ids.
func (p *Prompt) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		var ids []int
		if err := json.Unmarshal(b, &ids); err != nil {
			return fmt.Errorf("prompt: want a string or an array of token ids: %v", err)
		}
		for i, id := range ids {
			if id < 0 {
				return fmt.Errorf("prompt: token id %d at index %d is negative", id, i)
			}
		}
		*p = Prompt{Tokens: ids}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("prompt: want a string or an array of token ids")
	}
	*p = Prompt{Text: s}
	return nil
}

// StreamOptions are the options of a streamed request.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// CompletionRequest is the body of POST /v1/completions. Optional numbers are pointers so that a server can
// tell "not given" from zero.
type CompletionRequest struct {
	Model         string         `json:"model"`
	Prompt        Prompt         `json:"prompt"`
	MaxTokens     *int           `json:"max_tokens,omitempty"`
	Temperature   *float64       `json:"temperature,omitempty"`
	TopP          *float64       `json:"top_p,omitempty"`
	TopK          *int           `json:"top_k,omitempty"`
	Seed          *int64         `json:"seed,omitempty"`
	Stop          []string       `json:"stop,omitempty"`
	N             *int           `json:"n,omitempty"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *StreamOptions `json:"stream_options,omitempty"`
	// IgnoreEOS is vLLM's extension: generate max_tokens tokens whatever the model's end-of-sequence tokens.
	IgnoreEOS bool `json:"ignore_eos,omitempty"`
}

// Message is one turn of a chat.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatRequest is the body of POST /v1/chat/completions.
type ChatRequest struct {
	Model         string         `json:"model"`
	Messages      []Message      `json:"messages"`
	MaxTokens     *int           `json:"max_tokens,omitempty"`
	Temperature   *float64       `json:"temperature,omitempty"`
	TopP          *float64       `json:"top_p,omitempty"`
	TopK          *int           `json:"top_k,omitempty"`
	Seed          *int64         `json:"seed,omitempty"`
	Stop          []string       `json:"stop,omitempty"`
	N             *int           `json:"n,omitempty"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *StreamOptions `json:"stream_options,omitempty"`
	// IgnoreEOS is vLLM's extension: generate max_tokens tokens whatever the model's end-of-sequence tokens.
	IgnoreEOS bool `json:"ignore_eos,omitempty"`
}

// Usage counts the tokens of one request.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// CompletionChoice is one choice of a completion or of a completion chunk (Text is then the new text only).
// FinishReason is null until the choice ends ("stop" or "length").
type CompletionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

// Completion is the body of a non-streamed completion (Object "text_completion") and also each chunk of a
// streamed one (same object name, Usage nil but in the final usage chunk).
type Completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   *Usage             `json:"usage"`
}

// ChatChoice is one choice of a non-streamed chat completion.
type ChatChoice struct {
	Index        int     `json:"index"`
	Message      Message `json:"message"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

// ChatCompletion is the body of a non-streamed chat completion (Object "chat.completion").
type ChatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   *Usage       `json:"usage"`
}

// Delta is what a chat chunk adds: the role in the first chunk, then content.
type Delta struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content,omitempty"`
}

// ChatChunkChoice is one choice of a chat completion chunk.
type ChatChunkChoice struct {
	Index        int     `json:"index"`
	Delta        Delta   `json:"delta"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

// ChatChunk is one chunk of a streamed chat completion (Object "chat.completion.chunk").
type ChatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []ChatChunkChoice `json:"choices"`
	Usage   *Usage            `json:"usage"`
}

// Model is one entry of GET /v1/models.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "model"
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ModelList is the body of GET /v1/models.
type ModelList struct {
	Object string  `json:"object"` // "list"
	Data   []Model `json:"data"`
}

// ErrorBody is the error object: a message, its type (invalid_request_error, rate_limit_error, server_error,
// ...), the request field at fault when there is one, and an optional code.
type ErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    any     `json:"code"`
}

// ErrorResponse is the body of an error response, and of an error event inside a stream.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}
