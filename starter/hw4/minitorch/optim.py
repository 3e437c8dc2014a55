"""Optimizers. Parameter updates run on the host numpy storage (it is the tensors' storage on
every backend here)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .module import Parameter
from .tensor_data import TensorData


class Optimizer:
    def __init__(self, parameters: Sequence[Parameter]) -> None:
        self.parameters = list(parameters)

    def zero_grad(self) -> None:
        for p in self.parameters:
            if p.value is not None:
                p.value.grad = None

    @staticmethod
    def _buffer(p: Parameter) -> np.ndarray:
        t = p.value._tensor
        if not t.is_contiguous() or t._storage.size != t.size:
            p.value._tensor = TensorData(t.to_numpy().reshape(-1), t.shape)
        return p.value._tensor._storage


class SGD(Optimizer):
    def __init__(self, parameters: Sequence[Parameter], lr: float = 1.0) -> None:
        super().__init__(parameters)
        self.lr = lr

    def step(self) -> None:
        for p in self.parameters:
            if p.value is None or p.value.grad is None:
                continue
            buf = self._buffer(p)
            buf -= self.lr * p.value.grad.to_numpy().reshape(-1)


class Adam(Optimizer):
    def __init__(
        self,
        parameters: Sequence[Parameter],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(parameters)
        self.lr = lr
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.weight_decay = weight_decay
        self.t = 0
        self.m: dict[int, np.ndarray] = {}
        self.v: dict[int, np.ndarray] = {}

    def step(self) -> None:
        self.t += 1
        c1 = 1.0 - self.beta1**self.t
        c2 = 1.0 - self.beta2**self.t
        for i, p in enumerate(self.parameters):
            if p.value is None or p.value.grad is None:
                continue
            buf = self._buffer(p)
            g = p.value.grad.to_numpy().reshape(-1).astype(np.float32)
            if self.weight_decay:
                g = g + self.weight_decay * buf
            m = self.m.setdefault(i, np.zeros_like(buf))
            v = self.v.setdefault(i, np.zeros_like(buf))
            m *= self.beta1
            m += (1.0 - self.beta1) * g
            v *= self.beta2
            v += (1.0 - self.beta2) * g * g
            buf -= (self.lr * (m / c1) / (np.sqrt(v / c2) + self.eps)).astype(np.float32)
