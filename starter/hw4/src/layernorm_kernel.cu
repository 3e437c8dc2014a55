// LayerNorm forward and backward (Problems 2.1 and 2.2).
//
// Forward, per row x of width H (H % 4 == 0):
//   mean = sum(x) / H,  var = sum(x^2) / H - mean^2          (one fused pass for both sums)
//   rstd = 1 / sqrt(var + eps),  eps = 1e-8
//   ln_res = (x - mean) * rstd * scale + bias
// Convention: `vars` receives var WITHOUT eps (clamped at 0 against rounding); the backward
// adds eps itself, so it accepts either our forward's vars or a plain biased variance.
//
// Backward, with xhat = (x - mean) * rstd and dxhat = dy * gamma:
//   betta_grad = sum_rows dy,  gamma_grad = sum_rows dy * xhat
//   inp_grad   = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
// xhat is recomputed from inp, means and vars, so betta is not needed.
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

constexpr int kLnMaxThreads = 256;  // per-row kernels: threads per block (at most)
constexpr int kTile = 32;           // dgamma/dbetta: 32 columns x 32 row-lanes per block

int row_threads(int hidden4) {
  int t = kg::ceil_div(hidden4, kg::kWarpSize) * kg::kWarpSize;
  return t < kLnMaxThreads ? t : kLnMaxThreads;
}

// One block per row; hidden4 = hidden_dim / 4 (the row length in float4).
__global__ void ker_layer_norm(float* ln_res, float* vars, float* means, const float* inp,
                               const float* scale, const float* bias, int hidden4) {
  // BEGIN SOLUTION: Problem 2.1 ker_layer_norm
  const size_t row = blockIdx.x;
  const float4* x4 = reinterpret_cast<const float4*>(inp) + row * hidden4;
  const float4* s4 = reinterpret_cast<const float4*>(scale);
  const float4* b4 = reinterpret_cast<const float4*>(bias);
  float4* y4 = reinterpret_cast<float4*>(ln_res) + row * hidden4;

  // sum(x) and sum(x^2) in one pass, one fused block reduction
  float acc[2] = {0.f, 0.f};
  for (int i = threadIdx.x; i < hidden4; i += blockDim.x) {
    const float4 v = x4[i];
    acc[0] += kg::f4_hsum(v);
    acc[1] += kg::f4_dot(v, v);
  }
  kg::block_reduce_n<kg::SumOp, 2>(acc);

  const float inv_h = 1.f / (4.f * hidden4);
  const float mean = acc[0] * inv_h;
  const float var = fmaxf(acc[1] * inv_h - mean * mean, 0.f);
  const float rstd = rsqrtf(var + kg::kLnEpsilon);
  if (threadIdx.x == 0) {
    means[row] = mean;
    vars[row] = var;
  }

  for (int i = threadIdx.x; i < hidden4; i += blockDim.x) {
    const float4 xhat = kg::f4_scale(kg::f4_sub_scalar(x4[i], mean), rstd);
    y4[i] = kg::f4_fma(xhat, s4[i], b4[i]);
  }
  // END SOLUTION
}

// Column sums across rows. blockDim = (32, 32), gridDim.x = ceil(width / 32).
// Thread (x, y) accumulates column blockIdx.x * 32 + x over rows y, y + 32, ... (coalesced
// row reads); the 32 partials per column go through a padded shared tile and are summed by
// one warp with shfl_down.
__global__ void ker_ln_bw_dgamma_dbetta(float* gamma_grad, float* betta_grad,
                                        const float* out_grad, const float* inp,
                                        const float* vars, const float* means, int rows,
                                        int width) {
  // BEGIN SOLUTION: Problem 2.2 ker_ln_bw_dgamma_dbetta
  __shared__ float s_dgamma[kTile][kTile + 1];
  __shared__ float s_dbetta[kTile][kTile + 1];

  const int col = blockIdx.x * kTile + threadIdx.x;
  float dgamma = 0.f;
  float dbetta = 0.f;
  if (col < width) {
    for (int r = threadIdx.y; r < rows; r += kTile) {
      const size_t idx = static_cast<size_t>(r) * width + col;
      const float rstd = rsqrtf(vars[r] + kg::kLnEpsilon);
      const float dy = out_grad[idx];
      const float xhat = (inp[idx] - means[r]) * rstd;
      dbetta += dy;
      dgamma = fmaf(dy, xhat, dgamma);
    }
  }
  s_dgamma[threadIdx.y][threadIdx.x] = dgamma;
  s_dbetta[threadIdx.y][threadIdx.x] = dbetta;
  __syncthreads();

  // transpose: warp y now holds the 32 row-partials of column blockIdx.x * 32 + y
  float g = s_dgamma[threadIdx.x][threadIdx.y];
  float b = s_dbetta[threadIdx.x][threadIdx.y];
  cg::thread_block_tile<kTile> tile = cg::tiled_partition<kTile>(cg::this_thread_block());
#pragma unroll
  for (int offset = kTile / 2; offset > 0; offset >>= 1) {
    g += tile.shfl_down(g, offset);
    b += tile.shfl_down(b, offset);
  }
  const int out_col = blockIdx.x * kTile + threadIdx.y;
  if (threadIdx.x == 0 && out_col < width) {
    gamma_grad[out_col] = g;
    betta_grad[out_col] = b;
  }
  // END SOLUTION
}

// One block per row; hidden4 = hidden_dim / 4. Both sums (dxhat and dxhat * xhat) in one
// pass and one fused block reduction.
__global__ void ker_ln_bw_dinp(float* inp_grad, const float* out_grad, const float* inp,
                               const float* gamma, const float* betta, const float* vars,
                               const float* means, int hidden4) {
  // BEGIN SOLUTION: Problem 2.2 ker_ln_bw_dinp
  const size_t row = blockIdx.x;
  const float4* dy4 = reinterpret_cast<const float4*>(out_grad) + row * hidden4;
  const float4* x4 = reinterpret_cast<const float4*>(inp) + row * hidden4;
  const float4* g4 = reinterpret_cast<const float4*>(gamma);
  float4* dx4 = reinterpret_cast<float4*>(inp_grad) + row * hidden4;
  const float mean = means[row];
  const float rstd = rsqrtf(vars[row] + kg::kLnEpsilon);

  float acc[2] = {0.f, 0.f};
  for (int i = threadIdx.x; i < hidden4; i += blockDim.x) {
    const float4 dxhat = kg::f4_mul(dy4[i], g4[i]);
    const float4 xhat = kg::f4_scale(kg::f4_sub_scalar(x4[i], mean), rstd);
    acc[0] += kg::f4_hsum(dxhat);
    acc[1] += kg::f4_dot(dxhat, xhat);
  }
  kg::block_reduce_n<kg::SumOp, 2>(acc);

  const float inv_h = 1.f / (4.f * hidden4);
  const float mean_dxhat = acc[0] * inv_h;
  const float mean_dxhat_xhat = acc[1] * inv_h;
  for (int i = threadIdx.x; i < hidden4; i += blockDim.x) {
    const float4 dxhat = kg::f4_mul(dy4[i], g4[i]);
    const float4 xhat = kg::f4_scale(kg::f4_sub_scalar(x4[i], mean), rstd);
    float4 out;
    out.x = (dxhat.x - mean_dxhat - xhat.x * mean_dxhat_xhat) * rstd;
    out.y = (dxhat.y - mean_dxhat - xhat.y * mean_dxhat_xhat) * rstd;
    out.z = (dxhat.z - mean_dxhat - xhat.z * mean_dxhat_xhat) * rstd;
    out.w = (dxhat.w - mean_dxhat - xhat.w * mean_dxhat_xhat) * rstd;
    dx4[i] = out;
  }
  // END SOLUTION
}

void check_hidden(const char* who, int batch_size, int hidden_dim, int max_hidden) {
  if (batch_size < 0 || hidden_dim <= 0) {
    throw std::runtime_error(std::string(who) + ": batch_size must be >= 0 and hidden_dim > 0");
  }
  if (hidden_dim % 4 != 0) {
    throw std::runtime_error(std::string(who) + ": hidden_dim " + std::to_string(hidden_dim) +
                             " must be a multiple of 4 (float4 loads)");
  }
  if (max_hidden > 0 && hidden_dim > max_hidden) {
    throw std::runtime_error(std::string(who) + ": hidden_dim " + std::to_string(hidden_dim) +
                             " > " + std::to_string(max_hidden) + " is not supported");
  }
}

}  // namespace

extern "C" {

void launch_layernorm(float* ln_res, float* vars, float* means, const float* inp,
                      const float* scale, const float* bias, int batch_size, int hidden_dim,
                      cudaStream_t stream) {
  check_hidden("launch_layernorm", batch_size, hidden_dim, 0);
  if (batch_size == 0) return;
  const size_t n = static_cast<size_t>(batch_size) * hidden_dim;
  const size_t h = hidden_dim;
  const size_t r = batch_size;

  DeviceArena arena(2 * DeviceArena::padded(n) + 2 * DeviceArena::padded(h) +
                    2 * DeviceArena::padded(r));
  float* d_inp = arena.take(n);
  float* d_out = arena.take(n);
  float* d_scale = arena.take(h);
  float* d_bias = arena.take(h);
  float* d_vars = arena.take(r);
  float* d_means = arena.take(r);

  CHECK_CUDA(cudaMemcpyAsync(d_inp, inp, n * sizeof(float), cudaMemcpyHostToDevice, stream));
  CHECK_CUDA(cudaMemcpyAsync(d_scale, scale, h * sizeof(float), cudaMemcpyHostToDevice, stream));
  CHECK_CUDA(cudaMemcpyAsync(d_bias, bias, h * sizeof(float), cudaMemcpyHostToDevice, stream));

  const int hidden4 = hidden_dim / 4;
  ker_layer_norm<<<batch_size, row_threads(hidden4), 0, stream>>>(d_out, d_vars, d_means, d_inp,
                                                                   d_scale, d_bias, hidden4);
  CHECK_LAUNCH();

  CHECK_CUDA(cudaMemcpyAsync(ln_res, d_out, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaMemcpyAsync(vars, d_vars, r * sizeof(float), cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaMemcpyAsync(means, d_means, r * sizeof(float), cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
}

void launch_layernorm_bw(float* gamma_grad, float* betta_grad, float* inp_grad,
                         const float* out_grad, const float* inp, const float* gamma,
                         const float* betta, const float* vars, const float* means,
                         int batch_size, int hidden_dim, cudaStream_t stream_1,
                         cudaStream_t stream_2) {
  check_hidden("launch_layernorm_bw", batch_size, hidden_dim, 4096);
  (void)betta;  // xhat is recomputed from inp, means and vars
  const size_t n = static_cast<size_t>(batch_size) * hidden_dim;
  const size_t h = hidden_dim;
  const size_t r = batch_size;
  if (batch_size == 0) {
    for (size_t i = 0; i < h; ++i) gamma_grad[i] = betta_grad[i] = 0.f;
    return;
  }

  DeviceArena arena(3 * DeviceArena::padded(n) + 3 * DeviceArena::padded(h) +
                    2 * DeviceArena::padded(r));
  float* d_dy = arena.take(n);
  float* d_inp = arena.take(n);
  float* d_dinp = arena.take(n);
  float* d_gamma = arena.take(h);
  float* d_dgamma = arena.take(h);
  float* d_dbetta = arena.take(h);
  float* d_vars = arena.take(r);
  float* d_means = arena.take(r);

  CHECK_CUDA(cudaMemcpyAsync(d_dy, out_grad, n * sizeof(float), cudaMemcpyHostToDevice, stream_1));
  CHECK_CUDA(cudaMemcpyAsync(d_inp, inp, n * sizeof(float), cudaMemcpyHostToDevice, stream_1));
  CHECK_CUDA(cudaMemcpyAsync(d_gamma, gamma, h * sizeof(float), cudaMemcpyHostToDevice, stream_1));
  CHECK_CUDA(cudaMemcpyAsync(d_vars, vars, r * sizeof(float), cudaMemcpyHostToDevice, stream_1));
  CHECK_CUDA(cudaMemcpyAsync(d_means, means, r * sizeof(float), cudaMemcpyHostToDevice, stream_1));

  // stream_2 must see the inputs copied on stream_1
  cudaEvent_t inputs_ready;
  CHECK_CUDA(cudaEventCreateWithFlags(&inputs_ready, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventRecord(inputs_ready, stream_1));
  CHECK_CUDA(cudaStreamWaitEvent(stream_2, inputs_ready, 0));

  dim3 tile_block(kTile, kTile);
  ker_ln_bw_dgamma_dbetta<<<kg::ceil_div(hidden_dim, kTile), tile_block, 0, stream_1>>>(
      d_dgamma, d_dbetta, d_dy, d_inp, d_vars, d_means, batch_size, hidden_dim);
  CHECK_LAUNCH();
  const int hidden4 = hidden_dim / 4;
  ker_ln_bw_dinp<<<batch_size, row_threads(hidden4), 0, stream_2>>>(
      d_dinp, d_dy, d_inp, d_gamma, nullptr, d_vars, d_means, hidden4);
  CHECK_LAUNCH();

  CHECK_CUDA(cudaMemcpyAsync(gamma_grad, d_dgamma, h * sizeof(float), cudaMemcpyDeviceToHost,
                             stream_1));
  CHECK_CUDA(cudaMemcpyAsync(betta_grad, d_dbetta, h * sizeof(float), cudaMemcpyDeviceToHost,
                             stream_1));
  CHECK_CUDA(cudaMemcpyAsync(inp_grad, d_dinp, n * sizeof(float), cudaMemcpyDeviceToHost,
                             stream_2));
  CHECK_CUDA(cudaStreamSynchronize(stream_1));
  CHECK_CUDA(cudaStreamSynchronize(stream_2));
  CHECK_CUDA(cudaEventDestroy(inputs_ready));
}

}  // extern "C"
