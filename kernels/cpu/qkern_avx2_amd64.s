//go:build !noasm

#include "textflag.h"

// The AVX2 twin of the W4A8 row kernels (qkern_amd64.s), for machines without AVX-512 VNNI. VPMADDUBSW
// multiplies the unsigned bytes of its second source by the signed bytes of its first (Go operand order) and adds
// adjacent products into int16 lanes; a code is at most 15 and an activation at least -128, so a pair is within
// ±3,840 and never saturates. VPMADDWD by ones then adds adjacent int16 lanes into int32 lanes, exactly.

// func qDotW4A8Rows32AVX2(w *uint8, k int, xr *int8, xs *int32, s *float32, z *uint8, groups, chunks, rows int,
//	sa float32, y *float32)
// y[r] = sa·Σ_g s[g]·(Σ_{p in g} q[p]·x[p] - z[g]·xs[g]) for the rows r < rows (qDotW4A8Go), chunks of 16 packed
// bytes (32 codes): xr holds each chunk's 16 even activations, then its 16 odd ones, the order of the low nibbles
// and the high nibbles of the 16 bytes. Two chunks an iteration into two int32 sums when a group has an even
// number of chunks.
TEXT ·qDotW4A8Rows32AVX2(SB), NOSPLIT, $0-88
	MOVQ         w+0(FP), SI
	MOVQ         s+32(FP), R8
	MOVQ         z+40(FP), R9
	MOVQ         rows+64(FP), R13
	MOVQ         y+80(FP), DX
	MOVL         $0x0f0f0f0f, AX
	MOVQ         AX, X15
	VPBROADCASTD X15, Y15 // the nibble mask
	MOVL         $0x00010001, AX
	MOVQ         AX, X14
	VPBROADCASTD X14, Y14 // int16 ones

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

	VEXTRACTF128 $1, Y13, X1
	VADDPS       X1, X13, X0
	VPERMILPS    $0x4e, X0, X1
	VADDPS       X1, X0, X0
	VPERMILPS    $0xb1, X0, X1
	VADDSS       X1, X0, X0
	VSUBSS       X12, X0, X0
	VMULSS       sa+72(FP), X0, X0
	VMOVSS       X0, (DX)
	ADDQ         $4, DX
	DECQ         R13
	JNZ          w4row
	VZEROUPPER
	RET
