package trace

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ParseError is a bad record or header: the file, its 1-based line, the field (a column or JSON key; "" for the
// whole line) and what was wrong. Its Error is one line, "file:line: field: message".
type ParseError struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *ParseError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Field, e.Msg)
}

// maxTokens bounds a length field: more than 2^30 tokens in one request is a corrupt record, not a request.
const maxTokens = 1 << 30

// Parse reads a trace from data; name is the file name that errors and Trace.Source give.
func Parse(name string, data []byte, opt LoadOptions) (*Trace, error) {
	sum := sha256.Sum256(data)
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	format := opt.Format
	if format == "" {
		var err error
		if format, err = detect(name, data); err != nil {
			return nil, err
		}
	}
	p := &parser{file: name, lines: lineReader{data: data}, opt: opt}
	t := &Trace{Source: name, SHA256: hex.EncodeToString(sum[:]), Format: format}
	var err error
	switch format {
	case Azure:
		err = p.azure(t)
	case Mooncake:
		err = p.mooncake(t)
	case Vidur:
		err = p.vidur(t)
	case Lengths:
		err = p.lengths(t)
	case BurstGPT:
		err = p.burstGPT(t)
	default:
		return nil, fmt.Errorf("%s: unknown format %q (want one of %s)", name, format, strings.Join(Formats, ", "))
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// detect tells the format from the first non-blank line: a JSON object is Mooncake; a CSV header is told by its
// column names.
func detect(name string, data []byte) (string, error) {
	lr := lineReader{data: data}
	line, ok := lr.next()
	if !ok {
		return "", fmt.Errorf("%s: empty file, no header or record", name)
	}
	if bytes.HasPrefix(bytes.TrimLeft(line, " \t"), []byte("{")) {
		return Mooncake, nil
	}
	cols := headerColumns(line)
	has := func(names ...string) bool {
		for _, n := range names {
			if _, ok := cols[n]; !ok {
				return false
			}
		}
		return true
	}
	switch {
	case has("TIMESTAMP", "ContextTokens", "GeneratedTokens"):
		return Azure, nil
	case has("arrived_at"):
		return Vidur, nil
	case has("num_prefill_tokens", "num_decode_tokens"):
		return Lengths, nil
	case has("Timestamp", "Request tokens", "Response tokens"):
		return BurstGPT, nil
	}
	return "", &ParseError{File: name, Line: lr.n, Field: "header", Msg: fmt.Sprintf(
		"unknown trace format %s (want an Azure, Vidur, length-table or BurstGPT CSV header, or Mooncake JSON lines)",
		clipQuote(line))}
}

// lineReader hands out the non-blank lines of data without their line ending, counting lines from 1.
type lineReader struct {
	data []byte
	pos  int
	n    int // line number of the last line returned
}

func (l *lineReader) next() ([]byte, bool) {
	for l.pos < len(l.data) {
		end := bytes.IndexByte(l.data[l.pos:], '\n')
		var line []byte
		if end < 0 {
			line, l.pos = l.data[l.pos:], len(l.data)
		} else {
			line, l.pos = l.data[l.pos:l.pos+end], l.pos+end+1
		}
		l.n++
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(bytes.TrimSpace(line)) > 0 {
			return line, true
		}
	}
	return nil, false
}

// parser reads one file.
type parser struct {
	file  string
	lines lineReader
	opt   LoadOptions

	header []string // CSV column names
	fields [][]byte // the current row's fields, reused
}

func (p *parser) errorf(field, format string, args ...any) error {
	return &ParseError{File: p.file, Line: p.lines.n, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// readHeader reads the CSV header and returns the index of each wanted column.
func (p *parser) readHeader(want ...string) ([]int, error) {
	line, ok := p.lines.next()
	if !ok {
		return nil, fmt.Errorf("%s: empty file, want a CSV header with %s", p.file, strings.Join(want, ","))
	}
	cols := headerColumns(line)
	p.header = p.header[:0]
	for _, f := range bytes.Split(line, []byte(",")) {
		p.header = append(p.header, columnName(f))
	}
	idx := make([]int, len(want))
	for i, w := range want {
		c, ok := cols[w]
		if !ok {
			return nil, p.errorf("header", "no column %q (want %s; have %s)", w, strings.Join(want, ","), clipQuote(line))
		}
		idx[i] = c
	}
	return idx, nil
}

// headerColumns maps each column name of a CSV header (spaces and quotes around it trimmed) to its index; a
// repeated name keeps its first index.
func headerColumns(line []byte) map[string]int {
	cols := map[string]int{}
	for i, f := range bytes.Split(line, []byte(",")) {
		name := columnName(f)
		if _, dup := cols[name]; !dup {
			cols[name] = i
		}
	}
	return cols
}

// columnName is a CSV header field with spaces and quotes around it trimmed.
func columnName(f []byte) string {
	return strings.Trim(strings.TrimSpace(string(f)), `"`)
}

// row reads the next CSV record into p.fields; it fails when the field count differs from the header's.
func (p *parser) row() (bool, error) {
	line, ok := p.lines.next()
	if !ok {
		return false, nil
	}
	p.fields = p.fields[:0]
	for {
		i := bytes.IndexByte(line, ',')
		if i < 0 {
			p.fields = append(p.fields, line)
			break
		}
		p.fields = append(p.fields, line[:i])
		line = line[i+1:]
	}
	if len(p.fields) != len(p.header) {
		return false, p.errorf("", "%d fields, want %d as in the header %s", len(p.fields), len(p.header), clipQuote([]byte(strings.Join(p.header, ","))))
	}
	return true, nil
}

// tokens parses field col of the row as a token count of at least min.
func (p *parser) tokens(col, min int) (int, error) {
	return p.tokenValue(p.header[col], bytes.TrimSpace(p.fields[col]), min)
}

func (p *parser) tokenValue(field string, b []byte, min int) (int, error) {
	n, msg := parseTokens(b)
	if msg != "" {
		return 0, p.errorf(field, "%s", msg)
	}
	if n < min {
		return 0, p.errorf(field, "%d tokens, want at least %d", n, min)
	}
	return n, nil
}

// parseTokens parses a whole, non-negative token count: digits, or a number with an integral value ("374.0").
// It returns a message saying what is wrong instead of an error, so that the caller can name the field.
func parseTokens(b []byte) (int, string) {
	if len(b) == 0 {
		return 0, "empty, want a token count"
	}
	n := 0
	digits := true
	for _, c := range b {
		if c < '0' || c > '9' {
			digits = false
			break
		}
		n = n*10 + int(c-'0')
		if n > maxTokens {
			return 0, fmt.Sprintf("%s tokens is out of range (at most %d)", clipQuote(b), maxTokens)
		}
	}
	if digits {
		return n, ""
	}
	f, err := parseDecimal(b)
	switch {
	case err != nil:
		return 0, fmt.Sprintf("bad number %s, want a whole token count", clipQuote(b))
	case f < 0:
		return 0, fmt.Sprintf("negative length %s", clipQuote(b))
	case f != math.Trunc(f):
		return 0, fmt.Sprintf("%s is not a whole token count", clipQuote(b))
	case f > maxTokens:
		return 0, fmt.Sprintf("%s tokens is out of range (at most %d)", clipQuote(b), maxTokens)
	}
	return int(f), ""
}

// number parses b, the value of field, as a finite number.
func (p *parser) number(field string, b []byte) (float64, error) {
	f, err := parseDecimal(bytes.TrimSpace(b))
	if err != nil {
		return 0, p.errorf(field, "bad number %s, want a finite number", clipQuote(b))
	}
	return f, nil
}

var errNotDecimal = errors.New("not a finite decimal number")

// parseDecimal parses a finite number written in decimal, with an optional sign, fraction and exponent
// ("4.314579", "-1e3"). strconv.ParseFloat alone would also take "inf", "nan", hex floats and underscores,
// none of which a trace means.
func parseDecimal(b []byte) (float64, error) {
	for _, c := range b {
		if (c < '0' || c > '9') && c != '.' && c != 'e' && c != 'E' && c != '+' && c != '-' {
			return 0, errNotDecimal
		}
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, errNotDecimal
	}
	return f, nil
}

// arrange checks that the raw times (in file order, in seconds on the file's clock) do not go backwards, or sorts
// the requests when opt.SortArrivals is set, then makes the arrivals relative to the first one. field names the
// time column for the error.
func (p *parser) arrange(t *Trace, reqs []Request, field string) error {
	for i := 1; i < len(reqs); i++ {
		if reqs[i].Arrival >= reqs[i-1].Arrival {
			continue
		}
		if !p.opt.SortArrivals {
			return &ParseError{File: p.file, Line: reqs[i].Line, Field: field, Msg: fmt.Sprintf(
				"time goes backwards: %.7g s before line %d's time (set SortArrivals or --sort-arrivals to sort the records)",
				reqs[i-1].Arrival-reqs[i].Arrival, reqs[i-1].Line)}
		}
		t.Reordered++
	}
	if t.Reordered > 0 {
		slices.SortStableFunc(reqs, func(a, b Request) int {
			switch {
			case a.Arrival < b.Arrival:
				return -1
			case a.Arrival > b.Arrival:
				return 1
			}
			return 0
		})
		t.Transforms = append(t.Transforms, fmt.Sprintf("sorted=%d", t.Reordered))
	}
	if len(reqs) > 0 {
		origin := reqs[0].Arrival
		t.Origin += time.Duration(math.Round(origin * 1e9))
		for i := range reqs {
			reqs[i].Arrival -= origin
		}
	}
	t.Requests = reqs
	return nil
}

// azure reads the Azure LLM inference trace CSV: TIMESTAMP,ContextTokens,GeneratedTokens.
func (p *parser) azure(t *Trace) error {
	col, err := p.readHeader("TIMESTAMP", "ContextTokens", "GeneratedTokens")
	if err != nil {
		return err
	}
	var reqs []Request
	var first int64
	for {
		ok, err := p.row()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		ns, err := p.timestamp("TIMESTAMP", p.fields[col[0]])
		if err != nil {
			return err
		}
		if len(reqs) == 0 {
			first = ns
		}
		r := Request{Arrival: float64(ns-first) / 1e9, Line: p.lines.n}
		if r.PromptTokens, err = p.tokens(col[1], 1); err != nil {
			return err
		}
		if r.OutputTokens, err = p.tokens(col[2], 1); err != nil {
			return err
		}
		reqs = append(reqs, r)
	}
	t.Origin = time.Duration(first)
	return p.arrange(t, reqs, "TIMESTAMP")
}

// timestamp parses "2023-11-16 18:15:46.6805900" (a 'T' may separate date and time; up to 9 fractional digits;
// an optional "Z" or "+hh:mm" zone, UTC when absent) into nanoseconds since the Unix epoch. Parsing by hand keeps
// the full hour-long trace's load well under its 100 ms budget and keeps every digit (float seconds since 1970
// would round them to 0.2 µs).
func (p *parser) timestamp(field string, b []byte) (int64, error) {
	b = bytes.TrimSpace(b)
	bad := func(why string) error {
		return p.errorf(field, "bad timestamp %s (%s; want like 2023-11-16 18:15:46.6805900)", clipQuote(b), why)
	}
	num := func(s []byte) (int, bool) {
		n := 0
		for _, c := range s {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, len(s) > 0
	}
	if len(b) < 19 || b[4] != '-' || b[7] != '-' || (b[10] != ' ' && b[10] != 'T') || b[13] != ':' || b[16] != ':' {
		return 0, bad("layout")
	}
	y, ok1 := num(b[0:4])
	mo, ok2 := num(b[5:7])
	d, ok3 := num(b[8:10])
	h, ok4 := num(b[11:13])
	mi, ok5 := num(b[14:16])
	s, ok6 := num(b[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) {
		return 0, bad("not a number")
	}
	if y < 1900 || y > 2200 {
		return 0, bad("year outside 1900-2200")
	}
	if mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 59 {
		return 0, bad("field out of range")
	}
	day := time.Date(y, time.Month(mo), d, 0, 0, 0, 0, time.UTC)
	if day.Day() != d {
		return 0, bad("no such day")
	}
	rest := b[19:]
	var frac int64
	if len(rest) > 0 && rest[0] == '.' {
		i := 1
		scale := int64(1e8)
		for ; i < len(rest) && rest[i] >= '0' && rest[i] <= '9'; i++ {
			if i > 9 {
				return 0, bad("more than 9 fractional digits")
			}
			frac += int64(rest[i]-'0') * scale
			scale /= 10
		}
		if i == 1 {
			return 0, bad("no digits after the point")
		}
		rest = rest[i:]
	}
	var zone int64
	switch {
	case len(rest) == 0, string(rest) == "Z":
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		zh, okh := num(rest[1:3])
		zm, okm := num(rest[4:6])
		if !okh || !okm || zh > 23 || zm > 59 {
			return 0, bad("bad zone")
		}
		zone = int64(zh*3600+zm*60) * 1e9
		if rest[0] == '-' {
			zone = -zone
		}
	default:
		return 0, bad("unexpected text after the seconds")
	}
	return day.Unix()*1e9 + int64(h*3600+mi*60+s)*1e9 + frac - zone, nil
}

// vidur reads Vidur's trace CSV: arrived_at (seconds), num_prefill_tokens, num_decode_tokens, other columns
// ignored.
func (p *parser) vidur(t *Trace) error {
	col, err := p.readHeader("arrived_at", "num_prefill_tokens", "num_decode_tokens")
	if err != nil {
		return err
	}
	var reqs []Request
	for {
		ok, err := p.row()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		r := Request{Line: p.lines.n}
		if r.Arrival, err = p.number("arrived_at", p.fields[col[0]]); err != nil {
			return err
		}
		if r.PromptTokens, err = p.tokens(col[1], 1); err != nil {
			return err
		}
		if r.OutputTokens, err = p.tokens(col[2], 1); err != nil {
			return err
		}
		reqs = append(reqs, r)
	}
	return p.arrange(t, reqs, "arrived_at")
}

// lengths reads a length-only table: num_prefill_tokens, num_decode_tokens, other columns ignored.
func (p *parser) lengths(t *Trace) error {
	col, err := p.readHeader("num_prefill_tokens", "num_decode_tokens")
	if err != nil {
		return err
	}
	t.NoArrivals = true
	for {
		ok, err := p.row()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		r := Request{Line: p.lines.n}
		if r.PromptTokens, err = p.tokens(col[0], 1); err != nil {
			return err
		}
		if r.OutputTokens, err = p.tokens(col[1], 1); err != nil {
			return err
		}
		t.Requests = append(t.Requests, r)
	}
	return nil
}

// burstGPT reads BurstGPT's CSV: Timestamp (seconds), Request tokens, Response tokens, other columns (Model,
// Total tokens, Log Type, Session ID, Elapsed time) ignored. A row with 0 response tokens is a failed request.
func (p *parser) burstGPT(t *Trace) error {
	col, err := p.readHeader("Timestamp", "Request tokens", "Response tokens")
	if err != nil {
		return err
	}
	var reqs []Request
	for {
		ok, err := p.row()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		r := Request{Line: p.lines.n}
		if r.Arrival, err = p.number("Timestamp", p.fields[col[0]]); err != nil {
			return err
		}
		if r.OutputTokens, err = p.tokens(col[2], 0); err != nil {
			return err
		}
		failed := r.OutputTokens == 0
		minPrompt := 1
		if failed {
			minPrompt = 0 // a failed request's prompt count is not used; it only has to be a count
		}
		if r.PromptTokens, err = p.tokens(col[1], minPrompt); err != nil {
			return err
		}
		if failed {
			t.Failed++
			if !p.opt.KeepFailed {
				continue
			}
		}
		reqs = append(reqs, r)
	}
	if p.opt.KeepFailed && t.Failed > 0 {
		t.Transforms = append(t.Transforms, fmt.Sprintf("kept-failed=%d", t.Failed))
	}
	return p.arrange(t, reqs, "Timestamp")
}

// mooncakeRecord is one line of a Mooncake trace. Numbers stay json.Numbers so that a bad one is reported with
// its field, and pointers tell a missing key from a zero.
type mooncakeRecord struct {
	Timestamp *json.Number `json:"timestamp"`
	Input     *json.Number `json:"input_length"`
	Output    *json.Number `json:"output_length"`
	HashIDs   []int64      `json:"hash_ids"`
}

// mooncake reads Mooncake's JSON lines: timestamp (ms), input_length, output_length, hash_ids.
func (p *parser) mooncake(t *Trace) error {
	var reqs []Request
	for {
		line, ok := p.lines.next()
		if !ok {
			break
		}
		var rec mooncakeRecord
		if err := json.Unmarshal(line, &rec); err != nil {
			return p.errorf("", "bad JSON record: %v", err)
		}
		r := Request{Line: p.lines.n, HashIDs: rec.HashIDs}
		if rec.Timestamp == nil {
			return p.errorf("timestamp", "missing (want milliseconds from the trace start)")
		}
		ms, err := p.number("timestamp", []byte(*rec.Timestamp))
		if err != nil {
			return err
		}
		r.Arrival = ms / 1000
		for _, f := range []struct {
			key string
			v   *json.Number
			dst *int
		}{{"input_length", rec.Input, &r.PromptTokens}, {"output_length", rec.Output, &r.OutputTokens}} {
			if f.v == nil {
				return p.errorf(f.key, "missing (want a token count)")
			}
			if *f.dst, err = p.tokenValue(f.key, []byte(*f.v), 1); err != nil {
				return err
			}
		}
		if len(r.HashIDs) == 0 {
			r.HashIDs = nil
		} else {
			t.HashBlock = MooncakeBlock
		}
		reqs = append(reqs, r)
	}
	return p.arrange(t, reqs, "timestamp")
}

// clipQuote quotes b for an error message, cut to 60 bytes so that a corrupt line cannot flood it.
func clipQuote(b []byte) string {
	const max = 60
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + "..."
	}
	return strconv.Quote(string(b))
}
