"""Logging in and out, and the one-time password reset link (grader.auth.password_reset) a staff
member issues from the roster page or, where the service sends e-mail, a student asks for on
/forgot."""
from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks, Query, Request, status
from fastapi.responses import HTMLResponse, Response

from grader.api.deps import Context, get_context
from grader.auth.audit import Event, Via, record
from grader.auth.client_address import request_address
from grader.auth.logins import attempt_login
from grader.auth.password_reset import (
    RESET_PATH,
    LinkRefused,
    ask_for_reset,
    redeem_reset,
    reset_link,
    usable_reset,
)
from grader.auth.password_roles import PasswordRoles, sign_in_label
from grader.auth.sessions import current_user, log_in, log_out
from grader.auth.throttle import Block, Throttle, account_keys, refusal_words, unlock
from grader.notify import reset_message, send_reset_link
from grader.pages.common import LOGIN_NOTICES, LOGIN_REFUSAL, Db, csrf_checked, page, safe_next, see_other
from grader.settings import Settings

router = APIRouter(include_in_schema=False)

INVALID_RESET = "This reset link is not valid: it was used already, it has expired, or it was never issued."


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, session: Db, back: Annotated[str, Query(alias="next")] = "/",
               ended: str = "") -> Response:
    """The login form; `next` is where it goes once logged in (a path of this site only, see
    safe_next), `ended` why it is shown (a session that ended: grader.pages.common.login_path).
    A single sign-on that logged nobody in comes back here with its sentence in the session
    (grader.pages.sign_in), shown once."""
    if current_user(request, session) is not None:
        return see_other(safe_next(back))
    refusal = request.session.pop(LOGIN_REFUSAL, None)
    return page(request, "login.html", None, next=safe_next(back), notice=LOGIN_NOTICES.get(ended),
                error=refusal if isinstance(refusal, str) else None, **_ways_in(get_context(request).settings))


@router.post("/login", response_class=HTMLResponse, dependencies=[csrf_checked])
async def login(request: Request, ctx: Context, session: Db) -> Response:
    """Logs in under the throttle (grader.auth.logins.attempt_login): a wrong password is 401, a
    blocked account or address 429 with Retry-After and, in words, when to try again, a right
    first password of a course's that no longer opens the account 403 saying who gets them in
    (grader.auth.set_up). The form comes back with the login as typed (never the password)."""
    form = await request.form()
    username = str(form.get("username", "")).strip()
    back = safe_next(form.get("next"))
    attempt = attempt_login(session, Throttle(ctx.settings.throttle), ctx.settings.argon2,
                            PasswordRoles.of(ctx.settings), username, str(form.get("password", "")),
                            request_address(request))
    if attempt.user is None:
        wrong = "Wrong username or password." if attempt.checked else None
        return _answer(request, "login.html", attempt.block, ctx.settings,
                       status.HTTP_403_FORBIDDEN if attempt.refused else status.HTTP_401_UNAUTHORIZED,
                       error=attempt.refused or wrong, username=username, next=back, **_ways_in(ctx.settings))
    log_in(request, session, attempt.user, ctx.settings.session_max_age_s)
    return see_other(back)


def _answer(request: Request, name: str, block: Block | None, settings: Settings, status_code: int,
            **values: Any) -> HTMLResponse:
    """The page `name`; when `block` refuses the next attempt, as 429 with Retry-After and the
    sentence (`wait`) that says when to try again."""
    wait = refusal_words(block, settings.course_zone) if block is not None else None
    response = page(request, name, None, status.HTTP_429_TOO_MANY_REQUESTS if block else status_code,
                    wait=wait, **values)
    if block is not None:
        response.headers["Retry-After"] = str(block.retry_after_s())
    return response


@router.post("/logout", dependencies=[csrf_checked])
def logout(request: Request, session: Db) -> Response:
    """Ends the session server-side: a copy of the cookie is anonymous from now on."""
    log_out(request, session)
    return see_other("/login")


def _ways_in(settings: Settings) -> dict[str, Any]:
    """What the login page offers besides the password form: the single sign-on button (its
    label; None when there is none), the SAML button (likewise), the roles that may not use a
    password, and /forgot. Pages that name "the button" name OpenID Connect's where both are set up."""
    return {"sso": settings.sso.label if settings.sso.enabled else None,
            "saml": settings.saml.label if settings.saml.enabled else None,
            "button": sign_in_label(settings),
            "no_password": [role.value for role in PasswordRoles.of(settings).refused_roles],
            "forgot": _resets_by_email(settings)}


def _resets_by_email(settings: Settings) -> bool:
    """Whether students may ask for a reset link by e-mail: the service sends mail, and links
    are built on its configured address (never on the request's Host header, which the asker
    controls: a link to their own host would hand them the token)."""
    return bool(settings.smtp.host and settings.public_url)


@router.get("/forgot", response_class=HTMLResponse)
def forgot_form(request: Request, ctx: Context) -> HTMLResponse:
    return page(request, "forgot.html", None, offered=_resets_by_email(ctx.settings), asked=None,
                **_ways_in(ctx.settings))


@router.post("/forgot", response_class=HTMLResponse, dependencies=[csrf_checked])
async def forgot(request: Request, background: BackgroundTasks, ctx: Context, session: Db) -> HTMLResponse:
    """E-mail a reset link to the login's address on file (password_reset.self_service_target);
    the answer is the same whether or not one was sent, and it comes before the mail is sent.
    Every request counts towards the throttle, per account and per address: a blocked one is
    429 and sends nothing."""
    settings = ctx.settings
    asked = str((await request.form()).get("username", "")).strip()
    offered = _resets_by_email(settings)
    if not (asked and offered):
        return page(request, "forgot.html", None, offered=offered, asked=asked or None, wait=None,
                    **_ways_in(settings))
    asking = ask_for_reset(session, Throttle(settings.throttle), PasswordRoles.of(settings), asked,
                           request_address(request), settings.password_reset_max_age_s)
    if asking.block is not None:
        return _answer(request, "forgot.html", asking.block, settings, status.HTTP_200_OK, offered=True, asked=None,
                       username=asked, **_ways_in(settings))
    if asking.target is not None and asking.target.email and asking.token is not None:
        session.commit()
        link = reset_link(settings.public_url, asking.token)
        background.add_task(send_reset_link, settings.smtp, reset_message(
            settings.smtp.from_, asking.target.email, asking.target.username, link,
            settings.password_reset_max_age_s / 3600))
    return page(request, "forgot.html", None, offered=True, asked=asked, wait=None, **_ways_in(settings))


def _reset_page(request: Request, token: str, status_code: int = 200, **values: Any) -> HTMLResponse:
    values.setdefault("error", None)
    values.setdefault("done", False)
    values.setdefault("valid", True)
    values.setdefault("refused", False)  # a live link that may not be used: its error says who can
    response = page(request, "reset.html", None, status_code, token=token,
                    min_length=get_context(request).settings.password_min_length, **values)
    response.headers["Cache-Control"] = "no-store"
    return response


def _refused_link(request: Request, token: str, refused: LinkRefused) -> HTMLResponse:
    """A live link that may not be used now, saying who can (grader.auth.set_up)."""
    return _reset_page(request, token, status.HTTP_403_FORBIDDEN, valid=False, refused=True, error=str(refused))


@router.get(RESET_PATH + "{token}", response_class=HTMLResponse)
def reset_form(request: Request, token: str, session: Db) -> HTMLResponse:
    try:
        reset = usable_reset(session, token, request_address(request))
    except LinkRefused as exc:
        return _refused_link(request, token, exc)
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
        user = redeem_reset(session, token, new, ctx.settings.argon2, ctx.settings.password_min_length,
                            request_address(request))
    except ValueError as exc:
        return _reset_page(request, token, status.HTTP_400_BAD_REQUEST, error=f"{str(exc).capitalize()}.")
    except LinkRefused as exc:
        return _refused_link(request, token, exc)
    if user is None:
        return _reset_page(request, token, status.HTTP_404_NOT_FOUND, valid=False, error=INVALID_RESET)
    # The link proves the reset was meant for them: their login is no longer throttled
    unlocked = unlock(session, account_keys(user.id, user.username))
    record(session, Event.reset_used, Via.web, user=user, address=request_address(request),
           detail=f"unlocked {', '.join(unlocked)}" if unlocked else "")
    log_out(request, session)
    return _reset_page(request, token, done=True, username=user.username)
