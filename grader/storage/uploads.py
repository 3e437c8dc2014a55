"""Streaming multipart receiver: the file part streams into the blob store as it arrives.

Starlette's own form parser spools the whole body before a handler sees it; this one
enforces the size cap while bytes arrive and never holds the upload in memory.

A refused upload leaves nothing behind: the file part stays in a temp file until the whole
body is parsed and checked, and a blob moved into place for a request that then fails is
removed again unless a submission refers to it (see `receive_upload`).
"""
from __future__ import annotations

import errno
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

import anyio
from python_multipart.multipart import MultipartParser, parse_options_header
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from grader.control_chars import refusal
from grader.db import session_scope
from grader.models import Submission
from grader.settings import Settings
from grader.storage.blobstore import BlobStore, BlobTooLarge, BlobWriter, StoredBlob

log = logging.getLogger(__name__)


class UploadPlace(Protocol):
    """Where an upload goes: the blob store, the database that says whether a blob is referred
    to, and the settings' size cap (the web app's grader.context.AppContext is one)."""

    settings: Settings
    sessions: sessionmaker[Session]
    blobs: BlobStore

MAX_FIELD_BYTES = 4096
INSUFFICIENT_STORAGE = 507
NOT_STORED = ("Nothing was stored. This is a problem on the grading server, not with your submission: "
              "please try again later.")


def earlier_upload_message(submission_id: int, run_id: int) -> str:
    return (f"This is the same upload as your submission {submission_id} (sent again), so nothing new was "
            f"stored: run {run_id} grades it.")


def maybe_stored_message(window_s: float, keyed: bool = True) -> str:
    """The answer when the commit of an upload's rows failed: the database may have committed
    them before failing, so "nothing was stored" could be false. `keyed`: the client can send an
    Idempotency-Key (the API; a browser form cannot)."""
    head = "The grading database failed while recording your upload, so it may or may not have been stored. "
    ways = (["with the same Idempotency-Key"] if keyed else []) + (
        [f"the same file within {window_s:g} s"] if window_s > 0 else [])
    if not ways:
        return head + "Check your submissions before sending it again."
    return head + (f"Send it again ({' or '.join(ways)}): if it was stored, you get that submission back "
                   "instead of a second one.")


class UploadError(Exception):
    """A refused or failed upload: the HTTP status, the message for the sender, the API's
    error code (None: the status's own) and, where known, when trying again would work."""

    def __init__(self, status_code: int, message: str, code: str | None = None,
                 retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.code = code
        self.retry_after_s = retry_after_s


@dataclass
class ReceivedUpload:
    blob: StoredBlob
    filename: str
    fields: dict[str, str] = field(default_factory=dict)


class _PartCollector:
    """Callbacks for python-multipart's push parser."""

    def __init__(
        self,
        store: BlobStore,
        file_field: str,
        max_bytes: int,
        before_file: Callable[[dict[str, str]], None] | None,
    ) -> None:
        self.store = store
        self.before_file = before_file
        self.file_field = file_field
        self.max_bytes = max_bytes
        self.fields: dict[str, str] = {}
        self.writer: BlobWriter | None = None
        self.file_complete = False
        self.filename: str | None = None
        self._headers: dict[bytes, bytes] = {}
        self._header_field = b""
        self._header_value = b""
        self._name = ""
        self._value = bytearray()
        self._is_file = False

    def callbacks(self) -> dict[str, object]:
        return {
            "on_part_begin": self.on_part_begin,
            "on_header_field": self.on_header_field,
            "on_header_value": self.on_header_value,
            "on_header_end": self.on_header_end,
            "on_headers_finished": self.on_headers_finished,
            "on_part_data": self.on_part_data,
            "on_part_end": self.on_part_end,
        }

    def on_part_begin(self) -> None:
        self._headers = {}
        self._value = bytearray()

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_field += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def on_header_end(self) -> None:
        self._headers[self._header_field.lower()] = self._header_value
        self._header_field = b""
        self._header_value = b""

    def on_headers_finished(self) -> None:
        _, params = parse_options_header(self._headers.get(b"content-disposition", b""))
        self._name = params.get(b"name", b"").decode("utf-8", "replace")
        filename = params.get(b"filename")
        self._is_file = filename is not None
        if self._is_file:
            if self._name != self.file_field:
                raise UploadError(400, f"unexpected file field {self._name!r}; send the zip as {self.file_field!r}")
            if self.writer is not None:
                raise UploadError(400, "send exactly one file per submission")
            if self.before_file is not None:
                self.before_file(self.fields)  # e.g. authenticate from fields sent before the file
            self.filename = filename.decode("utf-8", "replace") if filename else ""
            _refuse_control(f"The file's name (“{self.filename}”)", self.filename)
            self.writer = self.store.writer(self.max_bytes)

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._is_file:
            assert self.writer is not None
            try:
                self.writer.write(data[start:end])
            except BlobTooLarge as exc:
                raise UploadError(413, f"the file is larger than the {exc.limit // (1024 * 1024)} MiB limit") from exc
        else:
            self._value += data[start:end]
            if len(self._value) > MAX_FIELD_BYTES:
                raise UploadError(400, f"form field {self._name!r} is too long")

    def on_part_end(self) -> None:
        if self._is_file:
            self.file_complete = True
        else:
            self.fields[self._name] = self._value.decode("utf-8", "replace")
            _refuse_control(f"The field “{self._name}”", self._name + self.fields[self._name])

    def checked_file(self) -> BlobWriter:
        """The file part, still in its temp file, once the whole body is parsed."""
        if self.writer is None or not self.file_complete:
            raise UploadError(422, f"no file in the upload; attach the zip as the {self.file_field!r} field")
        if self.writer.size == 0:
            raise UploadError(422, "the uploaded file is empty")
        return self.writer

    def discard(self) -> None:
        if self.writer is not None:
            self.writer.discard()


def _refuse_control(where: str, text: str) -> None:
    """UploadError 422 when `text` (a one-line field of the upload form) holds a control
    character (grader.control_chars, which checks every other route's body)."""
    why = refusal(where, text, multi_line=False)
    if why is not None:
        raise UploadError(422, why, "control_character")


@asynccontextmanager
async def receive_upload(
    request: Request,
    ctx: UploadPlace,
    file_field: str = "file",
    before_file: Callable[[dict[str, str]], None] | None = None,
) -> AsyncIterator[ReceivedUpload]:
    """Parse a multipart body as it arrives; its file is in the blob store for the body of the
    `async with`, where the caller commits the rows that refer to it. `before_file` sees the
    fields sent before the file part and may raise UploadError to refuse the upload before
    any byte is stored. If the body raises, the blob is removed again unless a submission
    refers to it. A server that cannot store the bytes answers 507 (disk full) or 500."""
    collector = _PartCollector(ctx.blobs, file_field, ctx.settings.max_upload_bytes, before_file)
    with ExitStack() as held:
        held.callback(collector.discard)  # the temp file, unless it was moved into place
        try:
            await _parse(request, collector, ctx.settings.max_upload_bytes)
        except OSError as exc:
            raise _not_stored(exc) from exc
        writer = collector.checked_file()
        try:
            blob = await run_in_threadpool(_store, held, ctx.blobs, writer)
        except OSError as exc:
            if ctx.blobs.exists(writer.sha256):  # it failed after the move (fsync of the folder)
                await _remove_after_failure(held, ctx, writer.sha256)
            raise _not_stored(exc) from exc
        try:
            yield ReceivedUpload(blob, collector.filename or "submission.zip", collector.fields)
        except BaseException:
            await _remove_after_failure(held, ctx, blob.sha256)
            raise


async def _parse(request: Request, collector: _PartCollector, max_bytes: int) -> None:
    content_type, params = parse_options_header(request.headers.get("content-type", ""))
    if content_type != b"multipart/form-data" or b"boundary" not in params:
        raise UploadError(415, "send the submission as multipart/form-data with a 'file' field")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes + 64 * 1024:
        raise UploadError(413, f"the upload is larger than the {max_bytes // (1024 * 1024)} MiB limit")
    parser = MultipartParser(params[b"boundary"], collector.callbacks())  # type: ignore[arg-type]
    try:
        async for chunk in request.stream():
            parser.write(chunk)
        parser.finalize()
    except (UploadError, OSError, SQLAlchemyError):
        # The server's faults, not a malformed body: the bytes could not be written, or a
        # field's check (the form's token) met the database down.
        raise
    except Exception as exc:  # malformed multipart body
        raise UploadError(400, f"malformed multipart upload: {exc}") from exc


def _store(held: ExitStack, store: BlobStore, writer: BlobWriter) -> StoredBlob:
    """Move the checked file into place under a shared lock on its digest, which `held` keeps
    until the request's rows are committed."""
    held.enter_context(store.lock(writer.sha256))
    return writer.commit()


async def _remove_after_failure(held: ExitStack, ctx: UploadPlace, sha256: str) -> None:
    held.close()  # the shared lock goes before the exclusive one is taken
    with anyio.CancelScope(shield=True):  # a cancelled request still cleans up
        await run_in_threadpool(remove_unless_recorded, ctx, sha256)


def remove_unless_recorded(ctx: UploadPlace, sha256: str) -> None:
    """Remove the blob of a refused or failed upload unless a submission refers to it: the
    same bytes may have been uploaded before. An upload of the same bytes still between
    storing and committing holds the shared lock, so this waits for it and then sees its row;
    one that starts later stores the bytes again. If the database cannot say, the blob stays."""
    with ctx.blobs.lock(sha256, exclusive=True):
        try:
            with session_scope(ctx.sessions) as session:
                recorded = session.scalar(select(Submission.id).where(Submission.sha256 == sha256).limit(1))
        except SQLAlchemyError:
            log.warning("kept blob %s of a failed upload: the database could not say whether it is used",
                        sha256, exc_info=True)
            return
        if recorded is None:
            ctx.blobs.remove(sha256)


def _not_stored(exc: OSError) -> UploadError:
    """The server's own failure to store an upload: never a 4xx, which would blame the student."""
    log.error("could not store an upload: %s", exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return UploadError(INSUFFICIENT_STORAGE, f"The grading server is out of storage space. {NOT_STORED}")
    return UploadError(500, f"The grading server could not store the upload. {NOT_STORED}")
