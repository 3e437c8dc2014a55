"""Timing cores: chosen per GPU, and pinning really moves every thread of a process."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from worker.affinity import TimingCpus, choose_timing_cpus, pin_process, this_thread_on


def test_explicit_and_off() -> None:
    assert choose_timing_cpus("off", 0) is None
    assert choose_timing_cpus("5,6", 0) == TimingCpus(5, 6)
    with pytest.raises(ValueError, match="two cores"):
        choose_timing_cpus("5,6,7", 0)
    with pytest.raises(ValueError, match="two cores"):
        choose_timing_cpus("5-6", 0)


def test_auto_takes_distinct_top_cores_per_gpu() -> None:
    allowed = set(range(16))
    picks = [choose_timing_cpus("auto", gpu, allowed) for gpu in range(7)]
    assert picks[0] == TimingCpus(15, 14)
    assert picks[1] == TimingCpus(13, 12)
    cores = [c for p in picks for c in (p.parent, p.timed)]  # type: ignore[union-attr]
    assert len(set(cores)) == 14 and 0 not in cores
    assert choose_timing_cpus("auto", 8, allowed) == picks[0]  # more GPUs than groups: reuse
    assert choose_timing_cpus("auto", 0, {0}) is None


THREADED = "import threading, time\n[threading.Thread(target=time.sleep, args=(30,), daemon=True).start() for _ in range(3)]\nprint('up', flush=True)\ntime.sleep(30)\n"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_pin_process_moves_every_thread() -> None:
    target = max(os.sched_getaffinity(0))
    proc = subprocess.Popen([sys.executable, "-c", THREADED], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        tids = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task")]
        assert len(tids) == 4
        pin_process(proc.pid, {target})
        assert {frozenset(os.sched_getaffinity(t)) for t in tids} == {frozenset({target})}
    finally:
        proc.kill()
        proc.wait()


def test_this_thread_on_restores_the_previous_set() -> None:
    before = os.sched_getaffinity(0)
    cpu = min(before)
    with this_thread_on(cpu):
        assert os.sched_getaffinity(0) == {cpu}
        time.sleep(0)
    assert os.sched_getaffinity(0) == before
