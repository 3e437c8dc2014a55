// Constants and small device helpers shared by the kernels.
#pragma once

#include <cuda_runtime.h>
#include <math_constants.h>

namespace kg {

constexpr int kWarpSize = 32;
constexpr int kMaxThreads = 1024;
// LayerNorm epsilon: sigma = sqrt(mean(x^2) - mean(x)^2 + kLnEpsilon).
constexpr float kLnEpsilon = 1e-8f;

__host__ __device__ inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// float4 helpers (element-wise).
__device__ __forceinline__ float4 f4_add(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
__device__ __forceinline__ float4 f4_sub_scalar(float4 a, float s) {
  return make_float4(a.x - s, a.y - s, a.z - s, a.w - s);
}
__device__ __forceinline__ float4 f4_mul(float4 a, float4 b) {
  return make_float4(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w);
}
__device__ __forceinline__ float4 f4_scale(float4 a, float s) {
  return make_float4(a.x * s, a.y * s, a.z * s, a.w * s);
}
// a * b + c, element-wise.
__device__ __forceinline__ float4 f4_fma(float4 a, float4 b, float4 c) {
  return make_float4(fmaf(a.x, b.x, c.x), fmaf(a.y, b.y, c.y), fmaf(a.z, b.z, c.z),
                     fmaf(a.w, b.w, c.w));
}
__device__ __forceinline__ float f4_hsum(float4 a) { return (a.x + a.y) + (a.z + a.w); }
__device__ __forceinline__ float f4_dot(float4 a, float4 b) {
  return fmaf(a.x, b.x, fmaf(a.y, b.y, fmaf(a.z, b.z, a.w * b.w)));
}

}  // namespace kg
