package trace

import (
	"errors"
	"strings"
	"testing"
)

const (
	azureHead    = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
	vidurHead    = "arrived_at,num_prefill_tokens,num_decode_tokens\n"
	lengthsHead  = "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"
	burstHead    = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
	burstNewHead = "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
)

// TestParseErrors checks the one-line error for each kind of bad input: file, line, field and what was wrong.
func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		name, data, format, want string
	}{
		{"empty", "", "", "t.csv: empty file, no header or record"},
		{"unknown header", "a,b,c\n1,2,3\n", "", `t.csv:1: header: unknown trace format "a,b,c" (want an Azure, Vidur, length-table or BurstGPT CSV header, or Mooncake JSON lines)`},
		{"missing column", "TIMESTAMP,ContextTokens\n", Azure, `t.csv:1: header: no column "GeneratedTokens" (want TIMESTAMP,ContextTokens,GeneratedTokens; have "TIMESTAMP,ContextTokens")`},
		{"field count", azureHead + "2023-11-16 18:15:46.6805900,374\n", "", `t.csv:2: 2 fields, want 3 as in the header "TIMESTAMP,ContextTokens,GeneratedTokens"`},
		{"bad timestamp", azureHead + "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 25:15:50.9951690,396,109\n", "",
			`t.csv:3: TIMESTAMP: bad timestamp "2023-11-16 25:15:50.9951690" (field out of range; want like 2023-11-16 18:15:46.6805900)`},
		{"no such day", azureHead + "2023-02-30 18:15:46,374,44\n", "", `t.csv:2: TIMESTAMP: bad timestamp "2023-02-30 18:15:46" (no such day; want like 2023-11-16 18:15:46.6805900)`},
		{"negative length", azureHead + "2023-11-16 18:15:46.6805900,-374,44\n", "", `t.csv:2: ContextTokens: negative length "-374"`},
		{"zero output", azureHead + "2023-11-16 18:15:46.6805900,374,0\n", "", `t.csv:2: GeneratedTokens: 0 tokens, want at least 1`},
		{"bad number", vidurHead + "0.0,374,44\n4.3x,396,109\n", "", `t.csv:3: arrived_at: bad number "4.3x", want a finite number`},
		{"fraction", vidurHead + "0.0,374.5,44\n", "", `t.csv:2: num_prefill_tokens: "374.5" is not a whole token count`},
		{"huge", vidurHead + "0.0,99999999999,44\n", "", `t.csv:2: num_prefill_tokens: "99999999999" tokens is out of range (at most 1073741824)`},
		{"hex time", vidurHead + "0x1p3,1,1\n", "", `t.csv:2: arrived_at: bad number "0x1p3", want a finite number`},
		{"nan length", vidurHead + "0,NaN,1\n", "", `t.csv:2: num_prefill_tokens: bad number "NaN", want a whole token count`},
		{"infinite time", vidurHead + "inf,1,1\n", "", `t.csv:2: arrived_at: bad number "inf", want a finite number`},
		{"backwards", vidurHead + "0.0,374,44\n4.5,396,109\n4.25,1,1\n", "",
			"t.csv:4: arrived_at: time goes backwards: 0.25 s before line 3's time (set SortArrivals or --sort-arrivals to sort the records)"},
		{"azure backwards", azureHead + "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:46.6805800,1,1\n", "",
			"t.csv:3: TIMESTAMP: time goes backwards: 1e-05 s before line 2's time (set SortArrivals or --sort-arrivals to sort the records)"},
		{"lengths", lengthsHead + "74,918,992,0.08\n290,,1195,0.32\n", "", "t.csv:3: num_decode_tokens: empty, want a token count"},
		{"burstgpt", burstHead + "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,x,230,1317,Conversation log\n", "",
			`t.csv:3: Request tokens: bad number "x", want a whole token count`},
		{"mooncake json", `{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1]}` + "\n{\"timestamp\": 3,\n", "",
			"t.csv:2: bad JSON record: unexpected end of JSON input"},
		{"mooncake missing", `{"timestamp": 0, "output_length": 500}` + "\n", "", "t.csv:1: input_length: missing (want a token count)"},
		{"mooncake negative", `{"timestamp": 0, "input_length": 5, "output_length": -2}` + "\n", "", `t.csv:1: output_length: negative length "-2"`},
		{"mooncake no time", `{"input_length": 5, "output_length": 2}` + "\n", "", "t.csv:1: timestamp: missing (want milliseconds from the trace start)"},
		{"mooncake hash", `{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": ["a"]}` + "\n", "",
			"t.csv:1: bad JSON record: json: cannot unmarshal string into Go struct field mooncakeRecord.hash_ids of type int64"},
		{"forced format", vidurHead + "0.0,1,1\n", Azure, `t.csv:1: header: no column "TIMESTAMP" (want TIMESTAMP,ContextTokens,GeneratedTokens; have "arrived_at,num_prefill_tokens,num_decode_tokens")`},
		{"unknown format", "x\n", "parquet", `t.csv: unknown format "parquet" (want one of azure, mooncake, vidur, lengths, burstgpt)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, err := Parse("t.csv", []byte(c.data), LoadOptions{Format: c.format})
			if err == nil {
				t.Fatalf("accepted: %v", tr)
			}
			if err.Error() != c.want {
				t.Errorf("error\n %s\nwant\n %s", err, c.want)
			}
			var pe *ParseError
			if strings.Count(c.want, ":") >= 2 && strings.Contains(c.want, "t.csv:") && !errors.As(err, &pe) && !strings.Contains(c.want, "unknown format") {
				t.Errorf("error %T is not a *ParseError", err)
			}
		})
	}
}

func TestSortArrivals(t *testing.T) {
	data := vidurHead + "1.0,10,1\n3.0,30,1\n2.0,20,1\n2.0,21,1\n5,50,1\n"
	tr, err := Parse("t.csv", []byte(data), LoadOptions{SortArrivals: true})
	if err != nil {
		t.Fatal(err)
	}
	var prompts []int
	for _, r := range tr.Requests {
		prompts = append(prompts, r.PromptTokens)
	}
	if got := prompts; len(got) != 5 || got[0] != 10 || got[1] != 20 || got[2] != 21 || got[3] != 30 || got[4] != 50 {
		t.Errorf("sorted prompts %v, want [10 20 21 30 50] (equal times in file order)", got)
	}
	if tr.Reordered != 1 || tr.Origin.Seconds() != 1 || tr.Requests[0].Arrival != 0 || tr.Requests[4].Arrival != 4 {
		t.Errorf("Reordered %d, Origin %v, arrivals %g..%g", tr.Reordered, tr.Origin, tr.Requests[0].Arrival, tr.Requests[4].Arrival)
	}
	if len(tr.Transforms) != 1 || tr.Transforms[0] != "sorted=1" {
		t.Errorf("Transforms = %q", tr.Transforms)
	}
}

// TestLineEndings reads a file with a byte-order mark, CRLF line endings, a blank line and no final newline, as
// the Azure code trace ends.
func TestLineEndings(t *testing.T) {
	data := "\xef\xbb\xbfTIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:17:03.9799600,4808,10\r\n\r\n2023-11-16 18:17:04.0319600,3180,8"
	tr, err := Parse("t.csv", []byte(data), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Requests) != 2 || tr.Requests[1].Line != 4 || tr.Requests[1].OutputTokens != 8 || tr.Requests[1].Arrival != 0.052 {
		t.Errorf("requests %+v", tr.Requests)
	}
	if got := tr.Origin.Nanoseconds(); got != 1700158623979960000 {
		t.Errorf("Origin %d ns, want 2023-11-16 18:17:03.97996 UTC = 1700158623979960000", got)
	}
}

func TestAzureTimestamps(t *testing.T) {
	for _, c := range []struct {
		in string
		ns int64
	}{
		{"2023-11-16 18:15:46.6805900", 1700158546680590000},
		{"2023-11-16T18:15:46", 1700158546000000000},
		{"2023-11-16 18:15:46.1", 1700158546100000000},
		{"2023-11-16 18:15:46.123456789", 1700158546123456789},
		{"2024-05-10 00:00:00.009930+00:00", 1715299200009930000},
		{"2024-05-10 02:00:00+02:00", 1715299200000000000},
		{"2024-05-10 00:00:00Z", 1715299200000000000},
		{"2024-02-29 00:00:00", 1709164800000000000},
	} {
		p := &parser{file: "t"}
		ns, err := p.timestamp("TIMESTAMP", []byte(c.in))
		if err != nil || ns != c.ns {
			t.Errorf("%q: %d, %v; want %d", c.in, ns, err, c.ns)
		}
	}
	for _, in := range []string{"2023-11-16", "2023-11-16 18:15:46.", "2023-11-16 18:15:46.1234567891", "2023-13-16 18:15:46",
		"2023-11-16 18:60:46", "2023-11-16 18:15:46 PST", "2023-02-29 00:00:00", "1000-01-01 00:00:00", "2023-11-16 18:15:46+25:00"} {
		p := &parser{file: "t"}
		if ns, err := p.timestamp("TIMESTAMP", []byte(in)); err == nil {
			t.Errorf("%q accepted as %d", in, ns)
		}
	}
}

func TestBurstGPT(t *testing.T) {
	data := burstNewHead +
		"19440110.0,1722ac82-0a46-4bf0-aa08-89794e7a2b3f,43,GPT-4,906,446,1352,Conversation log\n" +
		"19440161.0,d5983bf9-4b48-497b-892b-a58995247443,2,ChatGPT,36,0,36,Conversation log\n" +
		"19440192.0,a5c69b35-4fbc-45e9-955e-18715e376d74,8,GPT-4,1779,123,1902,Conversation log\n"
	tr, err := Parse("b.csv", []byte(data), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Format != BurstGPT || len(tr.Requests) != 2 || tr.Failed != 1 || tr.Requests[1].Arrival != 82 || tr.Requests[1].Line != 4 {
		t.Errorf("%v: failed %d, requests %+v", tr, tr.Failed, tr.Requests)
	}
	kept, err := Parse("b.csv", []byte(data), LoadOptions{KeepFailed: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(kept.Requests) != 3 || kept.Failed != 1 || kept.Requests[1].OutputTokens != 0 {
		t.Errorf("KeepFailed: failed %d, requests %+v", kept.Failed, kept.Requests)
	}
}

func TestParseTokens(t *testing.T) {
	for in, want := range map[string]int{"374": 374, "374.0": 374, "1e2": 100, "0": 0, "1073741824": maxTokens} {
		if n, msg := parseTokens([]byte(in)); n != want || msg != "" {
			t.Errorf("parseTokens(%q) = %d, %q; want %d", in, n, msg, want)
		}
	}
	for _, in := range []string{"", "-1", "1.5", "0x10", "1_000", "1073741825", "1e10", " 5", "Inf"} {
		if n, msg := parseTokens([]byte(in)); msg == "" {
			t.Errorf("parseTokens(%q) = %d, accepted", in, n)
		}
	}
}
