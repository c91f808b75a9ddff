//go:build !noasm

#include "textflag.h"
#include "zero_amd64.h"

// GEMVSETUP loads the arguments of gemvAVX512 and gemvF16AVX512 (defined here, before any TEXT, so that vet
// checks its argument names against those functions only where they use it): R11 rows, BX k, SI w, DI x, DX y,
// R10 k/64, R12 (k%64)/16, R13 k%16 and K1 the mask of its lanes.
#define GEMVSETUP \
	MOVQ rows+0(FP), R11; \
	MOVQ k+8(FP), BX; \
	MOVQ w+16(FP), SI; \
	MOVQ x+24(FP), DI; \
	MOVQ y+32(FP), DX; \
	MOVQ BX, R13; \
	ANDQ $15, R13; \
	MOVL $1, AX; \
	MOVQ R13, CX; \
	SHLL CX, AX; \
	DECL AX; \
	KMOVW AX, K1; \
	MOVQ BX, R10; \
	SHRQ $6, R10; \
	MOVQ BX, R12; \
	ANDQ $63, R12; \
	SHRQ $4, R12

// The macros of the GEMV kernels (below), defined before any TEXT for vet's sake.

// GEMVFOLD sums the 16 lanes of one accumulator z (y, x: its low halves; ty, tx: a scratch register's) and
// stores the sum at dst. The sum is a fixed tree, lane i plus lane i+8, then i+4, i+2 and i+1, that every GEMV
// kernel here follows, one output at a time or (G8_SUM) 24 at once: float addition commutes exactly, so the
// order in which the kernels pair the partial sums does not change a bit of the result.
#define GEMVFOLD(z, y, x, ty, tx, dst) \
	VEXTRACTF32X8 $1, z, ty; \
	VADDPS        ty, y, y; \
	VEXTRACTF32X4 $1, y, tx; \
	VADDPS        tx, x, x; \
	VPERMILPS     $0x4e, x, tx; \
	VADDPS        tx, x, x; \
	VPERMILPS     $0xb1, x, tx; \
	VADDPS        tx, x, x; \
	VMOVSS        x, dst

// GT_SETUP points R14, R15, AX at tokens 1-3 (or token 0 past the count) and puts ldy·4 in R8.
#define GT_SETUP \
	MOVQ tokens+40(FP), CX; \
	MOVQ ldy+48(FP), R8; \
	SHLQ $2, R8; \
	MOVQ BX, R9; \
	SHLQ $2, R9; \
	MOVQ DI, R14; \
	MOVQ DI, R15; \
	MOVQ DI, AX; \
	CMPQ CX, $2; \
	JLT  gtsetdone; \
	LEAQ (DI)(R9*1), R14; \
	CMPQ CX, $3; \
	JLT  gtsetdone; \
	LEAQ (R14)(R9*1), R15; \
	CMPQ CX, $4; \
	JLT  gtsetdone; \
	LEAQ (R15)(R9*1), AX; \
gtsetdone:

#define GT_ZERO \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3

// GT_FMA multiplies 16 weights (Zw) with the four tokens' values at off(token)(R9) into Z0..Z3.
#define GT_FMA(off, Zw) \
	VFMADD231PS off(DI)(R9*1), Zw, Z0; \
	VFMADD231PS off(R14)(R9*1), Zw, Z1; \
	VFMADD231PS off(R15)(R9*1), Zw, Z2; \
	VFMADD231PS off(AX)(R9*1), Zw, Z3

// GT_TAIL is GT_FMA for the last k%16 steps: the tokens' values loaded under K1.
#define GT_TAIL(Zw) \
	VMOVUPS.Z   (DI)(R9*1), K1, Z20; \
	VFMADD231PS Z20, Zw, Z0; \
	VMOVUPS.Z   (R14)(R9*1), K1, Z20; \
	VFMADD231PS Z20, Zw, Z1; \
	VMOVUPS.Z   (R15)(R9*1), K1, Z20; \
	VFMADD231PS Z20, Zw, Z2; \
	VMOVUPS.Z   (AX)(R9*1), K1, Z20; \
	VFMADD231PS Z20, Zw, Z3

// GT_STORE sums and stores the row's outputs of the tokens that exist (label: a name unique to the use).
#define GT_STORE(label) \
	GEMVFOLD(Z0, Y0, X0, Y16, X16, (DX)); \
	MOVQ     tokens+40(FP), CX; \
	CMPQ     CX, $2; \
	JLT      label; \
	GEMVFOLD(Z1, Y1, X1, Y16, X16, (DX)(R8*1)); \
	CMPQ     CX, $3; \
	JLT      label; \
	GEMVFOLD(Z2, Y2, X2, Y16, X16, (DX)(R8*2)); \
	CMPQ     CX, $4; \
	JLT      label; \
	LEAQ     (R8)(R8*2), CX; \
	GEMVFOLD(Z3, Y3, X3, Y16, X16, (DX)(CX*1)); \
label:

// G8_SETUP loads the arguments of the tile kernels: R13 the groups of three rows, BX the bytes between rows of W
// (ldw << shift), SI w, R15 the x panel, DX y, R8 ldy·4, CX k&^15 (the steps of the unmasked loop), K1 the mask of
// the last k%16 steps, K2 the mask of three lanes, and the prefetch stream: AX the next line, R14 the lines left.
#define G8_SETUP(shift) \
	MOVQ  groups+0(FP), R13; \
	MOVQ  k+8(FP), BX; \
	MOVQ  w+24(FP), SI; \
	MOVQ  xp+32(FP), R15; \
	MOVQ  y+40(FP), DX; \
	MOVQ  ldy+56(FP), R8; \
	SHLQ  $2, R8; \
	MOVQ  pf+64(FP), R9; \
	MOVQ  0(R9), AX; \
	MOVQ  8(R9), R14; \
	MOVQ  BX, CX; \
	ANDQ  $15, CX; \
	MOVL  $1, R9; \
	SHLL  CX, R9; \
	DECL  R9; \
	KMOVW R9, K1; \
	MOVQ  BX, CX; \
	ANDQ  $-16, CX; \
	MOVQ  ldw+16(FP), BX; \
	SHLQ  $shift, BX; \
	MOVL  $7, R9; \
	KMOVW R9, K2

// G8_DONE writes the prefetch stream back.
#define G8_DONE \
	MOVQ pf+64(FP), R9; \
	MOVQ AX, 0(R9); \
	MOVQ R14, 8(R9)

// G8_ROWS points R10, R11 at rows 1-2 of the group that starts at SI, DI at the start of the x panel, zeroes R9,
// the step, and the 24 accumulators.
#define G8_ROWS \
	LEAQ   (SI)(BX*1), R10; \
	LEAQ   (SI)(BX*2), R11; \
	MOVQ   R15, DI; \
	XORL   R9, R9; \
	ZERO24

// G8_PREFETCH prefetches the stream's next lines into L2, as many a step as the stream says (R12), while any
// are left (labels: unique to the use).
#define G8_PREFETCH(loop, done) \
	MOVQ       pf+64(FP), R12; \
	MOVQ       16(R12), R12; \
loop: \
	TESTQ      R14, R14; \
	JZ         done; \
	PREFETCHT1 (AX); \
	ADDQ       $64, AX; \
	DECQ       R14; \
	DECQ       R12; \
	JNZ        loop; \
done:

// G8_ACC points R12 at the current group's 24 accumulators in acc (1536 bytes a group, in the order of the
// calls' groups).
#define G8_ACC \
	MOVQ  groups+0(FP), R12; \
	SUBQ  R13, R12; \
	IMULQ $1536, R12; \
	ADDQ  acc+72(FP), R12

// G8_ACC24(op) moves the 24 accumulators to (VMOVUPS Zn, off(R12)) or from (VMOVUPS off(R12), Zn) acc, as op
// orders its operands.
#define G8_ACC24(op) \
	op(0, Z0); op(64, Z1); op(128, Z2); op(192, Z3); op(256, Z4); op(320, Z5); op(384, Z6); op(448, Z7); \
	op(512, Z8); op(576, Z9); op(640, Z10); op(704, Z11); op(768, Z12); op(832, Z13); op(896, Z14); \
	op(960, Z15); op(1024, Z16); op(1088, Z17); op(1152, Z18); op(1216, Z19); op(1280, Z20); op(1344, Z21); \
	op(1408, Z22); op(1472, Z23)

#define G8_LOADACC(off, z) VMOVUPS off(R12), z
#define G8_SAVEACC(off, z) VMOVUPS z, off(R12)

// G8_BEGIN starts a group: in mode 1 (set in mode) its sums go on from those acc holds, else from zero (label:
// unique to the use).
#define G8_BEGIN(label) \
	MOVQ  mode+80(FP), R12; \
	TESTQ $1, R12; \
	JZ    label; \
	G8_ACC; \
	G8_ACC24(G8_LOADACC); \
label:

// G8_END ends a group: in mode 2 its 24 sums are kept in acc for a later call over the next steps, else folded
// and stored (G8_SUM; labels: unique to the use).
#define G8_END(kept, fold, stored) \
	MOVQ  mode+80(FP), R12; \
	TESTQ $2, R12; \
	JZ    fold; \
	G8_ACC; \
	G8_ACC24(G8_SAVEACC); \
	JMP   kept; \
fold: \
	G8_SUM(stored); \
kept:

// G8_XT loads one token's 16 steps of x (at off(DI)) into zx and multiplies them with the three rows' weights
// in Z24-Z26 into the token's sums a0-a2.
#define G8_XT(off, zx, a0, a1, a2) \
	VMOVUPS     off(DI), zx; \
	VFMADD231PS zx, Z24, a0; \
	VFMADD231PS zx, Z25, a1; \
	VFMADD231PS zx, Z26, a2

// G8_FMA is a step of the tile kernels: row r, token t sums into Z(12h+4r+u) for t = 4h+u, so that each half of
// the tokens is laid out as G8_HALF folds it.
#define G8_FMA \
	G8_XT(0, Z27, Z0, Z4, Z8); \
	G8_XT(64, Z28, Z1, Z5, Z9); \
	G8_XT(128, Z27, Z2, Z6, Z10); \
	G8_XT(192, Z28, Z3, Z7, Z11); \
	G8_XT(256, Z27, Z12, Z16, Z20); \
	G8_XT(320, Z28, Z13, Z17, Z21); \
	G8_XT(384, Z27, Z14, Z18, Z22); \
	G8_XT(448, Z28, Z15, Z19, Z23); \
	ADDQ $512, DI

// G8_L1..G8_L4 are GEMVFOLD's four levels for many accumulators at once (Z24, Z25: scratch). G8_L1 folds a and b
// (lane i plus lane i+8) into a: a's eight partial sums in its low half, b's in its high half. G8_L2 folds two
// such, c and d, into c, one accumulator's four partial sums in each quarter (a, b, then d's two). G8_L3 folds e0
// and e1 into e0, the two partial sums of e0's quarter then e1's in each quarter; G8_L4 folds g and h into g, one
// sum a lane.
#define G8_L1(a, b) \
	VSHUFF32X4 $0x44, b, a, Z24; \
	VSHUFF32X4 $0xee, b, a, Z25; \
	VADDPS     Z25, Z24, a

#define G8_L2(c, d) \
	VSHUFF32X4 $0x88, d, c, Z24; \
	VSHUFF32X4 $0xdd, d, c, Z25; \
	VADDPS     Z25, Z24, c

#define G8_L3(e0, e1) \
	VSHUFPS $0x44, e1, e0, Z24; \
	VSHUFPS $0xee, e1, e0, Z25; \
	VADDPS  Z25, Z24, e0

#define G8_L4(g, h) \
	VSHUFPS $0x88, h, g, Z24; \
	VSHUFPS $0xdd, h, g, Z25; \
	VADDPS  Z25, Z24, g

// G8_HALF folds a half's twelve accumulators (a0-a11: row r, token u in a(4r+u)) with a zero fourth row (Z26):
// a0 ends with token u's sums of rows 0-2, in row order, in its quarter u, then a zero.
#define G8_HALF(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11) \
	G8_L1(a0, a1); \
	G8_L1(a2, a3); \
	G8_L1(a4, a5); \
	G8_L1(a6, a7); \
	G8_L1(a8, a9); \
	G8_L1(a10, a11); \
	G8_L2(a0, a2); \
	G8_L2(a4, a6); \
	G8_L2(a8, a10); \
	G8_L3(a0, a4); \
	G8_L3(a8, Z26); \
	G8_L4(a0, a8)

// G8_PUT stores quarter q of z, three outputs, at R10 and moves R10 to the next token; after the last of the
// tokens (R12 counts them down) it jumps to done.
#define G8_PUT(q, z, done) \
	VEXTRACTF32X4 $q, z, X24; \
	VMOVUPS       X24, K2, (R10); \
	ADDQ          R8, R10; \
	DECQ          R12; \
	JZ            done

// G8_SUM folds both halves and stores the tokens' three outputs each, token t at DX + t·R8 (done: a unique
// label).
#define G8_SUM(done) \
	VPXORD Z26, Z26, Z26; \
	G8_HALF(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11); \
	G8_HALF(Z12, Z13, Z14, Z15, Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23); \
	MOVQ tokens+48(FP), R12; \
	MOVQ DX, R10; \
	G8_PUT(0, Z0, done); \
	G8_PUT(1, Z0, done); \
	G8_PUT(2, Z0, done); \
	G8_PUT(3, Z0, done); \
	G8_PUT(0, Z12, done); \
	G8_PUT(1, Z12, done); \
	G8_PUT(2, Z12, done); \
	G8_PUT(3, Z12, done); \
done:


// ---- AVX-512 micro-kernel, 14 rows × 32 outputs ----
//
// C's tile lives in Z0..Z27: row r in Z(2r) (outputs 0..15) and Z(2r+1) (outputs 16..31). Each step p loads
// row p of the W panel into Z28, Z29 and, for each of the 14 rows of A, broadcasts a[r][p] and multiply-adds:
// 28 FMAs against 2 vector loads and 14 broadcasts, which keeps both FMA pipes of a Zen 4/5 or Intel core busy
// (the 4-cycle FMA latency needs 8 independent accumulators; there are 28).

// ROW14 is one row's part of a step: broadcast a[r][p] (at addr) into bc and multiply-add it with the W row in
// Z28, Z29. The rows of A are lda floats apart: with AX = lda·4 and BX = 3·AX, row r is at SI + r·AX, addressed
// from SI (rows 0, 1, 2, 3, 4, 6, 8, 12), R14 = SI + 5·AX (rows 5, 7) and R15 = SI + 9·AX (rows 9, 10, 11, 13).
#define ROW14(addr, bc, c0, c1) \
	VBROADCASTSS addr, bc; \
	VFMADD231PS  Z28, bc, c0; \
	VFMADD231PS  Z29, bc, c1

// STORE14 writes one row of the tile to C and advances DX to the next row; ADD14 adds it to C first.
#define STORE14(c0, c1) \
	VMOVUPS c0, (DX); \
	VMOVUPS c1, 64(DX); \
	ADDQ    R8, DX

#define ADD14(c0, c1) \
	VADDPS  (DX), c0, c0; \
	VADDPS  64(DX), c1, c1; \
	STORE14(c0, c1)

// func gemmKernel14x32AVX512(kc int, a *float32, lda int, b, c *float32, ldc, acc int)
TEXT ·gemmKernel14x32AVX512(SB), NOSPLIT, $0-56
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), AX
	MOVQ b+24(FP), DI
	MOVQ c+32(FP), DX
	MOVQ ldc+40(FP), R8
	SHLQ $2, R8
	SHLQ $2, AX
	LEAQ (AX)(AX*2), BX
	LEAQ (SI)(AX*4), R14
	ADDQ AX, R14
	LEAQ (SI)(AX*8), R15
	ADDQ AX, R15
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	VPXORD Z24, Z24, Z24
	VPXORD Z25, Z25, Z25
	VPXORD Z26, Z26, Z26
	VPXORD Z27, Z27, Z27

k14:
	VMOVUPS (DI), Z28
	VMOVUPS 64(DI), Z29
	ROW14((SI), Z30, Z0, Z1)
	ROW14((SI)(AX*1), Z31, Z2, Z3)
	ROW14((SI)(AX*2), Z30, Z4, Z5)
	ROW14((SI)(BX*1), Z31, Z6, Z7)
	ROW14((SI)(AX*4), Z30, Z8, Z9)
	ROW14((R14), Z31, Z10, Z11)
	ROW14((SI)(BX*2), Z30, Z12, Z13)
	ROW14((R14)(AX*2), Z31, Z14, Z15)
	ROW14((SI)(AX*8), Z30, Z16, Z17)
	ROW14((R15), Z31, Z18, Z19)
	ROW14((R15)(AX*1), Z30, Z20, Z21)
	ROW14((R15)(AX*2), Z31, Z22, Z23)
	ROW14((SI)(BX*4), Z30, Z24, Z25)
	ROW14((R15)(AX*4), Z31, Z26, Z27)
	ADDQ $4, SI
	ADDQ $4, R14
	ADDQ $4, R15
	ADDQ $128, DI
	DECQ CX
	JNZ  k14

	MOVQ acc+48(FP), AX
	TESTQ AX, AX
	JNZ  add14
	STORE14(Z0, Z1)
	STORE14(Z2, Z3)
	STORE14(Z4, Z5)
	STORE14(Z6, Z7)
	STORE14(Z8, Z9)
	STORE14(Z10, Z11)
	STORE14(Z12, Z13)
	STORE14(Z14, Z15)
	STORE14(Z16, Z17)
	STORE14(Z18, Z19)
	STORE14(Z20, Z21)
	STORE14(Z22, Z23)
	STORE14(Z24, Z25)
	STORE14(Z26, Z27)
	VZEROUPPER
	RET

add14:
	ADD14(Z0, Z1)
	ADD14(Z2, Z3)
	ADD14(Z4, Z5)
	ADD14(Z6, Z7)
	ADD14(Z8, Z9)
	ADD14(Z10, Z11)
	ADD14(Z12, Z13)
	ADD14(Z14, Z15)
	ADD14(Z16, Z17)
	ADD14(Z18, Z19)
	ADD14(Z20, Z21)
	ADD14(Z22, Z23)
	ADD14(Z24, Z25)
	ADD14(Z26, Z27)
	VZEROUPPER
	RET

// ---- AVX2+FMA micro-kernel, 6 rows × 16 outputs ----
//
// The same scheme in 16 YMM registers: the tile in Y0..Y11 (row r in Y(2r), Y(2r+1)), the W row in Y12, Y13,
// broadcasts in Y14, Y15. 12 FMAs per step against 2 loads and 6 broadcasts.

// Rows of A lda floats apart (R9 = lda·4, R10 = 3·R9): rows 0-4 from SI, row 5 from R11 = SI + 5·R9.
#define ROW6(addr, bc, c0, c1) \
	VBROADCASTSS addr, bc; \
	VFMADD231PS  Y12, bc, c0; \
	VFMADD231PS  Y13, bc, c1

#define STORE6(c0, c1) \
	VMOVUPS c0, (DX); \
	VMOVUPS c1, 32(DX); \
	ADDQ    R8, DX

#define ADD6(c0, c1) \
	VADDPS  (DX), c0, c0; \
	VADDPS  32(DX), c1, c1; \
	STORE6(c0, c1)

// func gemmKernel6x16AVX2(kc int, a *float32, lda int, b, c *float32, ldc, acc int)
TEXT ·gemmKernel6x16AVX2(SB), NOSPLIT, $0-56
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), R9
	MOVQ b+24(FP), DI
	MOVQ c+32(FP), DX
	MOVQ ldc+40(FP), R8
	SHLQ $2, R8
	SHLQ $2, R9
	LEAQ (R9)(R9*2), R10
	LEAQ (SI)(R9*4), R11
	ADDQ R9, R11
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

k6:
	VMOVUPS (DI), Y12
	VMOVUPS 32(DI), Y13
	ROW6((SI), Y14, Y0, Y1)
	ROW6((SI)(R9*1), Y15, Y2, Y3)
	ROW6((SI)(R9*2), Y14, Y4, Y5)
	ROW6((SI)(R10*1), Y15, Y6, Y7)
	ROW6((SI)(R9*4), Y14, Y8, Y9)
	ROW6((R11), Y15, Y10, Y11)
	ADDQ $4, SI
	ADDQ $4, R11
	ADDQ $64, DI
	DECQ CX
	JNZ  k6

	MOVQ acc+48(FP), AX
	TESTQ AX, AX
	JNZ  add6
	STORE6(Y0, Y1)
	STORE6(Y2, Y3)
	STORE6(Y4, Y5)
	STORE6(Y6, Y7)
	STORE6(Y8, Y9)
	STORE6(Y10, Y11)
	VZEROUPPER
	RET

add6:
	ADD6(Y0, Y1)
	ADD6(Y2, Y3)
	ADD6(Y4, Y5)
	ADD6(Y6, Y7)
	ADD6(Y8, Y9)
	ADD6(Y10, Y11)
	VZEROUPPER
	RET

// ---- W panel packing ----

// 0, 1, ..., 15: lane numbers, scaled by the row stride into gather indices.
DATA gemmLanes<>+0(SB)/4, $0
DATA gemmLanes<>+4(SB)/4, $1
DATA gemmLanes<>+8(SB)/4, $2
DATA gemmLanes<>+12(SB)/4, $3
DATA gemmLanes<>+16(SB)/4, $4
DATA gemmLanes<>+20(SB)/4, $5
DATA gemmLanes<>+24(SB)/4, $6
DATA gemmLanes<>+28(SB)/4, $7
DATA gemmLanes<>+32(SB)/4, $8
DATA gemmLanes<>+36(SB)/4, $9
DATA gemmLanes<>+40(SB)/4, $10
DATA gemmLanes<>+44(SB)/4, $11
DATA gemmLanes<>+48(SB)/4, $12
DATA gemmLanes<>+52(SB)/4, $13
DATA gemmLanes<>+56(SB)/4, $14
DATA gemmLanes<>+60(SB)/4, $15
GLOBL gemmLanes<>(SB), RODATA|NOPTR, $64

// func gemmPackB32AVX512(dst, src *float32, ld, rows, kc int)
//
// Step p gathers column p of the 32 rows (two 16-lane gathers with indices r*ld, masked to the rows that
// exist) and stores it as row p of the panel.
TEXT ·gemmPackB32AVX512(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), AX
	VPBROADCASTD AX, Z29
	VPMULLD gemmLanes<>(SB), Z29, Z30 // Z30 = r*ld, rows 0..15
	SHLQ $4, AX
	VPBROADCASTD AX, Z29
	VPADDD Z29, Z30, Z31              // Z31 = r*ld, rows 16..31

	// R8, R9: lane masks of the rows that exist among 0..15 and 16..31.
	MOVQ rows+24(FP), CX
	MOVL $0xffff, R8
	XORL R9, R9
	CMPQ CX, $16
	JAE  hi
	MOVL $1, R8
	SHLL CX, R8
	DECL R8
	JMP  masked

hi:
	SUBQ $16, CX
	MOVL $1, R9
	SHLL CX, R9
	DECL R9

masked:
	MOVQ kc+32(FP), CX

pack32:
	KMOVW R8, K1
	KMOVW R9, K2
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VGATHERDPS (SI)(Z30*4), K1, Z0
	VGATHERDPS (SI)(Z31*4), K2, Z1
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	ADDQ $4, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  pack32
	VZEROUPPER
	RET

// ---- GEMV ----
//
// Every AVX-512 GEMV kernel forms each output the same way: one accumulator, to which the products of steps
// 0-15, 16-31, ... are added in turn (the last k%16 under the mask K1, which reads nothing past a row), summed by
// GEMVFOLD's tree. A token's outputs are therefore bit for bit the same whichever kernel computes them and
// however many tokens share the call, which holds the engine's batched logits to those of each sequence alone.
//
// The one-token kernels take four rows at a time (GQ_*), the rest one at a time: each 16 steps of x are loaded
// once for the four rows, whose values are the FMAs' memory operands (f32) or converted from memory (f16). A row
// at a time with x as the memory operand took two loads a vector of W, and the out-of-order window then held
// half as many of W's lines in flight: four rows a step stream W from memory at the probe's rate (the %bw of
// BenchmarkSuite/op=GEMM/m=1/n=4096/k=4096), where one row a step fell a fifth short of it and read L2 at half the
// rate. The four-row loops prefetch each row 16 KiB
// ahead into L2 (GQ_PF32 in gemvFarAVX512, which GEMV runs for W over gemvFarBytes; GQ_PF16, with 2 KiB
// ahead into L1), the one-row f16 loop 4 KiB ahead. Each iteration takes 64 steps.

// GQ_SETUP points R8 at the row after SI's (R8 = the row's bytes) and R14 at the row three on.
#define GQ_SETUP(shift) \
	MOVQ BX, R8; \
	SHLQ $shift, R8; \
	LEAQ (R8)(R8*2), R14

// GQ_ZERO clears the four rows' accumulators and points R9 at x.
#define GQ_ZERO \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3; \
	MOVQ   DI, R9

// GQ_F32 multiplies 16 steps of x (at off(R9), into zx) with the four rows' values at off(SI) into Z0-Z3.
#define GQ_F32(off, zx) \
	VMOVUPS     off(R9), zx; \
	VFMADD231PS off(SI), zx, Z0; \
	VFMADD231PS off(SI)(R8*1), zx, Z1; \
	VFMADD231PS off(SI)(R8*2), zx, Z2; \
	VFMADD231PS off(SI)(R14*1), zx, Z3

// GQ_PF4 prefetches (op: PREFETCHT0 or PREFETCHT1) the line at off of each of the four rows.
#define GQ_PF4(op, off) \
	op off(SI); \
	op off(SI)(R8*1); \
	op off(SI)(R8*2); \
	op off(SI)(R14*1)

// GQ_PF32 prefetches the four rows' lines 16 KiB further into L2, the 16 lines (four a row) that an iteration of
// GQ_F32 reads; gemvFarAVX512 runs it, for W that streams from memory. The hardware prefetchers alone fed the loop
// at about nine tenths of the probe's rate; with it the loop reads at the probe's rate (distances from 8 to 48 KiB
// read alike), and one line a row an iteration was no faster than none. With W in cache the prefetches cost load
// slots (a third of a 1 MB GEMV's rate), hence gemvAVX512 without them below gemvFarBytes.
#define GQ_PF32 \
	GQ_PF4(PREFETCHT1, 16384); \
	GQ_PF4(PREFETCHT1, 16448); \
	GQ_PF4(PREFETCHT1, 16512); \
	GQ_PF4(PREFETCHT1, 16576)

// GQ_F16 is GQ_F32 for binary16 rows (their 16 values at woff(SI)).
#define GQ_F16(woff, xoff, zx) \
	VMOVUPS     xoff(R9), zx; \
	VCVTPH2PS   woff(SI), Z8; \
	VFMADD231PS zx, Z8, Z0; \
	VCVTPH2PS   woff(SI)(R8*1), Z9; \
	VFMADD231PS zx, Z9, Z1; \
	VCVTPH2PS   woff(SI)(R8*2), Z10; \
	VFMADD231PS zx, Z10, Z2; \
	VCVTPH2PS   woff(SI)(R14*1), Z11; \
	VFMADD231PS zx, Z11, Z3

// GQ_PF16 prefetches the four rows' lines 16 KiB further into L2 and 2 KiB further into L1, the 8 lines (two a
// row) that an iteration of GQ_F16 reads: both levels, each row its own stream, read closer to the probe's rate
// than the L2 prefetch alone or one stream for the next four rows.
#define GQ_PF16 \
	GQ_PF4(PREFETCHT0, 2048); \
	GQ_PF4(PREFETCHT0, 2112); \
	GQ_PF4(PREFETCHT1, 16384); \
	GQ_PF4(PREFETCHT1, 16448)

// GQ_TAIL32 and GQ_TAIL16 add the last k%16 steps (K1; x's in Z4) of the row at addr into acc (zw, yw: scratch).
#define GQ_TAIL32(addr, zw, acc) \
	VMOVUPS.Z   addr, K1, zw; \
	VFMADD231PS Z4, zw, acc

#define GQ_TAIL16(addr, yw, zw, acc) \
	VMOVDQU16.Z addr, K1, yw; \
	VCVTPH2PS   yw, zw; \
	VFMADD231PS Z4, zw, acc

// GQ_STORE folds the four rows' sums into y[0..3] and moves DX on.
#define GQ_STORE \
	GEMVFOLD(Z0, Y0, X0, Y8, X8, (DX)); \
	GEMVFOLD(Z1, Y1, X1, Y8, X8, 4(DX)); \
	GEMVFOLD(Z2, Y2, X2, Y8, X8, 8(DX)); \
	GEMVFOLD(Z3, Y3, X3, Y8, X8, 12(DX)); \
	ADDQ $16, DX

// GQ_NO_PF is GEMV32_BODY's hook without a prefetch.
#define GQ_NO_PF

// GEMV32_BODY is the f32 GEMV, four rows at a time and then one (PF: the four-row loop's prefetch hook).
#define GEMV32_BODY(PF) \
	GEMVSETUP; \
	GQ_SETUP(2); \
	CMPQ R11, $4; \
	JB   row; \
quad: \
	GQ_ZERO; \
	MOVQ  R10, CX; \
	TESTQ CX, CX; \
	JZ    qsteps16; \
qsteps64: \
	PF; \
	GQ_F32(0, Z4); \
	GQ_F32(64, Z5); \
	GQ_F32(128, Z6); \
	GQ_F32(192, Z7); \
	ADDQ $256, SI; \
	ADDQ $256, R9; \
	DECQ CX; \
	JNZ  qsteps64; \
qsteps16: \
	MOVQ  R12, CX; \
	TESTQ CX, CX; \
	JZ    qtail; \
qloop16: \
	GQ_F32(0, Z4); \
	ADDQ $64, SI; \
	ADDQ $64, R9; \
	DECQ CX; \
	JNZ  qloop16; \
qtail: \
	TESTQ     R13, R13; \
	JZ        qsum; \
	VMOVUPS.Z (R9), K1, Z4; \
	GQ_TAIL32((SI), Z8, Z0); \
	GQ_TAIL32((SI)(R8*1), Z9, Z1); \
	GQ_TAIL32((SI)(R8*2), Z10, Z2); \
	GQ_TAIL32((SI)(R14*1), Z11, Z3); \
	LEAQ      (SI)(R13*4), SI; \
qsum: \
	GQ_STORE; \
	ADDQ R14, SI; \
	SUBQ $4, R11; \
	CMPQ R11, $4; \
	JAE  quad; \
	TESTQ R11, R11; \
	JZ   done; \
row: \
	VPXORD Z0, Z0, Z0; \
	MOVQ   DI, R9; \
	MOVQ   R10, CX; \
	TESTQ  CX, CX; \
	JZ     steps16; \
steps64: \
	VMOVUPS     (SI), Z4; \
	VMOVUPS     64(SI), Z5; \
	VMOVUPS     128(SI), Z6; \
	VMOVUPS     192(SI), Z7; \
	VFMADD231PS (R9), Z4, Z0; \
	VFMADD231PS 64(R9), Z5, Z0; \
	VFMADD231PS 128(R9), Z6, Z0; \
	VFMADD231PS 192(R9), Z7, Z0; \
	ADDQ        $256, SI; \
	ADDQ        $256, R9; \
	DECQ        CX; \
	JNZ         steps64; \
steps16: \
	MOVQ  R12, CX; \
	TESTQ CX, CX; \
	JZ    tail; \
loop16: \
	VMOVUPS     (SI), Z4; \
	VFMADD231PS (R9), Z4, Z0; \
	ADDQ        $64, SI; \
	ADDQ        $64, R9; \
	DECQ        CX; \
	JNZ         loop16; \
tail: \
	TESTQ       R13, R13; \
	JZ          sum; \
	VMOVUPS.Z   (SI), K1, Z4; \
	VMOVUPS.Z   (R9), K1, Z5; \
	VFMADD231PS Z5, Z4, Z0; \
	LEAQ        (SI)(R13*4), SI; \
sum: \
	GEMVFOLD(Z0, Y0, X0, Y1, X1, (DX)); \
	ADDQ $4, DX; \
	DECQ R11; \
	JNZ  row; \
done: \
	VZEROUPPER; \
	RET

// func gemvAVX512(rows, k int, w, x, y *float32)
TEXT ·gemvAVX512(SB), NOSPLIT, $0-40
	GEMV32_BODY(GQ_NO_PF)

// func gemvFarAVX512(rows, k int, w, x, y *float32)
// gemvAVX512 for W that streams from memory: GQ_PF32 in the four-row loop.
TEXT ·gemvFarAVX512(SB), NOSPLIT, $0-40
	GEMV32_BODY(GQ_PF32)

// func gemvF16AVX512(rows, k int, w *uint16, x, y *float32)
//
// As gemvAVX512, with each 16 weights (32 bytes) widened by VCVTPH2PS before the FMA.
TEXT ·gemvF16AVX512(SB), NOSPLIT, $0-40
	GEMVSETUP
	GQ_SETUP(1)
	CMPQ R11, $4
	JB   rowh

quadh:
	GQ_ZERO
	MOVQ  R10, CX
	TESTQ CX, CX
	JZ    qsteps16h

qsteps64h:
	GQ_PF16
	GQ_F16(0, 0, Z4)
	GQ_F16(32, 64, Z5)
	GQ_F16(64, 128, Z6)
	GQ_F16(96, 192, Z7)
	ADDQ $128, SI
	ADDQ $256, R9
	DECQ CX
	JNZ  qsteps64h

qsteps16h:
	MOVQ  R12, CX
	TESTQ CX, CX
	JZ    qtailh

qloop16h:
	GQ_F16(0, 0, Z4)
	ADDQ $32, SI
	ADDQ $64, R9
	DECQ CX
	JNZ  qloop16h

qtailh:
	TESTQ     R13, R13
	JZ        qsumh
	VMOVUPS.Z (R9), K1, Z4
	GQ_TAIL16((SI), Y8, Z8, Z0)
	GQ_TAIL16((SI)(R8*1), Y9, Z9, Z1)
	GQ_TAIL16((SI)(R8*2), Y10, Z10, Z2)
	GQ_TAIL16((SI)(R14*1), Y11, Z11, Z3)
	LEAQ      (SI)(R13*2), SI

qsumh:
	GQ_STORE
	ADDQ R14, SI
	SUBQ $4, R11
	CMPQ R11, $4
	JAE  quadh
	TESTQ R11, R11
	JZ   doneh

rowh:
	VPXORD Z0, Z0, Z0
	MOVQ   DI, R9
	MOVQ   R10, CX
	TESTQ  CX, CX
	JZ     steps16h

steps64h:
	PREFETCHT0  4096(SI)
	PREFETCHT0  4160(SI)
	VCVTPH2PS   (SI), Z4
	VCVTPH2PS   32(SI), Z5
	VCVTPH2PS   64(SI), Z6
	VCVTPH2PS   96(SI), Z7
	VFMADD231PS (R9), Z4, Z0
	VFMADD231PS 64(R9), Z5, Z0
	VFMADD231PS 128(R9), Z6, Z0
	VFMADD231PS 192(R9), Z7, Z0
	ADDQ        $128, SI
	ADDQ        $256, R9
	DECQ        CX
	JNZ         steps64h

steps16h:
	MOVQ  R12, CX
	TESTQ CX, CX
	JZ    tailh

loop16h:
	PREFETCHT0  4096(SI)
	VCVTPH2PS   (SI), Z4
	VFMADD231PS (R9), Z4, Z0
	ADDQ        $32, SI
	ADDQ        $64, R9
	DECQ        CX
	JNZ         loop16h

tailh:
	TESTQ       R13, R13
	JZ          sumh
	VMOVDQU16.Z (SI), K1, Y4
	VCVTPH2PS   Y4, Z4
	VMOVUPS.Z   (R9), K1, Z5
	VFMADD231PS Z5, Z4, Z0
	LEAQ        (SI)(R13*2), SI

sumh:
	GEMVFOLD(Z0, Y0, X0, Y1, X1, (DX))
	ADDQ $4, DX
	DECQ R11
	JNZ  rowh

doneh:
	VZEROUPPER
	RET

// ---- GEMV for a few tokens ----
//
// gemvTokensAVX512 and gemvTokensF16AVX512 are gemvAVX512 and gemvF16AVX512 for up to four tokens at once: each
// W row is read once (from memory) for all of them, token t summing into Z(t); W's values are in Z16-Z19. With
// four tokens to feed, the kernels do not keep pace with memory unaided, so both prefetch each row 16 KiB ahead into
// L2 (a tenth faster decode steps at batch 2 and 4) and 4 KiB ahead into L1. The f32 kernel prefetches one of an
// iteration's four lines into L2: from memory as fast as all four, and faster in cache, where every prefetch costs
// a load slot. Token t's x is at x + t·k floats (DI, R14, R15, AX; tokens past the
// count repeat token 0 and are not stored) and its outputs at y + t·ldy floats.

// func gemvTokensAVX512(rows, k int, w, x, y *float32, tokens, ldy int)
TEXT ·gemvTokensAVX512(SB), NOSPLIT, $0-56
	GEMVSETUP
	GT_SETUP

rowt:
	GT_ZERO
	XORL  R9, R9
	MOVQ  R10, CX
	TESTQ CX, CX
	JZ    steps16t

steps64t:
	PREFETCHT1 16384(SI)
	PREFETCHT0 4096(SI)
	PREFETCHT0 4160(SI)
	PREFETCHT0 4224(SI)
	PREFETCHT0 4288(SI)
	VMOVUPS    (SI), Z16
	VMOVUPS    64(SI), Z17
	VMOVUPS    128(SI), Z18
	VMOVUPS    192(SI), Z19
	GT_FMA(0, Z16)
	GT_FMA(64, Z17)
	GT_FMA(128, Z18)
	GT_FMA(192, Z19)
	ADDQ       $256, SI
	ADDQ       $256, R9
	DECQ       CX
	JNZ        steps64t

steps16t:
	MOVQ  R12, CX
	TESTQ CX, CX
	JZ    tailt

loop16t:
	VMOVUPS (SI), Z16
	GT_FMA(0, Z16)
	ADDQ    $64, SI
	ADDQ    $64, R9
	DECQ    CX
	JNZ     loop16t

tailt:
	TESTQ     R13, R13
	JZ        sumt
	VMOVUPS.Z (SI), K1, Z16
	GT_TAIL(Z16)
	LEAQ      (SI)(R13*4), SI

sumt:
	GT_STORE(storedt)
	ADDQ $4, DX
	DECQ R11
	JNZ  rowt
	VZEROUPPER
	RET

// func gemvTokensF16AVX512(rows, k int, w *uint16, x, y *float32, tokens, ldy int)
TEXT ·gemvTokensF16AVX512(SB), NOSPLIT, $0-56
	GEMVSETUP
	GT_SETUP

rowth:
	GT_ZERO
	XORL  R9, R9
	MOVQ  R10, CX
	TESTQ CX, CX
	JZ    steps16th

steps64th:
	PREFETCHT1 16384(SI)
	PREFETCHT1 16448(SI)
	PREFETCHT0 4096(SI)
	PREFETCHT0 4160(SI)
	VCVTPH2PS  (SI), Z16
	VCVTPH2PS  32(SI), Z17
	VCVTPH2PS  64(SI), Z18
	VCVTPH2PS  96(SI), Z19
	GT_FMA(0, Z16)
	GT_FMA(64, Z17)
	GT_FMA(128, Z18)
	GT_FMA(192, Z19)
	ADDQ       $128, SI
	ADDQ       $256, R9
	DECQ       CX
	JNZ        steps64th

steps16th:
	MOVQ  R12, CX
	TESTQ CX, CX
	JZ    tailth

loop16th:
	PREFETCHT0 4096(SI)
	VCVTPH2PS  (SI), Z16
	GT_FMA(0, Z16)
	ADDQ       $32, SI
	ADDQ       $64, R9
	DECQ       CX
	JNZ        loop16th

tailth:
	TESTQ       R13, R13
	JZ          sumth
	VMOVDQU16.Z (SI), K1, Y16
	VCVTPH2PS   Y16, Z16
	GT_TAIL(Z16)
	LEAQ        (SI)(R13*2), SI

sumth:
	GT_STORE(storedth)
	ADDQ $4, DX
	DECQ R11
	JNZ  rowth
	VZEROUPPER
	RET

// gemvTiles8AVX512 and gemvTiles8F16AVX512 are the few-token kernels for three rows of W at a time against
// eight tokens: 24 FMAs for every 3 loads of W and 8 of x, where the row-at-a-time kernel has 4 FMAs for 5 loads.
// Row r, token t sums into Z(12h+4r+u) (t = 4h+u); G8_SUM folds the 24 sums at once. x comes packed (gemvPanel:
// 16 steps of each token in turn, zero past k), so that one pointer serves the eight tokens and the registers
// left hold a prefetch stream, a few lines a step, which the caller points at the next block of W: these kernels
// run on W in cache (L2: each block is read again for every group of tokens). A four-row, four-token tile loads
// four lines of W for 16 FMAs and is bound by W's rate from L2; three rows by eight tokens are not.

// func gemvTiles8AVX512(groups, k, ldw int, w, xp, y *float32, tokens, ldy int, pf *linePrefetch, acc *float32,
//	mode int)
TEXT ·gemvTiles8AVX512(SB), NOSPLIT, $0-88
	G8_SETUP(2)

group8:
	G8_ROWS
	G8_BEGIN(begun8)
	CMPQ R9, CX
	JGE  tail8

loop8:
	VMOVUPS (SI)(R9*4), Z24
	VMOVUPS (R10)(R9*4), Z25
	VMOVUPS (R11)(R9*4), Z26
	G8_FMA
	G8_PREFETCH(pf8, pf8done)
	ADDQ    $16, R9
	CMPQ    R9, CX
	JLT     loop8

tail8:
	KORTESTW  K1, K1
	JZ        sum8
	VMOVUPS.Z (SI)(R9*4), K1, Z24
	VMOVUPS.Z (R10)(R9*4), K1, Z25
	VMOVUPS.Z (R11)(R9*4), K1, Z26
	G8_FMA

sum8:
	G8_END(ended8, fold8, stored8)
	LEAQ (SI)(BX*2), SI
	ADDQ BX, SI
	ADDQ $12, DX
	DECQ R13
	JNZ  group8
	G8_DONE
	VZEROUPPER
	RET

// func gemvTiles8F16AVX512(groups, k, ldw int, w *uint16, xp, y *float32, tokens, ldy int, pf *linePrefetch,
//	acc *float32, mode int)
TEXT ·gemvTiles8F16AVX512(SB), NOSPLIT, $0-88
	G8_SETUP(1)

group8h:
	G8_ROWS
	G8_BEGIN(begun8h)
	CMPQ R9, CX
	JGE  tail8h

loop8h:
	VCVTPH2PS (SI)(R9*2), Z24
	VCVTPH2PS (R10)(R9*2), Z25
	VCVTPH2PS (R11)(R9*2), Z26
	G8_FMA
	G8_PREFETCH(pf8h, pf8hdone)
	ADDQ      $16, R9
	CMPQ      R9, CX
	JLT       loop8h

tail8h:
	KORTESTW    K1, K1
	JZ          sum8h
	VMOVDQU16.Z (SI)(R9*2), K1, Y24
	VMOVDQU16.Z (R10)(R9*2), K1, Y25
	VMOVDQU16.Z (R11)(R9*2), K1, Y26
	VCVTPH2PS   Y24, Z24
	VCVTPH2PS   Y25, Z25
	VCVTPH2PS   Y26, Z26
	G8_FMA

sum8h:
	G8_END(ended8h, fold8h, stored8h)
	LEAQ (SI)(BX*2), SI
	ADDQ BX, SI
	ADDQ $12, DX
	DECQ R13
	JNZ  group8h
	G8_DONE
	VZEROUPPER
	RET

// func gemvAVX2(rows, k int, w, x, y *float32)
//
// gemvAVX512 for AVX2+FMA: 8 lanes, and only the first k&^7 steps (the Go caller adds the last k%8).
TEXT ·gemvAVX2(SB), NOSPLIT, $0-40
	MOVQ rows+0(FP), R11
	MOVQ k+8(FP), BX
	MOVQ w+16(FP), SI
	MOVQ x+24(FP), DI
	MOVQ y+32(FP), DX
	MOVQ BX, R12
	SHLQ $2, R12
	LEAQ (R12)(R12*2), R13
	MOVQ BX, R10
	SHRQ $4, R10

rows4a:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	MOVQ SI, R8
	MOVQ DI, R9
	MOVQ R10, CX
	TESTQ CX, CX
	JZ   tail8a

steps16a:
	VMOVUPS     (R9), Y8
	VMOVUPS     32(R9), Y9
	VFMADD231PS (R8), Y8, Y0
	VFMADD231PS 32(R8), Y9, Y1
	VFMADD231PS (R8)(R12*1), Y8, Y2
	VFMADD231PS 32(R8)(R12*1), Y9, Y3
	VFMADD231PS (R8)(R12*2), Y8, Y4
	VFMADD231PS 32(R8)(R12*2), Y9, Y5
	VFMADD231PS (R8)(R13*1), Y8, Y6
	VFMADD231PS 32(R8)(R13*1), Y9, Y7
	ADDQ $64, R8
	ADDQ $64, R9
	DECQ CX
	JNZ  steps16a

tail8a:
	TESTQ $8, BX
	JZ    sum4a
	VMOVUPS     (R9), Y8
	VFMADD231PS (R8), Y8, Y0
	VFMADD231PS (R8)(R12*1), Y8, Y2
	VFMADD231PS (R8)(R12*2), Y8, Y4
	VFMADD231PS (R8)(R13*1), Y8, Y6

sum4a:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y5, Y4, Y4
	VADDPS       Y7, Y6, Y6
	VHADDPS      Y2, Y0, Y0
	VHADDPS      Y6, Y4, Y4
	VHADDPS      Y4, Y0, Y0
	VEXTRACTF128 $1, Y0, X8
	VADDPS       X8, X0, X0
	VMOVUPS      X0, (DX)
	ADDQ $16, DX
	LEAQ (SI)(R12*4), SI
	SUBQ $4, R11
	JNZ  rows4a
	VZEROUPPER
	RET

// func gemvF16AVX2(rows, k int, w *uint16, x, y *float32)
//
// gemvAVX2 with binary16 weights, widened by VCVTPH2PS (F16C) 8 at a time.
TEXT ·gemvF16AVX2(SB), NOSPLIT, $0-40
	MOVQ rows+0(FP), R11
	MOVQ k+8(FP), BX
	MOVQ w+16(FP), SI
	MOVQ x+24(FP), DI
	MOVQ y+32(FP), DX
	MOVQ BX, R12
	SHLQ $1, R12
	LEAQ (R12)(R12*2), R13
	MOVQ BX, R10
	SHRQ $4, R10

rows4ah:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	MOVQ SI, R8
	MOVQ DI, R9
	MOVQ R10, CX
	TESTQ CX, CX
	JZ   tail8ah

steps16ah:
	VMOVUPS     (R9), Y8
	VMOVUPS     32(R9), Y9
	VCVTPH2PS   (R8), Y10
	VCVTPH2PS   16(R8), Y11
	VFMADD231PS Y10, Y8, Y0
	VFMADD231PS Y11, Y9, Y1
	VCVTPH2PS   (R8)(R12*1), Y10
	VCVTPH2PS   16(R8)(R12*1), Y11
	VFMADD231PS Y10, Y8, Y2
	VFMADD231PS Y11, Y9, Y3
	VCVTPH2PS   (R8)(R12*2), Y10
	VCVTPH2PS   16(R8)(R12*2), Y11
	VFMADD231PS Y10, Y8, Y4
	VFMADD231PS Y11, Y9, Y5
	VCVTPH2PS   (R8)(R13*1), Y10
	VCVTPH2PS   16(R8)(R13*1), Y11
	VFMADD231PS Y10, Y8, Y6
	VFMADD231PS Y11, Y9, Y7
	ADDQ $32, R8
	ADDQ $64, R9
	DECQ CX
	JNZ  steps16ah

tail8ah:
	TESTQ $8, BX
	JZ    sum4ah
	VMOVUPS     (R9), Y8
	VCVTPH2PS   (R8), Y10
	VFMADD231PS Y10, Y8, Y0
	VCVTPH2PS   (R8)(R12*1), Y10
	VFMADD231PS Y10, Y8, Y2
	VCVTPH2PS   (R8)(R12*2), Y10
	VFMADD231PS Y10, Y8, Y4
	VCVTPH2PS   (R8)(R13*1), Y10
	VFMADD231PS Y10, Y8, Y6

sum4ah:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y5, Y4, Y4
	VADDPS       Y7, Y6, Y6
	VHADDPS      Y2, Y0, Y0
	VHADDPS      Y6, Y4, Y4
	VHADDPS      Y4, Y0, Y0
	VEXTRACTF128 $1, Y0, X8
	VADDPS       X8, X0, X0
	VMOVUPS      X0, (DX)
	ADDQ $16, DX
	LEAQ (SI)(R12*4), SI
	SUBQ $4, R11
	JNZ  rows4ah
	VZEROUPPER
	RET
