"""The Tensor: a TensorData, the backend that computes on it, and its autodiff history."""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

from . import tensor_functions as tf
from .autodiff import History, backpropagate
from .tensor_data import TensorData, prod

if TYPE_CHECKING:  # pragma: no cover
    from .tensor_ops import TensorBackend

_ids = itertools.count(1)


class Tensor:
    def __init__(
        self,
        v: TensorData,
        back: Optional[History] = None,
        name: Optional[str] = None,
        backend: Optional["TensorBackend"] = None,
    ) -> None:
        if backend is None:
            from .tensor_ops import default_backend

            backend = default_backend()
        self._tensor = v
        self.history = back
        self.backend = backend
        self.grad: Optional[Tensor] = None
        self.unique_id = next(_ids)
        self.name = name if name is not None else str(self.unique_id)

    # ----- construction helpers
    @staticmethod
    def make(storage, shape: Sequence[int], strides=None, backend=None) -> "Tensor":
        return Tensor(TensorData(storage, shape, strides), backend=backend)

    @property
    def f(self) -> "TensorBackend":
        """MiniTorch's name for the backend."""
        return self.backend

    def _const(self, value: float) -> "Tensor":
        return Tensor(TensorData(np.array([value], dtype=np.float32), (1,)), backend=self.backend)

    def _ensure(self, other: Any) -> "Tensor":
        if isinstance(other, Tensor):
            return other
        return self._const(float(other))

    def zeros(self, shape: Optional[Sequence[int]] = None) -> "Tensor":
        shape = self.shape if shape is None else tuple(shape)
        return Tensor(TensorData(np.zeros(prod(shape), dtype=np.float32), shape), backend=self.backend)

    # ----- properties
    @property
    def shape(self) -> tuple[int, ...]:
        return self._tensor.shape

    @property
    def size(self) -> int:
        return self._tensor.size

    @property
    def dims(self) -> int:
        return self._tensor.dims

    def __len__(self) -> int:
        return self.shape[0]

    # ----- autodiff state
    def requires_grad_(self, x: bool = True) -> "Tensor":
        self.history = History() if x else None
        return self

    def requires_grad(self) -> bool:
        return self.history is not None

    def is_leaf(self) -> bool:
        return self.history is not None and self.history.last_fn is None

    def is_constant(self) -> bool:
        return self.history is None

    def detach(self) -> "Tensor":
        return Tensor(self._tensor, backend=self.backend)

    @property
    def parents(self) -> tuple["Tensor", ...]:
        return self.history.inputs if self.history is not None else ()

    def accumulate_derivative(self, d: "Tensor") -> None:
        if d.shape != self.shape:
            d = tf.sum_to_shape(d, self.shape)
        self.grad = d if self.grad is None else self.backend.add_zip(self.grad, d)

    def chain_rule(self, d_output: "Tensor"):
        h = self.history
        grads = h.last_fn.backward(h.ctx, d_output)
        if not isinstance(grads, tuple):
            grads = (grads,)
        out = []
        for inp, g in zip(h.ctx.inputs_all, grads):
            if g is None or not isinstance(inp, Tensor) or not inp.requires_grad():
                continue
            if g.shape != inp.shape:
                g = tf.sum_to_shape(g, inp.shape)
            out.append((inp, g))
        return out

    def backward(self, grad_output: Optional["Tensor"] = None) -> None:
        if grad_output is None:
            if self.size != 1:
                raise RuntimeError("backward() without a gradient needs a one-element tensor")
            grad_output = self._const(1.0).view(*self.shape) if self.shape != (1,) else self._const(1.0)
        backpropagate(self, grad_output)

    def zero_grad_(self) -> None:
        self.grad = None

    # ----- data access
    def to_numpy(self) -> np.ndarray:
        return self._tensor.to_numpy()

    def item(self) -> float:
        if self.size != 1:
            raise ValueError("item() needs a one-element tensor")
        return float(self.to_numpy().reshape(-1)[0])

    def __getitem__(self, idx) -> float:
        idx = (idx,) if isinstance(idx, int) else tuple(idx)
        return self._tensor.get(idx)

    def __repr__(self) -> str:
        return f"Tensor(shape={self.shape}, {np.array2string(self.to_numpy(), precision=4, threshold=20)})"

    # ----- operators
    def __add__(self, b) -> "Tensor":
        return tf.Add.apply(self, self._ensure(b))

    __radd__ = __add__

    def __sub__(self, b) -> "Tensor":
        return tf.Add.apply(self, tf.Neg.apply(self._ensure(b)))

    def __rsub__(self, b) -> "Tensor":
        return tf.Add.apply(self._ensure(b), tf.Neg.apply(self))

    def __mul__(self, b) -> "Tensor":
        return tf.Mul.apply(self, self._ensure(b))

    __rmul__ = __mul__

    def __truediv__(self, b) -> "Tensor":
        if not isinstance(b, Tensor):
            return tf.Mul.apply(self, self._const(1.0 / float(b)))
        return tf.Mul.apply(self, tf.Inv.apply(b))

    def __rtruediv__(self, b) -> "Tensor":
        return tf.Mul.apply(self._ensure(b), tf.Inv.apply(self))

    def __neg__(self) -> "Tensor":
        return tf.Neg.apply(self)

    def __matmul__(self, b: "Tensor") -> "Tensor":
        return tf.MatMul.apply(self, b)

    def __lt__(self, b) -> "Tensor":
        return tf.LT.apply(self, self._ensure(b))

    def __gt__(self, b) -> "Tensor":
        return tf.LT.apply(self._ensure(b), self)

    def __eq__(self, b) -> "Tensor":  # type: ignore[override]
        return tf.EQ.apply(self, self._ensure(b))

    __hash__ = object.__hash__

    def __pow__(self, b) -> "Tensor":
        if isinstance(b, (int, float)) and float(b) == 2.0:
            return tf.Mul.apply(self, self)
        if isinstance(b, (int, float)) and float(b) == 1.0:
            return self
        if isinstance(b, (int, float)) and float(b) == 0.5:
            return (self.log() * 0.5).exp()
        return (self.log() * self._ensure(b)).exp()

    def is_close(self, b: "Tensor") -> "Tensor":
        return tf.IsClose.apply(self, b)

    def exp(self) -> "Tensor":
        return tf.Exp.apply(self)

    def log(self) -> "Tensor":
        return tf.Log.apply(self)

    def relu(self) -> "Tensor":
        return tf.ReLU.apply(self)

    def sigmoid(self) -> "Tensor":
        return tf.Sigmoid.apply(self)

    def tanh(self) -> "Tensor":
        return tf.Tanh.apply(self)

    def inv(self) -> "Tensor":
        return tf.Inv.apply(self)

    def sum(self, dim: Optional[int] = None) -> "Tensor":
        if dim is None:
            return tf.Sum.apply(self.contiguous().view(self.size), dim=0)
        return tf.Sum.apply(self, dim=dim % self.dims)

    def mean(self, dim: Optional[int] = None) -> "Tensor":
        if dim is None:
            return self.sum() / float(self.size)
        return self.sum(dim) / float(self.shape[dim])

    def var(self, dim: Optional[int] = None) -> "Tensor":
        if dim is None:
            centered = self - self.mean()
            return (centered * centered).mean()
        centered = self - self.mean(dim)
        return (centered * centered).mean(dim)

    def max(self, dim: Optional[int] = None) -> "Tensor":
        if dim is None:
            return tf.Max.apply(self.contiguous().view(self.size), dim=0)
        return tf.Max.apply(self, dim=dim % self.dims)

    def all(self) -> bool:
        return bool(np.all(self.to_numpy() != 0))

    def permute(self, *order: int) -> "Tensor":
        if len(order) == 1 and isinstance(order[0], (tuple, list)):
            order = tuple(order[0])
        return tf.Permute.apply(self, order=tuple(int(o) % self.dims for o in order))

    def transpose(self, a: int = -2, b: int = -1) -> "Tensor":
        order = list(range(self.dims))
        order[a], order[b] = order[b], order[a]
        return self.permute(*order)

    def view(self, *shape: int) -> "Tensor":
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = tuple(int(s) for s in shape)
        if -1 in shape:
            known = prod(s for s in shape if s != -1)
            shape = tuple(self.size // known if s == -1 else s for s in shape)
        return tf.View.apply(self, shape=shape)

    def contiguous(self) -> "Tensor":
        return tf.Copy.apply(self)

    # ----- fused kernels (hw4)
    def attn_softmax(self, mask: "Tensor", mask_future: bool = False) -> "Tensor":
        """Softmax over the last dim of [batch, nhead, from_len, to_len] scores plus an additive
        [batch, to_len] mask (and -inf above the diagonal when mask_future), in one fused op."""
        # BEGIN SOLUTION: Tensor.attn_softmax
        return tf.Attn_Softmax.apply(self, mask, mask_future=mask_future)
        # END SOLUTION

    def layernorm(self, gamma: "Tensor", beta: "Tensor") -> "Tensor":
        """LayerNorm over the last dim of a [rows, hidden] tensor with scale gamma, shift beta."""
        # BEGIN SOLUTION: Tensor.layernorm
        return tf.LayerNorm.apply(self, gamma, beta)
        # END SOLUTION
