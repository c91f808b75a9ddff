package trace

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// WriteFormats lists the formats Write writes; "jsonl" is another name for Mooncake's JSON lines.
var WriteFormats = []string{Vidur, Mooncake, "jsonl", Azure, Lengths}

// Write writes t to w in format (one of WriteFormats), in a form that Load reads back to the same requests:
// arrivals are written to the nanosecond (Azure: to its 100 ns), lengths exactly. A length-only table can be
// written only as a length table.
func Write(w io.Writer, t *Trace, format string) error {
	if t.NoArrivals && format != Lengths {
		return fmt.Errorf("%s is a length-only table without arrivals: write it as %q, or give it arrivals first", t.Source, Lengths)
	}
	bw := bufio.NewWriter(w)
	var buf []byte
	switch format {
	case Vidur:
		bw.WriteString("arrived_at,num_prefill_tokens,num_decode_tokens\n")
		for _, r := range t.Requests {
			buf = strconv.AppendFloat(buf[:0], math.Round(r.Arrival*1e9)/1e9, 'f', -1, 64)
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, int64(r.PromptTokens), 10)
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, int64(r.OutputTokens), 10)
			buf = append(buf, '\n')
			bw.Write(buf)
		}
	case Mooncake, "jsonl":
		for _, r := range t.Requests {
			buf = append(buf[:0], `{"timestamp": `...)
			buf = strconv.AppendFloat(buf, math.Round(r.Arrival*1e9)/1e6, 'f', -1, 64)
			buf = append(buf, `, "input_length": `...)
			buf = strconv.AppendInt(buf, int64(r.PromptTokens), 10)
			buf = append(buf, `, "output_length": `...)
			buf = strconv.AppendInt(buf, int64(r.OutputTokens), 10)
			buf = append(buf, `, "hash_ids": [`...)
			for i, h := range r.HashIDs {
				if i > 0 {
					buf = append(buf, ", "...)
				}
				buf = strconv.AppendInt(buf, h, 10)
			}
			buf = append(buf, "]}\n"...)
			bw.Write(buf)
		}
	case Azure:
		// The timestamps count from Origin, which for an Azure trace is its first request's wall-clock time and
		// for any other is a time since 1970-01-01, the only date such a trace has.
		bw.WriteString("TIMESTAMP,ContextTokens,GeneratedTokens\n")
		for _, r := range t.Requests {
			ns := int64(t.Origin) + int64(math.Round(r.Arrival*1e9))
			buf = time.Unix(0, ns).UTC().AppendFormat(buf[:0], "2006-01-02 15:04:05.0000000")
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, int64(r.PromptTokens), 10)
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, int64(r.OutputTokens), 10)
			buf = append(buf, '\n')
			bw.Write(buf)
		}
	case Lengths:
		bw.WriteString("num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n")
		for _, r := range t.Requests {
			buf = strconv.AppendInt(buf[:0], int64(r.PromptTokens), 10)
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, int64(r.OutputTokens), 10)
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, int64(r.PromptTokens+r.OutputTokens), 10)
			buf = append(buf, ',')
			buf = strconv.AppendFloat(buf, float64(r.PromptTokens)/float64(r.OutputTokens), 'g', -1, 64)
			buf = append(buf, '\n')
			bw.Write(buf)
		}
	default:
		return fmt.Errorf("cannot write format %q (want one of %s)", format, strings.Join(WriteFormats, ", "))
	}
	return bw.Flush()
}
