"""worker.gpu.step_memory on a real GPU: the device sampler sees a buffer that lives only
while the step runs (allocated and freed inside it), as Problem 3's steps report it."""
from __future__ import annotations

import ctypes
import time

import pytest

from worker.gpu.step_memory import MIB, StepMemory

pytestmark = pytest.mark.gpu
BUFFER_MIB = 1024


def _driver() -> ctypes.CDLL:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        pytest.skip("no CUDA driver here")
    device, ctx = ctypes.c_int(), ctypes.c_void_p()
    assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(device), 0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device) == 0
    assert cuda.cuCtxSetCurrent(ctx) == 0
    return cuda


def _step(cuda: ctypes.CDLL, mib: int) -> None:
    """A step that holds `mib` of device memory for 50 ms, then frees it."""
    if mib:
        pointer = ctypes.c_uint64()
        assert cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(mib * MIB)) == 0
        assert cuda.cuMemsetD8_v2(pointer, 1, ctypes.c_size_t(mib * MIB)) == 0
        assert cuda.cuCtxSynchronize() == 0
    time.sleep(0.05)
    if mib:
        assert cuda.cuMemFree_v2(pointer) == 0


def test_a_buffer_held_during_the_step_shows_in_its_device_peak() -> None:
    cuda = _driver()
    with StepMemory(device=True) as idle:
        _step(cuda, 0)
    with StepMemory(device=True) as busy:
        _step(cuda, BUFFER_MIB)
    before, during = idle.figures()["device_used_peak_mib"], busy.figures()["device_used_peak_mib"]
    print(f"device in use: idle step {before} MiB, step with a {BUFFER_MIB} MiB buffer {during} MiB")
    assert before is not None and during is not None
    assert during - before >= 0.95 * BUFFER_MIB
