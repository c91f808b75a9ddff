//go:build !noasm

package cpu

import (
	"unsafe"

	xcpu "golang.org/x/sys/cpu"
)

// attnAVX512 selects the AVX-512 micro-kernels of attn_amd64.s (the softmax also shifts with BMI2). Tests clear
// it to check the pure-Go path on the same machine.
var attnAVX512 = xcpu.X86.HasAVX512F && xcpu.X86.HasAVX512DQ && xcpu.X86.HasBMI2

// attnAVX2 selects the AVX2 twins of attn_avx2_amd64.s where AVX-512 is missing: QK, PV, the keys' dot products
// and the values' axpys, for head dims of a multiple of 8 (QK: any). The softmax and the fused decode stay Go's
// there.
var attnAVX2 = xcpu.X86.HasAVX2 && xcpu.X86.HasFMA && xcpu.X86.HasF16C

// The wrappers check in Go the extents the assembly will touch, so that a bad call panics instead of reading
// or writing out of bounds.

func attnQK(s, q, kt []float32, hd int) {
	if !attnAVX512 {
		if attnAVX2 && hd > 0 {
			_, _, _ = s[attnRows*attnCols-1], q[attnRows*hd-1], kt[hd*attnCols-1]
			attnQKAVX2(&s[0], &q[0], &kt[0], hd)
			return
		}
		attnQKGo(s, q, kt, hd)
		return
	}
	_, _, _ = s[attnRows*attnCols-1], q[attnRows*hd-1], kt[hd*attnCols-1]
	attnQKAVX512(&s[0], &q[0], &kt[0], hd)
}

func attnSoftmax(s, m, l, alpha []float32, cnt []int32, rows int) {
	if !attnAVX512 {
		attnSoftmaxGo(s, m, l, alpha, cnt, rows)
		return
	}
	if rows < 1 || rows > attnRows {
		panic("cpu: attnSoftmax: rows out of range")
	}
	_, _, _, _, _ = s[rows*attnCols-1], m[rows-1], l[rows-1], alpha[rows-1], cnt[rows-1]
	for _, c := range cnt[:rows] {
		if c < 0 || c > attnCols {
			panic("cpu: attnSoftmax: count out of range")
		}
	}
	attnSoftmaxAVX512(&s[0], &m[0], &l[0], &alpha[0], &cnt[0], rows)
}

func attnPV(o, p, v []float32, vStride, nk, hd int, alpha []float32) {
	hdPad := (hd + attnCols - 1) / attnCols * attnCols
	if !attnAVX512 {
		if attnAVX2 && hd%8 == 0 && hd > 0 && nk > 0 {
			_, _, _, _ = o[(attnRows-1)*hdPad+hd-1], p[attnRows*attnCols-1], v[(nk-1)*vStride+hd-1], alpha[attnRows-1]
			attnPVAVX2(&o[0], &p[0], &v[0], vStride, nk, hd, hdPad, &alpha[0])
			return
		}
		attnPVGo(o, p, v, vStride, nk, hd, alpha)
		return
	}
	_, _, _, _ = o[attnRows*hdPad-1], p[attnRows*attnCols-1], v[(nk-1)*vStride+hd-1], alpha[attnRows-1]
	attnPVAVX512(&o[0], &p[0], &v[0], vStride, nk, hd, &alpha[0])
}

func attnKeys(s, q, k []float32, kStride, nk, rows, hd int) {
	if !attnAVX512 {
		if attnAVX2 && hd%8 == 0 && hd > 0 && nk > 0 && rows >= 1 && rows <= attnKeysDotRows && kStride >= hd {
			_, _, _ = s[(rows-1)*attnCols+nk-1], q[(rows-1)*attnRound16(hd)+hd-1], k[(nk-1)*kStride+hd-1]
			attnKeysAVX2(&s[0], &q[0], &k[0], kStride, nk, rows, hd)
			return
		}
		attnKeysGo(s, q, k, kStride, nk, rows, hd)
		return
	}
	if nk < 1 || nk > attnCols || rows < 1 || hd < 1 || kStride < hd {
		panic("cpu: attnKeys: size out of range")
	}
	_, _, _ = s[rows*attnCols-1], q[rows*attnRound16(hd)-1], k[(nk-1)*kStride+hd-1]
	if rows <= attnKeysDotRows {
		attnKeysDotAVX512(&s[0], &q[0], &k[0], kStride, nk, rows, hd)
		return
	}
	attnKeysAVX512(&s[0], &q[0], &k[0], kStride, nk, rows, hd)
}

// attnKeysF16 is attnKeys for fewer than attnPVRows rows over binary16 keys, which the AVX-512 kernel widens
// as it loads them.
func attnKeysF16(s, q []float32, k []uint16, kStride, nk, rows, hd int) {
	if !attnAVX512 {
		if attnAVX2 && hd%8 == 0 && hd > 0 && nk > 0 && rows >= 1 && rows <= attnKeysDotRows && kStride >= hd {
			_, _, _ = s[(rows-1)*attnCols+nk-1], q[(rows-1)*attnRound16(hd)+hd-1], k[(nk-1)*kStride+hd-1]
			attnKeysF16AVX2(&s[0], &q[0], &k[0], kStride, nk, rows, hd)
			return
		}
		attnKeysF16Go(s, q, k, kStride, nk, rows, hd)
		return
	}
	if nk < 1 || nk > attnCols || rows < 1 || rows > attnKeysDotRows || hd < 1 || kStride < hd {
		panic("cpu: attnKeysF16: size out of range")
	}
	_, _, _ = s[rows*attnCols-1], q[rows*attnRound16(hd)-1], k[(nk-1)*kStride+hd-1]
	attnKeysDotF16AVX512(&s[0], &q[0], &k[0], kStride, nk, rows, hd)
}

// attnAxpysF16 is attnAxpys over binary16 value rows.
func attnAxpysF16(o, p []float32, v []uint16, vStride int, alpha float32) {
	if !attnAVX512 || len(p) == 0 {
		if attnAVX2 && len(p) > 0 && len(o)%8 == 0 && len(o) > 0 {
			_ = v[(len(p)-1)*vStride+len(o)-1]
			attnAxpysF16AVX2(&o[0], &p[0], &v[0], vStride, len(p), len(o), alpha)
			return
		}
		attnAxpysF16Go(o, p, v, vStride, alpha)
		return
	}
	_ = v[(len(p)-1)*vStride+len(o)-1]
	attnAxpysF16AVX512(&o[0], &p[0], &v[0], vStride, len(p), len(o), alpha)
}

func attnAxpys(o, p, v []float32, vStride int, alpha float32) {
	if !attnAVX512 || len(p) == 0 {
		if attnAVX2 && len(p) > 0 && len(o)%8 == 0 && len(o) > 0 {
			_ = v[(len(p)-1)*vStride+len(o)-1]
			attnAxpysAVX2(&o[0], &p[0], &v[0], vStride, len(p), len(o), alpha)
			return
		}
		attnAxpysGo(o, p, v, vStride, alpha)
		return
	}
	_ = v[(len(p)-1)*vStride+len(o)-1]
	attnAxpysAVX512(&o[0], &p[0], &v[0], vStride, len(p), len(o), alpha)
}

func attnPackKT(dst, src []float32, stride, s0, n, hd int) {
	if !attnAVX512 {
		attnPackKTGo(dst, src, stride, s0, n, hd)
		return
	}
	if n < 1 || n > attnCols || hd < 1 || stride < hd {
		panic("cpu: attnPackKT: size out of range")
	}
	_, _ = dst[hd*attnCols-1], src[(s0+n-1)*stride+hd-1]
	attnPackKTAVX512(&dst[0], &src[s0*stride], stride, n, hd)
}

// attnPrefetch asks for x to be brought into the cache; it reads nothing that results depend on.
func attnPrefetch(x []float32) {
	if len(x) > 0 {
		attnPrefetchAVX512(&x[0], len(x))
	}
}

// attnPrefetchF16 is attnPrefetch for binary16 values.
func attnPrefetchF16(x []uint16) {
	if len(x) > 0 {
		attnPrefetchAVX512((*float32)(unsafe.Pointer(&x[0])), (len(x)+1)/2)
	}
}

// attnPrefetchI8 is attnPrefetch for int8 codes.
func attnPrefetchI8(x []int8) {
	if len(x) > 0 {
		attnPrefetchAVX512((*float32)(unsafe.Pointer(&x[0])), (len(x)+3)/4)
	}
}

// attnDecodeFused reports whether attnDecode runs for an item of n query rows a sequence.
func attnDecodeFused(n, hd int) bool { return attnAVX512 && n == 1 && hd%16 == 0 }

// attnDecode is attnDecodeGo's AVX-512 twin (attnDecodeFused says when it runs).
func attnDecode(c pagedCache, q []float32, off, kvRow, nt, heads, group, hd int, m, l, o []float32, pf *attnNext) {
	if nt < 1 || nt > attnDecodeCols || hd%16 != 0 || group < 1 {
		panic("cpu: attnDecode: size out of range")
	}
	nq := heads * group
	_, _, _, _ = q[nq*hd-1], m[nq-1], l[nq-1], o[nq*hd-1]
	last := off + (nt-1)*kvRow + heads*hd - 1
	if c.k8 != nil {
		_, _, _, _ = c.k8[last], c.v8[last], c.ks[last/hd], c.vs[last/hd]
		attnDecodeI8AVX512(&q[0], &c.k8[off], &c.v8[off], kvRow, nt, nq, hd, &m[0], &l[0], &o[0], pf, group,
			&c.ks[off/hd], &c.vs[off/hd], 4*kvRow/hd)
		return
	}
	if c.k16 != nil {
		_, _ = c.k16[last], c.v16[last]
		attnDecodeF16AVX512(&q[0], &c.k16[off], &c.v16[off], 2*kvRow, nt, nq, hd, &m[0], &l[0], &o[0], pf, group)
		return
	}
	_, _ = c.k[last], c.v[last]
	attnDecodeAVX512(&q[0], &c.k[off], &c.v[off], 4*kvRow, nt, nq, hd, &m[0], &l[0], &o[0], pf, group)
}

// The AVX2 and AVX-512 twins of the attn*Go loops (same docs), on the first elements of the slices.

//go:noescape
func attnQKAVX2(s, q, kt *float32, hd int)

//go:noescape
func attnPVAVX2(o, p, v *float32, vStride, nk, hd, hdPad int, alpha *float32)

//go:noescape
func attnKeysAVX2(s, q, k *float32, kStride, nk, rows, hd int)

//go:noescape
func attnKeysF16AVX2(s, q *float32, k *uint16, kStride, nk, rows, hd int)

//go:noescape
func attnAxpysAVX2(o, p, v *float32, vStride, n, hd int, alpha float32)

//go:noescape
func attnAxpysF16AVX2(o, p *float32, v *uint16, vStride, n, hd int, alpha float32)

//go:noescape
func attnQKAVX512(s, q, kt *float32, hd int)

//go:noescape
func attnSoftmaxAVX512(s, m, l, alpha *float32, cnt *int32, rows int)

//go:noescape
func attnPVAVX512(o, p, v *float32, vStride, nk, hd int, alpha *float32)

//go:noescape
func attnKeysAVX512(s, q, k *float32, kStride, nk, rows, hd int)

//go:noescape
func attnAxpysAVX512(o, p, v *float32, vStride, n, hd int, alpha float32)

//go:noescape
func attnAxpysF16AVX512(o, p *float32, v *uint16, vStride, n, hd int, alpha float32)

//go:noescape
func attnKeysDotF16AVX512(s, q *float32, k *uint16, kStride, nk, rows, hd int)

//go:noescape
func attnPrefetchAVX512(p *float32, n int)

//go:noescape
func attnDecodeAVX512(q, k, v *float32, stride, nt, heads, hd int, m, l, o *float32, pf *attnNext, group int)

//go:noescape
func attnDecodeF16AVX512(q *float32, k, v *uint16, stride, nt, heads, hd int, m, l, o *float32, pf *attnNext,
	group int)

//go:noescape
func attnDecodeI8AVX512(q *float32, k, v *int8, stride, nt, heads, hd int, m, l, o *float32, pf *attnNext,
	group int, ks, vs *float32, sstride int)

//go:noescape
func attnPackKTAVX512(dst, src *float32, stride, n, hd int)

//go:noescape
func attnKeysDotAVX512(s, q, k *float32, kStride, nk, rows, hd int)
