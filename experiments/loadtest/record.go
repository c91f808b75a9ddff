package loadtest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Record is a run's requests and what happened to each, kept for an accounting after the run (a replica
// failure's, say): the run's rate, its start on the wall clock and the per-request timeout, and for every request
// in the order sent its arrival, its max tokens and its outcome. 'morphlab loadtest --outcomes' writes one a rate,
// a JSON object a line.
type Record struct {
	Rate     float64           `json:"rate"`
	Start    time.Time         `json:"start"`
	Timeout  time.Duration     `json:"timeout_ns"`
	Requests []RecordedRequest `json:"requests"`
}

// RecordedRequest is one request of a Record.
type RecordedRequest struct {
	Arrival   time.Duration `json:"arrival_ns"`
	MaxTokens int           `json:"max_tokens"`
	Outcome
}

// WriteRecord writes the record of res, a run at rate with requests limited to timeout (0: DefaultTimeout), as
// one line of JSON.
func WriteRecord(w io.Writer, rate float64, timeout time.Duration, res *Result) error {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	rec := Record{Rate: rate, Start: res.Start, Timeout: timeout, Requests: make([]RecordedRequest, len(res.Outcomes))}
	for i, o := range res.Outcomes {
		rec.Requests[i] = RecordedRequest{Arrival: res.Requests[i].Arrival, MaxTokens: res.Requests[i].MaxTokens, Outcome: o}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ReadRecords reads the records WriteRecord wrote to path, one a line.
func ReadRecords(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var recs []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<30)
	for line := 1; sc.Scan(); line++ {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: not a load test's record: %v", path, line, err)
		}
		if r.Start.IsZero() || r.Timeout <= 0 || len(r.Requests) == 0 {
			return nil, fmt.Errorf("%s:%d: a record with its start, timeout and requests, want all three", path, line)
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(recs) == 0 {
		return nil, errors.New(path + ": no records")
	}
	return recs, nil
}
