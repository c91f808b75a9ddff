//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/morphlab/morphlab/kernels/half"
	"gorgonia.org/cu"
)

// The benchmarks time device-resident buffers: each iteration flushes the L2 cache (a 256 MB write), then times
// one launch with CUDA events; after three untimed warm-up runs, the median over b.N iterations is reported as
// us/median and as TFLOP/s or GB/s of that median, and kept for the -figures file. Run with a fixed count, e.g.
// -test.benchtime=20x.

// timeKernel reports run's median time, and flops/median as TFLOP/s and bytes/median as GB/s (each when > 0).
func timeKernel(b *testing.B, run func() error, flops, bytes float64) {
	b.Helper()
	times := make([]float64, 0, b.N)
	err := dev.Do(func() error {
		for range 3 {
			if err := run(); err != nil {
				return err
			}
		}
		for range b.N {
			ms, err := dev.Time(run)
			if err != nil {
				return err
			}
			times = append(times, ms)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	slices.Sort(times)
	med := times[len(times)/2] * 1e-3 // seconds
	f := figure{Name: b.Name(), N: b.N, MedianUS: med * 1e6}
	b.ReportMetric(f.MedianUS, "us/median")
	if flops > 0 {
		f.TFLOPS = flops / med / 1e12
		b.ReportMetric(f.TFLOPS, "TFLOP/s")
	}
	if bytes > 0 {
		f.GBPS = bytes / med / 1e9
		b.ReportMetric(f.GBPS, "GB/s")
	}
	if old, ok := figures[f.Name]; !ok || old.N <= f.N {
		figures[f.Name] = f
	}
}

// fillBlock is the random elements generated on the host for a device buffer; longer buffers repeat them
// (device-to-device copies), which changes nothing for a timing and keeps the setup of a 1 GiB cache short.
const fillBlock = 1 << 20

// devFill allocates a buffer of n elements and fills it with gen's block repeated. It must
// run inside Do.
func devFill[T any](n int, gen func(i int) T) (Buffer, error) {
	blk := make([]T, min(n, fillBlock))
	for i := range blk {
		blk[i] = gen(i)
	}
	var z T
	size := int64(len(blk)) * int64(unsafe.Sizeof(z))
	buf, err := Alloc(int64(n) * int64(unsafe.Sizeof(z)))
	if err != nil || n == 0 {
		return buf, err
	}
	src, err := Upload(blk)
	if err != nil {
		buf.Free()
		return Buffer{}, err
	}
	defer src.Free()
	for off := int64(0); off < buf.Bytes; off += size {
		if err := cu.MemcpyDtoD(buf.Ptr+cu.DevicePtr(off), src.Ptr, min(size, buf.Bytes-off)); err != nil {
			buf.Free()
			return Buffer{}, err
		}
	}
	return buf, nil
}

// devRand is n normal values stored as t.
func devRand(t DType, n int) (Buffer, error) {
	r := rand.New(rand.NewPCG(uint64(n), 3))
	switch t {
	case F16:
		return devFill(n, func(int) uint16 { return half.F32ToF16(float32(r.NormFloat64())) })
	case BF16:
		return devFill(n, func(int) uint16 { return half.F32ToBF16(float32(r.NormFloat64())) })
	}
	return devFill(n, func(int) float32 { return float32(r.NormFloat64()) })
}

// devBytes is n random bytes in [lo, hi].
func devBytes(n int, lo, hi int) (Buffer, error) {
	r := rand.New(rand.NewPCG(uint64(n), 5))
	return devFill(n, func(int) uint8 { return uint8(lo + r.IntN(hi-lo+1)) })
}

func devScales(n int) (Buffer, error) { return devFill(n, func(int) float32 { return 0.01 }) }

// bufs allocates inside Do and frees at the end of the benchmark.
type bufs struct {
	list []Buffer
	err  error
}

func (s *bufs) add(b Buffer, err error) Buffer {
	if s.err == nil {
		s.err = err
	}
	s.list = append(s.list, b)
	return b
}

func (s *bufs) free() {
	_ = dev.Do(func() error {
		for _, b := range s.list {
			b.Free()
		}
		return nil
	})
}

// BenchmarkCopy is the bandwidth ceiling: a device-to-device copy of 1 GiB, counted as read plus write.
func BenchmarkCopy(b *testing.B) {
	const n = 1 << 30
	var s bufs
	defer s.free()
	var src, dst Buffer
	if err := dev.Do(func() error {
		src, dst = s.add(Alloc(n)), s.add(Alloc(n))
		return s.err
	}); err != nil {
		b.Fatal(err)
	}
	b.Run("bytes=1GiB", func(b *testing.B) {
		timeKernel(b, func() error { return cu.MemcpyDtoD(dst.Ptr, src.Ptr, n) }, 0, 2*n)
	})
}

// benchGEMMShapes: decode batches of 1, 16 and 128 tokens (dot kernels, then split-K tensor cores) and a
// 4096-token prefill through a 4096 x 4096 projection.
var benchGEMMShapes = [][3]int{{1, 4096, 4096}, {16, 4096, 4096}, {128, 4096, 4096}, {4096, 4096, 4096}}

// BenchmarkGEMM times c = a·wᵀ for every weight format: dtype=f16, bf16 (16-bit weights and activations), w8a8
// (int8 both), w8a16 and w4a16 (group 128; f16 activations). TFLOP/s counts 2mnk; GB/s counts the weight bytes,
// which bound decode-sized m.
func BenchmarkGEMM(b *testing.B) {
	for _, sh := range benchGEMMShapes {
		m, n, k := sh[0], sh[1], sh[2]
		for _, dt := range []string{"f16", "bf16", "w8a8", "w8a16", "w4a16"} {
			b.Run(fmt.Sprintf("m=%d/n=%d/k=%d/dtype=%s", m, n, k, dt), func(b *testing.B) {
				var s bufs
				defer s.free()
				var run func() error
				wbytes := float64(n * k * 2)
				err := dev.Do(func() error {
					c := s.add(Alloc(int64(m * n * 4)))
					switch dt {
					case "f16", "bf16":
						t := map[string]DType{"f16": F16, "bf16": BF16}[dt]
						a, w := s.add(devRand(t, m*k)), s.add(devRand(t, n*k))
						run = func() error { return dev.GEMMOn(t, m, n, k, a, w, c) }
					case "w8a8":
						a, w := s.add(devBytes(m*k, 0, 255)), s.add(devBytes(n*k, 0, 255))
						sa, sw := s.add(devScales(m)), s.add(devScales(n))
						run = func() error { return dev.GEMMW8A8On(m, n, k, a, sa, w, sw, c) }
						wbytes = float64(n * k)
					case "w8a16":
						a, w, sw := s.add(devRand(F16, m*k)), s.add(devBytes(n*k, 0, 255)), s.add(devScales(n))
						run = func() error { return dev.GEMMW8A16On(F16, m, n, k, a, w, sw, c) }
						wbytes = float64(n * k)
					case "w4a16":
						const group = 128
						a, w := s.add(devRand(F16, m*k)), s.add(devBytes(n*k/2, 0, 255))
						sc, z := s.add(devScales(n*k/group)), s.add(devBytes(n*k/group, 0, 15))
						run = func() error { return dev.GEMMW4A16On(F16, m, n, k, group, a, w, sc, z, c) }
						wbytes = float64(n*k/2) + float64(n*k/group)*5
					}
					return s.err
				})
				if err != nil {
					b.Fatal(err)
				}
				timeKernel(b, run, 2*float64(m)*float64(n)*float64(k), wbytes)
			})
		}
	}
}

// BenchmarkFlashPrefill times causal prefill attention on tensor cores; TFLOP/s counts 4·pairs·heads·headDim
// (Q·Kᵀ and P·V over the causal (query, key) pairs).
func BenchmarkFlashPrefill(b *testing.B) {
	for _, sh := range [][4]int{{4096, 32, 8, 128}, {2048, 32, 8, 128}, {4096, 32, 32, 64}} {
		nq, nHeads, nKV, hd := sh[0], sh[1], sh[2], sh[3]
		for _, t := range []DType{BF16, F16} {
			b.Run(fmt.Sprintf("nq=%d/heads=%d/kvheads=%d/hd=%d/dtype=%v", nq, nHeads, nKV, hd, t), func(b *testing.B) {
				var s bufs
				defer s.free()
				var run func() error
				err := dev.Do(func() error {
					q, o := s.add(devRand(t, nq*nHeads*hd)), s.add(devRand(t, nq*nHeads*hd))
					k, v := s.add(devRand(t, nq*nKV*hd)), s.add(devRand(t, nq*nKV*hd))
					scale := float32(1 / math.Sqrt(float64(hd)))
					run = func() error { return dev.FlashPrefillOn(t, o, q, k, v, nq, nq, nHeads, nKV, hd, scale) }
					return s.err
				})
				if err != nil {
					b.Fatal(err)
				}
				pairs := float64(nq) * float64(nq+1) / 2
				timeKernel(b, run, 4*pairs*float64(nHeads*hd), 0)
			})
		}
	}
}

// BenchmarkPagedDecode times one decode step (one query a sequence) over a paged cache of 16-token blocks in a
// shuffled order; GB/s counts the K and V bytes read.
func BenchmarkPagedDecode(b *testing.B) {
	for _, sh := range [][5]int{{64, 4096, 32, 8, 128}, {32, 1024, 32, 8, 128}, {4, 32768, 32, 8, 128}, {128, 2048, 32, 8, 128}} {
		batch, ctx, nHeads, nKV, hd := sh[0], sh[1], sh[2], sh[3], sh[4]
		for _, t := range []DType{BF16, F16} {
			const bs = 16
			b.Run(fmt.Sprintf("batch=%d/ctx=%d/heads=%d/kvheads=%d/hd=%d/dtype=%v", batch, ctx, nHeads, nKV, hd, t), func(b *testing.B) {
				var s bufs
				defer s.free()
				var run func() error
				err := dev.Do(func() error {
					per := ctx / bs
					nBlocks := batch * per
					r := rand.New(rand.NewPCG(9, 9))
					table := make([]int32, nBlocks)
					for i, p := range r.Perm(nBlocks) {
						table[i] = int32(p)
					}
					qStart, lens := make([]int32, batch+1), make([]int32, batch)
					for i := range lens {
						qStart[i+1] = int32(i + 1)
						lens[i] = int32(ctx)
					}
					kc, vc := s.add(devRand(t, nBlocks*bs*nKV*hd)), s.add(devRand(t, nBlocks*bs*nKV*hd))
					q, o := s.add(devRand(t, batch*nHeads*hd)), s.add(devRand(t, batch*nHeads*hd))
					qs, ls, bt := s.add(Upload(qStart)), s.add(Upload(lens)), s.add(Upload(table))
					plan := dev.PlanPaged(batch, nHeads, nKV, hd, ctx)
					ws := s.add(Alloc(plan.WorkspaceBytes))
					scale := float32(1 / math.Sqrt(float64(hd)))
					run = func() error {
						return dev.PagedAttentionOn(t, plan, ws, o, q, kc, vc, qs, ls, bt, batch, batch, per, bs, nHeads, nKV,
							hd, scale)
					}
					return s.err
				})
				if err != nil {
					b.Fatal(err)
				}
				timeKernel(b, run, 0, float64(batch)*float64(ctx)*float64(nKV*hd)*2*float64(t.Size()))
			})
		}
	}
}

// BenchmarkFused times the memory-bound row and elementwise kernels in bf16 on 8192 tokens of a 4096-wide model
// (64 MB a tensor); GB/s counts the bytes each reads and writes.
func BenchmarkFused(b *testing.B) {
	const rows, dim = 8192, 4096
	const n = rows * dim
	var s bufs
	defer s.free()
	var x, y, r, w, pos Buffer
	if err := dev.Do(func() error {
		x, y, r, w = s.add(devRand(BF16, n)), s.add(devRand(BF16, n)), s.add(devRand(BF16, n)), s.add(devRand(BF16, dim))
		p := make([]int32, rows)
		for i := range p {
			p[i] = int32(i)
		}
		pos = s.add(Upload(p))
		return s.err
	}); err != nil {
		b.Fatal(err)
	}
	const e = 2 // bytes an element
	cases := []struct {
		name  string
		bytes float64
		run   func() error
	}{
		{"op=rmsnorm", 2 * n * e, func() error { return dev.RMSNormOn(BF16, y, x, w, rows, dim, 1e-5) }},
		{"op=add_rmsnorm", 4 * n * e, func() error { return dev.AddRMSNormOn(BF16, y, r, x, w, rows, dim, 1e-5) }},
		{"op=swiglu", 3 * n * e, func() error { return dev.SwiGLUOn(BF16, y, x, r, n) }},
		{"op=softmax", 2 * n * e, func() error { return dev.SoftmaxOn(BF16, y, rows, dim) }},
		{"op=rope", 2 * n * e, func() error { return dev.RoPEOn(BF16, x, pos, rows, 32, 128, 10000) }},
		{"op=kv_append", 4 * n * e / 4, func() error { return dev.KVAppendOn(BF16, y, r, x, x, pos, rows, dim/4) }},
	}
	for _, c := range cases {
		b.Run(fmt.Sprintf("rows=%d/dim=%d/%s/dtype=bf16", rows, dim, c.name), func(b *testing.B) {
			timeKernel(b, c.run, 0, c.bytes)
		})
	}
}
