//go:build !noasm

#include "textflag.h"

// AVX2 twins of the attention micro-kernels that the general path runs (attn_generic.go has their
// specifications), for head dims of a multiple of 8; the fused decode kernel stays AVX-512's. Each sums in its
// own order, within float32 rounding of the Go loops.

// KEYS_REDUCE sums the lanes of Y0..Y3 (one query row each) into X0 = their four sums.
#define KEYS_REDUCE \
	VHADDPS      Y1, Y0, Y0; \
	VHADDPS      Y3, Y2, Y2; \
	VHADDPS      Y2, Y0, Y0; \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS       X1, X0, X0

// KEYS_STORE stores the first rows (R13) of the four sums in X0 to s at DX, 32 floats apart.
#define KEYS_STORE \
	VMOVSS     X0, (DX); \
	CMPQ       R13, $2; \
	JLT        stored; \
	VEXTRACTPS $1, X0, 128(DX); \
	CMPQ       R13, $3; \
	JLT        stored; \
	VEXTRACTPS $2, X0, 256(DX); \
	CMPQ       R13, $4; \
	JLT        stored; \
	VEXTRACTPS $3, X0, 384(DX); \
stored: \
	ADDQ       $4, DX

// KEYS_QPTRS points SI, R9, R10, R11 at query rows 0-3 (hd16 floats apart; the missing ones at row 0).
#define KEYS_QPTRS \
	MOVQ q+8(FP), SI; \
	MOVQ hd+48(FP), AX; \
	ADDQ $15, AX; \
	ANDQ $-16, AX; \
	MOVQ rows+40(FP), R13; \
	MOVQ SI, R9; \
	MOVQ SI, R10; \
	MOVQ SI, R11; \
	CMPQ R13, $2; \
	JLT  qptrs; \
	LEAQ (SI)(AX*4), R9; \
	CMPQ R13, $3; \
	JLT  qptrs; \
	LEAQ (R9)(AX*4), R10; \
	CMPQ R13, $4; \
	JLT  qptrs; \
	LEAQ (R10)(AX*4), R11; \
qptrs:

// func attnQKAVX2(s, q, kt *float32, hd int)
// s[r*32+c] = Σ_d q[r*hd+d]·kt[d*32+c] for the 8 query rows and the 32 keys of the tile.
TEXT ·attnQKAVX2(SB), NOSPLIT, $0-32
	MOVQ s+0(FP), DI
	MOVQ q+8(FP), SI
	MOVQ hd+24(FP), BX
	MOVQ $8, R8

qkrow:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVQ   kt+16(FP), DX
	MOVQ   BX, CX

qkstep:
	VBROADCASTSS (SI), Y4
	VFMADD231PS  (DX), Y4, Y0
	VFMADD231PS  32(DX), Y4, Y1
	VFMADD231PS  64(DX), Y4, Y2
	VFMADD231PS  96(DX), Y4, Y3
	ADDQ         $4, SI
	ADDQ         $128, DX
	DECQ         CX
	JNZ          qkstep
	VMOVUPS      Y0, (DI)
	VMOVUPS      Y1, 32(DI)
	VMOVUPS      Y2, 64(DI)
	VMOVUPS      Y3, 96(DI)
	ADDQ         $128, DI
	DECQ         R8
	JNZ          qkrow
	VZEROUPPER
	RET

// func attnPVAVX2(o, p, v *float32, vStride, nk, hd, hdPad int, alpha *float32)
// o[r*hdPad+d] = alpha[r]·o[r*hdPad+d] + Σ_{j<nk} p[r*32+j]·v[j*vStride+d] for the 8 rows r and d < hd, eight
// dims at a time.
TEXT ·attnPVAVX2(SB), NOSPLIT, $0-64
	MOVQ o+0(FP), DI
	MOVQ p+8(FP), SI
	MOVQ vStride+24(FP), R9
	SHLQ $2, R9
	MOVQ alpha+56(FP), R10
	MOVQ $8, R8

pvrow:
	VBROADCASTSS (R10), Y5
	MOVQ         v+16(FP), R11 // v at dim d
	XORQ         R12, R12      // d·4

pvchunk:
	VMULPS (DI)(R12*1), Y5, Y0
	MOVQ   R11, DX
	MOVQ   SI, AX
	MOVQ   nk+32(FP), CX

pvkey:
	VBROADCASTSS (AX), Y4
	VFMADD231PS  (DX), Y4, Y0
	ADDQ         $4, AX
	ADDQ         R9, DX
	DECQ         CX
	JNZ          pvkey
	VMOVUPS      Y0, (DI)(R12*1)
	ADDQ         $32, R11
	ADDQ         $32, R12
	MOVQ         hd+40(FP), CX
	SHLQ         $2, CX
	CMPQ         R12, CX
	JLT          pvchunk

	MOVQ hdPad+48(FP), CX
	LEAQ (DI)(CX*4), DI
	ADDQ $128, SI
	ADDQ $4, R10
	DECQ R8
	JNZ  pvrow
	VZEROUPPER
	RET

// func attnKeysAVX2(s, q, k *float32, kStride, nk, rows, hd int)
// s[r*32+c] = Σ_d q[r*hd16+d]·k[c*kStride+d] for rows <= 4 query rows and the nk keys.
TEXT ·attnKeysAVX2(SB), NOSPLIT, $0-56
	KEYS_QPTRS
	MOVQ s+0(FP), DX
	MOVQ k+16(FP), DI
	MOVQ kStride+24(FP), R12
	SHLQ $2, R12
	MOVQ nk+32(FP), R8

keyrow:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ   AX, AX
	MOVQ   hd+48(FP), CX
	SHRQ   $3, CX

keystep:
	VMOVUPS     (DI)(AX*1), Y4
	VFMADD231PS (SI)(AX*1), Y4, Y0
	VFMADD231PS (R9)(AX*1), Y4, Y1
	VFMADD231PS (R10)(AX*1), Y4, Y2
	VFMADD231PS (R11)(AX*1), Y4, Y3
	ADDQ        $32, AX
	DECQ        CX
	JNZ         keystep
	KEYS_REDUCE
	KEYS_STORE
	ADDQ        R12, DI
	DECQ        R8
	JNZ         keyrow
	VZEROUPPER
	RET

// func attnKeysF16AVX2(s, q *float32, k *uint16, kStride, nk, rows, hd int)
// attnKeysAVX2 over binary16 keys, widened by VCVTPH2PS.
TEXT ·attnKeysF16AVX2(SB), NOSPLIT, $0-56
	KEYS_QPTRS
	MOVQ s+0(FP), DX
	MOVQ k+16(FP), DI
	MOVQ kStride+24(FP), R12
	SHLQ $1, R12
	MOVQ nk+32(FP), R8

keyrow16:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ   AX, AX
	XORQ   BX, BX
	MOVQ   hd+48(FP), CX
	SHRQ   $3, CX

keystep16:
	VCVTPH2PS   (DI)(BX*1), Y4
	VFMADD231PS (SI)(AX*1), Y4, Y0
	VFMADD231PS (R9)(AX*1), Y4, Y1
	VFMADD231PS (R10)(AX*1), Y4, Y2
	VFMADD231PS (R11)(AX*1), Y4, Y3
	ADDQ        $32, AX
	ADDQ        $16, BX
	DECQ        CX
	JNZ         keystep16
	KEYS_REDUCE
	KEYS_STORE
	ADDQ        R12, DI
	DECQ        R8
	JNZ         keyrow16
	VZEROUPPER
	RET

// func attnAxpysAVX2(o, p, v *float32, vStride, n, hd int, alpha float32)
// o = alpha·o + Σ_{c<n} p[c]·v[c*vStride:][:hd], eight dims at a time.
TEXT ·attnAxpysAVX2(SB), NOSPLIT, $0-52
	MOVQ         o+0(FP), DI
	MOVQ         v+16(FP), R11
	MOVQ         vStride+24(FP), R9
	SHLQ         $2, R9
	VBROADCASTSS alpha+48(FP), Y5
	MOVQ         hd+40(FP), R8
	SHRQ         $3, R8

axchunk:
	VMULPS (DI), Y5, Y0
	MOVQ   R11, DX
	MOVQ   p+8(FP), AX
	MOVQ   n+32(FP), CX

axkey:
	VBROADCASTSS (AX), Y4
	VFMADD231PS  (DX), Y4, Y0
	ADDQ         $4, AX
	ADDQ         R9, DX
	DECQ         CX
	JNZ          axkey
	VMOVUPS      Y0, (DI)
	ADDQ         $32, DI
	ADDQ         $32, R11
	DECQ         R8
	JNZ          axchunk
	VZEROUPPER
	RET

// func attnAxpysF16AVX2(o, p *float32, v *uint16, vStride, n, hd int, alpha float32)
// attnAxpysAVX2 over binary16 value rows.
TEXT ·attnAxpysF16AVX2(SB), NOSPLIT, $0-52
	MOVQ         o+0(FP), DI
	MOVQ         v+16(FP), R11
	MOVQ         vStride+24(FP), R9
	SHLQ         $1, R9
	VBROADCASTSS alpha+48(FP), Y5
	MOVQ         hd+40(FP), R8
	SHRQ         $3, R8

axchunk16:
	VMULPS (DI), Y5, Y0
	MOVQ   R11, DX
	MOVQ   p+8(FP), AX
	MOVQ   n+32(FP), CX

axkey16:
	VBROADCASTSS (AX), Y4
	VCVTPH2PS    (DX), Y6
	VFMADD231PS  Y6, Y4, Y0
	ADDQ         $4, AX
	ADDQ         R9, DX
	DECQ         CX
	JNZ          axkey16
	VMOVUPS      Y0, (DI)
	ADDQ         $32, DI
	ADDQ         $16, R11
	DECQ         R8
	JNZ          axchunk16
	VZEROUPPER
	RET
