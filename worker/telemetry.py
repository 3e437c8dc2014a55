"""GPU identity and state through NVML, recorded with every measurement.

NVML reads the driver without creating a CUDA context, so the trusted parent can call it
at any time. Without NVML (no driver, no nvidia-ml-py) the snapshot says so instead.
"""
from __future__ import annotations

import threading
import time
from typing import Any


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _throttle_names(mask: int, nvml: Any) -> list[str]:
    names = []
    for attr in dir(nvml):
        if attr.startswith("nvmlClocksThrottleReason") and attr not in (
            "nvmlClocksThrottleReasonNone", "nvmlClocksThrottleReasonAll"
        ):
            bit = getattr(nvml, attr)
            if isinstance(bit, int) and bit and mask & bit:
                names.append(attr.removeprefix("nvmlClocksThrottleReason"))
    return sorted(set(names))


def gpu_snapshot(index: int = 0) -> dict[str, Any]:
    """Name, UUID, driver, clocks, temperature, power and throttle reasons of GPU `index`."""
    try:
        import pynvml as nvml  # nvidia-ml-py
    except ImportError:
        return {"available": False, "error": "nvidia-ml-py is not installed"}
    try:
        nvml.nvmlInit()
    except Exception as exc:  # no driver / no GPU
        return {"available": False, "error": f"NVML: {exc}"}
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        snapshot: dict[str, Any] = {
            "available": True,
            "index": index,
            "name": _text(nvml.nvmlDeviceGetName(handle)),
            "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
            "driver": _text(nvml.nvmlSystemGetDriverVersion()),
            "sm_clock_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
            "mem_clock_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),
            "temperature_c": nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
        }
        try:
            snapshot["power_w"] = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        except Exception:
            pass
        try:
            reasons = nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
            snapshot["throttle_reasons"] = _throttle_names(reasons, nvml)
        except Exception:
            pass
        return snapshot
    except Exception as exc:
        return {"available": False, "error": f"NVML: {exc}"}
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def gpu_count() -> int:
    """GPUs the driver reports (0 without NVML or a driver); creates no CUDA context."""
    try:
        import pynvml as nvml
    except ImportError:
        return 0
    try:
        nvml.nvmlInit()
    except Exception:
        return 0
    try:
        return int(nvml.nvmlDeviceGetCount())
    except Exception:
        return 0
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def gpu_compute_capability(index: int = 0) -> tuple[int, int] | None:
    """GPU `index`'s CUDA compute capability as NVML reports it ((9, 0) on an H200), or None
    without NVML, a driver or that GPU; creates no CUDA context."""
    try:
        import pynvml as nvml

        nvml.nvmlInit()
    except Exception:
        return None
    try:
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(nvml.nvmlDeviceGetHandleByIndex(index))
        return int(major), int(minor)
    except Exception:
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def gpu_model_mismatch(expected: str, actual: str | None) -> str | None:
    """Why a worker must not consume the queue of GPU model `expected` when NVML names its
    GPU `actual` (None: no GPU seen), or None when the names agree. Agreement ignores case
    and punctuation, and a model may name whole words of the full name ("H200" in "NVIDIA H200")."""
    def words(name: str) -> str:
        return " ".join("".join(c if c.isalnum() else " " for c in name.lower()).split())

    if actual is None:
        return f"KG_GPU_MODEL is {expected!r} but this worker sees no GPU"
    if f" {words(expected)} " not in f" {words(actual)} ":  # whole words: "H20" is not "H200"
        return f"KG_GPU_MODEL is {expected!r} but this worker's GPU is {actual!r}: it would take another model's runs"
    return None


class GpuBusySampler:
    """`with GpuBusySampler(index) as busy: ...` then `busy.summary()`: how busy the GPU was
    during the block, from NVML's utilization (the share of each sample period in which a
    kernel ran), polled every `interval_s` from a thread. A measure of how well grading
    uses the GPU (issue 8), not of the submission."""

    def __init__(self, index: int = 0, interval_s: float = 0.2) -> None:
        self.index, self.interval_s = index, interval_s
        self._samples: list[int] = []
        self._error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = self._ended = 0.0

    def __enter__(self) -> GpuBusySampler:
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._poll, name="gpu-busy", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._ended = time.monotonic()

    def _poll(self) -> None:
        try:
            import pynvml as nvml  # nvidia-ml-py
            nvml.nvmlInit()
        except Exception as exc:  # no package, driver or GPU
            self._error = f"NVML: {exc}"
            return
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(self.index)
            while not self._stop.wait(self.interval_s):
                self._samples.append(int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu))
        except Exception as exc:
            self._error = f"NVML: {exc}"
        finally:
            try:
                nvml.nvmlShutdown()
            except Exception:
                pass

    def summary(self) -> dict[str, Any]:
        """busy_fraction = mean utilization / 100 over the block; None without samples."""
        samples = self._samples
        return {
            "seconds": round(self._ended - self._started, 1),
            "samples": len(samples),
            "busy_fraction": round(sum(samples) / len(samples) / 100.0, 3) if samples else None,
            **({"error": self._error} if self._error else {}),
        }
