package cpu

import (
	"math"

	"github.com/morphlab/morphlab/kernels/half"
)

// Pure-Go micro-kernels of the attention kernels: the specification of their AVX-512 twins in attn_amd64.s and
// the path taken under the noasm tag or on CPUs without AVX-512. s is a block of scores [attnRows, attnCols].

// attnQKGo sets s[r*attnCols+c] = Σ_d q[r*hd+d]·kt[d*attnCols+c] for the attnRows query rows q and a tile of
// keys packed transposed in kt.
func attnQKGo(s, q, kt []float32, hd int) {
	for r := range attnRows {
		row := s[r*attnCols : (r+1)*attnCols]
		clear(row)
		for d, x := range q[r*hd : (r+1)*hd] {
			for c, k := range kt[d*attnCols : (d+1)*attnCols] {
				row[c] += x * k
			}
		}
	}
}

// attnSoftmaxGo runs the online-softmax step on the first rows (at most attnRows) rows of s, of which row r has
// cnt[r] visible scores (the others count as -Inf): with m' = max(m[r], max(s[r])), s[r] becomes 2^(s[r]-m')
// (0 where masked), alpha[r] = 2^(m[r]-m'), l[r] = alpha[r]·l[r] + Σ s[r], m[r] = m'.
func attnSoftmaxGo(s, m, l, alpha []float32, cnt []int32, rows int) {
	for r := range rows {
		row := s[r*attnCols : (r+1)*attnCols]
		n := int(cnt[r])
		mx := m[r]
		for _, x := range row[:n] {
			mx = max(mx, x)
		}
		var sum float32
		for c := range row {
			if c < n {
				row[c] = float32(math.Exp2(float64(row[c] - mx)))
				sum += row[c]
			} else {
				row[c] = 0
			}
		}
		alpha[r] = float32(math.Exp2(float64(m[r] - mx)))
		l[r] = alpha[r]*l[r] + sum
		m[r] = mx
	}
}

// attnPVGo rescales and accumulates the output rows of a block: with hdPad = hd rounded up to attnCols,
// o[r*hdPad+d] = alpha[r]·o[r*hdPad+d] + Σ_{j<nk} p[r*attnCols+j]·v[j*vStride+d] for d < hd.
func attnPVGo(o, p, v []float32, vStride, nk, hd int, alpha []float32) {
	hdPad := (hd + attnCols - 1) / attnCols * attnCols
	for r := range attnRows {
		or := o[r*hdPad : r*hdPad+hd]
		for d := range or {
			or[d] *= alpha[r]
		}
		for j, pj := range p[r*attnCols : r*attnCols+nk] {
			for d, x := range v[j*vStride : j*vStride+hd] {
				or[d] += pj * x
			}
		}
	}
}

// attnKeysGo sets s[r*attnCols+c] = Σ_d q[r*hd16+d]·k[c*kStride+d] over the hd dims, for the rows query rows
// (row stride hd16 = hd rounded up to 16) and the nk (<= attnCols) key rows of k, kStride apart. Other columns
// of those rows are left finite (the assembly twin fills them with repeats of key nk-1).
func attnKeysGo(s, q, k []float32, kStride, nk, rows, hd int) {
	hd16 := attnRound16(hd)
	for r := range rows {
		qr := q[r*hd16:][:hd]
		for c := range nk {
			var dot float32
			for d, x := range k[c*kStride:][:hd] {
				dot += qr[d] * x
			}
			s[r*attnCols+c] = dot
		}
	}
}

// attnKeysF16Go is attnKeysGo over binary16 keys: the same sums of the widened values.
func attnKeysF16Go(s, q []float32, k []uint16, kStride, nk, rows, hd int) {
	hd16 := attnRound16(hd)
	for r := range rows {
		qr := q[r*hd16:][:hd]
		for c := range nk {
			var dot float32
			for d, x := range k[c*kStride:][:hd] {
				dot += qr[d] * half.F16ToF32(x)
			}
			s[r*attnCols+c] = dot
		}
	}
}

// attnAxpysF16Go is attnAxpysGo over binary16 value rows.
func attnAxpysF16Go(o, p []float32, v []uint16, vStride int, alpha float32) {
	for d := range o {
		o[d] *= alpha
	}
	for c, pc := range p {
		for d, x := range v[c*vStride:][:len(o)] {
			o[d] += pc * half.F16ToF32(x)
		}
	}
}

// attnAxpysGo sets o = alpha·o + Σ_c p[c]·v[c*vStride:][:len(o)] over the len(p) value rows of v.
func attnAxpysGo(o, p, v []float32, vStride int, alpha float32) {
	for d := range o {
		o[d] *= alpha
	}
	for c, pc := range p {
		for d, x := range v[c*vStride:][:len(o)] {
			o[d] += pc * x
		}
	}
}

// attnPackKTGo writes n (1 <= n <= attnCols) key rows, src[s0+c] = src[(s0+c)*stride:][:hd], transposed into
// dst[d*attnCols+c], and zeros the columns c >= n. (The assembly twin instead repeats key n-1 in the columns
// c >= n of the first 16, or of all 32 when n > 16, and leaves the others; any finite values there are
// masked by the caller.)
func attnPackKTGo(dst, src []float32, stride, s0, n, hd int) {
	for c := range n {
		row := src[(s0+c)*stride:][:hd]
		for d, x := range row {
			dst[d*attnCols+c] = x
		}
	}
	for d := range hd {
		clear(dst[d*attnCols+n : (d+1)*attnCols])
	}
}

// attnDecodeGo is decode attention over a tile of nt tokens for the group query heads of each of heads KV
// heads, one query row each, the keys, the online softmax and the values at once: for query head h of KV head
// g = h/group (g's columns g·hd.. of the cache rows from off, kvRow apart; query q[h·hd:], pre-scaled by
// scale·log2 e; running maximum m[h], sum l[h], output o[h·hd:]), s_t = q·k_t, m' = max(m, max_t s_t),
// p_t = 2^(s_t - m'), alpha = 2^(m - m'), l = alpha·l + Σ_t p_t, o = alpha·o + Σ_t p_t·v_t, m = m'.
func attnDecodeGo(c pagedCache, q []float32, off, kvRow, nt, heads, group, hd int, m, l, o []float32) {
	k, v := make([]float32, hd), make([]float32, hd)
	row := func(keys bool, t, g int, dst []float32) []float32 {
		i := off + t*kvRow + g*hd
		if c.k == nil {
			c.widen(dst, keys, i)
			return dst
		}
		if keys {
			return c.k[i:][:hd]
		}
		return c.v[i:][:hd]
	}
	var s, p [attnDecodeCols]float32
	for h := range heads * group {
		g := h / group
		qh, oh := q[h*hd:][:hd], o[h*hd:][:hd]
		mx := m[h]
		for t := range nt {
			var dot float32
			for d, x := range row(true, t, g, k) {
				dot += qh[d] * x
			}
			s[t] = dot
			mx = max(mx, dot)
		}
		var sum float32
		for t := range nt {
			p[t] = float32(math.Exp2(float64(s[t] - mx)))
			sum += p[t]
		}
		alpha := float32(math.Exp2(float64(m[h] - mx)))
		l[h] = alpha*l[h] + sum
		m[h] = mx
		for d := range oh {
			oh[d] *= alpha
		}
		for t := range nt {
			for d, x := range row(false, t, g, v) {
				oh[d] += p[t] * x
			}
		}
	}
}
