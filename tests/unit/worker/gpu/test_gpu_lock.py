"""worker.gpu.gpu_lock between real processes: checks share the GPU, a timing holds it alone, and a
waiting timing keeps new checks out (writers first)."""
from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

from worker.gpu.gpu_lock import GpuLock

CTX = mp.get_context("fork")


def _hold(folder: str, alone: bool, seconds: float, log: mp.Queue, name: str) -> None:
    lock = GpuLock(Path(folder), 0)
    with (lock.exclusive() if alone else lock.shared()):
        log.put((name, "in", time.monotonic()))
        time.sleep(seconds)
        log.put((name, "out", time.monotonic()))


def _events(log: mp.Queue, count: int) -> dict[tuple[str, str], float]:
    return {(name, what): at for name, what, at in (log.get(timeout=30) for _ in range(count))}


def _start(folder: Path, alone: bool, seconds: float, log: mp.Queue, name: str) -> mp.Process:
    p = CTX.Process(target=_hold, args=(str(folder), alone, seconds, log, name))
    p.start()
    return p


def test_shared_holders_overlap_and_a_timing_waits_for_them_alone(tmp_path: Path) -> None:
    log: mp.Queue = CTX.Queue()
    procs = [_start(tmp_path, False, 0.8, log, "check-a"), _start(tmp_path, False, 0.8, log, "check-b")]
    time.sleep(0.3)
    procs.append(_start(tmp_path, True, 0.5, log, "timing"))
    time.sleep(0.2)  # the timing waits now: a check arriving after it waits for it
    procs.append(_start(tmp_path, False, 0.1, log, "check-late"))
    ev = _events(log, 8)
    for p in procs:
        p.join(10)
    # the two checks ran at once
    assert ev[("check-b", "in")] < ev[("check-a", "out")] and ev[("check-a", "in")] < ev[("check-b", "out")]
    # the timing started after both ended, and nothing ran beside it
    assert ev[("timing", "in")] >= max(ev[("check-a", "out")], ev[("check-b", "out")])
    # the late check waited for the timing although the GPU was only shared when it came
    assert ev[("check-late", "in")] >= ev[("timing", "out")]


def test_a_dead_holder_frees_the_gpu(tmp_path: Path) -> None:
    log: mp.Queue = CTX.Queue()
    holder = _start(tmp_path, True, 60, log, "killed")
    log.get(timeout=10)
    holder.kill()
    holder.join(10)
    started = time.monotonic()
    with GpuLock(tmp_path, 0).exclusive():
        assert time.monotonic() - started < 5
