"""The platform's services, called by the tool in the background (never in a request): an access
token from the platform's token endpoint (OAuth2 client credentials, our signed client
assertion; kept until a minute before it expires, not fetched per call), then Assignment and
Grade Services (line items, scores) and Names and Role Provisioning (the course's members,
page by page)."""
from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import httpx

from grader.lti.keys import sign
from grader.models import LtiPlatform
from grader.settings import Settings

SCORE_SCOPE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"
LINEITEM_SCOPE = "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem"
MEMBERSHIP_SCOPE = "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly"
LINEITEM_TYPE = "application/vnd.ims.lis.v2.lineitem+json"
LINEITEMS_TYPE = "application/vnd.ims.lis.v2.lineitemcontainer+json"
SCORE_TYPE = "application/vnd.ims.lis.v1.score+json"
MEMBERS_TYPE = "application/vnd.ims.lti-nrps.v2.membershipcontainer+json"
TIMEOUT_S = 20.0
_tokens: dict[tuple[int, str], tuple[float, str]] = {}
_lock = threading.Lock()


class ServiceError(Exception):
    """A platform service answered with an error (the message: its status and words)."""


def _raise_for(response: httpx.Response, what: str) -> None:
    if response.status_code >= 400:
        raise ServiceError(f"{what}: the LMS answered {response.status_code} {response.text[:200]}")


def access_token(settings: Settings, platform: LtiPlatform, scopes: tuple[str, ...]) -> str:
    key = (platform.id, " ".join(sorted(scopes)))
    with _lock:
        cached = _tokens.get(key)
    if cached is not None and cached[0] > time.time() + 60:
        return cached[1]
    now = int(time.time())
    assertion = sign(settings, {"iss": platform.client_id, "sub": platform.client_id, "aud": platform.auth_token_url,
                                "iat": now, "exp": now + 300, "jti": secrets.token_urlsafe(16)})
    response = httpx.post(platform.auth_token_url, timeout=TIMEOUT_S, data={
        "grant_type": "client_credentials",
        "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
        "client_assertion": assertion, "scope": key[1]})
    _raise_for(response, "the access token")
    body = response.json()
    token, lifetime = str(body["access_token"]), float(body.get("expires_in", 3600))
    with _lock:
        _tokens[key] = (time.time() + lifetime, token)
    return token


class Services:
    """One platform's services, with the token each call needs."""

    def __init__(self, settings: Settings, platform: LtiPlatform) -> None:
        self.settings, self.platform = settings, platform

    def _call(self, method: str, url: str, scopes: tuple[str, ...], what: str, accept: str,
              body: dict[str, Any] | None = None, content_type: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {access_token(self.settings, self.platform, scopes)}", "Accept": accept}
        if content_type:
            headers["Content-Type"] = content_type
        response = httpx.request(method, url, headers=headers, json=body, timeout=TIMEOUT_S)
        _raise_for(response, what)
        return response

    def find_or_make_lineitem(self, lineitems_url: str, resource_link_id: str, resource_id: str, label: str,
                              score_maximum: float) -> str:
        """The line item of a link (found by its resource link and our resource id, else made)."""
        parts = urlsplit(lineitems_url)
        query = "&".join(q for q in (parts.query, urlencode({"resource_link_id": resource_link_id})) if q)
        found = self._call("GET", urlunsplit(parts._replace(query=query)), (LINEITEM_SCOPE,), "the line items",
                           LINEITEMS_TYPE).json()
        for item in found if isinstance(found, list) else []:
            if item.get("resourceId") in (None, resource_id) and item.get("id"):
                return str(item["id"])
        made = self._call("POST", lineitems_url, (LINEITEM_SCOPE,), "a new line item", LINEITEM_TYPE,
                          {"scoreMaximum": score_maximum, "label": label, "resourceId": resource_id,
                           "resourceLinkId": resource_link_id}, LINEITEM_TYPE).json()
        return str(made["id"])

    def post_score(self, lineitem_url: str, user_id: str, given: float, maximum: float,
                   submitted_at: datetime | None) -> None:
        """The student's grade, final (FullyGraded), stamped now; the LMS's submission time is the
        counted upload's, so the LMS flags lateness from it, not from when we send."""
        parts = urlsplit(lineitem_url)
        url = urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/scores"))
        score: dict[str, Any] = {"userId": user_id, "scoreGiven": given, "scoreMaximum": maximum,
                                 "activityProgress": "Completed", "gradingProgress": "FullyGraded",
                                 "timestamp": datetime.now().astimezone().isoformat()}
        if submitted_at is not None:
            score["submission"] = {"submittedAt": submitted_at.isoformat()}
        self._call("POST", url, (SCORE_SCOPE,), "the score", "application/json", score, SCORE_TYPE)

    def members(self, memberships_url: str) -> Iterator[dict[str, Any]]:
        """Every member of the course, following the `next` page links."""
        url: str | None = memberships_url
        while url:
            response = self._call("GET", url, (MEMBERSHIP_SCOPE,), "the course's members", MEMBERS_TYPE)
            yield from response.json().get("members", [])
            url = response.links.get("next", {}).get("url")
