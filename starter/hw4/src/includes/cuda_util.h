// Host-side CUDA helpers for the kernel launchers: error checking and one-shot device buffers.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstddef>
#include <stdexcept>
#include <string>

#include <cuda_runtime.h>
#include <cublas_v2.h>

// Check the result of a CUDA runtime call; on failure print where it happened and exit(1).
#define CHECK_CUDA(call)                                                              \
  do {                                                                                \
    cudaError_t kg_err_ = (call);                                                     \
    if (kg_err_ != cudaSuccess) {                                                     \
      std::fprintf(stderr, "CUDA error at %s:%d: %s (%s)\n", __FILE__, __LINE__,      \
                   cudaGetErrorString(kg_err_), #call);                               \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

// Check that the last kernel launch was accepted (bad configuration, missing image, ...).
#define CHECK_LAUNCH() CHECK_CUDA(cudaGetLastError())

// One device allocation carved into several float arrays, so a launcher pays for a single
// cudaMalloc / cudaFree per call. Each slice starts on a 256-byte boundary (float4 safe).
class DeviceArena {
 public:
  explicit DeviceArena(size_t total_bytes) : base_(nullptr), size_(total_bytes), used_(0) {
    if (size_ > 0) CHECK_CUDA(cudaMalloc(&base_, size_));
  }
  ~DeviceArena() {
    if (base_ != nullptr) CHECK_CUDA(cudaFree(base_));
  }
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  static size_t padded(size_t n_floats) { return (n_floats * sizeof(float) + 255) / 256 * 256; }

  float* take(size_t n_floats) {
    size_t bytes = padded(n_floats);
    if (used_ + bytes > size_) throw std::runtime_error("DeviceArena: out of reserved space");
    float* p = reinterpret_cast<float*>(static_cast<char*>(base_) + used_);
    used_ += bytes;
    return p;
  }

 private:
  void* base_;
  size_t size_;
  size_t used_;
};
