"""Control characters in what a request sends are refused with 422 and a sentence, before the
route runs, on every route (issue 54: a NUL in a regrade request's text reached PostgreSQL, which
cannot store one, and came back a 500). A pure ASGI middleware, wired in grader/app.py.

What is checked:
- the address: its path and every name and value of its query string hold no control character
  at all, tab and line breaks included (none of them is ever multi-line);
- the body's text: every field of a form (urlencoded or multipart; a file's name too, never its
  bytes) and every string value of a JSON body holds none but tab, line feed and
  carriage return (a text area is multi-line, and browsers send its line breaks as CR LF).
A control character is one of Unicode's category Cc: U+0000-U+001F and U+007F-U+009F.

Such a body is read whole before the route runs (the routes read it whole anyway), a multipart
one into a temporary file past 1 MiB, and then handed on unchanged; other bodies pass unread. The
streamed upload routes (`streamed`) are not held back: their own parser checks their fields as
they arrive (grader/storage/uploads.py). A body that is not valid JSON or not a valid form is
left to the route, which says what is wrong with it.
"""
from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable, Collection, Iterator
from typing import IO, Any
from urllib.parse import parse_qsl

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

ANY_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
CONTROL_BUT_LINE_BREAKS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")
SPOOL_BYTES = 1024 * 1024
CHUNK_BYTES = 64 * 1024

Refusal = Callable[[Request, str], Response]  # (request, the sentence) -> its 422 answer


def refusal(where: str, text: str, multi_line: bool = True) -> str | None:
    """The sentence refusing `text` (found at `where`, e.g. `the field “reason”`) when it holds a
    control character (`multi_line`: tab and line breaks allowed); None when it holds none."""
    found = (CONTROL_BUT_LINE_BREAKS if multi_line else ANY_CONTROL).search(text)
    if found is None:
        return None
    allowed = "tabs and line breaks are fine in text, no other" if multi_line else "none is accepted there"
    return f"{where} holds the control character U+{ord(found.group()):04X} ({allowed}): remove it and send again."


def address_refusal(scope: Scope) -> str | None:
    """Why the request's path or query string is refused; None when neither holds a control character."""
    found = refusal("The address", scope["path"], multi_line=False)
    pairs = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    for name, value in pairs:
        found = found or refusal("The address's query", name, False) or refusal(
            f"The address's query field “{name}”", value, False)
    return found


def _json_strings(value: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """(where, text) of every string value in a parsed JSON document."""
    if isinstance(value, str):
        yield where or "the body", value
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _json_strings(item, f"{where}[{index}]")
    elif isinstance(value, dict):  # its keys are names: one the route does not know is ignored
        for key, item in value.items():
            yield from _json_strings(item, f"{where}.{key}" if where else key)


def json_refusal(body: bytes) -> str | None:
    try:
        document = json.loads(body)
    except ValueError:  # not JSON (or not UTF-8): the route says so
        return None
    return next(filter(None, (refusal(f"The field “{where}”", text) for where, text in _json_strings(document))), None)


async def form_refusal(scope: Scope, body: IO[bytes]) -> str | None:
    """Why a form body is refused: a text field, or a file's name, holding a control character."""
    try:
        async with Request(scope, _replay(body, None)).form() as form:
            fields = [(name, value if isinstance(value, str) else value.filename or "", isinstance(value, str))
                      for name, value in form.multi_items()]
    except Exception:  # a form the parser cannot read (malformed, too many parts): the route says what is wrong
        return None
    for name, text, typed in fields:
        where = f"The field “{name}”" if typed else f"The name of the file sent as “{name}”"
        found = refusal(f"A field's name (“{name}”)", name, multi_line=False) or refusal(where, text, typed)
        if found:
            return found
    return None


def _replay(body: IO[bytes], then: Receive | None) -> Receive:
    """A `receive` giving `body` from its start in chunks, then (if given) what `then` gives."""
    body.seek(0)
    done = False

    async def receive() -> Message:
        nonlocal done
        if done and then is not None:
            return await then()
        chunk = body.read(CHUNK_BYTES)
        done = len(chunk) < CHUNK_BYTES
        return {"type": "http.request", "body": chunk, "more_body": not done}

    return receive


class ControlCharacters:
    """Must run inside the session middleware (the refusal page shows the visitor's navigation)."""

    def __init__(self, app: ASGIApp, refusal: Refusal, streamed: Collection[tuple[str, str]]) -> None:
        self.app, self.refuse, self.streamed = app, refusal, streamed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        found = address_refusal(scope)
        kind = Headers(scope=scope).get("content-type", "").partition(";")[0].strip().lower()
        checked = kind in FORMS or kind == "application/json" or kind.endswith("+json")
        with tempfile.SpooledTemporaryFile(SPOOL_BYTES) as body:
            if not found and checked and (scope["method"], scope["path"]) not in self.streamed:
                if not await _read_body(receive, body):
                    return  # the client went away before its body was sent
                found = await form_refusal(scope, body) if kind in FORMS else json_refusal(_whole(body))
                receive = _replay(body, receive)
            if found:
                response = await run_in_threadpool(self.refuse, Request(scope), found)
                await response(scope, receive, send)
                return
            await self.app(scope, receive, send)


async def _read_body(receive: Receive, into: IO[bytes]) -> bool:
    """The whole body written to `into`; False when the client disconnected first."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return False
        into.write(message.get("body", b""))
        if not message.get("more_body", False):
            return True


def _whole(body: IO[bytes]) -> bytes:
    body.seek(0)
    return body.read()
