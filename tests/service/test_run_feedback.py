"""The run page's per-case feedback (issue 18), rendered from runs recorded in PostgreSQL as
the pipeline records them: every case of every problem with its shape, verdict and error in
words; hidden cases as the rubric's disclosure setting says, the same in every line; status
words from the points ("partial" at 14 of 20); one banner, in words, for a run that graded
nothing; the speed line's words from the assignment's plug-in."""
from __future__ import annotations

import html
import re
import uuid

import pytest
from sqlalchemy.orm import Session, sessionmaker

import grader.pages.run_view
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import ErrorClass, Role, RunState
from grader.passwords import set_password
from grader.settings import Settings
from tests.fixtures.feedback_runs import scored_run, ungraded_run, withheld
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.test_web_settings import PASSWORD, Browser
from worker.rubric import load_rubric


@pytest.fixture(scope="module")
def student(sessions: sessionmaker[Session], settings: Settings) -> tuple[str, Browser]:
    name = f"feed-{uuid.uuid4().hex[:6]}"
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, name, Role.student), PASSWORD, SUITE_ARGON2)
    return name, Browser(settings, name)


def text(fragment: str) -> str:
    """The words of an HTML fragment, tags dropped and spaces collapsed."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", fragment))).strip()


def element(page: str, ident: str, tag: str) -> str:
    found = re.search(rf'<{tag}[^>]*\bid="{re.escape(ident)}".*?</{tag}>', page, re.S)
    assert found, f"no <{tag} id={ident}> on the page"
    return found.group(0)


def rows(table: str) -> list[str]:
    return [text(r) for r in re.findall(r"<tr\b[^>]*>.*?</tr>", re.split(r"<tbody\b[^>]*>", table, maxsplit=1)[1], re.S)]


def test_every_case_with_shape_verdict_and_error(sessions: sessionmaker[Session],
                                                  student: tuple[str, Browser]) -> None:
    name, browser = student
    page = browser.client.get(f"/runs/{scored_run(sessions, name)}").text
    cases = element(page, "cases-1.1", "details")
    assert " open" in cases.split(">", 1)[0]  # a case failed: opened
    assert rows(cases) == [
        "sfw-b1h8f1t1-nofut-pad 1 × 8 × 1 × 1 C ABI passed –",
        "sfw-b16h8f64t64-nofut-pad 16 × 8 × 64 × 64 C ABI passed –",
        "sfw-b3h5f7t1-nofut-pad (hidden) 3 × 5 × 7 × 1 C ABI failed "
        "Largest error 0.5 at index [2, 4, 6, 0]; values off where to_len is 1.",
        "sfw-b2h8f5t33-nofut-pad (hidden) 2 × 8 × 5 × 33 C ABI passed –",
        "sfw-b1h8f1t1-nofut-pad 1 × 8 × 1 × 1 binding passed –",
    ]
    assert 'class="scroll-x"' in cases  # the table scrolls in its own box
    assert " open" not in element(page, "cases-1.2", "details").split(">", 1)[0]  # all passed: closed
    assert rows(element(page, "cases-2.2", "details"))[0] == (
        "lnfw-r1h32 1 × 32 C ABI failed The output holds NaN at index [0, 3].")
    # hw4 discloses hidden cases: the first-failure line shows the shape as the table does.
    assert ("hidden case sfw-b3h5f7t1-nofut-pad, shape 3 × 5 × 7 × 1: Largest error 0.5 at index [2, 4, 6, 0]"
            in text(page))
    assert "id=\"cases-3\"" not in page  # not measured: no case box


def test_status_words_follow_the_points(sessions: sessionmaker[Session], student: tuple[str, Browser]) -> None:
    name, browser = student
    page = browser.client.get(f"/runs/{scored_run(sessions, name)}").text
    words = {row.split()[0]: row for row in rows(element(page, "breakdown", "table"))}
    assert "18 / 20 partial" in words["1.1"]  # the stored status says failed
    assert "20 / 20 passed" in words["1.2"]
    assert "14 / 20 partial" in words["2.1"]  # the stored status says passed
    assert "0 / 20 failed" in words["2.2"]
    assert "0 / 20 not graded" in words["3"]
    assert 'class="state state-partial"' in page and 'class="state state-not-graded"' in page
    # The speed line in the plug-in's words (rubrics.hw4's Words.figures), not a dict of the page's.
    assert "your fused op vs your MiniTorch's composition on the reference basic ops, 12 trials" in words["1.1"]


def test_withheld_hidden_cases_show_no_shape_anywhere(sessions: sessionmaker[Session], student: tuple[str, Browser],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    name, browser = student
    rubric = withheld(load_rubric("hw4"))
    run_id = scored_run(sessions, name, rubric)  # scored as the page will describe it
    monkeypatch.setattr(grader.pages.run_view, "load_rubric", lambda _slug, search: rubric)
    page = browser.client.get(f"/runs/{run_id}").text
    cases = rows(element(page, "cases-1.1", "details"))
    assert cases[2] == ("hidden case 1 not disclosed C ABI failed Wrong result (this assignment does not disclose "
                        "the details of hidden cases).")
    assert cases[3] == "hidden case 2 not disclosed C ABI passed –"
    assert cases[0].startswith("sfw-b1h8f1t1-nofut-pad 1 × 8 × 1 × 1")  # public cases keep theirs
    words = text(page)
    assert "this assignment does not disclose their shapes or errors" in words
    assert "First failing case: hidden case 1: Wrong result" in words
    for spelled in ("sfw-b3h5f7t1", "sfw-b2h8f5t33", "3, 5, 7, 1", "3 × 5 × 7 × 1", "values off"):
        assert spelled not in page, spelled  # no line shows a withheld case's id, shape or message


@pytest.mark.parametrize("state, error, sentence", [
    (RunState.built, None, "This run was built but not graded: the worker that took it has no GPU stage"),
    (RunState.failed, ErrorClass.bad_archive, "the grader could not use it as a submission (a bad archive)"),
    (RunState.failed, ErrorClass.build_error, "No problem could be graded because the kernels did not build"),
    (RunState.failed, ErrorClass.timeout, "took longer than its time limit and was stopped (timed out)"),
    (RunState.failed, ErrorClass.infra_error, "A fault on the grading side (infrastructure), not in your submission"),
])
def test_a_run_that_graded_nothing_has_one_banner(sessions: sessionmaker[Session], student: tuple[str, Browser],
                                                  state: RunState, error: ErrorClass | None, sentence: str) -> None:
    name, browser = student
    page = browser.client.get(f"/runs/{ungraded_run(sessions, name, state, error, 'The details.')}").text
    banner = text(element(page, "not-graded", "section"))
    assert banner.startswith("Not graded ") and sentence in banner
    assert page.count('id="not-graded"') == 1
    assert 'id="breakdown"' not in page and "where points were lost" not in page  # no five 0 / 20 rows
    assert "not_run" not in page and (error is None or error.value not in page)  # no raw codes
    assert "The details." in text(element(page, "run-message", "p"))
