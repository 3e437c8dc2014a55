"""worker.gpu.step_memory: a step's own peak host memory, with the mark reset before it."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from worker.gpu.step_memory import MIB, StepMemory


def _touch(mib: int) -> int:
    block = np.ones(mib * MIB, dtype=np.uint8)  # written, so resident
    return int(block[::4096].sum())


def test_each_step_reports_its_own_peak_not_the_process_high_water_mark() -> None:
    with StepMemory(device=False) as big:
        _touch(400)
    with StepMemory(device=False) as small:
        _touch(8)
    big_peak, small_peak = big.figures(), small.figures()
    assert big_peak["host_reset"] and small_peak["host_reset"]
    # the 400 MiB block was freed: the next step's peak does not carry it
    assert big_peak["host_peak_mib"] - small_peak["host_peak_mib"] > 300
    assert "device_used_peak_mib" not in big_peak


def _has_libcuda() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_has_libcuda(), reason="a CUDA driver is here: tests/gpu/test_step_memory_gpu.py covers it")
def test_device_sampling_without_a_gpu_driver_says_none() -> None:
    with StepMemory(device=True) as memory:
        _touch(1)
    figures = memory.figures()
    assert figures["host_peak_mib"] > 0
    # no libcuda: no figure rather than a made-up one
    assert figures["device_used_peak_mib"] is None
