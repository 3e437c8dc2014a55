"""The GPU's peak copy bandwidth: what a device-to-device copy achieves there, measured once
per GPU model (`grader calibrate` keeps it with the calibration) so that a kernel's achieved
bandwidth can be read as a share of what the GPU can do.

The copy runs in a sandboxed child of its own that imports no submission code (cwd: an empty
folder); its CUDA events time each copy, and the parent takes the median of the reps. A copy
reads and writes every byte, so its bandwidth counts both: the same count as a kernel's
traffic (rubrics.hw4.abi.traffic_bytes). Softmax and LayerNorm kernels are memory-bound, so a
good one gets close to this figure and none should pass it (one that does was mis-timed, or
does less work than its operation needs). hw4's GPU stage also measures it in its kit's child
before its timings (`copy_peak_in`), the figure no fused op's timed call may pass
(worker.scoring.impossible_figure).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.gpu.child import ChildState, handler
from worker.gpu.client import ChildClient
from worker.sandbox import Sandbox

HANDLERS = "worker.gpu.copy_peak"
ARENA_BYTES = 1 << 20  # the child's arena is unused: every byte lives on the device


@handler("copy_peak")
def copy_peak(state: ChildState, msg: dict[str, Any]) -> dict[str, Any]:
    """Milliseconds of `reps` device-to-device copies of `bytes` bytes, each timed by CUDA events."""
    import torch  # noqa: PLC0415 - the GPU child's runtime, as for the kernels' profile

    size, reps = int(msg["bytes"]), int(msg["reps"])
    src = torch.ones(size, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up: allocation and first-launch costs stay outside
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(float(start.elapsed_time(end)))
    del src, dst
    torch.cuda.empty_cache()  # a child that goes on working (hw4's kit child) keeps no copy buffers
    return {"ms": times, "device": torch.cuda.get_device_name()}


@dataclass(frozen=True)
class CopyPeak:
    gb_s: float  # the median copy's bytes read + written per second, in GB/s (1e9)
    low: float
    high: float
    size_bytes: int
    reps: int

    def to_dict(self) -> dict[str, Any]:
        return {"gb_s": round(self.gb_s, 1), "low": round(self.low, 1), "high": round(self.high, 1),
                "bytes": self.size_bytes, "reps": self.reps}


def copy_rates(size_bytes: int, milliseconds: list[float]) -> list[float]:
    """GB/s of each timed copy (read + write)."""
    return [2 * size_bytes / (ms * 1e-3) / 1e9 for ms in milliseconds if ms > 0]


def copy_peak_in(client: ChildClient, size_bytes: int, reps: int, timeout_s: float) -> CopyPeak:
    """The peak copy bandwidth measured in `client`, a child of ours whose handlers include
    HANDLERS (raises what the call raises, or RuntimeError when no copy was timed)."""
    reply = client.call({"op": "copy_peak", "bytes": size_bytes, "reps": reps}, timeout_s)
    rates = copy_rates(size_bytes, [float(ms) for ms in reply["ms"]])
    if not rates:
        raise RuntimeError("the copy-bandwidth child timed no copy")
    return CopyPeak(statistics.median(rates), min(rates), max(rates), size_bytes, len(rates))


def measure_copy_peak(sandbox: Sandbox, work_dir: Path, gpu_index: int | None, size_bytes: int = 1 << 30,
                      reps: int = 20, timeout_s: float = 120.0) -> CopyPeak:
    """The peak copy bandwidth of the GPU `gpu_index`, in a child of `sandbox` started in
    `work_dir` (created empty)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    work_dir.chmod(0o755)  # the sandbox's user maps the arena there
    with ChildClient(sandbox, work_dir, (HANDLERS,), ARENA_BYTES, gpu_index) as client:
        return copy_peak_in(client, size_bytes, reps, timeout_s)
