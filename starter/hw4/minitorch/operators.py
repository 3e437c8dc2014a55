"""Scalar operators. Backends identify elementwise ops by these function objects."""
from __future__ import annotations

import math


def id(x: float) -> float:  # noqa: A001 - MiniTorch's name
    return x


def neg(x: float) -> float:
    return -x


def exp(x: float) -> float:
    return math.exp(x)


def log(x: float) -> float:
    return math.log(x)


def relu(x: float) -> float:
    return x if x > 0 else 0.0


def sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def inv(x: float) -> float:
    return 1.0 / x


def tanh(x: float) -> float:
    return math.tanh(x)


def add(x: float, y: float) -> float:
    return x + y


def mul(x: float, y: float) -> float:
    return x * y


def lt(x: float, y: float) -> float:
    return 1.0 if x < y else 0.0


def eq(x: float, y: float) -> float:
    return 1.0 if x == y else 0.0


def max(x: float, y: float) -> float:  # noqa: A001
    return x if x > y else y


def is_close(x: float, y: float) -> float:
    return 1.0 if abs(x - y) < 1e-2 else 0.0


def relu_back(x: float, d: float) -> float:
    return d if x > 0 else 0.0


def log_back(x: float, d: float) -> float:
    return d / x


def inv_back(x: float, d: float) -> float:
    return -d / (x * x)


def pow(x: float, y: float) -> float:  # noqa: A001
    return x**y
