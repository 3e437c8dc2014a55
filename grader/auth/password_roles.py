"""Which accounts may log in with a password here (KG_PASSWORD_LOGIN_ROLES): by site role. Where
students sign in through the university (single sign-on, grader.auth.sso) or their LMS, the
operator keeps passwords for the roles that need a way in when those are down (instructors),
and a student's account refuses the password form and gets no reset link by e-mail. API
tokens are not passwords: they work for every role."""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from grader.models import User
from grader.roles import Role
from grader.settings import Settings


@dataclass(frozen=True)
class PasswordRoles:
    """The site roles whose accounts may use a password, and the button the others use instead
    (None: no single sign-on here; OpenID Connect's where both kinds are set up)."""

    roles: frozenset[Role]
    sso_label: str | None

    @classmethod
    def of(cls, settings: Settings) -> PasswordRoles:
        return cls(frozenset(settings.password_login_roles), sign_in_label(settings))

    def allows(self, user: User) -> bool:
        return user.role in self.roles

    @property
    def refused_roles(self) -> Collection[Role]:
        return [role for role in Role if role not in self.roles]

    def refusal(self, user: User) -> str:
        """The sentence the password form answers an account of a refused role with."""
        how = (f"use the “{self.sso_label}” button instead" if self.sso_label
               else "sign in through your course's LMS instead")
        return f"Password login is off for {user.role.value} accounts on this service: {how}."


def sign_in_label(settings: Settings) -> str | None:
    """The single sign-on button's words (OpenID Connect's where both kinds are set up), or None."""
    for group in (settings.sso, settings.saml):
        if group.enabled:
            return group.label
    return None
