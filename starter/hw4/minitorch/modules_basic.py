"""Basic layers: Embedding, Dropout, Linear, LayerNorm1d (composed from basic ops)."""
from __future__ import annotations

import math

import numpy as np

from .module import Module, Parameter
from .nn import dropout
from .tensor import Tensor
from .tensor_functions import EmbeddingLookup, ones, tensor_from_numpy, zeros


class Embedding(Module):
    def __init__(self, num_embeddings: int, embedding_dim: int, backend=None) -> None:
        super().__init__()
        self.backend = backend
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        w = np.random.standard_normal((num_embeddings, embedding_dim)).astype(np.float32)
        self.weights = Parameter(tensor_from_numpy(w, backend=backend))

    def forward(self, x) -> Tensor:
        """x: integer ids [batch, seq] (numpy array, list or Tensor) -> [batch, seq, dim]."""
        ids = x.to_numpy() if isinstance(x, Tensor) else np.asarray(x)
        return EmbeddingLookup.apply(self.weights.value, ids.astype(np.int64))


class Dropout(Module):
    def __init__(self, p_dropout: float = 0.1) -> None:
        super().__init__()
        self.p_dropout = p_dropout

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p_dropout, ignore=not self.training)


class Linear(Module):
    def __init__(self, in_size: int, out_size: int, bias: bool = True, backend=None) -> None:
        super().__init__()
        self.backend = backend
        self.in_size = in_size
        self.out_size = out_size
        bound = 1.0 / math.sqrt(in_size)
        w = np.random.uniform(-bound, bound, (in_size, out_size)).astype(np.float32)
        self.weights = Parameter(tensor_from_numpy(w, backend=backend))
        self.use_bias = bias
        if bias:
            b = np.random.uniform(-bound, bound, (out_size,)).astype(np.float32)
            self.bias = Parameter(tensor_from_numpy(b, backend=backend))

    def forward(self, x: Tensor) -> Tensor:
        lead = x.shape[:-1]
        rows = x.size // self.in_size
        out = x.contiguous().view(rows, self.in_size) @ self.weights.value
        if self.use_bias:
            out = out + self.bias.value
        return out.view(*lead, self.out_size)


class LayerNorm1d(Module):
    def __init__(self, dim: int, eps: float = 1e-5, backend=None) -> None:
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.weights = Parameter(ones((dim,), backend=backend))
        self.bias = Parameter(zeros((dim,), backend=backend))

    def forward(self, x: Tensor) -> Tensor:
        """x [..., dim]: normalize over the last dim with the module's eps (composed ops)."""
        d = x.dims - 1
        mean = x.mean(d)
        centered = x - mean
        var = (centered * centered).mean(d)
        return centered / ((var + self.eps) ** 0.5) * self.weights.value + self.bias.value
