"""The test LMS's LTI logic: lti1p3platform's classes, given the storage and HTTP plumbing they
leave abstract. The library builds and signs the messages and checks what the tool signs; the
subclasses here only say where the records are and which key, scopes and addresses apply."""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import jwt
from lti1p3platform.framework.templates import template as launch_form
from lti1p3platform.lineitem import TLineItem
from lti1p3platform.ltiplatform import LTI1P3PlatformConfAbstract
from lti1p3platform.membership import Context
from lti1p3platform.message_launch import LTIAdvantageMessageLaunchAbstract
from lti1p3platform.oidc_login import OIDCLoginAbstract
from lti1p3platform.registration import Registration
from lti1p3platform.request import Request, TRequest
from lti1p3platform.score import ActivityProgress, GradeProgress, TScore, UpdateScoreStatus
from lti1p3platform.service_connector import (
    AssignmentsGradesService,
    LineItemNotFoundException,
    LtiServiceException,
    NamesRoleProvisioningService,
    TPage,
)
from starlette.responses import HTMLResponse, RedirectResponse

from tests.peers.lms_model import COURSE_OFFERING, Course, Link, Store, User

# What launch_url(..., tamper=...) spoils in the id_token, each a check the tool must make:
# expired (exp in the past), wrong_audience (aud and azp another client), unknown_deployment
# (a deployment id the tool was never given), wrong_nonce (not the nonce the tool sent),
# bad_signature (the platform's kid, signed by another key), unknown_key (a kid not in the JWKS).
Tamper = Literal["expired", "wrong_audience", "unknown_deployment", "wrong_nonce", "bad_signature", "unknown_key"]

AGS = "https://purl.imsglobal.org/spec/lti-ags/scope/"
SCOPE_LINEITEM, SCOPE_LINEITEM_READ = AGS + "lineitem", AGS + "lineitem.readonly"
SCOPE_SCORE, SCOPE_RESULT_READ = AGS + "score", AGS + "result.readonly"


class NotFound(Exception):
    """An unknown launch, course or line item, or no tool registered yet: a 404."""


class BadQuery(Exception):
    """A paging parameter that is not a positive number: a 400."""


@dataclass(frozen=True)
class KeyPair:
    private_pem: str
    public_pem: str

    @property
    def kid(self) -> str:
        return str(Registration.get_jwk(self.public_pem)["kid"])

    def sign(self, claims: Mapping[str, Any], kid: str) -> str:
        return jwt.encode(dict(claims), self.private_pem, algorithm="RS256", headers={"kid": kid})


@dataclass(frozen=True)
class Incoming:
    """One HTTP request, read whole before the synchronous handlers run."""

    method: str
    path_params: Mapping[str, str]
    query: Mapping[str, str]
    form: Mapping[str, str]
    headers: Mapping[str, str]
    body: bytes

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


class LibRequest(Request):
    """An Incoming in the shape the library reads; `get_data` holds only the query parameters the
    service takes (page and limit as numbers: the library adds 1 to the page)."""

    def __init__(self, incoming: Incoming, query: Mapping[str, Any] | None = None) -> None:
        self._query = dict(incoming.query if query is None else query)
        super().__init__(incoming)

    def build_metadata(self, request: Any) -> TRequest:
        incoming: Incoming = request
        return {"method": incoming.method, "form_data": dict(incoming.form), "get_data": self._query,
                "headers": incoming.headers, "content_type": incoming.content_type, "path": "",
                "json": incoming.json()}


def paging_query(incoming: Incoming, keys: tuple[str, ...], page_size: int | None = None) -> dict[str, Any]:
    """The query parameters a service takes; a platform page size applies when the tool sets no
    limit."""
    query: dict[str, Any] = {k: v for k, v in incoming.query.items() if k in keys}
    if page_size and "limit" not in query:
        query["limit"] = page_size
    for name in ("page", "limit"):
        if name in query:
            if not str(query[name]).isdigit() or int(query[name]) < 1:
                raise BadQuery(f"{name} must be a number from 1")
            query[name] = int(query[name])
    return query


def page_of(rows: list[Any], page: int, limit: int | None) -> TPage:
    if not limit:
        return {"content": rows, "has_next": False, "next": None}
    start = (page - 1) * limit
    return {"content": rows[start:start + limit], "has_next": start + limit < len(rows), "next": None}


class PlatformConf(LTI1P3PlatformConfAbstract):
    """The library's platform configuration for one request: the tool's registration. A fresh one
    each request, as the library keeps the JWT it is checking on the object, and fetches the
    tool's key set anew (a tool that changed its key is believed at once)."""

    def init_platform_config(self, **kwargs: Any) -> None:
        self._registration = kwargs["registration"]

    def get_registration_by_params(self, **kwargs: Any) -> Registration:
        assert self._registration is not None
        return self._registration


class Login(OIDCLoginAbstract):
    """Third-party login initiation: a redirect to the tool's login URL (GET, query string)."""

    def set_lti_message_hint(self, **kwargs: Any) -> None:
        self._lti_message_hint = kwargs["hint"]

    def get_redirect(self, url: str) -> RedirectResponse:
        return RedirectResponse(url, status_code=302)


@dataclass(frozen=True)
class Pending:
    """A launch the platform was asked for (launch_url, deep_link_url, framed_url), named by the
    lti_message_hint it sends; `link` is None for a deep-linking request."""

    hint: str
    user: User
    course: Course
    link: Link | None
    tamper: Tamper | None
    framed: bool


@dataclass(frozen=True)
class IssuedLaunch:
    """A form the auth endpoint answered with: the id_token and state, and where they go."""

    redirect_uri: str
    id_token: str
    state: str


class Launch(LTIAdvantageMessageLaunchAbstract):
    """The auth endpoint's answer: the library builds, signs and posts the id_token; this fills
    in the claims of one pending launch and spoils the token as its `tamper` says."""

    def __init__(self, request: LibRequest, conf: PlatformConf, pending: Pending, store: Store,
                 deep_link_return_url: str, stray_key: KeyPair, issued: Callable[[IssuedLaunch], None]) -> None:
        super().__init__(request, conf)
        self._pending, self._stray_key, self._issued = pending, stray_key, issued
        user, course, link = pending.user, pending.course, pending.link
        self.set_user_data(user.sub, list(store.roles(course, user)), full_name=user.name, email_address=user.email)
        lis = {"https://purl.imsglobal.org/spec/lti/claim/lis": {"person_sourcedid": user.sis_id}} if user.sis_id else {}
        self.set_extra_claims({"given_name": user.given_name, "family_name": user.family_name, **lis})
        self.set_launch_context_claim(course.context_id, [COURSE_OFFERING], course.title, course.label)
        self.set_launch_presentation_claim(document_target="iframe" if pending.framed else "window")
        self.set_nrps(store.memberships_url(course))
        if link is None:
            # The spec's `data` is a string the tool echoes back; the library stores what it is given.
            self.set_dl(deep_link_return_url, title=course.title, accept_types={"ltiResourceLink"},
                        extra_data=pending.hint)
            self.set_ags(store.lineitems_url(course))
        else:
            self.set_resource_link_claim(link.resource_link_id, title=link.title)
            self.set_ags(store.lineitems_url(course), link.lineitem)
            if link.custom:
                self.set_custom_parameters_claim(dict(link.custom))
            if link.url:
                self.set_launch_url(link.url)
        if pending.tamper == "expired":
            self.set_id_token_expiration(-600)

    def get_launch_message(self, include_extra_claims: bool = True) -> dict[str, Any]:
        message: dict[str, Any] = super().get_launch_message(include_extra_claims)
        if self._pending.tamper == "wrong_audience":
            message.update(aud="another-client", azp="another-client")
        elif self._pending.tamper == "unknown_deployment":
            message["https://purl.imsglobal.org/spec/lti/claim/deployment_id"] = "unknown-deployment"
        return message

    def get_launch_data(self) -> tuple[dict[str, Any], str]:
        message, state = super().get_launch_data()
        if self._pending.tamper == "wrong_nonce":
            message["nonce"] = "not-the-tools-nonce"
        return message, state

    def generate_launch_request(self) -> Any:
        data = super().generate_launch_request()
        if self._pending.tamper in ("bad_signature", "unknown_key"):
            assert self._registration is not None
            kid = self._registration.get_kid() if self._pending.tamper == "bad_signature" else self._stray_key.kid
            claims = jwt.decode(data["id_token"], options={"verify_signature": False})
            data["id_token"] = self._stray_key.sign(claims, str(kid))
        return data

    def render_launch_form(self, launch_data: dict[str, Any], **kwargs: Any) -> HTMLResponse:
        self._issued(IssuedLaunch(launch_data["launch_url"], launch_data["id_token"], launch_data["state"]))
        return HTMLResponse(launch_form.render(launch_data))


class ScopedAgs(AssignmentsGradesService):
    """AGS on one course's line items. `allowed_scopes` is what the one operation asked for needs
    (the library's default lets any AGS scope do anything); `before_score` may refuse a score
    (the test's injected failures) by raising LtiServiceException."""

    def __init__(self, request: LibRequest, conf: PlatformConf, store: Store, course: Course,
                 scopes: list[str], before_score: Callable[[str], None], lineitem_url: str | None = None) -> None:
        super().__init__(request, conf, store.lineitems_url(course), lineitem_url)
        self._store, self._course, self._scopes, self._before_score = store, course, scopes, before_score

    @property
    def allowed_scopes(self) -> list[str]:
        return self._scopes

    def _key(self, line_item_id: str) -> int:
        if not line_item_id.isdigit() or self._store.lineitem(self._course, int(line_item_id)) is None:
            raise LineItemNotFoundException(line_item_id)
        return int(line_item_id)

    def _checked(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise LtiServiceException("a line item is a JSON object", 400)
        if not isinstance(data.get("label"), str) or not data["label"].strip():
            raise LtiServiceException("label is required", 400)
        if not _number(data.get("scoreMaximum")) or data["scoreMaximum"] <= 0:
            raise LtiServiceException("scoreMaximum must be a number above 0", 400)
        link_id = data.get("resourceLinkId")
        if link_id is not None and not self._store.has_link(self._course, link_id):
            raise LtiServiceException(f"no resource link {link_id!r} in this course", 400)
        return {k: v for k, v in data.items() if k != "id"}

    def find_lineitems(self, page: int = 1, limit: int | None = None, line_item_id: str | None = None,
                       resource_link_id: str | None = None, resource_id: str | None = None,
                       tag: str | None = None) -> TPage:
        wanted = {"resourceLinkId": resource_link_id, "resourceId": resource_id, "tag": tag}
        rows = [item for item in self._store.lineitems(self._course)
                if all(value is None or item.get(name) == value for name, value in wanted.items())]
        return page_of(rows, page, limit)

    def find_lineitem(self, line_item_id: str) -> TLineItem:
        item = self._store.lineitem(self._course, self._key(line_item_id))
        assert item is not None
        return item

    def create_lineitem(self, creation_data: TLineItem) -> TLineItem:
        return self._store.create_lineitem(self._course, self._checked(creation_data))

    def update_lineitem(self, update_data: TLineItem) -> TLineItem:
        key = self._key(update_data["id"])
        return self._store.update_lineitem(self._course, key, self._checked(update_data))

    def delete_lineitem(self, line_item_id: str) -> None:
        self._store.delete_lineitem(self._course, self._key(line_item_id))

    def update_score(self, line_item_id: str, score: TScore) -> UpdateScoreStatus:
        key = self._key(line_item_id)
        checked = self._checked_score(score)
        self._before_score(checked["userId"])
        earlier = [s for s in self._store.scores(self._course, key) or [] if s["userId"] == checked["userId"]]
        if earlier and _instant(checked["timestamp"]) < _instant(earlier[-1]["timestamp"]):
            return UpdateScoreStatus.OLD_TIMESTAMP
        self._store.add_score(self._course, key, checked)
        return UpdateScoreStatus.SUCCESS

    def _checked_score(self, score: Any) -> dict[str, Any]:
        """The spec's required fields and values; a score for someone not in the course is refused."""
        if not isinstance(score, dict):
            raise LtiServiceException("a score is a JSON object", 400)
        for name in ("userId", "activityProgress", "gradingProgress", "timestamp"):
            if name not in score:
                raise LtiServiceException(f"{name} is required", 400)
        if score["activityProgress"] not in {p.value for p in ActivityProgress}:
            raise LtiServiceException("activityProgress is not one of the spec's values", 400)
        if score["gradingProgress"] not in {p.value for p in GradeProgress}:
            raise LtiServiceException("gradingProgress is not one of the spec's values", 400)
        if not isinstance(score["userId"], str):
            raise LtiServiceException("userId is the user's LTI id, a string", 400)
        if "scoreGiven" in score and not all(_number(score.get(k)) for k in ("scoreGiven", "scoreMaximum")):
            raise LtiServiceException("scoreGiven and its scoreMaximum must be numbers", 400)
        try:
            _instant(score["timestamp"])
        except (TypeError, ValueError) as error:
            raise LtiServiceException(f"timestamp: {error}", 400) from error
        if not self._store.is_member(self._course, score["userId"]):
            raise LtiServiceException(f"no user {score['userId']!r} in this course", 400)
        return score

    def get_results(self, line_item_id: str, page: int = 1, limit: int | None = None,
                    user_id: str | None = None) -> TPage:
        key = self._key(line_item_id)
        item_url = self._store.lineitem_url(self._course, key)
        latest: dict[str, dict[str, Any]] = {}
        for score in self._store.scores(self._course, key) or []:
            latest[score["userId"]] = score
        rows = [{"id": f"{item_url}/results/{sub}", "scoreOf": item_url, "userId": sub,
                 "resultScore": s.get("scoreGiven"), "resultMaximum": s.get("scoreMaximum"), "comment": s.get("comment")}
                for sub, s in latest.items() if user_id is None or sub == user_id]
        return page_of(rows, page, limit)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _instant(timestamp: Any) -> datetime:
    """An ISO 8601 timestamp with its time zone, as the spec requires."""
    moment = datetime.fromisoformat(timestamp)
    if moment.tzinfo is None:
        raise ValueError("the time zone is missing")
    return moment


class Roster(NamesRoleProvisioningService):
    """NRPS on one course's memberships; the library pages them and names the next page."""

    def __init__(self, request: LibRequest, conf: PlatformConf, store: Store, course: Course) -> None:
        super().__init__(request, conf, store.memberships_url(course))
        self._store, self._course = store, course

    def get_member_data_page(self, page: int = 1, limit: int | None = None, role: str | None = None,
                             since: str | None = None, rlid: str | None = None) -> TPage:
        rows = [m for m in self._store.members(self._course)
                if role is None or any(r == role or r.endswith(f"#{role}") for r in m["roles"])]
        return page_of(rows, page, limit)

    def get_context_by_id(self) -> Context:
        return Context(id=self._course.context_id, label=self._course.label, title=self._course.title)

    def is_resource_link_valid(self, context_id: str, resource_link_id: str) -> bool:
        return self._store.has_link(self._course, resource_link_id)
