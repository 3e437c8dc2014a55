// Basic tensor operations for MiniTorch's CUDA backend (the previous assignment's file):
// elementwise map and zip with broadcasting, reduction along one dimension, and batched
// matrix multiplication, all over strided float32 tensors.
//
// Host-pointer ABI (called from minitorch/cuda_kernel_ops.py through ctypes): every
// function copies its inputs to the device, launches, copies the (contiguous) output back,
// synchronizes, frees, and returns 0 or a cudaError_t code (the message goes to stderr).
// Shapes and strides are int arrays in elements; inputs are read through strides that the
// caller has already broadcast to the output's shape (0 on broadcast dimensions).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>

namespace {

constexpr int kMaxDims = 8;
constexpr int kThreads = 256;
constexpr int kTile = 32;

struct Layout {
  int dims;
  int shape[kMaxDims];
  long long sa[kMaxDims];  // strides of input a (or the only input)
  long long sb[kMaxDims];  // strides of input b
};

enum MapOp { kId = 0, kNeg, kExp, kLog, kRelu, kSigmoid, kInv, kTanh };
enum ZipOp { kAdd = 0, kMul, kLt, kEq, kIsClose, kMax, kReluBack, kLogBack, kInvBack, kPow };
enum ReduceOp { kRedAdd = 0, kRedMul, kRedMax };

__device__ __forceinline__ float apply_map(int fn, float x) {
  switch (fn) {
    case kId: return x;
    case kNeg: return -x;
    case kExp: return expf(x);
    case kLog: return logf(x);
    case kRelu: return x > 0.f ? x : 0.f;
    case kSigmoid: return x >= 0.f ? 1.f / (1.f + expf(-x)) : expf(x) / (1.f + expf(x));
    case kInv: return 1.f / x;
    case kTanh: return tanhf(x);
    default: return nanf("");
  }
}

__device__ __forceinline__ float apply_zip(int fn, float x, float y) {
  switch (fn) {
    case kAdd: return x + y;
    case kMul: return x * y;
    case kLt: return x < y ? 1.f : 0.f;
    case kEq: return x == y ? 1.f : 0.f;
    case kIsClose: return fabsf(x - y) < 1e-2f ? 1.f : 0.f;
    case kMax: return x > y ? x : y;
    case kReluBack: return x > 0.f ? y : 0.f;
    case kLogBack: return y / x;
    case kInvBack: return -y / (x * x);
    case kPow: return powf(x, y);
    default: return nanf("");
  }
}

__device__ __forceinline__ float apply_reduce(int fn, float acc, float x) {
  switch (fn) {
    case kRedAdd: return acc + x;
    case kRedMul: return acc * x;
    case kRedMax: return x > acc ? x : acc;
    default: return nanf("");
  }
}

// Storage positions in a and b of the output element with linear (row-major) index i.
__device__ __forceinline__ void positions(const Layout& L, long long i, long long* pa, long long* pb) {
  long long a = 0, b = 0;
  for (int d = L.dims - 1; d >= 0; --d) {
    const long long idx = i % L.shape[d];
    i /= L.shape[d];
    a += idx * L.sa[d];
    b += idx * L.sb[d];
  }
  *pa = a;
  *pb = b;
}

__global__ void map_kernel(float* out, const float* in, Layout L, long long n, int fn) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    long long pa, pb;
    positions(L, i, &pa, &pb);
    out[i] = apply_map(fn, in[pa]);
  }
}

__global__ void zip_kernel(float* out, const float* a, const float* b, Layout L, long long n, int fn) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    long long pa, pb;
    positions(L, i, &pa, &pb);
    out[i] = apply_zip(fn, a[pa], b[pb]);
  }
}

// One thread per output element (short reductions).
__global__ void reduce_thread_kernel(float* out, const float* a, Layout L, long long n, long long rstride,
                                     int rlen, float start, int fn) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    long long pa, pb;
    positions(L, i, &pa, &pb);
    float acc = start;
    for (int k = 0; k < rlen; ++k) acc = apply_reduce(fn, acc, a[pa + k * rstride]);
    out[i] = acc;
  }
}

// One block per output element (long reductions): strided partials, then a tree in shared memory.
__global__ void reduce_block_kernel(float* out, const float* a, Layout L, long long n, long long rstride,
                                    int rlen, float start, int fn) {
  __shared__ float partial[kThreads];
  for (long long i = blockIdx.x; i < n; i += gridDim.x) {
    long long pa, pb;
    positions(L, i, &pa, &pb);
    float acc = start;
    for (int k = threadIdx.x; k < rlen; k += blockDim.x) acc = apply_reduce(fn, acc, a[pa + k * rstride]);
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) partial[threadIdx.x] = apply_reduce(fn, partial[threadIdx.x], partial[threadIdx.x + s]);
      __syncthreads();
    }
    if (threadIdx.x == 0) out[i] = partial[0];
    __syncthreads();
  }
}

// out[z] (n x m, contiguous) = A[z] (n x k) @ B[z] (k x m); A and B read through strides.
__global__ void matmul_kernel(float* out, const float* A, const float* B, Layout L, int nbatch, int n,
                              int m, int k, long long a_rs, long long a_cs, long long b_rs,
                              long long b_cs) {
  __shared__ float As[kTile][kTile + 1];
  __shared__ float Bs[kTile][kTile + 1];
  const int row = blockIdx.y * kTile + threadIdx.y;
  const int col = blockIdx.x * kTile + threadIdx.x;
  for (int z = blockIdx.z; z < nbatch; z += gridDim.z) {
    long long a_off, b_off;
    positions(L, z, &a_off, &b_off);
    float acc = 0.f;
    for (int t = 0; t < k; t += kTile) {
      const int ac = t + threadIdx.x;
      const int br = t + threadIdx.y;
      As[threadIdx.y][threadIdx.x] = (row < n && ac < k) ? A[a_off + row * a_rs + ac * a_cs] : 0.f;
      Bs[threadIdx.y][threadIdx.x] = (br < k && col < m) ? B[b_off + br * b_rs + col * b_cs] : 0.f;
      __syncthreads();
#pragma unroll
      for (int j = 0; j < kTile; ++j) acc += As[threadIdx.y][j] * Bs[j][threadIdx.x];
      __syncthreads();
    }
    if (row < n && col < m) out[(long long)z * n * m + (long long)row * m + col] = acc;
  }
}

int report(cudaError_t err, const char* where) {
  if (err != cudaSuccess) {
    fprintf(stderr, "combine.cu: %s: %s\n", where, cudaGetErrorString(err));
    return static_cast<int>(err);
  }
  return 0;
}

// Device buffers freed on every exit path.
struct DeviceBuffers {
  float* ptr[3] = {nullptr, nullptr, nullptr};
  ~DeviceBuffers() {
    for (float* p : ptr)
      if (p) cudaFree(p);
  }
};

// TRY: a CUDA runtime call; PASS: one of our helpers that returns 0 or an error code.
#define TRY(call)                    \
  do {                               \
    int _rc = report((call), #call); \
    if (_rc) return _rc;             \
  } while (0)
#define PASS(call)       \
  do {                   \
    int _rc = (call);    \
    if (_rc) return _rc; \
  } while (0)

int upload(float** dst, const float* src, long long n) {
  const size_t bytes = static_cast<size_t>(n > 0 ? n : 1) * sizeof(float);
  TRY(cudaMalloc(dst, bytes));
  if (n > 0) TRY(cudaMemcpy(*dst, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyHostToDevice));
  return 0;
}

int make_layout(Layout* L, int dims, const int* shape, const int* sa, const int* sb) {
  if (dims < 0 || dims > kMaxDims) {
    fprintf(stderr, "combine.cu: %d dims (at most %d)\n", dims, kMaxDims);
    return static_cast<int>(cudaErrorInvalidValue);
  }
  L->dims = dims;
  for (int d = 0; d < dims; ++d) {
    L->shape[d] = shape[d];
    L->sa[d] = sa ? sa[d] : 0;
    L->sb[d] = sb ? sb[d] : 0;
  }
  return 0;
}

int grid_for(long long n) {
  long long blocks = (n + kThreads - 1) / kThreads;
  if (blocks > 65535LL * 16) blocks = 65535LL * 16;
  return static_cast<int>(blocks < 1 ? 1 : blocks);
}

int finish(float* out, const float* d_out, long long n) {
  TRY(cudaGetLastError());
  TRY(cudaDeviceSynchronize());
  if (n > 0) TRY(cudaMemcpy(out, d_out, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToHost));
  return 0;
}

}  // namespace

extern "C" {

// out (contiguous, out_shape) = fn(in read through in_strides).
int tensorMap(float* out, const int* out_shape, int dims, long long out_size, const float* in,
              long long in_storage_size, const int* in_strides, int fn) {
  if (out_size <= 0) return 0;
  Layout L;
  PASS(make_layout(&L, dims, out_shape, in_strides, nullptr));
  DeviceBuffers buf;
  PASS(upload(&buf.ptr[0], in, in_storage_size));
  TRY(cudaMalloc(&buf.ptr[1], static_cast<size_t>(out_size) * sizeof(float)));
  map_kernel<<<grid_for(out_size), kThreads>>>(buf.ptr[1], buf.ptr[0], L, out_size, fn);
  return finish(out, buf.ptr[1], out_size);
}

// out (contiguous, out_shape) = fn(a, b), each read through strides broadcast to out_shape.
int tensorZip(float* out, const int* out_shape, int dims, long long out_size, const float* a,
              long long a_storage_size, const int* a_strides, const float* b, long long b_storage_size,
              const int* b_strides, int fn) {
  if (out_size <= 0) return 0;
  Layout L;
  PASS(make_layout(&L, dims, out_shape, a_strides, b_strides));
  DeviceBuffers buf;
  PASS(upload(&buf.ptr[0], a, a_storage_size));
  PASS(upload(&buf.ptr[1], b, b_storage_size));
  TRY(cudaMalloc(&buf.ptr[2], static_cast<size_t>(out_size) * sizeof(float)));
  zip_kernel<<<grid_for(out_size), kThreads>>>(buf.ptr[2], buf.ptr[0], buf.ptr[1], L, out_size, fn);
  return finish(out, buf.ptr[2], out_size);
}

// out (contiguous, out_shape with out_shape[reduce_dim] == 1) = fold of fn over a's reduce_dim,
// starting from `start`; a_strides are a's own strides, reduce_len its size along reduce_dim.
int tensorReduce(float* out, const int* out_shape, int dims, long long out_size, const float* a,
                 long long a_storage_size, const int* a_strides, int reduce_dim, int reduce_len,
                 float start, int fn) {
  if (out_size <= 0) return 0;
  if (reduce_dim < 0 || reduce_dim >= dims) return report(cudaErrorInvalidValue, "tensorReduce: reduce_dim");
  Layout L;
  PASS(make_layout(&L, dims, out_shape, a_strides, nullptr));
  const long long rstride = a_strides[reduce_dim];
  L.sa[reduce_dim] = 0;
  DeviceBuffers buf;
  PASS(upload(&buf.ptr[0], a, a_storage_size));
  TRY(cudaMalloc(&buf.ptr[1], static_cast<size_t>(out_size) * sizeof(float)));
  if (reduce_len >= 512 && out_size <= 65535LL * 32) {
    const int grid = static_cast<int>(out_size < 65535LL * 16 ? out_size : 65535LL * 16);
    reduce_block_kernel<<<grid, kThreads>>>(buf.ptr[1], buf.ptr[0], L, out_size, rstride, reduce_len, start, fn);
  } else {
    reduce_thread_kernel<<<grid_for(out_size), kThreads>>>(buf.ptr[1], buf.ptr[0], L, out_size, rstride,
                                                           reduce_len, start, fn);
  }
  return finish(out, buf.ptr[1], out_size);
}

// out [batch..., n, m] (contiguous) = a [batch..., n, k] @ b [batch..., k, m].
// batch_shape has batch_dims entries; a_bstrides / b_bstrides are the inputs' strides over those
// dims broadcast to batch_shape; a_rs/a_cs and b_rs/b_cs their row and column strides.
int MatrixMultiply(float* out, int batch_dims, const int* batch_shape, int n, int m, int k,
                   const float* a, long long a_storage_size, const int* a_bstrides, int a_rs, int a_cs,
                   const float* b, long long b_storage_size, const int* b_bstrides, int b_rs, int b_cs) {
  Layout L;
  PASS(make_layout(&L, batch_dims, batch_shape, a_bstrides, b_bstrides));
  long long nbatch = 1;
  for (int d = 0; d < batch_dims; ++d) nbatch *= batch_shape[d];
  const long long out_size = nbatch * n * m;
  if (out_size <= 0) return 0;
  DeviceBuffers buf;
  PASS(upload(&buf.ptr[0], a, a_storage_size));
  PASS(upload(&buf.ptr[1], b, b_storage_size));
  TRY(cudaMalloc(&buf.ptr[2], static_cast<size_t>(out_size) * sizeof(float)));
  dim3 block(kTile, kTile);
  dim3 grid((m + kTile - 1) / kTile, (n + kTile - 1) / kTile,
            static_cast<unsigned>(nbatch < 65535 ? nbatch : 65535));
  matmul_kernel<<<grid, block>>>(buf.ptr[2], buf.ptr[0], buf.ptr[1], L, static_cast<int>(nbatch), n, m, k,
                                 a_rs, a_cs, b_rs, b_cs);
  return finish(out, buf.ptr[2], out_size);
}

}  // extern "C"
