//go:build !noasm

#include "textflag.h"
#include "elem_exp_amd64.h"
#include "prefetch_amd64.h"
#include "zero_amd64.h"

// Inner loops of the quantized kernels (quant.go, qgguf.go). The pure-Go twin of each is named in its comment
// (qgeneric.go). VPDPBUSD (AVX-512 VNNI) adds, to each int32 lane of its destination, the four products of the
// unsigned bytes of its second source and the signed bytes of its first source (Go operand order); the sums
// wrap modulo 2^32, never saturate.

// The W4A8 row kernels, one a vector width: y[r] = sa·Σ_g s[g]·(Σ_{p in g} q[p]·x[p] - z[g]·xs[g]) for the rows
// r < rows of W4A8 weights (w, s, z advance from row to row), over groups of chunks chunks. A chunk is the
// vector's width in packed bytes (64, 32 or 16), twice as many codes; xr is the token rearranged per chunk, its
// even values then its odd ones: the order of the low nibbles (VPANDD) and high nibbles (VPSRLW, VPANDD) of the
// packed bytes. The codes, unsigned, go straight into VPDPBUSD against the activations; a group's int32 lane sums
// are converted and scaled by its scale, and the zero point's share, z·Σ x exact in int32, is taken off once a
// group (X15 sums it). The macros are defined before any TEXT, so that vet checks their argument names against
// the three functions that use them, which share one signature.

// W4A8_SETUP loads what stays for the call (SI w, R8 s, R9 z, R13 rows, DX y) and the nibble mask into Vmask.
#define W4A8_SETUP(Vmask) \
	MOVQ         w+0(FP), SI; \
	MOVQ         s+32(FP), R8; \
	MOVQ         z+40(FP), R9; \
	MOVQ         rows+64(FP), R13; \
	MOVQ         y+80(FP), DX; \
	MOVL         $0x0f0f0f0f, AX; \
	VPBROADCASTD AX, Vmask

// W4A8_ROW_START points BX and R10 at the token and its group sums again and clears a row's sums (Vacc, X15).
#define W4A8_ROW_START(Vacc) \
	MOVQ   xr+16(FP), BX; \
	MOVQ   xs+24(FP), R10; \
	MOVQ   groups+48(FP), R11; \
	VPXORD Vacc, Vacc, Vacc; \
	VXORPS X15, X15, X15

// W4A8_GROUP_START clears a group's lane sums (V0 even codes, V1 odd ones) and counts its chunks in CX.
#define W4A8_GROUP_START(V0, V1) \
	VPXORD V0, V0, V0; \
	VPXORD V1, V1, V1; \
	MOVQ   chunks+56(FP), CX

// W4A8_CHUNK adds one chunk of width bytes: codes at (SI), even activations at (BX), odd ones at width(BX).
#define W4A8_CHUNK(V0, V1, V4, V5, Vmask, width) \
	PREFETCHT0 4096(SI); \
	VMOVDQU8   (SI), V4; \
	VPSRLW     $4, V4, V5; \
	VPANDD     Vmask, V4, V4; \
	VPANDD     Vmask, V5, V5; \
	VPDPBUSD   (BX), V4, V0; \
	VPDPBUSD   width(BX), V5, V1; \
	ADDQ       $width, SI; \
	ADDQ       $(2*width), BX

// W4A8_GROUP_END scales the group's lane sums into Vacc and its zero point's share into X15, and steps to the
// next group's scale, zero point and activation sum.
#define W4A8_GROUP_END(V0, V1, Vacc) \
	VPADDD           V1, V0, V0; \
	VCVTDQ2PS        V0, V0; \
	VFMADD231PS.BCST (R8), V0, Vacc; \
	MOVBLZX          (R9), AX; \
	IMULL            (R10), AX; \
	VCVTSI2SSL       AX, X28, X9; \
	VFMADD231SS      (R8), X9, X15; \
	ADDQ             $4, R8; \
	INCQ             R9; \
	ADDQ             $4, R10

// W4A8_ROW_END adds the four lane sums in X0, takes off the zero points' share, scales by sa and stores y[r].
#define W4A8_ROW_END \
	VPERMILPS $0x4e, X0, X1; \
	VADDPS    X1, X0, X0; \
	VPERMILPS $0xb1, X0, X1; \
	VADDSS    X1, X0, X0; \
	VSUBSS    X15, X0, X0; \
	VMULSS    sa+72(FP), X0, X0; \
	VMOVSS    X0, (DX); \
	ADDQ      $4, DX

// func qDotI8x4VNNI(w *int8, k int, a *int8, acc *[4]int32)
// acc[r] = Σ_p (w[r*k+p]+128)·a[p] for the four rows r of w: qDotI8x4Go plus 128·Σa (the caller subtracts it).
// The weights are made unsigned by flipping their top bit (w^0x80 = w+128).
TEXT ·qDotI8x4VNNI(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ k+8(FP), DX
	MOVQ a+16(FP), DI
	MOVQ acc+24(FP), R9
	LEAQ (SI)(DX*2), R8         // row 2; rows 1 and 3 are (SI)(DX*1) and (R8)(DX*1)
	LEAQ (SI)(DX*8), R10        // rows 8-11, two calls ahead, prefetched as these are read
	LEAQ (R8)(DX*8), R11
	MOVQ DX, CX
	MOVL $0x80, AX
	VPBROADCASTB AX, Z31
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	CMPQ CX, $64
	JLT  tail

loop:
	PREFETCHT0 (R10)
	PREFETCHT0 (R10)(DX*1)
	PREFETCHT0 (R11)
	PREFETCHT0 (R11)(DX*1)
	ADDQ     $64, R10
	ADDQ     $64, R11
	VMOVDQU8 (DI), Z4
	VPXORD   (SI), Z31, Z5
	VPXORD   (SI)(DX*1), Z31, Z6
	VPXORD   (R8), Z31, Z7
	VPXORD   (R8)(DX*1), Z31, Z8
	VPDPBUSD Z4, Z5, Z0
	VPDPBUSD Z4, Z6, Z1
	VPDPBUSD Z4, Z7, Z2
	VPDPBUSD Z4, Z8, Z3
	ADDQ     $64, SI
	ADDQ     $64, R8
	ADDQ     $64, DI
	SUBQ     $64, CX
	CMPQ     CX, $64
	JGE      loop

tail:
	TESTQ CX, CX
	JZ    reduce
	MOVQ  $1, AX
	SHLQ  CX, AX
	DECQ  AX
	KMOVQ AX, K1
	// Bytes past the end load as zero: the activation's zeros make the (flipped) weights' products zero.
	VMOVDQU8.Z (DI), K1, Z4
	VMOVDQU8.Z (SI), K1, Z5
	VMOVDQU8.Z (SI)(DX*1), K1, Z6
	VMOVDQU8.Z (R8), K1, Z7
	VMOVDQU8.Z (R8)(DX*1), K1, Z8
	VPXORD     Z31, Z5, Z5
	VPXORD     Z31, Z6, Z6
	VPXORD     Z31, Z7, Z7
	VPXORD     Z31, Z8, Z8
	VPDPBUSD   Z4, Z5, Z0
	VPDPBUSD   Z4, Z6, Z1
	VPDPBUSD   Z4, Z7, Z2
	VPDPBUSD   Z4, Z8, Z3

reduce:
	// Sum the 16 lanes of each accumulator: 512 -> 256 -> 128 bits, then within 128 bits.
	VEXTRACTI64X4 $1, Z0, Y4
	VEXTRACTI64X4 $1, Z1, Y5
	VEXTRACTI64X4 $1, Z2, Y6
	VEXTRACTI64X4 $1, Z3, Y7
	VPADDD        Y4, Y0, Y0
	VPADDD        Y5, Y1, Y1
	VPADDD        Y6, Y2, Y2
	VPADDD        Y7, Y3, Y3
	VPHADDD       Y1, Y0, Y0 // [0a 0b 1a 1b | 0c 0d 1c 1d]
	VPHADDD       Y3, Y2, Y2 // [2a 2b 3a 3b | ...]
	VPHADDD       Y2, Y0, Y0 // [0 1 2 3 | 0' 1' 2' 3']
	VEXTRACTI128  $1, Y0, X1
	VPADDD        X1, X0, X0
	VMOVDQU       X0, (R9)
	VZEROUPPER
	RET

// func qDotI8RowsVNNI(w *int8, k int, a *int8, rows int, acc *int32)
// acc[r] = Σ_p (w[r*k+p]+128)·a[p] for the rows r < rows of w: qDotI8RowsGo plus 128·Σa (the caller subtracts
// it). The rows are read one after another, a single sequential stream prefetched 16 KiB ahead into L2 and 2 KiB
// ahead into L1; without the L2 prefetch the stream from memory falls a quarter short of the probe's rate (the
// bw-ratio of BenchmarkQuant/m=1/n=4096/k=4096/dtype=w8a8 shows the rate it reaches), and on some VMs four rows read
// side by side get half the rate of one stream.
TEXT ·qDotI8RowsVNNI(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ k+8(FP), DX
	MOVQ a+16(FP), DI
	MOVQ rows+24(FP), R9
	MOVQ acc+32(FP), R10
	MOVL $0x80, AX
	VPBROADCASTB AX, Z31
	// K1 masks the last k%64 bytes of a row; Z30 holds the activations' tail, zero past the end, so the
	// weights' masked-off bytes (128 after the flip) multiply zeros.
	MOVQ DX, CX
	ANDQ $63, CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVQ AX, K1
	MOVQ DX, R11
	ANDQ $-64, R11
	VMOVDQU8.Z (DI)(R11*1), K1, Z30

rowsloop:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	MOVQ   DI, BX
	MOVQ   DX, CX
	CMPQ   CX, $256
	JLT    rows64

rows256:
	PREFETCHT1 16384(SI)
	PREFETCHT1 16448(SI)
	PREFETCHT1 16512(SI)
	PREFETCHT1 16576(SI)
	PREFETCHT0 2048(SI)
	PREFETCHT0 2112(SI)
	PREFETCHT0 2176(SI)
	PREFETCHT0 2240(SI)
	VPXORD     (SI), Z31, Z5
	VPXORD     64(SI), Z31, Z6
	VPXORD     128(SI), Z31, Z7
	VPXORD     192(SI), Z31, Z8
	VPDPBUSD   (BX), Z5, Z0
	VPDPBUSD   64(BX), Z6, Z1
	VPDPBUSD   128(BX), Z7, Z2
	VPDPBUSD   192(BX), Z8, Z3
	ADDQ       $256, SI
	ADDQ       $256, BX
	SUBQ       $256, CX
	CMPQ       CX, $256
	JGE        rows256

rows64:
	CMPQ       CX, $64
	JLT        rowstail
	PREFETCHT0 2048(SI)
	VPXORD     (SI), Z31, Z5
	VPDPBUSD   (BX), Z5, Z0
	ADDQ       $64, SI
	ADDQ       $64, BX
	SUBQ       $64, CX
	JMP        rows64

rowstail:
	TESTQ      CX, CX
	JZ         rowsreduce
	VMOVDQU8.Z (SI), K1, Z5
	VPXORD     Z31, Z5, Z5
	VPDPBUSD   Z30, Z5, Z0
	ADDQ       CX, SI

rowsreduce:
	VPADDD        Z1, Z0, Z0
	VPADDD        Z3, Z2, Z2
	VPADDD        Z2, Z0, Z0
	VEXTRACTI64X4 $1, Z0, Y1
	VPADDD        Y1, Y0, Y0
	VEXTRACTI128  $1, Y0, X1
	VPADDD        X1, X0, X0
	VPSHUFD       $0x4e, X0, X1
	VPADDD        X1, X0, X0
	VPSHUFD       $0xb1, X0, X1
	VPADDD        X1, X0, X0
	VMOVD         X0, (R10)
	ADDQ          $4, R10
	DECQ          R9
	JNZ           rowsloop
	VZEROUPPER
	RET

// func qSumI8VNNI(a *int8, n int) int32
// Returns Σ_p a[p] (n > 0): VPDPBUSD of bytes of ones and a.
TEXT ·qSumI8VNNI(SB), NOSPLIT, $0-20
	MOVQ a+0(FP), SI
	MOVQ n+8(FP), CX
	MOVL $1, AX
	VPBROADCASTB AX, Z31
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	CMPQ CX, $128
	JLT  sum64

sum128:
	VPDPBUSD (SI), Z31, Z0
	VPDPBUSD 64(SI), Z31, Z1
	ADDQ     $128, SI
	SUBQ     $128, CX
	CMPQ     CX, $128
	JGE      sum128

sum64:
	CMPQ     CX, $64
	JLT      sumtail
	VPDPBUSD (SI), Z31, Z0
	ADDQ     $64, SI
	SUBQ     $64, CX

sumtail:
	TESTQ      CX, CX
	JZ         sumreduce
	MOVQ       $1, AX
	SHLQ       CX, AX
	DECQ       AX
	KMOVQ      AX, K1
	VMOVDQU8.Z (SI), K1, Z4
	VPDPBUSD   Z4, Z31, Z1

sumreduce:
	VPADDD        Z1, Z0, Z0
	VEXTRACTI64X4 $1, Z0, Y1
	VPADDD        Y1, Y0, Y0
	VEXTRACTI128  $1, Y0, X1
	VPADDD        X1, X0, X0
	VPSHUFD       $0x4e, X0, X1
	VPADDD        X1, X0, X0
	VPSHUFD       $0xb1, X0, X1
	VPADDD        X1, X0, X0
	VMOVD         X0, AX
	MOVL          AX, ret+16(FP)
	VZEROUPPER
	RET

// The W8A8 GEMM micro-kernel's main loop: an 8x48 tile of int32 sums in Z0-Z23 (row r in Z(3r)..Z(3r+2)),
// acc[r][j] = Σ_{p<4kq} a[r*lda+p]·wp[(p/4*48+j)*4+p%4], from eight rows of A (signed, lda bytes apart, read in
// place from AX, lda in R8) and W packed [kq][48 columns][4] at BX (unsigned, offset by 128). I8_SETUP finds the
// row addresses and zeroes the sums; I8_STEP is one step of four k: three loads of W, eight broadcasts of four bytes of A,
// 24 VPDPBUSD. They use AX, BX, CX (kq), R8 (lda), R9, R10, Z24-Z30.
#define I8_SETUP \
	LEAQ (AX)(R8*2), R9 ; \
	ADDQ R8, R9 ; \
	LEAQ (R9)(R8*2), R10 ; \
	ADDQ R8, R10 ; \
	ZERO24

#define I8_STEP \
	VMOVDQU32    (BX), Z24 ; \
	VMOVDQU32    64(BX), Z25 ; \
	VMOVDQU32    128(BX), Z26 ; \
	VPBROADCASTD (AX), Z27 ; \
	VPBROADCASTD (AX)(R8*1), Z28 ; \
	VPDPBUSD     Z27, Z24, Z0 ; \
	VPDPBUSD     Z27, Z25, Z1 ; \
	VPDPBUSD     Z27, Z26, Z2 ; \
	VPBROADCASTD (AX)(R8*2), Z29 ; \
	VPDPBUSD     Z28, Z24, Z3 ; \
	VPDPBUSD     Z28, Z25, Z4 ; \
	VPDPBUSD     Z28, Z26, Z5 ; \
	VPBROADCASTD (R9), Z30 ; \
	VPDPBUSD     Z29, Z24, Z6 ; \
	VPDPBUSD     Z29, Z25, Z7 ; \
	VPDPBUSD     Z29, Z26, Z8 ; \
	VPBROADCASTD (AX)(R8*4), Z27 ; \
	VPDPBUSD     Z30, Z24, Z9 ; \
	VPDPBUSD     Z30, Z25, Z10 ; \
	VPDPBUSD     Z30, Z26, Z11 ; \
	VPBROADCASTD (R9)(R8*2), Z28 ; \
	VPDPBUSD     Z27, Z24, Z12 ; \
	VPDPBUSD     Z27, Z25, Z13 ; \
	VPDPBUSD     Z27, Z26, Z14 ; \
	VPBROADCASTD (R10), Z29 ; \
	VPDPBUSD     Z28, Z24, Z15 ; \
	VPDPBUSD     Z28, Z25, Z16 ; \
	VPDPBUSD     Z28, Z26, Z17 ; \
	VPBROADCASTD (R10)(R8*1), Z30 ; \
	VPDPBUSD     Z29, Z24, Z18 ; \
	VPDPBUSD     Z29, Z25, Z19 ; \
	VPDPBUSD     Z29, Z26, Z20 ; \
	VPDPBUSD     Z30, Z24, Z21 ; \
	VPDPBUSD     Z30, Z25, Z22 ; \
	VPDPBUSD     Z30, Z26, Z23 ; \
	ADDQ         $4, AX ; \
	ADDQ         $4, R9 ; \
	ADDQ         $4, R10 ; \
	ADDQ         $192, BX

// Loads the 48-bit column mask in AX into K1, K2, K3 (16 columns each) and turns ldc (SI) into bytes.
#define I8_STORE_SETUP \
	KMOVW AX, K1 ; \
	SHRQ  $16, AX ; \
	KMOVW AX, K2 ; \
	SHRQ  $16, AX ; \
	KMOVW AX, K3 ; \
	SHLQ  $2, SI

// Stores row r of the tile (Za, Zb, Zc) less bias[r] at (DI), masked to the valid columns, and moves to the next
// row of C; leaves when the valid rows are done.
#define I32_ROW(Za, Zb, Zc, r) \
	VPBROADCASTD (r*4)(R12), Z27 ; \
	VPSUBD       Z27, Za, Za ; \
	VPSUBD       Z27, Zb, Zb ; \
	VPSUBD       Z27, Zc, Zc ; \
	VMOVDQU32    Za, K1, (DI) ; \
	VMOVDQU32    Zb, K2, 64(DI) ; \
	VMOVDQU32    Zc, K3, 128(DI) ; \
	ADDQ         SI, DI ; \
	DECQ         R13 ; \
	JZ           i32done

// func qKernelI8VNNI(a *int8, lda int, wp *uint8, kq int, c *int32, ldc, rows int, mask uint64, bias *int32,
//	pf *prefetchStream)
// The W8A8 GEMM micro-kernel for GEMMInt8: c[r*ldc+j] = acc[r][j] - bias[r] (I8_STEP) for the first rows rows
// (1..8) and the columns j whose bit is set in mask. Each step prefetches a line of pf's stream.
TEXT ·qKernelI8VNNI(SB), NOSPLIT, $0-80
	MOVQ a+0(FP), AX
	MOVQ lda+8(FP), R8
	MOVQ wp+16(FP), BX
	MOVQ kq+24(FP), CX
	MOVQ pf+72(FP), DX
	PF_LOAD(DX, DI, SI, R11, R12, R13)
	I8_SETUP

i32loop:
	I8_STEP
	PF_STEP(pfi32, DI, SI, R11, R12, R13)
	DECQ CX
	JNZ  i32loop
	PF_STORE(pfdonei32, DX, DI, SI, R13)
	MOVQ  mask+56(FP), AX
	MOVQ  c+32(FP), DI
	MOVQ  ldc+40(FP), SI
	MOVQ  rows+48(FP), R13
	MOVQ  bias+64(FP), R12
	I8_STORE_SETUP
	I32_ROW(Z0, Z1, Z2, 0)
	I32_ROW(Z3, Z4, Z5, 1)
	I32_ROW(Z6, Z7, Z8, 2)
	I32_ROW(Z9, Z10, Z11, 3)
	I32_ROW(Z12, Z13, Z14, 4)
	I32_ROW(Z15, Z16, Z17, 5)
	I32_ROW(Z18, Z19, Z20, 6)
	I32_ROW(Z21, Z22, Z23, 7)

i32done:
	VZEROUPPER
	RET

// Stores row r of the tile (Za, Zb, Zc) as float32(acc - bias[r])·(sa[r]·sw[j]) at (DI), masked to the valid
// columns (sw[j] in Z24-Z26), and moves to the next row of C; leaves when the valid rows are done.
#define F32_ROW(Za, Zb, Zc, r) \
	VPBROADCASTD (r*4)(R12), Z27 ; \
	VBROADCASTSS (r*4)(BX), Z28 ; \
	VPSUBD       Z27, Za, Za ; \
	VPSUBD       Z27, Zb, Zb ; \
	VPSUBD       Z27, Zc, Zc ; \
	VCVTDQ2PS    Za, Za ; \
	VCVTDQ2PS    Zb, Zb ; \
	VCVTDQ2PS    Zc, Zc ; \
	VMULPS       Z24, Z28, Z29 ; \
	VMULPS       Z29, Za, Za ; \
	VMULPS       Z25, Z28, Z29 ; \
	VMULPS       Z29, Zb, Zb ; \
	VMULPS       Z26, Z28, Z29 ; \
	VMULPS       Z29, Zc, Zc ; \
	VMOVUPS      Za, K1, (DI) ; \
	VMOVUPS      Zb, K2, 64(DI) ; \
	VMOVUPS      Zc, K3, 128(DI) ; \
	ADDQ         SI, DI ; \
	DECQ         R13 ; \
	JZ           f32done

// func qKernelI8F32VNNI(a *int8, lda int, wp *uint8, kq int, c *float32, ldc, rows int, mask uint64, bias *int32,
//	sa, sw *float32, pf *prefetchStream)
// The W8A8 GEMM micro-kernel for GEMMW8A8: c[r*ldc+j] = float32(acc[r][j] - bias[r])·(sa[r]·sw[j]) (I8_STEP) for
// the first rows rows and the columns j whose bit is set in mask (sw is read only there). Each step prefetches a
// line of pf's stream.
TEXT ·qKernelI8F32VNNI(SB), NOSPLIT, $0-96
	MOVQ a+0(FP), AX
	MOVQ lda+8(FP), R8
	MOVQ wp+16(FP), BX
	MOVQ kq+24(FP), CX
	MOVQ pf+88(FP), DX
	PF_LOAD(DX, DI, SI, R11, R12, R13)
	I8_SETUP

f32loop:
	I8_STEP
	PF_STEP(pff32, DI, SI, R11, R12, R13)
	DECQ CX
	JNZ  f32loop
	PF_STORE(pfdonef32, DX, DI, SI, R13)
	MOVQ  mask+56(FP), AX
	MOVQ  c+32(FP), DI
	MOVQ  ldc+40(FP), SI
	MOVQ  rows+48(FP), R13
	MOVQ  bias+64(FP), R12
	I8_STORE_SETUP
	MOVQ         sa+72(FP), BX
	MOVQ         sw+80(FP), CX
	VMOVUPS.Z    (CX), K1, Z24
	VMOVUPS.Z    64(CX), K2, Z25
	VMOVUPS.Z    128(CX), K3, Z26
	F32_ROW(Z0, Z1, Z2, 0)
	F32_ROW(Z3, Z4, Z5, 1)
	F32_ROW(Z6, Z7, Z8, 2)
	F32_ROW(Z9, Z10, Z11, 3)
	F32_ROW(Z12, Z13, Z14, 4)
	F32_ROW(Z15, Z16, Z17, 5)
	F32_ROW(Z18, Z19, Z20, 6)
	F32_ROW(Z21, Z22, Z23, 7)

f32done:
	VZEROUPPER
	RET

// func qDotI8F32AVX512(x *float32, w *int8, n int) float32
// Returns Σ_p x[p]·float32(w[p]) for n a multiple of 16 (qDotI8F32Go): sign-extend 16 bytes to int32
// (VPMOVSXBD), convert (VCVTDQ2PS), multiply-add with x; four accumulators.
TEXT ·qDotI8F32AVX512(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ n+16(FP), CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	CMPQ CX, $64
	JLT  f16

f64:
	VPMOVSXBD   (SI), Z4
	VPMOVSXBD   16(SI), Z5
	VPMOVSXBD   32(SI), Z6
	VPMOVSXBD   48(SI), Z7
	VCVTDQ2PS   Z4, Z4
	VCVTDQ2PS   Z5, Z5
	VCVTDQ2PS   Z6, Z6
	VCVTDQ2PS   Z7, Z7
	VFMADD231PS (DI), Z4, Z0
	VFMADD231PS 64(DI), Z5, Z1
	VFMADD231PS 128(DI), Z6, Z2
	VFMADD231PS 192(DI), Z7, Z3
	ADDQ        $64, SI
	ADDQ        $256, DI
	SUBQ        $64, CX
	CMPQ        CX, $64
	JGE         f64

f16:
	TESTQ       CX, CX
	JZ          fsum
	VPMOVSXBD   (SI), Z4
	VCVTDQ2PS   Z4, Z4
	VFMADD231PS (DI), Z4, Z0
	ADDQ        $16, SI
	ADDQ        $64, DI
	SUBQ        $16, CX
	JMP         f16

fsum:
	VADDPS        Z1, Z0, Z0
	VADDPS        Z3, Z2, Z2
	VADDPS        Z2, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPS        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VADDPS        X1, X0, X0
	VPERMILPS     $0x4e, X0, X1
	VADDPS        X1, X0, X0
	VPERMILPS     $0xb1, X0, X1
	VADDSS        X1, X0, X0
	VMOVSS        X0, ret+24(FP)
	VZEROUPPER
	RET

// The float32 values 0..15: the codes a W4A16 group's table is built from.
DATA qIota<>+0(SB)/4, $0x00000000
DATA qIota<>+4(SB)/4, $0x3f800000
DATA qIota<>+8(SB)/4, $0x40000000
DATA qIota<>+12(SB)/4, $0x40400000
DATA qIota<>+16(SB)/4, $0x40800000
DATA qIota<>+20(SB)/4, $0x40a00000
DATA qIota<>+24(SB)/4, $0x40c00000
DATA qIota<>+28(SB)/4, $0x40e00000
DATA qIota<>+32(SB)/4, $0x41000000
DATA qIota<>+36(SB)/4, $0x41100000
DATA qIota<>+40(SB)/4, $0x41200000
DATA qIota<>+44(SB)/4, $0x41300000
DATA qIota<>+48(SB)/4, $0x41400000
DATA qIota<>+52(SB)/4, $0x41500000
DATA qIota<>+56(SB)/4, $0x41600000
DATA qIota<>+60(SB)/4, $0x41700000
GLOBL qIota<>(SB), RODATA|NOPTR, $64

// func qDotW4AVX512(xd *float32, w *uint8, s *float32, z *uint8, groups, pairs int) float32
// One output of the W4A16 GEMV: Σ_p x[p]·T_g[q[p]] over groups of 64·pairs values, T_g[q] = (q - z[g])·s[g]
// (qW4RowsGo). xd is x rearranged in chunks of 32, evens then odds: the order in which VPMOVZXBD of 16 packed
// bytes yields their low nibbles (after it) and high nibbles (after VPSRLD $4). Each group's table of 16 values
// sits in Z9, and VPERMPS, which reads only the low four bits of each index, looks the codes up: no masking and
// no conversion a weight.
TEXT ·qDotW4AVX512(SB), NOSPLIT, $0-52
	MOVQ xd+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ s+16(FP), R8
	MOVQ z+24(FP), R9
	MOVQ groups+32(FP), R11
	MOVQ pairs+40(FP), R12
	VMOVUPS qIota<>(SB), Z27
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13

group:
	MOVBLZX      (R9), AX
	VCVTSI2SSL   AX, X28, X9 // X28 only fills the upper lanes: no dependency on the last group
	VBROADCASTSS X9, Z9
	VSUBPS       Z9, Z27, Z9
	VMULPS.BCST  (R8), Z9, Z9 // T = (0..15 - z)·s
	MOVQ         R12, CX

pair:
	VPMOVZXBD   (SI), Z4
	VPMOVZXBD   16(SI), Z6
	VPSRLD      $4, Z4, Z5
	VPSRLD      $4, Z6, Z7
	VPERMPS     Z9, Z4, Z4
	VPERMPS     Z9, Z5, Z5
	VPERMPS     Z9, Z6, Z6
	VPERMPS     Z9, Z7, Z7
	VFMADD231PS (DI), Z4, Z10
	VFMADD231PS 64(DI), Z5, Z11
	VFMADD231PS 128(DI), Z6, Z12
	VFMADD231PS 192(DI), Z7, Z13
	ADDQ        $32, SI
	ADDQ        $256, DI
	DECQ        CX
	JNZ         pair

	ADDQ $4, R8
	INCQ R9
	DECQ R11
	JNZ  group

	VADDPS        Z11, Z10, Z10
	VADDPS        Z13, Z12, Z12
	VADDPS        Z12, Z10, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPS        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VADDPS        X1, X0, X0
	VPERMILPS     $0x4e, X0, X1
	VADDPS        X1, X0, X0
	VPERMILPS     $0xb1, X0, X1
	VADDSS        X1, X0, X0
	VMOVSS        X0, ret+48(FP)
	VZEROUPPER
	RET

// func qDotW4A8RowsVNNI(w *uint8, k int, xr *int8, xs *int32, s *float32, z *uint8, groups, chunks, rows int,
//	sa float32, y *float32)
// The W4A8 row kernel (the W4A8 macros at the top of this file say what it computes), 512-bit: chunks of 128
// codes.
TEXT ·qDotW4A8RowsVNNI(SB), NOSPLIT, $0-88
	W4A8_SETUP(Z26)

w4a8row:
	W4A8_ROW_START(Z14)

w4a8group:
	W4A8_GROUP_START(Z0, Z1)

w4a8chunk:
	W4A8_CHUNK(Z0, Z1, Z4, Z5, Z26, 64)
	DECQ CX
	JNZ  w4a8chunk
	W4A8_GROUP_END(Z0, Z1, Z14)
	DECQ R11
	JNZ  w4a8group

	VEXTRACTF64X4 $1, Z14, Y1
	VADDPS        Y1, Y14, Y0
	VEXTRACTF128  $1, Y0, X1
	VADDPS        X1, X0, X0
	W4A8_ROW_END
	DECQ R13
	JNZ  w4a8row
	VZEROUPPER
	RET

// W4R_ROW adds one 64-byte chunk of a row of codes at mem against the token's even and odd activations in Z20,
// Z21 into the row's group sums acc (t0, t1: scratch). It prefetches the row's line 24 KiB further into L2 (pf2)
// and 4 KiB further into L1 (pf): with the L1 prefetch alone the codes stream from memory a fifth slower, with
// none at half the rate.
#define W4R_ROW(mem, pf, pf2, acc, t0, t1) \
	PREFETCHT1 pf2; \
	PREFETCHT0 pf; \
	VMOVDQU8   mem, t0; \
	VPSRLW     $4, t0, t1; \
	VPANDD     Z26, t0, t0; \
	VPANDD     Z26, t1, t1; \
	VPDPBUSD   Z20, t0, acc; \
	VPDPBUSD   Z21, t1, acc

// W4R_ZP takes the zero points' share of sixteen groups, sa-free (s·z·xs, z·xs exact in int32), off the lane
// sums acc of the row whose zero points and scales are at zm and sm: the lanes past the groups (K3) are zero.
#define W4R_ZP(zm, sm, acc) \
	VPMOVZXBD.Z  zm, K3, Z6; \
	VPMULLD      Z7, Z6, Z6; \
	VCVTDQ2PS    Z6, Z6; \
	VMOVUPS.Z    sm, K3, Z5; \
	VFNMADD231PS Z5, Z6, acc

// func qDotW4A8Rows4VNNI(w *uint8, k int, xr *int8, xs *int32, s *float32, z *uint8, groups, chunks, rows int,
//	sa float32, y *float32)
// qDotW4A8RowsVNNI four rows at a time (rows a multiple of four): each chunk of the token (Z20, Z21) is loaded
// once for the four rows, a group's lane sums go into the row's sixteen float lanes (Z10-Z13) with one convert
// and one multiply-add, and the zero points' share starts them, sixteen groups a vector, so that a group costs
// no horizontal or scalar work; the four rows' lanes are summed at once at the end (VHADDPS). Registers: SI w
// (row 0), R12 and R15 one and three rows of codes, R8 s and R9 z (row 0), R14 and R13 one and three rows of
// groups, R10 xs, DI y, DX the rows left.
TEXT ·qDotW4A8Rows4VNNI(SB), NOSPLIT, $0-88
	MOVQ         w+0(FP), SI
	MOVQ         k+8(FP), R12
	SHRQ         $1, R12
	LEAQ         (R12)(R12*2), R15
	MOVQ         xs+24(FP), R10
	MOVQ         s+32(FP), R8
	MOVQ         z+40(FP), R9
	MOVQ         groups+48(FP), R14
	LEAQ         (R14)(R14*2), R13
	MOVQ         rows+64(FP), DX
	MOVQ         y+80(FP), DI
	MOVL         $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z26
	VBROADCASTSS sa+72(FP), Z27

w4r4block:
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	XORQ   AX, AX

w4r4zp:
	MOVQ  groups+48(FP), BX
	SUBQ  AX, BX
	MOVL  $0xffff, CX
	CMPQ  BX, $16
	JAE   w4r4mask
	MOVL  $1, CX
	SHLXL BX, CX, CX
	DECL  CX

w4r4mask:
	KMOVW       CX, K3
	VMOVDQU32.Z (R10)(AX*4), K3, Z7
	LEAQ        (R9)(AX*1), BX
	LEAQ        (R8)(AX*4), R11
	W4R_ZP((BX), (R11), Z10)
	W4R_ZP((BX)(R14*1), (R11)(R14*4), Z11)
	W4R_ZP((BX)(R14*2), (R11)(R14*8), Z12)
	W4R_ZP((BX)(R13*1), (R11)(R13*4), Z13)
	ADDQ        $16, AX
	CMPQ        AX, groups+48(FP)
	JB          w4r4zp
	MOVQ        xr+16(FP), BX
	MOVQ        groups+48(FP), R11

w4r4group:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	MOVQ   chunks+56(FP), CX

w4r4chunk:
	VMOVDQU8 (BX), Z20
	VMOVDQU8 64(BX), Z21
	W4R_ROW((SI), 4096(SI), 24576(SI), Z0, Z4, Z5)
	W4R_ROW((SI)(R12*1), 4096(SI)(R12*1), 24576(SI)(R12*1), Z1, Z6, Z7)
	W4R_ROW((SI)(R12*2), 4096(SI)(R12*2), 24576(SI)(R12*2), Z2, Z8, Z9)
	W4R_ROW((SI)(R15*1), 4096(SI)(R15*1), 24576(SI)(R15*1), Z3, Z16, Z17)
	ADDQ     $64, SI
	ADDQ     $128, BX
	DECQ     CX
	JNZ      w4r4chunk
	VCVTDQ2PS        Z0, Z0
	VFMADD231PS.BCST (R8), Z0, Z10
	VCVTDQ2PS        Z1, Z1
	VFMADD231PS.BCST (R8)(R14*4), Z1, Z11
	VCVTDQ2PS        Z2, Z2
	VFMADD231PS.BCST (R8)(R14*8), Z2, Z12
	VCVTDQ2PS        Z3, Z3
	VFMADD231PS.BCST (R8)(R13*4), Z3, Z13
	ADDQ             $4, R8
	DECQ             R11
	JNZ              w4r4group

	VEXTRACTF64X4 $1, Z10, Y4
	VADDPS        Y4, Y10, Y10
	VEXTRACTF64X4 $1, Z11, Y4
	VADDPS        Y4, Y11, Y11
	VEXTRACTF64X4 $1, Z12, Y4
	VADDPS        Y4, Y12, Y12
	VEXTRACTF64X4 $1, Z13, Y4
	VADDPS        Y4, Y13, Y13
	VHADDPS       Y11, Y10, Y4
	VHADDPS       Y13, Y12, Y5
	VHADDPS       Y5, Y4, Y4
	VEXTRACTF128  $1, Y4, X5
	VADDPS        X5, X4, X4
	VMULPS        X27, X4, X4
	VMOVUPS       X4, (DI)
	ADDQ          $16, DI
	ADDQ          R15, SI
	LEAQ          (R8)(R13*4), R8
	LEAQ          (R9)(R14*4), R9
	SUBQ          $4, DX
	JNZ           w4r4block
	VZEROUPPER
	RET

// func qDotW4A8Rows64VNNI(w *uint8, k int, xr *int8, xs *int32, s *float32, z *uint8, groups, chunks, rows int,
//	sa float32, y *float32)
// The 256-bit kernel: chunks of 64 codes.
TEXT ·qDotW4A8Rows64VNNI(SB), NOSPLIT, $0-88
	W4A8_SETUP(Y26)

w4a8row:
	W4A8_ROW_START(Y14)

w4a8group:
	W4A8_GROUP_START(Y0, Y1)

w4a8chunk:
	W4A8_CHUNK(Y0, Y1, Y4, Y5, Y26, 32)
	DECQ CX
	JNZ  w4a8chunk
	W4A8_GROUP_END(Y0, Y1, Y14)
	DECQ R11
	JNZ  w4a8group

	VEXTRACTF128 $1, Y14, X1
	VADDPS       X1, X14, X0
	W4A8_ROW_END
	DECQ R13
	JNZ  w4a8row
	VZEROUPPER
	RET

// func qDotW4A8Rows32VNNI(w *uint8, k int, xr *int8, xs *int32, s *float32, z *uint8, groups, chunks, rows int,
//	sa float32, y *float32)
// The 128-bit kernel: chunks of 32 codes.
TEXT ·qDotW4A8Rows32VNNI(SB), NOSPLIT, $0-88
	W4A8_SETUP(X26)

w4a8row:
	W4A8_ROW_START(X14)

w4a8group:
	W4A8_GROUP_START(X0, X1)

w4a8chunk:
	W4A8_CHUNK(X0, X1, X4, X5, X26, 16)
	DECQ CX
	JNZ  w4a8chunk
	W4A8_GROUP_END(X0, X1, X14)
	DECQ R11
	JNZ  w4a8group

	VMOVAPS X14, X0
	W4A8_ROW_END
	DECQ R13
	JNZ  w4a8row
	VZEROUPPER
	RET

// Adds one GGUF block's contribution to the float accumulator Yacc: its eight int32 lane sums in Y3 (before the
// offset correction), less the correction at (R8) (lane 0 only), converted and scaled by d_w·d_x, d_w the
// binary16 at (SI) and d_x the float32 at (R9). Clobbers AX, X5.
#define GGUF_BLOCK(Yacc) \
	VPSUBD       (R8), Y3, Y3 ; \
	VCVTDQ2PS    Y3, Y3 ; \
	MOVWLZX      (SI), AX ; \
	VMOVD        AX, X5 ; \
	VCVTPH2PS    X5, X5 ; \
	VMULSS       (R9), X5, X5 ; \
	VBROADCASTSS X5, Y5 ; \
	VFMADD231PS  Y3, Y5, Yacc

// One Q8_0 block of w at (SI) against 32 codes of x at (DI): Y3 = lane sums of (q_w+128)·q_x (the offset makes
// q_w unsigned for VPDPBUSD; the correction 128·Σ q_x comes off in GGUF_BLOCK).
#define Q8_SUMS \
	VPXOR    2(SI), Y15, Y2 ; \
	VPXOR    Y3, Y3, Y3 ; \
	VPDPBUSD (DI), Y2, Y3

// One Q4_0 block of w at (SI) against 32 codes of x at (DI): the 16 bytes become 32 codes in element order (low
// nibbles, then high nibbles), and Y3 = lane sums of q_w·q_x (the correction 8·Σ q_x comes off in GGUF_BLOCK).
#define Q4_SUMS \
	VMOVDQU     2(SI), X2 ; \
	VPSRLW      $4, X2, X4 ; \
	VINSERTI128 $1, X4, Y2, Y2 ; \
	VPAND       Y14, Y2, Y2 ; \
	VPXOR       Y3, Y3, Y3 ; \
	VPDPBUSD    (DI), Y2, Y3

// Sums the lanes of Y0 + Y1 into X0 and stores it at ret.
#define GGUF_RETURN(ret) \
	VADDPS       Y1, Y0, Y0 ; \
	VEXTRACTF128 $1, Y0, X1 ; \
	VADDPS       X1, X0, X0 ; \
	VPERMILPS    $0x4e, X0, X1 ; \
	VADDPS       X1, X0, X0 ; \
	VPERMILPS    $0xb1, X0, X1 ; \
	VADDSS       X1, X0, X0 ; \
	VMOVSS       X0, ret ; \
	VZEROUPPER

// func qRowQ8_0AVX512(w *byte, xq *int8, dx *float32, corr *int32, nb int) float32
// Σ over nb Q8_0 blocks of w of d_w·d_x·Σ q_w·q_x (qDotQ8_0Go), with x prepared once for all rows (qGGUFRows):
// its codes contiguous (xq), its scales as float32 (dx), and for each block eight int32 holding 128·Σ q_x and
// seven zeros (corr). Two blocks an iteration, into two accumulators.
TEXT ·qRowQ8_0AVX512(SB), NOSPLIT, $0-44
	MOVQ w+0(FP), SI
	MOVQ xq+8(FP), DI
	MOVQ dx+16(FP), R9
	MOVQ corr+24(FP), R8
	MOVQ nb+32(FP), CX
	MOVL $0x80808080, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1

q8two:
	CMPQ CX, $2
	JLT  q8one
	Q8_SUMS
	GGUF_BLOCK(Y0)
	ADDQ $34, SI
	ADDQ $32, DI
	ADDQ $32, R8
	ADDQ $4, R9
	Q8_SUMS
	GGUF_BLOCK(Y1)
	ADDQ $34, SI
	ADDQ $32, DI
	ADDQ $32, R8
	ADDQ $4, R9
	SUBQ $2, CX
	JMP  q8two

q8one:
	TESTQ CX, CX
	JZ    q8done
	Q8_SUMS
	GGUF_BLOCK(Y0)

q8done:
	GGUF_RETURN(ret+40(FP))
	RET

// func qRowQ4_0AVX512(w *byte, xq *int8, dx *float32, corr *int32, nb int) float32
// Σ over nb Q4_0 blocks of w of d_w·d_x·Σ (q_w-8)·q_x (qDotQ4_0Q8_0Go), x prepared as for qRowQ8_0AVX512 but
// with 8·Σ q_x in corr.
TEXT ·qRowQ4_0AVX512(SB), NOSPLIT, $0-44
	MOVQ w+0(FP), SI
	MOVQ xq+8(FP), DI
	MOVQ dx+16(FP), R9
	MOVQ corr+24(FP), R8
	MOVQ nb+32(FP), CX
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1

q4two:
	CMPQ CX, $2
	JLT  q4one
	Q4_SUMS
	GGUF_BLOCK(Y0)
	ADDQ $18, SI
	ADDQ $32, DI
	ADDQ $32, R8
	ADDQ $4, R9
	Q4_SUMS
	GGUF_BLOCK(Y1)
	ADDQ $18, SI
	ADDQ $32, DI
	ADDQ $32, R8
	ADDQ $4, R9
	SUBQ $2, CX
	JMP  q4two

q4one:
	TESTQ CX, CX
	JZ    q4done
	Q4_SUMS
	GGUF_BLOCK(Y0)

q4done:
	GGUF_RETURN(ret+40(FP))
	RET

// func qMaxAbsAVX512(x *float32, n int) float32
// Returns max_p |x[p]| for n a positive multiple of 16 (the loop of QuantizeRowsInt8).
TEXT ·qMaxAbsAVX512(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVL $0x7fffffff, AX
	VPBROADCASTD AX, Z31
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1

maxloop:
	VPANDD (SI), Z31, Z2
	VMAXPS Z2, Z0, Z0
	ADDQ   $64, SI
	SUBQ   $16, CX
	JZ     maxdone
	VPANDD (SI), Z31, Z3
	VMAXPS Z3, Z1, Z1
	ADDQ   $64, SI
	SUBQ   $16, CX
	JNZ    maxloop

maxdone:
	VMAXPS        Z1, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VMAXPS        X1, X0, X0
	VPERMILPS     $0x4e, X0, X1
	VMAXPS        X1, X0, X0
	VPERMILPS     $0xb1, X0, X1
	VMAXSS        X1, X0, X0
	VMOVSS        X0, ret+16(FP)
	VZEROUPPER
	RET

// func qRoundInt8AVX512(x *float32, q *int8, n int, inv float32)
// q[p] = round(x[p]·inv), halves away from zero, for n a positive multiple of 16 and |x·inv| < 127.5
// (qRoundInt8): t = trunc(y); y - t is exact, and where |y - t| >= 0.5 t moves one away from zero.
TEXT ·qRoundInt8AVX512(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ q+8(FP), DI
	MOVQ n+16(FP), CX
	VBROADCASTSS inv+24(FP), Z31
	MOVL $0x7fffffff, AX
	VPBROADCASTD AX, Z30
	MOVL $0x80000000, AX
	VPBROADCASTD AX, Z29
	MOVL $0x3f800000, AX // 1.0
	VPBROADCASTD AX, Z28
	MOVL $0x3f000000, AX // 0.5
	VPBROADCASTD AX, Z27

roundloop:
	VMULPS      (SI), Z31, Z1
	VRNDSCALEPS $0x0b, Z1, Z2 // truncate, no precision exception
	VSUBPS      Z2, Z1, Z3
	VPANDD      Z30, Z3, Z3
	VCMPPS      $0x1d, Z27, Z3, K2 // |y - t| >= 0.5
	VPANDD      Z29, Z1, Z4
	VPORD       Z28, Z4, Z4 // ±1 with the sign of y
	VADDPS      Z4, Z2, K2, Z2
	VCVTTPS2DQ  Z2, Z2
	VPMOVSDB    Z2, (DI)
	ADDQ        $64, SI
	ADDQ        $16, DI
	SUBQ        $16, CX
	JNZ         roundloop
	VZEROUPPER
	RET

// func qStoreInt32AVX512(dst, acc *int32, n int, bias int32)
// dst[j] = acc[j] - bias for j < n (qStoreInt32Go); the last partial vector is masked.
TEXT ·qStoreInt32AVX512(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ acc+8(FP), SI
	MOVQ n+16(FP), CX
	MOVL bias+24(FP), AX
	VPBROADCASTD AX, Z31
	MOVQ $-1, AX
	KMOVW AX, K1

i32loop:
	CMPQ CX, $16
	JGE  i32full
	TESTQ CX, CX
	JZ   i32done
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K1
	MOVQ $16, CX

i32full:
	VMOVDQU32.Z (SI), K1, Z0
	VPSUBD      Z31, Z0, Z0
	VMOVDQU32   Z0, K1, (DI)
	ADDQ        $64, SI
	ADDQ        $64, DI
	SUBQ        $16, CX
	JMP         i32loop

i32done:
	VZEROUPPER
	RET

// func qStoreScaledAVX512(dst *float32, acc *int32, n int, bias int32, sa float32, sw *float32)
// dst[j] = float32(acc[j] - bias)·(sa·sw[j]) for j < n (qStoreScaledGo); the last partial vector is masked.
TEXT ·qStoreScaledAVX512(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ acc+8(FP), SI
	MOVQ n+16(FP), CX
	MOVL bias+24(FP), AX
	VPBROADCASTD AX, Z31
	VBROADCASTSS sa+28(FP), Z30
	MOVQ sw+32(FP), BX
	MOVQ $-1, AX
	KMOVW AX, K1

f32loop:
	CMPQ CX, $16
	JGE  f32full
	TESTQ CX, CX
	JZ   f32done
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K1
	MOVQ $16, CX

f32full:
	VMOVDQU32.Z (SI), K1, Z0
	VMOVUPS.Z   (BX), K1, Z1
	VPSUBD      Z31, Z0, Z0
	VCVTDQ2PS   Z0, Z0
	VMULPS      Z30, Z1, Z1
	VMULPS      Z1, Z0, Z0
	VMOVUPS     Z0, K1, (DI)
	ADDQ        $64, SI
	ADDQ        $64, BX
	ADDQ        $64, DI
	SUBQ        $16, CX
	JMP         f32loop

f32done:
	VZEROUPPER
	RET

// Stores the sum of the 16 lanes of Zi (an accumulator among Z0-Z15) at off(DI). Clobbers X16.
#define HSUM(Zi, Yi, Xi, off) \
	VEXTRACTF64X4 $1, Zi, Y16 ; \
	VADDPS        Y16, Yi, Yi ; \
	VEXTRACTF32X4 $1, Yi, X16 ; \
	VADDPS        X16, Xi, Xi ; \
	VPERMILPS     $0x4e, Xi, X16 ; \
	VADDPS        X16, Xi, Xi ; \
	VPERMILPS     $0xb1, Xi, X16 ; \
	VADDSS        X16, Xi, Xi ; \
	VMOVSS        Xi, off(DI)

// Stores the 16 accumulators Z0-Z15 as c[0..15] at (DI).
#define HSUM16 \
	HSUM(Z0, Y0, X0, 0) ; \
	HSUM(Z1, Y1, X1, 4) ; \
	HSUM(Z2, Y2, X2, 8) ; \
	HSUM(Z3, Y3, X3, 12) ; \
	HSUM(Z4, Y4, X4, 16) ; \
	HSUM(Z5, Y5, X5, 20) ; \
	HSUM(Z6, Y6, X6, 24) ; \
	HSUM(Z7, Y7, X7, 28) ; \
	HSUM(Z8, Y8, X8, 32) ; \
	HSUM(Z9, Y9, X9, 36) ; \
	HSUM(Z10, Y10, X10, 40) ; \
	HSUM(Z11, Y11, X11, 44) ; \
	HSUM(Z12, Y12, X12, 48) ; \
	HSUM(Z13, Y13, X13, 52) ; \
	HSUM(Z14, Y14, X14, 56) ; \
	HSUM(Z15, Y15, X15, 60)

// Multiply-adds the weight vectors Zw (row r) into the accumulators of the four tokens at (AX), (AX)(R8*1),
// (AX)(R8*2), (R9), offset off: acc[t*4+r] += x_t·w.
#define TOKENS4(Zw, off, A0, A1, A2, A3) \
	VFMADD231PS off(AX), Zw, A0 ; \
	VFMADD231PS off(AX)(R8*1), Zw, A1 ; \
	VFMADD231PS off(AX)(R8*2), Zw, A2 ; \
	VFMADD231PS off(R9), Zw, A3

// func qTileI8F32AVX512(a *float32, lda int, w *int8, ldw int, n int, c *[16]float32)
// The W8A16 tile for m > 1: c[t*4+r] = Σ_{p<n} a[t*lda+p]·float32(w[r*ldw+p]) for four tokens t and four rows r
// of W (n a positive multiple of 16; lda in floats, ldw in bytes). Each 16 weights of a row are widened once and
// used by all four tokens.
TEXT ·qTileI8F32AVX512(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), AX
	MOVQ lda+8(FP), R8
	SHLQ $2, R8
	LEAQ (AX)(R8*2), R9
	ADDQ R8, R9 // token 3
	MOVQ w+16(FP), SI
	MOVQ ldw+24(FP), DX
	LEAQ (SI)(DX*2), R10
	ADDQ DX, R10 // row 3
	MOVQ n+32(FP), CX
	SHRQ $4, CX
	ZERO16

i8tile:
	VPMOVSXBD (SI), Z16
	VPMOVSXBD (SI)(DX*1), Z17
	VPMOVSXBD (SI)(DX*2), Z18
	VPMOVSXBD (R10), Z19
	VCVTDQ2PS Z16, Z16
	VCVTDQ2PS Z17, Z17
	VCVTDQ2PS Z18, Z18
	VCVTDQ2PS Z19, Z19
	TOKENS4(Z16, 0, Z0, Z4, Z8, Z12)
	TOKENS4(Z17, 0, Z1, Z5, Z9, Z13)
	TOKENS4(Z18, 0, Z2, Z6, Z10, Z14)
	TOKENS4(Z19, 0, Z3, Z7, Z11, Z15)
	ADDQ $16, SI
	ADDQ $16, R10
	ADDQ $64, AX
	ADDQ $64, R9
	DECQ CX
	JNZ  i8tile

	MOVQ c+40(FP), DI
	HSUM16
	VZEROUPPER
	RET

// Dequantizes 32 codes of one W4A16 row at off(SI...) into Z24 (evens) and Z25 (odds) as (q - z)·s = q·s + zs,
// with s in Zs and zs broadcast from zsoff(R11).
#define W4ROW(wmem, Zs, zsoff) \
	VPMOVZXBD        wmem, Z24 ; \
	VPSRLD           $4, Z24, Z25 ; \
	VPANDD           Z26, Z24, Z24 ; \
	VCVTDQ2PS        Z24, Z24 ; \
	VCVTDQ2PS        Z25, Z25 ; \
	VFMADD213PS.BCST zsoff(R11), Zs, Z24 ; \
	VFMADD213PS.BCST zsoff(R11), Zs, Z25

// func qTileW4AVX512(xd *float32, ldx int, w *uint8, ldw int, sz *float32, groups, chunks int, c *[16]float32)
// The W4A16 tile for m > 1: c[t*4+r] = Σ_p x_t[p]·(q_r[p] - z_r)·s_r for four tokens and four rows, over groups
// of 32·chunks values. Tokens are rearranged as in qDotW4AVX512 (xd, ldx floats apart); rows are packed codes
// ldw bytes apart; sz holds, for each group, s and -z·s of the four rows (8 floats). Each 32 codes of a row are
// dequantized once and used by all four tokens.
TEXT ·qTileW4AVX512(SB), NOSPLIT, $0-64
	MOVQ xd+0(FP), AX
	MOVQ ldx+8(FP), R8
	SHLQ $2, R8
	LEAQ (AX)(R8*2), R9
	ADDQ R8, R9
	MOVQ w+16(FP), SI
	MOVQ ldw+24(FP), DX
	LEAQ (SI)(DX*2), R10
	ADDQ DX, R10
	MOVQ sz+32(FP), R11
	MOVQ groups+40(FP), DI
	MOVL $15, BX
	VPBROADCASTD BX, Z26
	ZERO16

w4group:
	VBROADCASTSS 0(R11), Z16
	VBROADCASTSS 8(R11), Z17
	VBROADCASTSS 16(R11), Z18
	VBROADCASTSS 24(R11), Z19
	MOVQ         chunks+48(FP), CX

w4chunk:
	W4ROW((SI), Z16, 4)
	TOKENS4(Z24, 0, Z0, Z4, Z8, Z12)
	TOKENS4(Z25, 64, Z0, Z4, Z8, Z12)
	W4ROW((SI)(DX*1), Z17, 12)
	TOKENS4(Z24, 0, Z1, Z5, Z9, Z13)
	TOKENS4(Z25, 64, Z1, Z5, Z9, Z13)
	W4ROW((SI)(DX*2), Z18, 20)
	TOKENS4(Z24, 0, Z2, Z6, Z10, Z14)
	TOKENS4(Z25, 64, Z2, Z6, Z10, Z14)
	W4ROW((R10), Z19, 28)
	TOKENS4(Z24, 0, Z3, Z7, Z11, Z15)
	TOKENS4(Z25, 64, Z3, Z7, Z11, Z15)
	ADDQ $16, SI
	ADDQ $16, R10
	ADDQ $128, AX
	ADDQ $128, R9
	DECQ CX
	JNZ  w4chunk

	ADDQ $32, R11
	DECQ DI
	JNZ  w4group

	MOVQ c+56(FP), DI
	HSUM16
	VZEROUPPER
	RET

// PW_VEC gathers one dword of each of 16 rows (offsets in zidx, lanes in mask; kt: a copy the gather consumes)
// into z, XORs it with the flip in Z20 and stores the lanes at off(DI); PW_NEXT moves on to the next four bytes
// of the rows and the next step of the panel.
#define PW_VEC(mask, kt, zidx, z, off) \
	KMOVQ      mask, kt; \
	VPGATHERDD (SI)(zidx*1), kt, z; \
	VPXORD     Z20, z, z; \
	VMOVDQU32  z, mask, off(DI)

#define PW_NEXT \
	ADDQ $4, SI; \
	ADDQ BX, DI

// func qPackW(dst, src *byte, idx *int32, mask uint64, kq, nr int, flip uint32, sums *float32, gsteps int)
// Packs rows of W or tokens (row c at src + idx[c]) into a panel of nr columns (16, 32 or 48) for the VNNI
// kernels: for q < kq, bytes 4q..4q+3 of row c, XOR flip (0x80808080 offsets signed bytes by 128 for the kernels
// that take them unsigned; 0 keeps them), go to dst[(q*nr+c)*4:], for the columns c whose bit is set in mask;
// the others are left as they are. Sixteen columns at a time, a dword gather each, so that dst is written in
// order. Where gsteps > 0 (nr = 32, flip = 0) it also writes the sum of each column's bytes over each run of
// gsteps steps, as float32, to sums[g*32+c] (VPDPBUSD against ones).
TEXT ·qPackW(SB), NOSPLIT, $0-72
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         idx+16(FP), DX
	MOVQ         mask+24(FP), AX
	MOVQ         kq+32(FP), R9
	MOVQ         nr+40(FP), BX
	SHLQ         $2, BX
	KMOVQ        AX, K1
	KSHIFTRQ     $16, K1, K2
	KSHIFTRQ     $32, K1, K3
	VMOVDQU32    (DX), Z16
	MOVL         flip+48(FP), AX
	VPBROADCASTD AX, Z20
	CMPQ         BX, $64
	JEQ          pack16
	VMOVDQU32    64(DX), Z17
	CMPQ         BX, $128
	JNE          pack48pre
	CMPQ         gsteps+64(FP), $0
	JEQ          pack32
	JMP          pack32s

pack48pre:
	VMOVDQU32    128(DX), Z18

pack48:
	PW_VEC(K1, K4, Z16, Z0, 0)
	PW_VEC(K2, K5, Z17, Z1, 64)
	PW_VEC(K3, K6, Z18, Z2, 128)
	PW_NEXT
	DECQ R9
	JNZ  pack48
	VZEROUPPER
	RET

pack32:
	PW_VEC(K1, K4, Z16, Z0, 0)
	PW_VEC(K2, K5, Z17, Z1, 64)
	PW_NEXT
	DECQ R9
	JNZ  pack32
	VZEROUPPER
	RET

pack32s:
	MOVQ         gsteps+64(FP), R10
	MOVQ         sums+56(FP), R11
	MOVL         $0x01010101, AX
	VPBROADCASTD AX, Z21
	VPXORD       Z22, Z22, Z22
	VPXORD       Z23, Z23, Z23
	MOVQ         R10, R12

pack32sloop:
	PW_VEC(K1, K4, Z16, Z0, 0)
	PW_VEC(K2, K5, Z17, Z1, 64)
	VPDPBUSD   Z0, Z21, Z22
	VPDPBUSD   Z1, Z21, Z23
	PW_NEXT
	DECQ       R12
	JNZ        pack32snext
	VCVTDQ2PS  Z22, Z22
	VCVTDQ2PS  Z23, Z23
	VMOVUPS    Z22, (R11)
	VMOVUPS    Z23, 64(R11)
	ADDQ       $128, R11
	VPXORD     Z22, Z22, Z22
	VPXORD     Z23, Z23, Z23
	MOVQ       R10, R12

pack32snext:
	DECQ R9
	JNZ  pack32sloop
	VZEROUPPER
	RET

pack16:
	PW_VEC(K1, K4, Z16, Z0, 0)
	PW_NEXT
	DECQ R9
	JNZ  pack16
	VZEROUPPER
	RET

// func qW4UnpackAVX512(dst, w *uint8, n int)
// Unpacks n codes (a multiple of 64) of a row of W4A8 weights for qW4A8TileVNNI, packed two a byte (w), to dst in
// their natural order, one unsigned byte each. Per 32 packed bytes: widen to words, put the high nibble in the
// high byte and the low nibble in the low byte (two ANDs and an OR).
TEXT ·qW4UnpackAVX512(SB), NOSPLIT, $0-24
	MOVQ         dst+0(FP), DI
	MOVQ         w+8(FP), SI
	MOVQ         n+16(FP), CX
	SHRQ         $6, CX
	MOVL         $0x000f000f, AX
	VPBROADCASTD AX, Z30
	MOVL         $0x0f000f00, AX
	VPBROADCASTD AX, Z31

unpackchunk:
	VPMOVZXBW (SI), Z0
	VPSLLW    $4, Z0, Z1
	VPANDD    Z30, Z0, Z0
	VPANDD    Z31, Z1, Z1
	VPORD     Z1, Z0, Z0
	VMOVDQU32 Z0, (DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       unpackchunk
	VZEROUPPER
	RET

// func qDeinterleaveAVX512(dst, src *int8, n int)
// Writes n bytes of src (a multiple of 128) to dst with each 128 reordered as qDotW4A8RowsVNNI reads a token: the
// 64 bytes in even places, then the 64 in odd places (VPMOVWB keeps a word's low byte).
TEXT ·qDeinterleaveAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $7, CX

deinterleave:
	VMOVDQU64 (SI), Z0
	VMOVDQU64 64(SI), Z1
	VPSRLW    $8, Z0, Z2
	VPSRLW    $8, Z1, Z3
	VPMOVWB   Z0, Y0
	VPMOVWB   Z1, Y1
	VPMOVWB   Z2, Y2
	VPMOVWB   Z3, Y3
	VMOVDQU   Y0, (DI)
	VMOVDQU   Y1, 32(DI)
	VMOVDQU   Y2, 64(DI)
	VMOVDQU   Y3, 96(DI)
	ADDQ      $128, SI
	ADDQ      $128, DI
	DECQ      CX
	JNZ       deinterleave
	VZEROUPPER
	RET

// W4T_ROWS points at the six rows of W of a tile kernel, k (R8) bytes apart from SI: rows 0-4 as SI + {0, 1, 2,
// 3, 4}·R8 (R9 = 3·R8), row 5 at R10.
#define W4T_ROWS \
	LEAQ (R8)(R8*2), R9 ; \
	LEAQ (SI)(R8*4), R10 ; \
	ADDQ R8, R10

// W4T_STEP is one step of a tile kernel's row r: broadcast four bytes of W (at addr) and multiply them with the
// 32 tokens' four bytes in Z24, Z25 into the row's int32 sums Zi0, Zi1: W signed and the tokens unsigned (offset
// by 128) in qW8A8TileVNNI, W4T_STEPU the other way round.
#define W4T_STEP(addr, Zb, Zi0, Zi1) \
	VPBROADCASTD addr, Zb ; \
	VPDPBUSD     Zb, Z24, Zi0 ; \
	VPDPBUSD     Zb, Z25, Zi1

// W4T_STEPU is W4T_STEP for qW4A8TileVNNI: four unsigned codes q against the tokens' signed bytes.
#define W4T_STEPU(addr, Zb, Zi0, Zi1) \
	VPBROADCASTD addr, Zb ; \
	VPDPBUSD     Z24, Zb, Zi0 ; \
	VPDPBUSD     Z25, Zb, Zi1

// W4T_SIX_AT and W4T_SIXU_AT are a step of the tile kernels' six rows (W4T_STEP, W4T_STEPU) against the 32
// tokens' four bytes at toff(DI), the codes off bytes into the rows; W4T_SIX is the step at DI and the rows' start,
// and W4T_NEXT moves to the next step. The kernels over groups of 32 unroll a group's eight steps at fixed offsets.
#define W4T_SIX_AT(off, toff) \
	VMOVDQU32 toff(DI), Z24 ; \
	VMOVDQU32 toff+64(DI), Z25 ; \
	W4T_STEP(off(SI), Z26, Z0, Z1) ; \
	W4T_STEP(off(SI)(R8*1), Z27, Z2, Z3) ; \
	W4T_STEP(off(SI)(R8*2), Z26, Z4, Z5) ; \
	W4T_STEP(off(SI)(R9*1), Z27, Z6, Z7) ; \
	W4T_STEP(off(SI)(R8*4), Z26, Z8, Z9) ; \
	W4T_STEP(off(R10), Z27, Z10, Z11)

#define W4T_SIX W4T_SIX_AT(0, 0)

#define W4T_SIXU_AT(off, toff) \
	VMOVDQU32 toff(DI), Z24 ; \
	VMOVDQU32 toff+64(DI), Z25 ; \
	W4T_STEPU(off(SI), Z26, Z0, Z1) ; \
	W4T_STEPU(off(SI)(R8*1), Z27, Z2, Z3) ; \
	W4T_STEPU(off(SI)(R8*2), Z26, Z4, Z5) ; \
	W4T_STEPU(off(SI)(R9*1), Z27, Z6, Z7) ; \
	W4T_STEPU(off(SI)(R8*4), Z26, Z8, Z9) ; \
	W4T_STEPU(off(R10), Z27, Z10, Z11)

#define W4T_NEXT \
	ADDQ $4, SI ; \
	ADDQ $4, R10 ; \
	ADDQ $128, DI

// W4T_SA loads the 32 tokens' scales from sa into Z24, Z25, in the lanes set in the mask in AX (zero in the
// others).
#define W4T_SA(sa) \
	KMOVQ     AX, K1 ; \
	KSHIFTRQ  $16, K1, K2 ; \
	VMOVUPS.Z (sa), K1, Z24 ; \
	VMOVUPS.Z 64(sa), K2, Z25

// W4T_NEXT_L1 prefetches the lines of next (the *[2]linePrefetch in AX: the next tile's scales and the like) into
// L1; loop, line and done are labels unique to the use. It uses AX, BX, R11, R12.
#define W4T_NEXT_L1(loop, line, done) \
	LEAQ 48(AX), BX ; \
loop: ; \
	MOVQ 0(AX), R11 ; \
	MOVQ 8(AX), R12 ; \
line: ; \
	TESTQ      R12, R12 ; \
	JZ         done ; \
	PREFETCHT0 (R11) ; \
	ADDQ       $64, R11 ; \
	DECQ       R12 ; \
	JMP        line ; \
done: ; \
	ADDQ $24, AX ; \
	CMPQ AX, BX ; \
	JB   loop

// W4T_PF4 prefetches the next four lines of the line stream in R11 (R12 lines left) into L2, once eight steps.
#define W4T_PF4(label) \
	TESTQ      R12, R12 ; \
	JZ         label ; \
	PREFETCHT1 (R11) ; \
	PREFETCHT1 64(R11) ; \
	PREFETCHT1 128(R11) ; \
	PREFETCHT1 192(R11) ; \
	ADDQ       $256, R11 ; \
	SUBQ       $4, R12 ; \
	JA         label ; \
	XORQ       R12, R12 ; \
label:

// W4T_END ends a tile kernel: the line stream's position (R11, R12) written back to the linePrefetch at DI if it
// moved, the six rows' sums (Z12-Z23) scaled by the tokens' scales at SI (W4T_SA, the lanes set in the mask in CX)
// and stored in C's layout (W4T_STORE) at R8, R9 bytes a token.
#define W4T_END(label) \
	CMPQ R12, 8(DI) ; \
	JEQ  label ; \
	MOVQ R11, 0(DI) ; \
	MOVQ R12, 8(DI) ; \
label: ; \
	MOVQ CX, AX ; \
	W4T_SA(SI) ; \
	W4T_SCALE(Z12, Z13) ; \
	W4T_SCALE(Z14, Z15) ; \
	W4T_SCALE(Z16, Z17) ; \
	W4T_SCALE(Z18, Z19) ; \
	W4T_SCALE(Z20, Z21) ; \
	W4T_SCALE(Z22, Z23) ; \
	MOVQ R8, AX ; \
	MOVQ R9, BX ; \
	W4T_STORE ; \
	VZEROUPPER ; \
	RET

// W4T_GROUP ends a group for a row: convert its sums Σ q·a, take off z·Σ a (z as float32 at zaddr; the tokens'
// Σ a of the group in Z24, Z25), both exact integers below 2^24, multiply-add the result, the group's exact
// Σ (q - z)·a, with the group's scale (at saddr) into the row's float sums Zf0, Zf1, and clear the int32 sums.
#define W4T_GROUP(zaddr, saddr, Zi0, Zi1, Zf0, Zf1) \
	VCVTDQ2PS         Zi0, Zi0 ; \
	VCVTDQ2PS         Zi1, Zi1 ; \
	VFNMADD231PS.BCST zaddr, Z24, Zi0 ; \
	VFNMADD231PS.BCST zaddr, Z25, Zi1 ; \
	VFMADD231PS.BCST  saddr, Zi0, Zf0 ; \
	VFMADD231PS.BCST  saddr, Zi1, Zf1 ; \
	VPXORD            Zi0, Zi0, Zi0 ; \
	VPXORD            Zi1, Zi1, Zi1

// W4T_SCALE scales row r's sums by the tokens' scales (Z24, Z25).
#define W4T_SCALE(Zf0, Zf1) \
	VMULPS Z24, Zf0, Zf0 ; \
	VMULPS Z25, Zf1, Zf1

// W4T_HALF transposes sixteen tokens' sums of the six rows (r0-r5, one register a row) into four registers of
// four rows (Z6-Z9: the token's index mod 4 in each 128-bit lane) and two of the rows 4 and 5 (Z4: tokens 0
// and 1 mod 4 in the lane's low and high 64 bits, Z5: tokens 2 and 3).
#define W4T_HALF(r0, r1, r2, r3, r4, r5) \
	VUNPCKLPS r1, r0, Z0 ; \
	VUNPCKHPS r1, r0, Z1 ; \
	VUNPCKLPS r3, r2, Z2 ; \
	VUNPCKHPS r3, r2, Z3 ; \
	VUNPCKLPS r5, r4, Z4 ; \
	VUNPCKHPS r5, r4, Z5 ; \
	VSHUFPS   $0x44, Z2, Z0, Z6 ; \
	VSHUFPS   $0xee, Z2, Z0, Z7 ; \
	VSHUFPS   $0x44, Z3, Z1, Z8 ; \
	VSHUFPS   $0xee, Z3, Z1, Z9

// W4T_LANE stores four tokens (lane L of W4T_HALF's registers) at AX, AX+BX, AX+2BX, AX+DX (DX = 3BX): six
// floats each, then moves AX on by four tokens.
#define W4T_LANE(L) \
	VEXTRACTF32X4 $L, Z6, (AX) ; \
	VEXTRACTF32X4 $L, Z7, (AX)(BX*1) ; \
	VEXTRACTF32X4 $L, Z8, (AX)(BX*2) ; \
	VEXTRACTF32X4 $L, Z9, (AX)(DX*1) ; \
	VEXTRACTF32X4 $L, Z4, X10 ; \
	VMOVQ         X10, 16(AX) ; \
	VMOVHPS       X10, 16(AX)(BX*1) ; \
	VEXTRACTF32X4 $L, Z5, X11 ; \
	VMOVQ         X11, 16(AX)(BX*2) ; \
	VMOVHPS       X11, 16(AX)(DX*1) ; \
	LEAQ          (AX)(BX*4), AX

// W4T_STORE stores the six rows' sums of 32 tokens, in Z12-Z23 as the W4A8 tile keeps them (row r: Z(12+2r),
// Z(13+2r)), in C's layout: token t's six outputs at AX + t·BX.
#define W4T_STORE \
	LEAQ (BX)(BX*2), DX ; \
	W4T_HALF(Z12, Z14, Z16, Z18, Z20, Z22) ; \
	W4T_LANE(0) ; \
	W4T_LANE(1) ; \
	W4T_LANE(2) ; \
	W4T_LANE(3) ; \
	W4T_HALF(Z13, Z15, Z17, Z19, Z21, Z23) ; \
	W4T_LANE(0) ; \
	W4T_LANE(1) ; \
	W4T_LANE(2) ; \
	W4T_LANE(3)

// W8T_ROW ends row r of qW8A8TileVNNI: float32(sum - bias[r])·(sa[t]·sw[r]), the product in the order the
// packed path (F32_ROW) takes it, from the int32 sums zi0, zi1 into zf0, zf1 (sa in Z24, Z25).
#define W8T_ROW(r, zi0, zi1, zf0, zf1) \
	VPSUBD.BCST (r*4)(BX), zi0, zi0 ; \
	VPSUBD.BCST (r*4)(BX), zi1, zi1 ; \
	VCVTDQ2PS   zi0, zf0 ; \
	VCVTDQ2PS   zi1, zf1 ; \
	VMULPS.BCST (r*4)(DX), Z24, Z26 ; \
	VMULPS.BCST (r*4)(DX), Z25, Z27 ; \
	VMULPS      Z26, zf0, zf0 ; \
	VMULPS      Z27, zf1, zf1

// func qW4A8TileVNNI(codes *uint8, k int, tok *int8, groups, steps int, zf, scale *float32, gs int, sa *float32,
//	mask uint64, c *float32, ldc int, pf *linePrefetch, tsum *float32, next *[2]linePrefetch)
// The W4A8 tile micro-kernel: six rows of W, unpacked by qW4UnpackAVX512 (codes q, unsigned, rows k bytes apart),
// against a panel of 32 tokens packed by qPackW (signed, [k/4][32][4]) with the sums of each group's values
// (tsum: [group][32], as float32). For each group of 4·steps values (steps a multiple of 8, run eight at a time
// unrolled, W4T_SIXU_AT), VPDPBUSD sums Σ q·a exactly in int32, and
// the group's end takes off z·Σ a and adds the group's exact Σ (q - z)·a times s (W4T_GROUP) to the row's float
// sums; the zero points zf and the scales are [6][groups] tables with rows gs bytes apart, so that scale can be
// the weights' own. At the end the sums times sa[t] (sa read in the lanes set in mask, zero in the others) are
// transposed in registers and stored as C's layout: token t's six outputs at c + t·ldc bytes, for all 32 tokens.
// Z0-Z11 hold the int32 sums (row r in Z(2r), Z(2r+1)), Z12-Z23 the float sums. Each eight steps prefetch four
// lines of pf's stream (R11: the next line, R12: how many are left); the lines of next (the next tile's scales and
// zero points) are prefetched into L1 first.
TEXT ·qW4A8TileVNNI(SB), NOSPLIT, $0-120
	MOVQ next+112(FP), AX
	W4T_NEXT_L1(w4tnext, w4tline, w4tnextdone)
	MOVQ codes+0(FP), SI
	MOVQ k+8(FP), R8
	MOVQ tok+16(FP), DI
	MOVQ groups+24(FP), CX
	MOVQ zf+40(FP), BX
	MOVQ scale+48(FP), DX
	MOVQ gs+56(FP), R13
	LEAQ (R13)(R13*2), R14
	LEAQ (R13)(R13*4), R15
	W4T_ROWS
	MOVQ pf+96(FP), AX
	MOVQ 0(AX), R11
	MOVQ 8(AX), R12
	ZERO24

w4tgroup:
	MOVQ steps+32(FP), AX
	SHRQ $3, AX

w4tstep:
	W4T_SIXU_AT(0, 0)
	W4T_SIXU_AT(4, 128)
	W4T_SIXU_AT(8, 256)
	W4T_SIXU_AT(12, 384)
	W4T_SIXU_AT(16, 512)
	W4T_SIXU_AT(20, 640)
	W4T_SIXU_AT(24, 768)
	W4T_SIXU_AT(28, 896)
	W4T_PF4(w4tnopf)
	ADDQ $32, SI
	ADDQ $32, R10
	ADDQ $1024, DI
	DECQ AX
	JNZ  w4tstep

	MOVQ    groups+24(FP), AX
	SUBQ    CX, AX
	SHLQ    $7, AX
	ADDQ    tsum+104(FP), AX
	VMOVUPS (AX), Z24
	VMOVUPS 64(AX), Z25
	W4T_GROUP((BX), (DX), Z0, Z1, Z12, Z13)
	W4T_GROUP((BX)(R13*1), (DX)(R13*1), Z2, Z3, Z14, Z15)
	W4T_GROUP((BX)(R13*2), (DX)(R13*2), Z4, Z5, Z16, Z17)
	W4T_GROUP((BX)(R14*1), (DX)(R14*1), Z6, Z7, Z18, Z19)
	W4T_GROUP((BX)(R13*4), (DX)(R13*4), Z8, Z9, Z20, Z21)
	W4T_GROUP((BX)(R15*1), (DX)(R15*1), Z10, Z11, Z22, Z23)
	ADDQ $4, BX
	ADDQ $4, DX
	DECQ CX
	JNZ  w4tgroup
	MOVQ pf+96(FP), DI
	MOVQ sa+64(FP), SI
	MOVQ mask+72(FP), CX
	MOVQ c+80(FP), R8
	MOVQ ldc+88(FP), R9
	W4T_END(w4tpfdone)

// GGT_GROUP ends a block for a row of qGGUFTileVNNI: convert its exact sums and multiply-add them with the block's
// scale (at saddr) into the row's float sums Zf0, Zf1.
#define GGT_GROUP(saddr, Zi0, Zi1, Zf0, Zf1) \
	VCVTDQ2PS        Zi0, Zi0 ; \
	VCVTDQ2PS        Zi1, Zi1 ; \
	VFMADD231PS.BCST saddr, Zi0, Zf0 ; \
	VFMADD231PS.BCST saddr, Zi1, Zf1

// GGT_INIT starts a block for a row: both int32 sums from the row's block correction at addr.
#define GGT_INIT(addr, Zi0, Zi1) \
	VPBROADCASTD addr, Zi0 ; \
	VPBROADCASTD addr, Zi1

// func qGGUFTileVNNI(w *int8, k int, tok *uint8, blocks int, corr *int32, scale *float32, gs int, sa *float32,
//	mask uint64, c *float32, ldc int, pf *linePrefetch, next *[2]linePrefetch)
// The tile micro-kernel of the repacked GGUF matmuls: six rows of W's codes, signed (rows k bytes apart), against
// a panel of 32 tokens packed by qPackW offset by 128 (unsigned, [k/4][32][4]), in blocks of 32 values. A block's
// int32 sums start from its correction c = -128·Σ q (corr: a [6][blocks] table, rows gs bytes apart, as the scales
// are), so that eight steps of VPDPBUSD leave the exact Σ q·a; the block's end converts them and multiply-adds them
// with its scale into the row's float sums (GGT_GROUP). The end is qW4A8TileVNNI's: the sums times sa[t] in the
// lanes set in mask, stored in C's layout (token t's six outputs at c + t·ldc bytes). Z0-Z11 hold the int32 sums,
// Z12-Z23 the float sums. A block's eight steps are unrolled (W4T_SIX_AT), so that little but the loads and the
// VPDPBUSD take the front end; each block prefetches four lines of pf's stream (R11, R12: a tile of six rows of
// W's codes a tile ahead); next's lines go to L1 first.
TEXT ·qGGUFTileVNNI(SB), NOSPLIT, $0-104
	MOVQ next+96(FP), AX
	W4T_NEXT_L1(ggtnext, ggtline, ggtnextdone)
	MOVQ w+0(FP), SI
	MOVQ k+8(FP), R8
	MOVQ tok+16(FP), DI
	MOVQ blocks+24(FP), CX
	MOVQ corr+32(FP), BX
	MOVQ scale+40(FP), DX
	MOVQ gs+48(FP), R13
	LEAQ (R13)(R13*2), R14
	LEAQ (R13)(R13*4), R15
	W4T_ROWS
	MOVQ pf+88(FP), AX
	MOVQ 0(AX), R11
	MOVQ 8(AX), R12
	ZERO24

ggtblock:
	GGT_INIT((BX), Z0, Z1)
	GGT_INIT((BX)(R13*1), Z2, Z3)
	GGT_INIT((BX)(R13*2), Z4, Z5)
	GGT_INIT((BX)(R14*1), Z6, Z7)
	GGT_INIT((BX)(R13*4), Z8, Z9)
	GGT_INIT((BX)(R15*1), Z10, Z11)
	W4T_SIX_AT(0, 0)
	W4T_SIX_AT(4, 128)
	W4T_SIX_AT(8, 256)
	W4T_SIX_AT(12, 384)
	W4T_SIX_AT(16, 512)
	W4T_SIX_AT(20, 640)
	W4T_SIX_AT(24, 768)
	W4T_SIX_AT(28, 896)
	W4T_PF4(ggtnopf)
	ADDQ $32, SI
	ADDQ $32, R10
	ADDQ $1024, DI
	GGT_GROUP((DX), Z0, Z1, Z12, Z13)
	GGT_GROUP((DX)(R13*1), Z2, Z3, Z14, Z15)
	GGT_GROUP((DX)(R13*2), Z4, Z5, Z16, Z17)
	GGT_GROUP((DX)(R14*1), Z6, Z7, Z18, Z19)
	GGT_GROUP((DX)(R13*4), Z8, Z9, Z20, Z21)
	GGT_GROUP((DX)(R15*1), Z10, Z11, Z22, Z23)
	ADDQ $4, BX
	ADDQ $4, DX
	DECQ CX
	JNZ  ggtblock
	MOVQ pf+88(FP), DI
	MOVQ sa+56(FP), SI
	MOVQ mask+64(FP), CX
	MOVQ c+72(FP), R8
	MOVQ ldc+80(FP), R9
	W4T_END(ggtpfdone)

// func qQ4_0UnpackAVX512(dst *int8, w *uint8, n int, corr *int32)
// Unpacks n Q4_0 codes (a multiple of 128), packed two a byte as qW4UnpackAVX512 takes them, to dst in their
// natural order as signed bytes q - 8, and writes each block of 32's correction -128·Σ (q - 8) = 32768 - 128·Σ q
// to corr. Per 64 packed bytes (four blocks): the two nibbles of each byte added, VPSADBW's eight sums of 16
// codes, each 128-bit lane's two added (a block's sum), and VPERMD gathering the four (qBlockSums).
TEXT ·qQ4_0UnpackAVX512(SB), NOSPLIT, $0-32
	MOVQ         dst+0(FP), DI
	MOVQ         w+8(FP), SI
	MOVQ         n+16(FP), CX
	MOVQ         corr+24(FP), DX
	SHRQ         $7, CX
	MOVL         $0x000f000f, AX
	VPBROADCASTD AX, Z4
	MOVL         $0x0f000f00, AX
	VPBROADCASTD AX, Z5
	MOVL         $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z6
	MOVL         $0x08080808, AX
	VPBROADCASTD AX, Z7
	MOVL         $32768, AX
	VPBROADCASTD AX, X8
	VPXORD       Z9, Z9, Z9
	VMOVDQU32    qBlockSums<>(SB), Z10

q40chunk:
	VMOVDQU64 (SI), Z0
	VPANDD    Z6, Z0, Z1
	VPSRLW    $4, Z0, Z2
	VPANDD    Z6, Z2, Z2
	VPADDB    Z2, Z1, Z1
	VPSADBW   Z9, Z1, Z1
	VPSHUFD   $0x4e, Z1, Z2
	VPADDQ    Z2, Z1, Z1
	VPERMD    Z1, Z10, Z1
	VPSLLD    $7, X1, X1
	VPSUBD    X1, X8, X1
	VMOVDQU   X1, (DX)
	VPMOVZXBW (SI), Z2
	VPSLLW    $4, Z2, Z3
	VPANDD    Z4, Z2, Z2
	VPANDD    Z5, Z3, Z3
	VPORD     Z3, Z2, Z2
	VPSUBB    Z7, Z2, Z2
	VMOVDQU64 Z2, (DI)
	VPMOVZXBW 32(SI), Z2
	VPSLLW    $4, Z2, Z3
	VPANDD    Z4, Z2, Z2
	VPANDD    Z5, Z3, Z3
	VPORD     Z3, Z2, Z2
	VPSUBB    Z7, Z2, Z2
	VMOVDQU64 Z2, 64(DI)
	ADDQ      $64, SI
	ADDQ      $128, DI
	ADDQ      $16, DX
	DECQ      CX
	JNZ       q40chunk
	VZEROUPPER
	RET

// qBlockSums picks dword 0 of each 128-bit lane: the VPERMD indices that gather four blocks' sums.
DATA qBlockSums<>+0(SB)/4, $0
DATA qBlockSums<>+4(SB)/4, $4
DATA qBlockSums<>+8(SB)/4, $8
DATA qBlockSums<>+12(SB)/4, $12
GLOBL qBlockSums<>(SB), RODATA|NOPTR, $64

// func qQ8_0CorrAVX512(corr *int32, w *int8, n int)
// Writes the correction -128·Σ q of each block of 32 of the n Q8_0 codes at w (a multiple of 128) to corr:
// 524288 - 128·Σ (q + 128). Per 128 codes (four blocks): VPSADBW's sums of the codes made unsigned eight at a
// time, each block's four brought into one 128-bit lane (VSHUFI64X2) and added, VPERMD gathering the four.
TEXT ·qQ8_0CorrAVX512(SB), NOSPLIT, $0-24
	MOVQ         corr+0(FP), DX
	MOVQ         w+8(FP), SI
	MOVQ         n+16(FP), CX
	SHRQ         $7, CX
	MOVL         $0x80808080, AX
	VPBROADCASTD AX, Z6
	MOVL         $524288, AX
	VPBROADCASTD AX, X8
	VPXORD       Z9, Z9, Z9
	VMOVDQU32    qBlockSums<>(SB), Z10

q80chunk:
	VPXORD     (SI), Z6, Z0
	VPXORD     64(SI), Z6, Z1
	VPSADBW    Z9, Z0, Z0
	VPSADBW    Z9, Z1, Z1
	VSHUFI64X2 $0x88, Z1, Z0, Z2
	VSHUFI64X2 $0xdd, Z1, Z0, Z3
	VPADDQ     Z3, Z2, Z2
	VPSHUFD    $0x4e, Z2, Z3
	VPADDQ     Z3, Z2, Z2
	VPERMD     Z2, Z10, Z2
	VPSLLD     $7, X2, X2
	VPSUBD     X2, X8, X2
	VMOVDQU    X2, (DX)
	ADDQ       $128, SI
	ADDQ       $16, DX
	DECQ       CX
	JNZ        q80chunk
	VZEROUPPER
	RET

// func qW8A8TileVNNI(w *int8, k int, tok *uint8, steps int, bias *int32, sw, sa *float32, mask uint64, c *float32,
//	ldc int, pf *prefetchStream)
// The W8A8 tile micro-kernel for a few tokens: six rows of W, read in place (signed, k bytes apart), against a
// panel of 32 tokens packed by qPackW (offset by 128, unsigned, [k/4][32][4]), steps steps of four. At the end
// each row's exact sums less bias[r] (128·Σ w) are scaled by sa[t]·sw[r] (W8T_ROW; sa read in the lanes set in
// mask) and stored in C's layout as qW4A8TileVNNI stores them. Each step prefetches a line of pf's stream.
TEXT ·qW8A8TileVNNI(SB), NOSPLIT, $0-88
	MOVQ w+0(FP), SI
	MOVQ k+8(FP), R8
	MOVQ tok+16(FP), DI
	MOVQ steps+24(FP), AX
	W4T_ROWS
	MOVQ pf+80(FP), R15
	PF_LOAD(R15, R11, R12, R13, R14, R15)
	ZERO16

w8tstep:
	W4T_SIX
	PF_STEP(pfw8t, R11, R12, R13, R14, R15)
	W4T_NEXT
	DECQ AX
	JNZ  w8tstep

	MOVQ pf+80(FP), AX
	PF_STORE(pfdonew8t, AX, R11, R12, R15)
	MOVQ      bias+32(FP), BX
	MOVQ      sw+40(FP), DX
	MOVQ      sa+48(FP), CX
	MOVQ      mask+56(FP), AX
	W4T_SA(CX)
	W8T_ROW(0, Z0, Z1, Z12, Z13)
	W8T_ROW(1, Z2, Z3, Z14, Z15)
	W8T_ROW(2, Z4, Z5, Z16, Z17)
	W8T_ROW(3, Z6, Z7, Z18, Z19)
	W8T_ROW(4, Z8, Z9, Z20, Z21)
	W8T_ROW(5, Z10, Z11, Z22, Z23)
	MOVQ c+64(FP), AX
	MOVQ ldc+72(FP), BX
	W4T_STORE
	VZEROUPPER
	RET

// func qU8ToF32AVX512(dst *float32, src *uint8, n int)
// dst[i] = float32(src[i]) for i < n, sixteen at a time, the last n%16 through masks.
TEXT ·qU8ToF32AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

u8loop:
	CMPQ      CX, $16
	JLT       u8tail
	VPMOVZXBD (SI), Z0
	VCVTDQ2PS Z0, Z0
	VMOVUPS   Z0, (DI)
	ADDQ      $16, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JMP       u8loop

u8tail:
	TESTQ      CX, CX
	JZ         u8done
	TAILMASK
	VMOVDQU8.Z (SI), K1, X0
	VPMOVZXBD  X0, Z0
	VCVTDQ2PS  Z0, Z0
	VMOVUPS    Z0, K1, (DI)

u8done:
	VZEROUPPER
	RET
