"""The process backend's namespaces (worker/sandbox/namespaces.py, launcher.py), as root: a
job's processes die with it, its /tmp & co. are its own, its writes are capped and carried
back into the job folder, host Unix sockets are out of reach, and where namespaces are missing
the sandbox refuses unless told otherwise (and says what it applied)."""
from __future__ import annotations

import mmap
import os
import shutil
import socket
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.worker.sandbox.test_sandbox import _alive, _python, _with_marker
from worker.sandbox import (
    Sandbox,
    SandboxedProcess,
    SandboxError,
    SandboxExit,
    SandboxLimits,
    SandboxPolicy,
    cgroups,
    namespaces,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces need a root parent")

MiB = 1 << 20
LIMITS = SandboxLimits(wall_s=20, cpu_s=20, memory_bytes=512 * MiB, max_processes=32, file_size_bytes=16 * MiB,
                       disk_bytes=32 * MiB)


@pytest.fixture
def job() -> Iterator[Path]:
    """A job folder under /tmp (as in the hostile tests: the job must still see it there)."""
    base = Path(tempfile.mkdtemp(prefix="kg-ns-"))
    base.chmod(0o755)
    (base / "job").mkdir()
    yield base / "job"
    shutil.rmtree(base, ignore_errors=True)


def spawn(job: Path, code: str, limits: SandboxLimits = LIMITS, policy: SandboxPolicy = SandboxPolicy()) -> SandboxedProcess:
    return Sandbox(limits, policy).spawn([_python(), "-I", "-c", textwrap.dedent(code)], job, {})


def run(job: Path, code: str, limits: SandboxLimits = LIMITS) -> tuple[SandboxExit, str]:
    proc = spawn(job, code, limits)
    result = proc.wait()
    return result, proc.output_tail()


def test_isolation_is_recorded(job: Path) -> None:
    result, _ = run(job, "pass")
    assert set(result.isolation) == {"network", "pid", "mount", "ipc", "uts", "cgroupns", "disk", "syscalls"} | ({"cgroup"} if cgroups.available() else set())


def test_a_daemon_dies_with_its_job(job: Path) -> None:
    marker = f"kg-daemon-{uuid.uuid4().hex}"
    result, output = run(job, f"""
        import os, subprocess, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", {marker!r}])
                time.sleep(120)
            os._exit(0)
        time.sleep(1)
        print("main done")
    """)
    assert result.reason == "exited" and "main done" in output, (result, output)
    time.sleep(0.3)
    assert not [p for p in _with_marker(marker) if _alive(p)]


def test_tmp_files_are_the_jobs_own(job: Path) -> None:
    name = f"kg-ns-{uuid.uuid4().hex}"
    host_file = Path("/tmp") / f"{name}-host"
    host_file.write_text("the host's")
    host_file.chmod(0o644)
    try:
        result, output = run(job, f"""
            import os
            print("host file visible:", os.path.exists({str(host_file)!r}))
            for folder in ("/tmp", "/var/tmp", "/dev/shm"):
                with open(f"{{folder}}/{name}", "w") as f:
                    f.write("planted")
            print("planted")
        """)
        assert result.reason == "exited" and "host file visible: False" in output and "planted" in output, output
        for folder in ("/tmp", "/var/tmp", "/dev/shm"):
            assert not (Path(folder) / name).exists()
        result, output = run(job, f"""
            import os
            print("left by the last job:", [f for f in ("/tmp", "/var/tmp", "/dev/shm") if os.path.exists(f"{{f}}/{name}")])
        """)
        assert "left by the last job: []" in output, output
    finally:
        host_file.unlink()


def test_writes_past_the_cap_fail_and_the_job_folder_stays_small(job: Path) -> None:
    result, output = run(job, """
        written = 0
        try:
            for i in range(64):
                with open(f"fill-{i}.bin", "wb") as f:
                    f.write(b"x" * (4 << 20))
                written += 4 << 20
        except OSError as exc:
            print("stopped at", written >> 20, "MiB errno", exc.errno)
    """)
    assert result.reason == "exited", result
    assert "errno 28" in output, output  # ENOSPC
    stopped_at = int(output.split("stopped at", 1)[1].split()[0])
    assert stopped_at <= 32
    assert sum(p.stat().st_size for p in job.iterdir()) <= 32 * MiB


def test_what_the_job_wrote_reaches_the_job_folder(job: Path) -> None:
    (job / "gone.txt").write_text("delete me")
    (job / "kept.txt").write_text("keep me")
    (job / "sub").mkdir()
    (job / "sub" / "old.txt").write_text("old")
    outside = job.parent / "outside.txt"
    outside.write_text("outside")
    result, output = run(job, f"""
        import os, shutil
        os.remove("gone.txt")
        shutil.rmtree("sub")
        os.makedirs("sub/deeper")
        open("sub/deeper/new.txt", "w").write("new")
        open("kept.txt", "a").write(", changed")
        os.symlink({str(outside)!r}, "link")
    """)
    assert result.reason == "exited", output
    assert not (job / "gone.txt").exists()
    assert (job / "kept.txt").read_text() == "keep me, changed"
    assert sorted(p.relative_to(job).as_posix() for p in (job / "sub").rglob("*")) == ["sub/deeper", "sub/deeper/new.txt"]
    assert not (job / "link").is_symlink() and outside.read_text() == "outside"  # links are dropped (overlay.py)


def test_a_file_the_parent_maps_stays_shared(job: Path) -> None:
    path = job / "arena"
    path.write_bytes(bytes(4096))
    with open(path, "r+b") as f:
        shared = mmap.mmap(f.fileno(), 4096)
    try:
        proc = spawn(job, """
            import mmap, time
            with open("arena", "r+b") as f:
                m = mmap.mmap(f.fileno(), 4096)
            m[:5] = b"hello"
            while m[5:10] != b"world":
                time.sleep(0.01)
            print("saw the parent's write")
        """)
        deadline = time.monotonic() + 10
        while shared[:5] != b"hello":
            assert time.monotonic() < deadline, proc.output_tail()
            time.sleep(0.01)
        shared[5:10] = b"world"
        result = proc.wait()
        assert result.reason == "exited" and "saw the parent's write" in proc.output_tail()
    finally:
        shared.close()


@pytest.fixture
def host_sockets() -> Iterator[list[Path]]:
    """Listening Unix sockets where services keep theirs: under /run, and somewhere else
    (found through the host's socket list), plus PostgreSQL's when it runs here."""
    folder = Path(tempfile.mkdtemp(prefix="kg-ns-sockets-", dir="/var/lib"))
    folder.chmod(0o755)
    paths = [Path("/run") / f"kg-ns-{uuid.uuid4().hex[:8]}.sock", folder / "redis.sock"]
    listeners = []
    for path in paths:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(path))
        s.listen()
        path.chmod(0o777)
        listeners.append(s)
    postgres = Path("/var/run/postgresql/.s.PGSQL.5432")
    try:
        yield paths + ([postgres] if postgres.exists() else [])
    finally:
        for s in listeners:
            s.close()
        for path in paths:
            path.unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)


def test_host_unix_sockets_cannot_be_connected(job: Path, host_sockets: list[Path]) -> None:
    for path in host_sockets:  # reachable from the host, so a refusal below is the sandbox's
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(path))
    result, output = run(job, f"""
        import socket
        for path in {[str(p) for p in host_sockets]!r}:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                print("CONNECTED", path)
            except OSError as exc:
                print("refused", path, exc.errno)
    """)
    assert result.reason == "exited", output
    assert "CONNECTED" not in output and output.count("refused") == len(host_sockets), output


def test_without_namespaces_it_refuses_unless_allowed(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(namespaces, "namespaces_unavailable", lambda: "no namespaces on this host")
    with pytest.raises(SandboxError, match="no namespaces on this host"):
        Sandbox(LIMITS)
    proc = spawn(job, "print('ran')", policy=SandboxPolicy(require_namespaces=False))
    result = proc.wait()
    assert result.reason == "exited" and "ran" in proc.output_tail()
    assert result.isolation == ("network", "syscalls")


def test_host_folders_under_tmp_the_job_needs_stay_readable(job: Path) -> None:
    """A checkout or virtualenv under /tmp (as CI clones) is bound back into the job's fresh
    /tmp, read-only; the rest of the host's /tmp stays out of sight."""
    kept = Path(tempfile.mkdtemp(prefix="kg-ns-kept-"))
    sibling = Path(tempfile.mkdtemp(prefix="kg-ns-sibling-"))
    try:
        for folder in (kept, sibling):
            folder.chmod(0o755)
        module = f"kgkept{uuid.uuid4().hex[:8]}"
        (kept / f"{module}.py").write_text("VALUE = 'imported from the kept folder'\n")
        (sibling / "secret.txt").write_text("not for the job")
        code = textwrap.dedent(f"""
            import os, {module}
            print({module}.VALUE)
            print("sibling visible:", os.path.exists({str(sibling / 'secret.txt')!r}))
            try:
                open({str(kept / 'planted')!r}, "w")
                print("kept folder writable")
            except OSError as exc:
                print("kept folder read-only:", exc.errno)
        """)
        proc = Sandbox(LIMITS, SandboxPolicy()).spawn([_python(), "-c", code], job, {"PYTHONPATH": str(kept)})
        result, output = proc.wait(), proc.output_tail()
        assert result.reason == "exited" and result.returncode == 0, (result, output)
        assert "imported from the kept folder" in output and "sibling visible: False" in output, output
        assert "kept folder read-only" in output and not (kept / "planted").exists(), output
    finally:
        shutil.rmtree(kept, ignore_errors=True)
        shutil.rmtree(sibling, ignore_errors=True)


def test_the_view_is_readable_whatever_the_workers_umask(job: Path) -> None:
    """The service runs with umask 077; the launcher builds the job's root with its own 022, or
    the sandbox user could not read the fresh /etc or traverse the folders it made."""
    old = os.umask(0o077)
    try:
        result, output = run(job, """
            import os
            print("users:", [line.split(":")[0] for line in open("/etc/passwd")])
            print("cwd listed:", os.listdir("."))
        """)
    finally:
        os.umask(old)
    assert result.reason == "exited" and result.returncode == 0, (result, output)
    assert "users: ['nobody']" in output and "cwd listed: []" in output, output
