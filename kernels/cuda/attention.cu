// attention.cu: causal prefill attention (FlashAttention-2 on tensor cores), paged attention for decode and
// chunked prefill with split-KV (flash-decoding: partial results per KV split, then a merge), and KV append into
// the paged cache. Semantics and layouts are those of CausalAttention, PagedAttention and KVAppend in kernels/ref:
// q, out [tokens, nHeads*headDim]; k, v [tokens, nKVHeads*headDim]; caches [numBlocks, blockSize, nKVHeads,
// headDim]; query head h reads KV head h/(nHeads/nKVHeads).
#include "common.cuh"

using namespace morph;

namespace morph_attn {

// ---- FlashAttention-2 prefill ----
//
// A block computes FA_M = 64 query rows of one head (16 rows a warp, 4 warps); it walks the keys the rows can see
// in tiles of FA_N = 64, keeping S = Q·Kᵀ, the running max and sum, and O in registers (online softmax). K and V
// tiles stream through shared memory with cp.async; V's copy overlaps S and the softmax, the next K's overlaps
// P·V. Inputs are f16 or bf16, accumulation f32; P is rounded to the input type for the P·V product, as in
// FlashAttention-2.
constexpr int FA_M = 64, FA_N = 64, FA_THREADS = 128;

// fa_load_tile copies rows [r0, r0+64) of a [*, pitch] matrix of HD-wide rows into dst [64][HD+8], zero-filling
// rows at or past limit.
template <typename T, int HD>
__device__ void fa_load_tile(T* dst, const T* src, long long pitch, int r0, int limit) {
  constexpr int CH = HD / 8;  // 16-byte chunks a row
  for (int c = threadIdx.x; c < FA_M * CH; c += FA_THREADS) {
    const int r = c / CH, d = (c % CH) * 8;
    const bool ok = r0 + r < limit;
    cp_async16(dst + r * (HD + 8) + d, ok ? src + (r0 + r) * pitch + d : src, ok);
  }
}

template <typename T, int HD>
__device__ void flash_prefill(T* out, const T* q, const T* k, const T* v, int nq, int kvLen, int nHeads, int nKVHeads,
                              float scale) {
  __shared__ __align__(16) T sk[FA_N * (HD + 8)];
  __shared__ __align__(16) T sv[FA_N * (HD + 8)];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * FA_M;  // longest (most keys) blocks first
  const int h = blockIdx.y, g = h / (nHeads / nKVHeads);
  const int off = kvLen - nq;  // query t sits at position off + t
  const long long qpitch = (long long)nHeads * HD, kvpitch = (long long)nKVHeads * HD;
  const T* kh = k + g * HD;
  const T* vh = v + g * HD;

  // Q tile -> registers, through the K buffer.
  fa_load_tile<T, HD>(sk, q + h * HD, qpitch, q0, nq);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  uint32_t qf[HD / 16][4];
#pragma unroll
  for (int kd = 0; kd < HD / 16; kd++)
    ldmatrix_x4(qf[kd], sk + (warp * 16 + (lane & 15)) * (HD + 8) + kd * 16 + (lane >> 4) * 8);
  __syncthreads();

  const int keys = min(kvLen, off + q0 + FA_M);  // keys the last row of the block sees
  const int ntiles = (keys + FA_N - 1) / FA_N;
  fa_load_tile<T, HD>(sk, kh, kvpitch, 0, kvLen);
  cp_async_commit();
  fa_load_tile<T, HD>(sv, vh, kvpitch, 0, kvLen);
  cp_async_commit();

  const float sl2 = scale * 1.4426950408889634f;  // scores in log2 units: exp(x) = exp2(x·log2 e)
  float o[HD / 8][4];
#pragma unroll
  for (int i = 0; i < HD / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.f, 0.f};  // rows lane/4 and lane/4 + 8
  const int row0 = q0 + warp * 16 + lane / 4;

  for (int j = 0; j < ntiles; j++) {
    cp_async_wait<1>();  // K(j) has landed
    __syncthreads();
    float s[FA_N / 8][4];
#pragma unroll
    for (int i = 0; i < FA_N / 8; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
    for (int kd = 0; kd < HD / 16; kd++)
#pragma unroll
      for (int np = 0; np < FA_N / 16; np++) {
        uint32_t r[4];
        ldmatrix_x4(r, sk + (np * 16 + (lane & 7) + (lane >> 4) * 8) * (HD + 8) + kd * 16 + ((lane >> 3) & 1) * 8);
        const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        mma_16816<T>(s[2 * np], qf[kd], b0);
        mma_16816<T>(s[2 * np + 1], qf[kd], b1);
      }
    __syncthreads();  // every warp is done with K(j)
    if (j + 1 < ntiles) fa_load_tile<T, HD>(sk, kh, kvpitch, (j + 1) * FA_N, kvLen);
    cp_async_commit();

    // Causal mask and online softmax. Element e of tile i is row row0 + (e/2)*8, key j*64 + i*8 + 2*(lane%4) + e%2.
    float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < FA_N / 8; i++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int key = j * FA_N + i * 8 + 2 * (lane & 3) + (e & 1);
        const int pos = off + row0 + (e >> 1) * 8;
        s[i][e] = key <= pos && key < kvLen ? s[i][e] * sl2 : -INFINITY;
        tmax[e >> 1] = fmaxf(tmax[e >> 1], s[i][e]);
      }
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
      tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 1));
      tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 2));
      const float mnew = fmaxf(mx[r], tmax[r]);  // finite: key 0 is visible to every row
      corr[r] = exp2f(mx[r] - mnew);
      mx[r] = mnew;
      sum[r] *= corr[r];
    }
#pragma unroll
    for (int i = 0; i < FA_N / 8; i++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        s[i][e] = exp2f(s[i][e] - mx[e >> 1]);
        sum[e >> 1] += s[i][e];
      }
#pragma unroll
    for (int i = 0; i < HD / 8; i++) {
      o[i][0] *= corr[0];
      o[i][1] *= corr[0];
      o[i][2] *= corr[1];
      o[i][3] *= corr[1];
    }

    cp_async_wait<1>();  // V(j) has landed (K(j+1) may still be in flight)
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < FA_N / 16; kk++) {
      const uint32_t a[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                             pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < HD / 16; dp++) {
        uint32_t r[4];
        ldmatrix_x4_trans(r, sv + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * (HD + 8) + dp * 16 +
                                 (lane >> 4) * 8);
        const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        mma_16816<T>(o[2 * dp], a, b0);
        mma_16816<T>(o[2 * dp + 1], a, b1);
      }
    }
    __syncthreads();  // every warp is done with V(j)
    if (j + 1 < ntiles) fa_load_tile<T, HD>(sv, vh, kvpitch, (j + 1) * FA_N, kvLen);
    cp_async_commit();
  }
  cp_async_wait<0>();

#pragma unroll
  for (int r = 0; r < 2; r++) {
    float l = sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int t = row0 + r * 8;
    if (t >= nq) continue;
    const float inv = 1.f / l;
    T* dst = out + (long long)t * qpitch + h * HD + 2 * (lane & 3);
#pragma unroll
    for (int i = 0; i < HD / 8; i++) {
      dst[i * 8] = from_f32<T>(o[i][2 * r] * inv);
      dst[i * 8 + 1] = from_f32<T>(o[i][2 * r + 1] * inv);
    }
  }
}

// ---- split-KV attention over a paged (or contiguous) cache ----
//
// Grid (query rows, nHeads/HPB, splits), HPB warps a block, one warp a query head; the HPB heads of a block share
// one KV head, so its K and V rows are fetched from memory once and served to the other warps from L1. Query row
// t belongs to the sequence i with qStart[i] <= t < qStart[i+1] and sees its first seqLens[i] - (qStart[i+1]-1-t)
// tokens; split z takes tokens [z·chunk, (z+1)·chunk) of those.
//
// The lanes split the head dimension, as in FlashInfer's and vLLM's decode kernels: each lane holds PA_VEC(T) =
// 16/sizeof(T) consecutive elements of the query and loads the same elements of a key or value row with one
// 16-byte load; tpk lanes (headDim/PA_VEC rounded up to a power of two, at most 32) cover a row, so a warp works
// on kpw = 32/tpk keys at once, PA_UNROLL of them a group in flight. Each group of tpk lanes keeps its own running
// max, sum and output over the keys it took (online softmax); at the end the kpw groups are merged with shuffles.
// The query lives in registers and the kernel uses no shared memory. headDim must be a multiple of PA_VEC(T) and
// at most 32·PA_VEC(T), and q, the caches and out 16-byte aligned (the binding checks both).
//
// With one split the result goes straight to out; otherwise each split writes its normalized partial output and
// log-sum-exp to po [rows, nHeads, splits, headDim] and pl [rows, nHeads, splits], and attn_merge combines them.
// blockTables == nullptr reads k, v as contiguous [tokens, nKVHeads, headDim] (the prefill fallback for head sizes
// the tensor-core kernel does not take).
constexpr int PA_UNROLL = 4;

// Vec16 is 16 bytes of T: load converts them to floats, store writes floats back as T.
template <typename T> struct Vec16 {
  static constexpr int N = 16 / sizeof(T);
  static __device__ __forceinline__ void load(float f[N], const T* p) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int i = 0; i < N; i++) f[i] = to_f32(e[i]);
  }
  static __device__ __forceinline__ void store(T* p, const float f[N]) {
    uint4 u;
    T* e = reinterpret_cast<T*>(&u);
#pragma unroll
    for (int i = 0; i < N; i++) e[i] = from_f32<T>(f[i]);
    *reinterpret_cast<uint4*>(p) = u;
  }
};

template <typename T>
__device__ void paged_attention(T* out, float* po, float* pl, const T* q, const T* kc, const T* vc, const int* qStart,
                                const int* seqLens, const int* blockTables, int nSeqs, int maxBlocksPerSeq,
                                int blockSize, int nHeads, int nKVHeads, int hd, float scale, int chunk) {
  using V = Vec16<T>;
  constexpr int VEC = V::N;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int t = blockIdx.x, hpb = blockDim.x >> 5;
  const int h = blockIdx.y * hpb + warp, g = h / (nHeads / nKVHeads);
  const int split = blockIdx.z, nsplit = gridDim.z;
  int tpk = 1;
  while (tpk * VEC < hd) tpk <<= 1;
  const int kpw = 32 / tpk, kg = lane / tpk, d0 = (lane % tpk) * VEC;
  const bool active = d0 < hd;  // lanes past the row (hd not a power-of-two multiple of VEC) hold zeros

  int lo = 0, hi = nSeqs - 1;  // the sequence of row t: the last i with qStart[i] <= t
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (qStart[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  const int seq = lo;
  const int visible = seqLens[seq] - (qStart[seq + 1] - 1 - t);
  const int s0 = split * chunk, s1 = min(visible, s0 + chunk);
  const int* table = blockTables ? blockTables + (long long)seq * maxBlocksPerSeq : nullptr;

  float qv[VEC];
#pragma unroll
  for (int i = 0; i < VEC; i++) qv[i] = 0.f;
  if (active) {
    V::load(qv, q + ((long long)t * nHeads + h) * hd + d0);
#pragma unroll
    for (int i = 0; i < VEC; i++) qv[i] *= scale;
  }

  float acc[VEC];
#pragma unroll
  for (int i = 0; i < VEC; i++) acc[i] = 0.f;
  float mx = -INFINITY, sum = 0.f;  // this group's running max and sum
  const long long row = (long long)nKVHeads * hd;
  const T* kh = kc + g * hd + d0;
  const T* vh = vc + g * hd + d0;
  // The loop bound is the same for every lane, so the shuffles below always have the whole warp.
  for (int base = s0; base < s1; base += kpw * PA_UNROLL) {
    long long off[PA_UNROLL];
    bool ok[PA_UNROLL];
#pragma unroll
    for (int u = 0; u < PA_UNROLL; u++) {
      const int s = base + u * kpw + kg;
      ok[u] = s < s1;
      off[u] = ok[u] ? (table ? (long long)table[s / blockSize] * blockSize + s % blockSize : s) * row : 0;
    }
    uint4 kr[PA_UNROLL], vr[PA_UNROLL];
#pragma unroll
    for (int u = 0; u < PA_UNROLL; u++) {
      const bool ld = ok[u] && active;
      kr[u] = ld ? *reinterpret_cast<const uint4*>(kh + off[u]) : make_uint4(0, 0, 0, 0);
      vr[u] = ld ? *reinterpret_cast<const uint4*>(vh + off[u]) : make_uint4(0, 0, 0, 0);
    }
    float sc[PA_UNROLL];
    float mnew = mx;
#pragma unroll
    for (int u = 0; u < PA_UNROLL; u++) {
      float kf[VEC];
      V::load(kf, reinterpret_cast<const T*>(&kr[u]));
      float d = 0.f;
#pragma unroll
      for (int i = 0; i < VEC; i++) d += qv[i] * kf[i];
      for (int o = tpk / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
      sc[u] = ok[u] ? d : -INFINITY;
      mnew = fmaxf(mnew, sc[u]);
    }
    if (mnew == -INFINITY) continue;  // no key of this group in this step (and none before)
    const float corr = expf(mx - mnew);  // 0 while mx is -inf: acc and sum are 0 then
    sum *= corr;
#pragma unroll
    for (int i = 0; i < VEC; i++) acc[i] *= corr;
    mx = mnew;
#pragma unroll
    for (int u = 0; u < PA_UNROLL; u++) {
      const float p = expf(sc[u] - mnew);  // 0 for a key past s1
      float vf[VEC];
      V::load(vf, reinterpret_cast<const T*>(&vr[u]));
      sum += p;
#pragma unroll
      for (int i = 0; i < VEC; i++) acc[i] += p * vf[i];
    }
  }
  // Merge the kpw groups: lanes lane and lane^o (o >= tpk) hold the same elements for different keys.
  for (int o = tpk; o < 32; o <<= 1) {
    const float mo = __shfl_xor_sync(0xffffffffu, mx, o), so = __shfl_xor_sync(0xffffffffu, sum, o);
    const float mnew = fmaxf(mx, mo);
    const float cs = mx == -INFINITY ? 0.f : expf(mx - mnew), co = mo == -INFINITY ? 0.f : expf(mo - mnew);
    sum = sum * cs + so * co;
#pragma unroll
    for (int i = 0; i < VEC; i++) acc[i] = acc[i] * cs + __shfl_xor_sync(0xffffffffu, acc[i], o) * co;
    mx = mnew;
  }

  if (kg != 0 || !active) return;
  const long long oh = (long long)t * nHeads + h;
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
  for (int i = 0; i < VEC; i++) acc[i] *= inv;
  if (nsplit == 1) {
    V::store(out + oh * hd + d0, acc);
    return;
  }
  const long long ps = oh * nsplit + split;
  float4* dst = reinterpret_cast<float4*>(po + ps * hd + d0);
#pragma unroll
  for (int i = 0; i < VEC / 4; i++) dst[i] = make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]);
  if (lane == 0) pl[ps] = sum > 0.f ? mx + logf(sum) : -INFINITY;
}

// attn_merge combines the splits of one (row, head), blockIdx.x = row*nHeads + head:
// out = Σ_z e^(lse_z - M)·o_z / Σ_z e^(lse_z - M), M = max_z lse_z. Empty splits have lse = -inf and weigh 0.
template <typename T>
__device__ void attn_merge(T* out, const float* po, const float* pl, int nsplit, int hd) {
  const long long oh = blockIdx.x;
  const float* l = pl + oh * nsplit;
  float m = -INFINITY;
  for (int z = 0; z < nsplit; z++) m = fmaxf(m, l[z]);
  float den = 0.f;
  for (int z = 0; z < nsplit; z++) den += expf(l[z] - m);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float num = 0.f;
    for (int z = 0; z < nsplit; z++) num += expf(l[z] - m) * po[(oh * nsplit + z) * hd + d];
    out[oh * hd + d] = from_f32<T>(num / den);
  }
}

// kv_append writes the k and v rows of token blockIdx.x into cache slot slots[token]; a negative slot skips it.
template <typename T>
__device__ void kv_append(T* kc, T* vc, const T* k, const T* v, const int* slots, int rowLen) {
  const int slot = slots[blockIdx.x];
  if (slot < 0) return;
  const long long src = (long long)blockIdx.x * rowLen, dst = (long long)slot * rowLen;
  for (int i = threadIdx.x; i < rowLen; i += blockDim.x) {
    kc[dst + i] = k[src + i];
    vc[dst + i] = v[src + i];
  }
}

}  // namespace morph_attn

using namespace morph_attn;

// flash_prefill_{f16,bf16}_hd{64,128}: grid (ceil(nq/64), nHeads), 128 threads.
#define MORPH_FLASH(SUFFIX, T, HD)                                                                                 \
  extern "C" __global__ void __launch_bounds__(FA_THREADS)                                                        \
      flash_prefill_##SUFFIX##_hd##HD(T* out, const T* q, const T* k, const T* v, int nq, int kvLen, int nHeads,  \
                                      int nKVHeads, float scale) {                                                \
    flash_prefill<T, HD>(out, q, k, v, nq, kvLen, nHeads, nKVHeads, scale);                                       \
  }

MORPH_FLASH(f16, __half, 64)
MORPH_FLASH(f16, __half, 128)
MORPH_FLASH(bf16, __nv_bfloat16, 64)
MORPH_FLASH(bf16, __nv_bfloat16, 128)

// paged_attention_*: grid (rows, nHeads/hpb, splits), 32*hpb threads (hpb <= 16 dividing nHeads/nKVHeads),
// headDim a multiple of 16/sizeof(T) up to 32 times that. attn_merge_*: grid rows*nHeads, any multiple of 32 threads. kv_append_*: grid tokens.
#define MORPH_PAGED(SUFFIX, T)                                                                                     \
  extern "C" __global__ void paged_attention_##SUFFIX(                          \
      T* out, float* po, float* pl, const T* q, const T* kc, const T* vc, const int* qStart, const int* seqLens,   \
      const int* blockTables, int nSeqs, int maxBlocksPerSeq, int blockSize, int nHeads, int nKVHeads, int hd,     \
      float scale, int chunk) {                                                                                    \
    paged_attention(out, po, pl, q, kc, vc, qStart, seqLens, blockTables, nSeqs, maxBlocksPerSeq, blockSize,      \
                    nHeads, nKVHeads, hd, scale, chunk);                                                           \
  }                                                                                                                \
  extern "C" __global__ void attn_merge_##SUFFIX(T* out, const float* po, const float* pl, int nsplit, int hd) {  \
    attn_merge(out, po, pl, nsplit, hd);                                                                           \
  }                                                                                                                \
  extern "C" __global__ void kv_append_##SUFFIX(T* kc, T* vc, const T* k, const T* v, const int* slots,           \
                                                int rowLen) {                                                      \
    kv_append(kc, vc, k, v, slots, rowLen);                                                                        \
  }

MORPH_PAGED(f32, float)
MORPH_PAGED(f16, __half)
MORPH_PAGED(bf16, __nv_bfloat16)
