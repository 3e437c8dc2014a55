"""Peak memory of one step in the child: host (this process's resident peak) and device.

Host: Linux keeps a process's resident high-water mark (VmHWM in /proc/self/status);
writing "5" to /proc/self/clear_refs resets it to the current resident size, so the mark read
after the step is that step's own peak, exact, at no cost to the step. Where the reset is
refused, the mark is the peak since the process started (`host_reset` False says so).

Device: the student's code allocates through the CUDA runtime, so the child has no allocator
to ask. A thread samples cuMemGetInfo (the driver's free/total of the child's device, counted
for every process on it) every `interval_s` while the step runs; the peak of used memory is a
lower bound of the true peak (a buffer freed between samples is missed) and includes other
processes' memory. Sampling takes the interpreter's lock a moment per sample, so it is meant
for untimed steps. Without libcuda or a context the device figure is None.
"""
from __future__ import annotations

import ctypes
import threading
from types import TracebackType
from typing import Any

MIB = 1 << 20


def _host_hwm_bytes() -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _reset_host_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


class _DeviceSampler(threading.Thread):
    """Samples the device's used memory in the primary context of device 0 (the child sees
    only its own GPU)."""

    def __init__(self, interval_s: float) -> None:
        super().__init__(name="kg-device-memory", daemon=True)
        self.interval_s = interval_s
        self.peak: int | None = None
        self._stop_event = threading.Event()
        self._started = threading.Event()

    def run(self) -> None:
        try:
            cuda = ctypes.CDLL("libcuda.so.1")
            device, ctx = ctypes.c_int(), ctypes.c_void_p()
            if (cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(device), 0) != 0
                    or cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device) != 0):
                return
        except OSError:
            return
        finally:
            self._started.set()
        try:
            if cuda.cuCtxSetCurrent(ctx) != 0:
                return
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            while True:
                if cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0:
                    used = total.value - free.value
                    self.peak = used if self.peak is None else max(self.peak, used)
                if self._stop_event.wait(self.interval_s):
                    return
        finally:
            cuda.cuDevicePrimaryCtxRelease(device)

    def start_sampling(self) -> None:
        self.start()
        self._started.wait(30.0)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5.0)


class StepMemory:
    """`with StepMemory(device=True) as mem: step()`; then `mem.figures()`."""

    def __init__(self, device: bool, interval_s: float = 0.002) -> None:
        self._sampler = _DeviceSampler(interval_s) if device else None
        self.host_reset = False
        self.host_peak: int | None = None

    def __enter__(self) -> StepMemory:
        self.host_reset = _reset_host_hwm()
        if self._sampler is not None:
            self._sampler.start_sampling()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._sampler is not None:
            self._sampler.stop()
        self.host_peak = _host_hwm_bytes()

    def figures(self) -> dict[str, Any]:
        """MiB figures for the parent: host_peak_mib, host_reset, and device_used_peak_mib
        where the device was sampled (None when it could not be)."""
        out: dict[str, Any] = {"host_peak_mib": None if self.host_peak is None else round(self.host_peak / MIB, 1),
                               "host_reset": self.host_reset}
        if self._sampler is not None:
            peak = self._sampler.peak
            out["device_used_peak_mib"] = None if peak is None else round(peak / MIB, 1)
        return out
