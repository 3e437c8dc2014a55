"""CudaKernelOps: MiniTorch's CUDA backend.

Basic ops (map / zip / reduce / matmul) run in combine.so; the hw4 fused ops run in
softmax_kernel.so and layernorm_kernel.so. Every .so takes HOST float32 pointers (the
tensors' numpy `_storage`), copies to the device, launches, copies back and synchronizes.
The libraries are loaded by the relative path minitorch/cuda_kernels/*.so: run with the
assignment root as the working directory (after `bash compile_cuda.sh`).
"""
from __future__ import annotations

import ctypes
import os
from typing import Callable

import numpy as np

import pycuda.autoinit  # noqa: F401  (the course's setup: a CUDA context before any kernel)
import torch

from . import operators
from .tensor import Tensor
from .tensor_data import TensorData, broadcast_strides, shape_broadcast, strides_from_shape
from .tensor_ops import TensorOps

KERNEL_DIR = os.path.join("minitorch", "cuda_kernels")

_P = ctypes.c_void_p
_I = ctypes.c_int
_L = ctypes.c_longlong
_F = ctypes.c_float

MAP_IDS = {
    operators.id: 0, operators.neg: 1, operators.exp: 2, operators.log: 3,
    operators.relu: 4, operators.sigmoid: 5, operators.inv: 6, operators.tanh: 7,
}
ZIP_IDS = {
    operators.add: 0, operators.mul: 1, operators.lt: 2, operators.eq: 3, operators.is_close: 4,
    operators.max: 5, operators.relu_back: 6, operators.log_back: 7, operators.inv_back: 8,
    operators.pow: 9,
}
REDUCE_IDS = {operators.add: 0, operators.mul: 1, operators.max: 2}

_LIBS: dict[str, ctypes.CDLL] = {}


def _lib(name: str) -> ctypes.CDLL:
    """minitorch/cuda_kernels/<name>.so, relative to the working directory, loaded once."""
    if name not in _LIBS:
        lib = ctypes.CDLL(os.path.join(KERNEL_DIR, f"{name}.so"))
        if name == "combine":
            lib.tensorMap.argtypes = [_P, _P, _I, _L, _P, _L, _P, _I]
            lib.tensorZip.argtypes = [_P, _P, _I, _L, _P, _L, _P, _P, _L, _P, _I]
            lib.tensorReduce.argtypes = [_P, _P, _I, _L, _P, _L, _P, _I, _I, _F, _I]
            lib.MatrixMultiply.argtypes = [_P, _I, _P, _I, _I, _I, _P, _L, _P, _I, _I, _P, _L, _P, _I, _I]
            for fn in (lib.tensorMap, lib.tensorZip, lib.tensorReduce, lib.MatrixMultiply):
                fn.restype = _I
        elif name == "softmax_kernel":
            lib.launch_attn_softmax.argtypes = [_P, _P, _I, _I, _I, _I, ctypes.c_bool, _P]
            lib.launch_attn_softmax.restype = None
            lib.launch_attn_softmax_bw.argtypes = [_P, _P, _I, _I, _P]
            lib.launch_attn_softmax_bw.restype = None
        elif name == "layernorm_kernel":
            lib.launch_layernorm.argtypes = [_P, _P, _P, _P, _P, _P, _I, _I, _P]
            lib.launch_layernorm.restype = None
            lib.launch_layernorm_bw.argtypes = [_P, _P, _P, _P, _P, _P, _P, _P, _P, _I, _I, _P, _P]
            lib.launch_layernorm_bw.restype = None
        _LIBS[name] = lib
    return _LIBS[name]


def _stream() -> int:
    """The current torch CUDA stream's handle (0 is the default stream). MINITORCH_STREAM0=1
    passes 0 without asking torch."""
    if os.environ.get("MINITORCH_STREAM0") == "1":
        return 0
    return int(torch.cuda.current_stream().cuda_stream)


def _ptr(arr: np.ndarray) -> ctypes.c_void_p:
    """A pointer to arr's data that keeps arr alive until the ctypes call returns (temporaries
    such as _ptr(_f32(t)) would otherwise be freed before the call)."""
    return arr.ctypes.data_as(ctypes.c_void_p)


def _ints(values) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values, dtype=np.int32).reshape(-1) if len(values) else np.zeros(1, np.int32))


def _f32(t: Tensor) -> np.ndarray:
    """A C-contiguous float32 copy-or-view of t's elements in row-major order."""
    td = t._tensor
    if td.is_contiguous() and td._storage.size == td.size:
        return td._storage
    return np.ascontiguousarray(td.np_view(), dtype=np.float32).reshape(-1)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"combine.so {what} failed with CUDA error {rc}")


def _new(shape, backend) -> tuple[Tensor, np.ndarray]:
    shape = tuple(shape)
    storage = np.empty(int(np.prod(shape, dtype=np.int64)) if shape else 1, dtype=np.float32)
    return Tensor(TensorData(storage, shape, strides_from_shape(shape)), backend=backend), storage


def _as_tensor(arr: np.ndarray, shape, backend) -> Tensor:
    return Tensor(TensorData(arr.reshape(-1), tuple(shape)), backend=backend)


class CudaKernelOps(TensorOps):
    cuda = True

    @staticmethod
    def map(fn: Callable[[float], float]):
        fn_id = MAP_IDS[fn]

        def run(a: Tensor, out: Tensor | None = None) -> Tensor:
            res, buf = _new(a.shape, a.backend)
            s = a._tensor
            rc = _lib("combine").tensorMap(
                _ptr(buf), _ptr(_ints(a.shape)), a.dims, a.size, _ptr(s._storage), s._storage.size,
                _ptr(_ints(s.strides)), fn_id,
            )
            _check(rc, "tensorMap")
            return res

        return run

    @staticmethod
    def zip(fn: Callable[[float, float], float]):
        fn_id = ZIP_IDS[fn]

        def run(a: Tensor, b: Tensor) -> Tensor:
            shape = shape_broadcast(a.shape, b.shape)
            res, buf = _new(shape, a.backend)
            sa, sb = a._tensor, b._tensor
            rc = _lib("combine").tensorZip(
                _ptr(buf), _ptr(_ints(shape)), len(shape), res.size,
                _ptr(sa._storage), sa._storage.size, _ptr(_ints(broadcast_strides(sa.shape, sa.strides, shape))),
                _ptr(sb._storage), sb._storage.size, _ptr(_ints(broadcast_strides(sb.shape, sb.strides, shape))),
                fn_id,
            )
            _check(rc, "tensorZip")
            return res

        return run

    @staticmethod
    def reduce(fn: Callable[[float, float], float], start: float = 0.0):
        fn_id = REDUCE_IDS[fn]

        def run(a: Tensor, dim: int) -> Tensor:
            shape = list(a.shape)
            shape[dim] = 1
            res, buf = _new(shape, a.backend)
            s = a._tensor
            rc = _lib("combine").tensorReduce(
                _ptr(buf), _ptr(_ints(shape)), len(shape), res.size, _ptr(s._storage), s._storage.size,
                _ptr(_ints(s.strides)), dim, a.shape[dim], float(start), fn_id,
            )
            _check(rc, "tensorReduce")
            return res

        return run

    @staticmethod
    def matrix_multiply(a: Tensor, b: Tensor) -> Tensor:
        squeeze_a = a.dims == 1
        squeeze_b = b.dims == 1
        if squeeze_a:
            a = Tensor(TensorData(a._tensor._storage, (1, a.shape[0]), (0, a._tensor.strides[0])), backend=a.backend)
        if squeeze_b:
            b = Tensor(TensorData(b._tensor._storage, (b.shape[0], 1), (b._tensor.strides[0], 0)), backend=b.backend)
        n, k = a.shape[-2:]
        k2, m = b.shape[-2:]
        if k != k2:
            raise ValueError(f"matmul shapes {a.shape} and {b.shape} do not match")
        batch = shape_broadcast(a.shape[:-2], b.shape[:-2])
        sa, sb = a._tensor, b._tensor
        a_b = broadcast_strides(sa.shape[:-2], sa.strides[:-2], batch)
        b_b = broadcast_strides(sb.shape[:-2], sb.strides[:-2], batch)
        res, buf = _new((*batch, n, m), a.backend)
        rc = _lib("combine").MatrixMultiply(
            _ptr(buf), len(batch), _ptr(_ints(batch)), n, m, k,
            _ptr(sa._storage), sa._storage.size, _ptr(_ints(a_b)), sa.strides[-2], sa.strides[-1],
            _ptr(sb._storage), sb._storage.size, _ptr(_ints(b_b)), sb.strides[-2], sb.strides[-1],
        )
        _check(rc, "MatrixMultiply")
        if squeeze_a or squeeze_b:
            shape = list(res.shape)
            if squeeze_b:
                shape.pop(-1)
            if squeeze_a:
                shape.pop(-2 if not squeeze_b else -1)
            res = _as_tensor(buf, shape or [1], a.backend)
        return res

    # ------------------------------------------------------------------ fused hw4 ops
    @staticmethod
    def attn_softmax_fw(inp: Tensor, mask: Tensor, mask_future: bool = False) -> Tensor:
        """softmax over the last dim of inp [batch, nhead, from_len, to_len] + mask [batch, to_len]."""
        batch, nhead, from_len, to_len = inp.shape
        if to_len > 1024:
            raise ValueError(f"attn_softmax_fw: to_len {to_len} > 1024 is not supported")
        if mask.size != batch * to_len:
            raise ValueError(f"attn_softmax_fw: mask of shape {mask.shape} for {inp.shape}")
        out = np.array(_f32(inp), dtype=np.float32, copy=True)  # the kernel works in place
        mask_buf = _f32(mask)
        _lib("softmax_kernel").launch_attn_softmax(
            _ptr(out), _ptr(mask_buf), batch, nhead, from_len, to_len, bool(mask_future), _stream()
        )
        return _as_tensor(out, inp.shape, inp.backend)

    @staticmethod
    def attn_softmax_bw(out_grad: Tensor, soft_inp: Tensor) -> Tensor:
        """grad_in = y * (g - sum(g * y)) over the last dim, y = the forward's output."""
        # BEGIN SOLUTION: CudaKernelOps.attn_softmax_bw
        softmax_len = out_grad.shape[-1]
        if softmax_len > 2048:
            raise ValueError(f"attn_softmax_bw: softmax_len {softmax_len} > 2048 is not supported")
        rows = out_grad.size // softmax_len
        grad = np.array(_f32(out_grad), dtype=np.float32, copy=True)  # in place
        soft = _f32(soft_inp)
        _lib("softmax_kernel").launch_attn_softmax_bw(_ptr(grad), _ptr(soft), rows, softmax_len, _stream())
        return _as_tensor(grad, out_grad.shape, out_grad.backend)
        # END SOLUTION

    @staticmethod
    def layernorm_fw(inp: Tensor, gamma: Tensor, beta: Tensor):
        """(out, var, mean) of LayerNorm over the last dim; var and mean have one entry per row."""
        # BEGIN SOLUTION: CudaKernelOps.layernorm_fw
        hidden = inp.shape[-1]
        if hidden % 4 != 0:
            raise ValueError(f"layernorm_fw: hidden_dim {hidden} is not a multiple of 4")
        rows = inp.size // hidden
        x = _f32(inp)
        out = np.empty(inp.size, dtype=np.float32)
        var = np.empty(rows, dtype=np.float32)
        mean = np.empty(rows, dtype=np.float32)
        _lib("layernorm_kernel").launch_layernorm(
            _ptr(out), _ptr(var), _ptr(mean), _ptr(x), _ptr(_f32(gamma)), _ptr(_f32(beta)), rows, hidden, _stream()
        )
        b = inp.backend
        return _as_tensor(out, inp.shape, b), _as_tensor(var, (rows,), b), _as_tensor(mean, (rows,), b)
        # END SOLUTION

    @staticmethod
    def layernorm_bw(out_grad: Tensor, inp: Tensor, gamma: Tensor, beta: Tensor, var: Tensor, mean: Tensor):
        """(grad_inp, grad_gamma, grad_beta) of LayerNorm given the forward's var and mean."""
        # BEGIN SOLUTION: CudaKernelOps.layernorm_bw
        hidden = inp.shape[-1]
        if hidden % 4 != 0 or hidden > 4096:
            raise ValueError(f"layernorm_bw: hidden_dim {hidden} must be a multiple of 4 and <= 4096")
        rows = inp.size // hidden
        grad_inp = np.empty(inp.size, dtype=np.float32)
        grad_gamma = np.empty(hidden, dtype=np.float32)
        grad_beta = np.empty(hidden, dtype=np.float32)
        stream = _stream()
        _lib("layernorm_kernel").launch_layernorm_bw(
            _ptr(grad_gamma), _ptr(grad_beta), _ptr(grad_inp), _ptr(_f32(out_grad)), _ptr(_f32(inp)),
            _ptr(_f32(gamma)), _ptr(_f32(beta)), _ptr(_f32(var)), _ptr(_f32(mean)), rows, hidden, stream, stream,
        )
        b = out_grad.backend
        return (
            _as_tensor(grad_inp, inp.shape, b),
            _as_tensor(grad_gamma, gamma.shape, b),
            _as_tensor(grad_beta, beta.shape, b),
        )
        # END SOLUTION
