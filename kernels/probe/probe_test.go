package probe

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestReadKernelsSum(t *testing.T) {
	// Lengths around the 32- and 64-word blocks of the assembly, and words near 2^64 so that the sum wraps.
	for _, k := range readKernels {
		for _, n := range []int{0, 1, 31, 32, 63, 64, 65, 127, 128, 1000, 4096 + 17} {
			p := make([]uint64, n)
			var want uint64
			for i := range p {
				p[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
				want += p[i]
			}
			if got := k.sum(p); got != want {
				t.Errorf("%s: sum of %d words = %#x, want %#x", k.name, n, got, want)
			}
		}
	}
}

func TestFMAKernels(t *testing.T) {
	// acc += 0.5*0.25 adds exactly 1/8 per iteration; distinct starting values show each chain is its own.
	const a, b = 0.5, 0.25
	for _, k := range fmaKernels {
		for _, n := range []int{0, 1, 1000} {
			acc := make([]float32, k.accLen)
			for j := range acc {
				acc[j] = float32(j) - 7
			}
			k.run(acc, a, b, n)
			for j, got := range acc {
				if want := float64(j) - 7 + float64(n)*a*b; float64(got) != want {
					t.Fatalf("%s: after %d iterations acc[%d] = %v, want %v", k.name, n, j, got, want)
				}
			}
		}
	}
}

func TestDotKernels(t *testing.T) {
	// Unsigned bytes 200, 1, 37, 255 and signed bytes -3, 127, -128, 5, low byte first: a swap of the signed and
	// unsigned operands, or a signed reading of 200 and 255, gives a different sum.
	const u, s = 0xff2501c8, 0x05807ffd
	per := int64(200*-3 + 1*127 + 37*-128 + 255*5)
	for _, k := range dotKernels {
		for _, n := range []int{0, 1, 777} {
			acc := make([]int32, k.accLen)
			for j := range acc {
				acc[j] = int32(1000*j - 50000)
			}
			k.run(acc, u, s, n)
			for j, got := range acc {
				if want := int64(1000*j-50000) + int64(n)*per; int64(got) != want {
					t.Fatalf("%s: after %d iterations acc[%d] = %d, want %d", k.name, n, j, got, want)
				}
			}
		}
	}
}

func TestBandwidthAt(t *testing.T) {
	c := Ceilings{Bandwidth: []BandwidthPoint{{1 << 10, 10}, {4 << 10, 30}, {64 << 10, 6}}}
	for _, tc := range []struct {
		bytes int64
		want  float64
	}{
		{1 << 10, 10}, {4 << 10, 30}, {64 << 10, 6}, // the measured points
		{2 << 10, 20},           // halfway in log(size) between 1 KiB and 4 KiB
		{16 << 10, 18},          // halfway between 4 KiB and 64 KiB
		{100, 10}, {1 << 30, 6}, // outside: the nearest end
	} {
		if got := c.BandwidthAt(tc.bytes); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("BandwidthAt(%d) = %v, want %v", tc.bytes, got, tc.want)
		}
	}
	if got := (Ceilings{}).BandwidthAt(1 << 20); got != 0 {
		t.Errorf("BandwidthAt with no points = %v, want 0", got)
	}
}

func sample() Ceilings {
	return Ceilings{
		CPU: "Test CPU", Cores: 8, Threads: 2, Features: []string{"avx2", "fma"},
		Bandwidth:     []BandwidthPoint{{32 << 10, 400.5}, {256 << 20, 25.25}},
		FMAPeakGFLOPS: 380, Int8DotPeakGOPS: 1500,
		ReadKernel: "avx2", FMAKernel: "avx2fma", Int8Kernel: "avx2",
		MeasuredAt: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC),
	}
}

func TestSaveLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "probe.json")
	want := sample()
	if err := want.Save(path); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load(Save(c)) = %+v, want %+v", got, want)
	}
	// The field names are the file format that other tools read.
	var fields map[string]any
	data, _ := os.ReadFile(path)
	if err := json.Unmarshal(data, &fields); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"version", "cpu", "cores", "threads", "features", "bandwidth", "fma_peak_gflops",
		"int8_dot_peak_gops", "read_kernel", "fma_kernel", "int8_kernel", "measured_at"} {
		if _, ok := fields[name]; !ok {
			t.Errorf("saved JSON has no field %q: %s", name, data)
		}
	}
}

func TestLoadBadFile(t *testing.T) {
	dir := t.TempDir()
	good, _ := json.Marshal(sample())
	for _, tc := range []struct{ name, content, want string }{
		{"syntax.json", `{"version": 1, "cpu": `, "unexpected EOF"},
		{"version.json", strings.Replace(string(good), `"version":1`, `"version":7`, 1), "format version 7, want 1"},
		{"nopoints.json", `{"version": 1, "fma_peak_gflops": 1, "int8_dot_peak_gops": 1}`, "no bandwidth points"},
		{"negative.json", strings.Replace(string(good), `"gbps":25.25`, `"gbps":-1`, 1), "bandwidth[1]"},
		{"order.json", strings.Replace(string(good), `"bytes":268435456`, `"bytes":1024`, 1), "want more than"},
		{"nopeak.json", strings.Replace(string(good), `"fma_peak_gflops":380`, `"fma_peak_gflops":0`, 1), "fma_peak_gflops = 0"},
	} {
		path := filepath.Join(dir, tc.name)
		if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%s) error = %v, want one naming the file and %q", tc.name, err, tc.want)
		}
	}
	missing := filepath.Join(dir, "missing.json")
	if _, err := Load(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load(missing) error = %v, want one naming %s", err, missing)
	}
}

func TestMeasureQuick(t *testing.T) {
	opt := QuickOptions()
	opt.Sizes = []int64{1 << 20, 32 << 10, 1 << 20} // unsorted, with a duplicate
	var calls []int
	opt.Progress = func(done, total int) {
		if total != 4 {
			t.Errorf("progress total = %d, want 4 (2 sizes + FMA + int8)", total)
		}
		calls = append(calls, done)
	}
	c := MeasureWith(2, opt)
	if !reflect.DeepEqual(calls, []int{1, 2, 3, 4}) {
		t.Errorf("progress calls = %v, want [1 2 3 4]", calls)
	}
	if c.Threads != 2 || c.Cores < 1 || c.CPU == "" || c.MeasuredAt.IsZero() {
		t.Errorf("Measure: threads %d cores %d cpu %q at %v", c.Threads, c.Cores, c.CPU, c.MeasuredAt)
	}
	if c.ReadKernel != readKernels[0].name || c.FMAKernel != fmaKernels[0].name || c.Int8Kernel != dotKernels[0].name {
		t.Errorf("Measure kernels %s/%s/%s, want the first of each list", c.ReadKernel, c.FMAKernel, c.Int8Kernel)
	}
	if err := c.validate(); err != nil {
		t.Errorf("Measure gave invalid ceilings: %v", err)
	}
	if len(c.Bandwidth) != 2 || c.Bandwidth[0].Bytes != 32<<10 || c.Bandwidth[1].Bytes != 1<<20 {
		t.Errorf("Measure bandwidth points %+v, want 32 KiB and 1 MiB", c.Bandwidth)
	}
}

func TestCached(t *testing.T) {
	reset := func() { cachedOnce, cached = sync.Once{}, Ceilings{} }
	t.Cleanup(reset)

	path := filepath.Join(t.TempDir(), "probe.json")
	want := sample()
	if err := want.Save(path); err != nil {
		t.Fatal(err)
	}
	reset()
	t.Setenv(EnvFile, path)
	if got := Cached(); !reflect.DeepEqual(got, want) {
		t.Errorf("Cached with $%s = %+v, want %+v", EnvFile, got, want)
	}

	reset()
	bad := filepath.Join(t.TempDir(), "bad.json")
	t.Setenv(EnvFile, bad)
	defer func() {
		msg, _ := recover().(string)
		if !strings.Contains(msg, bad) || !strings.Contains(msg, EnvFile) {
			t.Errorf("Cached with a missing file panicked with %q, want a message naming %s and $%s", msg, bad, EnvFile)
		}
	}()
	Cached()
}

func TestMedian(t *testing.T) {
	if got := median([]float64{5, 1, 3}); got != 3 {
		t.Errorf("median(5 1 3) = %v, want 3", got)
	}
	if got := median([]float64{4, 1, 3, 10}); got != 3 {
		t.Errorf("median(4 1 3 10) = %v, want 3, the lower middle value", got)
	}
}

func TestReadBandwidth(t *testing.T) {
	for _, threads := range []int{0, 1, 2} {
		if gbps := ReadBandwidth(threads, 1<<20); !(gbps > 0) || math.IsInf(gbps, 0) {
			t.Errorf("ReadBandwidth(%d, 1 MiB) = %v GB/s, want a positive finite rate", threads, gbps)
		}
	}
}
