"""Limits that the kernel enforces for a namespaced job (worker/sandbox/cgroups.py), and words
that say which limit a job met: a fork bomb is "too many processes", never a summed memory
figure; memory past the cap is stopped by the kernel before the host feels it."""
from __future__ import annotations

import os
import shutil
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.worker.sandbox.test_sandbox import _python
from worker.sandbox import Sandbox, SandboxExit, SandboxLimits, SandboxPolicy, cgroups, process
from worker.sandbox.limits import GRADER_TMP

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and control groups need a root parent")

MiB = 1 << 20
LIMITS = SandboxLimits(wall_s=30, cpu_s=30, memory_bytes=512 * MiB, max_processes=32, file_size_bytes=16 * MiB,
                       disk_bytes=32 * MiB)
needs_cgroups = pytest.mark.skipif(not cgroups.available(), reason="this host lets the worker make no control group")

# A process holding 96 MiB of touched memory that forks 24 copies of itself and waits: the
# copies share those pages, so their summed resident sizes (24 x 96 MiB) pass the 512 MiB cap
# while the memory really in use stays near 96 MiB; then it forks without end.
FAT_FORKS = """
    import os, time
    hoard = bytearray(96 << 20)
    for i in range(0, len(hoard), 4096):
        hoard[i] = 1
    children = []
    for _ in range(24):
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
    print("forked", len(children), flush=True)
    time.sleep(1.0)
    while True:
        try:
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
        except OSError:
            pass
"""


@pytest.fixture
def job() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="kg-limits-"))
    (base / "job").mkdir()
    yield base / "job"
    shutil.rmtree(base, ignore_errors=True)


def run(job: Path, code: str, limits: SandboxLimits = LIMITS) -> tuple[SandboxExit, str]:
    proc = Sandbox(limits, SandboxPolicy()).spawn([_python(), "-I", "-c", textwrap.dedent(code)], job, {})
    return proc.wait(), proc.output_tail()


@pytest.mark.parametrize("with_cgroup", [True, False], ids=["cgroup", "watchdog"])
def test_a_fork_bomb_of_a_fat_process_is_too_many_processes(job: Path, with_cgroup: bool,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    if with_cgroup and not cgroups.available():
        pytest.skip("no control groups on this host")
    if not with_cgroup:
        monkeypatch.setattr(process, "job_group", lambda limits: None)
    result, output = run(job, FAT_FORKS)
    assert "forked 24" in output, (result, output)
    assert result.reason == "processes", (result, output)
    assert result.detail.startswith("too many processes"), result


@needs_cgroups
def test_memory_past_the_cap_is_stopped_by_the_kernel(job: Path) -> None:
    """2 GiB asked for at once: the watchdog, reading every 0.2 s, could see it only once the
    host had given it; the control group stops it at 512 MiB."""
    result, output = run(job, """
        import sys
        print("group:", open("/proc/self/cgroup").read().replace(chr(10), " "), flush=True)
        hoard = bytearray(2 << 30)
        print("allocated", len(hoard) >> 20, "MiB")
    """)
    assert "allocated" not in output, output
    assert result.reason == "memory", (result, output)
    assert result.detail == "memory over the cap of 512 MiB (the kernel stopped it)", result
    assert "cgroup" in result.isolation
    # The job ran inside its own group (the kernel's stop above says so), which its cgroup
    # namespace shows as the root: nothing of the host's hierarchy is named.
    assert "kernelgrade" not in output and ":/ " in output, output


@needs_cgroups
def test_the_group_holds_the_caps_and_is_removed(job: Path) -> None:
    proc = Sandbox(LIMITS, SandboxPolicy()).spawn([_python(), "-I", "-c", "import time; time.sleep(30)"], job, {})
    group = proc._group
    assert group is not None
    memory = group.folders["memory"]
    limit_file = "memory.max" if group.version == 2 else "memory.limit_in_bytes"
    assert int((memory / limit_file).read_text()) == 512 * MiB
    assert (group.folders["pids"] / "pids.max").read_text().strip() == str(2 * 32 + 64)
    members = [int(p) for p in (memory / "cgroup.procs").read_text().split()]
    assert proc.pid in members
    proc.kill()
    proc.wait()
    assert not any(folder.exists() for folder in group.folders.values())


def test_a_normal_job_is_not_blamed_for_memory(job: Path) -> None:
    """256 MiB used under a 512 MiB cap, then a normal exit."""
    result, output = run(job, """
        hoard = bytearray(256 << 20)
        for i in range(0, len(hoard), 4096):
            hoard[i] = 1
        print("done")
    """)
    assert (result.reason, result.returncode) == ("exited", 0), (result, output)


def test_a_full_scratch_space_is_named_and_the_graders_area_stays_usable(job: Path) -> None:
    """The job fills its scratch space (32 MiB here), then dies of it: the exit says so. The
    grader's own temporary area, a tmpfs apart, still takes a file."""
    result, output = run(job, f"""
        import os, sys
        try:
            for i in range(64):
                with open(f"/tmp/fill-{{i}}.bin", "wb") as f:
                    f.write(b"x" * (4 << 20))
        except OSError as exc:
            print("full:", exc.errno, flush=True)
        with open("{GRADER_TMP}/profile.json", "w") as f:
            f.write("{{}}" * 1000)
        print("grader area ok", flush=True)
        sys.exit(3)
    """)
    assert "full: 28" in output and "grader area ok" in output, output
    assert result.reason == "disk", (result, output)
    assert result.detail.startswith("scratch space full: the job wrote its cap of 32 MiB"), result


def test_a_job_that_fills_its_space_but_ends_well_is_not_blamed(job: Path) -> None:
    result, output = run(job, """
        try:
            for i in range(64):
                with open(f"fill-{i}.bin", "wb") as f:
                    f.write(b"x" * (4 << 20))
        except OSError:
            pass
        print("done")
    """)
    assert (result.reason, result.returncode) == ("exited", 0), (result, output)
