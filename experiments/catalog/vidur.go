package catalog

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/morphlab/morphlab/engine/executor/costmodel"
	"github.com/morphlab/morphlab/internal/datadir"
)

// VidurOps are the operators of Vidur's mlp.csv profiles, in its column order.
var VidurOps = []string{
	costmodel.OpEmbedding, costmodel.OpInputNorm, costmodel.OpPreProj, costmodel.OpRoPE, costmodel.OpPostProj,
	costmodel.OpPostAttnNorm, costmodel.OpUpProj, costmodel.OpAct, costmodel.OpDownProj, costmodel.OpAdd,
}

// VidurRow is one profiled configuration of a Vidur mlp.csv: the model's shape as Vidur records it, a token
// count, a tensor-parallel degree and each operator's median time in milliseconds for one decoder layer.
type VidurRow struct {
	Heads, KVHeads, Embd, ExpandedEmbd int
	Tokens, TensorParallel             int
	Median                             map[string]float64 // by VidurOps name, ms
}

// ReadVidur parses a Vidur mlp.csv (data/profiles/vidur, see SOURCES.md). name labels errors, which give the
// line and column of a bad field.
func ReadVidur(r io.Reader, name string) ([]VidurRow, error) {
	cr := csv.NewReader(r)
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: header: %v", name, err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	need := []string{"n_head", "n_kv_head", "n_embd", "n_expanded_embd", "num_tokens", "num_tensor_parallel_workers"}
	for _, op := range VidurOps {
		need = append(need, "time_stats."+op+".median")
	}
	for _, n := range need {
		if _, ok := col[n]; !ok {
			return nil, fmt.Errorf("%s: header has no column %s", name, n)
		}
	}
	var rows []VidurRow
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
		line, _ := cr.FieldPos(0)
		integer := func(field string) (int, error) {
			v, err := strconv.Atoi(strings.TrimSpace(rec[col[field]]))
			if err != nil || v <= 0 {
				return 0, fmt.Errorf("%s:%d: %s %q, want a positive integer", name, line, field, rec[col[field]])
			}
			return v, nil
		}
		row := VidurRow{Median: map[string]float64{}}
		for _, f := range []struct {
			name string
			dst  *int
		}{{"n_head", &row.Heads}, {"n_kv_head", &row.KVHeads}, {"n_embd", &row.Embd}, {"n_expanded_embd", &row.ExpandedEmbd},
			{"num_tokens", &row.Tokens}, {"num_tensor_parallel_workers", &row.TensorParallel}} {
			if *f.dst, err = integer(f.name); err != nil {
				return nil, err
			}
		}
		for _, op := range VidurOps {
			field := "time_stats." + op + ".median"
			v, err := strconv.ParseFloat(strings.TrimSpace(rec[col[field]]), 64)
			if err != nil || !(v > 0) || v > 1e6 {
				return nil, fmt.Errorf("%s:%d: %s %q, want a time in ms > 0", name, line, field, rec[col[field]])
			}
			row.Median[op] = v
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no profiled rows", name)
	}
	return rows, nil
}

// VidurPath is the data-relative path of Vidur's profile of model m on device gpu.
func VidurPath(gpu string, m Model) string {
	return filepath.ToSlash(filepath.Join("profiles", "vidur", gpu, m.Vidur, "mlp.csv"))
}

// VidurMeasurements reads Vidur's profile of m on device hw from the data directory and returns its
// tensor-parallel-1 rows as measurements of the given operators (all of VidurOps when ops is empty). It fails
// when the profile is missing or records a shape other than m's.
func VidurMeasurements(m Model, hw costmodel.Hardware, ops ...string) ([]costmodel.Measurement, error) {
	if m.Vidur == "" {
		return nil, fmt.Errorf("catalog: Vidur has no profile of %s", m.Name)
	}
	path, err := datadir.Path(VidurPath(hw.Name, m))
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := ReadVidur(f, path)
	if err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		ops = VidurOps
	}
	var out []costmodel.Measurement
	for _, r := range rows {
		if r.TensorParallel != 1 {
			continue
		}
		c := m.Config
		if r.Heads != c.NHeads || r.KVHeads != c.NKVHeads || r.Embd != c.Dim || r.ExpandedEmbd != c.HiddenDim {
			return nil, fmt.Errorf("%s: profiled shape heads=%d kv_heads=%d embd=%d expanded=%d, %s has %d, %d, %d, %d",
				path, r.Heads, r.KVHeads, r.Embd, r.ExpandedEmbd, m.Name, c.NHeads, c.NKVHeads, c.Dim, c.HiddenDim)
		}
		for _, op := range ops {
			out = append(out, costmodel.Measurement{Op: op, Tokens: r.Tokens, Config: c, Hardware: hw, Seconds: r.Median[op] / 1e3})
		}
	}
	return out, nil
}
