"""The GPU's conditions around every timing window: its SM clock, temperature and throttle
reasons (NVML), read by the trusted parent before and after the window.

A window is what the timing protocol keeps as one figure (hw4: one trial of one shape, every
variant side by side; Problem 3: one pair of steps). A window taken while the GPU slowed its
clocks (power capping, thermal or hardware slowdown; not "idle" nor "applications clocks
setting", which say nothing of the window), held back by power or temperature for part of it
(NVML's violation counters, where the GPU keeps them), or begun hot from the checks before it
is taken again, up to MAX_RETAKES times (and RETAKE_CAP per problem); the last take is then
kept with a flag saying why. Without NVML (no driver, no nvidia-ml-py: a CPU machine) nothing
is read and nothing is taken again: the record says "conditions not recorded: no NVML".

The decisions (`window_verdict`, `ConditionsWatch.window`) are pure given the readings; the
NVML reads are `NvmlReader`'s alone. Standard library only, plus nvidia-ml-py where present.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

# NVML's clock event (throttle) reason bits (nvml.h, nvmlClocksEventReason*).
SLOWDOWN_BITS = {0x4: "SwPowerCap", 0x8: "HwSlowdown", 0x20: "SwThermalSlowdown", 0x40: "HwThermalSlowdown",
                 0x80: "HwPowerBrakeSlowdown"}
OTHER_BITS = {0x1: "GpuIdle", 0x2: "ApplicationsClocksSetting", 0x10: "SyncBoost", 0x100: "DisplayClockSetting"}
SLOWDOWNS = frozenset(SLOWDOWN_BITS.values())

MAX_RETAKES = 2  # a window is taken at most this many more times ...
RETAKE_CAP = 4  # ... and a problem's windows at most this many more times in all: a GPU that stays
# throttled costs a few windows, then every window is kept with its flag
HOT_MARGIN_C = 10  # hot: this close to the GPU's own slowdown line (its max operating temperature) ...
FALLBACK_HOT_C = 80  # ... or, where NVML gives no such line, this warm
COOL_WAIT_S = 2.0  # before taking a hot window again, wait at most this long for the GPU to cool
HELD_SHARE = 0.01  # held back by power or temperature for this share of a window calls for a retake
NO_NVML = "conditions not recorded: no NVML"
KEPT_LISTED = 5  # the windows kept under their flag that a problem's summary lists in words


def reason_names(mask: int) -> tuple[str, ...]:
    """The names of the reason bits set in `mask`, slowdowns and the others; an unknown bit by its value."""
    known = {**SLOWDOWN_BITS, **OTHER_BITS}
    names = [known.get(1 << i, hex(1 << i)) for i in range(mask.bit_length()) if mask >> i & 1]
    return tuple(sorted(names))


@dataclass(frozen=True)
class Reading:
    """One NVML reading; None where NVML could not give that figure."""

    sm_clock_mhz: int | None
    temperature_c: int | None
    reasons: tuple[str, ...] | None
    held_ns: int | None = None  # the GPU's power + thermal violation time so far (a counter)


def window_verdict(before: Reading | None, after: Reading | None, seconds: float, hot_c: float) -> str | None:
    """Why a window of `seconds` between the readings `before` and `after` is not to be trusted,
    in words, or None (also where there is no reading: nothing calls for a retake)."""
    seen = [r for r in (before, after) if r is not None]
    slow = sorted({name for r in seen for name in r.reasons or () if name in SLOWDOWNS})
    if slow:
        return f"the GPU slowed its clocks ({', '.join(slow)})"
    if before is not None and after is not None and before.held_ns is not None and after.held_ns is not None:
        held_s = (after.held_ns - before.held_ns) / 1e9
        if held_s > HELD_SHARE * max(seconds, 1e-3):
            return f"the GPU was held back by power or temperature for {held_s * 1e3:.0f} ms of its {seconds * 1e3:.0f} ms"
    if before is not None and before.temperature_c is not None and before.temperature_c >= hot_c:
        return f"the GPU was hot when it began ({before.temperature_c} °C; {hot_c:g} °C or more is hot)"
    return None


def window_record(before: Reading | None, after: Reading | None, retaken_for: list[str], kept: str | None) -> dict[str, Any]:
    """What a kept window's figure is recorded with: the lower SM clock and the higher
    temperature of its two readings, the reasons either saw (idle aside: the GPU idles between
    requests), the time it was held back, and why it was taken again or kept under a flag."""
    seen = [r for r in (before, after) if r is not None]
    record: dict[str, Any] = {}
    clocks = [r.sm_clock_mhz for r in seen if r.sm_clock_mhz is not None]
    temps = [r.temperature_c for r in seen if r.temperature_c is not None]
    if clocks:
        record["sm_mhz"] = min(clocks)
    if temps:
        record["temp_c"] = max(temps)
    if any(r.reasons is not None for r in seen):
        record["reasons"] = sorted({n for r in seen for n in r.reasons or () if n != "GpuIdle"})
    if before is not None and after is not None and before.held_ns is not None and after.held_ns is not None:
        record["held_ms"] = round(max(0, after.held_ns - before.held_ns) / 1e6, 3)
    if retaken_for:
        record["retaken_for"] = retaken_for
    if kept:
        record["kept"] = kept
    return record


class NvmlReader:
    """NVML opened once (for a stage), read as often as windows need; `close` when done.
    `open` answers (reader, None) or (None, why not): never raises."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml, self._handle = nvml, handle
        self.hot_c = self._hot_line()

    @classmethod
    def open(cls, index: int) -> tuple[NvmlReader | None, str | None]:
        try:
            import pynvml as nvml  # nvidia-ml-py  # noqa: PLC0415 - absent on a machine without it
        except ImportError:
            return None, f"{NO_NVML} (nvidia-ml-py is not installed)"
        try:
            nvml.nvmlInit()
        except Exception as exc:  # no driver, no GPU
            return None, f"{NO_NVML} ({exc})"
        try:
            return cls(nvml, nvml.nvmlDeviceGetHandleByIndex(index)), None
        except Exception as exc:
            _shutdown(nvml)
            return None, f"{NO_NVML} (GPU {index}: {exc})"

    def _figure(self, call: str, *constants: str) -> int | None:
        """nvml.`call`(the handle, the named constants...) as an int; None where NVML (this GPU,
        this driver, this nvidia-ml-py) has no such figure."""
        nvml = self._nvml
        try:
            value = getattr(nvml, call)(self._handle, *(getattr(nvml, c) for c in constants))
            return int(getattr(value, "violationTime", value))
        except Exception:
            return None

    def _hot_line(self) -> float:
        for which in ("NVML_TEMPERATURE_THRESHOLD_GPU_MAX", "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN"):
            line = self._figure("nvmlDeviceGetTemperatureThreshold", which)
            if line:
                return float(line - HOT_MARGIN_C)
        return float(FALLBACK_HOT_C)

    def _reasons(self) -> tuple[str, ...] | None:
        for call in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            mask = self._figure(call)
            if mask is not None:
                return reason_names(mask)
        return None

    def _held_ns(self) -> int | None:
        held = [self._figure("nvmlDeviceGetViolationStatus", policy)
                for policy in ("NVML_PERF_POLICY_POWER", "NVML_PERF_POLICY_THERMAL")]
        return sum(h for h in held if h is not None) if all(h is not None for h in held) else None

    def read(self) -> Reading:
        return Reading(sm_clock_mhz=self._figure("nvmlDeviceGetClockInfo", "NVML_CLOCK_SM"),
                       temperature_c=self._figure("nvmlDeviceGetTemperature", "NVML_TEMPERATURE_GPU"),
                       reasons=self._reasons(), held_ns=self._held_ns())

    def close(self) -> None:
        _shutdown(self._nvml)


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:
        pass


@dataclass
class ConditionsWatch:
    """One problem's windows: each taken between two readings (`read`: None when nothing is
    read), again while its verdict says so, and recorded. `note`: why nothing is read."""

    read: Callable[[], Reading | None]
    hot_c: float = float(FALLBACK_HOT_C)
    note: str | None = None
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    retaken: int = 0  # this problem's retakes so far
    windows: list[dict[str, Any]] = field(default_factory=list)  # every kept window's record

    def window(self, take: Callable[[], T], may_retake: Callable[[], bool] = lambda: True) -> tuple[T, dict[str, Any]]:
        """`take()`'s result, taken again while the conditions call for it and a retake is
        allowed (MAX_RETAKES, RETAKE_CAP, `may_retake`: e.g. the budget), and the kept take's record."""
        why_before: list[str] = []
        hot = False  # the last take began hot: let the GPU cool before the next
        while True:
            if hot:
                self._cool()
            before, started = self.read(), self.clock()
            hot = self._hot(before)
            result = take()
            seconds, after = self.clock() - started, self.read()
            why = window_verdict(before, after, seconds, self.hot_c)
            if why is None:
                break
            if len(why_before) >= MAX_RETAKES or self.retaken >= RETAKE_CAP or not may_retake():
                break
            why_before.append(why)
            self.retaken += 1
        record = window_record(before, after, why_before, why)
        self.windows.append(record)
        return result, record

    def _hot(self, reading: Reading | None) -> bool:
        return reading is not None and reading.temperature_c is not None and reading.temperature_c >= self.hot_c

    def _cool(self) -> None:
        """Wait, at most COOL_WAIT_S, until the GPU reads cooler than the hot line."""
        waited = 0.0
        while waited < COOL_WAIT_S and self._hot(self.read()):
            self.sleep(0.25)
            waited += 0.25

    def summary(self) -> dict[str, Any]:
        """The problem's conditions for its telemetry (CONDITIONS_KEY) and the run page."""
        return conditions_summary(self.windows, self.note, self.hot_c, self.retaken)


def conditions_summary(windows: list[dict[str, Any]], note: str | None, hot_c: float, retaken: int) -> dict[str, Any]:
    """Windows' records summed up: how many, the range of SM clock and temperature, the reasons
    seen, the retakes, and the windows kept under a flag (the first KEPT_LISTED in words)."""
    if note is not None:
        return {"recorded": False, "note": note, "windows": len(windows)}
    clocks = [w["sm_mhz"] for w in windows if "sm_mhz" in w]
    temps = [w["temp_c"] for w in windows if "temp_c" in w]
    kept = [w["kept"] for w in windows if w.get("kept")]
    if not (clocks or temps):
        why = "NVML gave no reading" if windows else "no window was timed"
        return {"recorded": False, "note": f"conditions not recorded: {why}", "windows": len(windows)}
    return {
        "recorded": True, "windows": len(windows), "retaken": retaken,
        "sm_clock_mhz": [min(clocks), max(clocks)] if clocks else None,
        "temperature_c": [min(temps), max(temps)] if temps else None,
        "reasons": sorted({n for w in windows for n in w.get("reasons") or ()}),
        "reasons_read": any("reasons" in w for w in windows),
        "held_ms": round(sum(w.get("held_ms", 0.0) for w in windows), 3),
        "hot_c": hot_c, "kept_flagged": len(kept), "kept": kept[:KEPT_LISTED],
    }


class GpuConditions:
    """The stage's NVML, opened once: a `watch()` per timed problem."""

    def __init__(self, reader: NvmlReader | None, note: str | None) -> None:
        self.reader, self.note = reader, note

    @classmethod
    def open(cls, index: int) -> GpuConditions:
        return cls(*NvmlReader.open(index))

    def watch(self) -> ConditionsWatch:
        if self.reader is None:
            return ConditionsWatch(lambda: None, note=self.note or NO_NVML)
        return ConditionsWatch(self.reader.read, self.reader.hot_c)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None
