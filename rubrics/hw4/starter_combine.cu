// starter_combine.cu: kernelgrade's trusted stand-in for a student's combine.so.
//
// What it is: MiniTorch's basic tensor ops (map, zip, reduce, batched matmul) behind the
// C ABI that the official llmsys_hw4 starter's minitorch/cuda_kernel_ops.py loads through
// ctypes: tensorMap, tensorZip, tensorReduce, MatrixMultiply, with that file's argtypes
// (host float32 storages, int32 shape/stride arrays, int sizes, a C double reduce_value)
// and the operator ids of its fn_map (1 add ... 18 tanh).
//
// Why it costs what it costs: when kernelgrade times a student's composition of basic ops
// (for example a softmax or LayerNorm written with map/zip/reduce), the student's own
// combine.so is replaced by this library, so that slow basic ops cannot inflate the
// speed-up of the student's fused kernels. The baseline must therefore cost what an
// ordinary HW3 combine.cu costs per call, and the host side here makes the same sequence
// of CUDA runtime calls as the typical HW3 wrapper: one cudaMalloc per storage and per
// shape and strides array, a host-to-device cudaMemcpy of every input storage and every
// shape/strides array (the output storage is not uploaded), one kernel launch with small
// blocks (32 threads; 32x32 shared-memory tiles for matmul), a device-to-host cudaMemcpy
// of the output, cudaDeviceSynchronize, cudaGetLastError, and one cudaFree per buffer.
// Kernels are plain: one thread per output element; a reduce thread loops over the
// reduced dimension. Any CUDA error is reported on stderr and the process exits with 1.
//
// Indexing follows MiniTorch's tensor_data.py: an output element is found by its ordinal
// (to_index over the output shape) and written at the output's own strides; inputs are
// read through broadcast_index (dims aligned on the right, size-1 dims pinned to 0) and
// index_to_position at their own strides, so permuted (non-contiguous) inputs work.

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#define MAX_DIMS 32        // as MiniTorch's tensor_data.MAX_DIMS
#define THREADS_PER_BLOCK 32
#define TILE 32

namespace {

enum OpId {
  OP_ADD = 1,
  OP_MUL = 2,
  OP_ID = 3,
  OP_NEG = 4,
  OP_LT = 5,
  OP_EQ = 6,
  OP_SIGMOID = 7,
  OP_RELU = 8,
  OP_RELU_BACK = 9,
  OP_LOG = 10,
  OP_LOG_BACK = 11,
  OP_EXP = 12,
  OP_INV = 13,
  OP_INV_BACK = 14,
  OP_IS_CLOSE = 15,
  OP_MAX = 16,
  OP_POW = 17,
  OP_TANH = 18,
};

constexpr float kLogEps = 1e-6f;  // operators.EPS, added inside log and log_back

void die(const char* where, const char* what) {
  fprintf(stderr, "starter_combine: %s: %s\n", where, what);
  exit(1);
}

void check(cudaError_t err, const char* where) {
  if (err != cudaSuccess) die(where, cudaGetErrorString(err));
}

bool is_unary(int fn) {
  return fn == OP_ID || fn == OP_NEG || fn == OP_SIGMOID || fn == OP_RELU || fn == OP_LOG ||
         fn == OP_EXP || fn == OP_INV || fn == OP_TANH;
}

bool is_binary(int fn) {
  return fn == OP_ADD || fn == OP_MUL || fn == OP_LT || fn == OP_EQ || fn == OP_RELU_BACK ||
         fn == OP_LOG_BACK || fn == OP_INV_BACK || fn == OP_IS_CLOSE || fn == OP_MAX ||
         fn == OP_POW;
}

__device__ float unary_op(int fn, float x) {
  switch (fn) {
    case OP_ID: return x;
    case OP_NEG: return -x;
    case OP_SIGMOID:
      if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
      return expf(x) / (1.0f + expf(x));
    case OP_RELU: return x > 0.0f ? x : 0.0f;
    case OP_LOG: return logf(x + kLogEps);
    case OP_EXP: return expf(x);
    case OP_INV: return 1.0f / x;
    case OP_TANH: return tanhf(x);
    default: return 0.0f;  // unreachable: the host checks fn first
  }
}

// Argument order as operators.py: relu_back(x, d), log_back(x, d), inv_back(x, d).
__device__ float binary_op(int fn, float x, float y) {
  switch (fn) {
    case OP_ADD: return x + y;
    case OP_MUL: return x * y;
    case OP_LT: return x < y ? 1.0f : 0.0f;
    case OP_EQ: return x == y ? 1.0f : 0.0f;
    case OP_RELU_BACK: return x > 0.0f ? y : 0.0f;
    case OP_LOG_BACK: return y / (x + kLogEps);
    case OP_INV_BACK: return -(1.0f / (x * x)) * y;
    case OP_IS_CLOSE: return (x - y < 1e-2f && y - x < 1e-2f) ? 1.0f : 0.0f;
    case OP_MAX: return x > y ? x : y;
    case OP_POW: return powf(x, y);
    default: return 0.0f;  // unreachable: the host checks fn first
  }
}

// Multi-index of `ordinal` in `shape` (last dim fastest), as tensor_data.to_index.
__device__ void ordinal_to_index(int ordinal, const int* shape, int nd, int* index) {
  for (int d = nd - 1; d >= 0; --d) {
    index[d] = ordinal % shape[d];
    ordinal /= shape[d];
  }
}

// Storage position of the element of a (small) tensor that a (big) index broadcasts to,
// as tensor_data.broadcast_index followed by index_to_position.
__device__ int broadcast_position(const int* big_index, int big_nd, const int* shape,
                                  const int* strides, int nd) {
  int pos = 0;
  for (int d = 0; d < nd; ++d) {
    if (shape[d] > 1) pos += big_index[d + big_nd - nd] * strides[d];
  }
  return pos;
}

__device__ int index_position(const int* index, const int* strides, int nd) {
  int pos = 0;
  for (int d = 0; d < nd; ++d) pos += index[d] * strides[d];
  return pos;
}

__global__ void map_kernel(float* out, const int* out_shape, const int* out_strides, int out_nd,
                           int out_size, const float* in, const int* in_shape,
                           const int* in_strides, int in_nd, int fn) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= out_size) return;
  int index[MAX_DIMS];
  ordinal_to_index(i, out_shape, out_nd, index);
  float x = in[broadcast_position(index, out_nd, in_shape, in_strides, in_nd)];
  out[index_position(index, out_strides, out_nd)] = unary_op(fn, x);
}

__global__ void zip_kernel(float* out, const int* out_shape, const int* out_strides, int out_nd,
                           int out_size, const float* a, const int* a_shape,
                           const int* a_strides, int a_nd, const float* b, const int* b_shape,
                           const int* b_strides, int b_nd, int fn) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= out_size) return;
  int index[MAX_DIMS];
  ordinal_to_index(i, out_shape, out_nd, index);
  float x = a[broadcast_position(index, out_nd, a_shape, a_strides, a_nd)];
  float y = b[broadcast_position(index, out_nd, b_shape, b_strides, b_nd)];
  out[index_position(index, out_strides, out_nd)] = binary_op(fn, x, y);
}

__global__ void reduce_kernel(float* out, const int* out_shape, const int* out_strides,
                              int out_size, const float* a, const int* a_shape,
                              const int* a_strides, int reduce_dim, float start, int nd,
                              int fn) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= out_size) return;
  int index[MAX_DIMS];
  ordinal_to_index(i, out_shape, nd, index);
  int out_pos = index_position(index, out_strides, nd);
  index[reduce_dim] = 0;
  int pos = index_position(index, a_strides, nd);
  int step = a_strides[reduce_dim];
  float acc = start;
  for (int j = 0; j < a_shape[reduce_dim]; ++j) {
    acc = binary_op(fn, acc, a[pos]);
    pos += step;
  }
  out[out_pos] = acc;
}

// out[z] = a[z or 0] @ b[z or 0]; every operand at its own 3-D strides; a batch dim of 1
// broadcasts. One thread per output element, TILE x TILE tiles staged in shared memory.
__global__ void matmul_kernel(float* out, const int* out_shape, const int* out_strides,
                              const float* a, const int* a_shape, const int* a_strides,
                              const float* b, const int* b_shape, const int* b_strides) {
  __shared__ float a_tile[TILE][TILE];
  __shared__ float b_tile[TILE][TILE];
  const int m = out_shape[1], p = out_shape[2], n = a_shape[2];
  const int z = blockIdx.z;
  const int row = blockIdx.y * TILE + threadIdx.y;
  const int col = blockIdx.x * TILE + threadIdx.x;
  const float* a_mat = a + (a_shape[0] > 1 ? z * a_strides[0] : 0);
  const float* b_mat = b + (b_shape[0] > 1 ? z * b_strides[0] : 0);
  float acc = 0.0f;
  for (int k0 = 0; k0 < n; k0 += TILE) {
    int ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    a_tile[threadIdx.y][threadIdx.x] =
        (row < m && ka < n) ? a_mat[row * a_strides[1] + ka * a_strides[2]] : 0.0f;
    b_tile[threadIdx.y][threadIdx.x] =
        (kb < n && col < p) ? b_mat[kb * b_strides[1] + col * b_strides[2]] : 0.0f;
    __syncthreads();
    for (int k = 0; k < TILE; ++k) acc += a_tile[threadIdx.y][k] * b_tile[k][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < p) {
    out[z * out_strides[0] + row * out_strides[1] + col * out_strides[2]] = acc;
  }
}

long product(const int* shape, int nd) {
  long n = 1;
  for (int d = 0; d < nd; ++d) n *= shape[d];
  return n;
}

// Number of floats from a tensor's storage that its view can touch (max position + 1);
// the element count for contiguous and permuted tensors.
long extent(const int* shape, const int* strides, int nd) {
  long last = 0;
  for (int d = 0; d < nd; ++d) {
    if (shape[d] <= 0) return 0;
    if (strides[d] > 0) last += (long)(shape[d] - 1) * strides[d];
  }
  return last + 1;
}

bool broadcasts_to(const int* shape, int nd, const int* big_shape, int big_nd) {
  if (nd > big_nd) return false;
  for (int d = 0; d < nd; ++d) {
    int s = shape[d], big = big_shape[d + big_nd - nd];
    if (s != 1 && s != big) return false;
  }
  return true;
}

// tensorMap gets one dims count, len(a.shape); the output has at least that many dims and
// more only when Tensor.expand maps a smaller tensor into a broadcast buffer. Dims are
// added while the output's leading dims cannot be the whole output: their product falls
// short of out_size, or the input does not broadcast to them. For a valid call this reads
// only entries that exist. (The ABI cannot tell out [3,3,1] from [3,3] here; the two differ
// only in where an input of shape [3,1] is aligned.)
int map_output_dims(const int* out_shape, int out_size, const int* in_shape, int in_nd) {
  int nd = in_nd;
  while (true) {
    long n = product(out_shape, nd);
    if (n == out_size && broadcasts_to(in_shape, in_nd, out_shape, nd)) return nd;
    if (n > out_size || nd >= MAX_DIMS) die("tensorMap", "input does not broadcast to output");
    ++nd;
  }
}

void check_dims(const char* where, int nd) {
  if (nd < 0 || nd > MAX_DIMS) die(where, "number of dims out of range");
}

int blocks_for(int n) { return (n + THREADS_PER_BLOCK - 1) / THREADS_PER_BLOCK; }

template <typename T>
T* device_alloc(long count, const char* where) {
  T* ptr = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&ptr), count * sizeof(T)), where);
  return ptr;
}

template <typename T>
void upload(T* dst, const T* src, long count, const char* where) {
  check(cudaMemcpy(dst, src, count * sizeof(T), cudaMemcpyHostToDevice), where);
}

void finish(float* host_out, const float* dev_out, long count, const char* where) {
  check(cudaMemcpy(host_out, dev_out, count * sizeof(float), cudaMemcpyDeviceToHost), where);
  check(cudaDeviceSynchronize(), where);
  check(cudaGetLastError(), where);
}

void release(void* ptr, const char* where) { check(cudaFree(ptr), where); }

}  // namespace

extern "C" {

void tensorMap(float* out, int* out_shape, int* out_strides, int out_size, float* in_storage,
               int* in_shape, int* in_strides, int in_size, int shape_len, int fn_id) {
  const char* where = "tensorMap";
  (void)in_size;  // the input's reach is taken from its shape and strides
  if (!is_unary(fn_id)) die(where, "fn_id is not a unary operator");
  check_dims(where, shape_len);
  if (out_size <= 0) return;
  const int out_nd = map_output_dims(out_shape, out_size, in_shape, shape_len);
  const long out_len = extent(out_shape, out_strides, out_nd);
  const long in_len = extent(in_shape, in_strides, shape_len);

  float* d_out = device_alloc<float>(out_len, where);
  float* d_in = device_alloc<float>(in_len, where);
  int* d_out_shape = device_alloc<int>(out_nd, where);
  int* d_out_strides = device_alloc<int>(out_nd, where);
  int* d_in_shape = device_alloc<int>(shape_len, where);
  int* d_in_strides = device_alloc<int>(shape_len, where);

  upload(d_in, in_storage, in_len, where);
  upload(d_out_shape, out_shape, out_nd, where);
  upload(d_out_strides, out_strides, out_nd, where);
  upload(d_in_shape, in_shape, shape_len, where);
  upload(d_in_strides, in_strides, shape_len, where);

  map_kernel<<<blocks_for(out_size), THREADS_PER_BLOCK>>>(
      d_out, d_out_shape, d_out_strides, out_nd, out_size, d_in, d_in_shape, d_in_strides,
      shape_len, fn_id);
  finish(out, d_out, out_len, where);

  release(d_out, where);
  release(d_in, where);
  release(d_out_shape, where);
  release(d_out_strides, where);
  release(d_in_shape, where);
  release(d_in_strides, where);
}

void tensorZip(float* out, int* out_shape, int* out_strides, int out_size, int out_shape_size,
               float* a_storage, int* a_shape, int* a_strides, int a_size, int a_shape_size,
               float* b_storage, int* b_shape, int* b_strides, int b_size, int b_shape_size,
               int fn_id) {
  const char* where = "tensorZip";
  (void)a_size;
  (void)b_size;
  if (!is_binary(fn_id)) die(where, "fn_id is not a binary operator");
  check_dims(where, out_shape_size);
  check_dims(where, a_shape_size);
  check_dims(where, b_shape_size);
  if (!broadcasts_to(a_shape, a_shape_size, out_shape, out_shape_size) ||
      !broadcasts_to(b_shape, b_shape_size, out_shape, out_shape_size)) {
    die(where, "an input does not broadcast to the output");
  }
  if (out_size <= 0) return;
  const long out_len = extent(out_shape, out_strides, out_shape_size);
  const long a_len = extent(a_shape, a_strides, a_shape_size);
  const long b_len = extent(b_shape, b_strides, b_shape_size);

  float* d_out = device_alloc<float>(out_len, where);
  float* d_a = device_alloc<float>(a_len, where);
  float* d_b = device_alloc<float>(b_len, where);
  int* d_out_shape = device_alloc<int>(out_shape_size, where);
  int* d_out_strides = device_alloc<int>(out_shape_size, where);
  int* d_a_shape = device_alloc<int>(a_shape_size, where);
  int* d_a_strides = device_alloc<int>(a_shape_size, where);
  int* d_b_shape = device_alloc<int>(b_shape_size, where);
  int* d_b_strides = device_alloc<int>(b_shape_size, where);

  upload(d_a, a_storage, a_len, where);
  upload(d_b, b_storage, b_len, where);
  upload(d_out_shape, out_shape, out_shape_size, where);
  upload(d_out_strides, out_strides, out_shape_size, where);
  upload(d_a_shape, a_shape, a_shape_size, where);
  upload(d_a_strides, a_strides, a_shape_size, where);
  upload(d_b_shape, b_shape, b_shape_size, where);
  upload(d_b_strides, b_strides, b_shape_size, where);

  zip_kernel<<<blocks_for(out_size), THREADS_PER_BLOCK>>>(
      d_out, d_out_shape, d_out_strides, out_shape_size, out_size, d_a, d_a_shape, d_a_strides,
      a_shape_size, d_b, d_b_shape, d_b_strides, b_shape_size, fn_id);
  finish(out, d_out, out_len, where);

  release(d_out, where);
  release(d_a, where);
  release(d_b, where);
  release(d_out_shape, where);
  release(d_out_strides, where);
  release(d_a_shape, where);
  release(d_a_strides, where);
  release(d_b_shape, where);
  release(d_b_strides, where);
}

void tensorReduce(float* out, int* out_shape, int* out_strides, int out_size, float* a_storage,
                  int* a_shape, int* a_strides, int reduce_dim, double reduce_value,
                  int shape_len, int fn_id) {
  const char* where = "tensorReduce";
  if (!is_binary(fn_id)) die(where, "fn_id is not a binary operator");
  check_dims(where, shape_len);
  if (reduce_dim < 0 || reduce_dim >= shape_len) die(where, "reduce_dim out of range");
  if (out_size <= 0) return;
  const long out_len = extent(out_shape, out_strides, shape_len);
  const long a_len = extent(a_shape, a_strides, shape_len);

  float* d_out = device_alloc<float>(out_len, where);
  float* d_a = device_alloc<float>(a_len > 0 ? a_len : 1, where);
  int* d_out_shape = device_alloc<int>(shape_len, where);
  int* d_out_strides = device_alloc<int>(shape_len, where);
  int* d_a_shape = device_alloc<int>(shape_len, where);
  int* d_a_strides = device_alloc<int>(shape_len, where);

  upload(d_a, a_storage, a_len, where);
  upload(d_out_shape, out_shape, shape_len, where);
  upload(d_out_strides, out_strides, shape_len, where);
  upload(d_a_shape, a_shape, shape_len, where);
  upload(d_a_strides, a_strides, shape_len, where);

  reduce_kernel<<<blocks_for(out_size), THREADS_PER_BLOCK>>>(
      d_out, d_out_shape, d_out_strides, out_size, d_a, d_a_shape, d_a_strides, reduce_dim,
      static_cast<float>(reduce_value), shape_len, fn_id);
  finish(out, d_out, out_len, where);

  release(d_out, where);
  release(d_a, where);
  release(d_out_shape, where);
  release(d_out_strides, where);
  release(d_a_shape, where);
  release(d_a_strides, where);
}

void MatrixMultiply(float* out, int* out_shape, int* out_strides, float* a_storage,
                    int* a_shape, int* a_strides, float* b_storage, int* b_shape,
                    int* b_strides, int batch, int m, int p) {
  const char* where = "MatrixMultiply";
  (void)batch;
  // The caller passes batch = a.shape[0], m = a.shape[1], p = b.shape[2]; the output's own
  // batch dim sizes the grid so that an a with batch 1 still fills every output matrix.
  const int out_batch = out_shape[0];
  const int n = a_shape[2];
  if (out_shape[1] != m || out_shape[2] != p || b_shape[1] != n || b_shape[2] != p ||
      (a_shape[0] != out_batch && a_shape[0] != 1) ||
      (b_shape[0] != out_batch && b_shape[0] != 1)) {
    die(where, "shapes do not agree");
  }
  if ((long)out_batch * m * p <= 0) return;
  const long out_len = extent(out_shape, out_strides, 3);
  const long a_len = extent(a_shape, a_strides, 3);
  const long b_len = extent(b_shape, b_strides, 3);

  float* d_out = device_alloc<float>(out_len, where);
  float* d_a = device_alloc<float>(a_len > 0 ? a_len : 1, where);
  float* d_b = device_alloc<float>(b_len > 0 ? b_len : 1, where);
  int* d_out_shape = device_alloc<int>(3, where);
  int* d_out_strides = device_alloc<int>(3, where);
  int* d_a_shape = device_alloc<int>(3, where);
  int* d_a_strides = device_alloc<int>(3, where);
  int* d_b_shape = device_alloc<int>(3, where);
  int* d_b_strides = device_alloc<int>(3, where);

  upload(d_a, a_storage, a_len, where);
  upload(d_b, b_storage, b_len, where);
  upload(d_out_shape, out_shape, 3, where);
  upload(d_out_strides, out_strides, 3, where);
  upload(d_a_shape, a_shape, 3, where);
  upload(d_a_strides, a_strides, 3, where);
  upload(d_b_shape, b_shape, 3, where);
  upload(d_b_strides, b_strides, 3, where);

  dim3 block(TILE, TILE, 1);
  dim3 grid((p + TILE - 1) / TILE, (m + TILE - 1) / TILE, out_batch);
  matmul_kernel<<<grid, block>>>(d_out, d_out_shape, d_out_strides, d_a, d_a_shape, d_a_strides,
                                 d_b, d_b_shape, d_b_strides);
  finish(out, d_out, out_len, where);

  release(d_out, where);
  release(d_a, where);
  release(d_b, where);
  release(d_out_shape, where);
  release(d_out_strides, where);
  release(d_a_shape, where);
  release(d_a_strides, where);
  release(d_b_shape, where);
  release(d_b_strides, where);
}

}  // extern "C"
