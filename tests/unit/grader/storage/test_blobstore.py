"""grader.storage.blobstore on a real folder: naming, dedup, size caps, all-or-nothing writes (a full disk
included), removal and the per-digest lock."""
from __future__ import annotations

import errno
import hashlib
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grader.storage.blobstore import BlobStore, BlobTooLarge, StoredBlob


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "blobs")


def _blobs(store: BlobStore) -> list[Path]:
    """Every stored blob (files outside tmp/)."""
    if not store.root.exists():
        return []
    return sorted(p for p in store.root.rglob("*") if p.is_file() and store.tmp_dir not in p.parents)


def _temps(store: BlobStore) -> list[Path]:
    return sorted(store.tmp_dir.iterdir()) if store.tmp_dir.exists() else []


def test_named_by_sha256_in_a_sharded_path(store: BlobStore) -> None:
    data = b"__global__ void softmax() {}\n"
    digest = hashlib.sha256(data).hexdigest()
    blob = store.put_bytes(data)
    assert blob == StoredBlob(digest, len(data))
    expected = store.root / digest[:2] / digest[2:4] / digest
    assert store.path(digest) == expected
    assert expected.read_bytes() == data
    assert store.exists(digest)
    assert _blobs(store) == [expected]
    assert _temps(store) == []


def test_chunked_and_whole_writes_agree(store: BlobStore) -> None:
    data = os.urandom(3 * 65536 + 17)
    chunks = [data[i:i + 65536] for i in range(0, len(data), 65536)]
    streamed = store.put_chunks(iter(chunks))
    assert streamed == StoredBlob(hashlib.sha256(data).hexdigest(), len(data))
    assert store.put_bytes(data) == streamed
    assert store.path(streamed.sha256).read_bytes() == data


def test_empty_blob(store: BlobStore) -> None:
    blob = store.put_bytes(b"")
    assert blob == StoredBlob(hashlib.sha256(b"").hexdigest(), 0)
    assert store.path(blob.sha256).read_bytes() == b""


def test_identical_content_is_stored_once(store: BlobStore) -> None:
    first = store.put_bytes(b"same bytes")
    second = store.put_chunks([b"same ", b"bytes"])
    assert first == second
    other = store.put_bytes(b"other bytes")
    assert other.sha256 != first.sha256
    assert _blobs(store) == sorted([store.path(first.sha256), store.path(other.sha256)])
    assert _temps(store) == []


def test_writer_context_manager(store: BlobStore) -> None:
    with store.writer() as writer:
        writer.write(b"abc")
        writer.write(b"def")
        blob = writer.commit()
    assert blob == StoredBlob(hashlib.sha256(b"abcdef").hexdigest(), 6)
    assert store.path(blob.sha256).read_bytes() == b"abcdef"
    assert _temps(store) == []


def test_writer_left_without_commit_stores_nothing(store: BlobStore) -> None:
    with store.writer() as writer:
        writer.write(b"never committed")
        assert len(_temps(store)) == 1  # it really streams to disk
    assert _temps(store) == []
    assert _blobs(store) == []


def test_size_cap_exact_is_allowed(store: BlobStore) -> None:
    assert store.put_chunks([b"12345", b"678"], max_bytes=8).size == 8


def test_size_cap_raises_and_leaves_nothing(store: BlobStore) -> None:
    with pytest.raises(BlobTooLarge) as caught:
        store.put_chunks([b"x" * 6, b"y" * 6], max_bytes=10)
    assert caught.value.limit == 10
    assert "10 bytes" in str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert _temps(store) == []
    assert _blobs(store) == []


def test_size_cap_on_the_first_chunk(store: BlobStore) -> None:
    with pytest.raises(BlobTooLarge):
        store.put_chunks([b"z" * 11], max_bytes=10)
    assert _temps(store) == [] and _blobs(store) == []


def test_exception_mid_stream_leaves_nothing(store: BlobStore) -> None:
    def upload() -> Iterator[bytes]:
        yield b"first part of the upload"
        yield b"second part"
        raise ConnectionResetError("client went away")

    with pytest.raises(ConnectionResetError):
        store.put_chunks(upload())
    assert _temps(store) == []
    assert _blobs(store) == []


def test_failed_upload_does_not_disturb_an_existing_blob(store: BlobStore) -> None:
    kept = store.put_bytes(b"kept")
    with pytest.raises(BlobTooLarge):
        store.put_chunks([b"kept", b"and more"], max_bytes=5)
    assert _blobs(store) == [store.path(kept.sha256)]
    assert store.path(kept.sha256).read_bytes() == b"kept"


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Temp files are created as usual, but their bytes go to /dev/full: ENOSPC on the first
    write that reaches the disk."""
    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args: Any, **kwargs: Any) -> tuple[int, str]:
        fd, name = real_mkstemp(*args, **kwargs)
        full = os.open("/dev/full", os.O_WRONLY)
        os.dup2(full, fd)
        os.close(full)
        return fd, name

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


@pytest.mark.usefixtures("full_disk")
def test_disk_full_half_way_leaves_no_temp_file(store: BlobStore) -> None:
    with pytest.raises(OSError) as caught:
        store.put_chunks([b"buffered, not yet written", os.urandom(1 << 20)])
    assert caught.value.errno == errno.ENOSPC
    assert _temps(store) == [] and _blobs(store) == []


@pytest.mark.usefixtures("full_disk")
def test_disk_full_at_commit_leaves_no_temp_file(store: BlobStore) -> None:
    """The bytes are still buffered when commit flushes them; closing the file to discard it
    flushes (and fails) again, which must not keep the temp file or hide the first error."""
    with pytest.raises(OSError) as caught:
        store.put_bytes(b"small enough to stay in the buffer")
    assert caught.value.errno == errno.ENOSPC
    assert _temps(store) == [] and _blobs(store) == []


def test_removing_a_blob(store: BlobStore) -> None:
    blob = store.put_bytes(b"refused upload")
    store.remove(blob.sha256)
    store.remove(blob.sha256)  # already gone: no error
    assert not store.exists(blob.sha256) and _temps(store) == []


def test_exclusive_lock_waits_for_the_shared_holders(store: BlobStore) -> None:
    digest = hashlib.sha256(b"locked").hexdigest()
    taken = threading.Event()

    def take_exclusive() -> None:
        with store.lock(digest, exclusive=True):
            taken.set()

    with store.lock(digest), store.lock(digest):  # shared holders do not exclude each other
        waiter = threading.Thread(target=take_exclusive)
        waiter.start()
        assert not taken.wait(0.3), "the exclusive lock was taken while shared holders held it"
    assert taken.wait(10)
    waiter.join()
    assert _blobs(store) == [], "the lock needs no file of its own"


@pytest.mark.parametrize(
    "digest",
    [
        "",
        "abc",
        "A" * 64,  # upper case is not what hexdigest() gives
        "g" * 64,
        "a" * 63,
        "a" * 65,
        "a" * 64 + "\n",
        "../" + "a" * 61,
        "aa/bb/" + "a" * 58,
        " " + "a" * 63,
    ],
)
def test_invalid_digest_rejected_by_path(store: BlobStore, digest: str) -> None:
    with pytest.raises(ValueError, match="not a sha256 digest"):
        store.path(digest)
    with pytest.raises(ValueError):
        store.exists(digest)


def test_exists_is_false_for_an_unknown_digest(store: BlobStore) -> None:
    assert not store.exists(hashlib.sha256(b"never stored").hexdigest())
