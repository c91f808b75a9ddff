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
// Grid (query rows, nHeads/HPB, splits), HPB warps a block, one warp a query head. Query row t belongs to the
// sequence i with qStart[i] <= t < qStart[i+1] and sees its first seqLens[i] - (qStart[i+1]-1-t) tokens; split z
// takes tokens [z·chunk, (z+1)·chunk) of those. Lanes take 32 keys at a time (one key a lane for Q·K, whose row
// the lane reads whole), then the warp folds them into its running max, sum and output (each lane owning the
// output elements d ≡ lane mod 32). With one split the result goes straight to out; otherwise each split writes
// its normalized partial output and log-sum-exp to po [rows, nHeads, splits, headDim] and pl [rows, nHeads,
// splits], and attn_merge combines them. blockTables == nullptr reads k, v as contiguous [tokens, nKVHeads,
// headDim] (the prefill fallback for head sizes the tensor-core kernel does not take).
constexpr int PA_MAX_HD = 256, PA_MAX_HPB = 16;

template <typename T>
__device__ __forceinline__ float dot_key(const float* qs, const T* krow, int hd) {
  float d = 0.f;
  for (int i = 0; i < hd; i++) d += qs[i] * to_f32(krow[i]);
  return d;
}

template <typename T>
__device__ void paged_attention(T* out, float* po, float* pl, const T* q, const T* kc, const T* vc, const int* qStart,
                                const int* seqLens, const int* blockTables, int nSeqs, int maxBlocksPerSeq,
                                int blockSize, int nHeads, int nKVHeads, int hd, float scale, int chunk) {
  __shared__ float qsh[PA_MAX_HPB * PA_MAX_HD];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int t = blockIdx.x, hpb = blockDim.x >> 5;
  const int h = blockIdx.y * hpb + warp, g = h / (nHeads / nKVHeads);
  const int split = blockIdx.z, nsplit = gridDim.z;

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

  float* qs = qsh + warp * hd;
  const T* qrow = q + ((long long)t * nHeads + h) * hd;
  for (int i = lane; i < hd; i += 32) qs[i] = to_f32(qrow[i]) * scale;
  __syncwarp();

  constexpr int NA = PA_MAX_HD / 32;
  float acc[NA];
#pragma unroll
  for (int i = 0; i < NA; i++) acc[i] = 0.f;
  float mx = -INFINITY, sum = 0.f;
  const long long row = (long long)nKVHeads * hd;
  for (int base = s0; base < s1; base += 32) {
    const int s = base + lane;
    long long slot = 0;
    float score = -INFINITY;
    if (s < s1) {
      slot = table ? (long long)table[s / blockSize] * blockSize + s % blockSize : s;
      score = dot_key(qs, kc + slot * row + g * hd, hd);
    }
    const float mnew = fmaxf(mx, warp_max(score));
    const float p = s < s1 ? __expf(score - mnew) : 0.f;
    const float corr = __expf(mx - mnew);
    sum = sum * corr + warp_sum(p);
    mx = mnew;
#pragma unroll
    for (int i = 0; i < NA; i++) acc[i] *= corr;
    const int n = min(32, s1 - base);
    for (int jj = 0; jj < n; jj++) {
      const float pj = __shfl_sync(0xffffffffu, p, jj);
      const long long sj = __shfl_sync(0xffffffffu, slot, jj);
      const T* vrow = vc + sj * row + g * hd;
#pragma unroll
      for (int i = 0; i < NA; i++)
        if (lane + 32 * i < hd) acc[i] += pj * to_f32(vrow[lane + 32 * i]);
    }
  }

  const long long oh = (long long)t * nHeads + h;
  if (nsplit == 1) {
    const float inv = 1.f / sum;
#pragma unroll
    for (int i = 0; i < NA; i++)
      if (lane + 32 * i < hd) out[oh * hd + lane + 32 * i] = from_f32<T>(acc[i] * inv);
    return;
  }
  const long long ps = oh * nsplit + split;
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
  for (int i = 0; i < NA; i++)
    if (lane + 32 * i < hd) po[ps * hd + lane + 32 * i] = acc[i] * inv;
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
  for (int z = 0; z < nsplit; z++) den += __expf(l[z] - m);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float num = 0.f;
    for (int z = 0; z < nsplit; z++) num += __expf(l[z] - m) * po[(oh * nsplit + z) * hd + d];
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
// headDim <= 256. attn_merge_*: grid rows*nHeads, any multiple of 32 threads. kv_append_*: grid tokens.
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
