// serve.cu: the kernels a served forward pass needs around the layers' math: gathering rows (token embeddings,
// each sequence's last row), narrowing the GEMMs' float32 outputs to the storage type, quantizing activations to
// int8 a row for the W8A8 GEMMs, and greedy sampling (argmax of each logit row). Suffixes _f32, _f16, _bf16 name
// the storage type; arithmetic is float32.
//
// Launch: gather_rows, quantize_rows and argmax_rows take one block a row (blockDim.x a multiple of 32, at most
// 1024); cast takes a 1-D grid over the elements.
#include "common.cuh"

using namespace morph;

namespace morph_serve {

// gather_rows: out[r] = table[idx[r]] for rows of dim elements.
template <typename T>
__device__ void gather_rows(T* __restrict__ out, const T* __restrict__ table, const int* __restrict__ idx, int dim) {
  const T* src = table + size_t(idx[blockIdx.x]) * dim;
  T* dst = out + size_t(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = src[i];
}

// cast narrows n float32 values to T, rounding to nearest even.
template <typename T>
__device__ void cast(T* __restrict__ out, const float* __restrict__ in, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    out[i] = from_f32<T>(in[i]);
}

// quantize_rows quantizes row blockIdx.x of x [rows, k] symmetrically to int8 as kernels/cpu's QuantizeRowsInt8
// does: scale = max|x| / 127, q = x·(127/max|x|) rounded half away from zero; an all-zero row gets scale 0.
template <typename T>
__device__ void quantize_rows(int8_t* __restrict__ q, float* __restrict__ s, const T* __restrict__ x, int k) {
  __shared__ float scratch[32];
  const T* row = x + size_t(blockIdx.x) * k;
  int8_t* qr = q + size_t(blockIdx.x) * k;
  float amax = 0.f;
  for (int i = threadIdx.x; i < k; i += blockDim.x) amax = fmaxf(amax, fabsf(to_f32(row[i])));
  amax = block_max(amax, scratch);
  const float inv = amax == 0.f ? 0.f : 127.f / amax;
  for (int i = threadIdx.x; i < k; i += blockDim.x) {
    const double y = double(to_f32(row[i]) * inv);
    qr[i] = int8_t(y + copysign(0.5, y));
  }
  if (threadIdx.x == 0) s[blockIdx.x] = amax / 127.f;
}

// argmax_rows writes the index of the largest value of each row of logits [rows, vocab], the first on ties.
__device__ void argmax_rows(int* __restrict__ out, const float* __restrict__ logits, int vocab) {
  __shared__ float sv[32];
  __shared__ int si[32];
  const float* row = logits + size_t(blockIdx.x) * vocab;
  float best = -INFINITY;
  int at = vocab;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = row[i];
    if (v > best || (v == best && i < at)) best = v, at = i;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, best, o);
    const int i = __shfl_xor_sync(0xffffffffu, at, o);
    if (v > best || (v == best && i < at)) best = v, at = i;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  if (lane == 0) sv[warp] = best, si[warp] = at;
  __syncthreads();
  if (warp == 0) {
    best = lane < nwarps ? sv[lane] : -INFINITY;
    at = lane < nwarps ? si[lane] : vocab;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float v = __shfl_xor_sync(0xffffffffu, best, o);
      const int i = __shfl_xor_sync(0xffffffffu, at, o);
      if (v > best || (v == best && i < at)) best = v, at = i;
    }
    // A row of NaNs only has no largest value: token 0, as sample.Argmax picks.
    if (lane == 0) out[blockIdx.x] = at == vocab ? 0 : at;
  }
}

}  // namespace morph_serve

using namespace morph_serve;

#define MORPH_SERVE_KERNELS(SUFFIX, T)                                                                          \
  extern "C" __global__ void gather_rows_##SUFFIX(T* out, const T* table, const int* idx, int dim) {           \
    gather_rows(out, table, idx, dim);                                                                          \
  }                                                                                                             \
  extern "C" __global__ void cast_##SUFFIX(T* out, const float* in, long long n) { cast(out, in, n); }         \
  extern "C" __global__ void quantize_rows_##SUFFIX(int8_t* q, float* s, const T* x, int k) {                  \
    quantize_rows(q, s, x, k);                                                                                  \
  }

MORPH_SERVE_KERNELS(f32, float)
MORPH_SERVE_KERNELS(f16, __half)
MORPH_SERVE_KERNELS(bf16, __nv_bfloat16)

extern "C" __global__ void argmax_f32(int* out, const float* logits, int vocab) { argmax_rows(out, logits, vocab); }
