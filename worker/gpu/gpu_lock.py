"""One GPU's lock between the worker processes of a host: shared by the pieces that only need
the GPU to be right (builds, checks), held alone by a timing piece.

A timed call is mostly host work (Python, copies, launches), so a busy CPU moves the figure as
much as a busy GPU: while a timing holds the lock, no other run's GPU work or build runs on that
host. Writers first: a timing waiting for the lock keeps new checks out until it has had its
turn, so a stream of checks cannot starve it.

Two flock(2) files per GPU: `gate` (a reader passes it, a writer holds it from its request to
its end) and `main` (readers share it, a writer holds it alone). flock belongs to an open file
description, so every acquisition opens its own, and a process that dies frees its locks.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path


class GpuLock:
    def __init__(self, folder: Path, gpu_index: int) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.gate = folder / f"gpu-{gpu_index}.gate"
        self.main = folder / f"gpu-{gpu_index}.lock"

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Held beside other shared holders; waits while a timing holds or waits for the lock."""
        with _flocked(self.gate, fcntl.LOCK_EX):  # passed through at once unless a writer holds it
            main = _open(self.main)
            try:
                fcntl.flock(main, fcntl.LOCK_SH)
            except BaseException:
                os.close(main)
                raise
        try:
            yield
        finally:
            os.close(main)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Held alone: waits for the shared holders to finish, none new starting meanwhile."""
        with _flocked(self.gate, fcntl.LOCK_EX), _flocked(self.main, fcntl.LOCK_EX):
            yield


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


@contextlib.contextmanager
def _flocked(path: Path, mode: int) -> Iterator[None]:
    fd = _open(path)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def held(lock: GpuLock | None, alone: bool) -> Iterator[None]:
    """`lock` held alone or shared; nothing when there is no lock (a grade outside the split)."""
    if lock is None:
        yield
    elif alone:
        with lock.exclusive():
            yield
    else:
        with lock.shared():
            yield


class GpuTurns:
    """A timing stage's turns on the GPU (rubrics.hw4's timing piece): `sharing()` while its
    children start and warm, beside other runs' checks; `alone()` while it times. Without a lock
    (a whole grade, a test) both hold nothing. With one, it adds up the seconds it waited for
    and held each kind of turn (`record()`): the alone seconds are what bounds how many timings
    a GPU does per hour (bench/split_burst.py, the capacity model)."""

    def __init__(self, lock: GpuLock | None) -> None:
        self.lock = lock
        self.seconds = dict.fromkeys(("waited_shared", "shared", "waited_alone", "alone"), 0.0)

    def sharing(self) -> contextlib.AbstractContextManager[None]:
        return self._turn(alone=False)

    def alone(self) -> contextlib.AbstractContextManager[None]:
        return self._turn(alone=True)

    def waited(self) -> float:
        """Seconds waited so far for turns of either kind (0 without a lock)."""
        return self.seconds["waited_shared"] + self.seconds["waited_alone"]

    def record(self) -> dict[str, float] | None:
        """Seconds waited for and held, shared and alone; None without a lock."""
        return None if self.lock is None else {k: round(v, 2) for k, v in self.seconds.items()}

    @contextlib.contextmanager
    def _turn(self, alone: bool) -> Iterator[None]:
        if self.lock is None:
            yield
            return
        kind, asked = ("alone" if alone else "shared"), time.monotonic()
        with held(self.lock, alone):
            got = time.monotonic()
            self.seconds[f"waited_{kind}"] += got - asked
            try:
                yield
            finally:
                self.seconds[kind] += time.monotonic() - got
