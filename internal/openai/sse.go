package openai

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// MaxEventBytes bounds one server-sent event (its data lines together), so that a server that never ends a line
// cannot make a client buffer without limit.
const MaxEventBytes = 1 << 20

// ErrNoDone is returned by Stream.Next when the body ends before `data: [DONE]`: a broken stream.
var ErrNoDone = errors.New("stream ended before data: [DONE]")

// EventReader reads the data of server-sent events (the WHATWG EventSource format): lines "data: x" gather into
// one event, joined by newlines, until a blank line ends it; lines starting with ':' are comments (keep-alives);
// other fields (event, id, retry) are read and ignored. Lines end with LF, CRLF or CR.
type EventReader struct {
	r       *bufio.Reader
	pending bool // the last byte read was a CR: an LF right after it belongs to the same line end
}

// NewEventReader returns a reader of the events in r.
func NewEventReader(r io.Reader) *EventReader {
	return &EventReader{r: bufio.NewReader(r)}
}

// Next returns the data of the next event that has data. At the end of the input it returns io.EOF, after
// returning an event whose blank line was missing (the stream is judged by Stream, not here).
func (e *EventReader) Next() ([]byte, error) {
	var (
		data    []byte
		hasData bool
	)
	for {
		line, err := e.readLine()
		if err != nil {
			if err == io.EOF && hasData {
				return data, nil
			}
			return nil, err
		}
		if len(line) == 0 {
			if hasData {
				return data, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		if string(field) != "data" {
			continue
		}
		if hasData {
			data = append(data, '\n')
		}
		if len(data)+len(value) > MaxEventBytes {
			return nil, fmt.Errorf("server-sent event longer than %d bytes", MaxEventBytes)
		}
		data = append(data, value...)
		hasData = true
	}
}

// readLine returns the next line without its end, or io.EOF when no bytes are left. A last line without an end
// is returned as a line.
func (e *EventReader) readLine() ([]byte, error) {
	var line []byte
	for {
		c, err := e.r.ReadByte()
		if err != nil {
			if err == io.EOF && len(line) > 0 {
				return line, nil
			}
			return nil, err
		}
		if e.pending {
			e.pending = false
			if c == '\n' {
				continue
			}
		}
		switch c {
		case '\n':
			return line, nil
		case '\r':
			e.pending = true
			return line, nil
		}
		if len(line) >= MaxEventBytes {
			return nil, fmt.Errorf("server-sent event line longer than %d bytes", MaxEventBytes)
		}
		line = append(line, c)
	}
}

// Chunk is what a client needs from one streamed chunk, completion or chat alike.
type Chunk struct {
	// Choices is the number of choices the chunk has. A chunk with a choice marks the arrival of a token (its text
	// may be empty, for a special token or a chat role), as vLLM's benchmark client counts them; the usage chunk
	// has none.
	Choices int
	// Text is choices[0].text for a completion, choices[0].delta.content for a chat.
	Text string
	// FinishReason is choices[0].finish_reason when it is set.
	FinishReason string
	// Usage is the chunk's usage, when not null.
	Usage *Usage
}

// APIError is an error the server sent: as the body of an error status, or as an error event inside a stream.
type APIError struct {
	Status int // HTTP status; 0 for an error event inside a stream
	Body   ErrorBody
}

func (e *APIError) Error() string {
	msg := e.Body.Message
	if msg == "" {
		msg = "no message"
	}
	if e.Body.Param != nil && *e.Body.Param != "" {
		msg += " (param " + *e.Body.Param + ")"
	}
	if e.Status != 0 {
		return fmt.Sprintf("HTTP %d: %s", e.Status, msg)
	}
	return "error event: " + msg
}

// Stream reads a streamed completion or chat completion.
type Stream struct {
	events *EventReader
	done   bool
}

// NewStream returns a reader of the stream in r, a response body.
func NewStream(r io.Reader) *Stream {
	return &Stream{events: NewEventReader(r)}
}

// wireChunk decodes both chunk shapes, and the error event.
type wireChunk struct {
	Choices []struct {
		Text  *string `json:"text"`
		Delta *struct {
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *Usage     `json:"usage"`
	Error *ErrorBody `json:"error"`
}

// Next returns the next chunk. It returns io.EOF after `data: [DONE]`, ErrNoDone when the body ends before it,
// an *APIError for an error event, and an error naming the chunk when its data is not a JSON chunk.
func (s *Stream) Next() (Chunk, error) {
	if s.done {
		return Chunk{}, io.EOF
	}
	data, err := s.events.Next()
	if err == io.EOF {
		return Chunk{}, ErrNoDone
	}
	if err != nil {
		return Chunk{}, err
	}
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		s.done = true
		return Chunk{}, io.EOF
	}
	var w wireChunk
	if err := json.Unmarshal(data, &w); err != nil {
		return Chunk{}, fmt.Errorf("chunk %.80q is not a JSON chunk: %v", data, err)
	}
	if w.Error != nil {
		return Chunk{}, &APIError{Body: *w.Error}
	}
	c := Chunk{Choices: len(w.Choices), Usage: w.Usage}
	if len(w.Choices) > 0 {
		ch := w.Choices[0]
		switch {
		case ch.Text != nil:
			c.Text = *ch.Text
		case ch.Delta != nil && ch.Delta.Content != nil:
			c.Text = *ch.Delta.Content
		}
		if ch.FinishReason != nil {
			c.FinishReason = *ch.FinishReason
		}
	}
	return c, nil
}

// WriteEvent writes v as one event, `data: <JSON>` and a blank line.
func WriteEvent(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "data: %s\n\n", b)
	return err
}

// WriteDone writes the event that ends a stream, `data: [DONE]`.
func WriteDone(w io.Writer) error {
	_, err := io.WriteString(w, "data: [DONE]\n\n")
	return err
}
