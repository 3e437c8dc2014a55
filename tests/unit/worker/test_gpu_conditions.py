"""The GPU's conditions around each timing window (worker.gpu_conditions): which readings call
for measuring a window again, the retakes and the flag a window is kept with, the record and
summary staff read, NVML's calls as the reader makes them, and a machine without NVML."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from worker.gpu_conditions import (
    COOL_WAIT_S,
    MAX_RETAKES,
    NO_NVML,
    RETAKE_CAP,
    ConditionsWatch,
    GpuConditions,
    NvmlReader,
    Reading,
    reason_names,
    window_verdict,
)
from worker.telemetry import gpu_count

HOT = 77.0
COOL = Reading(1980, 45, ("GpuIdle",), 0)


def reading(sm: int = 1980, temp: int = 45, reasons: tuple[str, ...] = (), held_ns: int | None = 0) -> Reading:
    return Reading(sm, temp, reasons, held_ns)


def test_reason_bits_are_named_as_nvml_names_them() -> None:
    assert reason_names(0) == ()
    assert reason_names(0x1 | 0x2) == ("ApplicationsClocksSetting", "GpuIdle")
    assert reason_names(0x4 | 0x8 | 0x20 | 0x40 | 0x80) == (
        "HwPowerBrakeSlowdown", "HwSlowdown", "HwThermalSlowdown", "SwPowerCap", "SwThermalSlowdown")
    assert reason_names(0x10 | 0x100 | 0x1000) == ("0x1000", "DisplayClockSetting", "SyncBoost")


@pytest.mark.parametrize("reasons", [("SwPowerCap",), ("HwSlowdown",), ("SwThermalSlowdown",), ("HwThermalSlowdown",),
                                     ("HwPowerBrakeSlowdown",), ("GpuIdle", "SwThermalSlowdown")])
def test_a_slowdown_before_or_after_the_window_calls_for_a_retake(reasons: tuple[str, ...]) -> None:
    why = window_verdict(reading(reasons=reasons), COOL, 0.5, HOT)
    assert why is not None and why.startswith("the GPU slowed its clocks (") and reasons[-1] in why
    assert window_verdict(COOL, reading(reasons=reasons), 0.5, HOT) == why


@pytest.mark.parametrize("reasons", [("GpuIdle",), ("ApplicationsClocksSetting",), ("SyncBoost",),
                                     ("DisplayClockSetting",), ()])
def test_idle_and_application_clocks_say_nothing_of_the_window(reasons: tuple[str, ...]) -> None:
    assert window_verdict(reading(reasons=reasons), reading(reasons=reasons), 0.5, HOT) is None


def test_time_held_back_by_power_or_temperature_during_the_window_calls_for_a_retake() -> None:
    before = reading(held_ns=7_000_000_000)
    assert window_verdict(before, reading(held_ns=7_000_000_000 + 2_000_000), 0.5, HOT) is None  # 0.4%: noise
    why = window_verdict(before, reading(held_ns=7_000_000_000 + 40_000_000), 0.5, HOT)
    assert why == "the GPU was held back by power or temperature for 40 ms of its 500 ms"
    # a GPU that keeps no such counter: nothing to read, nothing decided from it
    assert window_verdict(reading(held_ns=None), reading(held_ns=None), 0.5, HOT) is None


def test_a_window_that_begins_hot_calls_for_a_retake_one_that_ends_hot_does_not() -> None:
    why = window_verdict(reading(temp=78), reading(temp=70), 0.5, HOT)
    assert why == "the GPU was hot when it began (78 °C; 77 °C or more is hot)"
    assert window_verdict(reading(temp=76), reading(temp=79), 0.5, HOT) is None


def test_without_readings_nothing_calls_for_a_retake() -> None:
    assert window_verdict(None, None, 0.5, HOT) is None
    assert window_verdict(Reading(None, None, None), Reading(None, None, None), 0.5, HOT) is None


class Script:
    """NVML's readings in order (the boundary the watch reads), and the takes they surround."""

    def __init__(self, readings: list[Reading | None]) -> None:
        self.readings, self.takes, self.slept = list(readings), 0, 0.0

    def read(self) -> Reading | None:
        return self.readings.pop(0)

    def take(self) -> int:
        self.takes += 1
        return self.takes

    def sleep(self, seconds: float) -> None:
        self.slept += seconds

    def watch(self) -> ConditionsWatch:
        return ConditionsWatch(self.read, HOT, sleep=self.sleep)


THROTTLED = reading(sm=1410, reasons=("SwThermalSlowdown",))


def test_a_good_window_is_taken_once_and_recorded_beside_its_figure() -> None:
    script = Script([reading(sm=1980, temp=44, reasons=("GpuIdle",), held_ns=5), reading(sm=1965, temp=46, held_ns=5)])
    result, record = script.watch().window(script.take)
    assert (result, script.takes) == (1, 1)
    assert record == {"sm_mhz": 1965, "temp_c": 46, "reasons": [], "held_ms": 0.0}  # idle left out


def test_a_throttled_window_is_taken_again_and_the_good_take_is_kept() -> None:
    script = Script([THROTTLED, COOL, COOL, COOL])
    watch = script.watch()
    result, record = watch.window(script.take)
    assert (result, script.takes, watch.retaken) == (2, 2, 1)  # the second take's figure is the one kept
    assert record["retaken_for"] == ["the GPU slowed its clocks (SwThermalSlowdown)"] and "kept" not in record
    assert record["sm_mhz"] == 1980


def test_a_window_throttled_on_every_take_is_kept_with_a_flag_after_the_retakes() -> None:
    script = Script([THROTTLED, COOL] * (MAX_RETAKES + 1))
    result, record = script.watch().window(script.take)
    assert result == script.takes == MAX_RETAKES + 1
    assert record["kept"] == "the GPU slowed its clocks (SwThermalSlowdown)"
    assert record["retaken_for"] == [record["kept"]] * MAX_RETAKES
    assert record["reasons"] == ["SwThermalSlowdown"] and record["sm_mhz"] == 1410


def test_a_gpu_that_stays_throttled_costs_a_problem_at_most_its_retake_cap() -> None:
    windows = 5
    script = Script([THROTTLED, COOL] * (windows + RETAKE_CAP))
    watch = script.watch()
    records = [watch.window(script.take)[1] for _ in range(windows)]
    assert script.takes == windows + RETAKE_CAP and watch.retaken == RETAKE_CAP
    assert all(r.get("kept") for r in records)  # every window kept under its flag
    summary = watch.summary()
    assert summary["recorded"] is True and summary["windows"] == windows and summary["retaken"] == RETAKE_CAP
    assert summary["kept_flagged"] == windows and summary["kept"][0] == records[0]["kept"]
    assert summary["sm_clock_mhz"] == [1410, 1410] and summary["reasons"] == ["SwThermalSlowdown"]


def test_no_retake_without_room_for_one() -> None:
    script = Script([THROTTLED, COOL])
    _, record = script.watch().window(script.take, may_retake=lambda: False)
    assert script.takes == 1 and record["kept"].startswith("the GPU slowed its clocks")


def test_a_hot_start_waits_for_the_gpu_to_cool_before_the_retake() -> None:
    hot, cooling = reading(temp=80), reading(temp=78)
    # take 1 begins hot; the wait reads 80, 78 (still hot: it sleeps twice), then 70; take 2 is good
    script = Script([hot, reading(temp=79), hot, cooling, reading(temp=70), reading(temp=70), reading(temp=69)])
    _, record = script.watch().window(script.take)
    assert script.takes == 2 and script.slept == 0.5
    assert record["retaken_for"] == ["the GPU was hot when it began (80 °C; 77 °C or more is hot)"]
    # a GPU that does not cool waits at most COOL_WAIT_S
    stuck = Script([hot, hot] + [hot] * 100)
    stuck.watch()._cool()
    assert stuck.slept == COOL_WAIT_S


def test_without_nvml_a_window_is_taken_once_and_the_record_says_why_nothing_was_read() -> None:
    watch = GpuConditions(None, f"{NO_NVML} (NVML Shared Library Not Found)").watch()
    takes = []
    result, record = watch.window(lambda: takes.append(1) or len(takes))
    assert (result, record) == (1, {})
    assert watch.summary() == {"recorded": False, "note": f"{NO_NVML} (NVML Shared Library Not Found)", "windows": 1}


@pytest.mark.skipif(gpu_count() > 0, reason="checks the behaviour without a GPU driver")
def test_this_machine_without_nvml_opens_no_reader_and_says_so() -> None:
    reader, note = NvmlReader.open(0)
    assert reader is None and note is not None and note.startswith(f"{NO_NVML} (")
    conditions = GpuConditions.open(0)
    summary = conditions.watch().summary()
    assert summary["recorded"] is False and summary["note"] == note
    conditions.close()  # nothing to shut down, and no error


def fake_nvml(**overrides: Any) -> SimpleNamespace:
    """The calls of nvidia-ml-py the reader makes, answering as an H100 does (an NVML stand-in:
    this machine has no driver); `overrides` replace calls, e.g. with ones that raise."""
    def unsupported(*_args: Any) -> Any:
        raise RuntimeError("Not Supported")

    calls: dict[str, Any] = dict(
        NVML_CLOCK_SM=1, NVML_TEMPERATURE_GPU=0, NVML_TEMPERATURE_THRESHOLD_GPU_MAX=3,
        NVML_TEMPERATURE_THRESHOLD_SLOWDOWN=1, NVML_PERF_POLICY_POWER=0, NVML_PERF_POLICY_THERMAL=1,
        nvmlDeviceGetClockInfo=lambda h, clock: {1: 1980}[clock],
        nvmlDeviceGetTemperature=lambda h, sensor: 41,
        nvmlDeviceGetTemperatureThreshold=lambda h, which: {3: 87, 1: 90}[which],
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0x1 | 0x20,
        nvmlDeviceGetCurrentClocksThrottleReasons=unsupported,
        nvmlDeviceGetViolationStatus=lambda h, policy: SimpleNamespace(referenceTime=1, violationTime=[5, 7][policy]),
        nvmlShutdown=lambda: None,
    )
    calls.update({k: (unsupported if v is None else v) for k, v in overrides.items()})
    return SimpleNamespace(**calls)


def test_the_reader_reads_clock_temperature_reasons_and_held_time_and_the_hot_line() -> None:
    reader = NvmlReader(fake_nvml(), handle=object())
    assert reader.hot_c == 77.0  # the max operating temperature, 87, less the margin
    assert reader.read() == Reading(1980, 41, ("GpuIdle", "SwThermalSlowdown"), 12)


def test_a_figure_the_gpu_does_not_report_is_none_and_older_calls_are_the_fallback() -> None:
    nvml = fake_nvml(nvmlDeviceGetCurrentClocksEventReasons=None,
                     nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0x4,
                     nvmlDeviceGetViolationStatus=None, nvmlDeviceGetTemperature=None,
                     nvmlDeviceGetTemperatureThreshold=None)
    reader = NvmlReader(nvml, handle=object())
    assert reader.read() == Reading(1980, None, ("SwPowerCap",), None)
    assert reader.hot_c == 80.0  # no threshold: the fallback line
