"""Project-wide pytest setup: the `gpu` marker skips cleanly on machines without a GPU.

Kept free of third-party imports so the GPU machine (which has no service packages)
can collect the GPU suite.
"""
from __future__ import annotations

import ctypes
import functools

import pytest


@functools.cache
def cuda_device_count() -> int:
    """Number of CUDA devices the driver reports; 0 when there is no driver or device."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    if libcuda.cuInit(0) != 0:
        return 0
    count = ctypes.c_int(0)
    if libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if cuda_device_count() > 0:
        return
    skip = pytest.mark.skip(reason="no CUDA device on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
