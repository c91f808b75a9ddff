//go:build !noasm

#include "textflag.h"

// Row kernels of the repacked GGUF matmuls (qgguf.go): y[r] = sa·Σ_b d[r,b]·Σ_{p in b} q[r,p]·a[p] for the rows
// r < rows of W, blocks b of 32 values, d binary16. A block's int32 lane sums start from its correction (corr:
// per vector of codes, one int32 a block in the block's first lane and zeros elsewhere, so that the sums come out
// exact), are converted once and multiply-added with the block's scale, which VPERMPS spreads over the block's
// lanes from the scales that VCVTPH2PS widens four at a time. The rows are read one after another, a single
// sequential stream prefetched 16 KiB ahead into L2 and 2 KiB ahead into L1, as qDotI8RowsVNNI reads W8A8's.

// Lane k of a vector of 64 Q8_0 codes belongs to block k/8 of two; of 128 Q4_0 codes (low and high nibbles of 64
// bytes), to block k/4 of four: the VPERMPS indices that give each lane its block's scale.
DATA qQ8Blocks<>+0(SB)/8, $0x0000000000000000
DATA qQ8Blocks<>+8(SB)/8, $0x0000000000000000
DATA qQ8Blocks<>+16(SB)/8, $0x0000000000000000
DATA qQ8Blocks<>+24(SB)/8, $0x0000000000000000
DATA qQ8Blocks<>+32(SB)/8, $0x0000000100000001
DATA qQ8Blocks<>+40(SB)/8, $0x0000000100000001
DATA qQ8Blocks<>+48(SB)/8, $0x0000000100000001
DATA qQ8Blocks<>+56(SB)/8, $0x0000000100000001
DATA qQ8Blocks<>+64(SB)/8, $0x0000000200000002
DATA qQ8Blocks<>+72(SB)/8, $0x0000000200000002
DATA qQ8Blocks<>+80(SB)/8, $0x0000000200000002
DATA qQ8Blocks<>+88(SB)/8, $0x0000000200000002
DATA qQ8Blocks<>+96(SB)/8, $0x0000000300000003
DATA qQ8Blocks<>+104(SB)/8, $0x0000000300000003
DATA qQ8Blocks<>+112(SB)/8, $0x0000000300000003
DATA qQ8Blocks<>+120(SB)/8, $0x0000000300000003
GLOBL qQ8Blocks<>(SB), RODATA|NOPTR, $128

DATA qQ4Blocks<>+0(SB)/8, $0x0000000000000000
DATA qQ4Blocks<>+8(SB)/8, $0x0000000000000000
DATA qQ4Blocks<>+16(SB)/8, $0x0000000100000001
DATA qQ4Blocks<>+24(SB)/8, $0x0000000100000001
DATA qQ4Blocks<>+32(SB)/8, $0x0000000200000002
DATA qQ4Blocks<>+40(SB)/8, $0x0000000200000002
DATA qQ4Blocks<>+48(SB)/8, $0x0000000300000003
DATA qQ4Blocks<>+56(SB)/8, $0x0000000300000003
GLOBL qQ4Blocks<>(SB), RODATA|NOPTR, $64

// QG_ROW_END adds the sixteen float lanes of Z0 and Z1, scales the sum by sa and stores it at (DX), then moves
// DX to the next output.
#define QG_ROW_END \
	VADDPS        Z1, Z0, Z0 ; \
	VEXTRACTF64X4 $1, Z0, Y1 ; \
	VADDPS        Y1, Y0, Y0 ; \
	VEXTRACTF128  $1, Y0, X1 ; \
	VADDPS        X1, X0, X0 ; \
	VPERMILPS     $0x4e, X0, X1 ; \
	VADDPS        X1, X0, X0 ; \
	VPERMILPS     $0xb1, X0, X1 ; \
	VADDSS        X1, X0, X0 ; \
	VMULSS        sa+48(FP), X0, X0 ; \
	VMOVSS        X0, (DX) ; \
	ADDQ          $4, DX

// QG_REDUCE sums the sixteen float lanes of Zacc (clobbering Zacc's low lanes and X1), scales the sum by sa and
// stores it at off(DX).
#define QG_REDUCE(Zacc, Yacc, Xacc, off) \
	VEXTRACTF64X4 $1, Zacc, Y1 ; \
	VADDPS        Y1, Yacc, Yacc ; \
	VEXTRACTF128  $1, Yacc, X1 ; \
	VADDPS        X1, Xacc, Xacc ; \
	VPERMILPS     $0x4e, Xacc, X1 ; \
	VADDPS        X1, Xacc, Xacc ; \
	VPERMILPS     $0xb1, Xacc, X1 ; \
	VADDSS        X1, Xacc, Xacc ; \
	VMULSS        sa+48(FP), Xacc, Xacc ; \
	VMOVSS        Xacc, off(DX)

// Q4R4_ROW adds one chunk of 128 codes of a row (packed at codes, its four binary16 scales at scales) against the
// token's chunk (Z20 even values, Z21 odd ones, Z22 the blocks' corrections) into the row's float lanes Zf.
#define Q4R4_ROW(codes, scales, Zf) \
	VMOVDQA32   Z22, Z2 ; \
	VMOVDQU32   codes, Z4 ; \
	VPSRLW      $4, Z4, Z5 ; \
	VPANDD      Z31, Z4, Z4 ; \
	VPANDD      Z31, Z5, Z5 ; \
	VPDPBUSD    Z20, Z4, Z2 ; \
	VPDPBUSD    Z21, Z5, Z2 ; \
	VCVTDQ2PS   Z2, Z2 ; \
	VCVTPH2PS   scales, X6 ; \
	VPERMPS     Z6, Z30, Z7 ; \
	VFMADD231PS Z7, Z2, Zf

// Q8R4_ROW adds one chunk of 128 codes of a row (at codes and codes64, its four binary16 scales at scales) against the
// token's chunk (Z20, Z21) and its corrections (Z22, Z23) into the row's float lanes Zf.
#define Q8R4_ROW(codes, codes64, scales, Zf) \
	VMOVDQA32   Z22, Z2 ; \
	VMOVDQA32   Z23, Z3 ; \
	VPXORD      codes, Z31, Z4 ; \
	VPXORD      codes64, Z31, Z5 ; \
	VPDPBUSD    Z20, Z4, Z2 ; \
	VPDPBUSD    Z21, Z5, Z3 ; \
	VCVTDQ2PS   Z2, Z2 ; \
	VCVTDQ2PS   Z3, Z3 ; \
	VCVTPH2PS   scales, X6 ; \
	VPERMPS     Z6, Z30, Z7 ; \
	VPERMPS     Z6, Z29, Z8 ; \
	VFMADD231PS Z7, Z2, Zf ; \
	VFMADD231PS Z8, Z3, Zf

// func qDotQ8_0RowsVNNI(w *int8, k int, a *int8, corr *int32, d *uint16, rows int, sa float32, y *float32)
// The Q8_0 row kernel (qDotQ8_0Go), k a multiple of 64: 64 codes a vector, made unsigned by flipping their top
// bit (q^0x80 = q+128), so each block's correction is -128·Σ a over it. 128 codes an iteration, into two
// accumulators.
TEXT ·qDotQ8_0RowsVNNI(SB), NOSPLIT, $0-64
	MOVQ         w+0(FP), SI
	MOVQ         d+32(FP), R8
	MOVQ         rows+40(FP), R9
	MOVQ         y+56(FP), DX
	MOVL         $0x80, AX
	VPBROADCASTB AX, Z31
	VMOVDQU32    qQ8Blocks<>+0(SB), Z30
	VMOVDQU32    qQ8Blocks<>+64(SB), Z29

q8row:
	MOVQ   a+16(FP), BX
	MOVQ   corr+24(FP), R10
	MOVQ   k+8(FP), CX
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1

q8two:
	CMPQ        CX, $128
	JLT         q8one
	PREFETCHT1  16384(SI)
	PREFETCHT1  16448(SI)
	PREFETCHT0  2048(SI)
	PREFETCHT0  2112(SI)
	VMOVDQU32   (R10), Z2
	VMOVDQU32   64(R10), Z3
	VPXORD      (SI), Z31, Z4
	VPXORD      64(SI), Z31, Z5
	VPDPBUSD    (BX), Z4, Z2
	VPDPBUSD    64(BX), Z5, Z3
	VCVTDQ2PS   Z2, Z2
	VCVTDQ2PS   Z3, Z3
	VCVTPH2PS   (R8), X6
	VPERMPS     Z6, Z30, Z7
	VPERMPS     Z6, Z29, Z8
	VFMADD231PS Z7, Z2, Z0
	VFMADD231PS Z8, Z3, Z1
	ADDQ        $128, SI
	ADDQ        $128, BX
	ADDQ        $128, R10
	ADDQ        $8, R8
	SUBQ        $128, CX
	JMP         q8two

q8one:
	TESTQ       CX, CX
	JZ          q8end
	PREFETCHT1  16384(SI)
	PREFETCHT0  2048(SI)
	VMOVDQU32   (R10), Z2
	VPXORD      (SI), Z31, Z4
	VPDPBUSD    (BX), Z4, Z2
	VCVTDQ2PS   Z2, Z2
	MOVL        (R8), AX
	VMOVD       AX, X6
	VCVTPH2PS   X6, X6
	VPERMPS     Z6, Z30, Z7
	VFMADD231PS Z7, Z2, Z0
	ADDQ        $64, SI
	ADDQ        $4, R8

q8end:
	QG_ROW_END
	DECQ R9
	JNZ  q8row
	VZEROUPPER
	RET

// func qDotQ4_0RowsVNNI(w *uint8, k int, xr *int8, corr *int32, d *uint16, rows int, sa float32, y *float32)
// The Q4_0 row kernel (qDotQ4_0Go), k a multiple of 128: 64 packed bytes (128 codes, four blocks) a vector, their
// low nibbles (VPANDD) against the token's even values and their high nibbles (VPSRLW, VPANDD) against its odd
// ones, xr holding each 128 values rearranged so (qDeinterleave); the codes are stored offset by 8, so each
// block's correction is -8·Σ a over it. 256 codes an iteration, into two accumulators.
TEXT ·qDotQ4_0RowsVNNI(SB), NOSPLIT, $0-64
	MOVQ         w+0(FP), SI
	MOVQ         d+32(FP), R8
	MOVQ         rows+40(FP), R9
	MOVQ         y+56(FP), DX
	MOVL         $0x0f, AX
	VPBROADCASTB AX, Z31
	VMOVDQU32    qQ4Blocks<>+0(SB), Z30

q4row:
	MOVQ   xr+16(FP), BX
	MOVQ   corr+24(FP), R10
	MOVQ   k+8(FP), CX
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1

q4two:
	CMPQ        CX, $256
	JLT         q4one
	PREFETCHT1  16384(SI)
	PREFETCHT1  16448(SI)
	PREFETCHT0  2048(SI)
	PREFETCHT0  2112(SI)
	VMOVDQU32   (R10), Z2
	VMOVDQU32   64(R10), Z3
	VMOVDQU32   (SI), Z4
	VMOVDQU32   64(SI), Z8
	VPSRLW      $4, Z4, Z5
	VPSRLW      $4, Z8, Z9
	VPANDD      Z31, Z4, Z4
	VPANDD      Z31, Z5, Z5
	VPANDD      Z31, Z8, Z8
	VPANDD      Z31, Z9, Z9
	VPDPBUSD    (BX), Z4, Z2
	VPDPBUSD    128(BX), Z8, Z3
	VPDPBUSD    64(BX), Z5, Z2
	VPDPBUSD    192(BX), Z9, Z3
	VCVTDQ2PS   Z2, Z2
	VCVTDQ2PS   Z3, Z3
	VCVTPH2PS   (R8), X6
	VCVTPH2PS   8(R8), X10
	VPERMPS     Z6, Z30, Z7
	VPERMPS     Z10, Z30, Z11
	VFMADD231PS Z7, Z2, Z0
	VFMADD231PS Z11, Z3, Z1
	ADDQ        $128, SI
	ADDQ        $256, BX
	ADDQ        $128, R10
	ADDQ        $16, R8
	SUBQ        $256, CX
	JMP         q4two

q4one:
	TESTQ       CX, CX
	JZ          q4end
	PREFETCHT1  16384(SI)
	PREFETCHT0  2048(SI)
	VMOVDQU32   (R10), Z2
	VMOVDQU32   (SI), Z4
	VPSRLW      $4, Z4, Z5
	VPANDD      Z31, Z4, Z4
	VPANDD      Z31, Z5, Z5
	VPDPBUSD    (BX), Z4, Z2
	VPDPBUSD    64(BX), Z5, Z2
	VCVTDQ2PS   Z2, Z2
	VCVTPH2PS   (R8), X6
	VPERMPS     Z6, Z30, Z7
	VFMADD231PS Z7, Z2, Z0
	ADDQ        $64, SI
	ADDQ        $8, R8

q4end:
	QG_ROW_END
	DECQ R9
	JNZ  q4row
	VZEROUPPER
	RET

// func qDotQ4_0Rows4VNNI(w *uint8, k int, xr *int8, corr *int32, d *uint16, rows int, sa float32, y *float32)
// qDotQ4_0RowsVNNI four rows at a time (rows a multiple of four, k of 128): each chunk of the token and its
// corrections are loaded once for the four rows, whose chunks are independent chains.
TEXT ·qDotQ4_0Rows4VNNI(SB), NOSPLIT, $0-64
	MOVQ         w+0(FP), SI
	MOVQ         d+32(FP), R8
	MOVQ         rows+40(FP), R9
	SHRQ         $2, R9
	MOVQ         y+56(FP), DX
	MOVQ         k+8(FP), R11
	SHRQ         $1, R11
	LEAQ         (R11)(R11*2), R12
	MOVQ         k+8(FP), R13
	SHRQ         $4, R13
	LEAQ         (R13)(R13*2), R14
	MOVL         $0x0f, AX
	VPBROADCASTB AX, Z31
	VMOVDQU32    qQ4Blocks<>+0(SB), Z30

q4r4rows:
	MOVQ   xr+16(FP), BX
	MOVQ   corr+24(FP), R10
	MOVQ   k+8(FP), CX
	VXORPS Z10, Z10, Z10
	VXORPS Z11, Z11, Z11
	VXORPS Z12, Z12, Z12
	VXORPS Z13, Z13, Z13

q4r4chunk:
	PREFETCHT1 16384(SI)
	PREFETCHT1 16384(SI)(R11*1)
	PREFETCHT1 16384(SI)(R11*2)
	PREFETCHT1 16384(SI)(R12*1)
	VMOVDQU32  (BX), Z20
	VMOVDQU32  64(BX), Z21
	VMOVDQU32  (R10), Z22
	Q4R4_ROW((SI), (R8), Z10)
	Q4R4_ROW((SI)(R11*1), (R8)(R13*1), Z11)
	Q4R4_ROW((SI)(R11*2), (R8)(R13*2), Z12)
	Q4R4_ROW((SI)(R12*1), (R8)(R14*1), Z13)
	ADDQ       $64, SI
	ADDQ       $128, BX
	ADDQ       $64, R10
	ADDQ       $8, R8
	SUBQ       $128, CX
	JNZ        q4r4chunk

	QG_REDUCE(Z10, Y10, X10, 0)
	QG_REDUCE(Z11, Y11, X11, 4)
	QG_REDUCE(Z12, Y12, X12, 8)
	QG_REDUCE(Z13, Y13, X13, 12)
	ADDQ $16, DX
	ADDQ R12, SI
	ADDQ R14, R8
	DECQ R9
	JNZ  q4r4rows
	VZEROUPPER
	RET

// func qDotQ8_0Rows4VNNI(w *int8, k int, a *int8, corr *int32, d *uint16, rows int, sa float32, y *float32)
// qDotQ8_0RowsVNNI four rows at a time (rows a multiple of four, k of 128): each chunk of the token and its
// corrections are loaded once for the four rows, whose chunks are independent chains.
TEXT ·qDotQ8_0Rows4VNNI(SB), NOSPLIT, $0-64
	MOVQ         w+0(FP), SI
	MOVQ         d+32(FP), R8
	MOVQ         rows+40(FP), R9
	SHRQ         $2, R9
	MOVQ         y+56(FP), DX
	MOVQ         k+8(FP), R11
	LEAQ         (R11)(R11*2), R12
	MOVQ         k+8(FP), R13
	SHRQ         $4, R13
	LEAQ         (R13)(R13*2), R14
	MOVL         $0x80, AX
	VPBROADCASTB AX, Z31
	VMOVDQU32    qQ8Blocks<>+0(SB), Z30
	VMOVDQU32    qQ8Blocks<>+64(SB), Z29

q8r4rows:
	MOVQ   a+16(FP), BX
	MOVQ   corr+24(FP), R10
	MOVQ   k+8(FP), CX
	VXORPS Z10, Z10, Z10
	VXORPS Z11, Z11, Z11
	VXORPS Z12, Z12, Z12
	VXORPS Z13, Z13, Z13

q8r4chunk:
	PREFETCHT1 16384(SI)
	PREFETCHT1 16384(SI)(R11*1)
	PREFETCHT1 16384(SI)(R11*2)
	PREFETCHT1 16384(SI)(R12*1)
	PREFETCHT1 16448(SI)
	PREFETCHT1 16448(SI)(R11*1)
	PREFETCHT1 16448(SI)(R11*2)
	PREFETCHT1 16448(SI)(R12*1)
	VMOVDQU32  (BX), Z20
	VMOVDQU32  64(BX), Z21
	VMOVDQU32  (R10), Z22
	VMOVDQU32  64(R10), Z23
	Q8R4_ROW((SI), 64(SI), (R8), Z10)
	Q8R4_ROW((SI)(R11*1), 64(SI)(R11*1), (R8)(R13*1), Z11)
	Q8R4_ROW((SI)(R11*2), 64(SI)(R11*2), (R8)(R13*2), Z12)
	Q8R4_ROW((SI)(R12*1), 64(SI)(R12*1), (R8)(R14*1), Z13)
	ADDQ       $128, SI
	ADDQ       $128, BX
	ADDQ       $128, R10
	ADDQ       $8, R8
	SUBQ       $128, CX
	JNZ        q8r4chunk

	QG_REDUCE(Z10, Y10, X10, 0)
	QG_REDUCE(Z11, Y11, X11, 4)
	QG_REDUCE(Z12, Y12, X12, 8)
	QG_REDUCE(Z13, Y13, X13, 12)
	ADDQ $16, DX
	ADDQ R12, SI
	ADDQ R14, R8
	DECQ R9
	JNZ  q8r4rows
	VZEROUPPER
	RET
