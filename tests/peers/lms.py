"""The LMS the LTI tests launch from: an LTI 1.3 Advantage platform (lti1p3platform's logic,
lms_lti.py; its HTTP routes, lms_app.py; its records, lms_model.py) served on 127.0.0.1 in a
thread of the test process. A test drives it through the Platform object: it registers the tool,
makes courses, people and links, opens launches, and reads the gradebook.

The tool under test is reached at `{tool}/lti/login` (login initiation), `{tool}/lti/launch`
(the redirect_uri and target link URI, deep linking included) and `{tool}/lti/jwks` (its keys).
The platform has one tool registration, one deployment, and one signing key at a time.

It holds the tool to the specs where the library does not: the auth request's fixed parameters
(scope openid, response_type id_token, response_mode form_post, prompt none) and exact
redirect_uri; a client assertion's iss = sub = client_id, aud = the token URL, exp, and a jti
used once; the scope each AGS or NRPS operation needs (401 without a valid token, 403 without
the scope); the score and line item media types (415); a score's required fields, a time zone on
its timestamp, a userId in the course (400), and no timestamp older than the last (409).
"""
from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from lti1p3platform.registration import Registration
from lti1p3platform.service_connector import LtiServiceException

from tests.peers.lms_app import build_app
from tests.peers.lms_lti import IssuedLaunch, KeyPair, NotFound, Pending, PlatformConf, Tamper
from tests.peers.lms_model import (
    INSTRUCTOR,
    LEARNER,
    TEACHING_ASSISTANT,
    TEST_STUDENT,
    Column,
    Course,
    Link,
    Store,
    User,
)
from tests.peers.serving import HOST, free_port, serve

__all__ = ["INSTRUCTOR", "LEARNER", "TEACHING_ASSISTANT", "TEST_STUDENT", "Column", "Course", "Link", "Platform",
           "Tamper", "ToolFacts", "User", "serve_platform"]


@dataclass(frozen=True)
class ToolFacts:
    """What the tool's administrator enters for this platform."""

    issuer: str
    client_id: str
    deployment_id: str
    auth_login_url: str  # the OIDC authorization endpoint
    auth_token_url: str
    jwks_url: str


@dataclass(frozen=True)
class ToolUrls:
    """Where the platform reaches the registered tool."""

    login: str
    launch: str
    jwks: str


def new_key() -> KeyPair:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return KeyPair(private.decode(), public.decode())


class Platform:
    """One LMS: its control API for tests (the public methods) and the state its routes share."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.issuer = f"http://{HOST}:{port}"
        self.store = Store(self.issuer)
        self.key = new_key()
        self.stray_key = new_key()  # what tampered id_tokens are signed with; never published
        self.tool: ToolFacts | None = None
        self.tool_urls: ToolUrls | None = None
        self.pending: dict[str, Pending] = {}
        self.issued: list[IssuedLaunch] = []  # every launch form the auth endpoint answered with
        self.live_tokens: set[str] = set()
        self.used_jtis: set[str] = set()
        self.nrps_page_size: int | None = None  # NRPS pages this many members when the tool sets no limit
        self.token_requests = 0  # access tokens issued (a tool that caches its token asks once)
        self._failures: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()

    # --- the control API ---------------------------------------------------------------------
    def register_tool(self, tool_base_url: str) -> ToolFacts:
        """Register the tool served at `tool_base_url` (once): what its administrator enters."""
        if self.tool is not None:
            raise RuntimeError("this platform has a tool already; start another platform for another tool")
        base = tool_base_url.rstrip("/")
        self.tool_urls = ToolUrls(f"{base}/lti/login", f"{base}/lti/launch", f"{base}/lti/jwks")
        self.tool = ToolFacts(self.issuer, f"client-{secrets.token_hex(4)}", f"deployment-{secrets.token_hex(4)}",
                              f"{self.issuer}/auth", f"{self.issuer}/token", f"{self.issuer}/jwks")
        return self.tool

    def add_course(self, context_id: str, title: str, label: str | None = None) -> Course:
        return self.store.add_course(context_id, title, label or context_id)

    def add_user(self, sub: str, name: str, email: str, given_name: str, family_name: str,
                 sis_id: str | None = None) -> User:
        """A person; `sis_id`: the university's id for them, which launches and the roster carry."""
        return self.store.add_user(User(sub, name, email, given_name, family_name, sis_id))

    def enroll(self, course: Course, user: User, roles: Sequence[str]) -> None:
        """Enroll (or re-enroll) with full role URIs: INSTRUCTOR, TEACHING_ASSISTANT, LEARNER,
        TEST_STUDENT or any list of them."""
        self.store.enroll(course, user, tuple(roles))

    def drop(self, course: Course, user: User, omit: bool = False) -> None:
        """Drop from the course: NRPS lists them with status Inactive (omit=True: not at all), and
        their launches carry no roles."""
        self.store.drop(course, user, omit)

    def add_link(self, course: Course, resource_link_id: str, title: str, with_lineitem: bool,
                 score_maximum: float = 100, custom: dict[str, str] | None = None) -> Link:
        """Place a link to the tool in the course; with_lineitem: with a gradebook column of its own
        (label = title), whose URL launches carry as the AGS `lineitem`."""
        link = Link(course, resource_link_id, title, custom=dict(custom or {}))
        if with_lineitem:
            link = self._with_lineitem(link, {"label": title, "scoreMaximum": score_maximum})
        return self.store.add_link(link)

    def links(self, course: Course) -> list[Link]:
        """The course's links, those deep linking made included."""
        return self.store.course_links(course)

    def launch_url(self, user: User, link: Link, tamper: Tamper | None = None) -> str:
        """A platform page that starts `user`'s launch of `link` (it redirects to the tool's login
        initiation). `tamper` spoils the id_token this launch gets (see lms_lti.Tamper)."""
        return self._page("launch", Pending(self._hint(), user, link.course, link, tamper, framed=False))

    def deep_link_url(self, user: User, course: Course, tamper: Tamper | None = None) -> str:
        """As launch_url, for a deep-linking request in `course` (accepts ltiResourceLink items)."""
        return self._page("launch", Pending(self._hint(), user, course, None, tamper, framed=False))

    def framed_url(self, user: User, link: Link) -> str:
        """A platform page that opens the launch in an iframe (document_target "iframe"): with the
        tool on another site (localhost), its cookies there are third-party cookies."""
        return self._page("framed", Pending(self._hint(), user, link.course, link, None, framed=True))

    def repost_url(self) -> str:
        """A platform page that posts the latest launch's id_token and state to the tool again:
        a replay, which the tool must refuse."""
        if not self.issued:
            raise RuntimeError("no launch was issued yet")
        return f"{self.issuer}/repost/{len(self.issued) - 1}"

    def gradebook(self, course: Course) -> list[Column]:
        return self.store.gradebook(course)

    def fail_scores(self, user: User, count: int, status: int) -> None:
        """The next `count` score posts for `user` (any line item) are answered `status`, not kept."""
        with self._lock:
            self._failures[user.sub] = (count, status)

    def rotate_key(self) -> None:
        """Sign with a new key from now on; the JWKS publishes only the new one. Access tokens
        signed with the old key answer 401 from now on, as revoked ones do."""
        self.key = new_key()

    def revoke_tokens(self) -> None:
        """Every access token issued so far answers 401 from now on."""
        with self._lock:
            self.live_tokens.clear()

    # --- for the routes -----------------------------------------------------------------------
    def registered(self) -> tuple[ToolFacts, ToolUrls]:
        if self.tool is None or self.tool_urls is None:
            raise NotFound("no tool is registered")
        return self.tool, self.tool_urls

    def registration(self) -> Registration:
        """The library's view of the registration, with the current key."""
        tool, urls = self.registered()
        return (Registration().set_iss(self.issuer).set_client_id(tool.client_id)
                .set_deployment_id(tool.deployment_id).set_oidc_login_url(urls.login)
                .set_launch_url(urls.launch).set_deeplink_launch_url(urls.launch).set_tool_key_set_url(urls.jwks)
                .set_platform_private_key(self.key.private_pem).set_platform_public_key(self.key.public_pem))

    def conf(self) -> PlatformConf:
        return PlatformConf(registration=self.registration())

    def spend_jti(self, jti: object) -> bool:
        """False for a client assertion without a jti or with one seen before."""
        with self._lock:
            if not isinstance(jti, str) or not jti or jti in self.used_jtis:
                return False
            self.used_jtis.add(jti)
            return True

    def keep_token(self, token: str) -> None:
        with self._lock:
            self.live_tokens.add(token)
            self.token_requests += 1

    def record_issued(self, launch: IssuedLaunch) -> None:
        with self._lock:
            self.issued.append(launch)

    def before_score(self, sub: str) -> None:
        """Raise the injected failure for this user's score post, if one is due."""
        with self._lock:
            count, status = self._failures.get(sub, (0, 0))
            if count:
                self._failures[sub] = (count - 1, status)
        if count:
            raise LtiServiceException("injected failure (Platform.fail_scores)", status)

    def create_deep_linked(self, course: Course, item: dict[str, object]) -> Link:
        """The link (and line item, if asked for) one ltiResourceLink content item makes."""
        custom = item.get("custom")
        link = Link(course, f"dl-{secrets.token_hex(6)}", str(item.get("title") or ""),
                    custom={str(k): str(v) for k, v in custom.items()} if isinstance(custom, dict) else {},
                    url=str(item["url"]) if item.get("url") else None)
        asked = item.get("lineItem")
        if isinstance(asked, dict):
            link = self._with_lineitem(link, {"label": link.title, **asked})
        return self.store.add_link(link)

    def _with_lineitem(self, link: Link, data: dict[str, object]) -> Link:
        item = self.store.create_lineitem(link.course, {**data, "resourceLinkId": link.resource_link_id})
        return replace(link, lineitem=item["id"])

    def _hint(self) -> str:
        return secrets.token_urlsafe(9)

    def _page(self, kind: str, pending: Pending) -> str:
        with self._lock:
            self.pending[pending.hint] = pending
        return f"{self.issuer}/{kind}/{pending.hint}"


@contextmanager
def serve_platform() -> Iterator[Platform]:
    """A platform serving on a free port of 127.0.0.1 until the block ends."""
    platform = Platform(free_port())
    with serve(build_app(platform), platform.port):
        yield platform
