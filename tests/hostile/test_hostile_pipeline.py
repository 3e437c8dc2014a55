"""Every case of the hostile corpus through the real pipeline (worker.pipeline.grade_submission:
unpack, stage, nvcc build with the production settings' limits and flags; no GPU stage).

Each case must end in its expected state and error class with a message a student can act
on, and nothing may escape: no file written or changed outside the job folder (the fake
server around it holds a blob store, another student's job and a secret key), no server path
or secret in what the student is shown, and no secret in the built libraries. After the whole
corpus the same process still grades the reference kit: the worker is healthy.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hostile_corpus import CASES, RUBRIC, Expect, HostileCase, Materials, load_kit
from hostile_report import Row, record

from grader.runs.engine_config import pipeline_config
from grader.settings import Settings
from worker.pipeline import Outcome, PipelineConfig, grade_submission
from worker.sandbox.view import PROJECT_ROOT
from worker.states import ErrorClass

STRAY_NAMES = ("pwned", "escaped.txt", "escaped.cu", "escaped", "evil.cu")
HOST_ACCOUNT = "root:x:0:0"  # the first line of the host's /etc/passwd; the sandbox's names its user alone


@dataclass(frozen=True)
class Server:
    """A fake server data folder around the job folders, with a canary in every secret."""

    root: Path
    canary: str
    materials: Materials
    config: PipelineConfig
    fds_at_start: int
    children_at_start: frozenset[int]  # e.g. a browser test's Chromium, alive for the whole session

    @property
    def jobs(self) -> Path:
        return self.root / "data" / "jobs"

    def snapshot(self, exclude: tuple[Path, ...]) -> dict[str, tuple[int, int, int]]:
        """(size, mode, mtime_ns) of every path under root except those under `exclude`."""
        seen = {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            here = Path(dirpath)
            dirnames[:] = [d for d in dirnames if here / d not in exclude]
            for name in dirnames + filenames:
                st = (here / name).lstat()
                seen[str((here / name).relative_to(self.root))] = (st.st_size, st.st_mode, st.st_mtime_ns)
        return seen


def _private(path: Path, data: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    path.write_text(data)
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    root = Path(tempfile.mkdtemp(prefix="kg-hostile-"))
    canary = f"KGCANARY-{uuid.uuid4().hex}"
    data = root / "data"
    secret = _private(data / "secret_key", canary)
    blob = _private(data / "blobs" / "ab" / "cd" / ("abcd" + "0" * 60), f"another student's upload {canary}")
    _private(data / "jobs" / "run-999-attempt-1" / "upload" / "src" / "combine.cu", f"// {canary}\n")
    (root / "uploads").mkdir()
    (data / "build-cache").mkdir()
    settings = Settings(_env_file=None, data_dir=data)  # type: ignore[call-arg]
    marker = uuid.uuid4().hex[:12]
    host_file = _world_readable(Path("/var/lib") / f"kg-hostile-{marker}" / "notes.txt", f"host notes {canary}")
    service_env = _world_readable(PROJECT_ROOT / f".env-kg-hostile-{marker}", f"KG_DATABASE_URL={canary}\n")
    materials = Materials(load_kit(), secret, blob, root.parent / f"kg-hostile-target-{marker}", host_file, service_env)
    try:
        yield Server(root, canary, materials, pipeline_config(settings, RUBRIC), _open_fds(), frozenset(_children()))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(host_file.parent, ignore_errors=True)
        service_env.unlink(missing_ok=True)


def _world_readable(path: Path, data: str) -> Path:
    """A file any user may read (0644 in a 0755 folder): only the sandbox's view keeps it out."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data)
    path.chmod(0o644)
    return path


@pytest.fixture(autouse=True)
def secret_in_environment(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's environment holds a secret too (as KG_SECRET_KEY would)."""
    monkeypatch.setenv("KG_HOSTILE_CANARY_SECRET", server.canary)


def _shown_to_student(outcome: Outcome) -> str:
    """Everything of the outcome that the run page and the API show."""
    parts = [outcome.message, json.dumps(outcome.toolchain, default=str)]
    parts += [stage.log for stage in outcome.stages.values()]
    parts += [p.message for p in outcome.problems]
    return "\n".join(parts)


def _files_holding(folder: Path, needle: bytes) -> list[str]:
    found = []
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
            found.append(str(path.relative_to(folder)))
    return found


def escapes_of(server: Server, outcome: Outcome, job: Path, before: dict[str, tuple[int, int, int]]) -> list[str]:
    found = []
    after = server.snapshot(exclude=(job, server.config.build_cache_dir, server.root / "uploads"))
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if changed:
        found.append(f"wrote outside the job folder: {changed[:5]}")
    if server.materials.absolute_target.exists():
        found.append(f"created {server.materials.absolute_target}")
    strays = [str(d / n) for d in (Path.cwd(), Path(tempfile.gettempdir()), server.root) for n in STRAY_NAMES
              if (d / n).exists()]
    if strays:
        found.append(f"created {strays}")
    shown = _shown_to_student(outcome)
    if server.canary in shown:
        found.append("a server secret is in what the student is shown")
    if HOST_ACCOUNT in shown:
        found.append("the host's /etc/passwd is in what the student is shown")
    # Compiler diagnostics name the job's files by path; anything else must not show server paths.
    if outcome.error_class is not ErrorClass.build_error and str(server.root) in outcome.message:
        found.append("a server path is in the message")
    held = _files_holding(job, server.canary.encode())
    if held:
        found.append(f"a server secret was built into {held}")
    return found


def got_of(outcome: Outcome) -> str:
    return Expect(outcome.state.value, outcome.error_class.value if outcome.error_class else None).describe()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_hostile_submission(case: HostileCase, server: Server) -> None:
    archive = server.root / "uploads" / f"{case.id}.zip"
    archive.write_bytes(case.build(server.materials))
    job = server.jobs / f"run-{case.id}"
    job.mkdir()  # as RunExecutor does
    before = server.snapshot(exclude=(job, server.config.build_cache_dir, server.root / "uploads"))
    started = time.monotonic()
    try:
        outcome = grade_submission(archive, RUBRIC, job, server.config)
        escapes = escapes_of(server, outcome, job, before)
    finally:
        archive.unlink()
    got = got_of(outcome)
    record(Row("pipeline", case.id, case.threat, case.expect.describe(), got, tuple(escapes)))
    shutil.rmtree(job, ignore_errors=True)
    assert not escapes, (case.id, escapes)
    assert got == case.expect.describe(), (case.id, outcome.message, outcome.stages)
    if case.expect.phrases:
        assert any(p in outcome.message for p in case.expect.phrases), (case.id, outcome.message)
    assert "Traceback" not in outcome.message
    assert time.monotonic() - started < 120, "a hostile upload must not tie the worker up"


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _children() -> list[int]:
    me = str(os.getpid())
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[1] == me:
                        found.append(int(name))
            except OSError:
                continue
    return found


def test_worker_is_healthy_after_the_corpus(server: Server) -> None:
    """Runs after the corpus (file order): no leaked descriptors or processes, and the reference
    kit still unpacks, stages and builds in this process."""
    archive = server.root / "uploads" / "kit.zip"
    archive.write_bytes(server.materials.kit_zip())
    outcome = grade_submission(archive, RUBRIC, server.jobs / "run-kit", server.config)
    assert outcome.state.value == "built", (outcome.message, outcome.stages)
    assert _open_fds() <= server.fds_at_start + 2, "file descriptors leaked while grading the corpus"
    assert [pid for pid in _children() if pid not in server.children_at_start] == []
