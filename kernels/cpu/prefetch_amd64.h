// Prefetch streams for the micro-kernels (prefetchStream in qkern_amd64.go: row address, offset in the row,
// bytes a row, row stride, lines left, at byte offsets 0, 8, 16, 24, 32 of the struct at p). PF_LOAD loads the
// stream into five registers; PF_STEP, once a kernel step, prefetches the next line into L2 if any is left;
// PF_STORE writes the position back if it moved, so that an empty stream (noPrefetch, shared) is only read.
// label is a name unique to the use.

#define PF_LOAD(p, row, off, rb, ld, n) \
	MOVQ 0(p), row; \
	MOVQ 8(p), off; \
	MOVQ 16(p), rb; \
	MOVQ 24(p), ld; \
	MOVQ 32(p), n

#define PF_STEP(label, row, off, rb, ld, n) \
	TESTQ      n, n; \
	JZ         label; \
	PREFETCHT1 (row)(off*1); \
	DECQ       n; \
	ADDQ       $64, off; \
	CMPQ       off, rb; \
	JB         label; \
	XORL       off, off; \
	ADDQ       ld, row; \
label:

#define PF_STORE(label, p, row, off, n) \
	CMPQ n, 32(p); \
	JEQ  label; \
	MOVQ row, 0(p); \
	MOVQ off, 8(p); \
	MOVQ n, 32(p); \
label:
