// Vectorized e^x for float32 in AVX-512 registers (elem_amd64.s), and the polynomial and reductions that
// attn_amd64.s shares for its 2^x.
//
// Range reduction x = n·ln2 + r with |r| <= ln2/2, then e^r by Cephes expf's polynomial (about 1 ulp),
// then VSCALEFPS multiplies by 2^n, which handles the underflow to denormals and zero and the overflow to +Inf
// without integer tricks. Inputs are clamped first so that r stays small; NaN stays NaN.
//
// EXP_POLY_CONSTS loads the polynomial into Z17..Z23 (Z23 = 1). For EXPF the caller loads the clamp bounds into
// Z24, Z25, log2(e) into Z26, and ln2 split into a high part exact in a few bits and a low part into Z27, Z28.

DATA elemExpP0<>+0(SB)/4, $0x39506967
GLOBL elemExpP0<>(SB), RODATA|NOPTR, $4
DATA elemExpP1<>+0(SB)/4, $0x3ab743ce
GLOBL elemExpP1<>(SB), RODATA|NOPTR, $4
DATA elemExpP2<>+0(SB)/4, $0x3c088908
GLOBL elemExpP2<>(SB), RODATA|NOPTR, $4
DATA elemExpP3<>+0(SB)/4, $0x3d2aa9c1
GLOBL elemExpP3<>(SB), RODATA|NOPTR, $4
DATA elemExpP4<>+0(SB)/4, $0x3e2aaaaa
GLOBL elemExpP4<>(SB), RODATA|NOPTR, $4
DATA elemExpP5<>+0(SB)/4, $0x3f000000
GLOBL elemExpP5<>(SB), RODATA|NOPTR, $4
DATA elemExpOne<>+0(SB)/4, $0x3f800000
GLOBL elemExpOne<>(SB), RODATA|NOPTR, $4

#define EXP_POLY_CONSTS \
	VBROADCASTSS elemExpP0<>(SB), Z17; \
	VBROADCASTSS elemExpP1<>(SB), Z18; \
	VBROADCASTSS elemExpP2<>(SB), Z19; \
	VBROADCASTSS elemExpP3<>(SB), Z20; \
	VBROADCASTSS elemExpP4<>(SB), Z21; \
	VBROADCASTSS elemExpP5<>(SB), Z22; \
	VBROADCASTSS elemExpOne<>(SB), Z23

// EXP_POLY sets x = e^x·2^n for |x| <= ln2/2 (n holds integers); y is clobbered.
#define EXP_POLY(x, n, y) \
	VMOVAPS Z17, y; \
	VFMADD213PS Z18, x, y; \
	VFMADD213PS Z19, x, y; \
	VFMADD213PS Z20, x, y; \
	VFMADD213PS Z21, x, y; \
	VFMADD213PS Z22, x, y; \
	VFMADD213PS Z23, x, y; \
	VFMADD213PS Z23, x, y; \
	VSCALEFPS n, y, x

// EXPF sets x = e^x; n and y are clobbered.
#define EXPF(x, n, y) \
	VMAXPS x, Z24, x; \
	VMINPS x, Z25, x; \
	VMULPS Z26, x, n; \
	VRNDSCALEPS $0, n, n; \
	VFNMADD231PS Z27, n, x; \
	VFNMADD231PS Z28, n, x; \
	EXP_POLY(x, n, y)

// HSUM_Z0 leaves the sum of Z0's 16 lanes in X0's low lane; HMAX_Z0 the largest. Z1 is clobbered.
#define HSUM_Z0 \
	VEXTRACTF32X8 $1, Z0, Y1; \
	VADDPS Y1, Y0, Y0; \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS X1, X0, X0; \
	VPERMILPS $0x4e, X0, X1; \
	VADDPS X1, X0, X0; \
	VPERMILPS $0xb1, X0, X1; \
	VADDPS X1, X0, X0

#define HMAX_Z0 \
	VEXTRACTF32X8 $1, Z0, Y1; \
	VMAXPS Y1, Y0, Y0; \
	VEXTRACTF128 $1, Y0, X1; \
	VMAXPS X1, X0, X0; \
	VPERMILPS $0x4e, X0, X1; \
	VMAXPS X1, X0, X0; \
	VPERMILPS $0xb1, X0, X1; \
	VMAXPS X1, X0, X0

// TAILMASK sets K1 to the low CX bits (CX < 16); AX is clobbered.
#define TAILMASK \
	MOVL $1, AX; \
	SHLL CX, AX; \
	DECL AX; \
	KMOVW AX, K1
