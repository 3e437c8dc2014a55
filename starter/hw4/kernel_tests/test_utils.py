"""Helpers for the kernel tests: random inputs, a simple timer, and a report line.

Run the tests from the assignment root (the CUDA backend loads minitorch/cuda_kernels/*.so
by a relative path):  python -m pytest -q -s kernel_tests/
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

import minitorch

_BACKEND = None


def cuda_backend():
    """TensorBackend(CudaKernelOps), created once."""
    global _BACKEND
    if _BACKEND is None:
        from minitorch.cuda_kernel_ops import CudaKernelOps

        _BACKEND = minitorch.TensorBackend(CudaKernelOps)
    return _BACKEND


def to_tensor(arr: np.ndarray, requires_grad: bool = False):
    return minitorch.tensor_from_numpy(np.asarray(arr, dtype=np.float32), backend=cuda_backend(), requires_grad=requires_grad)


def time_call(fn: Callable[[], object], warmup: int = 1, repeats: int = 5) -> float:
    """Median wall time of fn() in ms (every call here synchronizes the GPU before returning)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def report(name: str, shape, base_ms: float, custom_ms: float) -> None:
    print(f"\n{name} {tuple(shape)}: baseline {base_ms:.3f} ms, custom {custom_ms:.3f} ms, speedup {base_ms / custom_ms:.2f}x")


def assert_close(got: np.ndarray, want: np.ndarray, atol: float, rtol: float, what: str) -> None:
    assert np.isfinite(got).all(), f"{what}: non-finite values"
    err = np.abs(got - want) - (atol + rtol * np.abs(want))
    worst = np.unravel_index(int(np.argmax(err)), err.shape) if err.size else ()
    assert (err <= 0).all(), f"{what}: mismatch at {worst}: got {got[worst]}, want {want[worst]}"
