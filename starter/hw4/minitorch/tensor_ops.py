"""TensorBackend: binds an ops class (NumpyOps, CudaKernelOps, ...) to the named primitives
that Functions call (`neg_map`, `add_zip`, `add_reduce`, `matrix_multiply`, fused ops)."""
from __future__ import annotations

from typing import Any, Callable, Optional

from . import operators

FUSED_OPS = ("attn_softmax_fw", "attn_softmax_bw", "layernorm_fw", "layernorm_bw")


class TensorOps:
    """What a backend's ops class provides. map/zip/reduce take an `operators` function and
    return a callable over Tensors; outputs are new contiguous tensors."""

    @staticmethod
    def map(fn: Callable[[float], float]) -> Callable[..., Any]:  # pragma: no cover - interface
        raise NotImplementedError

    @staticmethod
    def zip(fn: Callable[[float, float], float]) -> Callable[..., Any]:  # pragma: no cover
        raise NotImplementedError

    @staticmethod
    def reduce(fn: Callable[[float, float], float], start: float = 0.0) -> Callable[..., Any]:  # pragma: no cover
        raise NotImplementedError

    @staticmethod
    def matrix_multiply(a: Any, b: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    cuda = False


class TensorBackend:
    def __init__(self, ops: type) -> None:
        self.ops = ops
        self.cuda = bool(getattr(ops, "cuda", False))
        self.neg_map = ops.map(operators.neg)
        self.sigmoid_map = ops.map(operators.sigmoid)
        self.relu_map = ops.map(operators.relu)
        self.log_map = ops.map(operators.log)
        self.exp_map = ops.map(operators.exp)
        self.id_map = ops.map(operators.id)
        self.inv_map = ops.map(operators.inv)
        self.tanh_map = ops.map(operators.tanh)

        self.add_zip = ops.zip(operators.add)
        self.mul_zip = ops.zip(operators.mul)
        self.lt_zip = ops.zip(operators.lt)
        self.eq_zip = ops.zip(operators.eq)
        self.is_close_zip = ops.zip(operators.is_close)
        self.relu_back_zip = ops.zip(operators.relu_back)
        self.log_back_zip = ops.zip(operators.log_back)
        self.inv_back_zip = ops.zip(operators.inv_back)

        self.add_reduce = ops.reduce(operators.add, 0.0)
        self.mul_reduce = ops.reduce(operators.mul, 1.0)
        self.max_reduce = ops.reduce(operators.max, -1e9)
        self.matrix_multiply = ops.matrix_multiply

        for name in FUSED_OPS:
            if hasattr(ops, name):
                setattr(self, name, getattr(ops, name))

    def __repr__(self) -> str:
        return f"TensorBackend({self.ops.__name__})"


_DEFAULT: Optional[TensorBackend] = None


def default_backend() -> TensorBackend:
    global _DEFAULT
    if _DEFAULT is None:
        from .fast_ops import NumpyOps

        _DEFAULT = TensorBackend(NumpyOps)
    return _DEFAULT
