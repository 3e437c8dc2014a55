"""End to end with a real Celery worker process, Redis, PostgreSQL and nvcc."""
from __future__ import annotations

import io
import re
import stat
import time
import uuid
import zipfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.celery_app import make_celery
from grader.runs.lifecycle import Disposition, RunExecutor
from grader.runs.reconcile import reconcile
from grader.settings import Settings
from grader.storage.blobstore import BlobStore
from tests.service.conftest import WorkerProcess, auth, make_zip, new_student, run_row, submit, wait_for_run


def _zip_bytes(entries: list[tuple[zipfile.ZipInfo | str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for info, data in entries:
            zf.writestr(info, data)
    return buf.getvalue()


def _symlink_entry(name: str, target: str) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info, target.encode()


def _unique(tree: Path, tmp_path: Path, name: str, edits: dict[str, str] | None = None) -> Path:
    """A kit zip whose kernel sources differ from every earlier one (no build-cache hits)."""
    tag = f"\n// {uuid.uuid4().hex}\n"
    changed = {rel: (tree / rel).read_text() + tag for rel in ("src/combine.cu", "src/softmax_kernel.cu",
                                                             "src/layernorm_kernel.cu")}
    changed.update(edits or {})
    return make_zip(tree, tmp_path / name, changed)


@pytest.fixture
def student(sessions: sessionmaker[Session]) -> str:
    """A student of this test alone: with fair share, a shared student's run still in flight
    elsewhere would hold this test's upload back."""
    return new_student(sessions, "grading")


def test_reference_kit_builds_and_logs_are_readable(
    client: TestClient, student: str, worker: WorkerProcess, kit_tree: Path, tmp_path: Path
) -> None:
    planted = {  # a submitted test and a prebuilt library: both must be ignored
        "kernel_tests/test_softmax_fw.py": "print('speedup: 1000x')\n",
        "minitorch/cuda_kernels/softmax_kernel.so": "not a library",
    }
    created = submit(client, student, make_zip(kit_tree, tmp_path / "kit.zip", planted))
    run = wait_for_run(client, created["run_id"], student)
    assert run["state"] == "built", (run, worker.log())
    assert run["error_class"] is None
    assert set(run["stages"]) == {"unpack", "stage", "build"}
    assert all(stage["status"] == "ok" for stage in run["stages"].values())
    assert "assignment folder: llmsys_hw4" in run["stages"]["unpack"]["log"]
    assert "src/softmax_kernel.cu" in run["stages"]["stage"]["log"]
    ignored = run["stages"]["stage"]["log"].split("ignored:")[1]
    assert "kernel_tests/test_softmax_fw.py" in ignored
    assert "minitorch/cuda_kernels/softmax_kernel.so" in ignored
    assert "nvcc" in run["stages"]["build"]["log"]
    assert run["toolchain"]["nvcc"] and "release" in run["toolchain"]["nvcc"].lower()
    assert [r["problem_id"] for r in run["results"]] == ["1.1", "1.2", "2.1", "2.2", "3"]
    assert all(r["status"] == "not_run" for r in run["results"])


def test_a_compile_error_leaves_out_only_the_problems_needing_that_kernel(
    client: TestClient, student: str, worker: WorkerProcess, kit_tree: Path, tmp_path: Path
) -> None:
    """softmax_kernel.cu does not compile: 1.1, 1.2 and 3 (which need it) say so; the run still
    ends `built` (this worker has no GPU stage), the other problems waiting only for a GPU."""
    source = (kit_tree / "src/softmax_kernel.cu").read_text()
    broken = source.replace("extern \"C\"", "extern \"C\" this_is_not_cuda;", 1)
    assert broken != source
    archive = make_zip(kit_tree, tmp_path / "broken.zip", {"src/softmax_kernel.cu": broken})
    run = wait_for_run(client, submit(client, student, archive)["run_id"], student)
    assert run["state"] == "built" and run["error_class"] is None, run
    assert run["message"].startswith("Problems 1.1, 1.2 and 3 not graded: src/softmax_kernel.cu did not compile")
    results = {r["problem_id"]: r for r in run["results"]}
    for pid in ("1.1", "1.2", "3"):
        assert results[pid]["message"].startswith("not graded: src/softmax_kernel.cu did not compile: "
                                                  "src/softmax_kernel.cu("), results[pid]
    assert [results[pid]["message"] for pid in ("2.1", "2.2")] == ["not graded: no GPU stage on this worker"] * 2
    log = run["stages"]["build"]["log"]
    assert run["stages"]["build"]["status"] == "failed"
    assert "this_is_not_cuda" in log and "error" in log.lower()
    assert re.search(r"== combine \((ok|cached)", log) and re.search(r"== layernorm_kernel \((ok|cached)", log)


def test_a_combine_that_does_not_compile_is_a_build_error(
    client: TestClient, student: str, worker: WorkerProcess, kit_tree: Path, tmp_path: Path
) -> None:
    source = (kit_tree / "src/combine.cu").read_text()
    archive = make_zip(kit_tree, tmp_path / "broken.zip", {"src/combine.cu": source + "\nint oops = not_cuda;\n"})
    run = wait_for_run(client, submit(client, student, archive)["run_id"], student)
    assert run["state"] == "failed" and run["error_class"] == "build_error", run
    assert run["message"].startswith("combine did not compile: src/combine.cu(")
    assert all(r["message"].startswith("not graded: src/combine.cu did not compile: ") for r in run["results"])
    assert "not_cuda" in run["stages"]["build"]["log"]


def test_hostile_archives_end_as_bad_archive(
    client: TestClient, student: str, worker: WorkerProcess, settings: Settings, tmp_path: Path
) -> None:
    cases = {
        "zip slip": (_zip_bytes([("../../escaped-by-slip.txt", b"gotcha")]), "leaves its folder"),
        "symlink": (_zip_bytes([_symlink_entry("llmsys_hw4/src/combine.cu", "/etc/passwd")]), "symbolic link"),
        "zip bomb": (_zip_bytes([("llmsys_hw4/src/bomb.cu", b"\0" * (40 * 1024 * 1024))]), "zip bomb"),
        # Whole by its list of files (the doors refuse a zip cut short), but an entry's bytes are broken
        "damaged": (_damaged_entry_zip(), "the zip is damaged or incomplete: upload it again"),
    }
    runs = {name: submit_bytes(client, student, data, tmp_path / f"{i}.zip")
            for i, (name, (data, _)) in enumerate(cases.items())}
    for name, run_id in runs.items():
        run = wait_for_run(client, run_id, student)
        assert run["state"] == "failed" and run["error_class"] == "bad_archive", (name, run)
        assert cases[name][1] in run["message"], (name, run["message"])
    # nothing escaped the job folder
    assert not list(settings.data_dir.parent.rglob("escaped-by-slip.txt"))


def _damaged_entry_zip() -> bytes:
    """A zip whose one entry's compressed bytes were overwritten: its CRC cannot match."""
    data = bytearray(_zip_bytes([("llmsys_hw4/src/combine.cu", b"int x;\n" * 200)]))
    start = 30 + len("llmsys_hw4/src/combine.cu")  # the first byte of the compressed stream
    data[start:start + 8] = b"\xff" * 8
    return bytes(data)


def submit_bytes(client: TestClient, token: str, data: bytes, path: Path) -> int:
    path.write_bytes(data)
    return submit(client, token, path)["run_id"]  # type: ignore[no-any-return]


def test_broker_down_upload_is_graded_after_reconcile(
    client: TestClient, student: str, worker: WorkerProcess, settings: Settings,
    sessions: sessionmaker[Session], kit_tree: Path, tmp_path: Path,
) -> None:
    offline_settings = settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"})
    archive = make_zip(kit_tree, tmp_path / "offline.zip")
    with TestClient(create_app(offline_settings)) as offline, archive.open("rb") as fh:
        created = offline.post("/api/v1/submissions", headers=auth(student), files={"file": ("o.zip", fh)})
    assert created.status_code == 201 and created.json()["queued"] is False
    run_id = created.json()["run_id"]
    time.sleep(2)
    assert run_row(sessions, run_id).state.value == "queued"  # nobody heard of it yet
    report = reconcile(settings, sessions, make_celery(settings))
    assert run_id in report.resent
    run = wait_for_run(client, run_id, student)
    assert run["state"] == "built", run


def test_worker_killed_mid_build_is_graded_once_after_restart(
    settings: Settings, settings_env: dict[str, str], sessions: sessionmaker[Session], student: str,
    kit_tree: Path, tmp_path: Path,
) -> None:
    queue = f"{settings.task_queue}-kill"
    own_settings = settings.model_copy(update={"task_queue": queue})
    env = {**settings_env, "KG_TASK_QUEUE": queue}
    first = WorkerProcess(env, tmp_path / "first.log")
    first.start()
    with TestClient(create_app(own_settings)) as client:
        created = submit(client, student, _unique(kit_tree, tmp_path, "kill.zip"))
        run_id = created["run_id"]
        wait_for_run(client, run_id, student, timeout=120, until=lambda r: r["state"] == "building")
        time.sleep(1.5)  # nvcc is running now
        first.kill()
        assert run_row(sessions, run_id).state.value == "building"  # claimed by a dead worker
        second = WorkerProcess(env, tmp_path / "second.log")
        second.start()
        try:
            time.sleep(settings.heartbeat_timeout_s + 1)  # the dead worker's heartbeat goes stale
            report = reconcile(own_settings, sessions, make_celery(own_settings))
            assert run_id in report.resent
            run = wait_for_run(client, run_id, student)
        finally:
            second.stop()
    assert run["state"] == "built", (run, second.log())
    assert run["attempts"] == 2
    assert len(run["results"]) == 5  # one result set, not two
    # A late duplicate of the task (e.g. the broker redelivering) must not grade it again.
    executor = RunExecutor(own_settings, sessions, BlobStore(own_settings.blob_dir))
    assert executor.execute(run_id) is Disposition.skipped
    assert run_row(sessions, run_id).attempts == 2
