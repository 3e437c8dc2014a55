"""GPU identity and state through NVML, recorded with every measurement.

NVML reads the driver without creating a CUDA context, so the trusted parent can call it
at any time. Without NVML (no driver, no nvidia-ml-py) the snapshot says so instead.
"""
from __future__ import annotations

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
