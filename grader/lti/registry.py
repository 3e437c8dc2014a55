"""The platforms (LMS registrations) this tool trusts: what a Canvas or Moodle admin's
registration gives (issuer, client id, deployment ids, the platform's login, token and key-set
addresses), entered with `grader lti add-platform` and listed on /ops/lti."""
from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from grader.models import LtiDeployment, LtiPlatform


class RegistryError(ValueError):
    """A registration that cannot be stored, in words."""


def _url(name: str, value: str, allow_http: bool) -> str:
    parts = urlsplit(value.strip())
    schemes = ("https", "http") if allow_http else ("https",)
    if parts.scheme not in schemes or not parts.netloc:
        raise RegistryError(f"The {name} must be an {' or '.join(schemes)} address, not {value!r}.")
    return value.strip()


def add_platform(db: Session, *, name: str, issuer: str, client_id: str, auth_login_url: str, auth_token_url: str,
                 jwks_url: str, deployment_ids: Sequence[str], allow_http: bool = False) -> LtiPlatform:
    """Register a platform, or add deployments to the one of the same issuer and client id (its
    addresses then replaced by these). `allow_http`: plain http addresses too (tests, a local LMS)."""
    if not client_id.strip() or not deployment_ids:
        raise RegistryError("Give the client id and at least one deployment id the platform shows for this tool.")
    issuer = _url("issuer", issuer, allow_http)
    platform = find_platform(db, issuer, client_id.strip())
    if platform is None:
        platform = LtiPlatform(issuer=issuer, client_id=client_id.strip())
        db.add(platform)
    platform.name = name.strip() or urlsplit(issuer).netloc
    platform.auth_login_url = _url("login (OIDC authorization) address", auth_login_url, allow_http)
    platform.auth_token_url = _url("token address", auth_token_url, allow_http)
    platform.jwks_url = _url("key set (JWKS) address", jwks_url, allow_http)
    known = {d.deployment_id for d in platform.deployments}
    platform.deployments.extend(LtiDeployment(deployment_id=d.strip()) for d in dict.fromkeys(deployment_ids)
                                if d.strip() and d.strip() not in known)
    db.flush()
    return platform


def find_platform(db: Session, issuer: str, client_id: str | None) -> LtiPlatform | None:
    """The platform of `issuer` and `client_id`; with no client id (a login initiation may omit
    it), the issuer's only registration."""
    query = select(LtiPlatform).options(selectinload(LtiPlatform.deployments)).where(LtiPlatform.issuer == issuer)
    if client_id:
        return db.scalar(query.where(LtiPlatform.client_id == client_id))
    found = db.scalars(query).all()
    return found[0] if len(found) == 1 else None


def platforms(db: Session) -> Sequence[LtiPlatform]:
    return db.scalars(select(LtiPlatform).options(selectinload(LtiPlatform.deployments))
                      .order_by(LtiPlatform.name)).all()


def knows_deployment(platform: LtiPlatform, deployment_id: str) -> bool:
    return any(d.deployment_id == deployment_id for d in platform.deployments)
