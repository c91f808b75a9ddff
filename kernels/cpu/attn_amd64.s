//go:build !noasm

#include "textflag.h"
#include "elem_exp_amd64.h"
#include "zero_amd64.h"

// The attention micro-kernels; their specifications are the attn*Go loops in attn_generic.go. A score block is
// 8 rows of 32 floats (128 bytes a row).

// The parts that attnKeysDotAVX512 and attnKeysDotF16AVX512 share (defined before any TEXT for vet's sake).
// KD_SETUP loads the arguments (the key stride in bytes: kStride << shift) and the chunk masks K1, K2; KD_PTRS
// puts the 16 key row addresses of the half tile from key BX in the frame (rows past nk repeat the last key);
// KD_SUM sums the 16 accumulators Z0..Z15 of a row into one vector of 16 scores and stores it at R13.
#define KD_SETUP(shift) \
	MOVQ s+0(FP), DI; \
	MOVQ q+8(FP), SI; \
	MOVQ kStride+24(FP), R8; \
	SHLQ $shift, R8; \
	MOVQ nk+32(FP), R9; \
	MOVQ hd+48(FP), R11; \
	LEAQ 15(R11), AX; \
	ANDQ $-16, AX; \
	SHLQ $2, AX; \
	MOVQ AX, 128(SP); \
	MOVQ $0xffff, AX; \
	KMOVW AX, K1; \
	LEAQ -1(R11), CX; \
	ANDQ $15, CX; \
	INCQ CX; \
	MOVQ $1, AX; \
	SHLQ CX, AX; \
	DECQ AX; \
	KMOVW AX, K2; \
	XORQ BX, BX

#define KD_PTRS \
	MOVQ k+16(FP), DX; \
	MOVQ R9, R12; \
	SUBQ BX, R12; \
	DECQ R12; \
	XORQ AX, AX; \
ptrs: \
	MOVQ    AX, R13; \
	CMPQ    R13, R12; \
	CMOVQGT R12, R13; \
	ADDQ    BX, R13; \
	IMULQ   R8, R13; \
	ADDQ    DX, R13; \
	MOVQ    R13, (SP)(AX*8); \
	INCQ    AX; \
	CMPQ    AX, $16; \
	JB      ptrs

// SUM16 sums each of the 16 accumulators Z0..Z15 over its lanes into lane j of Z0, by a tree of transposing
// adds (temporaries t0, t1).
#define SUM16(t0, t1) \
	VUNPCKLPS Z1, Z0, t0; \
	VUNPCKHPS Z1, Z0, t1; \
	VADDPS t1, t0, Z0; \
	VUNPCKLPS Z3, Z2, t0; \
	VUNPCKHPS Z3, Z2, t1; \
	VADDPS t1, t0, Z1; \
	VUNPCKLPS Z5, Z4, t0; \
	VUNPCKHPS Z5, Z4, t1; \
	VADDPS t1, t0, Z2; \
	VUNPCKLPS Z7, Z6, t0; \
	VUNPCKHPS Z7, Z6, t1; \
	VADDPS t1, t0, Z3; \
	VUNPCKLPS Z9, Z8, t0; \
	VUNPCKHPS Z9, Z8, t1; \
	VADDPS t1, t0, Z4; \
	VUNPCKLPS Z11, Z10, t0; \
	VUNPCKHPS Z11, Z10, t1; \
	VADDPS t1, t0, Z5; \
	VUNPCKLPS Z13, Z12, t0; \
	VUNPCKHPS Z13, Z12, t1; \
	VADDPS t1, t0, Z6; \
	VUNPCKLPS Z15, Z14, t0; \
	VUNPCKHPS Z15, Z14, t1; \
	VADDPS t1, t0, Z7; \
	VUNPCKLPD Z1, Z0, t0; \
	VUNPCKHPD Z1, Z0, t1; \
	VADDPS t1, t0, Z0; \
	VUNPCKLPD Z3, Z2, t0; \
	VUNPCKHPD Z3, Z2, t1; \
	VADDPS t1, t0, Z1; \
	VUNPCKLPD Z5, Z4, t0; \
	VUNPCKHPD Z5, Z4, t1; \
	VADDPS t1, t0, Z2; \
	VUNPCKLPD Z7, Z6, t0; \
	VUNPCKHPD Z7, Z6, t1; \
	VADDPS t1, t0, Z3; \
	VSHUFF32X4 $0x88, Z1, Z0, t0; \
	VSHUFF32X4 $0xdd, Z1, Z0, t1; \
	VADDPS     t1, t0, Z0; \
	VSHUFF32X4 $0x88, Z3, Z2, t0; \
	VSHUFF32X4 $0xdd, Z3, Z2, t1; \
	VADDPS     t1, t0, Z1; \
	VSHUFF32X4 $0x88, Z1, Z0, t0; \
	VSHUFF32X4 $0xdd, Z1, Z0, t1; \
	VADDPS     t1, t0, Z0


#define KD_SUM \
	SUM16(Z16, Z17); \
	VMOVUPS Z0, (R13)

// KD_KEY16 multiplies the key whose row address is at off(SP), 16 binary16 values from step CX widened (masked
// by K3), with the query chunk in Z16 into acc.
#define KD_KEY16(off, acc) \
	MOVQ        off(SP), AX; \
	VMOVDQU16.Z (AX)(CX*2), K3, Y17; \
	VCVTPH2PS   Y17, Z17; \
	VFMADD231PS Z17, Z16, K3, acc

// The parts that attnAxpysAVX512 and attnAxpysF16AVX512 share. AX_SETUP loads the arguments (the value stride
// in bytes: vStride << shift); AX_CHUNK starts a chunk of up to 64 output values from BX (masks K1..K4, the
// outputs scaled by alpha in Z0..Z3, R12 their address), ending the kernel past hd; AX_FMA adds the token's
// weight Z8 times its values in Z4..Z7; AX_STORE stores the chunk and moves to the next.
#define AX_SETUP(shift) \
	MOVQ o+0(FP), DI; \
	MOVQ p+8(FP), SI; \
	MOVQ v+16(FP), DX; \
	MOVQ vStride+24(FP), R9; \
	SHLQ $shift, R9; \
	MOVQ n+32(FP), R10; \
	MOVQ hd+40(FP), R11; \
	VBROADCASTSS alpha+48(FP), Z16; \
	XORQ BX, BX

#define AX_CHUNK \
	CMPQ BX, R11; \
	JAE  done; \
	MOVQ R11, CX; \
	SUBQ BX, CX; \
	MOVQ $-1, AX; \
	CMPQ CX, $64; \
	JAE  full; \
	MOVQ $1, AX; \
	SHLQ CX, AX; \
	DECQ AX; \
full: \
	KMASK64; \
	LEAQ (DI)(BX*4), R12; \
	VMOVUPS.Z (R12), K1, Z0; \
	VMOVUPS.Z 64(R12), K2, Z1; \
	VMOVUPS.Z 128(R12), K3, Z2; \
	VMOVUPS.Z 192(R12), K4, Z3; \
	VMULPS Z16, Z0, Z0; \
	VMULPS Z16, Z1, Z1; \
	VMULPS Z16, Z2, Z2; \
	VMULPS Z16, Z3, Z3

#define AX_FMA \
	VFMADD231PS Z8, Z4, Z0; \
	VFMADD231PS Z8, Z5, Z1; \
	VFMADD231PS Z8, Z6, Z2; \
	VFMADD231PS Z8, Z7, Z3

#define AX_STORE \
	VMOVUPS Z0, K1, (R12); \
	VMOVUPS Z1, K2, 64(R12); \
	VMOVUPS Z2, K3, 128(R12); \
	VMOVUPS Z3, K4, 192(R12); \
	ADDQ $64, BX; \
	JMP  chunk


// The parts of the fused decode kernels attnDecodeAVX512, attnDecodeF16AVX512 and attnDecodeI8AVX512 (LOAD:
// the instructions that load 16 keys' or values' elements at mem as float32 into z; ESC: the elements' size in
// bytes). The int8 kernel's hooks (S_INIT, KSCALE, VSCALE, KS_HEAD, VS_HEAD; empty in the other two) scale a
// head's 16 scores and probabilities by their rows' scales, gathered (Z25: the tokens' offsets in the scale
// table) from the current KV head's key and value scales, whose pointers it keeps in its frame at 80(SP) and
// 88(SP). See attnDecodeAVX512.
#define DEC_LD_F32(mem, z) VMOVUPS mem, z
#define DEC_LD_F16(mem, z) VCVTPH2PS mem, z
#define DEC_LD_I8(mem, z) VPMOVSXBD mem, z; VCVTDQ2PS z, z
#define DEC_NO_HOOK
#define DEC_I8_INIT \
	MOVQ         ks+96(FP), AX; \
	MOVQ         AX, 80(SP); \
	MOVQ         vs+104(FP), AX; \
	MOVQ         AX, 88(SP); \
	MOVQ         sstride+112(FP), AX; \
	SHRQ         $2, AX; \
	VPBROADCASTD AX, Z25; \
	VPMULLD      attnIota<>(SB), Z25, Z25
#define DEC_I8_GATHER(ptr) \
	MOVQ       ptr, AX; \
	KMOVW      K1, K3; \
	VPXORD     Z28, Z28, Z28; \
	VGATHERDPS (AX)(Z25*4), K3, Z28
#define DEC_I8_KSCALE \
	DEC_I8_GATHER(80(SP)); \
	VMULPS Z28, Z0, Z0
#define DEC_I8_VSCALE \
	DEC_I8_GATHER(88(SP)); \
	VMULPS  (SP), Z28, Z28; \
	VMOVUPS Z28, (SP)
#define DEC_I8_KS_HEAD ADDQ $4, 80(SP)
#define DEC_I8_VS_HEAD ADDQ $4, 88(SP)
//
// DEC_PREFETCH prefetches the current head's share of the next tile's lines (the attnNext at pf: the next
// key and value lines, how many are left, how many a head) into L1, four lines of each cache at a time; it uses
// AX, BX, CX, R14, R15.
#define DEC_PREFETCH \
	MOVQ    pf+80(FP), AX; \
	MOVQ    24(AX), CX; \
	MOVQ    16(AX), BX; \
	CMPQ    CX, BX; \
	CMOVQGT BX, CX; \
	SUBQ    CX, 16(AX); \
	MOVQ    0(AX), R14; \
	MOVQ    8(AX), R15; \
pfour: \
	CMPQ       CX, $4; \
	JB         pone; \
	PREFETCHT0 (R14); \
	PREFETCHT0 64(R14); \
	PREFETCHT0 128(R14); \
	PREFETCHT0 192(R14); \
	PREFETCHT0 (R15); \
	PREFETCHT0 64(R15); \
	PREFETCHT0 128(R15); \
	PREFETCHT0 192(R15); \
	ADDQ       $256, R14; \
	ADDQ       $256, R15; \
	SUBQ       $4, CX; \
	JMP        pfour; \
pone: \
	TESTQ      CX, CX; \
	JZ         pdone; \
	PREFETCHT0 (R14); \
	PREFETCHT0 (R15); \
	ADDQ       $64, R14; \
	ADDQ       $64, R15; \
	DECQ       CX; \
	JMP        pone; \
pdone: \
	MOVQ R14, 0(AX); \
	MOVQ R15, 8(AX)

// DEC_KEY multiplies the 16 elements at AX of a key (widened by LOAD) with the query chunk in Z27 into the
// key's accumulator acc, then leaves the chunk after the tile's last key (CX counts them down) or moves AX to
// the next key.
#define DEC_KEY(LOAD, acc) \
	LOAD((AX), Z28); \
	VFMADD231PS Z28, Z27, acc; \
	DECQ        CX; \
	JZ          sexit; \
	ADDQ        R8, AX

// DEC_SCORES computes the scores of the head whose query is at DI and keys at SI into Z30: per chunk of 16
// dims (Z27), each of the nt keys (R9) into its accumulator, then SUM16.
#define DEC_SCORES(LOAD, ESC, KSCALE) \
	ZERO16; \
	XORQ BX, BX; \
schunk: \
	VMOVUPS (DI)(BX*4), Z27; \
	LEAQ    (SI)(BX*ESC), AX; \
	MOVQ    R9, CX; \
	DEC_KEY(LOAD, Z0); \
	DEC_KEY(LOAD, Z1); \
	DEC_KEY(LOAD, Z2); \
	DEC_KEY(LOAD, Z3); \
	DEC_KEY(LOAD, Z4); \
	DEC_KEY(LOAD, Z5); \
	DEC_KEY(LOAD, Z6); \
	DEC_KEY(LOAD, Z7); \
	DEC_KEY(LOAD, Z8); \
	DEC_KEY(LOAD, Z9); \
	DEC_KEY(LOAD, Z10); \
	DEC_KEY(LOAD, Z11); \
	DEC_KEY(LOAD, Z12); \
	DEC_KEY(LOAD, Z13); \
	DEC_KEY(LOAD, Z14); \
	LOAD((AX), Z28); \
	VFMADD231PS Z28, Z27, Z15; \
sexit: \
	ADDQ $16, BX; \
	CMPQ BX, R11; \
	JB   schunk; \
	SUM16(Z28, Z29); \
	KSCALE; \
	VMOVAPS Z0, Z30

// DEC_SOFTMAX is the online-softmax update of head R13/4 for the scores in Z30: the new maximum and sum to m
// and l, the probabilities to the frame, alpha to Z31.
#define DEC_SOFTMAX \
	VMOVAPS       Z16, Z2; \
	VMOVAPS       Z30, K1, Z2; \
	VEXTRACTF32X8 $1, Z2, Y5; \
	VMAXPS        Y5, Y2, Y4; \
	VEXTRACTF128  $1, Y4, X5; \
	VMAXPS        X5, X4, X4; \
	VPERMILPS     $0x4e, X4, X5; \
	VMAXPS        X5, X4, X4; \
	VPERMILPS     $0xb1, X4, X5; \
	VMAXPS        X5, X4, X4; \
	MOVQ          m+56(FP), R14; \
	MOVQ          l+64(FP), R15; \
	VMOVSS        (R14)(R13*1), X6; \
	VMAXSS        X6, X4, X4; \
	VMOVSS        X4, (R14)(R13*1); \
	VBROADCASTSS  X4, Z4; \
	VBROADCASTSS  X6, Z31; \
	VSUBPS        Z4, Z2, Z0; \
	VSUBPS        Z4, Z31, Z31; \
	ATTN_EXP2(Z0, Z5, Z7, K1); \
	ATTN_EXP2(Z31, Z8, Z9, K2); \
	VMOVUPS       Z0, (SP); \
	HSUM_Z0; \
	VMOVSS        (R15)(R13*1), X1; \
	VFMADD213SS   X0, X31, X1; \
	VMOVSS        X1, (R15)(R13*1)

// DEC_VALUES updates the output at R12 of the head whose values are at DX: per chunk of 16 dims, alpha (Z31)
// times the output, plus the tokens' probabilities (in the frame) times their values, the even tokens in one
// sum and the odd ones in another (two chains of multiply-adds, for their latency), each in token order, then
// their sum. Four chunks at a time (DEC_VQUAD; the rest one at a time), so that a token's probability is loaded
// once for 64 dims: with it a memory operand of every multiply-add, each vector of values took two loads, and the
// kernel then had half as many of the cache's lines in flight.
#define DEC_VALUES(LOAD, ESC, VSCALE) \
	VSCALE; \
	XORQ BX, BX; \
vquad: \
	MOVQ R11, R14; \
	SUBQ BX, R14; \
	CMPQ R14, $64; \
	JB   vchunk; \
	DEC_VQUAD(LOAD, ESC); \
	ADDQ $64, BX; \
	JMP  vquad; \
vchunk: \
	CMPQ    BX, R11; \
	JAE     vdone; \
	VMOVUPS (R12)(BX*4), Z0; \
	VMULPS  Z31, Z0, Z0; \
	VPXORD  Z2, Z2, Z2; \
	DEC_VSTART(ESC, vlast); \
vtok: \
	LOAD((AX), Z1); \
	LOAD((AX)(R8*1), Z3); \
	VFMADD231PS.BCST (SP)(CX*4), Z1, Z0; \
	VFMADD231PS.BCST 4(SP)(CX*4), Z3, Z2; \
	LEAQ             (AX)(R8*2), AX; \
	DEC_VPAIR(vtok, vsum); \
vlast: \
	LOAD((AX), Z1); \
	VFMADD231PS.BCST (SP)(CX*4), Z1, Z0; \
vsum: \
	VADDPS  Z2, Z0, Z0; \
	VMOVUPS Z0, (R12)(BX*4); \
	ADDQ    $16, BX; \
	JMP     vchunk; \
vdone:

// DEC_VSTART points AX at the first token's values of the chunk at BX and CX at the token, and goes to last when
// the tile has one token.
#define DEC_VSTART(ESC, last) \
	LEAQ (DX)(BX*ESC), AX; \
	XORQ CX, CX; \
	CMPQ R9, $1; \
	JE   last

// DEC_VPAIR counts a pair of tokens (CX) and goes back to tok while two are left, to sum when none is (with one
// left it falls through to the tile's last token).
#define DEC_VPAIR(tok, sum) \
	ADDQ $2, CX; \
	LEAQ 1(CX), R14; \
	CMPQ R14, R9; \
	JB   tok; \
	CMPQ CX, R9; \
	JE   sum

// DEC_VOFF is the byte offset of chunk c of a row of elements ESC bytes wide.
#define DEC_VOFF(ESC, c) c*16*ESC

// DEC_VTOK adds the token whose probability is in zp and values at AX (chunks 0-3) into a0-a3 (Z10-Z13:
// scratch).
#define DEC_VTOK(LOAD, ESC, zp, a0, a1, a2, a3) \
	LOAD((AX), Z10); \
	LOAD(DEC_VOFF(ESC, 1)(AX), Z11); \
	LOAD(DEC_VOFF(ESC, 2)(AX), Z12); \
	LOAD(DEC_VOFF(ESC, 3)(AX), Z13); \
	VFMADD231PS zp, Z10, a0; \
	VFMADD231PS zp, Z11, a1; \
	VFMADD231PS zp, Z12, a2; \
	VFMADD231PS zp, Z13, a3

// DEC_VQUAD is DEC_VALUES's loop for the four chunks from BX: the even tokens into Z0-Z3, the odd ones into
// Z4-Z7, their probabilities broadcast into Z8 and Z9.
#define DEC_VQUAD(LOAD, ESC) \
	VMULPS (R12)(BX*4), Z31, Z0; \
	VMULPS 64(R12)(BX*4), Z31, Z1; \
	VMULPS 128(R12)(BX*4), Z31, Z2; \
	VMULPS 192(R12)(BX*4), Z31, Z3; \
	VPXORD Z4, Z4, Z4; \
	VPXORD Z5, Z5, Z5; \
	VPXORD Z6, Z6, Z6; \
	VPXORD Z7, Z7, Z7; \
	DEC_VSTART(ESC, vqlast); \
vqtok: \
	VBROADCASTSS (SP)(CX*4), Z8; \
	VBROADCASTSS 4(SP)(CX*4), Z9; \
	DEC_VTOK(LOAD, ESC, Z8, Z0, Z1, Z2, Z3); \
	ADDQ         R8, AX; \
	DEC_VTOK(LOAD, ESC, Z9, Z4, Z5, Z6, Z7); \
	ADDQ         R8, AX; \
	DEC_VPAIR(vqtok, vqsum); \
vqlast: \
	VBROADCASTSS (SP)(CX*4), Z8; \
	DEC_VTOK(LOAD, ESC, Z8, Z0, Z1, Z2, Z3); \
vqsum: \
	VADDPS  Z4, Z0, Z0; \
	VADDPS  Z5, Z1, Z1; \
	VADDPS  Z6, Z2, Z2; \
	VADDPS  Z7, Z3, Z3; \
	VMOVUPS Z0, (R12)(BX*4); \
	VMOVUPS Z1, 64(R12)(BX*4); \
	VMOVUPS Z2, 128(R12)(BX*4); \
	VMOVUPS Z3, 192(R12)(BX*4)

// DEC_KV counts a query head down at cnt and, after group of them, moves ptr (and with HEAD the scales) to the
// next KV head's columns and starts the count again; label follows.
#define DEC_KV(cnt, ptr, ESC, label, HEAD) \
	DECQ cnt; \
	JNZ  label; \
	MOVQ group+88(FP), AX; \
	MOVQ AX, cnt; \
	LEAQ (ptr)(R11*ESC), ptr; \
	HEAD; \
label:

// DEC_BODY is the whole kernel. Round i of heads+1 (R10 counts them down) runs the softmax of
// query head i-1, the scores of query head i and the values of query head i-1, in that order, so that the
// softmax's chain of dependent instructions overlaps the independent scores of the next head: DI and SI point at
// head i's query and keys, DX, R12 and R13 at head i-1's values, output and m, l. The keys and values move on
// to the next KV head every group query heads (the frame counts them down at 64(SP) for SI, 72(SP) for DX).
#define DEC_BODY(LOAD, ESC, S_INIT, KSCALE, VSCALE, KS_HEAD, VS_HEAD) \
	S_INIT; \
	EXP_POLY_CONSTS; \
	VBROADCASTSS attnExp2Lo<>(SB), Z24; \
	VBROADCASTSS attnLn2<>(SB), Z26; \
	VBROADCASTSS attnNegInf<>(SB), Z16; \
	MOVQ q+0(FP), DI; \
	MOVQ k+8(FP), SI; \
	MOVQ v+16(FP), DX; \
	MOVQ stride+24(FP), R8; \
	MOVQ nt+32(FP), R9; \
	MOVQ heads+40(FP), R10; \
	INCQ R10; \
	MOVQ hd+48(FP), R11; \
	MOVQ o+72(FP), R12; \
	XORQ R13, R13; \
	MOVQ group+88(FP), AX; \
	MOVQ AX, 64(SP); \
	MOVQ AX, 72(SP); \
	MOVQ  $1, AX; \
	SHLXQ R9, AX, AX; \
	DECQ  AX; \
	KMOVW AX, K1; \
	MOVQ  $0xffff, AX; \
	KMOVW AX, K2; \
	JMP   scores; \
round: \
	DEC_SOFTMAX; \
	CMPQ R10, $1; \
	JE   values; \
scores: \
	DEC_PREFETCH; \
	DEC_SCORES(LOAD, ESC, KSCALE); \
	LEAQ (DI)(R11*4), DI; \
	DEC_KV(64(SP), SI, ESC, samek, KS_HEAD); \
	MOVQ heads+40(FP), AX; \
	INCQ AX; \
	CMPQ R10, AX; \
	JE   next; \
values: \
	DEC_VALUES(LOAD, ESC, VSCALE); \
	LEAQ (R12)(R11*4), R12; \
	ADDQ $4, R13; \
	DEC_KV(72(SP), DX, ESC, next, VS_HEAD); \
	DECQ R10; \
	JNZ  round; \
	VZEROUPPER; \
	RET

// func attnQKAVX512(s, q, kt *float32, hd int)
// Z0..Z15 accumulate the 8×32 block, two registers a row; each step over d loads a row of kt (32 keys) and
// broadcasts q[r][d] for the 8 rows: 16 FMAs for 10 loads.
TEXT ·attnQKAVX512(SB), NOSPLIT, $0-32
	MOVQ s+0(FP), DI
	MOVQ q+8(FP), R8
	MOVQ kt+16(FP), SI
	MOVQ hd+24(FP), CX
	MOVQ CX, R11
	SHLQ $2, R11
	LEAQ (R8)(R11*2), R9
	ADDQ R11, R9
	LEAQ (R9)(R11*2), R10
	ADDQ R11, R10
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

loop:
	VMOVUPS (SI), Z16
	VMOVUPS 64(SI), Z17
	VBROADCASTSS (R8), Z18
	VBROADCASTSS (R8)(R11*1), Z19
	VBROADCASTSS (R8)(R11*2), Z20
	VBROADCASTSS (R9), Z21
	VBROADCASTSS (R9)(R11*1), Z22
	VBROADCASTSS (R9)(R11*2), Z23
	VBROADCASTSS (R10), Z24
	VBROADCASTSS (R10)(R11*1), Z25
	VFMADD231PS Z16, Z18, Z0
	VFMADD231PS Z17, Z18, Z1
	VFMADD231PS Z16, Z19, Z2
	VFMADD231PS Z17, Z19, Z3
	VFMADD231PS Z16, Z20, Z4
	VFMADD231PS Z17, Z20, Z5
	VFMADD231PS Z16, Z21, Z6
	VFMADD231PS Z17, Z21, Z7
	VFMADD231PS Z16, Z22, Z8
	VFMADD231PS Z17, Z22, Z9
	VFMADD231PS Z16, Z23, Z10
	VFMADD231PS Z17, Z23, Z11
	VFMADD231PS Z16, Z24, Z12
	VFMADD231PS Z17, Z24, Z13
	VFMADD231PS Z16, Z25, Z14
	VFMADD231PS Z17, Z25, Z15
	ADDQ $128, SI
	ADDQ $4, R8
	ADDQ $4, R9
	ADDQ $4, R10
	DECQ CX
	JNZ  loop

	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	VMOVUPS Z4, 256(DI)
	VMOVUPS Z5, 320(DI)
	VMOVUPS Z6, 384(DI)
	VMOVUPS Z7, 448(DI)
	VMOVUPS Z8, 512(DI)
	VMOVUPS Z9, 576(DI)
	VMOVUPS Z10, 640(DI)
	VMOVUPS Z11, 704(DI)
	VMOVUPS Z12, 768(DI)
	VMOVUPS Z13, 832(DI)
	VMOVUPS Z14, 896(DI)
	VMOVUPS Z15, 960(DI)
	VZEROUPPER
	RET

// ATTN_EXP2 sets x = 2^x for x <= 0 in the lanes of mask k and 0 in the others; n, y are clobbered. x is
// clamped below at Z24 = -125, so that no result is a denormal: on this hardware, producing denormals costs a
// microcode assist per instruction, and a probability below 2^-125 next to the row maximum's 1 changes no
// float32 sum. Masked-off lanes (scores of -Inf, invisible keys) never reach the arithmetic's result.
#define ATTN_EXP2(x, n, y, k) \
	VMAXPS x, Z24, x; \
	VRNDSCALEPS $0, x, n; \
	VSUBPS n, x, x; \
	VMULPS Z26, x, x; \
	VMOVAPS Z17, y; \
	VFMADD213PS Z18, x, y; \
	VFMADD213PS Z19, x, y; \
	VFMADD213PS Z20, x, y; \
	VFMADD213PS Z21, x, y; \
	VFMADD213PS Z22, x, y; \
	VFMADD213PS Z23, x, y; \
	VFMADD213PS Z23, x, y; \
	VSCALEFPS.Z n, y, k, x

DATA attnExp2Lo<>+0(SB)/4, $0xc2fa0000 // -125
GLOBL attnExp2Lo<>(SB), RODATA|NOPTR, $4
DATA attnLn2<>+0(SB)/4, $0x3f317218
GLOBL attnLn2<>(SB), RODATA|NOPTR, $4
DATA attnNegInf<>+0(SB)/4, $0xff800000
GLOBL attnNegInf<>(SB), RODATA|NOPTR, $4
DATA attnIota<>+0(SB)/4, $0
DATA attnIota<>+4(SB)/4, $1
DATA attnIota<>+8(SB)/4, $2
DATA attnIota<>+12(SB)/4, $3
DATA attnIota<>+16(SB)/4, $4
DATA attnIota<>+20(SB)/4, $5
DATA attnIota<>+24(SB)/4, $6
DATA attnIota<>+28(SB)/4, $7
DATA attnIota<>+32(SB)/4, $8
DATA attnIota<>+36(SB)/4, $9
DATA attnIota<>+40(SB)/4, $10
DATA attnIota<>+44(SB)/4, $11
DATA attnIota<>+48(SB)/4, $12
DATA attnIota<>+52(SB)/4, $13
DATA attnIota<>+56(SB)/4, $14
DATA attnIota<>+60(SB)/4, $15
GLOBL attnIota<>(SB), RODATA|NOPTR, $64

// func attnSoftmaxAVX512(s, m, l, alpha *float32, cnt *int32, rows int)
// Row by row: mask, max, exponentials (of the upper 16 scores only when more than 16 are visible) and their
// sum; then alpha and l for the rows (at most 8) at once. The old and new maxima and the sums wait in lane r of
// Z9, Z11 and Z10 (K5 = 1<<r), not in memory: a vector load of scalars just stored cannot take them from the
// store buffer and waits for the stores to drain, which cost a one-row call a fifth of its time (BenchmarkAttnSoftmax
// times the call).
TEXT ·attnSoftmaxAVX512(SB), NOSPLIT, $0-48
	MOVQ s+0(FP), DI
	MOVQ m+8(FP), R8
	MOVQ l+16(FP), R9
	MOVQ alpha+24(FP), R10
	MOVQ cnt+32(FP), BX
	MOVQ rows+40(FP), R11
	EXP_POLY_CONSTS
	VBROADCASTSS attnExp2Lo<>(SB), Z24
	VBROADCASTSS attnLn2<>(SB), Z26
	VBROADCASTSS attnNegInf<>(SB), Z16
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	XORQ R12, R12

row:
	MOVL (BX)(R12*4), CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K1
	SHRQ $16, AX
	KMOVW AX, K2
	VMOVAPS Z16, Z0
	VMOVUPS (DI), K1, Z0
	VMOVAPS Z16, Z2
	VMOVUPS 64(DI), K2, Z2
	VMAXPS Z2, Z0, Z4
	VEXTRACTF32X8 $1, Z4, Y5
	VMAXPS Y5, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VMAXPS X5, X4, X4
	VPERMILPS $0x4e, X4, X5
	VMAXPS X5, X4, X4
	VPERMILPS $0xb1, X4, X5
	VMAXPS X5, X4, X4
	VMOVSS (R8)(R12*4), X6
	VMAXSS X6, X4, X4
	VMOVSS X4, (R8)(R12*4)
	MOVQ   $1, AX
	SHLXQ  R12, AX, AX
	KMOVW  AX, K5
	VBROADCASTSS X6, K5, Z9
	VBROADCASTSS X4, K5, Z11
	VBROADCASTSS X4, Z4
	VSUBPS Z4, Z0, Z0
	VSUBPS Z4, Z2, Z2
	ATTN_EXP2(Z0, Z5, Z6, K1)
	CMPQ   CX, $16
	JA     upper
	VXORPS Z2, Z2, Z2
	JMP    stored

upper:
	ATTN_EXP2(Z2, Z7, Z8, K2)

stored:
	VMOVUPS Z0, (DI)
	VMOVUPS Z2, 64(DI)
	VADDPS Z2, Z0, Z0
	HSUM_Z0
	VBROADCASTSS X0, K5, Z10
	ADDQ $128, DI
	INCQ R12
	CMPQ R12, R11
	JB   row

	MOVQ R11, CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K3
	VSUBPS Z11, Z9, Z0
	ATTN_EXP2(Z0, Z5, Z6, K3)
	VMOVUPS Z0, K3, (R10)
	VMOVUPS.Z (R9), K3, Z1
	VFMADD213PS Z10, Z0, Z1
	VMOVUPS Z1, K3, (R9)
	VZEROUPPER
	RET

// func attnPVAVX512(o, p, v *float32, vStride, nk, hd int, alpha *float32)
// Per chunk of 32 output columns: Z0..Z15 hold the 8 rows (scaled by alpha), then each of the nk value rows is
// loaded once (masked past hd) and accumulated into the 8 rows with their broadcast probabilities.
TEXT ·attnPVAVX512(SB), NOSPLIT, $0-56
	MOVQ o+0(FP), DI
	MOVQ p+8(FP), SI
	MOVQ v+16(FP), DX
	MOVQ vStride+24(FP), R8
	SHLQ $2, R8
	MOVQ nk+32(FP), R9
	MOVQ hd+40(FP), R10
	MOVQ alpha+48(FP), R11
	LEAQ 31(R10), R12
	ANDQ $-32, R12
	SHLQ $2, R12
	XORQ BX, BX

chunk:
	CMPQ BX, R10
	JAE  done
	MOVQ R10, CX
	SUBQ BX, CX
	MOVQ $-1, AX
	CMPQ CX, $32
	JAE  full
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX

full:
	KMOVW AX, K1
	SHRQ $16, AX
	KMOVW AX, K2
	LEAQ (DI)(BX*4), AX
	VMOVUPS (AX), Z0
	VMOVUPS 64(AX), Z1
	VMULPS.BCST (R11), Z0, Z0
	VMULPS.BCST (R11), Z1, Z1
	ADDQ R12, AX
	VMOVUPS (AX), Z2
	VMOVUPS 64(AX), Z3
	VMULPS.BCST 4(R11), Z2, Z2
	VMULPS.BCST 4(R11), Z3, Z3
	ADDQ R12, AX
	VMOVUPS (AX), Z4
	VMOVUPS 64(AX), Z5
	VMULPS.BCST 8(R11), Z4, Z4
	VMULPS.BCST 8(R11), Z5, Z5
	ADDQ R12, AX
	VMOVUPS (AX), Z6
	VMOVUPS 64(AX), Z7
	VMULPS.BCST 12(R11), Z6, Z6
	VMULPS.BCST 12(R11), Z7, Z7
	ADDQ R12, AX
	VMOVUPS (AX), Z8
	VMOVUPS 64(AX), Z9
	VMULPS.BCST 16(R11), Z8, Z8
	VMULPS.BCST 16(R11), Z9, Z9
	ADDQ R12, AX
	VMOVUPS (AX), Z10
	VMOVUPS 64(AX), Z11
	VMULPS.BCST 20(R11), Z10, Z10
	VMULPS.BCST 20(R11), Z11, Z11
	ADDQ R12, AX
	VMOVUPS (AX), Z12
	VMOVUPS 64(AX), Z13
	VMULPS.BCST 24(R11), Z12, Z12
	VMULPS.BCST 24(R11), Z13, Z13
	ADDQ R12, AX
	VMOVUPS (AX), Z14
	VMOVUPS 64(AX), Z15
	VMULPS.BCST 28(R11), Z14, Z14
	VMULPS.BCST 28(R11), Z15, Z15

	MOVQ SI, AX
	LEAQ (DX)(BX*4), R13
	MOVQ R9, CX

jloop:
	VMOVUPS.Z (R13), K1, Z16
	VMOVUPS.Z 64(R13), K2, Z17
	VBROADCASTSS (AX), Z18
	VBROADCASTSS 128(AX), Z19
	VBROADCASTSS 256(AX), Z20
	VBROADCASTSS 384(AX), Z21
	VBROADCASTSS 512(AX), Z22
	VBROADCASTSS 640(AX), Z23
	VBROADCASTSS 768(AX), Z24
	VBROADCASTSS 896(AX), Z25
	VFMADD231PS Z16, Z18, Z0
	VFMADD231PS Z17, Z18, Z1
	VFMADD231PS Z16, Z19, Z2
	VFMADD231PS Z17, Z19, Z3
	VFMADD231PS Z16, Z20, Z4
	VFMADD231PS Z17, Z20, Z5
	VFMADD231PS Z16, Z21, Z6
	VFMADD231PS Z17, Z21, Z7
	VFMADD231PS Z16, Z22, Z8
	VFMADD231PS Z17, Z22, Z9
	VFMADD231PS Z16, Z23, Z10
	VFMADD231PS Z17, Z23, Z11
	VFMADD231PS Z16, Z24, Z12
	VFMADD231PS Z17, Z24, Z13
	VFMADD231PS Z16, Z25, Z14
	VFMADD231PS Z17, Z25, Z15
	ADDQ $4, AX
	ADDQ R8, R13
	DECQ CX
	JNZ  jloop

	LEAQ (DI)(BX*4), AX
	VMOVUPS Z0, (AX)
	VMOVUPS Z1, 64(AX)
	ADDQ R12, AX
	VMOVUPS Z2, (AX)
	VMOVUPS Z3, 64(AX)
	ADDQ R12, AX
	VMOVUPS Z4, (AX)
	VMOVUPS Z5, 64(AX)
	ADDQ R12, AX
	VMOVUPS Z6, (AX)
	VMOVUPS Z7, 64(AX)
	ADDQ R12, AX
	VMOVUPS Z8, (AX)
	VMOVUPS Z9, 64(AX)
	ADDQ R12, AX
	VMOVUPS Z10, (AX)
	VMOVUPS Z11, 64(AX)
	ADDQ R12, AX
	VMOVUPS Z12, (AX)
	VMOVUPS Z13, 64(AX)
	ADDQ R12, AX
	VMOVUPS Z14, (AX)
	VMOVUPS Z15, 64(AX)
	ADDQ $32, BX
	JMP  chunk

done:
	VZEROUPPER
	RET

// KMASK64 sets K1..K4 to the 64-bit mask in AX, 16 bits each.
#define KMASK64 \
	KMOVW AX, K1; \
	SHRQ $16, AX; \
	KMOVW AX, K2; \
	SHRQ $16, AX; \
	KMOVW AX, K3; \
	SHRQ $16, AX; \
	KMOVW AX, K4

// TRANSPOSE16 transposes the 16×16 block in Z0..Z15 (row i in Zi) in place, through Z16..Z31: unpack
// single then double words within 128-bit lanes, then shuffle the lanes twice.
#define TRANSPOSE16 \
	VUNPCKLPS Z1, Z0, Z16; VUNPCKHPS Z1, Z0, Z17; VUNPCKLPS Z3, Z2, Z18; VUNPCKHPS Z3, Z2, Z19; \
	VUNPCKLPS Z5, Z4, Z20; VUNPCKHPS Z5, Z4, Z21; VUNPCKLPS Z7, Z6, Z22; VUNPCKHPS Z7, Z6, Z23; \
	VUNPCKLPS Z9, Z8, Z24; VUNPCKHPS Z9, Z8, Z25; VUNPCKLPS Z11, Z10, Z26; VUNPCKHPS Z11, Z10, Z27; \
	VUNPCKLPS Z13, Z12, Z28; VUNPCKHPS Z13, Z12, Z29; VUNPCKLPS Z15, Z14, Z30; VUNPCKHPS Z15, Z14, Z31; \
	VUNPCKLPD Z18, Z16, Z0; VUNPCKHPD Z18, Z16, Z1; VUNPCKLPD Z19, Z17, Z2; VUNPCKHPD Z19, Z17, Z3; \
	VUNPCKLPD Z22, Z20, Z4; VUNPCKHPD Z22, Z20, Z5; VUNPCKLPD Z23, Z21, Z6; VUNPCKHPD Z23, Z21, Z7; \
	VUNPCKLPD Z26, Z24, Z8; VUNPCKHPD Z26, Z24, Z9; VUNPCKLPD Z27, Z25, Z10; VUNPCKHPD Z27, Z25, Z11; \
	VUNPCKLPD Z30, Z28, Z12; VUNPCKHPD Z30, Z28, Z13; VUNPCKLPD Z31, Z29, Z14; VUNPCKHPD Z31, Z29, Z15; \
	VSHUFF32X4 $0x88, Z4, Z0, Z16; VSHUFF32X4 $0x88, Z5, Z1, Z17; VSHUFF32X4 $0x88, Z6, Z2, Z18; \
	VSHUFF32X4 $0x88, Z7, Z3, Z19; VSHUFF32X4 $0xdd, Z4, Z0, Z20; VSHUFF32X4 $0xdd, Z5, Z1, Z21; \
	VSHUFF32X4 $0xdd, Z6, Z2, Z22; VSHUFF32X4 $0xdd, Z7, Z3, Z23; \
	VSHUFF32X4 $0x88, Z12, Z8, Z24; VSHUFF32X4 $0x88, Z13, Z9, Z25; VSHUFF32X4 $0x88, Z14, Z10, Z26; \
	VSHUFF32X4 $0x88, Z15, Z11, Z27; VSHUFF32X4 $0xdd, Z12, Z8, Z28; VSHUFF32X4 $0xdd, Z13, Z9, Z29; \
	VSHUFF32X4 $0xdd, Z14, Z10, Z30; VSHUFF32X4 $0xdd, Z15, Z11, Z31; \
	VSHUFF32X4 $0x88, Z24, Z16, Z0; VSHUFF32X4 $0x88, Z25, Z17, Z1; VSHUFF32X4 $0x88, Z26, Z18, Z2; \
	VSHUFF32X4 $0x88, Z27, Z19, Z3; VSHUFF32X4 $0x88, Z28, Z20, Z4; VSHUFF32X4 $0x88, Z29, Z21, Z5; \
	VSHUFF32X4 $0x88, Z30, Z22, Z6; VSHUFF32X4 $0x88, Z31, Z23, Z7; \
	VSHUFF32X4 $0xdd, Z24, Z16, Z8; VSHUFF32X4 $0xdd, Z25, Z17, Z9; VSHUFF32X4 $0xdd, Z26, Z18, Z10; \
	VSHUFF32X4 $0xdd, Z27, Z19, Z11; VSHUFF32X4 $0xdd, Z28, Z20, Z12; VSHUFF32X4 $0xdd, Z29, Z21, Z13; \
	VSHUFF32X4 $0xdd, Z30, Z22, Z14; VSHUFF32X4 $0xdd, Z31, Z23, Z15

// func attnKeysAVX512(s, q, k *float32, kStride, nk, rows, hd int)
// Per half tile of 16 keys: the 16 key row addresses go to the frame (rows past nk repeat the last key, so
// that nothing past it is read; their scores are finite and masked later). Then per chunk of 16 dims (masked
// past hd): load the 16 key chunks, transpose them so that Zj holds dim j of the 16 keys, and for every query
// row add Σ_j q[r][d+j]·Zj to the row's 16 scores, in four accumulators. 128(SP) holds the query row stride.
TEXT ·attnKeysAVX512(SB), NOSPLIT, $136-56
	MOVQ s+0(FP), DI
	MOVQ q+8(FP), SI
	MOVQ k+16(FP), DX
	MOVQ kStride+24(FP), R8
	SHLQ $2, R8
	MOVQ nk+32(FP), R9
	MOVQ rows+40(FP), R10
	MOVQ hd+48(FP), R11
	LEAQ 15(R11), AX
	ANDQ $-16, AX
	SHLQ $2, AX
	MOVQ AX, 128(SP)
	XORQ BX, BX

half:
	MOVQ R9, R12
	SUBQ BX, R12
	DECQ R12
	XORQ AX, AX

ptrs:
	MOVQ    AX, R13
	CMPQ    R13, R12
	CMOVQGT R12, R13
	ADDQ    BX, R13
	IMULQ   R8, R13
	ADDQ    DX, R13
	MOVQ    R13, (SP)(AX*8)
	INCQ    AX
	CMPQ    AX, $16
	JB      ptrs

	LEAQ   (DI)(BX*4), R13
	MOVQ   R10, AX
	VPXORD Z16, Z16, Z16

zero:
	VMOVUPS Z16, (R13)
	ADDQ    $128, R13
	DECQ    AX
	JNZ     zero
	XORQ    CX, CX

chunk:
	MOVQ R11, AX
	SUBQ CX, AX
	CMPQ AX, $16
	JB   part
	MOVQ $0xffff, AX
	JMP  mask

part:
	MOVQ CX, R12
	MOVQ AX, CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	MOVQ R12, CX

mask:
	KMOVW AX, K1
	MOVQ  0(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z0
	MOVQ  8(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z1
	MOVQ  16(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z2
	MOVQ  24(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z3
	MOVQ  32(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z4
	MOVQ  40(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z5
	MOVQ  48(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z6
	MOVQ  56(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z7
	MOVQ  64(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z8
	MOVQ  72(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z9
	MOVQ  80(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z10
	MOVQ  88(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z11
	MOVQ  96(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z12
	MOVQ  104(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z13
	MOVQ  112(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z14
	MOVQ  120(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z15
	TRANSPOSE16

	LEAQ (SI)(CX*4), R12
	LEAQ (DI)(BX*4), R13
	MOVQ R10, AX

row:
	VMOVUPS (R13), Z16
	VMULPS.BCST (R12), Z0, Z17
	VMULPS.BCST 4(R12), Z1, Z18
	VMULPS.BCST 8(R12), Z2, Z19
	VFMADD231PS.BCST 12(R12), Z3, Z16
	VFMADD231PS.BCST 16(R12), Z4, Z17
	VFMADD231PS.BCST 20(R12), Z5, Z18
	VFMADD231PS.BCST 24(R12), Z6, Z19
	VFMADD231PS.BCST 28(R12), Z7, Z16
	VFMADD231PS.BCST 32(R12), Z8, Z17
	VFMADD231PS.BCST 36(R12), Z9, Z18
	VFMADD231PS.BCST 40(R12), Z10, Z19
	VFMADD231PS.BCST 44(R12), Z11, Z16
	VFMADD231PS.BCST 48(R12), Z12, Z17
	VFMADD231PS.BCST 52(R12), Z13, Z18
	VFMADD231PS.BCST 56(R12), Z14, Z19
	VFMADD231PS.BCST 60(R12), Z15, Z16
	VADDPS  Z18, Z17, Z17
	VADDPS  Z19, Z16, Z16
	VADDPS  Z17, Z16, Z16
	VMOVUPS Z16, (R13)
	ADDQ    128(SP), R12
	ADDQ    $128, R13
	DECQ    AX
	JNZ     row

	ADDQ $16, CX
	CMPQ CX, R11
	JB   chunk
	ADDQ $16, BX
	CMPQ BX, R9
	JB   half
	VZEROUPPER
	RET

// func attnAxpysAVX512(o, p, v *float32, vStride, n, hd int, alpha float32)
// Per chunk of 64 output dims (masked past hd): Z0..Z3 = alpha·o, plus p[c] times each value row.
TEXT ·attnAxpysAVX512(SB), NOSPLIT, $0-52
	AX_SETUP(2)

chunk:
	AX_CHUNK
	LEAQ (DX)(BX*4), AX
	XORQ CX, CX

tok:
	CMPQ CX, R10
	JAE  store
	VBROADCASTSS (SI)(CX*4), Z8
	VMOVUPS.Z (AX), K1, Z4
	VMOVUPS.Z 64(AX), K2, Z5
	VMOVUPS.Z 128(AX), K3, Z6
	VMOVUPS.Z 192(AX), K4, Z7
	AX_FMA
	ADDQ R9, AX
	INCQ CX
	JMP  tok

store:
	AX_STORE

done:
	VZEROUPPER
	RET

// func attnAxpysF16AVX512(o, p *float32, v *uint16, vStride, n, hd int, alpha float32)
// attnAxpysAVX512 over binary16 value rows, widened as they are loaded.
TEXT ·attnAxpysF16AVX512(SB), NOSPLIT, $0-52
	AX_SETUP(1)

chunk:
	AX_CHUNK
	LEAQ (DX)(BX*2), AX
	XORQ CX, CX

tok:
	CMPQ CX, R10
	JAE  store
	VBROADCASTSS (SI)(CX*4), Z8
	VMOVDQU16.Z (AX), K1, Y4
	VMOVDQU16.Z 32(AX), K2, Y5
	VMOVDQU16.Z 64(AX), K3, Y6
	VMOVDQU16.Z 96(AX), K4, Y7
	VCVTPH2PS Y4, Z4
	VCVTPH2PS Y5, Z5
	VCVTPH2PS Y6, Z6
	VCVTPH2PS Y7, Z7
	AX_FMA
	ADDQ R9, AX
	INCQ CX
	JMP  tok

store:
	AX_STORE

done:
	VZEROUPPER
	RET

// func attnPrefetchAVX512(p *float32, n int)
// One PREFETCHT0 per 64-byte line of the n floats at p.
TEXT ·attnPrefetchAVX512(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	LEAQ (SI)(CX*4), CX

line:
	PREFETCHT0 (SI)
	ADDQ $64, SI
	CMPQ SI, CX
	JB   line
	RET

// func attnPackKTAVX512(dst, src *float32, stride, n, hd int)
// Per half tile of 16 keys: the 16 key row addresses go to the frame (rows past n repeat the last key); then
// per chunk of 16 dims (masked past hd), load the 16 key chunks, transpose them and store Zj as the half row
// of dim d+j, for the dims below hd.
TEXT ·attnPackKTAVX512(SB), NOSPLIT, $128-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), DX
	MOVQ stride+16(FP), R8
	SHLQ $2, R8
	MOVQ n+24(FP), R9
	MOVQ hd+32(FP), R11
	XORQ BX, BX

half:
	MOVQ R9, R12
	SUBQ BX, R12
	DECQ R12
	XORQ AX, AX

ptrs:
	MOVQ    AX, R13
	CMPQ    R13, R12
	CMOVQGT R12, R13
	ADDQ    BX, R13
	IMULQ   R8, R13
	ADDQ    DX, R13
	MOVQ    R13, (SP)(AX*8)
	INCQ    AX
	CMPQ    AX, $16
	JB      ptrs
	LEAQ    (DI)(BX*4), R10
	XORQ    CX, CX

chunk:
	MOVQ R11, AX
	SUBQ CX, AX
	MOVQ AX, R13
	CMPQ AX, $16
	JB   part
	MOVQ $0xffff, AX
	JMP  mask

part:
	MOVQ CX, R12
	MOVQ AX, CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	MOVQ R12, CX

mask:
	KMOVW AX, K1
	MOVQ  0(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z0
	MOVQ  8(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z1
	MOVQ  16(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z2
	MOVQ  24(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z3
	MOVQ  32(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z4
	MOVQ  40(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z5
	MOVQ  48(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z6
	MOVQ  56(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z7
	MOVQ  64(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z8
	MOVQ  72(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z9
	MOVQ  80(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z10
	MOVQ  88(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z11
	MOVQ  96(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z12
	MOVQ  104(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z13
	MOVQ  112(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z14
	MOVQ  120(SP), AX
	VMOVUPS.Z (AX)(CX*4), K1, Z15
	TRANSPOSE16

	// R13 = hd-d, the dims left: the stores stop when they run out, or after 16. R10 walks the dst rows.
	VMOVUPS Z0, (R10)
	ADDQ $128, R10
	DECQ R13
	JZ   next
	VMOVUPS Z1, (R10)
	ADDQ $128, R10
	DECQ R13
	JZ   next
	VMOVUPS Z2, (R10)
	ADDQ $128, R10
	DECQ R13
	JZ   next
	VMOVUPS Z3, (R10)
	ADDQ $128, R10
	DECQ R13
	JZ   next
	VMOVUPS Z4, (R10)
	ADDQ $128, R10
	DECQ R13
	JZ   next
	VMOVUPS Z5, (R10)
	ADDQ $128, R10
	DECQ R13
	JZ   next
	VMOVUPS Z6, (R10)
	ADDQ $128, R10
	DECQ R13
	JZ   next
	VMOVUPS Z7, (R10)
	ADDQ $128, R10
	DECQ R13
	JZ   next
	VMOVUPS Z8, (R10)
	ADDQ $128, R10
	DECQ R13
	JZ   next
	VMOVUPS Z9, (R10)
	ADDQ $128, R10
	DECQ R13
	JZ   next
	VMOVUPS Z10, (R10)
	ADDQ $128, R10
	DECQ R13
	JZ   next
	VMOVUPS Z11, (R10)
	ADDQ $128, R10
	DECQ R13
	JZ   next
	VMOVUPS Z12, (R10)
	ADDQ $128, R10
	DECQ R13
	JZ   next
	VMOVUPS Z13, (R10)
	ADDQ $128, R10
	DECQ R13
	JZ   next
	VMOVUPS Z14, (R10)
	ADDQ $128, R10
	DECQ R13
	JZ   next
	VMOVUPS Z15, (R10)
	ADDQ $128, R10

next:
	ADDQ $16, CX
	CMPQ CX, R11
	JB   chunk
	ADDQ $16, BX
	CMPQ BX, R9
	JB   half
	VZEROUPPER
	RET

// func attnKeysDotAVX512(s, q, k *float32, kStride, nk, rows, hd int)
// attnKeysAVX512 for few query rows: rather than transposing every chunk of keys, each row is dotted with the
// 16 keys of a half tile into 16 accumulators (key row addresses in the frame, as there), which a tree of
// in-lane unpacks and lane shuffles then sums into one vector of 16 scores: 30 shuffles a row and half tile,
// against 64 a chunk of 16 dims for the transpose. 128(SP) holds the query row stride.
TEXT ·attnKeysDotAVX512(SB), NOSPLIT, $136-56
	KD_SETUP(2)

half:
	KD_PTRS

	MOVQ SI, R12
	LEAQ (DI)(BX*4), R13
	MOVQ rows+40(FP), R10

row:
	ZERO16
	XORQ CX, CX

chunk:
	KMOVW K1, K3
	LEAQ  16(CX), AX
	CMPQ  AX, R11
	JB    body
	KMOVW K2, K3

body:
	VMOVUPS (R12)(CX*4), Z16
	MOVQ 0(SP), AX
	VFMADD231PS (AX)(CX*4), Z16, K3, Z0
	MOVQ 8(SP), AX
	VFMADD231PS (AX)(CX*4), Z16, K3, Z1
	MOVQ 16(SP), AX
	VFMADD231PS (AX)(CX*4), Z16, K3, Z2
	MOVQ 24(SP), AX
	VFMADD231PS (AX)(CX*4), Z16, K3, Z3
	MOVQ 32(SP), AX
	VFMADD231PS (AX)(CX*4), Z16, K3, Z4
	MOVQ 40(SP), AX
	VFMADD231PS (AX)(CX*4), Z16, K3, Z5
	MOVQ 48(SP), AX
	VFMADD231PS (AX)(CX*4), Z16, K3, Z6
	MOVQ 56(SP), AX
	VFMADD231PS (AX)(CX*4), Z16, K3, Z7
	MOVQ 64(SP), AX
	VFMADD231PS (AX)(CX*4), Z16, K3, Z8
	MOVQ 72(SP), AX
	VFMADD231PS (AX)(CX*4), Z16, K3, Z9
	MOVQ 80(SP), AX
	VFMADD231PS (AX)(CX*4), Z16, K3, Z10
	MOVQ 88(SP), AX
	VFMADD231PS (AX)(CX*4), Z16, K3, Z11
	MOVQ 96(SP), AX
	VFMADD231PS (AX)(CX*4), Z16, K3, Z12
	MOVQ 104(SP), AX
	VFMADD231PS (AX)(CX*4), Z16, K3, Z13
	MOVQ 112(SP), AX
	VFMADD231PS (AX)(CX*4), Z16, K3, Z14
	MOVQ 120(SP), AX
	VFMADD231PS (AX)(CX*4), Z16, K3, Z15
	ADDQ $16, CX
	CMPQ CX, R11
	JB   chunk

	KD_SUM
	ADDQ       128(SP), R12
	ADDQ       $128, R13
	DECQ       R10
	JNZ        row

	ADDQ $16, BX
	CMPQ BX, R9
	JB   half
	VZEROUPPER
	RET

// func attnKeysDotF16AVX512(s, q *float32, k *uint16, kStride, nk, rows, hd int)
// attnKeysDotAVX512 over binary16 key rows, widened (masked past hd) before each multiply-add.
TEXT ·attnKeysDotF16AVX512(SB), NOSPLIT, $136-56
	KD_SETUP(1)

half:
	KD_PTRS

	MOVQ SI, R12
	LEAQ (DI)(BX*4), R13
	MOVQ rows+40(FP), R10

row:
	ZERO16
	XORQ CX, CX

chunk:
	KMOVW K1, K3
	LEAQ  16(CX), AX
	CMPQ  AX, R11
	JB    body
	KMOVW K2, K3

body:
	VMOVUPS (R12)(CX*4), Z16
	KD_KEY16(0, Z0)
	KD_KEY16(8, Z1)
	KD_KEY16(16, Z2)
	KD_KEY16(24, Z3)
	KD_KEY16(32, Z4)
	KD_KEY16(40, Z5)
	KD_KEY16(48, Z6)
	KD_KEY16(56, Z7)
	KD_KEY16(64, Z8)
	KD_KEY16(72, Z9)
	KD_KEY16(80, Z10)
	KD_KEY16(88, Z11)
	KD_KEY16(96, Z12)
	KD_KEY16(104, Z13)
	KD_KEY16(112, Z14)
	KD_KEY16(120, Z15)
	ADDQ $16, CX
	CMPQ CX, R11
	JB   chunk

	KD_SUM
	ADDQ       128(SP), R12
	ADDQ       $128, R13
	DECQ       R10
	JNZ        row

	ADDQ $16, BX
	CMPQ BX, R9
	JB   half
	VZEROUPPER
	RET

// func attnDecodeAVX512(q, k, v *float32, stride, nt, heads, hd int, m, l, o *float32, pf *attnNext, group int)
// Decode attention of one query row a head over a tile of nt (1-16) tokens, the keys, the online softmax and
// the values fused, for heads query heads, group of them to a KV head, whose KV heads' columns sit side by
// side: query head h's key and value of token t at k, v + t·stride + (h/group)·hd·4 bytes, its query
// (pre-scaled by scale·log2 e) at q + h·hd·4, its running maximum, sum and output at m[h], l[h], o + h·hd·4
// (hd a multiple of 16). A KV head's keys and values are read from memory for its first query head and from
// the L1 cache for the others. Per head: the nt keys' dot products with
// the query chunk by chunk (Z27), one accumulator a key (Z0..Z15; keys past nt are not read and stay zero),
// summed by SUM16 into the scores' lanes; the tile's maximum, the new running maximum, the probabilities
// p = 2^(s - max) (ATTN_EXP2, zero past nt), alpha = 2^(old max - new max), l = alpha·l + Σ p; then, chunk by
// chunk, o = (alpha·o + Σ_{t even} p_t·v_t) + Σ_{t odd} p_t·v_t, each sum in token order (two chains of
// multiply-adds, for their latency). Constants: EXP_POLY_CONSTS (Z17..Z23), Z24, Z26 as
// ATTN_EXP2 wants, Z16 = -Inf; K1 masks the nt tokens' lanes, K2 all. The frame holds p and the two counters.
TEXT ·attnDecodeAVX512(SB), NOSPLIT, $80-96
	DEC_BODY(DEC_LD_F32, 4, DEC_NO_HOOK, DEC_NO_HOOK, DEC_NO_HOOK, DEC_NO_HOOK, DEC_NO_HOOK)

// func attnDecodeF16AVX512(q *float32, k, v *uint16, stride, nt, heads, hd int, m, l, o *float32, pf *attnNext,
//	group int)
// attnDecodeAVX512 over binary16 keys and values, widened exactly as they are loaded (KV head g's columns at
// g·hd·2 bytes): bit for bit its results over float32 copies of the same values.
TEXT ·attnDecodeF16AVX512(SB), NOSPLIT, $80-96
	DEC_BODY(DEC_LD_F16, 2, DEC_NO_HOOK, DEC_NO_HOOK, DEC_NO_HOOK, DEC_NO_HOOK, DEC_NO_HOOK)

// func attnDecodeI8AVX512(q *float32, k, v *int8, stride, nt, heads, hd int, m, l, o *float32, pf *attnNext,
//	group int, ks, vs *float32, sstride int)
// attnDecodeAVX512 over int8 codes, widened to float32 as they are loaded, with each row's scale applied to its
// score and to its probability instead of to each value (the key and value scales of the tile's first token and
// first KV head at ks and vs, the next token's sstride bytes on, the next KV head's 4): its results are those over
// float32 copies of code·scale within float32 roundings.
TEXT ·attnDecodeI8AVX512(SB), NOSPLIT, $104-120
	DEC_BODY(DEC_LD_I8, 1, DEC_I8_INIT, DEC_I8_KSCALE, DEC_I8_VSCALE, DEC_I8_KS_HEAD, DEC_I8_VS_HEAD)
