"""`grader worker --gpus` (grader/gpu_workers.py) without a GPU: the device list as nvidia-smi
prints it (a stand-in nvidia-smi script, or KG_FAKE_GPUS), one real process per fake GPU with
its own environment, a worker that keeps dying left out while the other goes on, SIGTERM passed
on to every worker, and the one-GPU case exec'ing today's `grader worker` in place.

The supervised processes are small Python scripts that record their environment and wait for
SIGTERM, not Celery workers: a Celery worker per fake GPU is too heavy for a 2-core machine, and
the supervisor only starts, watches and signals processes. That `grader worker` itself pins a
worker through KG_GPU_INDEX/CUDA_VISIBLE_DEVICES is tests/service/test_queues.py's; that a run
whose worker died is sent again and taken by the next worker is tests/service/test_faults_requeue.py's.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from grader.cli import main as cli
from grader.gpu_workers import (
    Gpu,
    GpuListError,
    choose_gpus,
    list_gpus,
    node_name,
    parse_gpu_list,
    warn_shared_cores,
    worker_env,
)
from worker.affinity import choose_timing_cpus

ROOT = Path(__file__).resolve().parents[3]
SMI_OUTPUT = "0, GPU-1b2c3d4e-0000-1111-2222-333344445555\n1, GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff\n"
TWO = [Gpu(0, "GPU-1b2c3d4e-0000-1111-2222-333344445555"), Gpu(1, "GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff")]


def test_the_list_is_read_as_nvidia_smi_prints_it() -> None:
    assert parse_gpu_list(SMI_OUTPUT) == TWO
    assert parse_gpu_list("\n" + SMI_OUTPUT + "\n\n") == TWO  # blank lines
    assert parse_gpu_list("0, GPU-a; 1, GPU-b") == [Gpu(0, "GPU-a"), Gpu(1, "GPU-b")]  # KG_FAKE_GPUS's form
    assert parse_gpu_list("") == []
    for bad in ("GPU-a, 0", "0 GPU-a", "0, ", "0, GPU-a\n0, GPU-b"):
        with pytest.raises(GpuListError):
            parse_gpu_list(bad)


def _fake_smi(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return [str(script), "--query-gpu=index,uuid", "--format=csv,noheader"]


def test_the_list_comes_from_nvidia_smi_or_kg_fake_gpus(tmp_path: Path) -> None:
    query = _fake_smi(tmp_path, f"cat <<'EOF'\n{SMI_OUTPUT}EOF")
    assert list_gpus({}, query) == TWO
    assert list_gpus({"KG_FAKE_GPUS": "3, GPU-x"}, query) == [Gpu(3, "GPU-x")]  # the stand-in wins
    with pytest.raises(GpuListError, match="exited 9: no devices were found"):
        list_gpus({}, _fake_smi(tmp_path, "echo 'no devices were found' >&2; exit 9"))
    with pytest.raises(GpuListError, match="cannot list the GPUs"):
        list_gpus({}, [str(tmp_path / "absent-nvidia-smi")])


def test_gpus_chosen_by_all_or_by_index() -> None:
    assert choose_gpus("all", lambda: TWO) == TWO
    assert choose_gpus("1", lambda: TWO) == [TWO[1]]
    assert choose_gpus(" 1,0 ", lambda: TWO) == [TWO[1], TWO[0]]
    with pytest.raises(GpuListError, match="no GPU 2"):
        choose_gpus("0,2", lambda: TWO)
    with pytest.raises(GpuListError, match="no GPU found"):
        choose_gpus("all", lambda: [])
    for bad in ("", "0,0", "first", "-1"):
        with pytest.raises(GpuListError, match="--gpus"):
            choose_gpus(bad, lambda: TWO)


def test_each_worker_is_pinned_to_its_gpu(tmp_path: Path) -> None:
    base = {"KG_DATA_DIR": "/d", "KG_SANDBOX_DOCKER_GPU": "0", "PATH": "/bin"}
    envs = [worker_env(base, gpu, "auto", tmp_path / f"gpu-{gpu.index}") for gpu in TWO]
    for gpu, env in zip(TWO, envs):
        cpus = choose_timing_cpus("auto", gpu.index)
        assert env == {**base, "KG_GPU_INDEX": str(gpu.index), "CUDA_VISIBLE_DEVICES": gpu.uuid,
                       "KG_SANDBOX_DOCKER_GPU": gpu.uuid, "TMPDIR": str(tmp_path / f"gpu-{gpu.index}"),
                       "KG_TIMING_CPUS": "off" if cpus is None else f"{cpus.parent},{cpus.timed}"}
        assert (tmp_path / f"gpu-{gpu.index}").stat().st_mode & 0o777 == 0o700  # a private scratch folder
    assert worker_env(base, TWO[0], "off", None)["KG_TIMING_CPUS"] == "off"
    assert "TMPDIR" not in worker_env(base, TWO[0], "off", None)
    assert node_name(TWO[1]) == "gpu1@%h"


def test_gpus_sharing_timing_cores_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="grader.gpu_workers"):
        warn_shared_cores([{"KG_TIMING_CPUS": "7,6"}, {"KG_TIMING_CPUS": "5,4"}])
        warn_shared_cores([{"KG_TIMING_CPUS": "off"}, {"KG_TIMING_CPUS": "off"}])
        assert not caplog.records
        warn_shared_cores([{"KG_TIMING_CPUS": "1,0"}, {"KG_TIMING_CPUS": "1,0"}])
    assert "timing cores shared between GPUs (1,0, 1,0)" in caplog.text


RECORDER = """
import json, os, signal, sys, time
out, index = sys.argv[1], os.environ["KG_GPU_INDEX"]
with open(os.path.join(out, f"starts-{index}"), "a") as f:
    f.write(f"{os.getpid()}\\n")
if sys.argv[2] == "die":
    sys.exit(3)
if sys.argv[2] == "die-later":
    time.sleep(0.4)
    sys.exit(3)
if sys.argv[2] == "idle-exit":
    time.sleep(0.2)
    sys.exit(0)
keys = ("KG_GPU_INDEX", "CUDA_VISIBLE_DEVICES", "KG_TIMING_CPUS", "TMPDIR")
state = {"env": {k: os.environ.get(k) for k in keys}, "pid": os.getpid(), "pgid": os.getpgid(0)}
def stop(signum, frame):
    state["stopped_by"] = signum
    with open(os.path.join(out, f"gpu-{index}.json"), "w") as f:
        json.dump(state, f)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
with open(os.path.join(out, f"ready-{index}"), "w") as f:
    f.write("ready")
while True:
    time.sleep(0.1)
"""

SUPERVISOR = """
import logging, sys, json
from pathlib import Path
from grader.gpu_workers import Gpu, Supervisor, log_supervisor, worker_env
out, recorder, plan, stable_s, idle = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]), float(sys.argv[4]), sys.argv[5] == "idle"
members = [(Gpu(i, u), [sys.executable, recorder, str(out), how], worker_env({"PATH": "/usr/bin:/bin"}, Gpu(i, u), "auto", out / f"scratch-{i}"))
           for i, u, how in plan]
log_supervisor()
sys.exit(Supervisor(members, max_restarts=2, restart_delay_s=0.05, poll_s=0.05, stable_s=stable_s,
                    idle_exits=idle).run())
"""


def _wait_for(what: str, check: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _supervise(tmp_path: Path, plan: list[tuple[int, str, str]], stable_s: float = 600,
               idle: bool = False) -> subprocess.Popen[str]:
    recorder = tmp_path / "recorder.py"
    recorder.write_text(textwrap.dedent(RECORDER))
    return subprocess.Popen([sys.executable, "-c", SUPERVISOR, str(tmp_path), str(recorder), json.dumps(plan), str(stable_s),
                             "idle" if idle else "-"],
                            cwd=ROOT, stderr=subprocess.PIPE, text=True)


def test_one_process_per_gpu_each_with_its_environment_and_sigterm_reaches_each(tmp_path: Path) -> None:
    proc = _supervise(tmp_path, [(0, TWO[0].uuid, "wait"), (1, TWO[1].uuid, "wait")])
    try:
        _wait_for("both workers", lambda: all((tmp_path / f"ready-{i}").exists() for i in (0, 1)))
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    seen = [json.loads((tmp_path / f"gpu-{i}.json").read_text()) for i in (0, 1)]
    for gpu, state in zip(TWO, seen):
        assert state["stopped_by"] == signal.SIGTERM  # warm shutdown asked of each worker's main process
        assert state["env"]["KG_GPU_INDEX"] == str(gpu.index) and state["env"]["CUDA_VISIBLE_DEVICES"] == gpu.uuid
        assert state["env"]["TMPDIR"] == str(tmp_path / f"scratch-{gpu.index}")
        assert state["pgid"] == state["pid"]  # a process group of its own
    assert seen[0]["pid"] != seen[1]["pid"] and seen[0]["pgid"] != os.getpgid(0)
    assert "every GPU worker has stopped" in stderr


def test_a_worker_that_keeps_dying_is_left_out_and_the_other_goes_on(tmp_path: Path) -> None:
    proc = _supervise(tmp_path, [(0, TWO[0].uuid, "wait"), (1, TWO[1].uuid, "die")])
    try:
        _wait_for("GPU 1's last start", lambda: (tmp_path / "starts-1").exists()
                  and len((tmp_path / "starts-1").read_text().split()) == 3)
        time.sleep(0.5)  # the supervisor's log line, and no fourth start
        assert proc.poll() is None  # GPU 0 still grading: the supervisor stays
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len((tmp_path / "starts-1").read_text().split()) == 3  # the first start and 2 restarts
    assert len((tmp_path / "starts-0").read_text().split()) == 1  # never restarted
    assert f"GPU 1 ({TWO[1].uuid}) is left out: its worker exited 3 times (last exit status 3)" in stderr
    assert json.loads((tmp_path / "gpu-0.json").read_text())["stopped_by"] == signal.SIGTERM
    assert proc.returncode == 0


def test_a_worker_that_was_up_a_while_starts_its_count_afresh(tmp_path: Path) -> None:
    proc = _supervise(tmp_path, [(0, TWO[0].uuid, "die-later")], stable_s=0.2)
    try:
        _wait_for("a fifth start", lambda: (tmp_path / "starts-0").exists()
                  and len((tmp_path / "starts-0").read_text().split()) >= 5)
        assert proc.poll() is None  # more than 1 + 2 starts, never left out
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert "left out" not in stderr and proc.returncode == 0


def test_workers_with_an_idle_exit_that_leave_cleanly_are_not_restarted(tmp_path: Path) -> None:
    proc = _supervise(tmp_path, [(0, TWO[0].uuid, "idle-exit"), (1, TWO[1].uuid, "idle-exit")], idle=True)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "every GPU worker has stopped" in stderr, stderr
    assert [len((tmp_path / f"starts-{i}").read_text().split()) for i in (0, 1)] == [1, 1]  # no restart
    # without the idle exit, a worker exiting 0 is restarted as before
    again = tmp_path / "again"
    again.mkdir()
    proc = _supervise(again, [(0, TWO[0].uuid, "idle-exit")])
    _, stderr = proc.communicate(timeout=30)
    assert len((again / "starts-0").read_text().split()) == 3 and proc.returncode == 1


def test_every_gpu_left_out_ends_the_supervisor_with_an_error(tmp_path: Path) -> None:
    proc = _supervise(tmp_path, [(0, TWO[0].uuid, "die")])
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 1 and "every GPU of this host was left out" in stderr


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What `grader worker --gpus` would exec or supervise, instead of doing it."""
    seen: dict[str, Any] = {}

    def execvpe(file: str, argv: list[str], env: dict[str, str]) -> None:
        seen.update(exec=argv, env=env)
        raise SystemExit(0)

    class Supervisor:
        def __init__(self, members: list[tuple[Gpu, list[str], dict[str, str]]], idle_exits: bool = False,
                     on_event: Any = None) -> None:
            seen["members"] = members
            seen["idle_exits"] = idle_exits
            seen["on_event"] = on_event

        def run(self) -> int:
            return 0

    monkeypatch.setattr(cli.os, "execvpe", execvpe)
    monkeypatch.setattr(cli, "Supervisor", Supervisor)
    return seen


def _invoke(args: list[str], fake: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("KG_FAKE_GPUS", fake)
    monkeypatch.setenv("KG_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("KG_TIMING_CPUS", "auto")
    cli.get_settings.cache_clear()
    try:
        return CliRunner().invoke(cli.app, args)
    finally:
        cli.get_settings.cache_clear()


def test_one_gpu_runs_todays_worker_in_place(captured: dict[str, Any], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    result = _invoke(["worker", "--gpus", "all", "--similarity"], "2, GPU-only", tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    assert "members" not in captured  # no supervisor
    assert captured["exec"] == [sys.executable, "-m", "grader", "worker", "--loglevel", "info", "--similarity"]
    assert captured["env"]["KG_GPU_INDEX"] == "2" and captured["env"]["CUDA_VISIBLE_DEVICES"] == "GPU-only"
    assert "TMPDIR" not in captured["env"] or captured["env"]["TMPDIR"] == os.environ.get("TMPDIR")


def test_several_gpus_are_supervised_each_its_own_node(captured: dict[str, Any], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    result = _invoke(["worker", "--gpus", "0,1", "--concurrency", "2"], SMI_OUTPUT, tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    assert "exec" not in captured
    for (gpu, argv, env), want in zip(captured["members"], TWO):
        assert gpu == want
        assert argv == [sys.executable, "-m", "grader", "worker", "--loglevel", "info", "--concurrency", "2",
                        "--node", f"gpu{want.index}@%h"]
        assert env["KG_GPU_INDEX"] == str(want.index) and env["TMPDIR"] == str(tmp_path / "scratch" / f"gpu-{want.index}")
    # the supervisor's events go to the database's record (tests/service/test_gpu_worker_faults.py)
    assert captured["on_event"].__qualname__ == "event_recorder.<locals>.record"


def test_a_gpu_the_host_lacks_is_refused(captured: dict[str, Any], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    result = _invoke(["worker", "--gpus", "0,3"], SMI_OUTPUT, tmp_path, monkeypatch)
    assert result.exit_code == 2 and "this host has no GPU 3 (it has 0, 1)" in result.output
    assert not captured
    monkeypatch.setenv("KG_TIMING_CPUS", "5,6")
    cli.get_settings.cache_clear()
    result = CliRunner().invoke(cli.app, ["worker", "--gpus", "all"])
    cli.get_settings.cache_clear()
    assert result.exit_code == 2 and "same cores" in result.output and not captured


def test_python_dash_m_grader_is_the_grader_command() -> None:
    """What the supervisor starts for each GPU (`python -m grader worker ...`) is the command itself."""
    shown = subprocess.run([sys.executable, "-m", "grader", "worker", "--help"], cwd=ROOT, capture_output=True,
                           text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    assert "Usage: grader worker" in shown.stdout and "--gpus" in shown.stdout and "--node" in shown.stdout
