"""The sandbox's canary (worker/sandbox/canary.py), as root: a sandbox that holds proves itself,
and one that lacks namespaces, the syscall filter or the view says what it lacks, one item each."""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.sandbox import SandboxPolicy, cgroups, namespaces
from worker.sandbox.canary import prove_sandbox
from worker.sandbox.syscall_filter import RET_ALLOW, RET_K, _Program

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces need a root parent")
NO_CGROUP = "no control group caps (memory and processes are only polled)"


@pytest.fixture
def secret() -> Iterator[Path]:
    """A world-readable file in a searchable host folder: only the view can keep it out."""
    folder = Path(tempfile.mkdtemp(prefix="kg-canary-secret-"))
    folder.chmod(0o755)
    path = folder / "secret_key"
    path.write_text("KGCANARY")
    path.chmod(0o644)
    yield path
    shutil.rmtree(folder, ignore_errors=True)


def test_a_sandbox_that_holds_proves_itself(secret: Path) -> None:
    expected = [] if cgroups.available() else [NO_CGROUP]
    assert prove_sandbox(SandboxPolicy(), [secret]) == expected


def test_without_namespaces_the_canary_refuses_or_names_what_is_missing(secret: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(namespaces, "namespaces_unavailable", lambda: "no namespaces on this host")
    (refusal,) = prove_sandbox(SandboxPolicy(), [secret])
    assert "no namespaces on this host" in refusal and "refusing to run submitted code" in refusal
    # Reduced isolation asked for (and no uid drop, so the worker's own interpreter runs): the
    # pre-exec hook still leaves the network and installs the filter; the rest is named.
    missing = prove_sandbox(SandboxPolicy(user=None, require_namespaces=False), [secret])
    assert missing == [f"no {ns} namespace of its own" for ns in ("pid", "mnt", "uts", "ipc", "cgroup")] + [
        NO_CGROUP, f"the job can see {secret}"]


def test_a_sandbox_without_its_syscall_filter_is_named(secret: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    allow_all = _Program()
    allow_all.op(RET_K, RET_ALLOW)
    monkeypatch.setattr(namespaces, "filter_program", lambda notify: allow_all.assemble())
    missing = prove_sandbox(SandboxPolicy(), [secret])
    assert "no syscall filter (seccomp)" in missing, missing


def test_the_canary_runs_in_a_jobs_folder_given_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make dev`'s data dir is `var`, relative: a job folder named relative to the worker's own
    folder must still be the job's folder in its fresh root."""
    (tmp_path / "var" / "jobs").mkdir(parents=True)
    tmp_path.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    expected = [] if cgroups.available() else [NO_CGROUP]
    assert prove_sandbox(SandboxPolicy(), [], Path("var/jobs")) == expected
