"""The data dir is owner-only by explicit modes, whatever the process umask (grader/datadir.py):
each writer of the service is run here under the permissive umask 022 that a library caller or
an in-process test has, and nothing it makes may carry group or other permission bits."""
from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from grader.datadir import private_dir, private_file, tighten, write_private
from grader.db import make_engine
from grader.models import utcnow
from grader.settings import Settings
from grader.similarity.store import StoredReport, report_path, save_report
from grader.storage.blobstore import BlobStore
from worker.build import KernelTarget, Toolchain, build_kernels

COPYING_NVCC = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "release 0.0, V0.0"; exit 0; fi
out=""; prev=""; src=""
for arg in "$@"; do
  if [ "$prev" = "-o" ]; then out="$arg"; fi
  prev="$arg"; src="$arg"
done
echo "compiling $src"
cp "$src" "$out"
"""


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def open_to_others(root: Path) -> list[str]:
    """Every folder and file at or under `root` with a group or other permission bit."""
    return [f"{p} {stat.filemode(p.lstat().st_mode)}" for p in (root, *root.rglob("*"))
            if not p.is_symlink() and p.lstat().st_mode & 0o077]


def test_folders_and_files_are_made_owner_only(tmp_path: Path, permissive_umask: None) -> None:
    data = private_dir(tmp_path / "var" / "reports" / "fingerprints")
    assert stat.S_IMODE((tmp_path / "var").stat().st_mode) == 0o700
    secret = write_private(data / "passwords.csv", "login,password\n")
    db = private_file(tmp_path / "var" / "kernelgrade.db")
    assert (stat.S_IMODE(secret.stat().st_mode), stat.S_IMODE(db.stat().st_mode)) == (0o600, 0o600)
    assert open_to_others(tmp_path / "var") == []
    loose = tmp_path / "loose.csv"
    loose.write_text("old")
    loose.chmod(0o644)
    assert stat.S_IMODE(write_private(loose, "new").stat().st_mode) == 0o600 and loose.read_text() == "new"


def test_blobs_build_cache_reports_and_sqlite_are_owner_only(tmp_path: Path, permissive_umask: None) -> None:
    settings = Settings.from_variables({"KG_DATA_DIR": str(tmp_path / "var")})
    blob = BlobStore(settings.blob_dir).put_bytes(b"PK\x05\x06" + bytes(18))
    assert BlobStore(settings.blob_dir).exists(blob.sha256)

    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text(COPYING_NVCC)
    nvcc.chmod(0o755)
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "k.cu").write_text("// kernel\n")
    (result,) = build_kernels(tree, [KernelTarget("k", "src/k.cu", "k.so")], Toolchain(str(nvcc), ()),
                              settings.build_cache_dir)
    assert result.ok, result.log
    assert sorted(p.suffix for p in settings.build_cache_dir.iterdir()) == [".log", ".so"]

    save_report(StoredReport("hw4", utcnow(), {}, {}, [], "our kit"), {}, report_path(settings.data_dir, "hw4"))

    engine = make_engine(settings)  # the embedded database, in WAL mode: its -wal and -shm appear
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
        conn.execute(text("INSERT INTO t VALUES (1)"))
        names = {p.name for p in settings.data_dir.iterdir()}
        assert {"kernelgrade.db", "kernelgrade.db-wal", "kernelgrade.db-shm"} <= names, names
        assert open_to_others(settings.data_dir) == []
    engine.dispose()
    assert open_to_others(settings.data_dir) == []


def test_tighten_closes_what_an_older_version_left_open(tmp_path: Path) -> None:
    """An older deployment's data dir (the issue's: database 0644, blob folders 0755) is made
    owner-only by `grader migrate`; links are not followed, and what the running jobs hold is
    left to them."""
    data = tmp_path / "var"
    (data / "blobs" / "ab" / "cd").mkdir(parents=True)
    (data / "blobs" / "ab" / "cd" / ("ab" * 32)).write_bytes(b"zip")
    (data / "kernelgrade.db").write_bytes(b"db")
    (data / "jobs" / "run-1-attempt-1").mkdir(parents=True)
    (data / "jobs" / "run-1-attempt-1" / "kernel.cu").write_text("// the sandbox's")
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("not ours to change")
    (data / "link").symlink_to(outside)
    for path in (data, *data.rglob("*")):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    outside.chmod(0o644)
    changed = tighten(data, within_only=(data / "jobs",))
    assert data / "kernelgrade.db" in changed and data / "blobs" / "ab" in changed
    assert stat.S_IMODE((data / "jobs").stat().st_mode) == 0o700
    assert stat.S_IMODE((data / "jobs" / "run-1-attempt-1" / "kernel.cu").stat().st_mode) == 0o644
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644, "a link was followed"
    still_open = [p for p in open_to_others(data) if "/jobs/run-1-attempt-1" not in p]
    assert still_open == []
    assert tighten(data, within_only=(data / "jobs",)) == []
