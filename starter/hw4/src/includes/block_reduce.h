// Warp- and block-level reductions built on warp shuffles.
#pragma once

#include <cuda_runtime.h>
#include <math_constants.h>

#include "common.h"

namespace kg {

struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
  static __device__ __forceinline__ float identity() { return 0.f; }
};

struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
  static __device__ __forceinline__ float identity() { return -CUDART_INF_F; }
};

// Reduce `val` over the 32 lanes of a full warp; every lane gets the result.
template <typename Op>
__device__ __forceinline__ float warp_reduce(float val) {
  Op op;
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    val = op(val, __shfl_xor_sync(0xffffffffu, val, offset));
  }
  return val;
}

// Reduce N values per lane at once (independent shuffles interleave well).
template <typename Op, int N>
__device__ __forceinline__ void warp_reduce_n(float (&vals)[N]) {
  Op op;
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
#pragma unroll
    for (int i = 0; i < N; ++i) vals[i] = op(vals[i], __shfl_xor_sync(0xffffffffu, vals[i], offset));
  }
}

// Reduce N values per thread over a 1-D block (blockDim.x a multiple of 32, at most 1024).
// Every thread of the block gets the results. Contains __syncthreads(): call it from all
// threads of the block, never under divergent control flow.
template <typename Op, int N>
__device__ __forceinline__ void block_reduce_n(float (&vals)[N]) {
  __shared__ float partial[N][kWarpSize];
  const int lane = threadIdx.x & (kWarpSize - 1);
  const int warp = threadIdx.x / kWarpSize;
  const int n_warps = blockDim.x / kWarpSize;

  warp_reduce_n<Op, N>(vals);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) partial[i][warp] = vals[i];
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N; ++i) vals[i] = lane < n_warps ? partial[i][lane] : Op::identity();
  warp_reduce_n<Op, N>(vals);
}

template <typename Op>
__device__ __forceinline__ float block_reduce(float val) {
  float vals[1] = {val};
  block_reduce_n<Op, 1>(vals);
  return vals[0];
}

}  // namespace kg
