//go:build !noasm

package cpu

import xcpu "golang.org/x/sys/cpu"

// attnAVX512 selects the AVX-512 micro-kernels of attn_amd64.s. Tests clear it to check the pure-Go path on the
// same machine.
var attnAVX512 = xcpu.X86.HasAVX512F && xcpu.X86.HasAVX512DQ

// The wrappers check in Go the extents the assembly will touch, so that a bad call panics instead of reading
// or writing out of bounds.

func attnQK(s, q, kt []float32, hd int) {
	if !attnAVX512 {
		attnQKGo(s, q, kt, hd)
		return
	}
	_, _, _ = s[attnRows*attnCols-1], q[attnRows*hd-1], kt[hd*attnCols-1]
	attnQKAVX512(&s[0], &q[0], &kt[0], hd)
}

func attnSoftmax(s, m, l, alpha []float32, cnt []int32) {
	if !attnAVX512 {
		attnSoftmaxGo(s, m, l, alpha, cnt)
		return
	}
	_, _, _, _, _ = s[attnRows*attnCols-1], m[attnRows-1], l[attnRows-1], alpha[attnRows-1], cnt[attnRows-1]
	for _, c := range cnt[:attnRows] {
		if c < 0 || c > attnCols {
			panic("cpu: attnSoftmax: count out of range")
		}
	}
	attnSoftmaxAVX512(&s[0], &m[0], &l[0], &alpha[0], &cnt[0])
}

func attnPV(o, p, v []float32, vStride, nk, hd int, alpha []float32) {
	if !attnAVX512 {
		attnPVGo(o, p, v, vStride, nk, hd, alpha)
		return
	}
	hdPad := (hd + attnCols - 1) / attnCols * attnCols
	_, _, _, _ = o[attnRows*hdPad-1], p[attnRows*attnCols-1], v[(nk-1)*vStride+hd-1], alpha[attnRows-1]
	attnPVAVX512(&o[0], &p[0], &v[0], vStride, nk, hd, &alpha[0])
}

func attnDots(s, q, base []float32, offs []int32) {
	if !attnAVX512 {
		attnDotsGo(s, q, base, offs)
		return
	}
	if len(offs) == 0 {
		return
	}
	_ = s[len(offs)-1]
	for _, off := range offs {
		_ = base[int(off)+len(q)-1]
	}
	attnDotsAVX512(&s[0], &q[0], &base[0], &offs[0], len(offs), len(q))
}

func attnAxpys(o, p, base []float32, offs []int32, alpha float32) {
	if !attnAVX512 || len(offs) == 0 {
		attnAxpysGo(o, p, base, offs, alpha)
		return
	}
	_ = p[len(offs)-1]
	for _, off := range offs {
		_ = base[int(off)+len(o)-1]
	}
	attnAxpysAVX512(&o[0], &p[0], &base[0], &offs[0], len(offs), len(o), alpha)
}

// The AVX-512 twins of the attn*Go loops (same docs), on the first elements of the slices.

//go:noescape
func attnQKAVX512(s, q, kt *float32, hd int)

//go:noescape
func attnSoftmaxAVX512(s, m, l, alpha *float32, cnt *int32)

//go:noescape
func attnPVAVX512(o, p, v *float32, vStride, nk, hd int, alpha *float32)

//go:noescape
func attnDotsAVX512(s, q, base *float32, offs *int32, n, hd int)

//go:noescape
func attnAxpysAVX512(o, p, base *float32, offs *int32, n, hd int, alpha float32)
