"""The test LMS (tests/peers/lms.py) against a minimal tool written here with joserfc and
Starlette: the launch's id_token verifies against the platform's JWKS and carries LTI's claims,
each tampered launch is caught by the check it aims at, the token endpoint tells a good client
assertion from a forged or replayed one, scores and line items round-trip through AGS with
their scopes, NRPS pages its roster, and a deep-linking response makes a link."""
from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from joserfc import jwk, jwt
from joserfc.errors import JoseError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from tests.peers.form_browser import FormBrowser
from tests.peers.lms import INSTRUCTOR, LEARNER, TEST_STUDENT, Platform, ToolFacts
from tests.peers.serving import serve

LTI = "https://purl.imsglobal.org/spec/lti/claim/"
DL = "https://purl.imsglobal.org/spec/lti-dl/claim/"
AGS_CLAIM = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
NRPS_CLAIM = "https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice"
SCOPE = "https://purl.imsglobal.org/spec/lti-ags/scope/"
NRPS_SCOPE = "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly"
SCORE_TYPE = "application/vnd.ims.lis.v1.score+json"
LINEITEM_TYPE = "application/vnd.ims.lis.v2.lineitem+json"


class MiniTool:
    """A tool in a few lines: login initiation sends the browser to the platform's auth endpoint
    with a fresh state and nonce; the launch checks the id_token (signature by the platform's
    JWKS, iss, aud, exp, nonce, deployment) and keeps its claims; a deep-linking request is
    answered with one ltiResourceLink that asks for a line item."""

    def __init__(self) -> None:
        self.key = jwk.RSAKey.generate_key(2048, parameters={"kid": "tool-key", "alg": "RS256"}, private=True)
        self.base = ""  # where it is served
        self.facts: ToolFacts | None = None
        self.states: dict[str, str] = {}  # state -> nonce, each used once
        self.launches: list[dict[str, Any]] = []
        self.refusals: list[str] = []

    def assertion(self, key: jwk.RSAKey | None = None, jti: str | None = None) -> str:
        assert self.facts is not None
        now = int(time.time())
        claims = {"iss": self.facts.client_id, "sub": self.facts.client_id, "aud": self.facts.auth_token_url,
                  "iat": now, "exp": now + 300, "jti": jti or uuid.uuid4().hex}
        return jwt.encode({"alg": "RS256", "kid": "tool-key"}, claims, key or self.key)

    async def login(self, request: Request) -> Response:
        assert self.facts is not None
        params = {**request.query_params, **(await request.form())}
        state, nonce = secrets.token_urlsafe(12), secrets.token_urlsafe(12)
        self.states[state] = nonce
        query = {"scope": "openid", "response_type": "id_token", "response_mode": "form_post", "prompt": "none",
                 "client_id": self.facts.client_id, "redirect_uri": f"{self.base}/lti/launch",
                 "login_hint": params["login_hint"], "lti_message_hint": params["lti_message_hint"],
                 "state": state, "nonce": nonce}
        return RedirectResponse(f"{self.facts.auth_login_url}?{urlencode(query)}", status_code=302)

    async def launch(self, request: Request) -> Response:
        assert self.facts is not None
        form = await request.form()
        nonce = self.states.pop(str(form.get("state")), None)
        if nonce is None:
            self.refusals.append("unknown or used state")
            return PlainTextResponse("unknown or used state", 400)
        async with httpx.AsyncClient() as client:
            keys = jwk.KeySet.import_key_set((await client.get(self.facts.jwks_url)).json())
        try:
            claims = jwt.decode(str(form["id_token"]), keys, algorithms=["RS256"]).claims
            expected: dict[str, Any] = {
                "iss": {"essential": True, "value": self.facts.issuer},
                "aud": {"essential": True, "value": self.facts.client_id}, "exp": {"essential": True},
                "nonce": {"essential": True, "value": nonce},
                LTI + "deployment_id": {"essential": True, "value": self.facts.deployment_id}}
            jwt.JWTClaimsRegistry(**expected).validate(claims)
        except (JoseError, ValueError) as error:
            self.refusals.append(f"{type(error).__name__}: {error}")
            return PlainTextResponse("refused", 401)
        self.launches.append(claims)
        if claims[LTI + "message_type"] == "LtiDeepLinkingRequest":
            return self.deep_link_response(claims)
        return HTMLResponse("<!DOCTYPE html><title>Tool</title><p>launched</p>")

    def deep_link_response(self, request: dict[str, Any]) -> Response:
        assert self.facts is not None
        settings, now = request[DL + "deep_linking_settings"], int(time.time())
        item = {"type": "ltiResourceLink", "title": "Homework 4", "custom": {"assignment": "hw4"},
                "lineItem": {"label": "Homework 4", "scoreMaximum": 40}}
        claims = {"iss": self.facts.client_id, "aud": self.facts.issuer, "iat": now, "exp": now + 300,
                  "nonce": secrets.token_urlsafe(8), LTI + "message_type": "LtiDeepLinkingResponse",
                  LTI + "version": "1.3.0", LTI + "deployment_id": self.facts.deployment_id,
                  DL + "data": settings["data"], DL + "content_items": [item]}
        token = jwt.encode({"alg": "RS256", "kid": "tool-key"}, claims, self.key)
        return HTMLResponse(f"<!DOCTYPE html><form method='post' action='{settings['deep_link_return_url']}'>"
                            f"<input type='hidden' name='JWT' value='{token}'></form>"
                            "<script>document.forms[0].submit()</script>")

    async def jwks(self, request: Request) -> Response:
        return JSONResponse(jwk.KeySet([self.key]).as_dict(private=False))

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/lti/login", self.login, methods=["GET", "POST"]),
                                 Route("/lti/launch", self.launch, methods=["POST"]),
                                 Route("/lti/jwks", self.jwks)])


@pytest.fixture
def tool(lms: Platform) -> Iterator[MiniTool]:
    mini = MiniTool()
    with serve(mini.app()) as base:
        mini.base = base
        mini.facts = lms.register_tool(base)
        yield mini


@pytest.fixture
def course(lms: Platform) -> Any:
    course = lms.add_course("ctx-11868", "LLM Systems", "11-868")
    for sub, roles in (("prof", INSTRUCTOR), ("ann", LEARNER), ("ben", LEARNER), ("view", TEST_STUDENT)):
        user = lms.add_user(sub, f"{sub.title()} Person", f"{sub}@example.edu", sub.title(), "Person")
        lms.enroll(course, user, roles)
    return course


def token(lms: Platform, tool: MiniTool, *scopes: str) -> str:
    answer = httpx.post(f"{lms.issuer}/token", data={
        "grant_type": "client_credentials", "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
        "client_assertion": tool.assertion(), "scope": " ".join(scopes)})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["access_token"])


def test_launch_id_token_verifies_and_carries_the_lti_claims(lms: Platform, tool: MiniTool, course: Any,
                                                            form_browser: FormBrowser) -> None:
    link = lms.add_link(course, "rl-hw4", "Homework 4", with_lineitem=True)
    ann = lms.store.users["ann"]

    page = form_browser.open(lms.launch_url(ann, link))

    assert page.status_code == 200 and "launched" in page.text, tool.refusals
    claims = tool.launches[-1]
    assert claims[LTI + "message_type"] == "LtiResourceLinkRequest" and claims[LTI + "version"] == "1.3.0"
    assert claims[LTI + "target_link_uri"] == f"{tool.base}/lti/launch"
    assert claims[LTI + "resource_link"] == {"id": "rl-hw4", "title": "Homework 4"}
    assert claims[LTI + "roles"] == list(LEARNER)
    assert claims[LTI + "context"]["id"] == "ctx-11868" and claims[LTI + "context"]["title"] == "LLM Systems"
    assert (claims["sub"], claims["email"], claims["given_name"]) == ("ann", "ann@example.edu", "Ann")
    assert claims[AGS_CLAIM]["lineitem"] == link.lineitem
    assert claims[AGS_CLAIM]["lineitems"] == f"{lms.issuer}/courses/{course.key}/lineitems"
    assert SCOPE + "score" in claims[AGS_CLAIM]["scope"]
    assert claims[NRPS_CLAIM]["context_memberships_url"] == f"{lms.issuer}/courses/{course.key}/memberships"

    # The same id_token and state posted again: the tool's one-time state refuses it.
    assert form_browser.open(lms.repost_url()).status_code == 400
    assert tool.refusals == ["unknown or used state"] and len(tool.launches) == 1


@pytest.mark.parametrize(("tamper", "caught_by"), [
    ("expired", "ExpiredTokenError"), ("wrong_audience", "'aud'"),
    ("unknown_deployment", "deployment_id"), ("wrong_nonce", "'nonce'"),
    ("bad_signature", "BadSignatureError"), ("unknown_key", "InvalidKeyIdError"),
])
def test_each_tampered_launch_is_caught_by_its_check(lms: Platform, tool: MiniTool, course: Any,
                                                    form_browser: FormBrowser, tamper: Any, caught_by: str) -> None:
    link = lms.add_link(course, "rl-1", "Homework 1", with_lineitem=False)

    page = form_browser.open(lms.launch_url(lms.store.users["ann"], link, tamper=tamper))

    assert page.status_code == 401 and not tool.launches
    assert len(tool.refusals) == 1 and caught_by in tool.refusals[0], tool.refusals


def test_token_endpoint_takes_the_tools_key_only_and_each_assertion_once(lms: Platform, tool: MiniTool) -> None:
    def ask(assertion: str) -> httpx.Response:
        return httpx.post(f"{lms.issuer}/token", data={
            "grant_type": "client_credentials", "scope": f"{SCOPE}score {NRPS_SCOPE} https://example.com/other",
            "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
            "client_assertion": assertion})

    good = ask(tool.assertion(jti="once"))
    assert good.status_code == 200, good.text
    assert good.json()["token_type"] == "bearer" and good.json()["scope"] == f"{SCOPE}score {NRPS_SCOPE}"

    forged = ask(tool.assertion(key=jwk.RSAKey.generate_key(2048, private=True)))
    assert forged.status_code == 401 and forged.json()["error"] == "invalid_client"
    replayed = ask(tool.assertion(jti="once"))
    assert replayed.status_code == 401 and "jti" in replayed.json()["error_description"]
    assert lms.token_requests == 1


def test_a_score_round_trips_into_the_gradebook_with_its_scope(lms: Platform, tool: MiniTool, course: Any) -> None:
    link = lms.add_link(course, "rl-hw4", "Homework 4", with_lineitem=True)
    assert link.lineitem is not None
    ann = lms.store.users["ann"]
    score = {"userId": "ann", "scoreGiven": 37.5, "scoreMaximum": 40, "activityProgress": "Completed",
             "gradingProgress": "FullyGraded", "timestamp": datetime.now(UTC).isoformat(),
             "submission": {"submittedAt": "2026-12-01T10:00:00+00:00"}}

    def post(bearer: str, body: dict[str, Any] = score, media_type: str = SCORE_TYPE) -> httpx.Response:
        return httpx.post(f"{link.lineitem}/scores", json=body,
                          headers={"Authorization": f"Bearer {bearer}", "Content-Type": media_type})

    reader = token(lms, tool, SCOPE + "lineitem.readonly")
    assert post(reader).status_code == 403
    assert post("not-a-token").status_code == 401
    scorer = token(lms, tool, SCOPE + "score", SCOPE + "result.readonly")
    assert post(scorer, media_type="application/json").status_code == 415
    lms.fail_scores(ann, 1, 503)
    assert post(scorer).status_code == 503
    assert post(scorer).status_code == 200

    [column] = lms.gradebook(course)
    assert (column.id, column.label, column.score_maximum) == (link.lineitem, "Homework 4", 100)
    assert column.scores == (score,) and column.latest(ann) == score
    results = httpx.get(f"{link.lineitem}/results", headers={"Authorization": f"Bearer {scorer}"})
    assert [(r["userId"], r["resultScore"]) for r in results.json()] == [("ann", 37.5)]
    lms.revoke_tokens()
    assert post(scorer).status_code == 401


def test_line_items_are_created_found_changed_and_deleted(lms: Platform, tool: MiniTool, course: Any) -> None:
    lms.add_link(course, "rl-hw4", "Homework 4", with_lineitem=False)
    auth = {"Authorization": f"Bearer {token(lms, tool, SCOPE + 'lineitem')}", "Content-Type": LINEITEM_TYPE}
    container = f"{lms.issuer}/courses/{course.key}/lineitems"

    made = httpx.post(container, json={"label": "HW4", "scoreMaximum": 40, "resourceLinkId": "rl-hw4"}, headers=auth)
    assert made.status_code == 201, made.text
    item = made.json()["id"]
    assert httpx.post(container, json={"label": "no maximum"}, headers=auth).status_code == 400
    found = httpx.get(container, params={"resource_link_id": "rl-hw4"}, headers=auth)
    assert [i["id"] for i in found.json()] == [item]
    assert httpx.put(item, json={"label": "HW4 (late)", "scoreMaximum": 40}, headers=auth).status_code == 200
    assert httpx.get(item, headers=auth).json()["label"] == "HW4 (late)"
    assert httpx.delete(item, headers=auth).status_code == 204
    assert httpx.get(item, headers=auth).status_code == 404


def test_nrps_pages_the_roster_through_link_headers(lms: Platform, tool: MiniTool, course: Any) -> None:
    lms.drop(course, lms.store.users["ben"])
    lms.drop(course, lms.store.users["view"], omit=True)
    lms.nrps_page_size = 2
    auth = {"Authorization": f"Bearer {token(lms, tool, NRPS_SCOPE)}"}

    pages: list[dict[str, Any]] = []
    url: str | None = f"{lms.issuer}/courses/{course.key}/memberships"
    while url:
        page = httpx.get(url, headers=auth)
        assert page.headers["content-type"].startswith("application/vnd.ims.lti-nrps.v2.membershipcontainer+json")
        pages.append(page.json())
        url = page.links.get("next", {}).get("url")

    assert [len(p["members"]) for p in pages] == [2, 1] and pages[0]["context"]["id"] == "ctx-11868"
    status = {m["user_id"]: m["status"] for p in pages for m in p["members"]}
    assert status == {"prof": "Active", "ann": "Active", "ben": "Inactive"}


def test_a_deep_linking_response_makes_a_link_with_its_line_item(lms: Platform, tool: MiniTool, course: Any,
                                                                form_browser: FormBrowser) -> None:
    prof = lms.store.users["prof"]

    page = form_browser.open(lms.deep_link_url(prof, course))

    assert page.status_code == 200 and "1 link(s) added" in page.text, page.text
    request = tool.launches[-1]
    assert request[LTI + "message_type"] == "LtiDeepLinkingRequest" and LTI + "resource_link" not in request
    assert request[DL + "deep_linking_settings"]["accept_types"] == ["ltiResourceLink"]
    [link] = lms.links(course)
    assert (link.title, link.custom) == ("Homework 4", {"assignment": "hw4"})
    [column] = lms.gradebook(course)
    assert (column.id, column.label, column.score_maximum, column.resource_link_id) == (
        link.lineitem, "Homework 4", 40, link.resource_link_id)

    form_browser.open(lms.launch_url(prof, link))
    assert tool.launches[-1][LTI + "custom"] == {"assignment": "hw4"}
    assert tool.launches[-1][AGS_CLAIM]["lineitem"] == link.lineitem
