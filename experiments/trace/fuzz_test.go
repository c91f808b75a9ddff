package trace

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
)

// The fuzz targets feed each loader arbitrary bytes, starting from the real first lines of each format. A
// loader must return a trace that keeps its invariants, or a one-line error naming the file; it must never
// panic. A trace it accepts must also come back the same through Write and Parse.

func FuzzAzure(f *testing.F) {
	f.Add([]byte(azureHead + "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:15:51.9189340,879,31\n"))
	f.Add([]byte(azureHead + "2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:04.0319600,3180,8\n2023-11-16 19:14:19.9280160,549,173"))
	f.Add([]byte(azureHead + "2024-05-10 00:00:00.009930+00:00,2162,5\n"))
	f.Fuzz(func(t *testing.T, data []byte) { checkParse(t, data, Azure) })
}

func FuzzMooncake(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}
{"timestamp": 0, "input_length": 7322, "output_length": 490, "hash_ids": [0, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27]}
{"timestamp": 0, "input_length": 2290, "output_length": 316, "hash_ids": [0, 42, 43, 44, 45]}
`))
	f.Add([]byte(`{"timestamp": 3536999, "input_length": 3224, "output_length": 386, "hash_ids": [0, 182744, 182745, 182746, 182747, 182748, 182749]}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) { checkParse(t, data, Mooncake) })
}

func FuzzVidur(f *testing.F) {
	f.Add([]byte(vidurHead + "0.0,374,44\n4.314579,396,109\n5.238334,879,31\n"))
	f.Add([]byte(vidurHead + "0.0,4808,10\n0.052,3180,8\n3435.948056,549,173\n"))
	f.Fuzz(func(t *testing.T, data []byte) { checkParse(t, data, Vidur) })
}

func FuzzLengths(f *testing.F) {
	f.Add([]byte(lengthsHead + "74,918,992,0.0806100217864923\n290,905,1195,0.3204419889502762\n"))
	f.Fuzz(func(t *testing.T, data []byte) { checkParse(t, data, Lengths) })
}

func FuzzBurstGPT(f *testing.F) {
	f.Add([]byte(burstHead + "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,230,1317,Conversation log\n118,GPT-4,417,276,693,Conversation log\n"))
	f.Add([]byte(burstNewHead + "19440110.0,1722ac82-0a46-4bf0-aa08-89794e7a2b3f,43,GPT-4,906,446,1352,Conversation log\n" +
		"19440161.0,d5983bf9-4b48-497b-892b-a58995247443,2,ChatGPT,36,29,65,Conversation log\n"))
	f.Fuzz(func(t *testing.T, data []byte) { checkParse(t, data, BurstGPT) })
}

// FuzzDetect starts from every format's first lines and lets Parse tell the format, with sorting on.
func FuzzDetect(f *testing.F) {
	for _, h := range []string{azureHead + "2023-11-16 18:15:46.6805900,374,44\n", vidurHead + "0.0,374,44\n",
		lengthsHead + "74,918,992,0.08\n", burstHead + "5,ChatGPT,472,18,490,Conversation log\n",
		`{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1]}` + "\n"} {
		f.Add([]byte(h))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkParse(t, data, "") })
}

func checkParse(t *testing.T, data []byte, format string) {
	tr, err := Parse("fuzz.csv", data, LoadOptions{Format: format, SortArrivals: format == ""})
	if err != nil {
		msg := err.Error()
		if strings.ContainsAny(msg, "\n\r") || !strings.HasPrefix(msg, "fuzz.csv") {
			t.Fatalf("error is not one line naming the file: %q", msg)
		}
		return
	}
	maxArrival := 0.0
	for i, r := range tr.Requests {
		if r.PromptTokens < 1 || r.OutputTokens < 1 || r.PromptTokens > maxTokens || r.OutputTokens > maxTokens {
			t.Fatalf("request %d has lengths %d/%d", i, r.PromptTokens, r.OutputTokens)
		}
		if math.IsNaN(r.Arrival) || math.IsInf(r.Arrival, 0) || r.Arrival < 0 || (i > 0 && r.Arrival < tr.Requests[i-1].Arrival) {
			t.Fatalf("request %d arrives at %g after %g", i, r.Arrival, tr.Requests[max(i-1, 0)].Arrival)
		}
		if tr.Reordered == 0 && i > 0 && r.Line <= tr.Requests[i-1].Line {
			t.Fatalf("request %d is on line %d after line %d", i, r.Line, tr.Requests[i-1].Line)
		}
		maxArrival = max(maxArrival, r.Arrival)
	}
	if len(tr.Requests) > 0 && tr.Requests[0].Arrival != 0 {
		t.Fatalf("first arrival %g, want 0", tr.Requests[0].Arrival)
	}
	Stats(tr)
	// Write and read back: the same requests, arrivals to within the written precision.
	out := tr.Format
	if out == BurstGPT {
		out = Vidur
	}
	if len(tr.Requests) == 0 || maxArrival > 1e6 || !slices.Contains(WriteFormats, out) {
		return
	}
	var buf bytes.Buffer
	if err := Write(&buf, tr, out); err != nil {
		t.Fatal(err)
	}
	back, err := Parse("back", buf.Bytes(), LoadOptions{})
	if err != nil {
		t.Fatalf("reading back what Write wrote: %v", err)
	}
	want := tr
	if out != Mooncake {
		want = withoutHashIDs(tr)
	}
	if err := sameRequests(back, want, 1e-6); err != nil {
		t.Fatal(err)
	}
}
