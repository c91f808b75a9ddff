//go:build !noasm

#include "textflag.h"

// The AVX2 few-token GEMV kernels: up to four tokens against one row of W at a time, so that W is read once for
// them. Each token's sum over a row is gemvAVX2's (gemvF16AVX2's) for that row, operation for operation: two
// 8-lane accumulators over steps of 16 (the odd 8 steps into the first), added, then reduced by the same
// horizontal adds, so a token's outputs do not depend on the tokens beside it. The last k%8 steps are the Go
// caller's, as they are gemv's.

// TOKENS_SETUP points DI, R9, R10, R11 at the four tokens' x (k floats apart; the missing ones at the first),
// and loads k (BX), rows (R13), w (SI), y (DX) and ldy in bytes (R12).
#define TOKENS_SETUP \
	MOVQ x+24(FP), DI; \
	MOVQ k+8(FP), BX; \
	MOVQ tokens+40(FP), CX; \
	MOVQ DI, R9; \
	MOVQ DI, R10; \
	MOVQ DI, R11; \
	CMPQ CX, $2; \
	JLT  ptrsdone; \
	LEAQ (DI)(BX*4), R9; \
	CMPQ CX, $3; \
	JLT  ptrsdone; \
	LEAQ (R9)(BX*4), R10; \
	CMPQ CX, $4; \
	JLT  ptrsdone; \
	LEAQ (R10)(BX*4), R11; \
ptrsdone: \
	MOVQ rows+0(FP), R13; \
	MOVQ w+16(FP), SI; \
	MOVQ y+32(FP), DX; \
	MOVQ ldy+48(FP), R12; \
	SHLQ $2, R12

// TOKENS_ROW_START clears the eight sums and points R8 at the row, AX at step 0, CX at the 16-step count.
#define TOKENS_ROW_START \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7; \
	MOVQ   SI, R8; \
	XORQ   AX, AX; \
	MOVQ   BX, CX; \
	SHRQ   $4, CX

// TOKENS_FMA16 adds 16 steps of the four tokens, the row's values in Y10 (first 8) and Y11.
#define TOKENS_FMA16 \
	VFMADD231PS (DI)(AX*1), Y10, Y0; \
	VFMADD231PS 32(DI)(AX*1), Y11, Y1; \
	VFMADD231PS (R9)(AX*1), Y10, Y2; \
	VFMADD231PS 32(R9)(AX*1), Y11, Y3; \
	VFMADD231PS (R10)(AX*1), Y10, Y4; \
	VFMADD231PS 32(R10)(AX*1), Y11, Y5; \
	VFMADD231PS (R11)(AX*1), Y10, Y6; \
	VFMADD231PS 32(R11)(AX*1), Y11, Y7; \
	ADDQ        $64, AX

// TOKENS_FMA8 adds 8 steps, the row's values in Y10.
#define TOKENS_FMA8 \
	VFMADD231PS (DI)(AX*1), Y10, Y0; \
	VFMADD231PS (R9)(AX*1), Y10, Y2; \
	VFMADD231PS (R10)(AX*1), Y10, Y4; \
	VFMADD231PS (R11)(AX*1), Y10, Y6

// TOKENS_ROW_END reduces the sums as gemvAVX2 does and stores the first tokens's outputs, ldy (R12) floats apart.
#define TOKENS_ROW_END \
	VADDPS       Y1, Y0, Y0; \
	VADDPS       Y3, Y2, Y2; \
	VADDPS       Y5, Y4, Y4; \
	VADDPS       Y7, Y6, Y6; \
	VHADDPS      Y2, Y0, Y0; \
	VHADDPS      Y6, Y4, Y4; \
	VHADDPS      Y4, Y0, Y0; \
	VEXTRACTF128 $1, Y0, X8; \
	VADDPS       X8, X0, X0; \
	MOVQ         tokens+40(FP), CX; \
	VMOVSS       X0, (DX); \
	CMPQ         CX, $2; \
	JLT          stored; \
	VEXTRACTPS   $1, X0, (DX)(R12*1); \
	CMPQ         CX, $3; \
	JLT          stored; \
	VEXTRACTPS   $2, X0, (DX)(R12*2); \
	CMPQ         CX, $4; \
	JLT          stored; \
	LEAQ         (DX)(R12*2), AX; \
	VEXTRACTPS   $3, X0, (AX)(R12*1); \
stored: \
	ADDQ         $4, DX

// func gemvTokensAVX2(rows, k int, w, x, y *float32, tokens, ldy int)
// y[t*ldy+j] = Σ_{p < k&^7} w[j*k+p]·x[t*k+p] for rows j and tokens t < tokens <= 4.
TEXT ·gemvTokensAVX2(SB), NOSPLIT, $0-56
	TOKENS_SETUP

row32:
	TOKENS_ROW_START
	TESTQ CX, CX
	JZ    tail32

steps32:
	VMOVUPS (R8), Y10
	VMOVUPS 32(R8), Y11
	TOKENS_FMA16
	ADDQ    $64, R8
	DECQ    CX
	JNZ     steps32

tail32:
	TESTQ   $8, BX
	JZ      sum32
	VMOVUPS (R8), Y10
	TOKENS_FMA8

sum32:
	TOKENS_ROW_END
	LEAQ (SI)(BX*4), SI
	DECQ R13
	JNZ  row32
	VZEROUPPER
	RET

// func gemvTokensF16AVX2(rows, k int, w *uint16, x, y *float32, tokens, ldy int)
// gemvTokensAVX2 with binary16 weights, widened by VCVTPH2PS 8 at a time.
TEXT ·gemvTokensF16AVX2(SB), NOSPLIT, $0-56
	TOKENS_SETUP

row16:
	TOKENS_ROW_START
	TESTQ CX, CX
	JZ    tail16

steps16:
	VCVTPH2PS (R8), Y10
	VCVTPH2PS 16(R8), Y11
	TOKENS_FMA16
	ADDQ      $32, R8
	DECQ      CX
	JNZ       steps16

tail16:
	TESTQ     $8, BX
	JZ        sum16
	VCVTPH2PS (R8), Y10
	TOKENS_FMA8

sum16:
	TOKENS_ROW_END
	LEAQ (SI)(BX*2), SI
	DECQ R13
	JNZ  row16
	VZEROUPPER
	RET
