// Exported launchers (C ABI, float32, HOST pointers). Each call copies its inputs to the
// device, runs the kernels on the given stream(s) (0 = default stream), copies the results
// back and synchronizes before returning.
#pragma once

#include <cuda_runtime.h>

extern "C" {

// In place on inp [batch_size, nhead, from_len, to_len]. attn_mask [batch_size, to_len] is
// added to every row of its batch (nullptr: no mask). mask_future hides keys j > query i.
// to_len must be in [1, 1024].
void launch_attn_softmax(float* inp, const float* attn_mask, int batch_size, int nhead,
                         int from_len, int to_len, bool mask_future, cudaStream_t stream);

// In place on out_grad [rows, softmax_len]: out_grad = y * (out_grad - sum(out_grad * y)),
// with y = soft_outp. softmax_len must be in [1, 2048].
void launch_attn_softmax_bw(float* out_grad, const float* soft_outp, int rows, int softmax_len,
                            cudaStream_t stream);

// ln_res [batch_size, hidden_dim]; vars and means [batch_size]. hidden_dim % 4 == 0.
// vars receives the biased variance mean(x^2) - mean(x)^2 WITHOUT epsilon.
void launch_layernorm(float* ln_res, float* vars, float* means, const float* inp,
                      const float* scale, const float* bias, int batch_size, int hidden_dim,
                      cudaStream_t stream);

// gamma_grad, betta_grad [hidden_dim]; inp_grad [batch_size, hidden_dim]. vars as written by
// launch_layernorm (epsilon is added here). hidden_dim % 4 == 0 and hidden_dim <= 4096.
void launch_layernorm_bw(float* gamma_grad, float* betta_grad, float* inp_grad,
                         const float* out_grad, const float* inp, const float* gamma,
                         const float* betta, const float* vars, const float* means,
                         int batch_size, int hidden_dim, cudaStream_t stream_1,
                         cudaStream_t stream_2);
}
