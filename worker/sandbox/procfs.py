"""What the parent reads about processes from /proc (Linux): one process's stat line and owner,
the whole table, the CPU time of threads, the files this process has mapped."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE")
_CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class ProcInfo:
    ppid: int
    pgrp: int
    sid: int
    state: str
    cpu_s: float
    start: int
    rss: int


def read_stat(pid: int) -> ProcInfo | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    rest = raw[raw.rfind(b")") + 2:].split()
    try:
        return ProcInfo(
            ppid=int(rest[1]), pgrp=int(rest[2]), sid=int(rest[3]), state=rest[0].decode(),
            cpu_s=(int(rest[11]) + int(rest[12])) / _CLK_TCK, start=int(rest[19]), rss=int(rest[21]) * _PAGE,
        )
    except (IndexError, ValueError):
        return None


def process_table() -> dict[int, ProcInfo]:
    """Every process visible in /proc that could be read, by pid."""
    table: dict[int, ProcInfo] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = read_stat(int(name))
            if info is not None:
                table[int(name)] = info
    return table


def owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def threads_cpu_seconds(pids: list[int]) -> float | None:
    """CPU time used so far by every thread of `pids`, from the scheduler's statistics
    (nanosecond resolution; /proc/PID/stat counts 10 ms ticks); None where the kernel keeps none."""
    total_ns = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # gone: its time leaves the sum (worker.gpu.client.cpu_used: then unknown)
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                    total_ns += int(f.read().split()[0])
            except FileNotFoundError:
                continue
            except (OSError, ValueError, IndexError):
                return None
    return total_ns / 1e9


def proportional_memory(pids: list[int]) -> int:
    """Summed proportional set sizes (/proc/PID/smaps_rollup): a page shared by N of the
    processes counts 1/N in each, so forks of one process are not counted N times."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
                for line in f:
                    if line.startswith(b"Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError, IndexError):
            continue  # gone, or not ours to read: it leaves the sum
    return total


def mapped_files(cwd: Path) -> list[str]:
    """Files under `cwd` this process has mapped (the GPU stage's arena), relative to `cwd`:
    the launcher binds them through the job folder's overlay, so they stay shared."""
    prefix = f"{cwd}/"
    with open("/proc/self/maps") as f:
        paths = {line.split(None, 5)[5].strip() for line in f if line.count(" ") >= 5 and prefix in line}
    return sorted(p[len(prefix):] for p in paths if p.startswith(prefix) and os.path.isfile(p))
