"""What a checked sign-in says about its person (grader.auth.sso.person_of): the login claim
names the login (lower case), KG_SSO_DOMAINS lets in only its domains (the login's when it
has one, else the verified e-mail address's), and the settings that turn single sign-on and
password login by role on and off."""
from __future__ import annotations

from typing import Any

import pytest

from grader.auth.sso import SsoRefused, person_of
from grader.roles import Role
from grader.settings import Settings, SsoSettings

ISSUER = "https://login.example.edu"


def _sso(**changes: Any) -> SsoSettings:
    return SsoSettings(issuer=ISSUER, client_id="grader", **changes)


def test_the_login_claim_names_the_login_and_the_profile_comes_along() -> None:
    person = person_of(_sso(), {"sub": "0042", "preferred_username": " AdaL ", "email": "Ada@Example.edu",
                                "given_name": "Ada", "family_name": "Lovelace"})
    assert (person.login, person.email, person.name) == ("adal", "ada@example.edu", "Ada Lovelace")
    assert (person.identity.issuer, person.identity.subject, person.identity.kind) == (ISSUER, "0042", "sso")
    other = person_of(_sso(login_claim="email"), {"sub": "7", "email": "bo@example.edu", "email_verified": True,
                                                  "name": "Bo", "preferred_username": "ignored"})
    assert (other.login, other.name) == ("bo@example.edu", "Bo")
    assert person_of(_sso(), {"sub": "8", "preferred_username": "cy", "email": "not an address"}).email is None


@pytest.mark.parametrize(("claims", "words"), [
    ({"sub": "1"}, "its answer has no “preferred_username”"),
    ({"sub": "1", "preferred_username": "   "}, "its answer has no “preferred_username”"),
    ({"sub": "1", "preferred_username": "ada lovelace"}, "“ada lovelace”, cannot be a login here"),
    ({"sub": "1", "preferred_username": "a" * 129}, "cannot be a login here"),
])
def test_a_missing_or_unusable_login_is_refused(claims: dict[str, Any], words: str) -> None:
    with pytest.raises(SsoRefused, match=words):
        person_of(_sso(), claims)


@pytest.mark.parametrize(("claims", "allowed"), [
    ({"preferred_username": "ada", "email": "ada@example.edu"}, True),
    ({"preferred_username": "ada", "email": "ADA@Example.EDU", "email_verified": True}, True),
    ({"preferred_username": "ada@cs.example.edu", "email": "ada@gmail.example"}, True),  # the login's domain
    ({"preferred_username": "ada@gmail.example", "email": "ada@example.edu"}, False),
    ({"preferred_username": "ada", "email": "ada@sub.example.edu"}, False),  # names are exact
    ({"preferred_username": "ada", "email": "ada@example.edu", "email_verified": False}, False),
    ({"preferred_username": "ada"}, False),
])
def test_only_the_listed_domains_sign_in(claims: dict[str, Any], allowed: bool) -> None:
    sso = _sso(domains="example.edu, @CS.example.edu")
    if allowed:
        assert person_of(sso, {"sub": "1", **claims}).login == claims["preferred_username"].lower()
        return
    with pytest.raises(SsoRefused, match=r"Only @example\.edu, @cs\.example\.edu accounts may sign in here"):
        person_of(sso, {"sub": "1", **claims})


def test_single_sign_on_needs_a_client_and_the_service_address() -> None:
    assert not Settings.from_variables({}).sso.enabled
    on = Settings.from_variables({"KG_SSO_ISSUER": ISSUER, "KG_SSO_CLIENT_ID": "g", "KG_PUBLIC_URL": "https://g.edu"})
    assert on.sso.enabled and on.sso.login_claim == "preferred_username"
    with pytest.raises(ValueError, match="KG_SSO_CLIENT_ID"):
        Settings.from_variables({"KG_SSO_ISSUER": ISSUER, "KG_PUBLIC_URL": "https://g.edu"})
    with pytest.raises(ValueError, match="KG_PUBLIC_URL is not"):
        Settings.from_variables({"KG_SSO_ISSUER": ISSUER, "KG_SSO_CLIENT_ID": "g"})
    with pytest.raises(ValueError, match="is not a provider's issuer"):
        Settings.from_variables({"KG_SSO_ISSUER": "login.example.edu", "KG_SSO_CLIENT_ID": "g",
                                 "KG_PUBLIC_URL": "https://g.edu"})


def test_password_login_roles_default_to_every_role() -> None:
    assert Settings.from_variables({}).password_login_roles == list(Role)
    assert Settings.from_variables({"KG_PASSWORD_LOGIN_ROLES": "instructor"}).password_login_roles == [Role.instructor]
    assert Settings.from_variables({"KG_PASSWORD_LOGIN_ROLES": '["student", "instructor"]'}).password_login_roles == \
        [Role.student, Role.instructor]
    with pytest.raises(ValueError, match="password_login_roles"):
        Settings.from_variables({"KG_PASSWORD_LOGIN_ROLES": "teacher"})
