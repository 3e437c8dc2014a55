"""worker.sandbox (the "process" backend) with real child processes.

Tests marked `needs_root` prove what only a root parent can enforce (uid drop, network
namespace, RLIMIT_NPROC); the rest hold for any user. Children are plain `python -I -c`
programs using the standard library only, run by an interpreter the sandbox user can execute.
"""
from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from worker.sandbox import Sandbox, SandboxError, SandboxLimits, SandboxPolicy, usable_by

IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="uid drop, netns and RLIMIT_NPROC need a root parent")
MiB = 1 << 20
LIMITS = SandboxLimits(wall_s=20, cpu_s=20, memory_bytes=512 * MiB, max_processes=32, file_size_bytes=64 * MiB)


def _nobody() -> tuple[int, int]:
    pw = pwd.getpwnam("nobody")
    return pw.pw_uid, pw.pw_gid


def _python() -> str:
    """An interpreter the sandbox user can run (the venv's may live under a 0700 home)."""
    if not IS_ROOT:
        return sys.executable
    uid, gid = _nobody()
    candidates = [sys.executable] + [os.path.join(d, "python3") for d in os.get_exec_path()]
    for c in candidates:
        if os.path.exists(c) and usable_by(Path(c), uid, gid):
            return c
    pytest.skip("no python3 executable by the sandbox user")


@pytest.fixture
def base():
    """A world-searchable scratch dir (pytest's tmp_path sits under a 0700 root dir, which
    would make 'cannot read/write there' tests pass for the wrong reason)."""
    d = Path(tempfile.mkdtemp(prefix="kg-sandbox-"))
    d.chmod(0o755)
    (d / "job").mkdir()
    yield d
    shutil.rmtree(d, ignore_errors=True)


def run(base: Path, code: str, limits: SandboxLimits = LIMITS, env: dict | None = None,
        policy: SandboxPolicy = SandboxPolicy()):
    proc = Sandbox(limits, policy).spawn([_python(), "-I", "-c", textwrap.dedent(code)], base / "job", env or {})
    return proc, proc.wait()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_normal_exit_and_output_tail(base):
    proc, res = run(base, """
        import sys
        print("hello from stdout", flush=True)
        print("and stderr", file=sys.stderr, flush=True)
        sys.exit(3)
    """)
    assert (res.returncode, res.reason) == (3, "exited")
    tail = proc.output_tail()
    assert "hello from stdout" in tail and "and stderr" in tail
    assert proc.output_tail(5) == tail[-5:]
    assert not proc.alive and proc.poll_violation() is None


@needs_root
def test_no_network_inside_but_loopback_works_outside(base):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()  # control: works outside
        proc, res = run(base, f"""
            import socket
            for port in ({port}, 6379):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()
                    print("CONNECTED", port)
                except OSError as exc:
                    print("refused", port, type(exc).__name__)
        """)
    finally:
        listener.close()
    assert res.reason == "exited", proc.output_tail()
    assert proc.network_isolated is True
    assert "CONNECTED" not in proc.output_tail() and proc.output_tail().count("refused") == 2


@needs_root
def test_writes_only_in_cwd(base):
    forbidden = base / "forbidden"
    forbidden.mkdir(mode=0o755)
    proc, res = run(base, f"""
        import os
        open("mine.txt", "w").write("ok")
        print("listing", os.listdir({str(forbidden)!r}))
        try:
            open({str(forbidden / "x.txt")!r}, "w")
            print("WROTE OUTSIDE")
        except PermissionError:
            print("denied")
    """)
    assert res.reason == "exited", proc.output_tail()
    assert (base / "job" / "mine.txt").read_text() == "ok"
    assert "listing []" in proc.output_tail() and "denied" in proc.output_tail()
    assert not (forbidden / "x.txt").exists()
    assert (base / "job").stat().st_uid == _nobody()[0]
    assert forbidden.stat().st_uid == 0  # spawn chowns only the cwd


@needs_root
def test_cannot_read_root_only_file(base):
    secret = base / "hidden.txt"
    secret.write_text("hidden answers")
    secret.chmod(0o600)
    proc, res = run(base, f"""
        try:
            print("READ", open({str(secret)!r}).read())
        except PermissionError:
            print("denied")
    """)
    assert res.reason == "exited"
    assert "denied" in proc.output_tail() and "hidden answers" not in proc.output_tail()


def test_environment_is_only_what_is_passed(base, monkeypatch):
    monkeypatch.setenv("KERNELGRADE_FAKE_SECRET", "hunter2")
    proc, res = run(base, """
        raw = open("/proc/self/environ", "rb").read()
        print(sorted(kv.split(b"=", 1)[0].decode() for kv in raw.split(b"\\0") if kv))
    """, env={"ONLY_THIS": "1"}, policy=SandboxPolicy(gpu_index=2))
    assert res.reason == "exited", proc.output_tail()
    assert proc.output_tail().strip() == "['CUDA_VISIBLE_DEVICES', 'ONLY_THIS']"


def _session(sid: int) -> list[int]:
    """Live processes whose session or process group is `sid`."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and _alive(int(name)):
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if sid in (int(fields[2]), int(fields[3])):
                out.append(int(name))
    return out


@needs_root
def test_fork_bomb_contained(base):
    limits = SandboxLimits(wall_s=15, cpu_s=15, memory_bytes=2048 * MiB, max_processes=20, file_size_bytes=MiB)
    t0 = time.monotonic()
    proc, res = run(base, """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """, limits=limits)
    assert res.reason == "processes", (res, proc.output_tail())
    assert time.monotonic() - t0 < 10
    assert _session(proc.pid) == []


def test_memory_hog_killed(base):
    proc, res = run(base, """
        data = b"x" * (2 << 30)   # 2 GiB, every page written
        print("SURVIVED", len(data))
    """)
    assert res.reason == "memory", (res, proc.output_tail())
    assert proc.poll_violation() == "memory"
    assert "SURVIVED" not in proc.output_tail()


def test_infinite_loop_hits_wall_time(base):
    limits = SandboxLimits(wall_s=1, cpu_s=30, memory_bytes=512 * MiB, max_processes=8, file_size_bytes=MiB)
    t0 = time.monotonic()
    proc, res = run(base, "while True: pass", limits=limits)
    assert res.reason == "timeout" and proc.poll_violation() == "wall"
    assert "1.0 s wall time" in res.detail
    assert 1 <= time.monotonic() - t0 < 6


def test_cpu_limit(base):
    limits = SandboxLimits(wall_s=15, cpu_s=1, memory_bytes=512 * MiB, max_processes=8, file_size_bytes=MiB)
    t0 = time.monotonic()
    proc, res = run(base, "while True: pass", limits=limits)
    assert res.reason == "cpu", res
    assert time.monotonic() - t0 < 10 and proc.poll_violation() is None


def test_file_size_limit(base):
    limits = SandboxLimits(wall_s=15, cpu_s=15, memory_bytes=512 * MiB, max_processes=8, file_size_bytes=MiB)
    proc, res = run(base, """
        with open("big.bin", "wb", buffering=0) as f:
            f.write(b"a" * (1 << 20))
            try:
                f.write(b"b" * 4096)
                print("WROTE PAST LIMIT")
            except OSError as exc:
                print("blocked", exc.errno)
    """, limits=limits)
    assert res.reason == "exited", proc.output_tail()
    assert "blocked 27" in proc.output_tail()  # EFBIG
    assert (base / "job" / "big.bin").stat().st_size == MiB


def test_kill_leaves_no_survivor_even_sigterm_ignoring_escapees(base):
    py = _python()
    proc = Sandbox(LIMITS).spawn([py, "-I", "-c", textwrap.dedent(f"""
        import subprocess, time
        stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
        a = subprocess.Popen([{py!r}, "-c", stubborn])
        b = subprocess.Popen([{py!r}, "-c", stubborn], start_new_session=True)  # leaves the group
        time.sleep(0.5)
        print("PIDS", a.pid, b.pid, flush=True)
        time.sleep(300)
    """)], base / "job", {})
    deadline = time.monotonic() + 10
    while "PIDS" not in proc.output_tail() and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = [int(x) for x in proc.output_tail().split("PIDS", 1)[1].split()[:2]]
    assert all(_alive(p) for p in pids)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.1)
    proc.kill()
    res = proc.wait()
    assert res.reason == "signal" and res.detail.startswith("SIGKILL")
    time.sleep(0.1)
    assert not any(_alive(p) for p in pids) and not proc.alive


def _rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def test_output_flood_keeps_parent_memory_and_tail_bounded(base):
    before = _rss()
    proc, res = run(base, """
        import os
        block = b"y" * (1 << 20)
        for _ in range(400):
            os.write(1, block)
        os.write(1, b"\\nTHE END\\n")
    """)
    assert res.reason == "exited", res
    assert _rss() - before < 32 * MiB
    tail = proc.output_tail(4096)
    assert len(tail) == 4096 and tail.endswith("THE END\n")
    assert len(proc.output_tail(10**9)) <= 64 * 1024


def test_bad_user_and_cwd_rejected(base):
    if IS_ROOT:
        with pytest.raises(SandboxError):
            Sandbox(LIMITS, SandboxPolicy(user="no-such-user-kg"))
    with pytest.raises(SandboxError):
        Sandbox(LIMITS).spawn([_python(), "-c", "pass"], base / "missing", {})
