package cpu

import (
	"math"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/morphlab/morphlab/kernels/half"
	"github.com/morphlab/morphlab/kernels/internal/shape"
)

// Attention in the FlashAttention style: scores are never stored for a whole row. Query rows are processed in
// blocks of attnRows against tiles of attnCols keys; each row keeps a running maximum m, a running sum l of
// 2^(score-m), and an unnormalized output o, and a new tile rescales them (online softmax):
//
//	m' = max(m, max(s)); p = 2^(s-m'); α = 2^(m-m'); l = α·l + Σp; o = α·o + p·V
//
// Scores are in base 2: queries are multiplied by scale·log2(e) when they are packed, so that the kernels call
// exp2. m starts at -MaxFloat32, not -Inf, so that a row with no visible key in a tile gets α = 1 and p = 0
// rather than Inf-Inf = NaN. The micro-kernels (attnQK, attnSoftmax, attnPV and the paged path's attnKeys,
// attnAxpys) have AVX-512 twins in attn_amd64.s and pure-Go loops in attn_generic.go.
const (
	attnRows = 8  // query rows in a micro-kernel block
	attnCols = 32 // keys in a tile
)

// attnKeysDotRows is the most query rows for which attnKeys sums per-key dot products with a reduction tree
// (attnKeysDotAVX512, attnKeysAVX2) instead of transposing the keys: its shuffles grow with the rows, the
// transpose's with the head dim.
const attnKeysDotRows = 4

// attnRound16 rounds n up to a multiple of 16, the floats in a vector register.
func attnRound16(n int) int { return (n + 15) &^ 15 }

// attnInitMax is the running maximum of a row that has seen no key yet.
const attnInitMax = -math.MaxFloat32

// attnParallel runs work(i) for i in [0, n) across the pool, handing items out one at a time in order, so that
// items of uneven cost (causal query tiles, sequences of different lengths) balance across threads. scratch is
// called once per thread with an arena of zeroed scratch memory, and its result passed to that thread's work
// calls; the arena is reused by later calls, so a decode step's many small attention calls allocate nothing.
func attnParallel[S any](n int, scratch func(a *attnArena) S, work func(i int, s S)) {
	var next atomic.Int64
	Parallel(min(Threads(), n), 1, func(lo, hi int) {
		a := attnArenas.get()
		defer a.release()
		s := scratch(a)
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			work(i, s)
		}
	})
}

// attnArena hands out one thread's attention scratch: slices carved from slabs that outlive the call. A slab too
// small for a request is replaced by a larger one (the slices already handed out keep the old one alive), so
// after a few calls of the same shape every request fits.
type attnArena struct {
	f    []float32
	i    []int32
	n    []int
	b    []*attnBlock
	used [4]int
}

var attnArenas freeList[attnArena]

func (a *attnArena) release() {
	a.used = [4]int{}
	attnArenas.put(a)
}

// floats returns n zeroed float32s.
func (a *attnArena) floats(n int) []float32 {
	s := arenaTake(&a.f, &a.used[0], n)
	clear(s)
	return s
}

// int32s returns n int32s, not zeroed.
func (a *attnArena) int32s(n int) []int32 { return arenaTake(&a.i, &a.used[1], n) }

// ints returns n ints, not zeroed.
func (a *attnArena) ints(n int) []int { return arenaTake(&a.n, &a.used[2], n) }

// blocks returns n block states for rows of at most maxRows rows of hd, kept from call to call (their slices
// carved anew from the arena each time).
func (a *attnArena) blocks(n, maxRows, hd int) []*attnBlock {
	bs := arenaTake(&a.b, &a.used[3], n)
	for i := range bs {
		if bs[i] == nil {
			bs[i] = new(attnBlock)
		}
		bs[i].init(a, maxRows, hd)
	}
	return bs
}

func arenaTake[T any](slab *[]T, used *int, n int) []T {
	if *used+n > len(*slab) {
		*slab = make([]T, max(2*len(*slab), n, 1024))
		*used = 0
	}
	s := (*slab)[*used : *used+n : *used+n]
	*used += n
	return s
}

// attnBlock is the state of a block of query rows: packed queries, running max and sum, output accumulators.
type attnBlock struct {
	hd, hdPad int       // head dim, and the output row stride rounded up to attnCols
	q         []float32 // [rowsPad, hd], pre-scaled by scale·log2(e)
	m, l      []float32 // [rowsPad]
	o         []float32 // [rowsPad, hdPad]
	s         []float32 // [attnRows, attnCols] scores, then probabilities, of the current block and tile
	alpha     []float32 // [attnRows]
	cnt       []int32   // [attnRows] visible keys of each row in the current tile
	limit     []int     // [rowsPad] visible keys of each row in the whole sequence
}

// init sizes b for up to maxRows rows of hd, with scratch from a.
func (b *attnBlock) init(a *attnArena, maxRows, hd int) {
	rowsPad := (maxRows + attnRows - 1) / attnRows * attnRows
	hdPad := (hd + attnCols - 1) / attnCols * attnCols
	*b = attnBlock{
		hd: hd, hdPad: hdPad,
		q: a.floats(rowsPad * hd), m: a.floats(rowsPad), l: a.floats(rowsPad),
		o: a.floats(rowsPad * hdPad), s: a.floats(attnRows * attnCols),
		alpha: a.floats(attnRows), cnt: a.int32s(attnRows), limit: a.ints(rowsPad),
	}
}

// reset prepares rows [0, rows) (padded to a multiple of attnRows) for a new block; the caller then packs q and
// limit. Padding rows get a zero query and the last row's limit, so they compute harmless finite values.
func (b *attnBlock) reset(rows int) int {
	rowsPad := (rows + attnRows - 1) / attnRows * attnRows
	clear(b.q[rows*b.hd : rowsPad*b.hd])
	clear(b.o[:rowsPad*b.hdPad])
	clear(b.l[:rowsPad])
	for r := range rowsPad {
		b.m[r] = attnInitMax
	}
	return rowsPad
}

// packQuery copies query row src into block row r, scaled by sc.
func (b *attnBlock) packQuery(r int, src []float32, sc float32) {
	dst := b.q[r*b.hd : (r+1)*b.hd]
	for d, v := range src[:b.hd] {
		dst[d] = v * sc
	}
}

// tileCounts sets cnt for the rows [r0, r0+attnRows) and a tile of keys starting at s0, and returns the largest.
func (b *attnBlock) tileCounts(r0, s0 int) int {
	most := 0
	for i := range attnRows {
		c := min(max(b.limit[r0+i]-s0, 0), attnCols)
		b.cnt[i] = int32(c)
		most = max(most, c)
	}
	return most
}

// softmaxRows runs the online-softmax update on rows [r0, r0+attnRows) of the block for the scores in b.s.
func (b *attnBlock) softmaxRows(r0 int) {
	attnSoftmax(b.s, b.m[r0:r0+attnRows], b.l[r0:r0+attnRows], b.alpha, b.cnt, attnRows)
}

// finish writes row r's normalized output o/l into dst.
func (b *attnBlock) finish(dst []float32, r int) {
	inv := 1 / b.l[r]
	for d, v := range b.o[r*b.hdPad : r*b.hdPad+b.hd] {
		dst[d] = v * inv
	}
}

// CausalAttention is prefill attention over contiguous keys and values. The nq queries are the last nq of kvLen
// tokens: query t sits at position kvLen-nq+t and sees keys 0..kvLen-nq+t. For query head h and its KV head
// g = h/(nHeads/nKVHeads): out[t,h] = Σ_s softmax_s(scale·q[t,h]·k[s,g])·v[s,g].
// q, out: [nq, nHeads*headDim]; k, v: [kvLen, nKVHeads*headDim].
//
// Keys are first packed per KV head into transposed tiles [headDim, attnCols] (in parallel), then work items
// (KV head, tile of queries) run on the pool, longest first. An item holds the queries of all the query heads
// that share its KV head, so each K and V tile is loaded once for the whole group (GQA).
func CausalAttention(out, q, k, v []float32, nq, kvLen, nHeads, nKVHeads, headDim int, scale float32) {
	shape.CausalAttention("CausalAttention", len(out), len(q), len(k), len(v), nq, kvLen, nHeads, nKVHeads, headDim)
	hd, group := headDim, nHeads/nKVHeads
	kvRow := nKVHeads * hd
	tiles := (kvLen + attnCols - 1) / attnCols
	tileSize := hd * attnCols
	kt, ktBuf := scratchF32(nKVHeads * tiles * tileSize)
	defer ktBuf.release()
	Parallel(nKVHeads*tiles, max(1, 64/hd), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			g, j := i/tiles, i%tiles
			attnPackKT(kt[i*tileSize:(i+1)*tileSize], k[g*hd:], kvRow, j*attnCols, min(attnCols, kvLen-j*attnCols), hd)
		}
	})

	// Query tiles of about 64 rows (queries × heads of the group); the last tiles see the most keys, so they go
	// first.
	qTile := max(1, 64/group)
	nTiles := (nq + qTile - 1) / qTile
	sc := scale * math.Log2E
	attnParallel(nKVHeads*nTiles, func(a *attnArena) *attnBlock { return a.blocks(1, qTile*group, hd)[0] }, func(i int, b *attnBlock) {
		g, qt := i%nKVHeads, nTiles-1-i/nKVHeads
		t0, t1 := qt*qTile, min(nq, (qt+1)*qTile)
		rows := (t1 - t0) * group
		rowsPad := b.reset(rows)
		for t := t0; t < t1; t++ {
			for hh := range group {
				r := (t-t0)*group + hh
				b.packQuery(r, q[(t*nHeads+g*group+hh)*hd:], sc)
				b.limit[r] = kvLen - nq + t + 1
			}
		}
		for r := rows; r < rowsPad; r++ {
			b.limit[r] = b.limit[rows-1]
		}
		vg := v[g*hd:]
		for j := 0; j*attnCols < b.limit[rows-1]; j++ {
			s0 := j * attnCols
			ktj := kt[(g*tiles+j)*tileSize:][:tileSize]
			for r0 := 0; r0 < rowsPad; r0 += attnRows {
				nk := b.tileCounts(r0, s0)
				if nk == 0 {
					continue
				}
				attnQK(b.s, b.q[r0*hd:(r0+attnRows)*hd], ktj, hd)
				b.softmaxRows(r0)
				attnPV(b.o[r0*b.hdPad:(r0+attnRows)*b.hdPad], b.s, vg[s0*kvRow:], kvRow, nk, hd, b.alpha)
			}
		}
		for t := t0; t < t1; t++ {
			for hh := range group {
				b.finish(out[(t*nHeads+g*group+hh)*hd:], (t-t0)*group+hh)
			}
		}
	})
}

// KVAppend writes the key and value rows of token t into cache slot slots[t] (block*blockSize + offset); a
// negative slot skips the token. k, v: [len(slots), nKVHeads*headDim].
func KVAppend(kCache, vCache, k, v []float32, slots []int32, nKVHeads, headDim int) {
	shape.KVAppend("KVAppend", len(kCache), len(vCache), len(k), len(v), slots, nKVHeads, headDim)
	kvAppend(pagedCache{k: kCache, v: vCache}, k, v, slots, nKVHeads*headDim)
}

// KVAppendF16 is KVAppend into caches of binary16 values (rounded to nearest, ties to even).
func KVAppendF16(kCache, vCache []uint16, k, v []float32, slots []int32, nKVHeads, headDim int) {
	shape.KVAppend("KVAppendF16", len(kCache), len(vCache), len(k), len(v), slots, nKVHeads, headDim)
	kvAppend(pagedCache{k16: kCache, v16: vCache}, k, v, slots, nKVHeads*headDim)
}

// KVAppendInt8 is KVAppend into caches of int8 codes with a scale for each token's row of each KV head: the
// headDim values of KV head h of token t go to the codes at slot s = slots[t] as QuantizeRowsInt8 quantizes a row
// (symmetric, value ≈ code·scale), their scale to kScales[s*nKVHeads+h] (vScales for the values). The scales are
// len(kCache)/headDim floats, one a row of codes.
func KVAppendInt8(kCache, vCache []int8, kScales, vScales, k, v []float32, slots []int32, nKVHeads, headDim int) {
	shape.KVAppend("KVAppendInt8", len(kCache), len(vCache), len(k), len(v), slots, nKVHeads, headDim)
	kvScales("KVAppendInt8", len(kCache), len(kScales), len(vScales), headDim)
	kvAppend(pagedCache{k8: kCache, v8: vCache, ks: kScales, vs: vScales, hd: headDim}, k, v, slots,
		nKVHeads*headDim)
}

// kvScales checks that an int8 cache of codes codes has one scale a row of headDim codes in each scale table.
func kvScales(op string, codes, ks, vs, headDim int) {
	shape.Len(op, "kScales", ks, codes/headDim, "len(kCache)/headDim")
	shape.Len(op, "vScales", vs, codes/headDim, "len(kCache)/headDim")
}

// kvAppend is KVAppend into any kind of cache, row values a token.
func kvAppend(c pagedCache, k, v []float32, slots []int32, row int) {
	Parallel(len(slots), max(1, elemGrain/row), func(lo, hi int) {
		// In decode the slots are one per sequence, in lines that have left the cache since the step before:
		// asking for all of them first lets the misses overlap, where the copies would take them one by one.
		for t := lo; t < hi; t++ {
			if s := int(slots[t]); s >= 0 {
				c.prefetch(s*row, row)
			}
		}
		for t := lo; t < hi; t++ {
			if s := int(slots[t]); s >= 0 {
				c.store(s*row, k[t*row:][:row], v[t*row:][:row])
			}
		}
	})
}

// attnPVRows is the fewest query rows of a block for which PagedAttention adds the value rows with attnPV,
// which loads each value row once for attnRows output rows; fewer rows use attnAxpys row by row.
const attnPVRows = 4

// attnPagedOut bounds the output rows of a PagedAttention work item, in bytes: about an L2 share. A variable so
// that tests can make every KV head a group of its own.
var attnPagedOut = 256 << 10

// attnPagedSplit is the keys a part of a sequence's KV range covers at least when PagedAttention splits it
// (flash-decoding): a sequence of L tokens is split into L/attnPagedSplit parts.
const attnPagedSplit = 256

// PagedAttention is attention for a batch of sequences whose keys and values are in the paged cache, one or more
// queries each: decode (one query a sequence) and chunked prefill in one call. Sequence i owns query rows
// qStart[i]..qStart[i+1]-1, the last of its seqLens[i] tokens, and query j of its n sees tokens up to
// seqLens[i]-n+j. Token s is read from block blockTables[i*maxBlocksPerSeq+s/blockSize] at offset s%blockSize.
// q, out: [qStart[nSeqs], nHeads*headDim]; caches [numBlocks, blockSize, nKVHeads, headDim].
//
// Work items are (sequence, part of its KV range, group of KV heads). An item walks its range in tiles of up to
// attnCols tokens within one cache block, so that a tile is one contiguous stretch of the cache when the group
// holds all the KV heads (decode: few query rows), read in order and prefetched a tile ahead. A group holds
// as many KV heads as keep the item's output rows within attnPagedOut bytes, so that chunked prefill's many
// rows stay in cache. For each KV head, all the query rows of the sequence and of the query heads
// sharing that KV head are scored against the tile's keys at once by attnKeys (the keys are loaded and
// transposed once for every row), then attnAxpys adds the tile's value rows to each output row. An item whose
// sequence has one query (decode) instead runs pagedDecodeItem: one call of a fused kernel a tile of up to 16
// tokens for all its query heads (keys, online softmax and values; attnDecode), which prefetches the next tile
// as it goes. Sequences of
// 2·attnPagedSplit tokens or more are split into parts of at least attnPagedSplit tokens (flash-decoding), which
// gives a long sequence's keys to several threads; each part keeps its own m, l and o, merged at the end.
func PagedAttention(out, q, kCache, vCache []float32, qStart, seqLens, blockTables []int32,
	maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim int, scale float32) {
	shape.PagedAttention("PagedAttention", len(out), len(q), len(kCache), len(vCache), qStart, seqLens, blockTables,
		maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim)
	pagedAttention(out, q, pagedCache{k: kCache, v: vCache}, qStart, seqLens, blockTables, maxBlocksPerSeq, blockSize,
		nHeads, nKVHeads, headDim, scale)
}

// PagedAttentionF16 is PagedAttention over caches of binary16 values (KVAppendF16), widened exactly to float32
// as they are read (by the kernels themselves for decode's few query rows, a tile at a time into scratch for
// more): its results are bit for bit PagedAttention's over float32 caches that hold the same values, for half
// the bytes read.
func PagedAttentionF16(out, q []float32, kCache, vCache []uint16, qStart, seqLens, blockTables []int32,
	maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim int, scale float32) {
	shape.PagedAttention("PagedAttentionF16", len(out), len(q), len(kCache), len(vCache), qStart, seqLens,
		blockTables, maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim)
	pagedAttention(out, q, pagedCache{k16: kCache, v16: vCache}, qStart, seqLens, blockTables, maxBlocksPerSeq,
		blockSize, nHeads, nKVHeads, headDim, scale)
}

// PagedAttentionInt8 is PagedAttention over caches of int8 codes and their scales (KVAppendInt8), for a quarter
// of the bytes a value (plus a scale a row of headDim): its results are PagedAttention's over float32 caches that
// hold code·scale (float32 products), bit for bit where a tile is widened into scratch, within float32 roundings
// in the fused decode kernel, which widens the codes as it loads them and applies each row's scale to its score
// and its probability instead of to each value.
func PagedAttentionInt8(out, q []float32, kCache, vCache []int8, kScales, vScales []float32, qStart, seqLens,
	blockTables []int32, maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim int, scale float32) {
	shape.PagedAttention("PagedAttentionInt8", len(out), len(q), len(kCache), len(vCache), qStart, seqLens,
		blockTables, maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim)
	kvScales("PagedAttentionInt8", len(kCache), len(kScales), len(vScales), headDim)
	pagedAttention(out, q, pagedCache{k8: kCache, v8: vCache, ks: kScales, vs: vScales, hd: headDim}, qStart,
		seqLens, blockTables, maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim, scale)
}

// pagedCache is the key and value caches of PagedAttention: float32 (k, v) or binary16 (k16, v16) values, or
// int8 codes (k8, v8) with a float32 scale for each row of hd codes (ks, vs: the scale of the row at offset i is
// at i/hd).
type pagedCache struct {
	k, v     []float32
	k16, v16 []uint16
	k8, v8   []int8
	ks, vs   []float32
	hd       int
}

// prefetch asks for n values from offset i of both caches (and, for int8 codes, their scales).
func (c pagedCache) prefetch(i, n int) {
	if c.k8 != nil {
		attnPrefetchI8(c.k8[i:][:n])
		attnPrefetchI8(c.v8[i:][:n])
		c.prefetchScales(i, n)
		return
	}
	if c.k16 != nil {
		attnPrefetchF16(c.k16[i:][:n])
		attnPrefetchF16(c.v16[i:][:n])
		return
	}
	attnPrefetch(c.k[i:][:n])
	attnPrefetch(c.v[i:][:n])
}

// attnNext is the next tile of a fused decode item (attnDecode), for its kernel to prefetch while it computes
// the current one, a share of the lines a head: the next key and value lines, how many are left, and how many
// a head.
type attnNext struct {
	k, v         uintptr
	lines, share int
}

// next is the attnNext of rows rows of width values from offset i, kvRow values apart, for heads heads: the
// lines from the first row's first value to the last row's last, which are all the rows' lines when the rows
// hold all the KV heads (a group of fewer, only for a short single sequence, fetches the others' too).
func (c pagedCache) next(i, rows, width, kvRow, heads int) attnNext {
	if rows == 0 {
		return attnNext{}
	}
	size := 4
	k, v := unsafe.Pointer(unsafe.SliceData(c.k)), unsafe.Pointer(unsafe.SliceData(c.v))
	switch {
	case c.k16 != nil:
		size = 2
		k, v = unsafe.Pointer(unsafe.SliceData(c.k16)), unsafe.Pointer(unsafe.SliceData(c.v16))
	case c.k8 != nil:
		size = 1
		k, v = unsafe.Pointer(unsafe.SliceData(c.k8)), unsafe.Pointer(unsafe.SliceData(c.v8))
	}
	ka, va := uintptr(k)+uintptr(i*size), uintptr(v)+uintptr(i*size)
	n := uintptr(((rows-1)*kvRow + width) * size)
	lines := int(max(ka+n-ka&^63, va+n-va&^63)+63) / 64
	return attnNext{ka &^ 63, va &^ 63, lines, (lines + heads - 1) / heads}
}

// prefetchScales asks for the scales of the rows of n values from offset i (int8 caches).
func (c pagedCache) prefetchScales(i, n int) {
	attnPrefetch(c.ks[i/c.hd:][:(n+c.hd-1)/c.hd])
	attnPrefetch(c.vs[i/c.hd:][:(n+c.hd-1)/c.hd])
}

// store writes the key and value rows k and v at offset i of the caches (int8 codes: each hd values quantized
// with their own scale).
func (c pagedCache) store(i int, k, v []float32) {
	if c.k8 != nil {
		for r := 0; r < len(k); r += c.hd {
			c.ks[(i+r)/c.hd] = qQuantizeRow(k[r:][:c.hd], c.k8[i+r:][:c.hd])
			c.vs[(i+r)/c.hd] = qQuantizeRow(v[r:][:c.hd], c.v8[i+r:][:c.hd])
		}
		return
	}
	if c.k16 != nil {
		half.F32ToF16Slice(c.k16[i:][:len(k)], k)
		half.F32ToF16Slice(c.v16[i:][:len(v)], v)
		return
	}
	copy(c.k[i:][:len(k)], k)
	copy(c.v[i:][:len(v)], v)
}

// tile returns the keys and values of nt tokens from offset i, width values a token, rows stride apart: the
// caches themselves for float32 values, else the values widened into kt and vt (then stride = width).
func (c pagedCache) tile(i, nt, width, rowStride int, kt, vt []float32) (k, v []float32, stride int) {
	if c.k != nil {
		return c.k[i:], c.v[i:], rowStride
	}
	if width == rowStride {
		c.widen(kt[:nt*width], true, i)
		c.widen(vt[:nt*width], false, i)
		return kt, vt, width
	}
	for r := range nt {
		c.widen(kt[r*width:][:width], true, i+r*rowStride)
		c.widen(vt[r*width:][:width], false, i+r*rowStride)
	}
	return kt, vt, width
}

// widen sets dst to the len(dst) keys (or values) from offset i, the start of a row, of a binary16 or int8 cache
// as float32: binary16 exactly, int8 codes times their rows' scales (a float32 product).
func (c pagedCache) widen(dst []float32, keys bool, i int) {
	if c.k16 != nil {
		src := c.v16
		if keys {
			src = c.k16
		}
		half.F16ToF32Slice(dst, src[i:][:len(dst)])
		return
	}
	codes, scales := c.v8, c.vs
	if keys {
		codes, scales = c.k8, c.ks
	}
	for r := 0; r < len(dst); r += c.hd {
		s, out := scales[(i+r)/c.hd], dst[r:min(r+c.hd, len(dst))]
		for d, q := range codes[i+r:][:len(out)] {
			out[d] = float32(q) * s
		}
	}
}

// pagedAttention is PagedAttention over any kind of cache.
func pagedAttention(out, q []float32, cache pagedCache, qStart, seqLens, blockTables []int32,
	maxBlocksPerSeq, blockSize, nHeads, nKVHeads, headDim int, scale float32) {
	hd, group := headDim, nHeads/nKVHeads
	kvRow := nKVHeads * hd
	nSeqs := len(seqLens)

	maxRows := 0
	for i := range nSeqs {
		maxRows = max(maxRows, int(qStart[i+1]-qStart[i])*group)
	}
	hdPad := (hd + attnCols - 1) / attnCols * attnCols
	rowsMax := (maxRows + attnRows - 1) / attnRows * attnRows
	// Parts of sequence i are [firstItem[i], firstItem[i+1]), each covering ceil(L/parts) tokens rounded to
	// tiles. The count depends on L alone, never on the batch or the thread count, so that a sequence's result
	// is bit-for-bit the same whatever else is in the batch (the engine's determinism rests on it).
	firstItem := make([]int, nSeqs+1)
	for i, L := range seqLens {
		parts := max(1, int(L)/attnPagedSplit)
		firstItem[i+1] = firstItem[i] + parts
	}
	nParts := firstItem[nSeqs]
	// KV heads are grouped so that an item's output rows fit attnPagedOut, and so that there are at least as
	// many items as threads (a single short sequence in decode would otherwise run on one thread). Heads are
	// computed alike in any group, so the grouping leaves results unchanged.
	nHG := (nKVHeads*rowsMax*hdPad*4 + attnPagedOut - 1) / attnPagedOut
	nHG = max(nHG, (Threads()+nParts-1)/nParts)
	nHG = min(nKVHeads, max(1, nHG))
	hpg := (nKVHeads + nHG - 1) / nHG // KV heads a group
	nHG = (nKVHeads + hpg - 1) / hpg
	seqOf := make([]int, nParts)
	for i := range nSeqs {
		for p := firstItem[i]; p < firstItem[i+1]; p++ {
			seqOf[p] = i
		}
	}
	// Partial results of split sequences: per part, KV head and row, o [hdPad] then m and l.
	var partial []float32
	if nParts > nSeqs {
		var partialBuf scratchHandle[float32]
		partial, partialBuf = scratchF32(nParts * nKVHeads * maxRows * (hdPad + 2))
		defer partialBuf.release()
	}
	sc := scale * math.Log2E

	hd16 := attnRound16(hd)
	type scratch struct {
		b      []*attnBlock // per KV head of the group
		q, s   []float32    // queries [hpg, rowsMax, hd16] zero-padded, scores [rowsMax, attnCols]
		kt, vt []float32    // a tile of binary16 or int8 keys and values widened [attnCols, hpg*hd]
		dm, dl []float32    // pagedDecodeItem's running maxima and sums [hpg*group]
		do     []float32    // and outputs [hpg*group, hd]
	}
	// Binary16 values are read as they are by the kernels of fewer than attnPVRows rows (decode), else widened a
	// tile at a time into kt, vt, as int8 codes always are (but by the fused decode kernel).
	tileLen := 0
	if cache.k8 != nil || cache.k16 != nil && maxRows >= attnPVRows {
		tileLen = attnCols * hpg * hd
	}
	attnParallel(nParts*nHG, func(a *attnArena) scratch {
		return scratch{a.blocks(hpg, maxRows, hd), a.floats(hpg * rowsMax * hd16), a.floats(rowsMax * attnCols),
			a.floats(tileLen), a.floats(tileLen), a.floats(hpg * group), a.floats(hpg * group),
			a.floats(hpg * group * hd)}
	}, func(it int, sc2 scratch) {
		pi, g0 := it/nHG, it%nHG*hpg
		blocks := sc2.b[:min(hpg, nKVHeads-g0)]
		sp := sc2.s
		i := seqOf[pi]
		parts := firstItem[i+1] - firstItem[i]
		L := int(seqLens[i])
		n := int(qStart[i+1] - qStart[i])
		per := ((L+parts-1)/parts + attnCols - 1) / attnCols * attnCols
		lo, hi := (pi-firstItem[i])*per, min(L, (pi-firstItem[i]+1)*per)
		rows := n * group
		if attnDecodeFused(n, hd) {
			pagedDecodeItem(out, q, partial, cache, sc2.q, sc2.dm, sc2.dl, sc2.do, blockTables[i*maxBlocksPerSeq:],
				int(qStart[i]), lo, hi, pi, g0, len(blocks), group, blockSize, nHeads, nKVHeads, hd, hdPad, maxRows, sc)
			return
		}
		direct := cache.k16 != nil && rows < attnPVRows
		for gi, b := range blocks {
			g := g0 + gi
			rowsPad := b.reset(rows)
			qp := sc2.q[gi*rowsMax*hd16:]
			for j := range n {
				t := int(qStart[i]) + j
				for hh := range group {
					r := j*group + hh
					dst := qp[r*hd16 : (r+1)*hd16]
					for d, x := range q[(t*nHeads+g*group+hh)*hd:][:hd] {
						dst[d] = x * sc
					}
					clear(dst[hd:])
					b.limit[r] = L - n + j + 1
				}
			}
			for r := rows; r < rowsPad; r++ {
				b.limit[r] = b.limit[rows-1]
			}
		}
		table := blockTables[i*maxBlocksPerSeq:][:maxBlocksPerSeq]
		end := min(hi, L)
		blk, pos := lo/blockSize, lo%blockSize
		for s0 := lo; s0 < end; {
			nt := min(attnCols, blockSize-pos, end-s0)
			tile := (int(table[blk])*blockSize + pos) * kvRow
			// The next tile is elsewhere in the cache: ask for the group's heads of its tokens, a share of
			// the tokens at a time, while this one is computed.
			n1, o1 := 0, 0
			if s1 := s0 + nt; s1 < end {
				b1, p1 := blk, pos+nt
				if p1 == blockSize {
					b1, p1 = b1+1, 0
				}
				n1 = min(attnCols, blockSize-p1, end-s1)
				o1 = (int(table[b1])*blockSize+p1)*kvRow + g0*hd
			}
			share := (n1 + len(blocks) - 1) / len(blocks)
			var kt, vt []float32
			stride := kvRow
			if !direct {
				kt, vt, stride = cache.tile(tile+g0*hd, nt, len(blocks)*hd, kvRow, sc2.kt, sc2.vt)
			}
			// Blocks of attnRows rows that see none of the tile's keys (a causal prompt's rows before s0) are
			// neither scored nor updated. The scoring kernel is still chosen by the sequence's rows, so that a
			// row's scores are the same bits whichever rows are skipped.
			from := 0
			if rows > attnKeysDotRows {
				for from+attnRows < rows && blocks[0].limit[from+attnRows-1] <= s0 {
					from += attnRows
				}
				from = min(from, (rows-attnKeysDotRows-1)/attnRows*attnRows)
			}
			for gi, b := range blocks {
				for c := gi * share; c < min(n1, (gi+1)*share); c++ {
					cache.prefetch(o1+c*kvRow, len(blocks)*hd)
				}
				off := gi * hd
				if direct {
					off = tile + (g0+gi)*hd
					attnKeysF16(sp, sc2.q[gi*rowsMax*hd16:], cache.k16[off:], kvRow, nt, rows, hd)
				} else {
					attnKeys(sp[from*attnCols:], sc2.q[(gi*rowsMax+from)*hd16:], kt[off:], stride, nt, rows-from, hd)
				}
				for r0 := from; r0 < rows; r0 += attnRows {
					if b.tileCounts(r0, s0) == 0 {
						continue
					}
					for c := range b.cnt {
						b.cnt[c] = min(b.cnt[c], int32(nt))
					}
					real := min(attnRows, rows-r0)
					ps := sp[r0*attnCols : (r0+attnRows)*attnCols]
					attnSoftmax(ps, b.m[r0:], b.l[r0:], b.alpha, b.cnt, real)
					if real < attnPVRows {
						for r := range real {
							o, p := b.o[(r0+r)*hdPad:][:hd], ps[r*attnCols:][:b.cnt[r]]
							if direct {
								attnAxpysF16(o, p, cache.v16[off:], kvRow, b.alpha[r])
							} else {
								attnAxpys(o, p, vt[off:], stride, b.alpha[r])
							}
						}
						continue
					}
					// Padding rows get zero probabilities, so their outputs stay zero.
					clear(ps[real*attnCols:])
					attnPV(b.o[r0*hdPad:], ps, vt[off:], stride, int(slices.Max(b.cnt)), hd, b.alpha)
				}
			}
			s0 += nt
			if pos += nt; pos == blockSize {
				blk, pos = blk+1, 0
			}
		}
		for gi, b := range blocks {
			g := g0 + gi
			if partial == nil {
				for j := range n {
					t := int(qStart[i]) + j
					for hh := range group {
						b.finish(out[(t*nHeads+g*group+hh)*hd:], j*group+hh)
					}
				}
				continue
			}
			for r := range rows {
				p := partial[((pi*nKVHeads+g)*maxRows+r)*(hdPad+2):][:hdPad+2]
				copy(p, b.o[r*hdPad:(r+1)*hdPad])
				p[hdPad], p[hdPad+1] = b.m[r], b.l[r]
			}
		}
	})
	if partial == nil {
		return
	}
	attnParallel(nSeqs*nKVHeads, func(a *attnArena) []float32 { return a.floats(hd) }, func(it int, acc []float32) {
		i, g := it/nKVHeads, it%nKVHeads
		n := int(qStart[i+1] - qStart[i])
		for j := range n {
			t := int(qStart[i]) + j
			for hh := range group {
				r := j*group + hh
				part := func(pi int) []float32 {
					return partial[((pi*nKVHeads+g)*maxRows+r)*(hdPad+2):][:hdPad+2]
				}
				mx := float32(attnInitMax)
				for pi := firstItem[i]; pi < firstItem[i+1]; pi++ {
					mx = max(mx, part(pi)[hdPad])
				}
				clear(acc)
				var l float32
				for pi := firstItem[i]; pi < firstItem[i+1]; pi++ {
					p := part(pi)
					if p[hdPad+1] == 0 {
						continue // a part whose keys the row does not see: its sums are zero
					}
					w := float32(math.Exp2(float64(p[hdPad] - mx)))
					l += w * p[hdPad+1]
					for d := range acc {
						acc[d] += w * p[d]
					}
				}
				dst := out[(t*nHeads+g*group+hh)*hd:][:hd]
				for d, x := range acc {
					dst[d] = x / l
				}
			}
		}
	})
}

// attnDecodeCols is the most tokens in a tile of pagedDecodeItem: the kernel keeps one accumulator a key.
const attnDecodeCols = 16

// pagedDecodeItem runs a work item of PagedAttention whose sequence has one query (decode) with the fused
// kernel (attnDecode): tokens [lo, hi) of the sequence whose query is token t, for the heads KV heads from g0 and
// their group query heads each, one call a tile of up to attnDecodeCols tokens for all of them, each call
// prefetching the next tile. q is scratch for the pre-scaled queries, m, l, o for the query heads' state. Like
// the general path it writes the normalized outputs, or the part's o, m and l (partial, when the sequence is
// split).
func pagedDecodeItem(out, q, partial []float32, cache pagedCache, qs, m, l, o []float32, table []int32,
	t, lo, hi, pi, g0, heads, group, blockSize, nHeads, nKVHeads, hd, hdPad, maxRows int, sc float32) {
	kvRow, nq := nKVHeads*hd, heads*group
	qs, m, l, o = qs[:nq*hd], m[:nq], l[:nq], o[:nq*hd]
	for d, x := range q[(t*nHeads+g0*group)*hd:][:nq*hd] {
		qs[d] = x * sc
	}
	for h := range nq {
		m[h], l[h] = attnInitMax, 0
	}
	clear(o)
	blk, pos := lo/blockSize, lo%blockSize
	for s0 := lo; s0 < hi; {
		nt := min(attnDecodeCols, blockSize-pos, hi-s0)
		off := (int(table[blk])*blockSize+pos)*kvRow + g0*hd
		s0 += nt
		if pos += nt; pos == blockSize {
			blk, pos = blk+1, 0
		}
		var next attnNext
		if s0 < hi {
			n1 := min(attnDecodeCols, blockSize-pos, hi-s0)
			o1 := (int(table[blk])*blockSize+pos)*kvRow + g0*hd
			next = cache.next(o1, n1, heads*hd, kvRow, nq)
			if cache.k8 != nil {
				cache.prefetchScales(o1, (n1-1)*kvRow+heads*hd)
			}
		}
		attnDecode(cache, qs, off, kvRow, nt, heads, group, hd, m, l, o, &next)
	}
	for h := range nq {
		if partial == nil {
			inv, dst := 1/l[h], out[(t*nHeads+g0*group+h)*hd:][:hd]
			for d, v := range o[h*hd:][:hd] {
				dst[d] = v * inv
			}
			continue
		}
		// Row h%group of KV head g0 + h/group.
		p := partial[((pi*nKVHeads+g0+h/group)*maxRows+h%group)*(hdPad+2):][:hdPad+2]
		copy(p, o[h*hd:][:hd])
		p[hdPad], p[hdPad+1] = m[h], l[h]
	}
}
