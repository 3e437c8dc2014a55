"""Logging in and out, and the one-time password reset link (grader.auth.password_reset) a staff
member issues from the roster page or, where the service sends e-mail, a student asks for on
/forgot."""
from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks, Query, Request, status
from fastapi.responses import HTMLResponse, Response

from grader.api.deps import Context, get_context
from grader.auth.credentials import check_password
from grader.auth.password_reset import (
    RESET_PATH,
    issue_reset,
    live_reset,
    redeem_reset,
    reset_link,
    self_service_target,
)
from grader.auth.sessions import current_user, log_in, log_out
from grader.notify import reset_message, send_reset_link
from grader.pages.common import LOGIN_NOTICES, Db, csrf_checked, page, safe_next, see_other
from grader.settings import Settings

router = APIRouter(include_in_schema=False)

INVALID_RESET = "This reset link is not valid: it was used already, it has expired, or it was never issued."


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, session: Db, back: Annotated[str, Query(alias="next")] = "/",
               ended: str = "") -> Response:
    """The login form; `next` is where it goes once logged in (a path of this site only, see
    safe_next), `ended` why it is shown (a session that ended: grader.pages.common.login_path)."""
    if current_user(request, session) is not None:
        return see_other(safe_next(back))
    return page(request, "login.html", None, next=safe_next(back), notice=LOGIN_NOTICES.get(ended),
                forgot=_resets_by_email(get_context(request).settings))


@router.post("/login", response_class=HTMLResponse, dependencies=[csrf_checked])
async def login(request: Request, ctx: Context, session: Db) -> Response:
    form = await request.form()
    username = str(form.get("username", "")).strip()
    back = safe_next(form.get("next"))
    user = check_password(session, username, str(form.get("password", "")))
    if user is None:
        return page(request, "login.html", None, status.HTTP_401_UNAUTHORIZED, error="Wrong username or password.",
                    username=username, next=back, forgot=_resets_by_email(ctx.settings))
    log_in(request, session, user, ctx.settings.session_max_age_s)
    return see_other(back)


@router.post("/logout", dependencies=[csrf_checked])
def logout(request: Request, session: Db) -> Response:
    """Ends the session server-side: a copy of the cookie is anonymous from now on."""
    log_out(request, session)
    return see_other("/login")


def _resets_by_email(settings: Settings) -> bool:
    """Whether students may ask for a reset link by e-mail: the service sends mail, and links
    are built on its configured address (never on the request's Host header, which the asker
    controls: a link to their own host would hand them the token)."""
    return bool(settings.smtp.host and settings.public_url)


@router.get("/forgot", response_class=HTMLResponse)
def forgot_form(request: Request, ctx: Context) -> HTMLResponse:
    return page(request, "forgot.html", None, offered=_resets_by_email(ctx.settings), asked=None)


@router.post("/forgot", response_class=HTMLResponse, dependencies=[csrf_checked])
async def forgot(request: Request, background: BackgroundTasks, ctx: Context, session: Db) -> HTMLResponse:
    """E-mail a reset link to the login's address on file (password_reset.self_service_target);
    the answer is the same whether or not one was sent, and it comes before the mail is sent."""
    settings = ctx.settings
    asked = str((await request.form()).get("username", "")).strip()
    target = self_service_target(session, asked) if asked and _resets_by_email(settings) else None
    if target is not None and target.email:
        token = issue_reset(session, target, settings.password_reset_max_age_s)
        session.commit()
        link = reset_link(settings.public_url, token)
        background.add_task(send_reset_link, settings.smtp, reset_message(
            settings.smtp.from_, target.email, target.username, link, settings.password_reset_max_age_s / 3600))
    return page(request, "forgot.html", None, offered=_resets_by_email(settings), asked=asked or None)


def _reset_page(request: Request, token: str, status_code: int = 200, **values: Any) -> HTMLResponse:
    values.setdefault("error", None)
    values.setdefault("done", False)
    values.setdefault("valid", True)
    response = page(request, "reset.html", None, status_code, token=token,
                    min_length=get_context(request).settings.password_min_length, **values)
    response.headers["Cache-Control"] = "no-store"
    return response


@router.get(RESET_PATH + "{token}", response_class=HTMLResponse)
def reset_form(request: Request, token: str, session: Db) -> HTMLResponse:
    reset = live_reset(session, token)
    if reset is None:
        return _reset_page(request, token, status.HTTP_404_NOT_FOUND, valid=False, error=INVALID_RESET)
    return _reset_page(request, token, username=reset.user.username)


@router.post(RESET_PATH + "{token}", response_class=HTMLResponse, dependencies=[csrf_checked])
async def reset_password(request: Request, token: str, ctx: Context, session: Db) -> HTMLResponse:
    """Sets the new password once per link; every session of the user ends, and this browser
    is logged out (the user logs in with the new password)."""
    form = await request.form()
    new, again = str(form.get("new", "")), str(form.get("again", ""))
    if new != again:
        return _reset_page(request, token, status.HTTP_400_BAD_REQUEST, error="The two new passwords differ.")
    try:
        user = redeem_reset(session, token, new, ctx.settings.password_min_length)
    except ValueError as exc:
        return _reset_page(request, token, status.HTTP_400_BAD_REQUEST, error=f"{str(exc).capitalize()}.")
    if user is None:
        return _reset_page(request, token, status.HTTP_404_NOT_FOUND, valid=False, error=INVALID_RESET)
    log_out(request, session)
    return _reset_page(request, token, done=True, username=user.username)
