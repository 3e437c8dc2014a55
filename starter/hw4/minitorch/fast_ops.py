"""NumpyOps: a CPU backend on numpy, including numpy versions of the four fused ops.

Runs anywhere (no GPU, no torch); used by CI and as a reference for the CUDA backend.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import operators
from .tensor_data import TensorData, shape_broadcast
from .tensor_ops import TensorOps

LN_EPS = 1e-8  # the fused LayerNorm's epsilon (the kernel's LN_EPSILON)
# layernorm_fw returns (out, var, mean) with var the biased variance WITHOUT eps (as the CUDA
# kernel writes it); layernorm_bw adds eps itself.


def _np(t) -> np.ndarray:
    return t._tensor.np_view()


def _wrap(arr: np.ndarray, backend) -> Any:
    from .tensor import Tensor

    arr = np.ascontiguousarray(arr, dtype=np.float32)
    shape = arr.shape if arr.ndim else (1,)
    return Tensor(TensorData(arr.reshape(-1), shape), backend=backend)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _relu_back(x, d):
    return np.where(x > 0, d, 0.0)


_MAP = {
    operators.id: lambda x: x,
    operators.neg: np.negative,
    operators.exp: np.exp,
    operators.log: np.log,
    operators.relu: lambda x: np.maximum(x, 0.0),
    operators.sigmoid: _sigmoid,
    operators.inv: lambda x: 1.0 / x,
    operators.tanh: np.tanh,
}
_ZIP = {
    operators.add: np.add,
    operators.mul: np.multiply,
    operators.lt: lambda a, b: (a < b).astype(np.float32),
    operators.eq: lambda a, b: (a == b).astype(np.float32),
    operators.is_close: lambda a, b: (np.abs(a - b) < 1e-2).astype(np.float32),
    operators.max: np.maximum,
    operators.relu_back: _relu_back,
    operators.log_back: lambda a, d: d / a,
    operators.inv_back: lambda a, d: -d / (a * a),
    operators.pow: np.power,
}
_REDUCE = {
    operators.add: np.sum,
    operators.mul: np.prod,
    operators.max: np.max,
}


class NumpyOps(TensorOps):
    cuda = False

    @staticmethod
    def map(fn: Callable[[float], float]):
        f = _MAP[fn]

        def run(a, out=None):
            with np.errstate(all="ignore"):
                return _wrap(f(_np(a)), a.backend)

        return run

    @staticmethod
    def zip(fn: Callable[[float, float], float]):
        f = _ZIP[fn]

        def run(a, b):
            shape_broadcast(a.shape, b.shape)
            with np.errstate(all="ignore"):
                return _wrap(f(_np(a), _np(b)), a.backend)

        return run

    @staticmethod
    def reduce(fn: Callable[[float, float], float], start: float = 0.0):
        f = _REDUCE[fn]

        def run(a, dim: int):
            return _wrap(f(_np(a), axis=dim, keepdims=True), a.backend)

        return run

    @staticmethod
    def matrix_multiply(a, b):
        return _wrap(np.matmul(_np(a), _np(b)), a.backend)

    # ---- fused ops (numpy versions of the hw4 kernels)
    @staticmethod
    def attn_softmax_fw(inp, mask, mask_future: bool = False):
        x = _np(inp).astype(np.float32)
        batch, nhead, from_len, to_len = x.shape
        x = x + _np(mask).reshape(batch, 1, 1, to_len)
        if mask_future:
            future = np.triu(np.ones((from_len, to_len), dtype=bool), k=1)
            x = np.where(future, -np.inf, x)
        x = x - x.max(axis=-1, keepdims=True)
        e = np.exp(x)
        return _wrap(e / e.sum(axis=-1, keepdims=True), inp.backend)

    @staticmethod
    def attn_softmax_bw(out_grad, soft_inp):
        # BEGIN SOLUTION: NumpyOps.attn_softmax_bw (CPU version of Problem 1.2)
        g = _np(out_grad)
        y = _np(soft_inp)
        return _wrap(y * (g - (g * y).sum(axis=-1, keepdims=True)), out_grad.backend)
        # END SOLUTION

    @staticmethod
    def layernorm_fw(inp, gamma, beta):
        # BEGIN SOLUTION: NumpyOps.layernorm_fw (CPU version of Problem 2.1)
        hidden = inp.shape[-1]
        x = _np(inp).reshape(-1, hidden)
        mean = x.mean(axis=1)
        var = np.maximum((x * x).mean(axis=1) - mean * mean, 0.0)
        out = (x - mean[:, None]) / np.sqrt(var + LN_EPS)[:, None] * _np(gamma).reshape(1, hidden) + _np(beta).reshape(1, hidden)
        b = inp.backend
        return _wrap(out.reshape(inp.shape), b), _wrap(var, b), _wrap(mean, b)
        # END SOLUTION

    @staticmethod
    def layernorm_bw(out_grad, inp, gamma, beta, var, mean):
        # BEGIN SOLUTION: NumpyOps.layernorm_bw (CPU version of Problem 2.2)
        hidden = inp.shape[-1]
        g = _np(out_grad).reshape(-1, hidden)
        x = _np(inp).reshape(-1, hidden)
        rstd = 1.0 / np.sqrt(_np(var).reshape(-1, 1) + LN_EPS)
        xhat = (x - _np(mean).reshape(-1, 1)) * rstd
        gam = _np(gamma).reshape(1, hidden)
        dgamma = (g * xhat).sum(axis=0)
        dbeta = g.sum(axis=0)
        gx = g * gam
        dinp = rstd * (gx - gx.mean(axis=1, keepdims=True) - xhat * (gx * xhat).mean(axis=1, keepdims=True))
        b = out_grad.backend
        return _wrap(dinp.reshape(inp.shape), b), _wrap(dgamma, b), _wrap(dbeta, b)
        # END SOLUTION
