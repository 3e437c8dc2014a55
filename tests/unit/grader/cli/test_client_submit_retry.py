"""`grader submit` (grader/cli/client.py): one Idempotency-Key per upload, sent again with the
same key after a connection error or a 5xx, never after a 4xx."""
from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from grader.cli.client import ApiFailure, retry_delay, upload

CREATED = {"submission_id": 7, "run_id": 9, "message": "Upload stored; grading is queued.", "queued": True}


def _client(answers: list[httpx.Response | Exception], seen: list[httpx.Request]) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return httpx.Client(base_url="http://grader.test", transport=httpx.MockTransport(handler))


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    path = tmp_path / "hw.zip"
    path.write_bytes(b"PK\x05\x06" + bytes(18))
    return path


def test_a_5xx_and_a_dropped_connection_are_sent_again_with_the_same_key(archive: Path) -> None:
    seen: list[httpx.Request] = []
    answers: list[httpx.Response | Exception] = [
        httpx.Response(503, json={"error": {"code": "outcome_unknown", "message": "may be stored"}},
                       headers={"Retry-After": "1"}),
        httpx.ConnectError("connection reset"),
        httpx.Response(200, json={**CREATED, "earlier_upload": True}),
    ]
    slept: list[float] = []
    with _client(answers, seen) as client:
        created = upload(client, archive, "hw4", retries=3, sleep=slept.append)
    assert created["submission_id"] == 7 and created["earlier_upload"] is True
    keys = {r.headers["Idempotency-Key"] for r in seen}
    assert len(seen) == 3 and len(keys) == 1 and len(keys.pop()) >= 16
    assert all(b"PK\x05\x06" in r.content for r in seen), "a retry sent the file without its bytes"
    assert slept == [1.0, 4.0]  # the server's Retry-After, then the backoff


def test_a_4xx_is_not_sent_again(archive: Path) -> None:
    seen: list[httpx.Request] = []
    answers: list[httpx.Response | Exception] = [
        httpx.Response(429, json={"error": {"code": "quota_exceeded", "message": "later"}})]
    with _client(answers, seen) as client, pytest.raises(ApiFailure, match="quota_exceeded"):
        upload(client, archive, "hw4", retries=3, sleep=lambda _s: None)
    assert len(seen) == 1


def test_the_retries_end(archive: Path) -> None:
    seen: list[httpx.Request] = []
    answers: list[httpx.Response | Exception] = [httpx.Response(500, text="boom") for _ in range(3)]
    with _client(answers, seen) as client, pytest.raises(ApiFailure, match="HTTP 500"):
        upload(client, archive, "hw4", retries=2, sleep=lambda _s: None)
    assert len(seen) == 3


def test_each_upload_has_its_own_key(archive: Path) -> None:
    seen: list[httpx.Request] = []
    answers: list[httpx.Response | Exception] = [httpx.Response(201, json=CREATED) for _ in range(2)]
    with _client(answers, seen) as client:
        upload(client, archive, "hw4", retries=0)
        upload(client, archive, "hw4", retries=0)
    assert seen[0].headers["Idempotency-Key"] != seen[1].headers["Idempotency-Key"]


@pytest.mark.parametrize(("attempt", "retry_after", "delay"), [
    (1, None, 2.0), (2, None, 4.0), (10, None, 30.0), (1, "7", 7.0), (1, "600", 30.0), (2, "soon", 4.0)])
def test_retry_delay(attempt: int, retry_after: str | None, delay: float) -> None:
    assert retry_delay(attempt, retry_after) == delay
