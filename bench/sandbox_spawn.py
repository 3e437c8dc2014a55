"""What a sandboxed child costs to start, side by side: this tree's sandbox against an earlier
tree's (e.g. the view before the default-deny one) and against bubblewrap with the same allow-list,
the same namespaces (IPC and cgroup included) and this tree's syscall filter.

Each round starts one child of every kind, in rotating order, each a Python that imports
numpy (what every GPU-stage child does first) and exits; the figure is the wall time from
spawn to the end of wait(). Needs root (namespaces). Prints per kind the median, the spread and
the ratio of medians to this tree's.

    sudo python3 bench/sandbox_spawn.py [--rounds 30] [--old-tree DIR] [--bwrap PATH]

`--old-tree` is a checkout of an earlier commit (`git archive REV worker | tar -x -C DIR`); its
sandbox runs in a subprocess of its own (the two trees' modules cannot share one process).
With a GPU child's count per grade (ARCHITECTURE: ~15 for a full hw4 grade), the difference of
medians is the added time per grade.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks_md import add_smoke_flag, smoke

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = os.environ.get("KG_SPAWN_PROGRAM", "import numpy")
SECCOMP_FD = 9  # where bubblewrap reads the syscall filter's program (--seccomp)
ONE_SPAWN = """
import json, shutil, sys, time, tempfile
from pathlib import Path
from worker.sandbox import Sandbox, SandboxLimits, SandboxPolicy
limits = SandboxLimits(wall_s=60, cpu_s=60, memory_bytes=4 << 30, max_processes=64, file_size_bytes=1 << 26)
sandbox = Sandbox(limits, SandboxPolicy())
times = []
for _ in range(int(sys.argv[1])):
    job = Path(tempfile.mkdtemp(prefix="kg-spawn-"))
    started = time.perf_counter()
    ended = sandbox.spawn([sys.argv[4], "-I", "-c", sys.argv[2]], job, {"PYTHONPATH": sys.argv[3]}).wait()
    times.append(time.perf_counter() - started)
    assert ended.reason == "exited" and ended.returncode == 0, ended
    shutil.rmtree(job, ignore_errors=True)
print(json.dumps(times))
"""


def sandbox_times(tree: Path, count: int, python_path: str, python: str) -> list[float]:
    """`count` spawns through the sandbox of `tree`, timed in a process of its own."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), python_path])}
    out = subprocess.run([python, "-c", ONE_SPAWN, str(count), PROGRAM, python_path, python], env=env,
                         capture_output=True, text=True, check=True, cwd=tree)
    return [float(t) for t in json.loads(out.stdout.strip().splitlines()[-1])]


def bwrap_argv(bwrap: str, job: Path, python_path: str, python: str) -> list[str]:
    """bubblewrap with this tree's allow-list (worker.sandbox.view) and the same namespaces."""
    sys.path.insert(0, str(ROOT))
    from worker.sandbox.view import view_for  # noqa: PLC0415 - the tree under test

    view = view_for([python], {"PYTHONPATH": python_path}, job, ("nobody", 65534, 65534), gpu=False)
    argv = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-ipc", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
            "--tmpfs", "/run", "--seccomp", str(SECCOMP_FD)]
    for path in view.binds:
        argv += ["--ro-bind", path, path]
    for path, target in view.links.items():
        argv += ["--symlink", target, path]
    argv += ["--bind", str(job), str(job), "--chdir", str(job), "--uid", "65534", "--gid", "65534",
             "--unshare-user", "--clearenv", "--setenv", "PYTHONPATH", python_path]
    return [*argv, python, "-I", "-c", PROGRAM]


def bwrap_times(bwrap: str, count: int, python_path: str, python: str) -> list[float]:
    """bubblewrap given this tree's syscall filter (plain EPERM: bwrap has no supervisor to
    count refusals) on SECCOMP_FD, as our launcher gives it to a job."""
    sys.path.insert(0, str(ROOT))
    from worker.sandbox.syscall_filter import filter_program  # noqa: PLC0415 - the tree under test

    program = filter_program(notify=False)
    times = []
    for _ in range(count):
        job = Path(tempfile.mkdtemp(prefix="kg-spawn-bwrap-"))
        read, write = os.pipe()
        os.write(write, program)
        os.close(write)
        os.dup2(read, SECCOMP_FD)
        os.close(read)
        try:
            started = time.perf_counter()
            subprocess.run(bwrap_argv(bwrap, job, python_path, python), check=True, capture_output=True,
                           pass_fds=(SECCOMP_FD,))
            times.append(time.perf_counter() - started)
        finally:
            os.close(SECCOMP_FD)
            shutil.rmtree(job, ignore_errors=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--old-tree", type=Path)
    parser.add_argument("--bwrap", default=shutil.which("bwrap"))
    parser.add_argument("--python", default=sys.executable, help="the children's interpreter (the sandbox user's to run)")
    add_smoke_flag(parser)
    args = parser.parse_args()
    if smoke(args, parser):
        args.rounds = 2
    python_path, python = os.environ.get("PYTHONPATH", ""), args.python
    kinds = {"this tree": lambda n: sandbox_times(ROOT, n, python_path, python)}
    if args.old_tree:
        kinds["old tree"] = lambda n: sandbox_times(args.old_tree.resolve(), n, python_path, python)
    if args.bwrap:
        kinds["bubblewrap"] = lambda n: bwrap_times(args.bwrap, n, python_path, python)
    times: dict[str, list[float]] = {k: [] for k in kinds}
    names = list(kinds)
    for r in range(args.rounds):  # rotating order, one child of each kind per round
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name] += kinds[name](1)
    base = statistics.median(times["this tree"])
    print(f"spawn to exit of `python -I -c '{PROGRAM}'`, {args.rounds} rounds, medians in ms")
    for name, values in times.items():
        med = statistics.median(values)
        print(f"{name:<12} median {med * 1e3:7.1f}  min {min(values) * 1e3:7.1f}  max {max(values) * 1e3:7.1f}"
              f"  ratio to this tree {med / base:5.2f}")


if __name__ == "__main__":
    main()
