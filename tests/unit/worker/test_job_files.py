"""worker/job_files.py, the one way the grading parent reads what a job wrote: a plain file of
one name strictly beneath the job's folder, read whole under a cap (or its head, for a log);
a link anywhere on the path, a folder, FIFO, socket or device, a hard-linked file, a path that
leaves the folder and a file over the cap are refused with the path and the reason named.
Each case runs twice: through openat2 (this kernel has it) and through the O_NOFOLLOW walk
that a kernel without it gets (forced here)."""
from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker import job_files
from worker.job_files import JobFileError, JobFileMissing, is_job_file, read_job_file

SECRET = b"kg-secret-0600-database\n"


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Which way the helper opens files; yields the walks it made (one entry per walk)."""
    if request.param == "walk":
        monkeypatch.setattr(job_files, "OPENAT2_SYSCALLS", {})  # as on a kernel before 5.6
    walks: list[str] = []
    real_walk = job_files._walk

    def counted(root: int, parts: tuple[str, ...]) -> int:
        walks.append("/".join(parts))
        return real_walk(root, parts)

    monkeypatch.setattr(job_files, "_walk", counted)
    yield walks


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A job folder with one good output, beside a 0600 file it must never read through."""
    secret = tmp_path / "kg.db"
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    folder = tmp_path / "job"
    (folder / "out").mkdir(parents=True)
    (folder / "out" / "result.bin").write_bytes(b"\x00\x01\x02\x03")
    return folder


def _refused(folder: Path, rel: str, max_bytes: int = 1 << 20) -> JobFileError:
    with pytest.raises(JobFileError) as refused:
        read_job_file(folder, rel, max_bytes)
    assert SECRET not in str(refused.value).encode()
    return refused.value


def test_a_plain_output_is_read(job: Path, resolver: list[str]) -> None:
    assert read_job_file(job, "out/result.bin", 4) == b"\x00\x01\x02\x03"
    assert resolver == ([] if job_files.OPENAT2_SYSCALLS else ["out/result.bin"])  # openat2 alone where it is
    assert is_job_file(job, "out/result.bin")


def test_the_kernel_here_has_openat2(job: Path) -> None:
    """The first path is really exercised: the syscall answers on this machine."""
    root = os.open(job, os.O_PATH | os.O_DIRECTORY)
    try:
        fd = job_files._openat2(root, "out/result.bin")
        assert fd is not None
        os.close(fd)
    finally:
        os.close(root)


@pytest.mark.parametrize("target", ["kg.db", "/etc/shadow"])
def test_a_link_to_a_file_outside_is_refused(job: Path, resolver: list[str], target: str) -> None:
    (job / "out" / "link.bin").symlink_to(job.parent / target)
    refused = _refused(job, "out/link.bin")
    assert (refused.rel, refused.reason) == ("out/link.bin", "it is a symbolic link; write outputs as plain files "
                                                             "in the job's folder")
    assert str(refused) == f"out/link.bin was not read: {refused.reason}"
    assert not is_job_file(job, "out/link.bin")


def test_a_link_inside_the_folder_is_refused_too(job: Path, resolver: list[str]) -> None:
    (job / "alias.bin").symlink_to("out/result.bin")
    assert _refused(job, "alias.bin").reason.startswith("it is a symbolic link")


def test_a_linked_folder_on_the_way_is_named(job: Path, resolver: list[str]) -> None:
    (job / "up").symlink_to(job.parent)
    refused = _refused(job, "up/kg.db")
    assert refused.rel == "up" and refused.reason.startswith("it is a symbolic link")


def test_a_hard_link_to_an_outside_file_is_refused(job: Path, resolver: list[str]) -> None:
    os.link(job.parent / "kg.db", job / "out" / "hard.bin")
    refused = _refused(job, "out/hard.bin")
    assert refused.reason.startswith("the file has 2 hard links")


def test_a_fifo_is_refused_without_waiting_for_a_writer(job: Path, resolver: list[str]) -> None:
    os.mkfifo(job / "out" / "pipe.bin")
    assert _refused(job, "out/pipe.bin").reason.startswith("it is a FIFO")


def test_a_socket_is_refused(job: Path, resolver: list[str]) -> None:
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(job / "out" / "sock.bin"))
        assert _refused(job, "out/sock.bin").reason.startswith("it is a socket")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root makes device nodes")
def test_a_device_is_refused(job: Path, resolver: list[str]) -> None:
    os.mknod(job / "out" / "null.bin", 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # as /dev/null
    assert _refused(job, "out/null.bin").reason.startswith("it is a character device")


def test_a_folder_is_refused(job: Path, resolver: list[str]) -> None:
    assert _refused(job, "out").reason.startswith("it is a folder")


def test_a_plain_file_where_a_folder_was_expected_is_named(job: Path, resolver: list[str]) -> None:
    refused = _refused(job, "out/result.bin/x")
    assert (refused.rel, refused.reason) == ("out/result.bin", "it is a plain file, where a folder was expected")


@pytest.mark.parametrize("rel", ["../kg.db", "out/../../kg.db", "/etc/shadow", "", "."])
def test_a_path_leaving_the_folder_is_refused_before_any_lookup(job: Path, resolver: list[str], rel: str) -> None:
    refused = _refused(job, rel)
    assert refused.reason == "the path leads outside the job's folder" and resolver == []


def test_a_path_with_a_nul_is_refused(job: Path, resolver: list[str]) -> None:
    """openat2 would stop at the NUL and read `out/result.bin`; the walk would raise ValueError."""
    refused = _refused(job, "out/result.bin\0.txt")
    assert (refused.rel, refused.reason) == ("out/result.bin\\0.txt", "the path holds a NUL character")


def test_a_missing_file_says_so(job: Path, resolver: list[str]) -> None:
    for rel in ("none.bin", "no/such/folder.bin"):
        with pytest.raises(JobFileMissing) as missing:
            read_job_file(job, rel, 10)
        assert str(missing.value) == f"{rel} was not read: there is no such file"
    assert not is_job_file(job, "none.bin")


def test_a_file_over_the_cap_is_refused_or_cut(job: Path, resolver: list[str]) -> None:
    (job / "log.txt").write_bytes(b"x" * 100)
    refused = _refused(job, "log.txt", 99)
    assert refused.reason == "it holds more than 99 bytes, the most read back; write less"
    assert read_job_file(job, "log.txt", 100) == b"x" * 100
    assert read_job_file(job, "log.txt", 10, cut=True) == b"x" * 10
    assert read_job_file(job, "log.txt", 1 << 40) == b"x" * 100  # a cap as large as a job's disk costs nothing
