"""Differentiable Functions over Tensors, and tensor constructors.

A Function's forward and backward run on detached tensors through the backend's ops
(`t.backend.<op>`); `Function.apply` records the graph when any input needs a gradient.
`backward` returns one gradient per positional argument of `apply` (None where there is none).
"""
from __future__ import annotations

import random
from typing import Any, Optional, Sequence

import numpy as np

from .autodiff import Context, History
from .tensor_data import TensorData, prod, strides_from_shape


def _tensor_cls():
    from .tensor import Tensor

    return Tensor


class Function:
    @classmethod
    def apply(cls, *vals: Any, **kwargs: Any):
        Tensor = _tensor_cls()
        raw = [Tensor(v._tensor, backend=v.backend) if isinstance(v, Tensor) else v for v in vals]
        need_grad = any(isinstance(v, Tensor) and v.requires_grad() for v in vals)
        ctx = Context(not need_grad)
        out = cls.forward(ctx, *raw, **kwargs)
        if need_grad:
            ctx.inputs_all = vals
            parents = tuple(v for v in vals if isinstance(v, Tensor) and v.requires_grad())
            return Tensor(out._tensor, History(cls, ctx, parents), backend=out.backend)
        return out

    @staticmethod
    def forward(ctx: Context, *args: Any, **kwargs: Any):  # pragma: no cover - abstract
        raise NotImplementedError

    @staticmethod
    def backward(ctx: Context, grad_output):  # pragma: no cover - abstract
        raise NotImplementedError


def sum_to_shape(g, shape: Sequence[int]):
    """Undo broadcasting: sum `g` down to `shape`, or expand it (as a view) up to `shape`."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    if prod(shape) >= g.size:
        Tensor = _tensor_cls()
        return Tensor(g._tensor.expand(shape), backend=g.backend)
    f = g.backend
    pad = g.dims - len(shape)
    full = (1,) * pad + shape
    for dim in range(g.dims):
        if full[dim] == 1 and g.shape[dim] != 1:
            g = f.add_reduce(g, dim)
    return _view(g, shape)


def _contig(t):
    return t if t._tensor.is_contiguous() else t.backend.id_map(t)


def _view(t, shape):
    t = _contig(t)
    Tensor = _tensor_cls()
    return Tensor(TensorData(t._tensor._storage, shape), backend=t.backend)


def _transpose_last(t):
    order = list(range(t.dims))
    order[-1], order[-2] = order[-2], order[-1]
    Tensor = _tensor_cls()
    return Tensor(t._tensor.permute(*order), backend=t.backend)


class Neg(Function):
    @staticmethod
    def forward(ctx, a):
        return a.backend.neg_map(a)

    @staticmethod
    def backward(ctx, g):
        return (g.backend.neg_map(g),)


class Inv(Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return a.backend.inv_map(a)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_values
        return (g.backend.inv_back_zip(a, g),)


class Add(Function):
    @staticmethod
    def forward(ctx, a, b):
        return a.backend.add_zip(a, b)

    @staticmethod
    def backward(ctx, g):
        return g, g


class Mul(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a.backend.mul_zip(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_values
        f = g.backend
        return f.mul_zip(g, b), f.mul_zip(g, a)


class Sigmoid(Function):
    @staticmethod
    def forward(ctx, a):
        out = a.backend.sigmoid_map(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (s,) = ctx.saved_values
        f = g.backend
        one_minus = f.add_zip(f.neg_map(s), s._const(1.0))
        return (f.mul_zip(g, f.mul_zip(s, one_minus)),)


class Tanh(Function):
    @staticmethod
    def forward(ctx, a):
        out = a.backend.tanh_map(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (t,) = ctx.saved_values
        f = g.backend
        return (f.mul_zip(g, f.add_zip(f.neg_map(f.mul_zip(t, t)), t._const(1.0))),)


class ReLU(Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return a.backend.relu_map(a)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_values
        return (g.backend.relu_back_zip(a, g),)


class Log(Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return a.backend.log_map(a)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_values
        return (g.backend.log_back_zip(a, g),)


class Exp(Function):
    @staticmethod
    def forward(ctx, a):
        out = a.backend.exp_map(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_values
        return (g.backend.mul_zip(g, out),)


class Sum(Function):
    @staticmethod
    def forward(ctx, a, dim: int):
        ctx.save_for_backward(a.shape)
        return a.backend.add_reduce(a, dim)

    @staticmethod
    def backward(ctx, g):
        (shape,) = ctx.saved_values
        Tensor = _tensor_cls()
        return (Tensor(g._tensor.expand(shape), backend=g.backend),)


class Max(Function):
    @staticmethod
    def forward(ctx, a, dim: int):
        out = a.backend.max_reduce(a, dim)
        ctx.save_for_backward(a, out)
        return out

    @staticmethod
    def backward(ctx, g):
        a, out = ctx.saved_values
        f = g.backend
        return (f.mul_zip(f.eq_zip(a, out), g),)


class LT(Function):
    @staticmethod
    def forward(ctx, a, b):
        return a.backend.lt_zip(a, b)

    @staticmethod
    def backward(ctx, g):
        return None, None


class EQ(Function):
    @staticmethod
    def forward(ctx, a, b):
        return a.backend.eq_zip(a, b)

    @staticmethod
    def backward(ctx, g):
        return None, None


class IsClose(Function):
    @staticmethod
    def forward(ctx, a, b):
        return a.backend.is_close_zip(a, b)

    @staticmethod
    def backward(ctx, g):
        return None, None


class Permute(Function):
    @staticmethod
    def forward(ctx, a, order: tuple[int, ...]):
        ctx.save_for_backward(order)
        Tensor = _tensor_cls()
        return Tensor(a._tensor.permute(*order), backend=a.backend)

    @staticmethod
    def backward(ctx, g):
        (order,) = ctx.saved_values
        inverse = [0] * len(order)
        for i, o in enumerate(order):
            inverse[o] = i
        Tensor = _tensor_cls()
        return (Tensor(g._tensor.permute(*inverse), backend=g.backend),)


class View(Function):
    @staticmethod
    def forward(ctx, a, shape: tuple[int, ...]):
        if prod(shape) != a.size:
            raise ValueError(f"cannot view {a.shape} as {shape}")
        ctx.save_for_backward(a.shape)
        return _view(a, shape)

    @staticmethod
    def backward(ctx, g):
        (shape,) = ctx.saved_values
        return (_view(g, shape),)


class Copy(Function):
    @staticmethod
    def forward(ctx, a):
        return a.backend.id_map(a)

    @staticmethod
    def backward(ctx, g):
        return (g,)


class MatMul(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a.backend.matrix_multiply(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_values
        f = g.backend
        return f.matrix_multiply(g, _transpose_last(b)), f.matrix_multiply(_transpose_last(a), g)


class Attn_Softmax(Function):
    """Fused attention softmax: softmax(inp + mask[:, None, None, :]) over the last dim."""

    @staticmethod
    def forward(ctx, inp, mask, mask_future: bool = False):
        # BEGIN SOLUTION: Attn_Softmax.forward
        out = inp.backend.attn_softmax_fw(inp, mask, mask_future=mask_future)
        ctx.save_for_backward(out, mask)
        return out
        # END SOLUTION

    @staticmethod
    def backward(ctx, out_grad):
        # BEGIN SOLUTION: Attn_Softmax.backward
        soft_out, mask = ctx.saved_values
        grad_inp = out_grad.backend.attn_softmax_bw(out_grad, soft_out)
        return grad_inp, mask.zeros()
        # END SOLUTION


class LayerNorm(Function):
    """Fused LayerNorm over the last dim: (x - mean) / sqrt(var + 1e-8) * gamma + beta."""

    @staticmethod
    def forward(ctx, inp, gamma, beta):
        # BEGIN SOLUTION: LayerNorm.forward
        out, var, mean = inp.backend.layernorm_fw(inp, gamma, beta)
        ctx.save_for_backward(inp, gamma, beta, var, mean)
        return out
        # END SOLUTION

    @staticmethod
    def backward(ctx, out_grad):
        # BEGIN SOLUTION: LayerNorm.backward
        inp, gamma, beta, var, mean = ctx.saved_values
        return out_grad.backend.layernorm_bw(out_grad, inp, gamma, beta, var, mean)
        # END SOLUTION


class EmbeddingLookup(Function):
    """rows of `weight` [num, dim] picked by integer ids (host numpy indexing)."""

    @staticmethod
    def forward(ctx, weight, ids: np.ndarray):
        ids = np.asarray(ids, dtype=np.int64)
        ctx.save_for_backward(weight.shape, ids)
        rows = weight._tensor.np_view()[ids.reshape(-1)]
        return _from_np(rows.reshape(*ids.shape, weight.shape[1]), weight.backend)

    @staticmethod
    def backward(ctx, g):
        shape, ids = ctx.saved_values
        grad = np.zeros(shape, dtype=np.float32)
        np.add.at(grad, ids.reshape(-1), g.to_numpy().reshape(-1, shape[1]))
        return (_from_np(grad, g.backend), None)


class PickLast(Function):
    """out[..., ] = inp[..., targets[...]]: one entry per row of the last dim (host indexing)."""

    @staticmethod
    def forward(ctx, inp, targets: np.ndarray):
        targets = np.asarray(targets, dtype=np.int64).reshape(-1)
        rows = inp.size // inp.shape[-1]
        ctx.save_for_backward(inp.shape, targets)
        flat = inp._tensor.np_view().reshape(rows, inp.shape[-1]) if inp._tensor.is_contiguous() else inp.to_numpy().reshape(rows, -1)
        return _from_np(flat[np.arange(rows), targets].reshape(inp.shape[:-1]), inp.backend)

    @staticmethod
    def backward(ctx, g):
        shape, targets = ctx.saved_values
        rows = len(targets)
        grad = np.zeros((rows, shape[-1]), dtype=np.float32)
        grad[np.arange(rows), targets] = g.to_numpy().reshape(-1)
        return (_from_np(grad.reshape(shape), g.backend), None)


# ---------------------------------------------------------------- constructors
def _from_np(arr: np.ndarray, backend, requires_grad: bool = False):
    Tensor = _tensor_cls()
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    shape = arr.shape if arr.ndim > 0 else (1,)
    t = Tensor(TensorData(arr.reshape(-1), shape, strides_from_shape(shape)), backend=backend)
    if requires_grad:
        t.requires_grad_(True)
    return t


def tensor_from_numpy(arr, backend=None, requires_grad: bool = False):
    return _from_np(np.asarray(arr, dtype=np.float32), backend, requires_grad)


def tensor(ls: Any, backend=None, requires_grad: bool = False):
    """A tensor from a (nested) list of numbers, a number, or a numpy array."""
    return _from_np(np.asarray(ls, dtype=np.float32), backend, requires_grad)


def zeros(shape: Sequence[int], backend=None, requires_grad: bool = False):
    return _from_np(np.zeros(tuple(shape), dtype=np.float32), backend, requires_grad)


def ones(shape: Sequence[int], backend=None, requires_grad: bool = False):
    return _from_np(np.ones(tuple(shape), dtype=np.float32), backend, requires_grad)


def rand(shape: Sequence[int], backend=None, requires_grad: bool = False):
    """Uniform [0, 1) values (numpy's global generator)."""
    return _from_np(np.random.random_sample(tuple(shape)).astype(np.float32), backend, requires_grad)


def randn(shape: Sequence[int], backend=None, requires_grad: bool = False):
    return _from_np(np.random.standard_normal(tuple(shape)).astype(np.float32), backend, requires_grad)


def seed(value: int) -> None:
    random.seed(value)
    np.random.seed(value)


def grad_central_difference(fn, *vals, arg: int = 0, ind=None, epsilon: float = 1e-3) -> float:
    """d fn(...).sum() / d vals[arg][ind] by central differences, in float64 on the host."""
    x = vals[arg]
    base = x.to_numpy().astype(np.float64)
    up, down = base.copy(), base.copy()
    up[ind] += epsilon
    down[ind] -= epsilon
    args_up = list(vals)
    args_down = list(vals)
    args_up[arg] = tensor_from_numpy(up, backend=x.backend)
    args_down[arg] = tensor_from_numpy(down, backend=x.backend)
    f_up = fn(*args_up).to_numpy().astype(np.float64).sum()
    f_down = fn(*args_down).to_numpy().astype(np.float64).sum()
    return float((f_up - f_down) / (2.0 * epsilon))
