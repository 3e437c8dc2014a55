"""A user's own settings: their password, and their API tokens (created here, shown once)."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.api.deps import Context, get_context
from grader.auth.audit import Event, Via, record
from grader.auth.client_address import request_address
from grader.auth.credentials import STUDENT_SCOPES, issue_token, scopes_for
from grader.auth.logins import confirm_password
from grader.auth.sessions import change_password, log_in
from grader.auth.throttle import Throttle, refusal_words
from grader.ids import RowId
from grader.models import ApiToken, User, utcnow
from grader.pages.common import Db, Sender, Viewer, absent, page, see_other
from grader.settings import Settings

router = APIRouter(include_in_schema=False)

MAX_TOKEN_NAME = 128


# ---- password -----------------------------------------------------------------------------


def _password_page(request: Request, user: User, status_code: int = 200, **values: Any) -> HTMLResponse:
    values.setdefault("error", None)
    values.setdefault("changed", False)
    return page(request, "password.html", user, status_code,
                min_length=get_context(request).settings.password_min_length, **values)


@router.get("/settings/password", response_class=HTMLResponse)
def password_form(request: Request, user: Viewer) -> Response:
    return _password_page(request, user, changed=request.query_params.get("changed") == "1")


def _apply_password_form(request: Request, session: Session, user: User, form: Any, settings: Settings) -> Response:
    """Sets the form's new password (ending every session of the user, giving this browser a
    new one) and goes on; or answers the form again saying why it refused and changed nothing. A
    wrong current password counts as a failed login (grader.auth.logins.confirm_password)."""
    current, new, again = (str(form.get(name, "")) for name in ("current", "new", "again"))
    confirmed = confirm_password(session, Throttle(settings.throttle), settings.argon2, user, current,
                                 request_address(request))
    if confirmed.block is not None:
        response = _password_page(request, user, status.HTTP_429_TOO_MANY_REQUESTS,
                                  error=("Your current password is not right. " if confirmed.checked else "")
                                  + refusal_words(confirmed.block, settings.course_zone))
        response.headers["Retry-After"] = str(confirmed.block.retry_after_s())
        return response
    error = None
    if confirmed.user is None:
        error = "Your current password is not right."
    elif new != again:
        error = "The two new passwords differ."
    elif new == current:
        error = "The new password is your current one."
    else:
        try:
            change_password(session, user, new, settings.argon2, settings.password_min_length)
        except ValueError as exc:
            error = f"{str(exc).capitalize()}."
    if error is not None:
        return _password_page(request, user, status.HTTP_400_BAD_REQUEST, error=error)
    record(session, Event.password_changed, Via.web, user=user, address=request_address(request))
    log_in(request, session, user, settings.session_max_age_s)
    return see_other("/settings/password?changed=1")


@router.post("/settings/password", response_class=HTMLResponse)
async def password_change(request: Request, ctx: Context, session: Db, user: Sender) -> Response:
    """Sets the new password, ends every session of the user (other browsers are logged out)
    and gives this browser a new one."""
    return _apply_password_form(request, session, user, await request.form(), ctx.settings)


# ---- API tokens ---------------------------------------------------------------------------


def _token_page(request: Request, session: Session, user: User, status_code: int = 200,
                **values: Any) -> HTMLResponse:
    tokens = session.scalars(
        select(ApiToken).where(ApiToken.user_id == user.id).order_by(ApiToken.id.desc())
    ).all()
    # Students always get their role's scopes; staff (and course makers) choose among theirs.
    allowed = scopes_for(session, user)
    values.setdefault("created", None)
    values.setdefault("error", None)
    values.setdefault("kept", None)  # the form's fields as sent, when refused
    return page(request, "tokens.html", user, status_code, tokens=tokens,
                choosable=allowed if allowed != STUDENT_SCOPES else (), default_scopes=allowed, max_name=MAX_TOKEN_NAME,
                zone=get_context(request).settings.course_zone, **values)


@router.get("/settings/tokens", response_class=HTMLResponse)
def token_settings(request: Request, session: Db, user: Viewer) -> Response:
    return _token_page(request, session, user)


def _token_error(name: str, scopes: tuple[str, ...], unknown: list[str]) -> str | None:
    if not name or len(name) > MAX_TOKEN_NAME:
        return f"Give the token a name of 1 to {MAX_TOKEN_NAME} characters."
    if unknown:
        return f"Scopes you cannot grant: {', '.join(unknown)}."
    if not scopes:
        return "Choose at least one scope."
    return None


@router.post("/settings/tokens", response_class=HTMLResponse)
async def create_token(request: Request, session: Db, user: Sender) -> Response:
    """Creates a token and answers with the page showing it: the only time it is shown."""
    form = await request.form()
    name = str(form.get("name", "")).strip()
    allowed = scopes_for(session, user)
    if allowed != STUDENT_SCOPES:
        asked = [str(v) for v in form.getlist("scope")]
        scopes = tuple(s for s in allowed if s in asked)
        unknown = sorted(set(asked) - set(allowed))
    else:
        scopes, unknown = allowed, []
    error = _token_error(name, scopes, unknown)
    if error is not None:
        return _token_page(request, session, user, status.HTTP_400_BAD_REQUEST, error=error,
                           kept={"name": str(form.get("name", "")), "scopes": [str(v) for v in form.getlist("scope")]})
    token = issue_token(session, user, name, scopes)
    response = _token_page(request, session, user, status.HTTP_201_CREATED, created={"name": name, "token": token})
    response.headers["Cache-Control"] = "no-store"
    return response


@router.post("/settings/tokens/{token_id}/revoke")
def revoke_token(token_id: RowId, session: Db, user: Sender) -> Response:
    token = session.get(ApiToken, token_id)
    # Someone else's token reads as absent, whatever the caller's role.
    if token is None or token.user_id != user.id:
        raise absent(f"token {token_id}")
    if token.revoked_at is None:
        token.revoked_at = utcnow()
    return see_other("/settings/tokens")
