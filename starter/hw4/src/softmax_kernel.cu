// Attention softmax, forward and backward (Problems 1.1 and 1.2).
//
// Forward, in place on inp [batch_size, nhead, from_len, to_len]: for row (b, h, i)
//   x_j = inp_j + attn_mask[b, j]            (attn_mask is additive; nullptr = no mask)
//   x_j = -inf           if mask_future and j > i
//   out_j = exp(x_j - max_k x_k) / sum_k exp(x_k - max_k x_k)
// A row whose entries are all -inf (only possible with an infinite attn_mask) is written as
// zeros instead of NaN.
//
// Backward, in place on out_grad [rows, softmax_len] with y = soft_outp:
//   out_grad_j = y_j * (out_grad_j - sum_k out_grad_k * y_k)
#include <stdexcept>
#include <string>

#include <cooperative_groups.h>
#include <cub/cub.cuh>
#include <cuda_fp16.h>

#include "includes/block_reduce.h"
#include "includes/common.h"
#include "includes/cuda_util.h"
#include "includes/kernels.h"

namespace cg = cooperative_groups;

namespace {

constexpr int kSoftmaxWarpsPerBlock = 4;

// Short rows (to_len <= 32 * ELE_PER_THREAD): one warp per row, ELE_PER_THREAD values per lane
// kept in registers, reductions by warp shuffles. blockDim = (32, kSoftmaxWarpsPerBlock).
template <int ELE_PER_THREAD>
__global__ void ker_attn_softmax_lt32(float* inp, const float* attn_mask, int rows, int nhead,
                                      int from_len, int to_len, bool mask_future) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;  // the whole warp leaves together
  const int lane = threadIdx.x;
  const int query = row % from_len;
  const int batch = row / (nhead * from_len);
  float* row_ptr = inp + static_cast<size_t>(row) * to_len;
  const float* mask_ptr = attn_mask ? attn_mask + static_cast<size_t>(batch) * to_len : nullptr;

  float vals[ELE_PER_THREAD];
  float row_max = -CUDART_INF_F;
#pragma unroll
  for (int k = 0; k < ELE_PER_THREAD; ++k) {
    const int j = lane + k * kg::kWarpSize;
    float v = -CUDART_INF_F;
    if (j < to_len && !(mask_future && j > query)) {
      v = row_ptr[j];
      if (mask_ptr) v += mask_ptr[j];
    }
    vals[k] = v;
    row_max = fmaxf(row_max, v);
  }
  row_max = kg::warp_reduce<kg::MaxOp>(row_max);
  const float shift = row_max == -CUDART_INF_F ? 0.f : row_max;

  float row_sum = 0.f;
#pragma unroll
  for (int k = 0; k < ELE_PER_THREAD; ++k) {
    vals[k] = expf(vals[k] - shift);
    row_sum += vals[k];
  }
  row_sum = kg::warp_reduce<kg::SumOp>(row_sum);
  const float inv = row_sum > 0.f ? 1.f / row_sum : 0.f;

#pragma unroll
  for (int k = 0; k < ELE_PER_THREAD; ++k) {
    const int j = lane + k * kg::kWarpSize;
    if (j < to_len) row_ptr[j] = vals[k] * inv;
  }
}

// Long rows (to_len <= BLOCK_DIM * ELE_PER_THREAD): one block per row (gridDim.x = rows),
// thread t holds elements t, t + BLOCK_DIM, ... in registers; block-wide max and sum through
// cub::BlockReduce.
template <int BLOCK_DIM, int ELE_PER_THREAD>
__global__ void ker_attn_softmax(float* inp, const float* attn_mask, int nhead, int from_len,
                                 int to_len, bool mask_future) {
  // BEGIN SOLUTION: Problem 1.1 ker_attn_softmax
  using BlockReduce = cub::BlockReduce<float, BLOCK_DIM>;
  __shared__ typename BlockReduce::TempStorage temp;
  __shared__ float s_shift;
  __shared__ float s_inv;

  const int row = blockIdx.x;
  const int query = row % from_len;
  const int batch = row / (nhead * from_len);
  float* row_ptr = inp + static_cast<size_t>(row) * to_len;
  const float* mask_ptr = attn_mask ? attn_mask + static_cast<size_t>(batch) * to_len : nullptr;

  // 1. load (mask applied), thread-local max
  float vals[ELE_PER_THREAD];
  float local_max = -CUDART_INF_F;
#pragma unroll
  for (int k = 0; k < ELE_PER_THREAD; ++k) {
    const int j = threadIdx.x + k * BLOCK_DIM;
    float v = -CUDART_INF_F;
    if (j < to_len && !(mask_future && j > query)) {
      v = row_ptr[j];
      if (mask_ptr) v += mask_ptr[j];
    }
    vals[k] = v;
    local_max = fmaxf(local_max, v);
  }

  // 2. block max (valid in thread 0), broadcast through shared memory
  const float block_max = BlockReduce(temp).Reduce(local_max, kg::MaxOp());
  if (threadIdx.x == 0) s_shift = block_max == -CUDART_INF_F ? 0.f : block_max;
  __syncthreads();
  const float shift = s_shift;

  // 3. exponentials and block sum (temp is reused: the barrier above separates the uses)
  float local_sum = 0.f;
#pragma unroll
  for (int k = 0; k < ELE_PER_THREAD; ++k) {
    vals[k] = expf(vals[k] - shift);
    local_sum += vals[k];
  }
  const float block_sum = BlockReduce(temp).Sum(local_sum);
  if (threadIdx.x == 0) s_inv = block_sum > 0.f ? 1.f / block_sum : 0.f;
  __syncthreads();
  const float inv = s_inv;

  // 4. normalize and store
#pragma unroll
  for (int k = 0; k < ELE_PER_THREAD; ++k) {
    const int j = threadIdx.x + k * BLOCK_DIM;
    if (j < to_len) row_ptr[j] = vals[k] * inv;
  }
  // END SOLUTION
}

template <int ELE_PER_THREAD>
void launch_warp_softmax(float* inp, const float* mask, int rows, int nhead, int from_len,
                         int to_len, bool mask_future, cudaStream_t stream) {
  dim3 block(kg::kWarpSize, kSoftmaxWarpsPerBlock);
  dim3 grid(kg::ceil_div(rows, kSoftmaxWarpsPerBlock));
  ker_attn_softmax_lt32<ELE_PER_THREAD>
      <<<grid, block, 0, stream>>>(inp, mask, rows, nhead, from_len, to_len, mask_future);
  CHECK_LAUNCH();
}

template <int BLOCK_DIM, int ELE_PER_THREAD>
void launch_block_softmax(float* inp, const float* mask, int rows, int nhead, int from_len,
                          int to_len, bool mask_future, cudaStream_t stream) {
  ker_attn_softmax<BLOCK_DIM, ELE_PER_THREAD>
      <<<rows, BLOCK_DIM, 0, stream>>>(inp, mask, nhead, from_len, to_len, mask_future);
  CHECK_LAUNCH();
}

// One warp per row; lane l holds elements l, l + 32, ..., so softmax_len <= 32 * ITERATIONS.
// blockDim = (32, kSoftmaxWarpsPerBlock).
template <int ITERATIONS>
__global__ void ker_attn_softmax_bw(float* grad, const float* soft_out, int rows,
                                    int softmax_len) {
  // BEGIN SOLUTION: Problem 1.2 ker_attn_softmax_bw
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= rows) return;  // the whole warp leaves together
  const int lane = threadIdx.x;
  float* g_ptr = grad + static_cast<size_t>(row) * softmax_len;
  const float* y_ptr = soft_out + static_cast<size_t>(row) * softmax_len;

  float g[ITERATIONS];
  float y[ITERATIONS];
  float dot = 0.f;
#pragma unroll
  for (int k = 0; k < ITERATIONS; ++k) {
    const int j = lane + k * kg::kWarpSize;
    const bool in = j < softmax_len;
    g[k] = in ? g_ptr[j] : 0.f;
    y[k] = in ? y_ptr[j] : 0.f;
    dot = fmaf(g[k], y[k], dot);
  }
  dot = kg::warp_reduce<kg::SumOp>(dot);
#pragma unroll
  for (int k = 0; k < ITERATIONS; ++k) {
    const int j = lane + k * kg::kWarpSize;
    if (j < softmax_len) g_ptr[j] = y[k] * (g[k] - dot);
  }
  // END SOLUTION
}

template <int ITERATIONS>
void launch_softmax_bw_iters(float* grad, const float* soft_out, int rows, int softmax_len,
                             cudaStream_t stream) {
  dim3 block(kg::kWarpSize, kSoftmaxWarpsPerBlock);
  dim3 grid(kg::ceil_div(rows, kSoftmaxWarpsPerBlock));
  ker_attn_softmax_bw<ITERATIONS><<<grid, block, 0, stream>>>(grad, soft_out, rows, softmax_len);
  CHECK_LAUNCH();
}

}  // namespace

extern "C" {

void launch_attn_softmax(float* inp, const float* attn_mask, int batch_size, int nhead,
                         int from_len, int to_len, bool mask_future, cudaStream_t stream) {
  if (batch_size < 0 || nhead < 0 || from_len < 0 || to_len < 0) {
    throw std::runtime_error("launch_attn_softmax: negative dimension");
  }
  if (to_len > 1024) {
    throw std::runtime_error("launch_attn_softmax: to_len " + std::to_string(to_len) +
                             " > 1024 is not supported");
  }
  const int rows = batch_size * nhead * from_len;
  if (rows == 0 || to_len == 0) return;

  const size_t inp_n = static_cast<size_t>(rows) * to_len;
  const size_t mask_n = attn_mask ? static_cast<size_t>(batch_size) * to_len : 0;
  DeviceArena arena(DeviceArena::padded(inp_n) + DeviceArena::padded(mask_n));
  float* d_inp = arena.take(inp_n);
  float* d_mask = attn_mask ? arena.take(mask_n) : nullptr;

  CHECK_CUDA(cudaMemcpyAsync(d_inp, inp, inp_n * sizeof(float), cudaMemcpyHostToDevice, stream));
  if (attn_mask) {
    CHECK_CUDA(cudaMemcpyAsync(d_mask, attn_mask, mask_n * sizeof(float), cudaMemcpyHostToDevice,
                               stream));
  }

  if (to_len <= 32) {
    launch_warp_softmax<1>(d_inp, d_mask, rows, nhead, from_len, to_len, mask_future, stream);
  } else if (to_len <= 64) {
    launch_warp_softmax<2>(d_inp, d_mask, rows, nhead, from_len, to_len, mask_future, stream);
  } else if (to_len <= 128) {
    launch_block_softmax<64, 2>(d_inp, d_mask, rows, nhead, from_len, to_len, mask_future, stream);
  } else if (to_len <= 256) {
    launch_block_softmax<128, 2>(d_inp, d_mask, rows, nhead, from_len, to_len, mask_future,
                                 stream);
  } else if (to_len <= 512) {
    launch_block_softmax<256, 2>(d_inp, d_mask, rows, nhead, from_len, to_len, mask_future,
                                 stream);
  } else {
    launch_block_softmax<256, 4>(d_inp, d_mask, rows, nhead, from_len, to_len, mask_future,
                                 stream);
  }

  CHECK_CUDA(cudaMemcpyAsync(inp, d_inp, inp_n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
}

void launch_attn_softmax_bw(float* out_grad, const float* soft_outp, int rows, int softmax_len,
                            cudaStream_t stream) {
  if (rows < 0 || softmax_len < 0) {
    throw std::runtime_error("launch_attn_softmax_bw: negative dimension");
  }
  if (softmax_len > 2048) {
    throw std::runtime_error("launch_attn_softmax_bw: softmax_len " +
                             std::to_string(softmax_len) + " > 2048 is not supported");
  }
  if (rows == 0 || softmax_len == 0) return;

  const size_t n = static_cast<size_t>(rows) * softmax_len;
  DeviceArena arena(2 * DeviceArena::padded(n));
  float* d_grad = arena.take(n);
  float* d_soft = arena.take(n);
  CHECK_CUDA(cudaMemcpyAsync(d_grad, out_grad, n * sizeof(float), cudaMemcpyHostToDevice, stream));
  CHECK_CUDA(cudaMemcpyAsync(d_soft, soft_outp, n * sizeof(float), cudaMemcpyHostToDevice, stream));

  // BEGIN SOLUTION: Problem 1.2 choose ITERATIONS
  if (softmax_len <= 32) {
    launch_softmax_bw_iters<1>(d_grad, d_soft, rows, softmax_len, stream);
  } else if (softmax_len <= 64) {
    launch_softmax_bw_iters<2>(d_grad, d_soft, rows, softmax_len, stream);
  } else if (softmax_len <= 128) {
    launch_softmax_bw_iters<4>(d_grad, d_soft, rows, softmax_len, stream);
  } else if (softmax_len <= 256) {
    launch_softmax_bw_iters<8>(d_grad, d_soft, rows, softmax_len, stream);
  } else if (softmax_len <= 384) {
    launch_softmax_bw_iters<12>(d_grad, d_soft, rows, softmax_len, stream);
  } else if (softmax_len <= 512) {
    launch_softmax_bw_iters<16>(d_grad, d_soft, rows, softmax_len, stream);
  } else if (softmax_len <= 768) {
    launch_softmax_bw_iters<24>(d_grad, d_soft, rows, softmax_len, stream);
  } else if (softmax_len <= 1024) {
    launch_softmax_bw_iters<32>(d_grad, d_soft, rows, softmax_len, stream);
  } else {
    launch_softmax_bw_iters<64>(d_grad, d_soft, rows, softmax_len, stream);
  }
  // END SOLUTION

  CHECK_CUDA(cudaMemcpyAsync(out_grad, d_grad, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
}

}  // extern "C"
