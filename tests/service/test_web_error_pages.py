"""Error answers by who asks: a browser (it accepts text/html) gets the site's HTML error page
for 404, 405 and 422 and is sent on from a form-only address it opens with GET; the REST API
keeps its JSON envelope for everyone, and other clients keep the JSON they had."""
from __future__ import annotations

import re
import uuid

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Role
from grader.passwords import set_password
from grader.settings import Settings
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import auth
from tests.service.test_web_sessions import PASSWORD, login

BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8"}
SCRIPT = {"Accept": "application/json"}


def _html_page(response: Response, status: int, title: str, message: str) -> str:
    assert response.status_code == status
    assert response.headers["content-type"].startswith("text/html")
    text = response.text
    assert f"<h1>{title}</h1>" in text and message in text, text[-600:]
    assert '<a href="/">Back to the start page</a>' in text
    return text


def test_a_browser_gets_html_error_pages(client: TestClient) -> None:
    _html_page(client.get("/no/such/page", headers=BROWSER), 404, "Not found", "There is no page at /no/such/page.")
    # An id that is not a number names no run: not found, not a validation error.
    _html_page(client.get("/runs/abc", headers=BROWSER), 404, "Not found", "There is no page at /runs/abc.")
    put = client.put("/login", headers=BROWSER)
    _html_page(put, 405, "Not a way to open this address", "/login does not take a PUT request.")
    assert "GET" in put.headers["allow"]  # the headers of the 405 stay


def test_a_staff_member_gets_the_invalid_request_page(settings: Settings, sessions: sessionmaker[Session]) -> None:
    """A page's own fields are read once its visitor may see it (staff of hw4 here): a page
    number that is not one is an invalid request."""
    name = f"errstaff-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, name, Role.instructor), PASSWORD, SUITE_ARGON2)
    invalid = login(settings, name).get("/assignments/hw4/similarity?page=first", headers=BROWSER)
    _html_page(invalid, 422, "Request not understood", "The request was not understood (page: ")


def test_a_logged_in_browser_keeps_its_navigation_on_the_error_page(
        settings: Settings, sessions: sessionmaker[Session]) -> None:
    name = f"errpage-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, name, Role.student), PASSWORD, SUITE_ARGON2)
    browser = login(settings, name)
    page = _html_page(browser.get("/runs/abc", headers=BROWSER), 404, "Not found", "/runs/abc")
    assert f"{name} (student)" in page and 'action="/logout"' in page
    past_any_id = "/runs/99999999999999999"  # more than the database's integer holds
    _html_page(browser.get(past_any_id, headers=BROWSER), 404, "Not found", f"There is no page at {past_any_id}.")


@pytest.mark.parametrize(("path", "page"), [
    ("/submit", "/"), ("/upload", "/"), ("/logout", "/"),
    ("/submissions/5/regrade", "/submissions"), ("/settings/tokens/3/revoke", "/settings/tokens"),
    ("/roster/reset-link", "/roster"), ("/assignments/hw4/similarity/base", "/assignments/hw4/similarity"),
])
def test_a_browser_opening_a_form_address_goes_to_its_page(client: TestClient, path: str, page: str) -> None:
    """After a failed POST, a reload or the address typed again is a GET: no raw 405."""
    answer = client.get(path, headers=BROWSER, follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == page


def test_other_clients_keep_their_json(client: TestClient) -> None:
    assert client.get("/no/such/page", headers=SCRIPT).json() == {"detail": "Not Found"}
    invalid = client.get("/runs/abc", headers=SCRIPT)
    assert invalid.status_code == 422 and invalid.json()["detail"][0]["loc"] == ["path", "run_id"]
    form_only = client.get("/submit", headers=SCRIPT, follow_redirects=False)
    assert form_only.status_code == 405 and form_only.json() == {"detail": "Method Not Allowed"}


@pytest.mark.parametrize("headers", [BROWSER, SCRIPT, {}])
def test_the_api_keeps_its_error_envelope_for_every_client(client: TestClient, tokens: dict[str, str],
                                                           headers: dict[str, str]) -> None:
    headers = {**headers, **auth(tokens["bob"])}
    unknown = client.get("/api/v1/no-such-resource", headers=headers)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
    bad_id = client.get("/api/v1/runs/abc", headers=headers)
    assert bad_id.status_code == 422 and bad_id.json()["error"]["code"] == "validation_error"
    assert re.search(r"run_id", bad_id.json()["error"]["message"])
    wrong_method = client.delete("/api/v1/health", headers=headers)
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["code"] == "method_not_allowed"
