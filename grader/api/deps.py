"""The API's dependencies: the app's context, a database session per request, the caller from
the bearer token, and the checks that turn what the caller may not see into 403/404."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from grader.auth.audit import Via
from grader.auth.client_address import request_address
from grader.auth.credentials import SCOPE_OF_POWER, Principal
from grader.auth.logins import TokenDoor
from grader.context import AppContext
from grader.course.courses import find_course
from grader.course.membership import role_in_course
from grader.models import Assignment, Course, Submission
from grader.roles import Power, Refusal, refused
from grader.service import NotFound, get_assignment

_bearer = HTTPBearer(auto_error=False, description="API token (kg_...) from `grader token create`")


def get_context(request: Request) -> AppContext:
    return request.app.state.context  # type: ignore[no-any-return]


Context = Annotated[AppContext, Depends(get_context)]


def get_session(ctx: Context) -> Iterator[Session]:
    session = ctx.sessions()
    try:
        yield session
        session.commit()
    finally:
        session.close()


DB = Annotated[Session, Depends(get_session)]


def get_principal(
    request: Request, ctx: Context, session: DB,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The token's principal; 401 without a live token, 429 (Retry-After) while the client's
    address is blocked by its failed tokens (grader.auth.logins.TokenDoor)."""
    unauthorized = HTTPException(status.HTTP_401_UNAUTHORIZED, "missing or invalid API token",
                                 headers={"WWW-Authenticate": "Bearer"})
    if credentials is None:
        raise unauthorized
    checked = TokenDoor(ctx.sessions, ctx.settings.throttle, request_address(request), Via.api).check(
        session, credentials.credentials)
    if isinstance(checked, Principal):
        return checked
    if checked is None:
        raise unauthorized
    wait = checked.retry_after_s()
    raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS,
                        f"too many invalid API tokens from your address; try again in {wait} s",
                        headers={"Retry-After": str(wait)})


Caller = Annotated[Principal, Depends(get_principal)]


def require(principal: Principal, scope: str) -> None:
    if not principal.can(scope):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"this token lacks the {scope!r} scope")


def readable_submission(session: Session, principal: Principal, submission_id: int) -> Submission:
    submission = session.get(Submission, submission_id)
    # Someone else's submission, or one of an assignment not taught, reads as absent.
    if submission is None or not principal.can_read_submission(submission):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no submission {submission_id}")
    return submission


def member_assignment(session: Session, caller: Principal, slug: str) -> Assignment:
    """The assignment `slug` when the caller is enrolled in it; 404 otherwise, as if absent."""
    try:
        assignment = get_assignment(session, slug)
    except NotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    if not caller.member_of(assignment.id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no assignment {slug!r}")
    return assignment


def taught_assignment(session: Session, caller: Principal, slug: str, power: Power = Power.view) -> Assignment:
    """The assignment `slug` when the caller's role in its course has `power` there and the token
    the power's scope; 404 outside the course, 403 saying why inside it."""
    assignment = member_assignment(session, caller, slug)
    refuse_unless(caller, power, assignment)
    return assignment


def refuse_unless(caller: Principal, power: Power, assignment: Assignment) -> None:
    """Nothing when the caller's role in the course of `assignment` has `power` and the token its
    scope (SCOPE_OF_POWER); else 403 saying who may (404 for someone outside the course)."""
    _refuse(refused(caller.roles.get(assignment.id), power, assignment.course.slug if assignment.course else None,
                    assignment.course.ta_granted if assignment.course else frozenset()),
            f"no assignment {assignment.slug!r}")
    require(caller, SCOPE_OF_POWER[power])


def taught_course(session: Session, caller: Principal, slug: str, power: Power = Power.view) -> Course:
    """The course `slug` when the caller's role there has `power` and the token the power's
    scope; 404 for someone outside the course (as if absent), 403 saying why inside it."""
    course = find_course(session, slug)
    role = role_in_course(session, caller.user.id, course.id) if course is not None else None
    _refuse(refused(role, power, course.slug if course else None, course.ta_granted if course else frozenset()),
            f"no course {slug!r}")
    require(caller, SCOPE_OF_POWER[power])
    assert course is not None
    return course


def _refuse(denied: Refusal | None, absent_words: str) -> None:
    """grader.roles' refusal as the API's answer: 404 in `absent_words`, or 403 saying why."""
    if denied is not None:
        raise HTTPException(status.HTTP_404_NOT_FOUND if denied.absent else status.HTTP_403_FORBIDDEN,
                            absent_words if denied.absent else denied.words)
