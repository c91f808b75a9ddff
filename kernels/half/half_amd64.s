//go:build !noasm

#include "textflag.h"

// func halfF16ToF32AVX512(dst *float32, src *uint16, n int)
// n is a multiple of 64: four 16-lane VCVTPH2PS per iteration.
TEXT ·halfF16ToF32AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $6, CX
	JZ   f16w512done

f16w512loop:
	VCVTPH2PS (SI), Z0
	VCVTPH2PS 32(SI), Z1
	VCVTPH2PS 64(SI), Z2
	VCVTPH2PS 96(SI), Z3
	VMOVUPS   Z0, (DI)
	VMOVUPS   Z1, 64(DI)
	VMOVUPS   Z2, 128(DI)
	VMOVUPS   Z3, 192(DI)
	ADDQ      $128, SI
	ADDQ      $256, DI
	DECQ      CX
	JNZ       f16w512loop

f16w512done:
	VZEROUPPER
	RET

// func halfF32ToF16AVX512(dst *uint16, src *float32, n int)
// Rounding control imm 0: round to nearest even, whatever MXCSR says.
TEXT ·halfF32ToF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $6, CX
	JZ   f16n512done

f16n512loop:
	VMOVUPS   (SI), Z0
	VMOVUPS   64(SI), Z1
	VMOVUPS   128(SI), Z2
	VMOVUPS   192(SI), Z3
	VCVTPS2PH $0, Z0, Y4
	VCVTPS2PH $0, Z1, Y5
	VCVTPS2PH $0, Z2, Y6
	VCVTPS2PH $0, Z3, Y7
	VMOVDQU   Y4, (DI)
	VMOVDQU   Y5, 32(DI)
	VMOVDQU   Y6, 64(DI)
	VMOVDQU   Y7, 96(DI)
	ADDQ      $256, SI
	ADDQ      $128, DI
	DECQ      CX
	JNZ       f16n512loop

f16n512done:
	VZEROUPPER
	RET

// func halfBF16ToF32AVX512(dst *float32, src *uint16, n int)
// Zero-extend each 16-bit value to 32 bits and shift it into the top half.
TEXT ·halfBF16ToF32AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $6, CX
	JZ   bf16w512done

bf16w512loop:
	VPMOVZXWD (SI), Z0
	VPMOVZXWD 32(SI), Z1
	VPMOVZXWD 64(SI), Z2
	VPMOVZXWD 96(SI), Z3
	VPSLLD    $16, Z0, Z0
	VPSLLD    $16, Z1, Z1
	VPSLLD    $16, Z2, Z2
	VPSLLD    $16, Z3, Z3
	VMOVDQU32 Z0, (DI)
	VMOVDQU32 Z1, 64(DI)
	VMOVDQU32 Z2, 128(DI)
	VMOVDQU32 Z3, 192(DI)
	ADDQ      $128, SI
	ADDQ      $256, DI
	DECQ      CX
	JNZ       bf16w512loop

bf16w512done:
	VZEROUPPER
	RET

// BF16N512 rounds the 16 floats in Z(in) to bfloat16 and stores them at off(DI). The integer form of F32ToBF16:
// r = (b + 0x7fff + (b>>16)&1) >> 16, replaced by (b>>16)|0x40 where |b| > Inf (a NaN). Needs Z16 = 1,
// Z17 = 0x7fff, Z18 = 0x7fffffff, Z19 = 0x7f800000, Z20 = 0x40. Clobbers Z21-Z23, K1.
#define BF16N512(in, off) \
	VPSRLD    $16, in, Z21         \
	VPANDD    Z16, Z21, Z22        \
	VPADDD    Z17, in, Z23         \
	VPADDD    Z22, Z23, Z23        \
	VPSRLD    $16, Z23, Z23        \
	VPANDD    Z18, in, Z22         \
	VPCMPGTD  Z19, Z22, K1         \
	VPORD     Z20, Z21, Z21        \
	VMOVDQU32 Z21, K1, Z23         \
	VPMOVDW   Z23, off(DI)

// func halfF32ToBF16AVX512(dst *uint16, src *float32, n int)
// Integer rounding rather than VCVTNEPS2BF16, which flushes subnormals to zero.
TEXT ·halfF32ToBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	SHRQ         $6, CX
	JZ           bf16n512done
	MOVL         $1, AX
	VPBROADCASTD AX, Z16
	MOVL         $0x7fff, AX
	VPBROADCASTD AX, Z17
	MOVL         $0x7fffffff, AX
	VPBROADCASTD AX, Z18
	MOVL         $0x7f800000, AX
	VPBROADCASTD AX, Z19
	MOVL         $0x40, AX
	VPBROADCASTD AX, Z20

bf16n512loop:
	VMOVDQU32 (SI), Z0
	VMOVDQU32 64(SI), Z1
	VMOVDQU32 128(SI), Z2
	VMOVDQU32 192(SI), Z3
	BF16N512(Z0, 0)
	BF16N512(Z1, 32)
	BF16N512(Z2, 64)
	BF16N512(Z3, 96)
	ADDQ      $256, SI
	ADDQ      $128, DI
	DECQ      CX
	JNZ       bf16n512loop

bf16n512done:
	VZEROUPPER
	RET

// func halfF16ToF32F16C(dst *float32, src *uint16, n int)
// n is a multiple of 32: four 8-lane VCVTPH2PS per iteration.
TEXT ·halfF16ToF32F16C(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $5, CX
	JZ   f16w256done

f16w256loop:
	VCVTPH2PS (SI), Y0
	VCVTPH2PS 16(SI), Y1
	VCVTPH2PS 32(SI), Y2
	VCVTPH2PS 48(SI), Y3
	VMOVUPS   Y0, (DI)
	VMOVUPS   Y1, 32(DI)
	VMOVUPS   Y2, 64(DI)
	VMOVUPS   Y3, 96(DI)
	ADDQ      $64, SI
	ADDQ      $128, DI
	DECQ      CX
	JNZ       f16w256loop

f16w256done:
	VZEROUPPER
	RET

// func halfF32ToF16F16C(dst *uint16, src *float32, n int)
TEXT ·halfF32ToF16F16C(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $5, CX
	JZ   f16n256done

f16n256loop:
	VMOVUPS   (SI), Y0
	VMOVUPS   32(SI), Y1
	VMOVUPS   64(SI), Y2
	VMOVUPS   96(SI), Y3
	VCVTPS2PH $0, Y0, X4
	VCVTPS2PH $0, Y1, X5
	VCVTPS2PH $0, Y2, X6
	VCVTPS2PH $0, Y3, X7
	VMOVDQU   X4, (DI)
	VMOVDQU   X5, 16(DI)
	VMOVDQU   X6, 32(DI)
	VMOVDQU   X7, 48(DI)
	ADDQ      $128, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       f16n256loop

f16n256done:
	VZEROUPPER
	RET

// func halfBF16ToF32AVX2(dst *float32, src *uint16, n int)
TEXT ·halfBF16ToF32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $5, CX
	JZ   bf16w256done

bf16w256loop:
	VPMOVZXWD (SI), Y0
	VPMOVZXWD 16(SI), Y1
	VPMOVZXWD 32(SI), Y2
	VPMOVZXWD 48(SI), Y3
	VPSLLD    $16, Y0, Y0
	VPSLLD    $16, Y1, Y1
	VPSLLD    $16, Y2, Y2
	VPSLLD    $16, Y3, Y3
	VMOVDQU   Y0, (DI)
	VMOVDQU   Y1, 32(DI)
	VMOVDQU   Y2, 64(DI)
	VMOVDQU   Y3, 96(DI)
	ADDQ      $64, SI
	ADDQ      $128, DI
	DECQ      CX
	JNZ       bf16w256loop

bf16w256done:
	VZEROUPPER
	RET

// BF16N256 rounds the 8 floats in Y(in) to bfloat16 as 8 dwords in out, as BF16N512 does. Needs Y8 = 1,
// Y9 = 0x7fff, Y10 = 0x7fffffff, Y11 = 0x7f800000, Y12 = 0x40. Clobbers Y13-Y15.
#define BF16N256(in, out) \
	VPSRLD    $16, in, Y13         \
	VPAND     Y8, Y13, Y14         \
	VPADDD    Y9, in, out          \
	VPADDD    Y14, out, out        \
	VPSRLD    $16, out, out        \
	VPAND     Y10, in, Y14         \
	VPCMPGTD  Y11, Y14, Y14        \
	VPOR      Y12, Y13, Y13        \
	VPBLENDVB Y14, Y13, out, out

// func halfF32ToBF16AVX2(dst *uint16, src *float32, n int)
// VPACKUSDW packs two registers of dwords (all <= 0xffff, so nothing saturates) lane by lane; VPERMQ puts the
// 64-bit quarters back in order.
TEXT ·halfF32ToBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	SHRQ         $5, CX
	JZ           bf16n256done
	MOVL         $1, AX
	MOVQ         AX, X8
	VPBROADCASTD X8, Y8
	MOVL         $0x7fff, AX
	MOVQ         AX, X9
	VPBROADCASTD X9, Y9
	MOVL         $0x7fffffff, AX
	MOVQ         AX, X10
	VPBROADCASTD X10, Y10
	MOVL         $0x7f800000, AX
	MOVQ         AX, X11
	VPBROADCASTD X11, Y11
	MOVL         $0x40, AX
	MOVQ         AX, X12
	VPBROADCASTD X12, Y12

bf16n256loop:
	VMOVDQU   (SI), Y0
	VMOVDQU   32(SI), Y1
	VMOVDQU   64(SI), Y2
	VMOVDQU   96(SI), Y3
	BF16N256(Y0, Y4)
	BF16N256(Y1, Y5)
	BF16N256(Y2, Y6)
	BF16N256(Y3, Y7)
	VPACKUSDW Y5, Y4, Y4
	VPACKUSDW Y7, Y6, Y6
	VPERMQ    $0xd8, Y4, Y4
	VPERMQ    $0xd8, Y6, Y6
	VMOVDQU   Y4, (DI)
	VMOVDQU   Y6, 32(DI)
	ADDQ      $128, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       bf16n256loop

bf16n256done:
	VZEROUPPER
	RET
