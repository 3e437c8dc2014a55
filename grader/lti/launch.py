"""A launch from the LMS, in LTI 1.3's two steps:

1. login initiation (`begin_login`): the platform names itself (iss, client id) and the person
   (login_hint); we answer with the platform's authorization address, carrying a fresh state and
   nonce that we keep (lti_launch_states, 10 minutes, single use);
2. the launch (`check_launch`): the platform posts an id_token and the state back. Each check
   that fails is a refusal in words: the state unknown, used or expired; the signature not one
   of the platform's keys; the issuer, audience (and authorized party), expiry or issue time
   wrong; the nonce not the state's (a token replayed into another launch); the deployment not
   registered; the LTI version or message type not one we take; no subject (anonymous).

The state is not tied to a cookie: inside the LMS's frame a browser that blocks third-party
cookies would drop it. A state is used once, and the id_token must carry the nonce made with it,
so neither can be replayed.
"""
from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from joserfc import jws, jwt
from joserfc.errors import JoseError
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from grader.lti import claims as c
from grader.lti.platform_keys import KeysUnavailable, key_set
from grader.lti.registry import find_platform, knows_deployment
from grader.models import LtiLaunchState, LtiPlatform, utcnow

STATE_LIFETIME = timedelta(minutes=10)
CLOCK_SKEW = timedelta(minutes=5)
MESSAGE_TYPES = (c.RESOURCE_LINK_REQUEST, c.DEEP_LINKING_REQUEST)


class LaunchRefused(Exception):
    """A login initiation or launch that is refused; the message says why, for the page."""


def state_hash(state: str) -> str:
    return hashlib.sha256(state.encode()).hexdigest()


def begin_login(db: Session, params: Mapping[str, str], redirect_uri: str) -> str:
    """The platform's authorization address to send the browser to (step 1)."""
    issuer, login_hint = params.get("iss", ""), params.get("login_hint", "")
    if not issuer or not login_hint:
        raise LaunchRefused("This is not an LTI login request: it names no platform (iss) or person (login_hint).")
    platform = find_platform(db, issuer, params.get("client_id") or None)
    if platform is None:
        raise LaunchRefused(f"The LMS {issuer} (client id {params.get('client_id') or 'not given'}) is not registered "
                            "with kernelgrade: its administrator adds it with `grader lti add-platform` (docs/lms.md).")
    state, nonce = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    now = utcnow()
    # states a day past their expiry are of no use: refused as unknown just as they were as expired
    db.execute(delete(LtiLaunchState).where(LtiLaunchState.expires_at < now - timedelta(days=1)))
    db.add(LtiLaunchState(state_hash=state_hash(state), nonce=nonce, platform_id=platform.id, created_at=now,
                          expires_at=now + STATE_LIFETIME))
    query = {"scope": "openid", "response_type": "id_token", "response_mode": "form_post", "prompt": "none",
             "client_id": platform.client_id, "redirect_uri": redirect_uri, "login_hint": login_hint,
             "state": state, "nonce": nonce}
    if params.get("lti_message_hint"):
        query["lti_message_hint"] = params["lti_message_hint"]
    return f"{platform.auth_login_url}{'&' if '?' in platform.auth_login_url else '?'}{urlencode(query)}"


@dataclass(frozen=True)
class Launch:
    """A launch whose id_token passed every check, and what kernelgrade reads of it."""

    platform: LtiPlatform
    claims: dict[str, Any]
    state: LtiLaunchState

    @property
    def message_type(self) -> str:
        return str(self.claims[c.MESSAGE_TYPE])

    @property
    def subject(self) -> str:
        return str(self.claims["sub"])

    @property
    def deployment_id(self) -> str:
        return str(self.claims[c.DEPLOYMENT_ID])

    @property
    def roles(self) -> list[str]:
        return [str(r) for r in self.claims.get(c.ROLES) or []]

    def claim(self, name: str) -> dict[str, Any]:
        value = self.claims.get(name)
        return value if isinstance(value, dict) else {}

    @property
    def name(self) -> str | None:
        given = " ".join(str(self.claims.get(k) or "") for k in ("given_name", "family_name")).strip()
        return str(self.claims.get("name") or "") or given or None

    @property
    def email(self) -> str | None:
        return str(self.claims["email"]) if self.claims.get("email") else None


def _used_state(db: Session, state: str, now: datetime) -> LtiLaunchState:
    row = db.scalar(select(LtiLaunchState).where(LtiLaunchState.state_hash == state_hash(state)).with_for_update())
    if row is None or row.used_at is not None or row.expires_at <= now:
        raise LaunchRefused("This launch was already used, has expired, or was never started here: open the "
                            "link in your LMS again.")
    row.used_at = now
    db.flush()
    return row


def _decoded(id_token: str, platform: LtiPlatform) -> dict[str, Any]:
    try:
        kid = jws.extract_compact(id_token.encode()).headers().get("kid")  # to choose the key only
        token = jwt.decode(id_token, key_set(platform.jwks_url, kid), algorithms=["RS256"])
    except KeysUnavailable as exc:
        raise LaunchRefused(f"kernelgrade could not check this launch: {exc}. Try again in a minute.") from exc
    except (JoseError, ValueError) as exc:
        raise LaunchRefused(f"The launch's id_token is not signed by {platform.name}'s keys ({exc}).") from exc
    return dict(token.claims)


def _checked(claims: dict[str, Any], platform: LtiPlatform, nonce: str, now: datetime) -> None:
    audience = claims.get("aud")
    audiences = audience if isinstance(audience, list) else [audience]
    wrong = []
    if claims.get("iss") != platform.issuer:
        wrong.append(f"issued by {claims.get('iss')!r}, not {platform.issuer!r}")
    if platform.client_id not in audiences or (len(audiences) > 1 and claims.get("azp") != platform.client_id):
        wrong.append(f"meant for {audience!r}, not this tool's client id {platform.client_id!r}")
    stamp = now.timestamp()
    if not isinstance(claims.get("exp"), int | float) or claims["exp"] <= stamp - CLOCK_SKEW.total_seconds():
        wrong.append("expired")
    if not isinstance(claims.get("iat"), int | float) or claims["iat"] > stamp + CLOCK_SKEW.total_seconds():
        wrong.append("issued in the future or with no issue time")
    if claims.get("nonce") != nonce:
        wrong.append("its nonce is not this launch's (a token replayed from another launch)")
    if wrong:
        raise LaunchRefused("The launch's id_token is refused: " + "; ".join(wrong) + ".")
    deployment = str(claims.get(c.DEPLOYMENT_ID) or "")
    if not knows_deployment(platform, deployment):
        raise LaunchRefused(f"The LMS deployment {deployment!r} of {platform.name} is not registered with kernelgrade: "
                            "its administrator adds it with `grader lti add-platform` (docs/lms.md).")
    if claims.get(c.VERSION) != "1.3.0" or claims.get(c.MESSAGE_TYPE) not in MESSAGE_TYPES:
        raise LaunchRefused(f"kernelgrade takes LTI 1.3.0 resource link and deep linking launches, not "
                            f"{claims.get(c.MESSAGE_TYPE)!r} (version {claims.get(c.VERSION)!r}).")
    if not claims.get("sub"):
        raise LaunchRefused("The LMS sent this launch without naming the person (an anonymous launch): kernelgrade "
                            "needs to know who is submitting.")


def check_launch(db: Session, id_token: str, state: str, now: datetime | None = None) -> Launch:
    """The launch of a posted id_token and state (step 2), or LaunchRefused."""
    if not id_token or not state:
        raise LaunchRefused("This is not an LTI launch: it carries no id_token or state.")
    now = now or utcnow()
    row = _used_state(db, state, now)
    platform = db.get(LtiPlatform, row.platform_id)
    assert platform is not None  # the state's row goes with its platform
    claims = _decoded(id_token, platform)
    _checked(claims, platform, row.nonce, now)
    return Launch(platform, claims, row)
