// gemm.cu: C = A·Wᵀ (A [m,k] activations, W [n,k] weights as [out,in], C [m,n] float32) on tensor cores, and the
// warp-per-row "dot" kernels that serve decode-sized m (GEMV) and shapes the tensor-core tiles cannot take.
//
// Formats (each kernel's suffix):
//   f16, bf16  A and W 16-bit floats; c = Σ a·w, float32 accumulation.
//   w8a8       A int8 [m,k] with a float32 scale per row (per token), W int8 [n,k] with a float32 scale per row
//              (per output channel): c = sa[i]·sw[j]·Σ qa·qw, int32 accumulation.
//   w8a16      A f16 or bf16 (suffix _f16, _bf16), W int8 [n,k] with a float32 scale per row: c = sw[j]·Σ a·q.
//   w4a16      A f16 or bf16, W 4-bit packed [n,k/2] (byte i holds element 2i in the low nibble, 2i+1 in the high
//              one), float32 scales and uint8 zero points [n, k/group]: w = (q - z)·s, c = Σ a·w.
//   f32        (dot kernels only) A and W float32; s8s32: A and W int8, C int32 = Σ qa·qw.
//
// Tensor-core kernels (gemm_*): mma.sync on sm_80+, a 128x128 block tile, 8 warps of 64x32, k-tiles of 64 bytes
// (32 16-bit or 64 8-bit elements) double-buffered in shared memory (cp.async for A and for 16-bit or int8 W;
// quantized W is fetched to registers one tile ahead, dequantized to the activations' type and stored to shared
// memory while the tile before it computes, so dequantization never touches global memory). Launch: grid (ceil(n/128),
// ceil(m/128), splits), 256 threads. Rows of A and W must start 16-byte aligned: k % 8 == 0 (f16, bf16),
// k % 16 == 0 (w8a8, w8a16), k % 16 == 0 and group % 16 == 0 (w4a16); other shapes use the dot kernels.
//
// Split-K: with grid.z = splits > 1, block z takes the k-tiles [z·ksplit, (z+1)·ksplit) and writes its partial
// product to c + z·m·n (a workspace of splits·m·n values), and splitk_reduce_* sums the splits into the result.
// Decode-sized batches (m <= 128 rows, one row of block tiles) give n/128 blocks, 32 for n = 4096, a quarter of
// an H100's or H200's 132 SMs; splitting k fills the machine (plan.go picks the split). The epilogues are linear (scales), so each split applies its own.
//
// Dot kernels (dot_*): each warp computes one output column j for DOT_TM consecutive tokens, so W is read once
// per DOT_TM tokens; lanes stride over k. The _vec variants load 16 bytes of W a lane a step and need
// k % (elements in 16 bytes of W) == 0 (and group % 32 == 0 for w4a16); the plain ones take any shape. dot_w8a8
// uses dp4a: it is the INT8 path for GPUs or shapes without the tensor-core kernel. Launch: grid
// (ceil(n/DOT_WARPS), ceil(m/DOT_TM)), 32*DOT_WARPS threads.
#include "common.cuh"

using namespace morph;

namespace morph_gemm {

constexpr int BM = 128, BN = 128, BKB = 64;  // block tile: rows of A, rows of W, bytes of k
constexpr int ROWB = BKB + 16;               // shared-memory row pitch in bytes: padding avoids bank conflicts
constexpr int THREADS = 256;

// Loaders stage one k-tile (BKB bytes of each row) of A or W into shared memory laid out [rows][ROWB].
// fetch(k0b) starts loading the tile at byte offset k0b of every row, store(dst) finishes it into dst.

// AsyncLoader copies rows of 16-byte chunks with cp.async, zero-filling chunks past the last row or k.
struct AsyncLoader {
  const char* base;  // first row of the block's tile
  long long pitch;   // bytes a row in global memory
  int rows;          // rows left in the matrix from the tile's first row
  char* dst;         // set by the caller before fetch
  __device__ void fetch(int k0b) const {
#pragma unroll
    for (int c = threadIdx.x; c < BM * BKB / 16; c += THREADS) {
      const int r = c / (BKB / 16), cb = (c % (BKB / 16)) * 16;
      const bool ok = r < rows && k0b + cb < pitch;
      cp_async16(dst + r * ROWB + cb, ok ? base + r * pitch + k0b + cb : base, ok);
    }
  }
  __device__ void store() const {}
};

// Int8Loader reads 16 int8 weights a thread and stores them as T, f16 or bf16 (exact: |q| <= 128); the per-row
// scale is applied in the epilogue.
template <typename T> struct Int8Loader {
  const int8_t* base;
  long long k;
  int rows;
  char* dst;
  int4 q;  // the fetched bytes
  __device__ void fetch(int k0b) {
    const int r = threadIdx.x / 2, e = k0b / 2 + (threadIdx.x % 2) * 16;  // k0b counts f16 bytes
    q = r < rows && e < k ? *reinterpret_cast<const int4*>(base + r * k + e) : make_int4(0, 0, 0, 0);
  }
  __device__ void store() const {
    const int r = threadIdx.x / 2, cb = (threadIdx.x % 2) * 32;
    const int8_t* b = reinterpret_cast<const int8_t*>(&q);
    uint32_t h[8];
#pragma unroll
    for (int i = 0; i < 8; i++) h[i] = pack2<T>(float(b[2 * i]), float(b[2 * i + 1]));
    uint4* d = reinterpret_cast<uint4*>(dst + r * ROWB + cb);
    d[0] = make_uint4(h[0], h[1], h[2], h[3]);
    d[1] = make_uint4(h[4], h[5], h[6], h[7]);
  }
};

// Int4Loader reads 16 packed 4-bit weights (8 bytes) a thread, with their group's scale and zero point, and
// stores (q - z)·s as T.
template <typename T> struct Int4Loader {
  const uint8_t* base;  // packed rows of k/2 bytes
  const float* scale;   // [rows][k/group]
  const uint8_t* zero;  // [rows][k/group]
  long long k;
  int group, rows;
  char* dst;
  uint2 q;
  float s, z;
  __device__ void fetch(int k0b) {
    const int r = threadIdx.x / 2, e = k0b / 2 + (threadIdx.x % 2) * 16;
    if (r < rows && e < k) {
      q = *reinterpret_cast<const uint2*>(base + r * (k / 2) + e / 2);
      const long long g = r * (k / group) + e / group;
      s = scale[g];
      z = float(zero[g]);
    } else {
      q = make_uint2(0, 0);
      s = 0.f;
      z = 0.f;
    }
  }
  __device__ void store() const {
    const int r = threadIdx.x / 2, cb = (threadIdx.x % 2) * 32;
    const uint8_t* b = reinterpret_cast<const uint8_t*>(&q);
    uint32_t h[8];
#pragma unroll
    for (int i = 0; i < 8; i++) h[i] = pack2<T>((float(b[i] & 15) - z) * s, (float(b[i] >> 4) - z) * s);
    uint4* d = reinterpret_cast<uint4*>(dst + r * ROWB + cb);
    d[0] = make_uint4(h[0], h[1], h[2], h[3]);
    d[1] = make_uint4(h[4], h[5], h[6], h[7]);
  }
};

// MMA16 and MMAS8 are the warp-level products of one 32-byte k-step: m16n8k16 for 16-bit inputs, m16n8k32 for int8.
template <typename T> struct MMA16 {
  using Acc = float;
  static __device__ void run(float d[4], const uint32_t a[4], const uint32_t b[2]) { mma_16816<T>(d, a, b); }
};
struct MMAS8 {
  using Acc = int;
  static __device__ void run(int d[4], const uint32_t a[4], const uint32_t b[2]) { mma_16832_s8(d, a, b); }
};

// mma_gemm is the block-tile main loop: it fills acc[4][4][4] (this warp's 4x4 grid of 16x8 tiles) with the
// block's share of A·Wᵀ over the k-tiles [kt0, kt1) (BKB bytes of each row a tile); an empty range leaves zeros.
template <class MMA, class LA, class LW>
__device__ void mma_gemm(LA& la, LW& lw, int kt0, int kt1, typename MMA::Acc acc[4][4][4]) {
  __shared__ __align__(16) char sa[2][BM * ROWB];
  __shared__ __align__(16) char sw[2][BN * ROWB];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm = warp / 4, wn = warp % 4;  // warp tile: rows wm*64.., cols wn*32..

#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][j][e] = 0;

  if (kt0 >= kt1) return;
  la.dst = sa[0];
  lw.dst = sw[0];
  la.fetch(kt0 * BKB);
  lw.fetch(kt0 * BKB);
  lw.store();
  cp_async_commit();
  for (int kt = kt0; kt < kt1; kt++) {
    const int cur = (kt - kt0) & 1;
    const bool next = kt + 1 < kt1;
    if (next) {
      la.dst = sa[cur ^ 1];
      lw.dst = sw[cur ^ 1];
      la.fetch((kt + 1) * BKB);
      lw.fetch((kt + 1) * BKB);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < 2; ks++) {
      uint32_t a[4][4], b[4][2];
#pragma unroll
      for (int mt = 0; mt < 4; mt++)
        ldmatrix_x4(a[mt], sa[cur] + (wm * 64 + mt * 16 + (lane & 15)) * ROWB + ks * 32 + (lane >> 4) * 16);
#pragma unroll
      for (int np = 0; np < 2; np++) {
        uint32_t r[4];
        ldmatrix_x4(r, sw[cur] + (wn * 32 + np * 16 + (lane & 7) + (lane >> 4) * 8) * ROWB + ks * 32 +
                           ((lane >> 3) & 1) * 16);
        b[2 * np][0] = r[0];
        b[2 * np][1] = r[1];
        b[2 * np + 1][0] = r[2];
        b[2 * np + 1][1] = r[3];
      }
#pragma unroll
      for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++) MMA::run(acc[mt][nt], a[mt], b[nt]);
    }
    if (next) lw.store();
    __syncthreads();
  }
}

// ktiles returns the k-tile range [kt0, kt1) of split blockIdx.z for rows of kbytes bytes.
__device__ __forceinline__ void ktiles(long long kbytes, int ksplit, int& kt0, int& kt1) {
  const int nk = int((kbytes + BKB - 1) / BKB);
  kt0 = int(blockIdx.z) * ksplit;
  kt1 = min(nk, kt0 + ksplit);
}

// store_tile writes the warp's accumulators to C (split z's slice c + z·m·n), each value passed through
// f(row, col, acc).
template <typename Acc, typename C, class F>
__device__ void store_tile(C* c, int m, int n, const Acc acc[4][4][4], F f) {
  c += size_t(blockIdx.z) * m * n;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r0 = blockIdx.y * BM + (warp / 4) * 64 + lane / 4;
  const int c0 = blockIdx.x * BN + (warp % 4) * 32 + (lane % 4) * 2;
#pragma unroll
  for (int mt = 0; mt < 4; mt++)
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int r = r0 + mt * 16 + (e / 2) * 8, col = c0 + nt * 8 + (e % 2);
        if (r < m && col < n) c[size_t(r) * n + col] = f(r, col, acc[mt][nt][e]);
      }
}

struct Identity {
  __device__ float operator()(int, int, float v) const { return v; }
};
struct RowScale {  // c = sw[col]·acc
  const float* sw;
  __device__ float operator()(int, int col, float v) const { return sw[col] * v; }
};
struct Exact {  // c = acc, int32
  __device__ int operator()(int, int, int v) const { return v; }
};
struct TwoScales {  // c = sa[row]·sw[col]·acc
  const float* sa;
  const float* sw;
  __device__ float operator()(int row, int col, int v) const { return sa[row] * sw[col] * float(v); }
};

template <typename T>
__device__ void gemm16(int m, int n, int k, int ksplit, const T* a, const T* w, float* c) {
  const long long kb = 2LL * k;
  AsyncLoader la{reinterpret_cast<const char*>(a) + blockIdx.y * BM * kb, kb, m - int(blockIdx.y) * BM, nullptr};
  AsyncLoader lw{reinterpret_cast<const char*>(w) + blockIdx.x * BN * kb, kb, n - int(blockIdx.x) * BN, nullptr};
  float acc[4][4][4];
  int kt0, kt1;
  ktiles(kb, ksplit, kt0, kt1);
  mma_gemm<MMA16<T>>(la, lw, kt0, kt1, acc);
  store_tile(c, m, n, acc, Identity{});
}

template <typename T>
__device__ void gemm_w8a16(int m, int n, int k, int ksplit, const T* a, const int8_t* w, const float* sw, float* c) {
  const long long kb = 2LL * k;
  AsyncLoader la{reinterpret_cast<const char*>(a) + blockIdx.y * BM * kb, kb, m - int(blockIdx.y) * BM, nullptr};
  Int8Loader<T> lw{w + blockIdx.x * BN * (long long)k, k, n - int(blockIdx.x) * BN, nullptr, {}};
  float acc[4][4][4];
  int kt0, kt1;
  ktiles(kb, ksplit, kt0, kt1);
  mma_gemm<MMA16<T>>(la, lw, kt0, kt1, acc);
  store_tile(c, m, n, acc, RowScale{sw});
}

template <typename T>
__device__ void gemm_w4a16(int m, int n, int k, int group, int ksplit, const T* a, const uint8_t* w, const float* s,
                           const uint8_t* z, float* c) {
  const long long kb = 2LL * k, row0 = blockIdx.x * (long long)BN;
  AsyncLoader la{reinterpret_cast<const char*>(a) + blockIdx.y * BM * kb, kb, m - int(blockIdx.y) * BM, nullptr};
  Int4Loader<T> lw{w + row0 * (k / 2), s + row0 * (k / group), z + row0 * (k / group), k, group,
                   n - int(row0), nullptr, {}, 0.f, 0.f};
  float acc[4][4][4];
  int kt0, kt1;
  ktiles(kb, ksplit, kt0, kt1);
  mma_gemm<MMA16<T>>(la, lw, kt0, kt1, acc);
  store_tile(c, m, n, acc, Identity{});
}

// ---- dot kernels ----

constexpr int DOT_TM = 4, DOT_WARPS = 4;

// load8 reads 8 consecutive elements (16 or 32 bytes, aligned) as floats.
__device__ __forceinline__ void load8(float f[8], const float* p) {
  const float4 u = reinterpret_cast<const float4*>(p)[0], v = reinterpret_cast<const float4*>(p)[1];
  f[0] = u.x, f[1] = u.y, f[2] = u.z, f[3] = u.w, f[4] = v.x, f[5] = v.y, f[6] = v.z, f[7] = v.w;
}
__device__ __forceinline__ void load8(float f[8], const __half* p) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const float2 v = __half22float2(h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}
__device__ __forceinline__ void load8(float f[8], const __nv_bfloat16* p) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const float2 v = __bfloat1622float2(h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

// dot_rows is the skeleton of every dot kernel: lane partial sums for DOT_TM tokens from body(j, t0, nt, acc),
// reduced over the warp and written through epi(row, col, sum).
template <typename Acc, typename C, class Body, class Epi>
__device__ void dot_rows(int m, int n, C* c, Body body, Epi epi) {
  const int lane = threadIdx.x & 31;
  const int j = blockIdx.x * DOT_WARPS + (threadIdx.x >> 5);
  const int t0 = blockIdx.y * DOT_TM;
  if (j >= n) return;
  const int nt = min(DOT_TM, m - t0);
  Acc acc[DOT_TM];
#pragma unroll
  for (int t = 0; t < DOT_TM; t++) acc[t] = 0;
  body(j, t0, nt, acc);
#pragma unroll
  for (int t = 0; t < DOT_TM; t++) {
    const Acc s = warp_sum(acc[t]);
    if (lane == 0 && t < nt) c[size_t(t0 + t) * n + j] = epi(t0 + t, j, s);
  }
}

}  // namespace morph_gemm

using namespace morph_gemm;

// ---- tensor-core kernels ----

// Every tensor-core kernel takes ksplit, the k-tiles a split (see Split-K above); with one split it is at least
// the k-tiles of a row.
#define MORPH_GEMM16(SUFFIX, T)                                                                                  \
  extern "C" __global__ void __launch_bounds__(THREADS)                                                          \
      gemm_##SUFFIX(int m, int n, int k, int ksplit, const T* a, const T* w, float* c) {                         \
    gemm16(m, n, k, ksplit, a, w, c);                                                                            \
  }                                                                                                              \
  extern "C" __global__ void __launch_bounds__(THREADS) gemm_w8a16_##SUFFIX(                                     \
      int m, int n, int k, int ksplit, const T* a, const int8_t* w, const float* sw, float* c) {                 \
    gemm_w8a16(m, n, k, ksplit, a, w, sw, c);                                                                    \
  }                                                                                                              \
  extern "C" __global__ void __launch_bounds__(THREADS)                                                          \
      gemm_w4a16_##SUFFIX(int m, int n, int k, int group, int ksplit, const T* a, const uint8_t* w,              \
                          const float* s, const uint8_t* z, float* c) {                                          \
    gemm_w4a16(m, n, k, group, ksplit, a, w, s, z, c);                                                           \
  }

MORPH_GEMM16(f16, __half)
MORPH_GEMM16(bf16, __nv_bfloat16)

extern "C" __global__ void __launch_bounds__(THREADS) gemm_w8a8(int m, int n, int k, int ksplit, const int8_t* a,
                                                                 const float* sa, const int8_t* w,
                                                                 const float* sw, float* c) {
  AsyncLoader la{reinterpret_cast<const char*>(a) + blockIdx.y * BM * (long long)k, k, m - int(blockIdx.y) * BM,
                 nullptr};
  AsyncLoader lw{reinterpret_cast<const char*>(w) + blockIdx.x * BN * (long long)k, k, n - int(blockIdx.x) * BN,
                 nullptr};
  int acc[4][4][4];
  int kt0, kt1;
  ktiles(k, ksplit, kt0, kt1);
  mma_gemm<MMAS8>(la, lw, kt0, kt1, acc);
  store_tile(c, m, n, acc, TwoScales{sa, sw});
}

// gemm_s8s32 is gemm_w8a8 without scales: c = Σ qa·qw as int32 (split partials are int32 too, summed exactly).
extern "C" __global__ void __launch_bounds__(THREADS)
    gemm_s8s32(int m, int n, int k, int ksplit, const int8_t* a, const int8_t* w, int* c) {
  AsyncLoader la{reinterpret_cast<const char*>(a) + blockIdx.y * BM * (long long)k, k, m - int(blockIdx.y) * BM,
                 nullptr};
  AsyncLoader lw{reinterpret_cast<const char*>(w) + blockIdx.x * BN * (long long)k, k, n - int(blockIdx.x) * BN,
                 nullptr};
  int acc[4][4][4];
  int kt0, kt1;
  ktiles(k, ksplit, kt0, kt1);
  mma_gemm<MMAS8>(la, lw, kt0, kt1, acc);
  store_tile(c, m, n, acc, Exact{});
}

// splitk_reduce_{f32,s32}: c[i] = Σ_z ws[z·mn + i] over the splits, in split order (deterministic). Launch: a
// 1-D grid over the mn elements.
template <typename C>
__device__ void splitk_reduce(C* c, const C* ws, long long mn, int splits) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < mn; i += (long long)gridDim.x * blockDim.x) {
    C s = ws[i];
    for (int z = 1; z < splits; z++) s += ws[z * mn + i];
    c[i] = s;
  }
}

extern "C" __global__ void splitk_reduce_f32(float* c, const float* ws, long long mn, int splits) {
  splitk_reduce(c, ws, mn, splits);
}

extern "C" __global__ void splitk_reduce_s32(int* c, const int* ws, long long mn, int splits) {
  splitk_reduce(c, ws, mn, splits);
}

// ---- dot kernels ----

#define MORPH_DOT_SAME(SUFFIX, T)                                                                                 \
  extern "C" __global__ void __launch_bounds__(32 * DOT_WARPS)                                                    \
      dot_##SUFFIX(int m, int n, int k, const T* a, const T* w, float* c) {                                      \
    dot_rows<float>(                                                                                              \
        m, n, c,                                                                                                  \
        [&](int j, int t0, int nt, float* acc) {                                                                  \
          const T* wr = w + size_t(j) * k;                                                                        \
          for (int p = threadIdx.x & 31; p < k; p += 32) {                                                        \
            const float wv = to_f32(wr[p]);                                                                       \
            for (int t = 0; t < nt; t++) acc[t] += wv * to_f32(a[size_t(t0 + t) * k + p]);                        \
          }                                                                                                       \
        },                                                                                                        \
        Identity{});                                                                                              \
  }

MORPH_DOT_SAME(f32, float)
MORPH_DOT_SAME(f16, __half)
MORPH_DOT_SAME(bf16, __nv_bfloat16)

// dot_f16_vec and dot_bf16_vec need k % 8 == 0.
#define MORPH_DOT_SAME_VEC(SUFFIX, T)                                                                             \
  extern "C" __global__ void __launch_bounds__(32 * DOT_WARPS)                                                    \
      dot_##SUFFIX##_vec(int m, int n, int k, const T* a, const T* w, float* c) {                                \
    dot_rows<float>(                                                                                              \
        m, n, c,                                                                                                  \
        [&](int j, int t0, int nt, float* acc) {                                                                  \
          const T* wr = w + size_t(j) * k;                                                                        \
          for (int p = (threadIdx.x & 31) * 8; p < k; p += 256) {                                                 \
            float wv[8], av[8];                                                                                   \
            load8(wv, wr + p);                                                                                    \
            for (int t = 0; t < nt; t++) {                                                                        \
              load8(av, a + size_t(t0 + t) * k + p);                                                              \
              _Pragma("unroll") for (int i = 0; i < 8; i++) acc[t] += wv[i] * av[i];                             \
            }                                                                                                     \
          }                                                                                                       \
        },                                                                                                        \
        Identity{});                                                                                              \
  }

MORPH_DOT_SAME_VEC(f16, __half)
MORPH_DOT_SAME_VEC(bf16, __nv_bfloat16)

// The w8a16 and w4a16 dot kernels come with f16 and bf16 activations (suffix _f16, _bf16) and float32 ones
// (_f32): the latter keep the activations at full precision when a caller has them in float32.
#define MORPH_DOT_WQ(ACT, A)                                                                                      \
  extern "C" __global__ void __launch_bounds__(32 * DOT_WARPS)                                                    \
      dot_w8a16_##ACT(int m, int n, int k, const A* a, const int8_t* w, const float* sw, float* c) {             \
    dot_rows<float>(                                                                                              \
        m, n, c,                                                                                                  \
        [&](int j, int t0, int nt, float* acc) {                                                                  \
          const int8_t* wr = w + size_t(j) * k;                                                                   \
          for (int p = threadIdx.x & 31; p < k; p += 32) {                                                        \
            const float wv = float(wr[p]);                                                                        \
            for (int t = 0; t < nt; t++) acc[t] += wv * to_f32(a[size_t(t0 + t) * k + p]);                       \
          }                                                                                                       \
        },                                                                                                        \
        RowScale{sw});                                                                                            \
  }                                                                                                               \
  /* needs k % 16 == 0 */                                                                                         \
  extern "C" __global__ void __launch_bounds__(32 * DOT_WARPS)                                                    \
      dot_w8a16_##ACT##_vec(int m, int n, int k, const A* a, const int8_t* w, const float* sw, float* c) {       \
    dot_rows<float>(                                                                                              \
        m, n, c,                                                                                                  \
        [&](int j, int t0, int nt, float* acc) {                                                                  \
          const int8_t* wr = w + size_t(j) * k;                                                                   \
          for (int p = (threadIdx.x & 31) * 16; p < k; p += 512) {                                                \
            const int4 q = *reinterpret_cast<const int4*>(wr + p);                                                \
            const int8_t* qb = reinterpret_cast<const int8_t*>(&q);                                               \
            for (int t = 0; t < nt; t++) {                                                                        \
              float av[16];                                                                                       \
              load8(av, a + size_t(t0 + t) * k + p);                                                              \
              load8(av + 8, a + size_t(t0 + t) * k + p + 8);                                                      \
              _Pragma("unroll") for (int i = 0; i < 16; i++) acc[t] += float(qb[i]) * av[i];                     \
            }                                                                                                     \
          }                                                                                                       \
        },                                                                                                        \
        RowScale{sw});                                                                                            \
  }                                                                                                               \
  extern "C" __global__ void __launch_bounds__(32 * DOT_WARPS)                                                    \
      dot_w4a16_##ACT(int m, int n, int k, int group, const A* a, const uint8_t* w, const float* s,              \
                      const uint8_t* z, float* c) {                                                               \
    dot_rows<float>(                                                                                              \
        m, n, c,                                                                                                  \
        [&](int j, int t0, int nt, float* acc) {                                                                  \
          const uint8_t* wr = w + size_t(j) * (k / 2);                                                            \
          const float* sr = s + size_t(j) * (k / group);                                                          \
          const uint8_t* zr = z + size_t(j) * (k / group);                                                        \
          for (int p = threadIdx.x & 31; p < k; p += 32) {                                                        \
            const int q = (p & 1) ? wr[p / 2] >> 4 : wr[p / 2] & 15;                                              \
            const float wv = (float(q) - float(zr[p / group])) * sr[p / group];                                   \
            for (int t = 0; t < nt; t++) acc[t] += wv * to_f32(a[size_t(t0 + t) * k + p]);                       \
          }                                                                                                       \
        },                                                                                                        \
        Identity{});                                                                                              \
  }                                                                                                               \
  /* needs k % 32 == 0 and group % 32 == 0: a lane's 32 elements (16 bytes) share one group */                    \
  extern "C" __global__ void __launch_bounds__(32 * DOT_WARPS)                                                    \
      dot_w4a16_##ACT##_vec(int m, int n, int k, int group, const A* a, const uint8_t* w, const float* s,        \
                            const uint8_t* z, float* c) {                                                         \
    dot_rows<float>(                                                                                              \
        m, n, c,                                                                                                  \
        [&](int j, int t0, int nt, float* acc) {                                                                  \
          const uint8_t* wr = w + size_t(j) * (k / 2);                                                            \
          const float* sr = s + size_t(j) * (k / group);                                                          \
          const uint8_t* zr = z + size_t(j) * (k / group);                                                        \
          for (int p = (threadIdx.x & 31) * 32; p < k; p += 1024) {                                               \
            const uint4 q = *reinterpret_cast<const uint4*>(wr + p / 2);                                          \
            const uint8_t* qb = reinterpret_cast<const uint8_t*>(&q);                                             \
            const float sc = sr[p / group], zp = float(zr[p / group]);                                            \
            _Pragma("unroll") for (int h = 0; h < 4; h++) {                                                       \
              float wv[8];                                                                                        \
              _Pragma("unroll") for (int i = 0; i < 4; i++) {                                                     \
                wv[2 * i] = (float(qb[4 * h + i] & 15) - zp) * sc;                                                \
                wv[2 * i + 1] = (float(qb[4 * h + i] >> 4) - zp) * sc;                                            \
              }                                                                                                   \
              for (int t = 0; t < nt; t++) {                                                                      \
                float av[8];                                                                                      \
                load8(av, a + size_t(t0 + t) * k + p + 8 * h);                                                    \
                _Pragma("unroll") for (int i = 0; i < 8; i++) acc[t] += wv[i] * av[i];                           \
              }                                                                                                   \
            }                                                                                                     \
          }                                                                                                       \
        },                                                                                                        \
        Identity{});                                                                                              \
  }

MORPH_DOT_WQ(f16, __half)
MORPH_DOT_WQ(bf16, __nv_bfloat16)
MORPH_DOT_WQ(f32, float)

extern "C" __global__ void __launch_bounds__(32 * DOT_WARPS)
    dot_w8a8(int m, int n, int k, const int8_t* a, const float* sa, const int8_t* w, const float* sw, float* c) {
  dot_rows<int>(
      m, n, c,
      [&](int j, int t0, int nt, int* acc) {
        const int8_t* wr = w + size_t(j) * k;
        for (int p = threadIdx.x & 31; p < k; p += 32) {
          const int wv = wr[p];
          for (int t = 0; t < nt; t++) acc[t] += wv * int(a[size_t(t0 + t) * k + p]);
        }
      },
      TwoScales{sa, sw});
}

// dot_w8a8_vec needs k % 16 == 0; it multiplies four int8 pairs an instruction with dp4a.
extern "C" __global__ void __launch_bounds__(32 * DOT_WARPS)
    dot_w8a8_vec(int m, int n, int k, const int8_t* a, const float* sa, const int8_t* w, const float* sw, float* c) {
  dot_rows<int>(
      m, n, c,
      [&](int j, int t0, int nt, int* acc) {
        const int8_t* wr = w + size_t(j) * k;
        for (int p = (threadIdx.x & 31) * 16; p < k; p += 512) {
          const int4 q = *reinterpret_cast<const int4*>(wr + p);
          for (int t = 0; t < nt; t++) {
            const int4 x = *reinterpret_cast<const int4*>(a + size_t(t0 + t) * k + p);
            acc[t] = __dp4a(q.x, x.x, acc[t]);
            acc[t] = __dp4a(q.y, x.y, acc[t]);
            acc[t] = __dp4a(q.z, x.z, acc[t]);
            acc[t] = __dp4a(q.w, x.w, acc[t]);
          }
        }
      },
      TwoScales{sa, sw});
}

// dot_s8s32 and dot_s8s32_vec (k % 16 == 0) are dot_w8a8 without scales: c = Σ qa·qw as int32.
extern "C" __global__ void __launch_bounds__(32 * DOT_WARPS)
    dot_s8s32(int m, int n, int k, const int8_t* a, const int8_t* w, int* c) {
  dot_rows<int>(
      m, n, c,
      [&](int j, int t0, int nt, int* acc) {
        const int8_t* wr = w + size_t(j) * k;
        for (int p = threadIdx.x & 31; p < k; p += 32) {
          const int wv = wr[p];
          for (int t = 0; t < nt; t++) acc[t] += wv * int(a[size_t(t0 + t) * k + p]);
        }
      },
      Exact{});
}

extern "C" __global__ void __launch_bounds__(32 * DOT_WARPS)
    dot_s8s32_vec(int m, int n, int k, const int8_t* a, const int8_t* w, int* c) {
  dot_rows<int>(
      m, n, c,
      [&](int j, int t0, int nt, int* acc) {
        const int8_t* wr = w + size_t(j) * k;
        for (int p = (threadIdx.x & 31) * 16; p < k; p += 512) {
          const int4 q = *reinterpret_cast<const int4*>(wr + p);
          for (int t = 0; t < nt; t++) {
            const int4 x = *reinterpret_cast<const int4*>(a + size_t(t0 + t) * k + p);
            acc[t] = __dp4a(q.x, x.x, acc[t]);
            acc[t] = __dp4a(q.y, x.y, acc[t]);
            acc[t] = __dp4a(q.z, x.z, acc[t]);
            acc[t] = __dp4a(q.w, x.w, acc[t]);
          }
        }
      },
      Exact{});
}
