"""Neural-network functions composed from basic tensor ops."""
from __future__ import annotations

import numpy as np

from .tensor import Tensor
from .tensor_functions import PickLast, tensor_from_numpy


def max(x: Tensor, dim: int) -> Tensor:  # noqa: A001 - MiniTorch's name
    return x.max(dim)


def softmax(x: Tensor, dim: int) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along `dim` (the max only stabilizes: no gradient)."""
    shifted = x - x.max(dim).detach()
    e = shifted.exp()
    return e / e.sum(dim)


def logsoftmax(x: Tensor, dim: int) -> Tensor:
    return x - logsumexp(x, dim)


def logsumexp(x: Tensor, dim: int) -> Tensor:
    m = x.max(dim).detach()
    return (x - m).exp().sum(dim).log() + m


def dropout(x: Tensor, p: float, ignore: bool = False) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p)."""
    if ignore or p <= 0.0:
        return x
    if p >= 1.0:
        return x * 0.0
    keep = (np.random.random_sample(x.shape) >= p).astype(np.float32) / np.float32(1.0 - p)
    return x * tensor_from_numpy(keep, backend=x.backend)


def gelu(x: Tensor) -> Tensor:
    """tanh approximation of GELU."""
    c = float(np.sqrt(2.0 / np.pi))
    return 0.5 * x * (1.0 + ((x + 0.044715 * (x * x * x)) * c).tanh())


def one_hot(ids, n: int, backend=None) -> Tensor:
    ids = np.asarray(ids, dtype=np.int64)
    out = np.zeros((*ids.shape, n), dtype=np.float32)
    np.put_along_axis(out, ids[..., None], 1.0, axis=-1)
    return tensor_from_numpy(out, backend=backend)


def cross_entropy_loss(logits: Tensor, targets) -> Tensor:
    """Mean over rows of -log softmax(logits)[target]; logits [..., V], targets int ids [...]."""
    v = logits.shape[-1]
    flat = logits.contiguous().view(logits.size // v, v)
    picked = PickLast.apply(flat, np.asarray(targets).reshape(-1))
    return (logsumexp(flat, 1).view(flat.shape[0]) - picked).mean()
