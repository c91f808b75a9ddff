//go:build !noasm

#include "textflag.h"

// The AVX2 twin of the W4A8 row kernels (qkern_amd64.s), for machines without AVX-512 VNNI. VPMADDUBSW
// multiplies the unsigned bytes of its second source by the signed bytes of its first (Go operand order) and adds
// adjacent products into int16 lanes; a code is at most 15 and an activation at least -128, so a pair is within
// ±3,840 and never saturates. VPMADDWD by ones then adds adjacent int16 lanes into int32 lanes, exactly.

// W4_SETUP loads what stays for the call (SI w, R8 s, R9 z, R13 rows, DX y), the nibble mask into Y15 and int16
// ones into Y14. The macros are defined before any TEXT, so that vet checks their argument names against the two
// functions that use them, which share these arguments' offsets.
#define W4_SETUP \
	MOVQ         w+0(FP), SI; \
	MOVQ         s+32(FP), R8; \
	MOVQ         z+40(FP), R9; \
	MOVQ         rows+64(FP), R13; \
	MOVQ         y+80(FP), DX; \
	MOVL         $0x0f0f0f0f, AX; \
	VMOVD        AX, X15; \
	VPBROADCASTD X15, Y15; \
	MOVL         $0x00010001, AX; \
	VMOVD        AX, X14; \
	VPBROADCASTD X14, Y14

// W4X4_TOKEN adds one chunk of a token, its activations at mem, to the int32 sums Vacc (codes in Y4).
#define W4X4_TOKEN(mem, Vacc) \
	VPMADDUBSW mem, Y4, Y5; \
	VPMADDWD   Y14, Y5, Y5; \
	VPADDD     Y5, Vacc, Vacc

// W4X4_SCALE converts a token's group sums Vacc and adds them, scaled by the group's scale in Y11, to Vf.
#define W4X4_SCALE(Vacc, Vf) \
	VCVTDQ2PS   Vacc, Vacc; \
	VFMADD231PS Vacc, Y11, Vf

// func qDotW4A8Rows32AVX2(w *uint8, k int, xr *int8, xs *int32, s *float32, z *uint8, groups, chunks, rows int,
//	sa float32, y *float32)
// y[r] = sa·Σ_g s[g]·(Σ_{p in g} q[p]·x[p] - z[g]·xs[g]) for the rows r < rows (qDotW4A8Go), chunks of 16 packed
// bytes (32 codes): xr holds each chunk's 16 even activations, then its 16 odd ones, the order of the low nibbles
// and the high nibbles of the 16 bytes. Two chunks an iteration into two int32 sums when a group has an even
// number of chunks. The lane sums are added ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)), as qDotW4A8Rows32x4AVX2 adds
// them, so that a token's outputs are the same alone and among others.
TEXT ·qDotW4A8Rows32AVX2(SB), NOSPLIT, $0-88
	W4_SETUP

w4row:
	MOVQ   xr+16(FP), BX
	MOVQ   xs+24(FP), R10
	MOVQ   groups+48(FP), R11
	VXORPS Y13, Y13, Y13 // the row's float lane sums
	VXORPS X12, X12, X12 // its zero points' share

w4group:
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	MOVQ  chunks+56(FP), CX
	CMPQ  CX, $1
	JEQ   w4one

w4two:
	VMOVDQU     (SI), X4
	VPSRLW      $4, X4, X5
	VINSERTI128 $1, X5, Y4, Y4
	VPAND       Y15, Y4, Y4
	VMOVDQU     16(SI), X6
	VPSRLW      $4, X6, X7
	VINSERTI128 $1, X7, Y6, Y6
	VPAND       Y15, Y6, Y6
	VPMADDUBSW  (BX), Y4, Y4
	VPMADDUBSW  32(BX), Y6, Y6
	VPMADDWD    Y14, Y4, Y4
	VPMADDWD    Y14, Y6, Y6
	VPADDD      Y4, Y0, Y0
	VPADDD      Y6, Y1, Y1
	ADDQ        $32, SI
	ADDQ        $64, BX
	SUBQ        $2, CX
	CMPQ        CX, $1
	JGT         w4two
	JLT         w4groupend

w4one:
	VMOVDQU     (SI), X4
	VPSRLW      $4, X4, X5
	VINSERTI128 $1, X5, Y4, Y4
	VPAND       Y15, Y4, Y4
	VPMADDUBSW  (BX), Y4, Y4
	VPMADDWD    Y14, Y4, Y4
	VPADDD      Y4, Y0, Y0
	ADDQ        $16, SI
	ADDQ        $32, BX

w4groupend:
	VPADDD       Y1, Y0, Y0
	VCVTDQ2PS    Y0, Y0
	VBROADCASTSS (R8), Y2
	VFMADD231PS  Y0, Y2, Y13
	MOVBLZX      (R9), AX
	IMULL        (R10), AX
	VCVTSI2SSL   AX, X9, X9
	VFMADD231SS  (R8), X9, X12
	ADDQ         $4, R8
	INCQ         R9
	ADDQ         $4, R10
	DECQ         R11
	JNZ          w4group

	VHADDPS      Y13, Y13, Y0
	VHADDPS      Y0, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDSS       X1, X0, X0
	VSUBSS       X12, X0, X0
	VMULSS       sa+72(FP), X0, X0
	VMOVSS       X0, (DX)
	ADDQ         $4, DX
	DECQ         R13
	JNZ          w4row
	VZEROUPPER
	RET

// func qDotW4A8Rows32x4AVX2(w *uint8, k int, xr *int8, xs *int32, s *float32, z *uint8, groups, chunks, rows int,
//	sa *float32, y *float32, ldy int)
// qDotW4A8Rows32AVX2 for four tokens at once, each chunk of codes unpacked once for the four: token t's
// activations at xr + t·k, its group sums at xs + t·groups, its scale sa[t], its outputs at y + t·ldy. Each
// token's outputs are bit for bit what qDotW4A8Rows32AVX2 gives it.
TEXT ·qDotW4A8Rows32x4AVX2(SB), NOSPLIT, $0-96
	W4_SETUP
	MOVQ k+8(FP), R12
	LEAQ (R12)(R12*2), DI // 3k

x4row:
	MOVQ   xs+24(FP), R10
	MOVQ   groups+48(FP), R11
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS X10, X10, X10 // the four tokens' zero point shares
	MOVQ   xr+16(FP), BX

x4group:
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	MOVQ  chunks+56(FP), CX

x4chunk:
	VMOVDQU     (SI), X4
	VPSRLW      $4, X4, X5
	VINSERTI128 $1, X5, Y4, Y4
	VPAND       Y15, Y4, Y4
	W4X4_TOKEN((BX), Y0)
	W4X4_TOKEN((BX)(R12*1), Y1)
	W4X4_TOKEN((BX)(R12*2), Y2)
	W4X4_TOKEN((BX)(DI*1), Y3)
	ADDQ        $16, SI
	ADDQ        $32, BX
	DECQ        CX
	JNZ         x4chunk

	VBROADCASTSS (R8), Y11
	W4X4_SCALE(Y0, Y6)
	W4X4_SCALE(Y1, Y7)
	W4X4_SCALE(Y2, Y8)
	W4X4_SCALE(Y3, Y9)
	MOVQ         groups+48(FP), AX
	SHLQ         $2, AX
	VMOVD        (R10), X12
	VPINSRD      $1, (R10)(AX*1), X12, X12
	VPINSRD      $2, (R10)(AX*2), X12, X12
	LEAQ         (AX)(AX*2), AX
	VPINSRD      $3, (R10)(AX*1), X12, X12
	MOVBLZX      (R9), AX
	VMOVD        AX, X13
	VPBROADCASTD X13, X13
	VPMULLD      X13, X12, X12
	VCVTDQ2PS    X12, X12
	VFMADD231PS  X12, X11, X10
	ADDQ         $4, R8
	INCQ         R9
	ADDQ         $4, R10
	DECQ         R11
	JNZ          x4group

	VHADDPS      Y7, Y6, Y6
	VHADDPS      Y9, Y8, Y8
	VHADDPS      Y8, Y6, Y6
	VEXTRACTF128 $1, Y6, X11
	VADDPS       X11, X6, X6
	VSUBPS       X10, X6, X6
	MOVQ         sa+72(FP), AX
	VMULPS       (AX), X6, X6
	MOVQ         ldy+88(FP), AX
	SHLQ         $2, AX
	VMOVSS       X6, (DX)
	VEXTRACTPS   $1, X6, (DX)(AX*1)
	VEXTRACTPS   $2, X6, (DX)(AX*2)
	LEAQ         (AX)(AX*2), AX
	VEXTRACTPS   $3, X6, (DX)(AX*1)
	ADDQ         $4, DX
	DECQ         R13
	JNZ          x4row
	VZEROUPPER
	RET
