"""Logging in and out, and the one-time password reset link (grader.auth.password_reset) a staff
member issues from the roster page."""
from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, status
from fastapi.responses import HTMLResponse, Response

from grader.api.deps import Context, get_context
from grader.auth.credentials import check_password
from grader.auth.password_reset import RESET_PATH, live_reset, redeem_reset
from grader.auth.sessions import current_user, log_in, log_out
from grader.pages.common import LOGIN_NOTICES, Db, csrf_checked, page, safe_next, see_other

router = APIRouter(include_in_schema=False)

INVALID_RESET = "This reset link is not valid: it was used already, it has expired, or it was never issued."


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, session: Db, back: Annotated[str, Query(alias="next")] = "/",
               ended: str = "") -> Response:
    """The login form; `next` is where it goes once logged in (a path of this site only, see
    safe_next), `ended` why it is shown (a session that ended: grader.pages.common.login_path)."""
    if current_user(request, session) is not None:
        return see_other(safe_next(back))
    return page(request, "login.html", None, next=safe_next(back), notice=LOGIN_NOTICES.get(ended))


@router.post("/login", response_class=HTMLResponse, dependencies=[csrf_checked])
async def login(request: Request, ctx: Context, session: Db) -> Response:
    form = await request.form()
    username = str(form.get("username", "")).strip()
    back = safe_next(form.get("next"))
    user = check_password(session, username, str(form.get("password", "")))
    if user is None:
        return page(request, "login.html", None, status.HTTP_401_UNAUTHORIZED,
                    error="Wrong username or password.", username=username, next=back)
    log_in(request, session, user, ctx.settings.session_max_age_s)
    return see_other(back)


@router.post("/logout", dependencies=[csrf_checked])
def logout(request: Request, session: Db) -> Response:
    """Ends the session server-side: a copy of the cookie is anonymous from now on."""
    log_out(request, session)
    return see_other("/login")


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
