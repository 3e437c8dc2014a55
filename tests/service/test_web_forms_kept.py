"""A refused form is shown again on its own page, the refusal's words beside it and what was
typed still in it (issue 30: a form error dead-ended on an error page and lost the input), for
every form but the login's: the run page's regrade request, adjustment and comment, the regrade
queue's answer, an extension, a member, an API token, a pasted roster, a reset link's login.
Real app, PostgreSQL."""
from __future__ import annotations

import html
import re
import uuid

import pytest
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import RegradeRequest, Role, Run
from grader.passwords import set_password
from grader.service import get_assignment
from grader.settings import Settings
from tests.fixtures.feedback_runs import scored_run
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import COURSE
from tests.service.test_web_settings import PASSWORD, Browser

LONG = "x" * 4001  # one past what a reason or a comment may hold


@pytest.fixture(scope="module")
def people(sessions: sessionmaker[Session]) -> dict[str, str]:
    tag = uuid.uuid4().hex[:6]
    names = {"student": f"kept-stu-{tag}", "prof": f"kept-prof-{tag}"}
    with session_scope(sessions) as session:
        hw4 = get_assignment(session, "hw4")
        for key, role in (("student", Role.student), ("prof", Role.instructor)):
            set_password(get_or_create_user(session, names[key], role, [hw4.course]), PASSWORD, SUITE_ARGON2)
    return names


def _kept(page: str, element_id: str) -> str:
    """The value an input, or the text a textarea, holds on `page`."""
    found = (re.search(rf'<textarea id="{element_id}"[^>]*>(.*?)</textarea>', page, re.S)
             or re.search(rf'<input id="{element_id}"[^>]*\bvalue="([^"]*)"', page))
    assert found, f"no #{element_id} on the page"
    return html.unescape(found[1])


def _error(page: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}"[^>]*>(.*?)</p>', page, re.S)
    assert found, f"no #{element_id} on the page"
    return html.unescape(found[1])


def test_the_run_pages_forms_keep_what_was_typed(settings: Settings, sessions: sessionmaker[Session],
                                                 people: dict[str, str]) -> None:
    run_id = scored_run(sessions, people["student"])
    student, prof = Browser(settings, people["student"]), Browser(settings, people["prof"])
    token = student.page_csrf(f"/runs/{run_id}")
    asked = student.client.post(f"/runs/{run_id}/regrade-request", data={"csrf_token": token, "reason": LONG})
    assert asked.status_code == 400 and "<h1>Run " in asked.text  # the run page, not an error page
    assert "Shorten why the run should be looked at to 4000 characters" in _error(asked.text, "regrade-request-error")
    assert _kept(asked.text, "regrade-reason") == LONG
    commented = student.client.post(f"/runs/{run_id}/comments", data={"csrf_token": token, "body": LONG + "!"})
    assert commented.status_code == 400 and _kept(commented.text, "comment-body") == LONG + "!"
    assert "Nothing was changed." in _error(commented.text, "comment-error")

    token = prof.page_csrf(f"/runs/{run_id}")
    adjusted = prof.client.post(f"/runs/{run_id}/adjustments",
                                data={"csrf_token": token, "points": "two", "reason": "the timing was shared"})
    assert adjusted.status_code == 400
    assert "The points “two” are not a number" in _error(adjusted.text, "adjustment-error")
    assert (_kept(adjusted.text, "adjust-points"), _kept(adjusted.text, "adjust-reason")) == ("two", "the timing was shared")
    fine = prof.client.post(f"/runs/{run_id}/adjustments", data={"csrf_token": token, "points": "2", "reason": "ok"},
                            follow_redirects=False)
    assert fine.status_code == 303  # the same form, accepted, answers with the run page's address as before


def test_the_regrade_queue_keeps_an_answer_that_was_refused(settings: Settings, sessions: sessionmaker[Session],
                                                            people: dict[str, str]) -> None:
    run_id = scored_run(sessions, people["student"])
    with session_scope(sessions) as session:
        run = session.get(Run, run_id)
        assert run is not None
        asked = RegradeRequest(run_id=run_id, student_id=run.submission.user_id, reason="2.2 was timed badly")
        session.add(asked)
        session.flush()
        request_id = asked.id
    prof = Browser(settings, people["prof"])
    token = prof.page_csrf("/assignments/hw4/regrade-requests")
    refused = prof.client.post(f"/assignments/hw4/regrade-requests/{request_id}",
                               data={"csrf_token": token, "action": "adjust", "points": "lots", "reply": "fair point"})
    assert refused.status_code == 400 and "<h1>Regrade requests" in refused.text
    assert "are not a number" in _error(refused.text, f"request-{request_id}-error")
    assert (_kept(refused.text, f"reply-{request_id}"), _kept(refused.text, f"points-{request_id}")) == ("fair point", "lots")
    with session_scope(sessions) as session:
        still = session.get(RegradeRequest, request_id)
        assert still is not None and still.state == "open"


def test_the_staff_forms_keep_what_was_typed(settings: Settings, people: dict[str, str]) -> None:
    prof = Browser(settings, people["prof"])
    token = prof.page_csrf("/assignments/hw4/settings")
    extension = prof.client.post("/assignments/hw4/extensions", data={"csrf_token": token, "student": people["student"],
                                                                      "extra": "two days", "reason": "flu, note seen"})
    assert extension.status_code == 400 and "is not a duration" in _error(extension.text, "extension-error")
    assert [_kept(extension.text, f"x-{name}") for name in ("student", "extra", "reason")] == [
        people["student"], "two days", "flu, note seen"]

    member = prof.client.post(f"/courses/{COURSE}/members", data={"csrf_token": token, "username": "nobody-by-that-name",
                                                                  "part": "ta"})
    assert member.status_code == 400 and "No account “nobody-by-that-name”" in _error(member.text, "member-error")
    assert _kept(member.text, "member-username") == "nobody-by-that-name"
    assert '<option value="ta" selected>TA</option>' in member.text

    long_name = "n" * 200
    made = prof.client.post("/settings/tokens", data={"csrf_token": token, "name": long_name, "scope": ["read"]})
    assert made.status_code == 400 and _kept(made.text, "token-name") == long_name
    ticked = re.findall(r'<input type="checkbox" name="scope" value="([^"]+)" checked>', made.text)
    assert ticked == ["read"], ticked

    roster = prof.client.post("/roster", data={"csrf_token": token, "course": COURSE, "text": " \n "})
    assert roster.status_code == 400 and _kept(roster.text, "roster-text") == " \n "
    reset = prof.client.post("/roster/reset-link", data={"csrf_token": token, "username": "no-such-student"})
    assert reset.status_code == 404 and _kept(reset.text, "reset-username") == "no-such-student"


def test_a_bulk_regrade_of_nothing_selected_is_the_gradebook_again(settings: Settings, people: dict[str, str]) -> None:
    """With no row ticked, the gradebook itself says so, its filters as they were."""
    prof = Browser(settings, people["prof"])
    refused = prof.client.get("/gradebook/regrade", params={"assignment": "hw4", "which": "selected",
                                                            "q": people["student"], "sort": "score"})
    assert refused.status_code == 400 and 'id="gradebook"' in refused.text
    assert _error(refused.text, "regrade-refused").startswith("Nothing selected. Tick at least one student's row")
    assert re.search(rf'<input id="f-q" name="q"[^>]*value="{people["student"]}"', refused.text)
