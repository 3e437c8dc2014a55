"""Pure parts of lost-message recovery: which run a broker message is for, and what the run
page says for a queued run that is not in the broker's queue."""
from __future__ import annotations

import base64
import json
from types import SimpleNamespace
from typing import Any, cast

from grader.celery_app import TASK_GRADE_RUN, TASK_PREBUILD, make_celery
from grader.models import Run, RunState
from grader.reads.runstatus import BEHIND_OWN_TEXT, RESEND_TEXT, QueueEstimate, Waiting, progress_text
from grader.runs.dispatch import _run_of
from grader.settings import Settings


def _message(task: str, args: list[Any]) -> dict[str, Any]:
    """A task message as kombu's Redis transport stores it (protocol 2, JSON, base64 body)."""
    body = base64.b64encode(json.dumps([args, {}, {"callbacks": None}]).encode()).decode()
    return {"body": body, "content-encoding": "utf-8", "content-type": "application/json",
            "headers": {"lang": "py", "task": task, "id": "abc", "argsrepr": repr(args)},
            "properties": {"body_encoding": "base64", "delivery_tag": "t"}}


def test_run_of_reads_the_run_id_of_grading_and_prebuild_messages() -> None:
    assert _run_of(_message(TASK_GRADE_RUN, [42])) == 42
    assert _run_of(_message(TASK_PREBUILD, [7])) == 7


def test_run_of_ignores_other_tasks_and_garbage() -> None:
    assert _run_of(_message("someone.else", [42])) is None
    assert _run_of(_message(TASK_GRADE_RUN, [])) is None
    assert _run_of({**_message(TASK_GRADE_RUN, [1]), "body": "not base64 json"}) is None
    assert _run_of(None) is None and _run_of(["a", "list"]) is None


def test_run_of_reads_what_celery_itself_publishes() -> None:
    """The message the app would publish (celery.amqp builds it), encoded as kombu does."""
    app = make_celery(Settings(_env_file=None, broker_url="memory://"))  # type: ignore[call-arg]
    task = app.amqp.as_task_v2("id-1", TASK_GRADE_RUN, args=(13,))
    body = base64.b64encode(json.dumps(task.body).encode()).decode()
    payload = {"body": body, "headers": task.headers, "properties": {"body_encoding": "base64"}}
    assert _run_of(payload) == 13


def _queued(enqueued: bool) -> Run:
    return cast(Run, SimpleNamespace(state=RunState.queued, enqueued_at=object() if enqueued else None,
                                     progress=None))


def test_a_run_waiting_to_be_resent_promises_no_position_or_eta() -> None:
    text = progress_text(_queued(False), None, Waiting.resend)
    assert text == RESEND_TEXT and "re-sent" in text and "Position" not in text and "estimated" not in text


def test_a_run_behind_the_students_own_says_so() -> None:
    assert progress_text(_queued(False), None, Waiting.behind_own) == BEHIND_OWN_TEXT


def test_a_sent_run_keeps_its_position_and_eta() -> None:
    text = progress_text(_queued(True), QueueEstimate(position=2, eta_s=30.0), Waiting.sent)
    assert text == "Position 2 in the queue; estimated result in under a minute (from recent runs)."
