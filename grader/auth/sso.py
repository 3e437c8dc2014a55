"""Single sign-on with the university's OpenID Connect provider (KG_SSO_*, docs/sso.md): the use
case behind the login page's button, the pages (grader.pages.sso) being its adapter.

`Provider.start` sends the browser to the provider's authorization page (the authorization code
flow, through authlib's Starlette client: the state, the nonce and the PKCE verifier are kept in
the browser's signed session cookie, so only the browser that started a sign-in can finish it).
The provider sends it back to <KG_PUBLIC_URL>/login/sso/callback, where `Provider.finish`
trades the code for tokens and checks the id_token (`check_id_token`): the provider's signature
(the keys it publishes), its issuer, our client id as the audience, its expiry and this
browser's nonce. `person_of` reads who signed in, and grader.auth.sign_in.account_for finds
their account by the rules of grader.auth.identities: the (issuer, subject) pair first; else,
at a first sign-in, the account the login claim names, tied to the pair from then on; else a
new student account, with no password and no course (a roster or an LMS enrolls it). Whatever
goes wrong is an `SsoRefused`, whose sentence the login page shows.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import httpx
import httpx2
from authlib.integrations.base_client import OAuthError
from authlib.integrations.starlette_client import OAuth
from fastapi import Request
from joserfc.errors import BadSignatureError, ClaimError, JoseError
from starlette.responses import Response

from grader.auth.identities import Identity
from grader.auth.sign_in import Person, SsoRefused, checked_email, checked_login
from grader.course.roster_csv import MAX_NAME
from grader.settings import SsoSettings

CALLBACK_PATH = "/login/sso/callback"
SCOPES = "openid profile email"
CLOCK_LEEWAY_S = 60  # the provider's clock and ours may differ this much (exp, iat)
# authlib's HTTP client raises httpx2's errors (an older authlib's: httpx's).
HTTP_ERRORS: tuple[type[Exception], ...] = (httpx.HTTPError, httpx2.HTTPError)
_ERROR_CODE = re.compile(r"^[a-z_]{1,64}$")  # an OAuth error code (RFC 6749 §4.1.2.1), shown as sent
# What an id_token that failed its check failed, by claim, in words.
_FAILED_CLAIM = {
    "iss": "it comes from another provider",
    "aud": "it was issued to another service",
    "exp": "it has expired",
    "nonce": "it answers another sign-in",
}


def discovery_url(issuer: str) -> str:
    """Where an issuer publishes its configuration (OpenID Connect Discovery 1.0, §4)."""
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


class Provider:
    """The service's client at the provider: its configuration and keys are read on first use
    and kept for the process's life (a key the provider rotates in is fetched when a token names it)."""

    def __init__(self, settings: SsoSettings, public_url: str) -> None:
        self.settings = settings
        self.redirect_uri = public_url + CALLBACK_PATH
        options: dict[str, Any] = {"scope": SCOPES, "code_challenge_method": "S256", "timeout": 10.0}
        if not settings.client_secret:
            options["token_endpoint_auth_method"] = "none"
        self.client = OAuth().register("sso", client_id=settings.client_id,
                                       client_secret=settings.client_secret or None,
                                       server_metadata_url=discovery_url(settings.issuer), client_kwargs=options)

    async def start(self, request: Request) -> Response:
        """The redirect to the provider's authorization page; this browser's state kept in its session."""
        try:
            await self._metadata()
            response: Response = await self.client.authorize_redirect(request, self.redirect_uri)
        except HTTP_ERRORS as exc:
            raise self._unreachable(exc) from exc
        return response

    async def finish(self, request: Request) -> dict[str, Any]:
        """The checked claims of the sign-in the provider sent this browser back from."""
        framework = self.client.framework
        state = request.query_params.get("state") or ""
        started = await framework.get_state_data(request.session, state)
        await framework.clear_state_data(request.session, state)
        # The provider's no (the person declined, say) comes first: some providers send it without
        # the state. Only an error code is shown, never the description a link could carry.
        error = request.query_params.get("error")
        if error is not None:
            shown = error if _ERROR_CODE.match(error) else "an error"
            raise SsoRefused(f"The sign-in service ended the sign-in with {shown}, so nobody was logged in.",
                             detail=f"{error}: {request.query_params.get('error_description', '')}"[:400])
        if not started:
            raise SsoRefused("This answer from the sign-in service is not for a sign-in this browser started (or "
                             f"it was used already), so nobody was logged in. Start again with the “{self.settings.label}” "
                             "button.", detail=f"unknown state {state[:64]!r}")
        try:
            token = await self.client.fetch_access_token(
                redirect_uri=started["redirect_uri"], code=request.query_params.get("code") or "",
                code_verifier=started["code_verifier"])
        except OAuthError as exc:
            raise SsoRefused(f"The sign-in service refused to finish the sign-in ({exc.error}), so nobody was logged "
                             f"in. Start again with the “{self.settings.label}” button.",
                             detail=f"token endpoint: {exc.error}: {exc.description or ''}") from exc
        except HTTP_ERRORS as exc:
            raise self._unreachable(exc) from exc
        claims = await self.check_id_token(token, started["nonce"])
        return await self._with_userinfo(token, claims)

    async def check_id_token(self, token: Mapping[str, Any], nonce: str) -> dict[str, Any]:
        """The claims of the token response's id_token once its signature, issuer, audience,
        expiry and nonce are right; SsoRefused saying which is not."""
        if "id_token" not in token:
            raise SsoRefused("The sign-in service answered without an id_token, so nobody was logged in. Tell the "
                             "operator of this service.", detail="no id_token in the token response")
        options = {"iss": {"essential": True, "value": self.settings.issuer},
                   "aud": {"essential": True, "value": self.settings.client_id},
                   "sub": {"essential": True}, "exp": {"essential": True}}
        try:
            claims = await self.client.parse_id_token(dict(token), nonce, claims_options=options,
                                                      leeway=CLOCK_LEEWAY_S)
        except JoseError as exc:
            if isinstance(exc, ClaimError):
                what = _FAILED_CLAIM.get(exc.claim, f"its “{exc.claim}” claim is wrong")
            elif isinstance(exc, BadSignatureError):
                what = "its signature is not the provider's"
            else:
                what = "it could not be read"
            raise SsoRefused(f"The sign-in service's answer failed its check ({what}), so nobody was logged in. Start "
                             f"again with the “{self.settings.label}” button.",
                             detail=f"id_token refused: {exc}") from exc
        except HTTP_ERRORS as exc:
            raise self._unreachable(exc) from exc
        return dict(claims)

    async def _with_userinfo(self, token: Mapping[str, Any], claims: dict[str, Any]) -> dict[str, Any]:
        """The id_token's claims, with the userinfo endpoint's where the id_token lacks the login
        claim (some providers put the profile there only); the endpoint's must be about the same `sub`."""
        if self.settings.login_claim in claims or not (await self._metadata()).get("userinfo_endpoint"):
            return claims
        try:
            info = await self.client.userinfo(token=dict(token))
        except HTTP_ERRORS as exc:
            raise self._unreachable(exc) from exc
        if info.get("sub") != claims["sub"]:
            raise SsoRefused("The sign-in service's answer failed its check (its user information is about someone "
                             "else), so nobody was logged in.", detail="userinfo sub differs from the id_token's")
        return {**info, **claims}

    async def _metadata(self) -> dict[str, Any]:
        """The provider's configuration; one that names another issuer than KG_SSO_ISSUER is refused
        (OpenID Connect Discovery 1.0, §4.3)."""
        metadata: dict[str, Any] = await self.client.load_server_metadata()
        if metadata.get("issuer") != self.settings.issuer:
            raise SsoRefused("Single sign-on is not set up correctly on this service, so nobody was logged in. Tell "
                             "its operator.", detail=f"the provider's configuration names the issuer "
                                                     f"{metadata.get('issuer')!r}, not {self.settings.issuer!r}")
        return metadata

    def _unreachable(self, exc: Exception) -> SsoRefused:
        return SsoRefused("The university's sign-in service could not be reached, so nobody was logged in. Try "
                          "again in a few minutes.", detail=f"{self.settings.issuer}: {type(exc).__name__}: {exc}")


def person_of(settings: SsoSettings, claims: Mapping[str, Any]) -> Person:
    """Who signed in, from the checked claims; SsoRefused when the login claim is missing or is
    no login here, or the domain is not one of KG_SSO_DOMAINS."""
    login = checked_login(claims.get(settings.login_claim), settings.login_claim,
                          f"{settings.issuer} user {claims.get('sub')}")
    email = checked_email(claims.get("email"))
    if settings.domains:
        _check_domain(settings.domains, login, email if claims.get("email_verified") is not False else None)
    return Person(Identity(settings.issuer, str(claims["sub"]), "sso"), login, _name(claims), email)


def _check_domain(domains: list[str], login: str, email: str | None) -> None:
    """The login's domain when it has one, else the e-mail address's, must be one of `domains`."""
    shown = login if "@" in login else email
    domain = shown.rpartition("@")[2] if shown else None
    if domain in domains:
        return
    allowed = ", ".join(f"@{name}" for name in domains)
    what = f"you signed in as {shown}" if shown else "the sign-in service gave no verified e-mail address"
    raise SsoRefused(f"Only {allowed} accounts may sign in here, and {what}, so nobody was logged in.",
                     detail=f"domain {domain!r} not in {allowed}", login=login)


def _name(claims: Mapping[str, Any]) -> str | None:
    name = claims.get("name")
    if not isinstance(name, str) or not name.strip():
        parts = [claims.get(key) for key in ("given_name", "family_name")]
        name = " ".join(part.strip() for part in parts if isinstance(part, str) and part.strip())
    return name.strip()[:MAX_NAME] or None
