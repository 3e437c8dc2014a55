"""Streaming multipart receiver: the file part goes straight into the blob store.

Starlette's own form parser spools the whole body before a handler sees it; this one
enforces the size cap while bytes arrive and never holds the upload in memory.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from grader.blobstore import BlobStore, BlobTooLarge, BlobWriter, StoredBlob

MAX_FIELD_BYTES = 4096


class UploadError(Exception):
    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


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
        self.blob: StoredBlob | None = None
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
            if self.writer is not None or self.blob is not None:
                raise UploadError(400, "send exactly one file per submission")
            if self.before_file is not None:
                self.before_file(self.fields)  # e.g. authenticate from fields sent before the file
            self.filename = filename.decode("utf-8", "replace") if filename else ""
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
        if self._is_file and self.writer is not None:
            self.blob = self.writer.commit()
            self.writer = None
        elif not self._is_file:
            self.fields[self._name] = self._value.decode("utf-8", "replace")

    def discard(self) -> None:
        if self.writer is not None:
            self.writer.discard()


async def receive_upload(
    request: Request,
    store: BlobStore,
    max_bytes: int,
    file_field: str = "file",
    before_file: Callable[[dict[str, str]], None] | None = None,
) -> ReceivedUpload:
    """Parse a multipart body as it arrives. `before_file` sees the fields sent before the
    file part and may raise UploadError to refuse the upload before any byte is stored."""
    content_type, params = parse_options_header(request.headers.get("content-type", ""))
    if content_type != b"multipart/form-data" or b"boundary" not in params:
        raise UploadError(415, "send the submission as multipart/form-data with a 'file' field")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes + 64 * 1024:
        raise UploadError(413, f"the upload is larger than the {max_bytes // (1024 * 1024)} MiB limit")
    collector = _PartCollector(store, file_field, max_bytes, before_file)
    parser = MultipartParser(params[b"boundary"], collector.callbacks())  # type: ignore[arg-type]
    try:
        async for chunk in request.stream():
            parser.write(chunk)
        parser.finalize()
    except UploadError:
        raise
    except Exception as exc:  # malformed multipart body
        raise UploadError(400, f"malformed multipart upload: {exc}") from exc
    finally:
        collector.discard()
    if collector.blob is None:
        raise UploadError(422, f"no file in the upload; attach the zip as the {file_field!r} field")
    if collector.blob.size == 0:
        raise UploadError(422, "the uploaded file is empty")
    return ReceivedUpload(collector.blob, collector.filename or "submission.zip", collector.fields)
