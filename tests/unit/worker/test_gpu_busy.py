"""The GPU-busy sampler: a figure on a GPU machine, an explicit 'no figure' anywhere else."""
from __future__ import annotations

import time

import pytest

from worker.telemetry import GpuBusySampler, gpu_count


@pytest.mark.skipif(gpu_count() > 0, reason="checks the behaviour without a GPU")
def test_without_a_gpu_the_summary_says_why_and_claims_no_figure() -> None:
    with GpuBusySampler(0, interval_s=0.01) as busy:
        time.sleep(0.1)
    summary = busy.summary()
    assert summary["samples"] == 0 and summary["busy_fraction"] is None
    assert summary["error"].startswith("NVML")
    assert 0.05 <= summary["seconds"] < 5


@pytest.mark.gpu
@pytest.mark.skipif(gpu_count() == 0, reason="needs a GPU")
def test_an_idle_gpu_samples_as_a_fraction() -> None:
    with GpuBusySampler(0, interval_s=0.05) as busy:
        time.sleep(0.5)
    summary = busy.summary()
    assert summary["samples"] >= 5 and 0.0 <= summary["busy_fraction"] <= 1.0
