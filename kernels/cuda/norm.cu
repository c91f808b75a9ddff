// norm.cu: the row-wise and elementwise kernels of a decoder layer: RMSNorm, fused residual-add + RMSNorm, RoPE,
// SwiGLU and softmax, each in float32, float16 and bfloat16 storage (suffixes _f32, _f16, _bf16) with float32
// arithmetic. Semantics and layouts are those of the functions of the same name in kernels/ref.
//
// Launch: the row kernels take one block a row (grid.x = rows, blockDim.x a multiple of 32); rope takes one block
// a token; swiglu takes a 1-D grid over the elements.
#include "common.cuh"

using namespace morph;

namespace morph_norm {

// rms_row writes out = x / sqrt(mean(x²) + eps) ⊙ weight for one row held in global memory.
template <typename T>
__device__ void rms_row(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ weight, int dim,
                        float eps) {
  __shared__ float scratch[32];
  float ss = 0.f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = to_f32(x[i]);
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / dim + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) out[i] = from_f32<T>(to_f32(x[i]) * inv * to_f32(weight[i]));
}

template <typename T>
__device__ void rmsnorm(T* out, const T* x, const T* weight, int dim, float eps) {
  const size_t r = size_t(blockIdx.x) * dim;
  rms_row(out + r, x + r, weight, dim, eps);
}

// add_rmsnorm: residual += x (stored in T, so the norm sees the rounded sum that later layers read), then
// out = RMSNorm(residual) ⊙ weight. Each thread rewrites only the residual elements it reads back.
template <typename T>
__device__ void add_rmsnorm(T* out, T* residual, const T* x, const T* weight, int dim, float eps) {
  const size_t r = size_t(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x)
    residual[r + i] = from_f32<T>(to_f32(residual[r + i]) + to_f32(x[r + i]));
  rms_row(out + r, residual + r, weight, dim, eps);
}

// rope rotates the consecutive pairs (x[2i], x[2i+1]) of every head of token blockIdx.x by pos·theta^(-2i/headDim).
template <typename T>
__device__ void rope(T* x, const int* pos, int nHeads, int headDim, float theta) {
  const int half = headDim / 2;
  const int p = pos[blockIdx.x];
  T* row = x + size_t(blockIdx.x) * nHeads * headDim;
  for (int j = threadIdx.x; j < nHeads * half; j += blockDim.x) {
    const int h = j / half, i = j % half;
    // The angle is formed and reduced to [-1, 1) half-turns in double, so long positions keep full float32
    // accuracy; sincospif then needs no slow-path range reduction (sincosf's spills to local memory).
    double turns = double(p) * exp2(-double(2 * i) / double(headDim) * log2(double(theta))) / 3.141592653589793;
    turns -= 2.0 * rint(0.5 * turns);
    float s, c;
    sincospif(float(turns), &s, &c);
    T* e = row + h * headDim + 2 * i;
    const float a = to_f32(e[0]), b = to_f32(e[1]);
    e[0] = from_f32<T>(a * c - b * s);
    e[1] = from_f32<T>(a * s + b * c);
  }
}

// swiglu: out[i] = silu(gate[i])·up[i] over n elements, silu(g) = g/(1+e^(-g)).
template <typename T>
__device__ void swiglu(T* out, const T* gate, const T* up, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const float g = to_f32(gate[i]);
    out[i] = from_f32<T>(g / (1.f + expf(-g)) * to_f32(up[i]));
  }
}

// softmax replaces row blockIdx.x of x ([rows, cols]) by exp(x - max) / Σ exp(x - max).
template <typename T>
__device__ void softmax(T* x, int cols) {
  __shared__ float scratch[32];
  T* row = x + size_t(blockIdx.x) * cols;
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) mx = fmaxf(mx, to_f32(row[i]));
  mx = block_max(mx, scratch);
  float sum = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) sum += expf(to_f32(row[i]) - mx);
  const float inv = 1.f / block_sum(sum, scratch);
  for (int i = threadIdx.x; i < cols; i += blockDim.x) row[i] = from_f32<T>(expf(to_f32(row[i]) - mx) * inv);
}

}  // namespace morph_norm

using namespace morph_norm;

#define MORPH_NORM_KERNELS(SUFFIX, T)                                                                           \
  extern "C" __global__ void rmsnorm_##SUFFIX(T* out, const T* x, const T* weight, int dim, float eps) {       \
    rmsnorm(out, x, weight, dim, eps);                                                                          \
  }                                                                                                             \
  extern "C" __global__ void add_rmsnorm_##SUFFIX(T* out, T* residual, const T* x, const T* weight, int dim,   \
                                                  float eps) {                                                  \
    add_rmsnorm(out, residual, x, weight, dim, eps);                                                            \
  }                                                                                                             \
  extern "C" __global__ void rope_##SUFFIX(T* x, const int* pos, int nHeads, int headDim, float theta) {       \
    rope(x, pos, nHeads, headDim, theta);                                                                       \
  }                                                                                                             \
  extern "C" __global__ void swiglu_##SUFFIX(T* out, const T* gate, const T* up, long long n) {                \
    swiglu(out, gate, up, n);                                                                                   \
  }                                                                                                             \
  extern "C" __global__ void softmax_##SUFFIX(T* x, int cols) { softmax(x, cols); }

MORPH_NORM_KERNELS(f32, float)
MORPH_NORM_KERNELS(f16, __half)
MORPH_NORM_KERNELS(bf16, __nv_bfloat16)
