package kerneltest

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Golden files: testdata/golden/<op>.json at the module root, one file an op, written from kernels/ref with fixed
// seeds by tools/goldengen or by `go test ./kernels/... -update`. They let an implementation be checked where
// the float64 reference is not at hand (a device run) and pin the reference itself: VerifyGoldenFiles recomputes
// every case with kernels/ref.
//
// Format (JSON, one case a line so that a diff shows which case changed):
//
//	{"op": "GEMM",
//	 "about": "...",
//	 "cases": [
//	 {"name": "m=3/n=5/k=9", "case": {"M": 3, "N": 5, "K": 9, "A": [...], "W": [...]}, "want": {"c": [...]}},
//	 ...]}
//
// "case" holds the op's sizes and float32 inputs (in-place operands at their values before the call) in the
// layouts of kernels/ref, field names as the reference's parameters; "want" holds the float64 reference outputs
// by parameter name (in-place operands at their values after the call). Numbers are written in the shortest form
// that reads back to the same float32 or float64.

// update is the -update flag: `go test ./kernels/... -update` regenerates the golden files (the kerneltest
// package's own test writes them). It is defined here, in the package that every kernel test imports, so that
// each test binary of ./kernels/... accepts it; it is registered only in test binaries, not in commands such as
// tools/goldengen that import this package.
var update = registerUpdate()

func registerUpdate() *bool {
	if !testing.Testing() {
		return new(bool)
	}
	return flag.Bool("update", false, "regenerate testdata/golden from kernels/ref")
}

// Funcs is a set of implementations, one field an op, for TestGolden and TestAll; nil fields are skipped.
type Funcs struct {
	GEMM            GEMMFunc
	RMSNorm         RMSNormFunc
	AddRMSNorm      AddRMSNormFunc
	RoPE            RoPEFunc
	SwiGLU          SwiGLUFunc
	Softmax         SoftmaxFunc
	CausalAttention CausalAttentionFunc
	KVAppend        KVAppendFunc
	PagedAttention  PagedAttentionFunc
}

// TestAll runs the conformance test of every op that fs provides, then TestGolden.
func TestAll(t *testing.T, fs Funcs) { TestAllWith(t, fs, Options{}) }

// TestAllWith is TestAll for an implementation of another precision.
func TestAllWith(t *testing.T, fs Funcs, o Options) {
	t.Helper()
	sub := func(name string, present bool, test func(t *testing.T)) {
		if present {
			t.Run(name, test)
		}
	}
	sub("GEMM", fs.GEMM != nil, func(t *testing.T) { TestGEMMWith(t, fs.GEMM, o) })
	sub("RMSNorm", fs.RMSNorm != nil, func(t *testing.T) { TestRMSNormWith(t, fs.RMSNorm, o) })
	sub("AddRMSNorm", fs.AddRMSNorm != nil, func(t *testing.T) { TestAddRMSNormWith(t, fs.AddRMSNorm, o) })
	sub("RoPE", fs.RoPE != nil, func(t *testing.T) { TestRoPEWith(t, fs.RoPE, o) })
	sub("SwiGLU", fs.SwiGLU != nil, func(t *testing.T) { TestSwiGLUWith(t, fs.SwiGLU, o) })
	sub("Softmax", fs.Softmax != nil, func(t *testing.T) { TestSoftmaxWith(t, fs.Softmax, o) })
	sub("CausalAttention", fs.CausalAttention != nil, func(t *testing.T) { TestCausalAttentionWith(t, fs.CausalAttention, o) })
	sub("KVAppend", fs.KVAppend != nil, func(t *testing.T) { TestKVAppendWith(t, fs.KVAppend, o) })
	sub("PagedAttention", fs.PagedAttention != nil, func(t *testing.T) { TestPagedAttentionWith(t, fs.PagedAttention, o) })
	t.Run("Golden", func(t *testing.T) { TestGoldenWith(t, fs, o) })
}

// TestGolden checks every op that fs provides against the golden files, with the tolerances of TestX.
func TestGolden(t *testing.T, fs Funcs) { TestGoldenWith(t, fs, Options{}) }

// TestGoldenWith is TestGolden for an implementation of another precision. The golden inputs are float32; an
// InputRounding in o is not applied to them, so set ToleranceScale (and BaselineRounding) for the rounding the
// implementation does itself.
func TestGoldenWith(t *testing.T, fs Funcs, o Options) {
	t.Helper()
	dir, err := GoldenDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range goldenOps {
		data, err := os.ReadFile(filepath.Join(dir, g.file()))
		if err != nil {
			t.Errorf("%s: %v", g.op, err)
			continue
		}
		if err := g.check(data, fs, o, func(name string, err error) {
			t.Run(g.op+"/"+name, func(t *testing.T) {
				if err != nil {
					t.Error(err)
				}
			})
		}); err != nil {
			t.Errorf("%s: %v", g.file(), err)
		}
	}
}

// GoldenDir returns testdata/golden at the root of the module that contains the working directory.
func GoldenDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "testdata", "golden"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("kerneltest: no go.mod above the working directory, so no testdata/golden")
		}
		dir = parent
	}
}

// WriteGolden writes every op's golden file into dir, each through a temporary file and a rename, so that a test
// reading the files while they are regenerated sees either the old file or the new one.
func WriteGolden(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, g := range goldenOps {
		data, err := g.generate()
		if err != nil {
			return fmt.Errorf("%s: %w", g.op, err)
		}
		tmp, err := os.CreateTemp(dir, "."+g.file()+".*")
		if err != nil {
			return err
		}
		_, err = tmp.Write(data)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(tmp.Name(), 0o644)
		}
		if err == nil {
			err = os.Rename(tmp.Name(), filepath.Join(dir, g.file()))
		}
		if err != nil {
			os.Remove(tmp.Name())
			return err
		}
	}
	return nil
}

// VerifyGoldenFiles reads every op's golden file in dir and recomputes each case with kernels/ref: the outputs
// must agree to float64 rounding (nMSE <= 1e-24, room for a compiler that fuses multiply-adds). A corrupted file,
// a regenerated one that no longer matches the reference, or a changed reference fails.
func VerifyGoldenFiles(dir string) error {
	var errs []error
	for _, g := range goldenOps {
		data, err := os.ReadFile(filepath.Join(dir, g.file()))
		if err == nil {
			err = g.verify(data)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", g.file(), err))
		}
	}
	return errors.Join(errs...)
}

// goldenAbout is the "about" line of every golden file.
const goldenAbout = "written by tools/goldengen (or go test ./kernels/... -update) from kernels/ref with fixed seeds; " +
	"case: sizes and float32 inputs in kernels/ref's layouts; want: float64 reference outputs by parameter name"

type refCase interface{ reference() map[string][]float64 }

type goldenCase[C refCase] struct {
	Name string               `json:"name"`
	Case C                    `json:"case"`
	Want map[string][]float64 `json:"want"`
}

type goldenFile[C refCase] struct {
	Op    string          `json:"op"`
	About string          `json:"about"`
	Cases []goldenCase[C] `json:"cases"`
}

// goldenOp is one op's golden file, with the case type erased.
type goldenOp struct {
	op       string
	generate func() ([]byte, error)
	verify   func(data []byte) error
	check    func(data []byte, fs Funcs, o Options, report func(name string, err error)) error
}

func (g goldenOp) file() string { return strings.ToLower(g.op) + ".json" }

// newGoldenOp describes the golden file of op: cases builds its cases (inputs only), present says whether fs
// provides the op, check runs one case through it.
func newGoldenOp[C refCase](op string, cases func() []goldenCase[C], present func(fs Funcs) bool,
	check func(fs Funcs, c C, want map[string][]float64, o Options) error) goldenOp {
	decode := func(data []byte) ([]goldenCase[C], error) {
		var f goldenFile[C]
		if err := json.Unmarshal(data, &f); err != nil {
			return nil, err
		}
		if f.Op != op || len(f.Cases) == 0 {
			return nil, fmt.Errorf("op %q with %d cases, want op %q with cases", f.Op, len(f.Cases), op)
		}
		return f.Cases, nil
	}
	return goldenOp{
		op: op,
		generate: func() ([]byte, error) {
			var b bytes.Buffer
			head, err := json.Marshal(struct {
				Op    string `json:"op"`
				About string `json:"about"`
			}{op, goldenAbout})
			if err != nil {
				return nil, err
			}
			b.Write(head[:len(head)-1])
			b.WriteString(",\n\"cases\": [\n")
			cs := cases()
			for i, c := range cs {
				c.Want = c.Case.reference()
				line, err := json.Marshal(c)
				if err != nil {
					return nil, err
				}
				b.Write(line)
				if i < len(cs)-1 {
					b.WriteByte(',')
				}
				b.WriteByte('\n')
			}
			b.WriteString("]}\n")
			return b.Bytes(), nil
		},
		verify: func(data []byte) error {
			cs, err := decode(data)
			if err != nil {
				return err
			}
			var errs []error
			for _, c := range cs {
				if err := sameOutputs(c.Case.reference(), c.Want); err != nil {
					errs = append(errs, fmt.Errorf("case %s: %w", c.Name, err))
				}
			}
			return errors.Join(errs...)
		},
		check: func(data []byte, fs Funcs, o Options, report func(string, error)) error {
			cs, err := decode(data)
			if err != nil {
				return err
			}
			if present(fs) {
				for _, c := range cs {
					report(c.Name, check(fs, c.Case, c.Want, o))
				}
			}
			return nil
		},
	}
}

// sameOutputs compares recomputed reference outputs with a golden file's, output by output.
func sameOutputs(got, want map[string][]float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("file has %d outputs, kernels/ref %d", len(want), len(got))
	}
	for name, g := range got {
		w, ok := want[name]
		if !ok {
			return fmt.Errorf("output %q missing", name)
		}
		if len(w) != len(g) {
			return fmt.Errorf("output %q has %d values, kernels/ref %d", name, len(w), len(g))
		}
		var num, den float64
		for i := range g {
			num += (g[i] - w[i]) * (g[i] - w[i])
			den += g[i] * g[i]
		}
		if !(num <= 1e-24*den) || math.IsNaN(num) {
			return fmt.Errorf("output %q differs from kernels/ref: normalized MSE %.3g", name, num/den)
		}
	}
	return nil
}

// goldenCases builds the golden cases of op from shapes, with seeds of their own (not those of TestX).
func goldenCases[S interface{ Name() string }, C refCase](op string, shapes []S, mk func(S, *rand.Rand) C) func() []goldenCase[C] {
	return func() []goldenCase[C] {
		cs := make([]goldenCase[C], len(shapes))
		for i, s := range shapes {
			cs[i] = goldenCase[C]{Name: s.Name(), Case: mk(s, newRand("golden/"+op, s.Name()))}
		}
		return cs
	}
}

// goldenOps are the golden files: a few small cases of every op.
var goldenOps = []goldenOp{
	newGoldenOp("GEMM",
		goldenCases("GEMM", []GEMMShape{{1, 7, 17}, {3, 5, 9}, {7, 17, 33}},
			func(s GEMMShape, r *rand.Rand) *gemmCase { return newGEMMCase(s, r, Options{}) }),
		func(fs Funcs) bool { return fs.GEMM != nil },
		func(fs Funcs, c *gemmCase, want map[string][]float64, o Options) error {
			return c.check(fs.GEMM, want, o)
		}),
	newGoldenOp("RMSNorm",
		goldenCases("RMSNorm", []RowsShape{{2, 17}, {1, 64}},
			func(s RowsShape, r *rand.Rand) *rmsNormCase { return newRMSNormCase(s, r, Options{}) }),
		func(fs Funcs) bool { return fs.RMSNorm != nil },
		func(fs Funcs, c *rmsNormCase, want map[string][]float64, o Options) error {
			return c.check(fs.RMSNorm, want, o)
		}),
	newGoldenOp("AddRMSNorm",
		goldenCases("AddRMSNorm", []RowsShape{{2, 17}, {3, 8}},
			func(s RowsShape, r *rand.Rand) *addRMSNormCase { return newAddRMSNormCase(s, r, Options{}) }),
		func(fs Funcs) bool { return fs.AddRMSNorm != nil },
		func(fs Funcs, c *addRMSNormCase, want map[string][]float64, o Options) error {
			return c.check(fs.AddRMSNorm, want, o)
		}),
	newGoldenOp("RoPE",
		goldenCases("RoPE", []RoPEShape{{3, 2, 8, 10000}, {2, 1, 64, 500000}},
			func(s RoPEShape, r *rand.Rand) *ropeCase { return newRoPECase(s, r, Options{}) }),
		func(fs Funcs) bool { return fs.RoPE != nil },
		func(fs Funcs, c *ropeCase, want map[string][]float64, o Options) error {
			return c.check(fs.RoPE, want, o)
		}),
	newGoldenOp("SwiGLU",
		goldenCases("SwiGLU", []RowsShape{{1, 17}, {4, 25}},
			func(s RowsShape, r *rand.Rand) *swigluCase { return newSwiGLUCase(s, r, Options{}) }),
		func(fs Funcs) bool { return fs.SwiGLU != nil },
		func(fs Funcs, c *swigluCase, want map[string][]float64, o Options) error {
			return c.check(fs.SwiGLU, want, o)
		}),
	newGoldenOp("Softmax",
		goldenCases("Softmax", []RowsShape{{3, 7}, {2, 33}},
			func(s RowsShape, r *rand.Rand) *softmaxCase { return newSoftmaxCase(s, r, Options{}) }),
		func(fs Funcs) bool { return fs.Softmax != nil },
		func(fs Funcs, c *softmaxCase, want map[string][]float64, o Options) error {
			return c.check(fs.Softmax, want, o)
		}),
	newGoldenOp("CausalAttention",
		goldenCases("CausalAttention", []AttentionShape{{5, 9, 4, 2, 8}, {9, 9, 2, 2, 16}, {1, 13, 4, 1, 8}},
			func(s AttentionShape, r *rand.Rand) *attentionCase { return newAttentionCase(s, r, Options{}) }),
		func(fs Funcs) bool { return fs.CausalAttention != nil },
		func(fs Funcs, c *attentionCase, want map[string][]float64, o Options) error {
			return c.check(fs.CausalAttention, want, c.naiveError(want, o))
		}),
	newGoldenOp("KVAppend",
		goldenCases("KVAppend", []KVAppendShape{{3, 8, 2, 4}, {5, 6, 1, 8}},
			func(s KVAppendShape, r *rand.Rand) *kvAppendCase { return newKVAppendCase(s, r, Options{}, false) }),
		func(fs Funcs) bool { return fs.KVAppend != nil },
		func(fs Funcs, c *kvAppendCase, want map[string][]float64, o Options) error {
			return c.check(fs.KVAppend, want, o)
		}),
	newGoldenOp("PagedAttention",
		goldenCases("PagedAttention", []PagedShape{
			{Label: "batch=mixed", Seqs: []PagedSeq{{9, 1}, {6, 6}, {11, 3}}, BlockSize: 4, NHeads: 4, NKVHeads: 2, HeadDim: 8},
			{Label: "batch=decode", Seqs: []PagedSeq{{5, 1}, {1, 1}, {17, 1}}, BlockSize: 1, NHeads: 2, NKVHeads: 2, HeadDim: 8},
		}, func(s PagedShape, r *rand.Rand) *pagedCase { return newPagedCase(s, r, Options{}, false) }),
		func(fs Funcs) bool { return fs.PagedAttention != nil },
		func(fs Funcs, c *pagedCase, want map[string][]float64, o Options) error {
			return c.check(fs.PagedAttention, want, c.naiveError(want, o))
		}),
}
