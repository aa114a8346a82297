// CUDA kernels of the backend (see cuda_kernels.h). Every reduction here runs
// in an order fixed by the row's own sizes: per-thread sums in index order,
// then a fixed shuffle tree, then warps in index order. No atomics.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <utility>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/expert_groups.h"

namespace flover::kernels::cuda {
namespace {

constexpr int kElementwiseThreads = 256;
constexpr int kAttentionThreads = 128;  // 4 warps
constexpr int kAttentionWarps = kAttentionThreads / 32;

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToFloat(__nv_fp8_e4m3 x) { return static_cast<float>(x); }

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) {
  return __float2half_rn(x);
}
// e4m3, rounded to nearest even, saturated to +-448 (the fp8 KV cache).
template <>
__device__ __forceinline__ __nv_fp8_e4m3 FromFloat<__nv_fp8_e4m3>(float x) {
  return __nv_fp8_e4m3(x);
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Programmatic dependent launch (sm_90 and later; SetProgrammaticLaunch).
// With it on, a kernel launches while the one before it in the stream is
// still running: its blocks are scheduled as soon as every block of that
// kernel has started (griddepcontrol.launch_dependents, below), and wait in
// griddepcontrol.wait until it has finished and its writes are visible. So
// every kernel here calls PdlPrologue before it reads or writes anything:
// memory is accessed in plain stream order, and only the launch latency
// between kernels is hidden. Compiled for sm_80 (where the instructions do
// not exist) it is empty, and the launches never ask for it there
// (ProgrammaticLaunchSupported checks the code the device runs).
__device__ __forceinline__ void PdlPrologue() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

std::atomic<bool> programmatic_launch{false};

// kernel<<<grid, block, smem, stream>>>(args...), with the programmatic
// launch attribute while SetProgrammaticLaunch(true) holds. Errors are left
// for cudaGetLastError, as with <<<>>>.
template <typename... Params, typename... Args>
void LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                  cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = programmatic_launch.load(std::memory_order_relaxed) ? 1 : 0;
  cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// The sum (or max) of v over the block, in a fixed order, returned to every
// thread. blockDim.x is a multiple of 32; `red` holds 32 floats.
template <bool kMax>
__device__ float BlockReduce(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = kMax ? WarpMax(v) : WarpSum(v);
  __syncthreads();  // `red` may still be read from the previous reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = lane < warps ? red[lane] : (kMax ? -INFINITY : 0.0f);
  return kMax ? WarpMax(t) : WarpSum(t);
}

int Blocks(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(b < 65535 * 16 ? (b < 1 ? 1 : b) : 65535 * 16);
}

// ---- Embedding, add, conversions ------------------------------------------

__global__ void EmbedKernel(const int32_t* tokens, const int32_t* positions, const float* wte,
                            int vocab_begin, int vocab_rows, const float* wpe, int C, float* out) {
  PdlPrologue();
  const int t = blockIdx.x;
  const int token = tokens[t] - vocab_begin;
  const bool here = token >= 0 && token < vocab_rows;
  const float* e = wte + static_cast<int64_t>(here ? token : 0) * C;
  const float* p = wpe != nullptr ? wpe + static_cast<int64_t>(positions[t]) * C : nullptr;
  float* o = out + static_cast<int64_t>(t) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float v = here ? e[c] : 0.0f;
    if (p != nullptr) v += p[c];
    o[c] = v;
  }
}

// The better of two (value, index) candidates for ArgmaxRows: a NaN (or
// none, index -1) never wins; a larger value does; of equal values the
// lower index. Associative and commutative, so the tree's order does not
// change the result.
__device__ __forceinline__ bool Beats(float v, int64_t i, float best_v, int64_t best_i) {
  if (i < 0 || isnan(v)) return false;
  if (best_i < 0) return true;
  return v > best_v || (v == best_v && i < best_i);
}

// grid R, block kElementwiseThreads: row r's first largest value.
__global__ void ArgmaxRowsKernel(const float* x, int64_t V, int32_t* out) {
  PdlPrologue();
  __shared__ float vals[kElementwiseThreads];
  __shared__ int64_t idx[kElementwiseThreads];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * V;
  float best_v = 0.0f;
  int64_t best_i = -1;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    const float v = row[i];
    if (Beats(v, i, best_v, best_i)) {
      best_v = v;
      best_i = i;
    }
  }
  vals[threadIdx.x] = best_v;
  idx[threadIdx.x] = best_i;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const int o = threadIdx.x + half;
      if (Beats(vals[o], idx[o], vals[threadIdx.x], idx[threadIdx.x])) {
        vals[threadIdx.x] = vals[o];
        idx[threadIdx.x] = idx[o];
      }
    }
    __syncthreads();
  }
  // std::max_element keeps a leading NaN (nothing compares above it); a
  // row of NaNs only has none better either.
  if (threadIdx.x == 0) out[blockIdx.x] = isnan(row[0]) || idx[0] < 0 ? 0 : static_cast<int32_t>(idx[0]);
}

__global__ void AddKernel(const float* x, int64_t n, float* out) {
  PdlPrologue();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] += x[i];
  }
}

__global__ void AddBiasKernel(const float* bias, int64_t n, int N, float* out) {
  PdlPrologue();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] += bias[i % N];
  }
}

template <typename OutT>
__global__ void ConvertKernel(const float* x, int64_t n, OutT* out) {
  PdlPrologue();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = FromFloat<OutT>(x[i]);
  }
}

// gelu_new(x) = 0.5 x (1 + tanh(u)) written as x / (1 + e^(-2u)), as the CPU
// backend writes it (full relative precision for negative x).
template <typename OutT>
__global__ void GeluKernel(const float* x, int64_t n, OutT* out) {
  PdlPrologue();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = x[i];
    const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    out[i] = FromFloat<OutT>(v / (1.0f + expf(-2.0f * u)));
  }
}

// ---- Fallback GEMM ----------------------------------------------------------

constexpr int kGemmTile = 32;  // outputs per block side, and k per step

// block (32, 8): a 32 x 32 tile of out (8 rows per thread-row pass), k in
// steps of 32 through shared memory; each output sums k in order.
template <typename T>
__global__ void FallbackGemmKernel(const T* x, const T* w, const float* bias, bool accumulate,
                                   int M, int N, int K, float* out) {
  PdlPrologue();
  __shared__ float xs[kGemmTile][kGemmTile + 1];
  __shared__ float ws[kGemmTile][kGemmTile + 1];
  const int n0 = blockIdx.x * kGemmTile, m0 = blockIdx.y * kGemmTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  constexpr int kRowsPerThread = kGemmTile / 8;
  float acc[kRowsPerThread] = {};
  for (int k0 = 0; k0 < K; k0 += kGemmTile) {
    for (int r = ty; r < kGemmTile; r += 8) {
      const int m = m0 + r, n = n0 + r, k = k0 + tx;
      xs[r][tx] = m < M && k < K ? ToFloat(x[static_cast<int64_t>(m) * K + k]) : 0.0f;
      ws[r][tx] = n < N && k < K ? ToFloat(w[static_cast<int64_t>(n) * K + k]) : 0.0f;
    }
    __syncthreads();
    const int kk_end = min(kGemmTile, K - k0);
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int r = ty + 8 * i;
      for (int kk = 0; kk < kk_end; ++kk) acc[i] = fmaf(xs[r][kk], ws[tx][kk], acc[i]);
    }
    __syncthreads();
  }
  const int n = n0 + tx;
  if (n >= N) return;
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int m = m0 + ty + 8 * i;
    if (m >= M) continue;
    float v = acc[i];
    if (accumulate) v += out[static_cast<int64_t>(m) * N + n];
    if (bias != nullptr) v += bias[n];
    out[static_cast<int64_t>(m) * N + n] = v;
  }
}

// ---- Fixed-order tensor-core GEMM -------------------------------------------
//
// out[m][n] = x[m] . w[n] for 16-bit x and w, on mma.sync m16n8k16 with f32
// accumulators. Each output's arithmetic depends on K alone, never on M or
// on which variant runs it:
//   * K is cut into segments of MmaSegmentLength(K) (whole chunks of 32);
//   * a segment's sum starts from zero and takes its chunks in order, each
//     chunk as two mma steps (the same instruction, with the same operands
//     in the same fragment slots: a lane's 8 consecutive k values of a row
//     feed slots {0,1,8,9} of the first step and the next four those of the
//     second, for x and w alike, so the product pairs are the same);
//   * the segments' sums are added in order, then the residual (out + v),
//     then the bias (v + b).
// A row's position in its 16-row tile does not matter: the tensor cores
// compute each output from its own row, column and accumulator.
// The few-row variant gives each segment its own warp (K-parallel, for the
// weight-streaming decode steps); the many-row variant tiles M and N through
// shared memory and walks the segments in each warp.

constexpr int kMmaMaxSegments = 8;
constexpr int kMmaMinSegment = 256;
constexpr int kMmaFewRowsMaxTiles = 4;  // up to 64 rows: the K-parallel variant

__host__ __device__ constexpr int MmaSegmentLength(int K) {
  const int len = ((K + kMmaMaxSegments - 1) / kMmaMaxSegments + 31) / 32 * 32;
  return len < kMmaMinSegment ? kMmaMinSegment : len;
}

template <typename T>
__device__ __forceinline__ void Mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void Mma16816<__nv_bfloat16>(float (&d)[4], uint32_t a0, uint32_t a1,
                                                        uint32_t a2, uint32_t a3, uint32_t b0,
                                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void Mma16816<__half>(float (&d)[4], uint32_t a0, uint32_t a1,
                                                 uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// 16 bytes (8 values) of `row` from element k, or zeros where !valid.
template <typename T>
__device__ __forceinline__ uint4 Load8(const T* row, int k, bool valid) {
  if (!valid) return make_uint4(0, 0, 0, 0);
  return __ldg(reinterpret_cast<const uint4*>(row + k));
}

// acc[mt][nt] (a 16 x 8 tile of rows m0 + 16 mt, columns n0 + 8 nt) +=
// x[:, k_begin:k_end] . w[:, k_begin:k_end], chunk by chunk in order.
// Lane (g = lane / 4, q = lane % 4) holds rows g and g + 8 of each tile
// and columns 2q, 2q + 1 (mma's C layout).
template <typename T, int MT, int NT, int U>
__device__ __forceinline__ void MmaSegment(const T* __restrict__ x, const T* __restrict__ w, int M,
                                           int N, int K, int m0, int n0, int k_begin, int k_end,
                                           float (&acc)[MT][NT][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const T* wrow[NT];
  bool wvalid[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int n = n0 + 8 * nt + g;
    wvalid[nt] = n < N;
    wrow[nt] = w + static_cast<int64_t>(wvalid[nt] ? n : 0) * K;
  }
  const T* xrow[MT][2];
  bool xvalid[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = m0 + 16 * mt + 8 * h + g;
      xvalid[mt][h] = m < M;
      xrow[mt][h] = x + static_cast<int64_t>(xvalid[mt][h] ? m : 0) * K;
    }
  }
  for (int k = k_begin; k < k_end; k += 32 * U) {
    uint4 wv[U][NT], xv[U][MT][2];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool in = k + 32 * u < k_end;
      const int kk = k + 32 * u + 8 * q;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) wv[u][nt] = Load8(wrow[nt], kk, in && wvalid[nt]);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        xv[u][mt][0] = Load8(xrow[mt][0], kk, in && xvalid[mt][0]);
        xv[u][mt][1] = Load8(xrow[mt][1], kk, in && xvalid[mt][1]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (k + 32 * u >= k_end) break;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint4 a = xv[u][mt][0], a8 = xv[u][mt][1], b = wv[u][nt];
          Mma16816<T>(acc[mt][nt], a.x, a8.x, a.y, a8.y, b.x, b.y);
          Mma16816<T>(acc[mt][nt], a.z, a8.z, a.w, a8.w, b.z, b.w);
        }
      }
    }
  }
}

// A lane's accumulators of MT x NT tiles, zeroed.
template <int MT, int NT>
__device__ __forceinline__ void ZeroTiles(float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;
}

// The epilogue of one lane's outputs: v (the segments' sum), then + out
// when accumulating, then + bias.
template <int MT, int NT>
__device__ __forceinline__ void MmaStore(const float (&v)[MT][NT][4], int M, int N, int m0, int n0,
                                         const float* bias, bool accumulate, float* out) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int m = m0 + 16 * mt + g + 8 * (i / 2), n = n0 + 8 * nt + 2 * q + (i % 2);
        if (m >= M || n >= N) continue;
        float* o = out + static_cast<int64_t>(m) * N + n;
        float r = v[mt][nt][i];
        if (accumulate) r = __fadd_rn(*o, r);
        if (bias != nullptr) r = __fadd_rn(r, bias[n]);
        *o = r;
      }
    }
  }
}

// Few rows (M <= 16 MT): a block of (32 * segments) computes the 16 MT x
// 8 NT tile of outputs at (m0, n0); warp s sums segment s, then warp 0 adds
// the segments in order.
template <typename T, int MT, int NT>
__device__ __forceinline__ void MmaFewRowsBlock(const T* __restrict__ x, const T* __restrict__ w,
                                                const float* bias, bool accumulate, int M, int N, int K,
                                                int m0, int n0, float* out) {
  constexpr int R = MT * NT * 4;
  __shared__ float parts[kMmaMaxSegments][R][32];
  const int lane = threadIdx.x & 31, s = threadIdx.x >> 5;
  const int len = MmaSegmentLength(K);
  float acc[MT][NT][4];
  ZeroTiles(acc);
  MmaSegment<T, MT, NT, (MT <= 2 ? 4 : 2)>(x, w, M, N, K, m0, n0, s * len, min(K, (s + 1) * len), acc);
  if (s > 0) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) parts[s][(mt * NT + nt) * 4 + i][lane] = acc[mt][nt][i];
  }
  __syncthreads();
  if (s != 0) return;
  const int segments = blockDim.x >> 5;
  for (int t = 1; t < segments; ++t) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          acc[mt][nt][i] = __fadd_rn(acc[mt][nt][i], parts[t][(mt * NT + nt) * 4 + i][lane]);
  }
  MmaStore<MT, NT>(acc, M, N, m0, n0, bias, accumulate, out);
}

template <typename T, int MT, int NT>
__global__ void __launch_bounds__(32 * kMmaMaxSegments)
    MmaGemmFewRowsKernel(const T* __restrict__ x, const T* __restrict__ w, const float* bias,
                         bool accumulate, int M, int N, int K, float* out) {
  PdlPrologue();
  MmaFewRowsBlock<T, MT, NT>(x, w, bias, accumulate, M, N, K, blockIdx.y * 16 * MT, blockIdx.x * 8 * NT, out);
}

// ---- Experts grouped on the device -------------------------------------------
//
// LinearById without the ids leaving the device: GroupExpertsKernel groups
// the routes (expert_groups.h's phases), the rows are gathered in grouped
// order, MmaGemmGroupedKernel runs every expert's GEMM in one launch over
// the groups' tiles, and the results are scattered back to their routes.
// Nothing waits for the host, so such steps can be recorded.

constexpr int kGroupThreads = 256;

// One block. Shared memory: E + 1 counts and E + 2 group offsets. Writes
// each grouped row's route, its source row of x (the route's token, route /
// k, where x has a row per token) and the tiles.
__global__ void __launch_bounds__(kGroupThreads)
    GroupExpertsKernel(const int32_t* __restrict__ ids, int R, int E, int k, bool per_token, int tile_rows,
                       int64_t tile_bound, int32_t* sources, int32_t* routes, ExpertTile* tiles) {
  PdlPrologue();
  extern __shared__ int32_t group_smem[];
  int32_t* counts = group_smem;         // E + 1
  int32_t* begin = group_smem + E + 1;  // E + 2
  for (int g = threadIdx.x; g <= E; g += blockDim.x) counts[g] = 0;
  __syncthreads();
  for (int r = threadIdx.x; r < R; r += blockDim.x) atomicAdd(&counts[ExpertOf(ids[r], E)], 1);
  __syncthreads();
  if (threadIdx.x == 0) ExpertOffsets(counts, E, tile_rows, tile_bound, begin, tiles);
  __syncthreads();
  for (int g = threadIdx.x; g <= E; g += blockDim.x) PlaceGroup(ids, R, E, g, begin[g], routes);
  __syncthreads();  // global writes of the block are visible to it past the barrier
  for (int i = threadIdx.x; i < R; i += blockDim.x) {
    const int32_t r = routes[i];
    sources[i] = per_token ? r / k : r;
  }
}

// Block (tile t, column tile n): tile t's rows of x (grouped, contiguous)
// times its expert's weights, the few-row variant's arithmetic (so each
// row's result is LaunchMmaGemm's on the row alone), plus the expert's bias
// row; a tile of group E (ids out of range) writes zero rows.
template <typename T, int MT>
__global__ void __launch_bounds__(32 * kMmaMaxSegments)
    MmaGemmGroupedKernel(const T* __restrict__ x, const T* const* __restrict__ experts, int E,
                         const ExpertTile* __restrict__ tiles, const float* bias, int N, int K, float* out) {
  PdlPrologue();
  const ExpertTile tile = tiles[blockIdx.x];
  if (tile.rows == 0) return;
  const int n0 = blockIdx.y * 8;
  float* rows_out = out + static_cast<int64_t>(tile.row) * N;
  if (tile.expert < 0 || tile.expert >= E) {
    for (int i = threadIdx.x; i < tile.rows * 8; i += blockDim.x) {
      const int n = n0 + i % 8;
      if (n < N) rows_out[static_cast<int64_t>(i / 8) * N + n] = 0.0f;
    }
    return;
  }
  MmaFewRowsBlock<T, MT, 1>(x + static_cast<int64_t>(tile.row) * K, experts[tile.expert],
                            bias != nullptr ? bias + static_cast<int64_t>(tile.expert) * N : nullptr,
                            /*accumulate=*/false, tile.rows, N, K, 0, n0, rows_out);
}

template <typename T>
cudaError_t LaunchMmaGemmGroupedTyped(const T* x, const T* const* experts, int E, const ExpertTile* tiles,
                                      int64_t tile_bound, int tile_rows, const float* bias, int N, int K,
                                      float* out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(tile_bound), (N + 7) / 8), block(32 * MmaGemmSegments(K));
  switch (tile_rows) {
    case 16:
      LaunchKernel(MmaGemmGroupedKernel<T, 1>, grid, block, 0, stream, x, experts, E, tiles, bias, N, K, out);
      break;
    case 32:
      LaunchKernel(MmaGemmGroupedKernel<T, 2>, grid, block, 0, stream, x, experts, E, tiles, bias, N, K, out);
      break;
    case 64:
      LaunchKernel(MmaGemmGroupedKernel<T, 4>, grid, block, 0, stream, x, experts, E, tiles, bias, N, K, out);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int bytes = valid ? 16 : 0;  // 0: the 16 bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Many rows: tiles of 64 x 128 outputs per block (8 warps of 32 x 32), k in
// steps of 32 through a 4-stage cp.async pipeline in (dynamic) shared
// memory. Each warp sums a segment of K from zero in registers; at the
// segment's end the sum is added to the sum so far, which waits in shared
// memory (so the loop keeps only one set of accumulators in registers): the
// same arithmetic as MmaSegment's, per output.
constexpr int kTileM = 64, kTileN = 128, kTileK = 32, kTileStages = 4, kTileWarps = 8;
constexpr int kTileSums = kTileWarps * 32 * 32;  // floats: each warp's 32 x 32 outputs
template <typename T>
constexpr int kTileSmemBytes =
    kTileStages * (kTileM + kTileN) * kTileK * static_cast<int>(sizeof(T)) + kTileSums * 4;

template <typename T>
__global__ void __launch_bounds__(32 * kTileWarps, 2)
    MmaGemmTiledKernel(const T* __restrict__ x, const T* __restrict__ w, const float* bias,
                       bool accumulate, int M, int N, int K, float* out) {
  PdlPrologue();
  extern __shared__ __align__(16) unsigned char tile_smem[];
  auto xs = reinterpret_cast<T(*)[kTileM][kTileK]>(tile_smem);
  auto ws = reinterpret_cast<T(*)[kTileN][kTileK]>(tile_smem + kTileStages * kTileM * kTileK * sizeof(T));
  float* sums = reinterpret_cast<float*>(tile_smem + kTileStages * (kTileM + kTileN) * kTileK * sizeof(T));
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
  const int bm = blockIdx.y * kTileM, bn = blockIdx.x * kTileN;
  const int wm = (warp >> 2) * 32, wn = (warp & 3) * 32;
  const int tiles = K / kTileK, segment_tiles = MmaSegmentLength(K) / kTileK;
  // This warp's sums so far: [value i][lane], conflict-free.
  float* my_sums = sums + warp * 32 * 32;

  // What this thread copies each tile: one 16-byte piece of x, two of w
  // (rows past M or N are zero-filled from row 0's address).
  const int xr = tid >> 2, xc = (tid & 3) * 8;
  const T* xsrc = x + static_cast<int64_t>(bm + xr < M ? bm + xr : 0) * K + xc;
  const bool xok = bm + xr < M;
  const T* wsrc[2];
  bool wok[2];
  int wr[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    wr[i] = (tid >> 2) + 64 * i;
    wok[i] = bn + wr[i] < N;
    wsrc[i] = w + static_cast<int64_t>(wok[i] ? bn + wr[i] : 0) * K + xc;
  }
  auto load_tile = [&](int stage, int t) {
    const int k = t * kTileK;
    CpAsync16(&xs[stage][xr][xc], xsrc + k, xok);
    CpAsync16(&ws[stage][wr[0]][xc], wsrc[0] + k, wok[0]);
    CpAsync16(&ws[stage][wr[1]][xc], wsrc[1] + k, wok[1]);
  };

  float acc[2][4][4];
  ZeroTiles(acc);

#pragma unroll
  for (int s = 0; s < kTileStages - 1; ++s) {
    if (s < tiles) load_tile(s, s);
    CpAsyncCommit();
  }
  int stage = 0, segment_left = segment_tiles;
  bool first = true;
  for (int t = 0; t < tiles; ++t) {
    CpAsyncWait<kTileStages - 2>();
    __syncthreads();  // tile t is in; every warp is done with the stage refilled next
    {
      const int p = t + kTileStages - 1;
      if (p < tiles) load_tile(stage == 0 ? kTileStages - 1 : stage - 1, p);
      CpAsyncCommit();
    }
    uint4 a[2][2], b[4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        a[mt][h] = *reinterpret_cast<const uint4*>(&xs[stage][wm + 16 * mt + 8 * h + g][8 * q]);
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) b[nt] = *reinterpret_cast<const uint4*>(&ws[stage][wn + 8 * nt + g][8 * q]);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        Mma16816<T>(acc[mt][nt], a[mt][0].x, a[mt][1].x, a[mt][0].y, a[mt][1].y, b[nt].x, b[nt].y);
        Mma16816<T>(acc[mt][nt], a[mt][0].z, a[mt][1].z, a[mt][0].w, a[mt][1].w, b[nt].z, b[nt].w);
      }
    }
    stage = stage + 1 == kTileStages ? 0 : stage + 1;
    if (--segment_left == 0 || t + 1 == tiles) {  // a segment ends
      segment_left = segment_tiles;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            float* slot = my_sums + ((mt * 4 + nt) * 4 + i) * 32 + lane;
            *slot = first ? acc[mt][nt][i] : __fadd_rn(*slot, acc[mt][nt][i]);
            acc[mt][nt][i] = 0.0f;
          }
      first = false;
    }
  }
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = my_sums[((mt * 4 + nt) * 4 + i) * 32 + lane];
  MmaStore<2, 4>(acc, M, N, bm + wm, bn + wn, bias, accumulate, out);
}

template <typename T>
cudaError_t LaunchMmaGemmTyped(const T* x, const T* w, const float* bias, bool accumulate, int M,
                               int N, int K, float* out, cudaStream_t stream) {
  const int tiles = (M + 15) / 16;
  if (tiles <= kMmaFewRowsMaxTiles) {
    const int segments = (K + MmaSegmentLength(K) - 1) / MmaSegmentLength(K);
    const dim3 grid((N + 7) / 8), block(32 * segments);
    switch (tiles) {
      case 1:
        LaunchKernel(MmaGemmFewRowsKernel<T, 1, 1>, grid, block, 0, stream, x, w, bias, accumulate,
                     M, N, K, out);
        break;
      case 2:
        LaunchKernel(MmaGemmFewRowsKernel<T, 2, 1>, grid, block, 0, stream, x, w, bias, accumulate,
                     M, N, K, out);
        break;
      case 3:
        LaunchKernel(MmaGemmFewRowsKernel<T, 3, 1>, grid, block, 0, stream, x, w, bias, accumulate,
                     M, N, K, out);
        break;
      default:
        LaunchKernel(MmaGemmFewRowsKernel<T, 4, 1>, grid, block, 0, stream, x, w, bias, accumulate,
                     M, N, K, out);
        break;
    }
  } else {
    // Over 48 KB of shared memory needs the kernel's limit raised, once per
    // device (a function attribute, not a stream operation).
    static std::atomic<uint64_t> raised{0};
    int device = 0;
    if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
    const uint64_t bit = uint64_t{1} << (device & 63);
    if ((raised.load() & bit) == 0) {
      if (cudaError_t e = cudaFuncSetAttribute(MmaGemmTiledKernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               kTileSmemBytes<T>);
          e != cudaSuccess) {
        return e;
      }
      raised.fetch_or(bit);
    }
    const dim3 grid((N + kTileN - 1) / kTileN, (M + kTileM - 1) / kTileM), block(32 * kTileWarps);
    LaunchKernel(MmaGemmTiledKernel<T>, grid, block, kTileSmemBytes<T>, stream, x, w, bias,
                 accumulate, M, N, K, out);
  }
  return cudaGetLastError();
}

// ---- A vision encoder's attention ---------------------------------------------
//
// One warp per (row, head): the row's scores against every row of its group
// (group_ends: each group's end row, increasing, in device memory), in row
// order, through an online softmax (a running max m and sum l, the output
// rescaled as m grows), all in f32. Each lane holds head dims lane, lane +
// 32, ...; a score is the warp's butterfly sum, the same in every lane. A
// row's result depends on its group's rows alone.
constexpr int kEncoderMaxHeadDim = 256;
constexpr int kEncoderWarpsPerBlock = 4;

__global__ void __launch_bounds__(32 * kEncoderWarpsPerBlock)
    EncoderAttentionKernel(const float* __restrict__ qkv, const int32_t* __restrict__ group_ends, int groups,
                           int T, int H, int D, float scale, float* __restrict__ out) {
  PdlPrologue();
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= static_cast<int64_t>(T) * H) return;
  const int t = static_cast<int>(warp / H), h = static_cast<int>(warp % H);
  // The row's group: the first whose end is past t.
  int lo = 0, hi = groups - 1;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (group_ends[mid] > t) hi = mid; else lo = mid + 1;
  }
  const int begin = lo == 0 ? 0 : group_ends[lo - 1], end = group_ends[lo];
  const int64_t W = 3LL * H * D;
  constexpr int kPer = kEncoderMaxHeadDim / 32;
  float q[kPer], acc[kPer];
  const float* qrow = qkv + t * W + static_cast<int64_t>(h) * D;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int c = lane + 32 * i;
    q[i] = c < D ? qrow[c] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int j = begin; j < end; ++j) {
    const float* krow = qkv + j * W + static_cast<int64_t>(H + h) * D;
    const float* vrow = krow + static_cast<int64_t>(H) * D;
    float part = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = lane + 32 * i;
      if (c < D) part = fmaf(q[i], krow[c], part);
    }
    const float score = WarpSum(part) * scale;
    const float m_new = fmaxf(m, score);
    const float rescale = expf(m - m_new), p = expf(score - m_new);
    l = l * rescale + p;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = lane + 32 * i;
      if (c < D) acc[i] = fmaf(p, vrow[c], acc[i] * rescale);
    }
    m = m_new;
  }
  float* orow = out + (static_cast<int64_t>(t) * H + h) * D;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int c = lane + 32 * i;
    if (c < D) orow[c] = acc[i] / l;
  }
}

// ---- LayerNorm ------------------------------------------------------------

template <typename OutT>
__global__ void LayerNormKernel(const float* x, int C, const float* gamma, const float* beta,
                                float eps, OutT* out) {
  PdlPrologue();
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  const float* xr = x + row * C;
  float s = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) s += xr[c];
  const float mean = BlockReduce<false>(s, red) / C;
  float v = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = xr[c] - mean;
    v += d * d;
  }
  const float rstd = 1.0f / sqrtf(BlockReduce<false>(v, red) / C + eps);
  OutT* o = out + row * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    o[c] = FromFloat<OutT>((xr[c] - mean) * rstd * gamma[c] + beta[c]);
  }
}

template <typename OutT>
__global__ void RmsNormKernel(const float* x, int C, const float* gamma, float eps, OutT* out) {
  PdlPrologue();
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  const float* xr = x + row * C;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) ss += xr[c] * xr[c];
  const float rstd = 1.0f / sqrtf(BlockReduce<false>(ss, red) / C + eps);
  OutT* o = out + row * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = FromFloat<OutT>(gamma[c] * (xr[c] * rstd));
}

// grid T, block kElementwiseThreads: row t's Q and K heads, pair i of the
// first 2 * half dims of each: (i, i + half), or (2i, 2i + 1) interleaved.
// Multimodal (mrope.rows 3): frequency i by row MropeRow of the positions
// [3, T] (RopeParams::mrope_t).
struct MropeArgs {
  int rows = 1, t = 0, h = 0, w = 0;
  bool interleaved = false;
};

__device__ __forceinline__ int MropeRowOf(const MropeArgs& m, int i) {
  if (m.interleaved) return (i % 3 == 1 && i < 3 * m.h) ? 1 : (i % 3 == 2 && i < 3 * m.w) ? 2 : 0;
  return i < m.t ? 0 : i < m.t + m.h ? 1 : 2;
}

__global__ void RopeKernel(float* qkv, const int32_t* positions, const float* inv_freq,
                           int rotated_heads, int head_dim, int half, bool interleaved,
                           float scale, int64_t row_width, MropeArgs mrope, int T) {
  PdlPrologue();
  const int t = blockIdx.x;
  const int a_step = interleaved ? 2 : 1, b_off = interleaved ? 1 : half;
  float* row = qkv + t * row_width;
  for (int j = threadIdx.x; j < rotated_heads * half; j += blockDim.x) {
    const int h = j / half, i = j % half;
    const int32_t at = mrope.rows == 3 ? positions[MropeRowOf(mrope, i) * T + t] : positions[t];
    const float p = static_cast<float>(at);
    float c, s;
    sincosf(p * inv_freq[i], &s, &c);
    c *= scale;
    s *= scale;
    float* v = row + static_cast<int64_t>(h) * head_dim + i * a_step;
    const float a = v[0], b = v[b_off];
    v[0] = a * c - b * s;
    v[b_off] = b * c + a * s;
  }
}

// act(gate) * up: silu, or gelu's tanh form (as GeluKernel).
template <typename OutT, GluKind kKind>
__global__ void GluKernel(const float* gate_up, int64_t n, int F, OutT* out) {
  PdlPrologue();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / F, f = i % F;
    float g = gate_up[t * 2 * F + f], u = gate_up[t * 2 * F + F + f];
    float a;
    if constexpr (kKind == GluKind::kGeluTanh) {
      a = g / (1.0f + expf(-2.0f * (0.7978845608028654f * (g + 0.044715f * g * g * g))));
    } else if constexpr (kKind == GluKind::kSwigluOai) {
      g = fminf(g, kSwigluOaiLimit);
      u = fminf(fmaxf(u, -kSwigluOaiLimit), kSwigluOaiLimit) + 1.0f;
      a = g / (1.0f + expf(-kSwigluOaiAlpha * g));
    } else {
      a = g / (1.0f + expf(-g));
    }
    out[i] = FromFloat<OutT>(a * u);
  }
}

// grid (T, groups), block 32: one warp per group of one row, summing in a
// fixed order (each lane's stride, then the butterfly), so every row's
// result is the same in any batch.
__global__ void GroupRmsNormKernel(float* x, int W, int first, int G, const float* gamma, float eps) {
  PdlPrologue();
  float* v = x + int64_t{blockIdx.x} * W + first + int64_t{blockIdx.y} * G;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < G; c += 32) ss += v[c] * v[c];
  for (int offset = 16; offset > 0; offset /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, offset);
  const float rstd = 1.0f / sqrtf(ss / G + eps);
  for (int c = threadIdx.x; c < G; c += 32) v[c] = gamma[c] * (v[c] * rstd);
}

// ---- Mixture of experts --------------------------------------------------

struct Expf {
  __host__ __device__ float operator()(float v) const { return expf(v); }
};

// One thread per row: the host's steps (RouteRow), in its order.
__global__ void RouteKernel(const float* logits, int T, int E, RouterParams p, int32_t* ids, float* weights) {
  PdlPrologue();
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= T) return;
  RouteRow(logits + int64_t{t} * E, E, p, ids + int64_t{t} * p.k, weights + int64_t{t} * p.k, Expf());
}

// grid n, block 256: one row each.
__global__ void CopyRowsKernel(const char* src, const int32_t* src_rows, char* dst, const int32_t* dst_rows,
                               int64_t row_bytes) {
  PdlPrologue();
  const int i = blockIdx.x;
  const char* from = src + (src_rows != nullptr ? src_rows[i] : i) * row_bytes;
  char* to = dst + (dst_rows != nullptr ? dst_rows[i] : i) * row_bytes;
  for (int64_t b = threadIdx.x; b < row_bytes; b += blockDim.x) to[b] = from[b];
}

// grid T, block kElementwiseThreads: row t's columns.
__global__ void WeightedRowSumKernel(const float* y, const float* weights, int k, int C, float* out) {
  PdlPrologue();
  const int64_t t = blockIdx.x;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += weights[t * k + j] * y[(t * k + j) * C + c];
    out[t * C + c] += sum;
  }
}

__global__ void SoftCapKernel(float* x, int64_t n, float cap) {
  PdlPrologue();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = tanhf(x[i] / cap) * cap;
  }
}

__global__ void ScaleKernel(float* x, int64_t n, float s) {
  PdlPrologue();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] *= s;
  }
}

__global__ void SigmoidKernel(float* x, int64_t n) {
  PdlPrologue();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = 1.0f / (1.0f + expf(-x[i]));
  }
}

// ---- KV cache and attention -------------------------------------------------

// The sequence holding batch row `row`: seqs are ordered by their first row.
__device__ __forceinline__ int FindSeq(const int32_t* seqs, int num_seqs, int row) {
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (seqs[mid * 4 + 3] <= row) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// KvLayer's addressing, for device code: position p of a sequence whose
// block list starts at `blocks` is in block blocks[p / kBlockSize].
struct KvView {
  const int32_t* block_ids;  // the step's block table
  int num_blocks, head_dim;

  // Start of key/value head h of the block holding position p (head-major:
  // as KvLayer::head_block).
  __device__ int64_t HeadBlock(const int32_t* blocks, int p, int h) const {
    return (static_cast<int64_t>(h) * num_blocks + blocks[p / KvLayer::kBlockSize]) * head_dim *
           KvLayer::kBlockSize;
  }
  __device__ static int Key(int d, int p) { return d * KvLayer::kBlockSize + p % KvLayer::kBlockSize; }
  __device__ int Value(int d, int p) const { return (p % KvLayer::kBlockSize) * head_dim + d; }
};

KvView ViewOf(const KvLayer& kv, const int32_t* block_ids) {
  return KvView{block_ids, kv.num_blocks, kv.head_dim};
}

// grid (T, Hkv), block D: row t's K and V of key/value head h into the
// block of its position. A row of qkv is [Q (Hq * D) | K (Hkv * D) | V (Hkv * D)].
template <typename KT>
__global__ void KvAppendKernel(const float* qkv, const int32_t* seqs, int num_seqs, int q_heads,
                               int kv_heads, KvView kv, KT* keys, KT* values) {
  PdlPrologue();
  const int row = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const int s = FindSeq(seqs, num_seqs, row);
  const int32_t* blocks = kv.block_ids + seqs[s * 4];
  const int pos = seqs[s * 4 + 1] + (row - seqs[s * 4 + 3]);
  const int D = kv.head_dim;
  const int64_t QD = static_cast<int64_t>(q_heads) * D, HD = static_cast<int64_t>(kv_heads) * D;
  const float* r = qkv + row * (QD + 2 * HD);
  const int64_t base = kv.HeadBlock(blocks, pos, h);
  keys[base + KvView::Key(d, pos)] = FromFloat<KT>(r[QD + h * D + d]);
  values[base + kv.Value(d, pos)] = FromFloat<KT>(r[QD + HD + h * D + d]);
}

// The positions [first, n) row `row` of sequence s attends to: its own
// and those before it (the last `window` with a window), and up to its
// horizon where one is given (SeqTable::horizon).
struct AttendedRange {
  int seq, first, n;
};
__device__ __forceinline__ AttendedRange AttendedOf(const int32_t* seqs, int num_seqs, int row, int window,
                                                    const int32_t* horizon) {
  const int s = FindSeq(seqs, num_seqs, row);
  const int own = seqs[s * 4 + 1] + (row - seqs[s * 4 + 3]) + 1;
  return {s, window > 0 ? max(0, own - window) : 0, horizon != nullptr ? horizon[row] + 1 : own};
}

// grid (T, Hq, chunks), kAttentionThreads threads: row t, query head h
// (reading key/value head h / (Hq / Hkv)), positions
// [first + c * kAttentionChunk, ...) of its context. A context of one chunk is
// finished here (normalized weights, then the weighted sum, as the CPU
// does); a longer one leaves per-chunk (output, max, sum) in `work` for
// AttentionMergeKernel.
//
// kFixedD > 0 compiles for that head dim (64: GPT-2's and Llama-1B's; 128:
// Qwen3's, Llama 3's, Mistral's and OLMoE's; 256: Gemma's): the score loop
// unrolls (completely up to 128, 64 at a time for 256), so a position's key
// loads are in flight together instead of eight at a time; 0 reads it from
// kv (any head dim up to kMaxHeadDim: Gemma 4's global layers' 512). The
// sums run in the same order either way.
template <typename KT, typename OutT, int kFixedD>
__global__ void __launch_bounds__(kAttentionThreads)
    AttentionKernel(const float* qkv, const int32_t* seqs, int num_seqs, int H, int kv_heads,
                    KvView kv, const KT* keys, const KT* values, AttentionParams params,
                    const int32_t* horizon, OutT* out, float* work, int max_chunks) {
  PdlPrologue();
  // A fixed head dim sizes what the block keeps by it; the generic kernel
  // (kFixedD 0) by the largest it takes.
  constexpr int kDims = kFixedD > 0 ? kFixedD : kMaxHeadDim;
  __shared__ float q[kDims];
  __shared__ float weights[kAttentionChunk];
  __shared__ float red[32];
  __shared__ float partial[kAttentionWarps][kDims];

  const int row = blockIdx.x, h = blockIdx.y, chunk = blockIdx.z;
  const AttendedRange range = AttendedOf(seqs, num_seqs, row, params.window, horizon);
  const int32_t* blocks = kv.block_ids + seqs[range.seq * 4];
  const int n = range.n, first = range.first;
  const int chunks = (n - first + kAttentionChunk - 1) / kAttentionChunk;
  if (chunk >= chunks) return;  // the whole block: this row's context is shorter
  const int p0 = first + chunk * kAttentionChunk;
  const int len = min(n - p0, kAttentionChunk);
  const int D = kFixedD > 0 ? kFixedD : kv.head_dim;
  const int64_t HD = static_cast<int64_t>(H) * D;  // a row of out; Q's part of a row of qkv
  // [Q | K | V], or Q alone (a layer that reads another's K and V).
  const int64_t row_stride = HD + (params.q_only ? 0 : 2 * static_cast<int64_t>(kv_heads) * D);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float scale = params.scale > 0 ? params.scale : 1.0f / sqrtf(static_cast<float>(D));
  const float softcap = params.softcap;

  for (int d = tid; d < D; d += kAttentionThreads) q[d] = qkv[row * row_stride + h * D + d] * scale;
  __syncthreads();

  // Scores: a warp takes 32 consecutive positions, one key block, so each
  // dim's 32 keys are one coalesced read.
  const int kv_head = h / (H / kv_heads);
  float local_max = -INFINITY;
  for (int j = tid; j < len; j += kAttentionThreads) {
    const int p = p0 + j;
    const KT* k = keys + kv.HeadBlock(blocks, p, kv_head) + KvView::Key(0, p);
    float acc = 0.0f;
    // Unrolled so that loads are in flight before the first sum needs one
    // (the sums still run in order of d: the same result).
    if constexpr (kFixedD > 0 && kFixedD <= 128) {
#pragma unroll
      for (int d = 0; d < kFixedD; ++d) acc = fmaf(q[d], ToFloat(k[d * KvLayer::kBlockSize]), acc);
    } else if constexpr (kFixedD > 0) {
      // 256 loads in flight would spill: 64 at a time.
#pragma unroll 64
      for (int d = 0; d < kFixedD; ++d) acc = fmaf(q[d], ToFloat(k[d * KvLayer::kBlockSize]), acc);
    } else {
#pragma unroll 8
      for (int d = 0; d < D; ++d) acc = fmaf(q[d], ToFloat(k[d * KvLayer::kBlockSize]), acc);
    }
    if (softcap > 0) acc = tanhf(acc / softcap) * softcap;  // as transformers
    weights[j] = acc;
    local_max = fmaxf(local_max, acc);
  }
  // A sink (gpt-oss) joins the softmax as a score with no value: here when
  // the row is one chunk, else in the merge.
  const float sink = params.sinks != nullptr && chunks == 1 ? params.sinks[h] : -INFINITY;
  const float mx = fmaxf(BlockReduce<true>(local_max, red), sink);
  float local_sum = 0.0f;
  for (int j = tid; j < len; j += kAttentionThreads) {
    const float e = expf(weights[j] - mx);
    weights[j] = e;
    local_sum += e;
  }
  float sum = BlockReduce<false>(local_sum, red);
  if (sink > -INFINITY) sum += expf(sink - mx);
  if (chunks == 1) {
    const float inv = 1.0f / sum;
    for (int j = tid; j < len; j += kAttentionThreads) weights[j] *= inv;
  }
  __syncthreads();

  // Weighted sum of values: warp w takes positions w, w + 4, ... in order;
  // lane l dims l, l + 32, ...; the warps' parts are then added in order.
  constexpr int kDimsPerLane = kDims / 32;
  float acc[kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) acc[i] = 0.0f;
#pragma unroll 8
  for (int j = warp; j < len; j += kAttentionWarps) {
    const float w = weights[j];
    const int p = p0 + j;
    const KT* v = values + kv.HeadBlock(blocks, p, kv_head) + kv.Value(0, p);
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < D) acc[i] = fmaf(w, ToFloat(v[d]), acc[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < D) partial[warp][d] = acc[i];
  }
  __syncthreads();
  for (int d = tid; d < D; d += kAttentionThreads) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kAttentionWarps; ++w) o += partial[w][d];
    if (chunks == 1) {
      out[row * HD + h * D + d] = FromFloat<OutT>(o);
    } else {
      float* part = work + ((static_cast<int64_t>(row) * H + h) * max_chunks + chunk) * (D + 2);
      part[d] = o;
      if (d == 0) {
        part[D] = mx;
        part[D + 1] = sum;
      }
    }
  }
}

// grid (T, H), block D: rows whose context took several chunks merge them,
// chunk after chunk: o = sum_c o_c e^(m_c - m) / sum_c l_c e^(m_c - m).
template <typename OutT>
__global__ void AttentionMergeKernel(const int32_t* seqs, int num_seqs, int H, int D, int window,
                                     const int32_t* horizon, const float* sinks, const float* work, int max_chunks,
                                     OutT* out) {
  PdlPrologue();
  const int row = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const AttendedRange range = AttendedOf(seqs, num_seqs, row, window, horizon);
  const int chunks = (range.n - range.first + kAttentionChunk - 1) / kAttentionChunk;
  if (chunks == 1) return;
  const float* parts = work + (static_cast<int64_t>(row) * H + h) * max_chunks * (D + 2);
  const float sink = sinks != nullptr ? sinks[h] : -INFINITY;
  float m = sink;
  for (int c = 0; c < chunks; ++c) m = fmaxf(m, parts[c * (D + 2) + D]);
  float l = sinks != nullptr ? expf(sink - m) : 0.0f, o = 0.0f;
  for (int c = 0; c < chunks; ++c) {
    const float* part = parts + c * (D + 2);
    const float scale = expf(part[D] - m);
    l += part[D + 1] * scale;
    o += part[d] * scale;
  }
  out[static_cast<int64_t>(row) * H * D + h * D + d] = FromFloat<OutT>(o / l);
}

__global__ void GatherLastRowsKernel(const float* x, const int32_t* seqs, int C, float* out) {
  PdlPrologue();
  const int s = blockIdx.x;
  const int64_t row = seqs[s * 4 + 3] + seqs[s * 4 + 2] - 1;
  for (int c = threadIdx.x; c < C; c += blockDim.x) out[s * int64_t{C} + c] = x[row * C + c];
}

template <typename KT, typename OutT>
cudaError_t Attend(const float* qkv, const int32_t* seqs, const int32_t* block_ids, const int32_t* horizon, int num_seqs,
                   int T, int max_context, int q_heads, const KvLayer& kv,
                   const AttentionParams& params, void* out, float* work, cudaStream_t stream) {
  // A horizon may reach past the window's span: then the whole context.
  const int longest = params.window > 0 && horizon == nullptr ? min(max_context, params.window) : max_context;
  const int chunks = (longest + kAttentionChunk - 1) / kAttentionChunk;
  const KvView view = ViewOf(kv, block_ids);
  const dim3 grid(T, q_heads, chunks);
  if (kv.head_dim == 64) {
    LaunchKernel(AttentionKernel<KT, OutT, 64>, grid, kAttentionThreads, 0, stream, qkv, seqs,
                 num_seqs, q_heads, kv.heads, view, static_cast<const KT*>(kv.k),
                 static_cast<const KT*>(kv.v), params, horizon, static_cast<OutT*>(out), work, chunks);
  } else if (kv.head_dim == 128) {
    LaunchKernel(AttentionKernel<KT, OutT, 128>, grid, kAttentionThreads, 0, stream, qkv, seqs,
                 num_seqs, q_heads, kv.heads, view, static_cast<const KT*>(kv.k),
                 static_cast<const KT*>(kv.v), params, horizon, static_cast<OutT*>(out), work, chunks);
  } else if (kv.head_dim == 256) {
    LaunchKernel(AttentionKernel<KT, OutT, 256>, grid, kAttentionThreads, 0, stream, qkv, seqs,
                 num_seqs, q_heads, kv.heads, view, static_cast<const KT*>(kv.k),
                 static_cast<const KT*>(kv.v), params, horizon, static_cast<OutT*>(out), work, chunks);
  } else {
    LaunchKernel(AttentionKernel<KT, OutT, 0>, grid, kAttentionThreads, 0, stream, qkv, seqs,
                 num_seqs, q_heads, kv.heads, view, static_cast<const KT*>(kv.k),
                 static_cast<const KT*>(kv.v), params, horizon, static_cast<OutT*>(out), work, chunks);
  }
  if (chunks > 1) {
    LaunchKernel(AttentionMergeKernel<OutT>, dim3(T, q_heads), kv.head_dim, 0, stream, seqs,
                 num_seqs, q_heads, kv.head_dim, params.window, horizon, params.sinks, work, chunks,
                 static_cast<OutT*>(out));
  }
  return cudaGetLastError();
}

template <typename KT>
cudaError_t AttendKv(const float* qkv, const int32_t* seqs, const int32_t* block_ids, const int32_t* horizon, int num_seqs,
                     int T, int max_context, int q_heads, const KvLayer& kv,
                     const AttentionParams& params, void* out, DType out_dtype, float* work,
                     cudaStream_t stream) {
  switch (out_dtype) {
    case DType::kF32:
      return Attend<KT, float>(qkv, seqs, block_ids, horizon, num_seqs, T, max_context, q_heads, kv, params,
                               out, work, stream);
    case DType::kBF16:
      return Attend<KT, __nv_bfloat16>(qkv, seqs, block_ids, horizon, num_seqs, T, max_context, q_heads, kv,
                                       params, out, work, stream);
    case DType::kF16:
      return Attend<KT, __half>(qkv, seqs, block_ids, horizon, num_seqs, T, max_context, q_heads, kv, params,
                                out, work, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

// ---- Quantized blocks (--dtype=native) -------------------------------------

// Dequantization exactly as ggml's (dequantize_row_*): every product and sum
// rounded on its own (no fused multiply-add), so each weight is the f32 value
// gguf-py's dequantize gives.
__device__ inline float HalfAt(const uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(p)));
}

// 32 bytes at p: two 16-byte loads where p is 16-byte aligned (kAligned),
// else byte loads. The values are the same either way.
union Bytes32 {
  uint4 v[2];
  uint8_t b[32];
};
template <bool kAligned>
__device__ inline Bytes32 Load32(const uint8_t* p) {
  Bytes32 out;
  if constexpr (kAligned) {
    out.v[0] = reinterpret_cast<const uint4*>(p)[0];
    out.v[1] = reinterpret_cast<const uint4*>(p)[1];
  } else {
#pragma unroll
    for (int i = 0; i < 32; ++i) out.b[i] = p[i];
  }
  return out;
}

// An MXFP4 code's value: e2m1 doubled (0, 1, 2, 3, 4, 6, 8, 12), bit 3 the sign.
__device__ inline int Mxfp4Value(int q) {
  const int m = q & 7;
  const int v = m < 5 ? m : (m == 5 ? 6 : (m == 6 ? 8 : 12));
  return (q & 8) ? -v : v;
}

// The 32 weights of sub-block s (values 32s .. 32s + 31) of one row.
// kAligned: the row starts 16-byte aligned and its length is a multiple of
// 16 bytes, so the K-quants' 32-byte runs of codes load 16 bytes at a time.
template <BlockFormat F, bool kAligned>
__device__ inline void Dequant32(const uint8_t* row, int s, float* w) {
  if constexpr (F == BlockFormat::kQ8_0) {
    const uint8_t* b = row + 34 * s;
    const float d = HalfAt(b);
#pragma unroll
    for (int i = 0; i < 32; ++i) w[i] = __fmul_rn(static_cast<float>(static_cast<int8_t>(b[2 + i])), d);
  } else if constexpr (F == BlockFormat::kQ4_0) {
    const uint8_t* b = row + 18 * s;
    const float d = HalfAt(b);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      w[i] = __fmul_rn(static_cast<float>((b[2 + i] & 0xF) - 8), d);
      w[16 + i] = __fmul_rn(static_cast<float>((b[2 + i] >> 4) - 8), d);
    }
  } else if constexpr (F == BlockFormat::kQ4_1) {
    const uint8_t* b = row + 20 * s;
    const float d = HalfAt(b), m = HalfAt(b + 2);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      w[i] = __fadd_rn(__fmul_rn(static_cast<float>(b[4 + i] & 0xF), d), m);
      w[16 + i] = __fadd_rn(__fmul_rn(static_cast<float>(b[4 + i] >> 4), d), m);
    }
  } else if constexpr (F == BlockFormat::kQ5_0 || F == BlockFormat::kQ5_1) {
    constexpr bool kMin = F == BlockFormat::kQ5_1;
    const uint8_t* b = row + (kMin ? 24 : 22) * s;
    const float d = HalfAt(b);
    const uint8_t* qh = b + (kMin ? 4 : 2);
    const uint32_t high = qh[0] | (uint32_t{qh[1]} << 8) | (uint32_t{qh[2]} << 16) | (uint32_t{qh[3]} << 24);
    const uint8_t* qs = qh + 4;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int lo = (qs[i] & 0xF) | (((high >> i) & 1) << 4);
      const int hi = (qs[i] >> 4) | (((high >> (16 + i)) & 1) << 4);
      if constexpr (kMin) {
        const float m = HalfAt(b + 2);
        w[i] = __fadd_rn(__fmul_rn(static_cast<float>(lo), d), m);
        w[16 + i] = __fadd_rn(__fmul_rn(static_cast<float>(hi), d), m);
      } else {
        w[i] = __fmul_rn(static_cast<float>(lo - 16), d);
        w[16 + i] = __fmul_rn(static_cast<float>(hi - 16), d);
      }
    }
  } else if constexpr (F == BlockFormat::kQ4_K || F == BlockFormat::kQ5_K) {
    constexpr bool kFive = F == BlockFormat::kQ5_K;
    const uint8_t* b = row + (kFive ? 176 : 144) * (s / 8);
    const int j = s % 8;
    const uint8_t* q = b + 4;  // 12 bytes of 6-bit scales and minimums
    int sc, m;
    if (j < 4) {
      sc = q[j] & 63;
      m = q[j + 4] & 63;
    } else {
      sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
      m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
    const float d1 = __fmul_rn(HalfAt(b), static_cast<float>(sc));
    const float m1 = __fmul_rn(HalfAt(b + 2), static_cast<float>(m));
    // Q5_K: 32 bytes of fifth bits, bit j for sub-block j (K-quant blocks
    // are 144 and 176 bytes, multiples of 16: both runs stay aligned).
    const Bytes32 qh = kFive ? Load32<kAligned>(b + 16) : Bytes32{};
    const Bytes32 qs = Load32<kAligned>(b + (kFive ? 48 : 16) + 32 * (j / 2));
    const int shift = 4 * (j % 2);
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      const int q = ((qs.b[l] >> shift) & 0xF) | (kFive ? ((qh.b[l] >> j) & 1) << 4 : 0);
      w[l] = __fsub_rn(__fmul_rn(d1, static_cast<float>(q)), m1);
    }
  } else if constexpr (F == BlockFormat::kMXFP4) {
    // ggml_e8m0_to_fp32_half times the doubled e2m1 values (kvalues_mxfp4).
    const uint8_t* b = row + 17 * s;
    const uint32_t e = b[0];
    const float d = __uint_as_float(e < 2 ? (0x00200000u << e) : ((e - 1) << 23));
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      w[i] = __fmul_rn(d, static_cast<float>(Mxfp4Value(b[1 + i] & 0xF)));
      w[16 + i] = __fmul_rn(d, static_cast<float>(Mxfp4Value(b[1 + i] >> 4)));
    }
  } else {  // kQ6_K
    const uint8_t* b = row + 210 * (s / 8);
    const int j = s % 8, half = j / 4, quarter = j % 4;
    const uint8_t* ql = b + 64 * half + 32 * (quarter % 2);
    const uint8_t* qh = b + 128 + 32 * half;
    const int low_shift = 4 * (quarter / 2), high_shift = 2 * quarter;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * half + 2 * quarter);
    const float d = HalfAt(b + 208);
    const float d0 = __fmul_rn(d, static_cast<float>(sc[0])), d1 = __fmul_rn(d, static_cast<float>(sc[1]));
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      const int q = ((ql[l] >> low_shift) & 0xF) | (((qh[l] >> high_shift) & 3) << 4);
      w[l] = __fmul_rn(l < 16 ? d0 : d1, static_cast<float>(q - 32));
    }
  }
}

constexpr int kBlockWarps = 8;  // outputs per thread block
constexpr int kBlockRows = 8;   // input rows per pass over a row's weights

// One warp per output n of rows [0, rows): lane t sums its sub-blocks t,
// t + 32, ... in order (per sub-block a sum of 32 products in order), then
// the lanes are added in a fixed butterfly; rows of x go kBlockRows at a
// time through the same code, so a row's result never depends on M. Each
// sub-block is dequantized once per kBlockRows rows, and x is read 16
// bytes at a time (its rows are whole sub-blocks: 128-byte aligned).
// grid T, block kEmbedBlocksThreads: row t looks up its token's row of
// blocks; thread i dequantizes sub-blocks i, i + blockDim.x, ... (32 values
// each). The scale's product and the position's sum are rounded apart (no
// fused multiply-add), as the CPU does.
template <BlockFormat F>
__global__ void EmbedBlocksKernel(const int32_t* tokens, const int32_t* positions,
                                  const uint8_t* table, int64_t row_bytes, int vocab_begin,
                                  int64_t vocab_rows, float scale, const float* wpe, int C,
                                  float* out) {
  PdlPrologue();
  const int t = blockIdx.x;
  const int64_t token = int64_t{tokens[t]} - vocab_begin;
  const bool here = token >= 0 && token < vocab_rows;
  const uint8_t* row = table + (here ? token : 0) * row_bytes;
  const float* p = wpe != nullptr ? wpe + static_cast<int64_t>(positions[t]) * C : nullptr;
  float* o = out + static_cast<int64_t>(t) * C;
  for (int s = threadIdx.x; s < C / 32; s += blockDim.x) {
    float w[32];
    if (here) {
      Dequant32<F, false>(row, s, w);
    } else {
#pragma unroll
      for (int j = 0; j < 32; ++j) w[j] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      float v = here && scale != 1.0f ? __fmul_rn(w[j], scale) : w[j];
      if (p != nullptr) v = __fadd_rn(v, p[32 * s + j]);
      o[32 * s + j] = v;
    }
  }
}

template <BlockFormat F, bool kAligned>
__global__ void BlockLinearKernel(const float* x, int M, int K, const uint8_t* w, int64_t row_bytes,
                                  int rows, int row_begin, int N, const float* bias, bool gelu,
                                  bool accumulate, float* out) {
  PdlPrologue();
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * kBlockWarps + threadIdx.x / 32;
  if (n >= rows) return;
  const uint8_t* row = w + n * row_bytes;
  const int subs = K / 32;
  for (int m0 = 0; m0 < M; m0 += kBlockRows) {
    float acc[kBlockRows];
#pragma unroll
    for (int r = 0; r < kBlockRows; ++r) acc[r] = 0.0f;
    for (int s = lane; s < subs; s += 32) {
      float wv[32];
      Dequant32<F, kAligned>(row, s, wv);
#pragma unroll
      for (int r = 0; r < kBlockRows; ++r) {
        if (m0 + r < M) {
          const float4* xr = reinterpret_cast<const float4*>(x + int64_t{m0 + r} * K + 32 * s);
          float sum = 0.0f;
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const float4 v = xr[i];
            sum = __fmaf_rn(wv[4 * i + 0], v.x, sum);
            sum = __fmaf_rn(wv[4 * i + 1], v.y, sum);
            sum = __fmaf_rn(wv[4 * i + 2], v.z, sum);
            sum = __fmaf_rn(wv[4 * i + 3], v.w, sum);
          }
          acc[r] = __fadd_rn(acc[r], sum);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kBlockRows; ++r) {
      float v = acc[r];
#pragma unroll
      for (int o = 16; o > 0; o /= 2) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
      if (lane == 0 && m0 + r < M) {
        const int col = row_begin + n;
        if (bias != nullptr) v = __fadd_rn(v, bias[col]);
        float* o = out + int64_t{m0 + r} * N + col;
        if (gelu) {
          const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
          v = v / (1.0f + expf(-2.0f * u));
        }
        *o = accumulate ? __fadd_rn(*o, v) : v;
      }
    }
  }
}

// ---- Recurrent layers (hybrid models) ---------------------------------------

__device__ __forceinline__ float SiluF(float x) { return x / (1.0f + expf(-x)); }

// out = x * act(gate), elementwise.
__global__ void GateKernel(const float* x, const float* gate, GateKind act, float* out, int64_t n) {
  PdlPrologue();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = gate[i];
    const float f = act == GateKind::kSigmoid    ? 1.0f / (1.0f + expf(-g))
                    : act == GateKind::kSilu     ? SiluF(g)
                    : act == GateKind::kGeluTanh ? g / (1.0f + expf(-2.0f * (0.7978845608028654f * (g + 0.044715f * g * g * g))))
                                                 : g;
    out[i] = x[i] * f;
  }
}

// grid (num_seqs, channel blocks), block kElementwiseThreads: one thread per
// channel of one sequence, its rows in order of position through a window
// of the last K inputs (the read slot's K - 1 first, or zeros), the taps
// summed in index order as the CPU does.
__global__ void CausalConvKernel(const float* x, const int32_t* seqs, const int32_t* states, int64_t C, int K,
                                 const float* w, const float* bias, bool silu, float* conv, int64_t conv_elems,
                                 float* out) {
  PdlPrologue();
  const int64_t c = blockIdx.y * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  const int32_t* s = seqs + 4 * blockIdx.x;
  const int len = s[2], row = s[3];
  const int32_t read = states[2 * blockIdx.x], write = states[2 * blockIdx.x + 1];
  float u[kMaxConvKernel];
#pragma unroll
  for (int j = 0; j < kMaxConvKernel; ++j) {
    u[j] = (j < K - 1 && read >= 0) ? conv[read * conv_elems + j * C + c] : 0.0f;
  }
  for (int t = 0; t < len; ++t) {
    u[K - 1] = x[(row + t) * C + c];
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxConvKernel; ++j) {
      if (j < K) sum += w[c * K + j] * u[j];
    }
    if (bias != nullptr) sum += bias[c];
    out[(row + t) * C + c] = silu ? SiluF(sum) : sum;
#pragma unroll
    for (int j = 0; j + 1 < kMaxConvKernel; ++j) {
      if (j + 1 < K) u[j] = u[j + 1];
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxConvKernel; ++j) {
    if (j < K - 1) conv[write * conv_elems + j * C + c] = u[j];
  }
}

// grid (num_seqs, Hv), block dv: thread j holds column j of the head's
// state S: [dk, dv] in the write slot (no other sequence touches it), its
// rows in order of position; every thread sums q's and k's squares in the
// same index order, and column j's sums over dk run in index order.
__global__ void GatedDeltaRuleKernel(const float* qkv, int64_t width, const float* b, const float* a,
                                     const float* decay_a, const float* dt_bias, const int32_t* seqs,
                                     const int32_t* states, DeltaRuleParams p, float* scan, int64_t scan_elems,
                                     float* out, int64_t out_cols) {
  PdlPrologue();
  __shared__ float q[kMaxDeltaHeadDim], k[kMaxDeltaHeadDim];
  const int h = blockIdx.y, j = threadIdx.x, g = p.key_head(h), dk = p.k_dim, dv = p.v_dim, Hv = p.v_heads;
  const int32_t* s = seqs + 4 * blockIdx.x;
  const int len = s[2], row0 = s[3];
  const int32_t read = states[2 * blockIdx.x], write = states[2 * blockIdx.x + 1];
  float* S = scan + write * scan_elems + int64_t{h} * dk * dv;
  if (read < 0) {
    for (int i = 0; i < dk; ++i) S[int64_t{i} * dv + j] = 0.0f;
  } else if (read != write) {
    const float* from = scan + read * scan_elems + int64_t{h} * dk * dv;
    for (int i = 0; i < dk; ++i) S[int64_t{i} * dv + j] = from[int64_t{i} * dv + j];
  }
  const int64_t k_at = int64_t{p.k_heads} * dk, v_at = 2 * k_at;
  const float scale = 1.0f / sqrtf(static_cast<float>(dk));
  for (int t = 0; t < len; ++t) {
    const int64_t row = row0 + t;
    __syncthreads();  // q and k of the row before are no longer read
    for (int i = j; i < dk; i += blockDim.x) {
      q[i] = qkv[row * width + int64_t{g} * dk + i];
      k[i] = qkv[row * width + k_at + int64_t{g} * dk + i];
    }
    __syncthreads();
    float qq = 0.0f, kk = 0.0f;
    for (int i = 0; i < dk; ++i) {
      qq += q[i] * q[i];
      kk += k[i] * k[i];
    }
    const float q_inv = 1.0f / sqrtf(qq + 1e-6f), k_inv = 1.0f / sqrtf(kk + 1e-6f);
    const float beta = 1.0f / (1.0f + expf(-b[row * Hv + h]));
    const float x = a[row * Hv + h] + dt_bias[h];
    const float d = expf(decay_a[h] * (x > 20.0f ? x : log1pf(expf(x))));
    float kv_mem = 0.0f;
    for (int i = 0; i < dk; ++i) {
      const float v = S[int64_t{i} * dv + j] * d;
      S[int64_t{i} * dv + j] = v;
      kv_mem += v * (k[i] * k_inv);
    }
    const float delta = (qkv[row * width + v_at + int64_t{h} * dv + j] - kv_mem) * beta;
    float o = 0.0f;
    for (int i = 0; i < dk; ++i) {
      const float v = S[int64_t{i} * dv + j] + (k[i] * k_inv) * delta;
      S[int64_t{i} * dv + j] = v;
      o += v * (q[i] * q_inv * scale);
    }
    out[row * out_cols + int64_t{h} * dv + j] = o;
  }
}

// grid (num_seqs, H), block P: thread i holds row i of the head's state
// S: [P, N] in the write slot, its rows in order of position; each sum over
// n runs in index order.
__global__ void SelectiveScanKernel(const float* xbc, int64_t width, const float* dt, const float* a,
                                    const float* d, const float* dt_bias, const int32_t* seqs,
                                    const int32_t* states, ScanParams p, float* scan, int64_t scan_elems,
                                    float* out, int64_t out_cols) {
  PdlPrologue();
  __shared__ float dtb[kMaxScanStateSize], c[kMaxScanStateSize];
  const int h = blockIdx.y, i = threadIdx.x, H = p.heads, P = p.head_dim, N = p.state_size;
  const int g = h / (H / p.groups);
  const int32_t* s = seqs + 4 * blockIdx.x;
  const int len = s[2], row0 = s[3];
  const int32_t read = states[2 * blockIdx.x], write = states[2 * blockIdx.x + 1];
  float* S = scan + write * scan_elems + int64_t{h} * P * N;
  if (read < 0) {
    for (int n = 0; n < N; ++n) S[int64_t{i} * N + n] = 0.0f;
  } else if (read != write) {
    const float* from = scan + read * scan_elems + int64_t{h} * P * N;
    for (int n = 0; n < N; ++n) S[int64_t{i} * N + n] = from[int64_t{i} * N + n];
  }
  const int64_t b_at = int64_t{H} * P, c_at = b_at + int64_t{p.groups} * N;
  for (int t = 0; t < len; ++t) {
    const int64_t row = row0 + t;
    const float raw = dt[row * H + h] + dt_bias[h];
    const float sp = raw > 20.0f ? raw : log1pf(expf(raw));
    const float step = fminf(fmaxf(sp, p.dt_min), p.dt_max);
    const float decay = expf(step * a[h]);
    __syncthreads();
    for (int n = i; n < N; n += blockDim.x) {
      dtb[n] = step * xbc[row * width + b_at + int64_t{g} * N + n];
      c[n] = xbc[row * width + c_at + int64_t{g} * N + n];
    }
    __syncthreads();
    const float xi = xbc[row * width + int64_t{h} * P + i];
    float sum = 0.0f;
    for (int n = 0; n < N; ++n) {
      const float v = S[int64_t{i} * N + n] * decay + dtb[n] * xi;
      S[int64_t{i} * N + n] = v;
      sum += v * c[n];
    }
    out[row * out_cols + int64_t{h} * P + i] = sum + d[h] * xi;
  }
}

}  // namespace

cudaError_t LaunchEmbed(const int32_t* tokens, const int32_t* positions, int T, const float* wte,
                        int vocab_begin, int vocab_rows, const float* wpe, int C, float* out,
                        cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  LaunchKernel(EmbedKernel, T, kElementwiseThreads, 0, stream, tokens, positions, wte, vocab_begin,
               vocab_rows, wpe, C, out);
  return cudaGetLastError();
}

bool ProgrammaticLaunchSupported() {
  // The code the device runs for a kernel: sm_90 machine code, or PTX for
  // compute_90 compiled for a newer GPU, has the wait; sm_80's has not.
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, AddKernel) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attributes.ptxVersion >= 90 && attributes.binaryVersion >= 90;
}

void SetProgrammaticLaunch(bool on) { programmatic_launch.store(on); }

bool ProgrammaticLaunchOn() { return programmatic_launch.load(); }

cudaError_t LaunchArgmaxRows(const float* x, int R, int64_t V, int32_t* out, cudaStream_t stream) {
  if (R == 0) return cudaSuccess;
  LaunchKernel(ArgmaxRowsKernel, R, kElementwiseThreads, 0, stream, x, V, out);
  return cudaGetLastError();
}

cudaError_t LaunchAdd(const float* x, int64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  LaunchKernel(AddKernel, Blocks(n, kElementwiseThreads), kElementwiseThreads, 0, stream, x, n,
               out);
  return cudaGetLastError();
}

cudaError_t LaunchFallbackGemm(const void* x, const void* w, DType dtype, const float* bias,
                               bool accumulate, int M, int N, int K, float* out,
                               cudaStream_t stream) {
  if (M == 0) return cudaSuccess;
  const dim3 grid((N + kGemmTile - 1) / kGemmTile, (M + kGemmTile - 1) / kGemmTile);
  const dim3 block(kGemmTile, 8);
  switch (dtype) {
    case DType::kF32:
      LaunchKernel(FallbackGemmKernel<float>, grid, block, 0, stream, static_cast<const float*>(x),
                   static_cast<const float*>(w), bias, accumulate, M, N, K, out);
      break;
    case DType::kBF16:
      LaunchKernel(FallbackGemmKernel<__nv_bfloat16>, grid, block, 0, stream,
                   static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(w), bias,
                   accumulate, M, N, K, out);
      break;
    case DType::kF16:
      LaunchKernel(FallbackGemmKernel<__half>, grid, block, 0, stream,
                   static_cast<const __half*>(x), static_cast<const __half*>(w), bias, accumulate,
                   M, N, K, out);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

bool MmaGemmTakes(DType dtype, int K) {
  return (dtype == DType::kBF16 || dtype == DType::kF16) && K > 0 && K % 32 == 0;
}

int MmaGemmSegments(int K) { return (K + MmaSegmentLength(K) - 1) / MmaSegmentLength(K); }

cudaError_t LaunchMmaGemm(const void* x, const void* w, DType dtype, const float* bias,
                          bool accumulate, int M, int N, int K, float* out, cudaStream_t stream) {
  if (M == 0) return cudaSuccess;
  if (!MmaGemmTakes(dtype, K) || (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w)) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  if (dtype == DType::kBF16) {
    return LaunchMmaGemmTyped(static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(w),
                              bias, accumulate, M, N, K, out, stream);
  }
  return LaunchMmaGemmTyped(static_cast<const __half*>(x), static_cast<const __half*>(w), bias,
                            accumulate, M, N, K, out, stream);
}

int EncoderAttentionMaxHeadDim() { return kEncoderMaxHeadDim; }

cudaError_t LaunchEncoderAttention(const float* qkv, const int32_t* group_ends, int groups, int T, int H, int D,
                                   float scale, float* out, cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  if (groups < 1 || H < 1 || D < 1 || D > kEncoderMaxHeadDim) return cudaErrorInvalidValue;
  const int64_t warps = static_cast<int64_t>(T) * H;
  const int64_t blocks = (warps + kEncoderWarpsPerBlock - 1) / kEncoderWarpsPerBlock;
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  LaunchKernel(EncoderAttentionKernel, dim3(static_cast<unsigned>(blocks)), dim3(32 * kEncoderWarpsPerBlock), 0,
               stream, qkv, group_ends, groups, T, H, D, scale, out);
  return cudaGetLastError();
}

cudaError_t LaunchGroupExperts(const int32_t* ids, int R, int E, int k, bool per_token, int tile_rows,
                               int64_t tile_bound, int32_t* sources, int32_t* routes, ExpertTile* tiles,
                               cudaStream_t stream) {
  if (R == 0) return cudaSuccess;
  if (E < 1 || (2 * E + 3) * sizeof(int32_t) > 48 * 1024 || k < 1 || tile_rows < 1 || tile_bound < ExpertTileBound(R, E, tile_rows)) {
    return cudaErrorInvalidValue;
  }
  LaunchKernel(GroupExpertsKernel, dim3(1), dim3(kGroupThreads), (2 * E + 3) * sizeof(int32_t), stream, ids, R, E,
               k, per_token, tile_rows, tile_bound, sources, routes, tiles);
  return cudaGetLastError();
}

cudaError_t LaunchMmaGemmGrouped(const void* x, const void* const* experts, int E, DType dtype,
                                 const ExpertTile* tiles, int64_t tile_bound, int tile_rows, const float* bias,
                                 int N, int K, float* out, cudaStream_t stream) {
  if (tile_bound == 0 || N == 0) return cudaSuccess;
  if (!MmaGemmTakes(dtype, K) || reinterpret_cast<uintptr_t>(x) % 16 != 0 || tile_bound > INT32_MAX ||
      (N + 7) / 8 > 65535) {
    return cudaErrorInvalidValue;
  }
  if (dtype == DType::kBF16) {
    return LaunchMmaGemmGroupedTyped(static_cast<const __nv_bfloat16*>(x),
                                     reinterpret_cast<const __nv_bfloat16* const*>(experts), E, tiles, tile_bound,
                                     tile_rows, bias, N, K, out, stream);
  }
  return LaunchMmaGemmGroupedTyped(static_cast<const __half*>(x), reinterpret_cast<const __half* const*>(experts),
                                   E, tiles, tile_bound, tile_rows, bias, N, K, out, stream);
}

cudaError_t LaunchAddBias(const float* bias, int M, int N, float* out, cudaStream_t stream) {
  const int64_t n = int64_t{M} * N;
  if (n == 0) return cudaSuccess;
  LaunchKernel(AddBiasKernel, Blocks(n, kElementwiseThreads), kElementwiseThreads, 0, stream, bias,
               n, N, out);
  return cudaGetLastError();
}

cudaError_t LaunchLayerNorm(const float* x, int T, int C, const float* gamma, const float* beta,
                            float eps, void* out, DType out_dtype, cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  switch (out_dtype) {
    case DType::kF32:
      LaunchKernel(LayerNormKernel<float>, T, kElementwiseThreads, 0, stream, x, C, gamma, beta,
                   eps, static_cast<float*>(out));
      break;
    case DType::kBF16:
      LaunchKernel(LayerNormKernel<__nv_bfloat16>, T, kElementwiseThreads, 0, stream, x, C, gamma,
                   beta, eps, static_cast<__nv_bfloat16*>(out));
      break;
    case DType::kF16:
      LaunchKernel(LayerNormKernel<__half>, T, kElementwiseThreads, 0, stream, x, C, gamma, beta,
                   eps, static_cast<__half*>(out));
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchRmsNorm(const float* x, int T, int C, const float* gamma, float eps, void* out,
                          DType out_dtype, cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  switch (out_dtype) {
    case DType::kF32:
      LaunchKernel(RmsNormKernel<float>, T, kElementwiseThreads, 0, stream, x, C, gamma, eps,
                   static_cast<float*>(out));
      break;
    case DType::kBF16:
      LaunchKernel(RmsNormKernel<__nv_bfloat16>, T, kElementwiseThreads, 0, stream, x, C, gamma,
                   eps, static_cast<__nv_bfloat16*>(out));
      break;
    case DType::kF16:
      LaunchKernel(RmsNormKernel<__half>, T, kElementwiseThreads, 0, stream, x, C, gamma, eps,
                   static_cast<__half*>(out));
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchRope(float* qkv, const int32_t* positions, const float* inv_freq, int T,
                       int q_heads, int kv_heads, int head_dim, int rotary_half, bool interleaved,
                       float scale, const int* mrope, cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  const int64_t width = (static_cast<int64_t>(q_heads) + 2 * kv_heads) * head_dim;
  MropeArgs m;
  if (mrope != nullptr) m = MropeArgs{3, mrope[0], mrope[1], mrope[2], mrope[3] != 0};
  LaunchKernel(RopeKernel, T, kElementwiseThreads, 0, stream, qkv, positions, inv_freq,
               q_heads + kv_heads, head_dim, rotary_half, interleaved, scale, width, m, T);
  return cudaGetLastError();
}

template <GluKind kKind>
cudaError_t LaunchGluOf(const float* gate_up, int64_t n, int F, void* out, DType out_dtype,
                        cudaStream_t stream) {
  const int blocks = Blocks(n, kElementwiseThreads);
  switch (out_dtype) {
    case DType::kF32:
      LaunchKernel(GluKernel<float, kKind>, blocks, kElementwiseThreads, 0, stream, gate_up, n, F,
                   static_cast<float*>(out));
      break;
    case DType::kBF16:
      LaunchKernel(GluKernel<__nv_bfloat16, kKind>, blocks, kElementwiseThreads, 0, stream, gate_up,
                   n, F, static_cast<__nv_bfloat16*>(out));
      break;
    case DType::kF16:
      LaunchKernel(GluKernel<__half, kKind>, blocks, kElementwiseThreads, 0, stream, gate_up, n, F,
                   static_cast<__half*>(out));
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchGlu(const float* gate_up, int T, int F, GluKind kind, void* out, DType out_dtype,
                      cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(T) * F;
  if (n == 0) return cudaSuccess;
  switch (kind) {
    case GluKind::kSilu: return LaunchGluOf<GluKind::kSilu>(gate_up, n, F, out, out_dtype, stream);
    case GluKind::kGeluTanh: return LaunchGluOf<GluKind::kGeluTanh>(gate_up, n, F, out, out_dtype, stream);
    case GluKind::kSwigluOai: return LaunchGluOf<GluKind::kSwigluOai>(gate_up, n, F, out, out_dtype, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchGroupRmsNorm(float* x, int T, int W, int first, int groups, int G, const float* gamma,
                               float eps, cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  LaunchKernel(GroupRmsNormKernel, dim3(T, groups), 32, 0, stream, x, W, first, G, gamma, eps);
  return cudaGetLastError();
}

cudaError_t LaunchRoute(const float* logits, int T, int E, const RouterParams& p, int32_t* ids, float* weights,
                        cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  LaunchKernel(RouteKernel, (T + 127) / 128, 128, 0, stream, logits, T, E, p, ids, weights);
  return cudaGetLastError();
}

cudaError_t LaunchCopyRows(const void* src, const int32_t* src_rows, void* dst, const int32_t* dst_rows, int n,
                           int64_t row_bytes, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  LaunchKernel(CopyRowsKernel, n, 256, 0, stream, static_cast<const char*>(src), src_rows,
               static_cast<char*>(dst), dst_rows, row_bytes);
  return cudaGetLastError();
}

cudaError_t LaunchWeightedRowSum(const float* y, const float* weights, int T, int k, int C, float* out,
                                 cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  LaunchKernel(WeightedRowSumKernel, T, kElementwiseThreads, 0, stream, y, weights, k, C, out);
  return cudaGetLastError();
}

cudaError_t LaunchSoftCap(float* x, int64_t n, float cap, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  LaunchKernel(SoftCapKernel, Blocks(n, kElementwiseThreads), kElementwiseThreads, 0, stream, x, n,
               cap);
  return cudaGetLastError();
}

cudaError_t LaunchScale(float* x, int64_t n, float s, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  LaunchKernel(ScaleKernel, Blocks(n, kElementwiseThreads), kElementwiseThreads, 0, stream, x, n, s);
  return cudaGetLastError();
}

cudaError_t LaunchSigmoid(float* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  LaunchKernel(SigmoidKernel, Blocks(n, kElementwiseThreads), kElementwiseThreads, 0, stream, x, n);
  return cudaGetLastError();
}

cudaError_t LaunchConvert(const float* x, int64_t n, void* out, DType out_dtype,
                          cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int blocks = Blocks(n, kElementwiseThreads);
  switch (out_dtype) {
    case DType::kBF16:
      LaunchKernel(ConvertKernel<__nv_bfloat16>, blocks, kElementwiseThreads, 0, stream, x, n,
                   static_cast<__nv_bfloat16*>(out));
      break;
    case DType::kF16:
      LaunchKernel(ConvertKernel<__half>, blocks, kElementwiseThreads, 0, stream, x, n,
                   static_cast<__half*>(out));
      break;
    case DType::kF32:
      LaunchKernel(ConvertKernel<float>, blocks, kElementwiseThreads, 0, stream, x, n,
                   static_cast<float*>(out));
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchGelu(const float* x, int64_t n, void* out, DType out_dtype, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int blocks = Blocks(n, kElementwiseThreads);
  switch (out_dtype) {
    case DType::kF32:
      LaunchKernel(GeluKernel<float>, blocks, kElementwiseThreads, 0, stream, x, n,
                   static_cast<float*>(out));
      break;
    case DType::kBF16:
      LaunchKernel(GeluKernel<__nv_bfloat16>, blocks, kElementwiseThreads, 0, stream, x, n,
                   static_cast<__nv_bfloat16*>(out));
      break;
    case DType::kF16:
      LaunchKernel(GeluKernel<__half>, blocks, kElementwiseThreads, 0, stream, x, n,
                   static_cast<__half*>(out));
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchKvAppend(const float* qkv, const int32_t* seqs, const int32_t* block_ids,
                           int num_seqs, int T, int q_heads, const KvLayer& kv, cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  const dim3 grid(T, kv.heads);
  if (kv.format.k == KvDtype::kFp8) {
    LaunchKernel(KvAppendKernel<__nv_fp8_e4m3>, grid, kv.head_dim, 0, stream, qkv, seqs, num_seqs,
                 q_heads, kv.heads, ViewOf(kv, block_ids), static_cast<__nv_fp8_e4m3*>(kv.k),
                 static_cast<__nv_fp8_e4m3*>(kv.v));
  } else if (kv.format.k == KvDtype::kBF16) {
    LaunchKernel(KvAppendKernel<__nv_bfloat16>, grid, kv.head_dim, 0, stream, qkv, seqs, num_seqs,
                 q_heads, kv.heads, ViewOf(kv, block_ids), static_cast<__nv_bfloat16*>(kv.k),
                 static_cast<__nv_bfloat16*>(kv.v));
  } else {
    LaunchKernel(KvAppendKernel<float>, grid, kv.head_dim, 0, stream, qkv, seqs, num_seqs, q_heads,
                 kv.heads, ViewOf(kv, block_ids), static_cast<float*>(kv.k),
                 static_cast<float*>(kv.v));
  }
  return cudaGetLastError();
}

int64_t AttentionWorkspaceFloats(int T, int q_heads, int head_dim, int max_context) {
  const int chunks = (max_context + kAttentionChunk - 1) / kAttentionChunk;
  return chunks > 1 ? static_cast<int64_t>(T) * q_heads * chunks * (head_dim + 2) : 0;
}

cudaError_t LaunchAttention(const float* qkv, const int32_t* seqs, const int32_t* block_ids, const int32_t* horizon,
                            int num_seqs, int T, int max_context, int q_heads, const KvLayer& kv,
                            const AttentionParams& params, void* out, DType out_dtype,
                            float* workspace, cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  if (kv.head_dim < 1 || kv.head_dim > kMaxHeadDim || kv.heads < 1 || q_heads % kv.heads != 0) {
    return cudaErrorInvalidValue;
  }
  if (kv.format.k == KvDtype::kFp8) {
    return AttendKv<__nv_fp8_e4m3>(qkv, seqs, block_ids, horizon, num_seqs, T, max_context, q_heads, kv,
                                   params, out, out_dtype, workspace, stream);
  }
  if (kv.format.k == KvDtype::kBF16) {
    return AttendKv<__nv_bfloat16>(qkv, seqs, block_ids, horizon, num_seqs, T, max_context, q_heads, kv,
                                   params, out, out_dtype, workspace, stream);
  }
  return AttendKv<float>(qkv, seqs, block_ids, horizon, num_seqs, T, max_context, q_heads, kv, params, out,
                         out_dtype, workspace, stream);
}

cudaError_t LaunchGatherLastRows(const float* x, const int32_t* seqs, int S, int C, float* out,
                                 cudaStream_t stream) {
  if (S == 0) return cudaSuccess;
  LaunchKernel(GatherLastRowsKernel, S, kElementwiseThreads, 0, stream, x, seqs, C, out);
  return cudaGetLastError();
}

cudaError_t LaunchEmbedBlocks(BlockFormat format, const int32_t* tokens, const int32_t* positions,
                              int T, const uint8_t* table, int64_t vocab_rows, int vocab_begin,
                              float scale, const float* wpe, int C, float* out,
                              cudaStream_t stream) {
  if (T == 0) return cudaSuccess;
  if (C % 32 != 0) return cudaErrorInvalidValue;
  const int64_t row_bytes = BlockRowBytes(format, C);
  const int threads = std::min(128, (C / 32 + 31) / 32 * 32);
  auto launch = [&](auto kernel) {
    LaunchKernel(kernel, T, threads, 0, stream, tokens, positions, table, row_bytes, vocab_begin,
                 vocab_rows, scale, wpe, C, out);
    return cudaGetLastError();
  };
  switch (format) {
    case BlockFormat::kQ8_0: return launch(EmbedBlocksKernel<BlockFormat::kQ8_0>);
    case BlockFormat::kQ4_0: return launch(EmbedBlocksKernel<BlockFormat::kQ4_0>);
    case BlockFormat::kQ4_1: return launch(EmbedBlocksKernel<BlockFormat::kQ4_1>);
    case BlockFormat::kQ4_K: return launch(EmbedBlocksKernel<BlockFormat::kQ4_K>);
    case BlockFormat::kQ6_K: return launch(EmbedBlocksKernel<BlockFormat::kQ6_K>);
    case BlockFormat::kQ5_0: return launch(EmbedBlocksKernel<BlockFormat::kQ5_0>);
    case BlockFormat::kQ5_1: return launch(EmbedBlocksKernel<BlockFormat::kQ5_1>);
    case BlockFormat::kQ5_K: return launch(EmbedBlocksKernel<BlockFormat::kQ5_K>);
    case BlockFormat::kMXFP4: return launch(EmbedBlocksKernel<BlockFormat::kMXFP4>);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchBlockLinear(BlockFormat format, const float* x, int M, int K, const uint8_t* w,
                              int rows, int row_begin, int N, const float* bias, bool gelu,
                              bool accumulate, float* out, cudaStream_t stream) {
  if (rows <= 0 || M <= 0) return cudaSuccess;
  const int64_t row_bytes = BlockRowBytes(format, K);
  // x's rows are K floats, K a multiple of 64 (BlockRowsFit): float4 loads
  // need only its start aligned.
  if (K % 32 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0) return cudaErrorMisalignedAddress;
  const bool aligned = reinterpret_cast<uintptr_t>(w) % 16 == 0 && row_bytes % 16 == 0;
  const dim3 grid((rows + kBlockWarps - 1) / kBlockWarps), block(32 * kBlockWarps);
  auto launch = [&](auto kernel) {
    LaunchKernel(kernel, grid, block, 0, stream, x, M, K, w, row_bytes, rows, row_begin, N, bias,
                 gelu, accumulate, out);
    return cudaGetLastError();
  };
  auto launch_either = [&](auto aligned_kernel, auto byte_kernel) {
    return aligned ? launch(aligned_kernel) : launch(byte_kernel);
  };
  switch (format) {
    case BlockFormat::kQ8_0: return launch(BlockLinearKernel<BlockFormat::kQ8_0, false>);
    case BlockFormat::kQ4_0: return launch(BlockLinearKernel<BlockFormat::kQ4_0, false>);
    case BlockFormat::kQ4_1: return launch(BlockLinearKernel<BlockFormat::kQ4_1, false>);
    case BlockFormat::kQ4_K:
      return launch_either(BlockLinearKernel<BlockFormat::kQ4_K, true>,
                           BlockLinearKernel<BlockFormat::kQ4_K, false>);
    case BlockFormat::kQ6_K: return launch(BlockLinearKernel<BlockFormat::kQ6_K, false>);
    case BlockFormat::kQ5_0: return launch(BlockLinearKernel<BlockFormat::kQ5_0, false>);
    case BlockFormat::kQ5_1: return launch(BlockLinearKernel<BlockFormat::kQ5_1, false>);
    case BlockFormat::kQ5_K:
      return launch_either(BlockLinearKernel<BlockFormat::kQ5_K, true>,
                           BlockLinearKernel<BlockFormat::kQ5_K, false>);
    case BlockFormat::kMXFP4: return launch(BlockLinearKernel<BlockFormat::kMXFP4, false>);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchGate(const float* x, const float* gate, GateKind act, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  LaunchKernel(GateKernel, Blocks(n, kElementwiseThreads), kElementwiseThreads, 0, stream, x, gate, act, out, n);
  return cudaGetLastError();
}

cudaError_t LaunchCausalConv(const float* x, const int32_t* seqs, const int32_t* states, int num_seqs, int64_t C,
                             int K, const float* w, const float* bias, bool silu, float* conv, int64_t conv_elems,
                             float* out, cudaStream_t stream) {
  if (num_seqs == 0) return cudaSuccess;
  const dim3 grid(num_seqs, static_cast<unsigned>((C + kElementwiseThreads - 1) / kElementwiseThreads));
  LaunchKernel(CausalConvKernel, grid, kElementwiseThreads, 0, stream, x, seqs, states, C, K, w, bias, silu, conv,
               conv_elems, out);
  return cudaGetLastError();
}

cudaError_t LaunchGatedDeltaRule(const float* qkv, int64_t width, const float* b, const float* a,
                                 const float* decay_a, const float* dt_bias, const int32_t* seqs,
                                 const int32_t* states, int num_seqs, const DeltaRuleParams& p, float* scan,
                                 int64_t scan_elems, float* out, int64_t out_cols, cudaStream_t stream) {
  if (num_seqs == 0) return cudaSuccess;
  LaunchKernel(GatedDeltaRuleKernel, dim3(num_seqs, p.v_heads), p.v_dim, 0, stream, qkv, width, b, a, decay_a,
               dt_bias, seqs, states, p, scan, scan_elems, out, out_cols);
  return cudaGetLastError();
}

cudaError_t LaunchSelectiveScan(const float* xbc, int64_t width, const float* dt, const float* a, const float* d,
                                const float* dt_bias, const int32_t* seqs, const int32_t* states, int num_seqs,
                                const ScanParams& p, float* scan, int64_t scan_elems, float* out, int64_t out_cols,
                                cudaStream_t stream) {
  if (num_seqs == 0) return cudaSuccess;
  LaunchKernel(SelectiveScanKernel, dim3(num_seqs, p.heads), p.head_dim, 0, stream, xbc, width, dt, a, d, dt_bias,
               seqs, states, p, scan, scan_elems, out, out_cols);
  return cudaGetLastError();
}

}  // namespace flover::kernels::cuda
