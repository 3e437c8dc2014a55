"""/api/v1/courses/{slug}/ta-powers, /api/v1/courses/{slug}/quota and
/api/v1/assignments/{slug}/quota: what a course's TAs may do besides viewing and grading, and
the graded-run quotas (the course's, for its assignments that set none, and an assignment's
own). The course's staff read them (`read:all`); only its instructors change them (`manage`),
through grader.staff_settings as the course and settings pages do (the same checks, the same
audit rows, via api)."""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, HTTPException, Request, status
from pydantic import BaseModel, Field

from grader.api.deps import DB, Caller, Context, taught_assignment, taught_course
from grader.api.errors import ERRORS, ErrorBody
from grader.api.schemas import RequestBody
from grader.auth.audit import Via
from grader.auth.client_address import request_address
from grader.course.policies import course_run_limit, run_limit
from grader.models import Assignment, Course
from grader.roles import TA_GRANTABLE, TA_POWER_WORDS, Power
from grader.settings import Settings
from grader.staff_settings import parse_powers, set_assignment_run_quota, set_course_run_quota, set_ta_powers

router = APIRouter()

CHANGE_ERRORS = {**ERRORS, 400: {"model": ErrorBody, "description": "a value the setting does not take, and why"}}


class TaPowersOut(BaseModel):
    course: str
    granted: list[str] = Field(description="what the course's TAs may do besides viewing and grading")
    grantable: dict[str, str] = Field(description="every power a course may give its TAs, with what it allows")


class TaPowersIn(RequestBody):
    granted: list[str] = Field(description="exactly the powers the TAs hold from now on (of `grantable`; "
                                           "[]: none beyond viewing and grading)")


class RunQuotaOut(BaseModel):
    course: str
    assignment: str | None = Field(description="null: the course's quota, for its assignments that set none")
    runs: int | None = Field(description="the number set here (0: no quota); null: the default above it")
    in_force: int = Field(description="graded runs each student may start per window now (0: no quota)")
    source: str = Field(description="whose number `in_force` is: the assignment's own, the course's or the service's")
    window_s: float = Field(description="the quota's rolling window, seconds (KG_QUOTA_WINDOW_S)")


class RunQuotaIn(RequestBody):
    runs: int | None = Field(description="graded runs per student and window (0: no quota, at most 100000); "
                                         "null: the default (an assignment: its course's; a course: the service's)")


def _powers_out(course: Course) -> TaPowersOut:
    return TaPowersOut(course=course.slug, granted=[p.value for p in TA_GRANTABLE if p in course.ta_granted],
                       grantable={p.value: TA_POWER_WORDS[p] for p in TA_GRANTABLE})


def _course_quota(settings: Settings, course: Course) -> RunQuotaOut:
    in_force, source = course_run_limit(settings, course)
    return RunQuotaOut(course=course.slug, assignment=None, runs=course.quota_runs, in_force=in_force,
                       source=source, window_s=settings.quota_window_s)


def _assignment_quota(settings: Settings, assignment: Assignment) -> RunQuotaOut:
    in_force, source = run_limit(settings, assignment)
    return RunQuotaOut(course=assignment.course.slug if assignment.course else "", assignment=assignment.slug,
                       runs=assignment.quota_runs, in_force=in_force, source=source, window_s=settings.quota_window_s)


def _typed(runs: int | None) -> str:
    """The number as the settings forms type it, so that one parser (grader.course.quotas.parse_runs) decides."""
    return "" if runs is None else str(runs)


def _refused(exc: ValueError) -> HTTPException:
    return HTTPException(status.HTTP_400_BAD_REQUEST, str(exc))


@router.get("/courses/{slug}/ta-powers", response_model=TaPowersOut, responses=ERRORS,
            summary="What the course's TAs may do besides viewing and grading (its staff)")
def read_ta_powers(slug: str, session: DB, caller: Caller) -> TaPowersOut:
    return _powers_out(taught_course(session, caller, slug, Power.view))


@router.put("/courses/{slug}/ta-powers", response_model=TaPowersOut, responses=CHANGE_ERRORS,
            summary="Set what the course's TAs may do besides viewing and grading (its instructors)")
def write_ta_powers(slug: str, request: Request, session: DB, caller: Caller,
                    body: Annotated[TaPowersIn, Body()]) -> TaPowersOut:
    course = taught_course(session, caller, slug, Power.manage)
    try:
        powers = parse_powers(body.granted)
    except ValueError as exc:
        raise _refused(exc) from exc
    set_ta_powers(session, course, powers, Via.api, caller.user, request_address(request))
    return _powers_out(course)


@router.get("/courses/{slug}/quota", response_model=RunQuotaOut, responses=ERRORS,
            summary="The course's graded-run quota, for its assignments that set none (its staff)")
def read_course_quota(slug: str, ctx: Context, session: DB, caller: Caller) -> RunQuotaOut:
    return _course_quota(ctx.settings, taught_course(session, caller, slug, Power.view))


@router.put("/courses/{slug}/quota", response_model=RunQuotaOut, responses=CHANGE_ERRORS,
            summary="Set the course's graded-run quota (its instructors)")
def write_course_quota(slug: str, request: Request, ctx: Context, session: DB, caller: Caller,
                       body: Annotated[RunQuotaIn, Body()]) -> RunQuotaOut:
    course = taught_course(session, caller, slug, Power.manage)
    try:
        set_course_run_quota(session, course, _typed(body.runs), Via.api, caller.user, request_address(request))
    except ValueError as exc:
        raise _refused(exc) from exc
    return _course_quota(ctx.settings, course)


@router.get("/assignments/{slug}/quota", response_model=RunQuotaOut, responses=ERRORS,
            summary="The assignment's graded-run quota and the one in force (its course's staff)")
def read_assignment_quota(slug: str, ctx: Context, session: DB, caller: Caller) -> RunQuotaOut:
    return _assignment_quota(ctx.settings, taught_assignment(session, caller, slug, Power.view))


@router.put("/assignments/{slug}/quota", response_model=RunQuotaOut, responses=CHANGE_ERRORS,
            summary="Set the assignment's own graded-run quota (its course's instructors)")
def write_assignment_quota(slug: str, request: Request, ctx: Context, session: DB, caller: Caller,
                           body: Annotated[RunQuotaIn, Body()]) -> RunQuotaOut:
    assignment = taught_assignment(session, caller, slug, Power.manage)
    try:
        set_assignment_run_quota(session, assignment, _typed(body.runs), Via.api, caller.user,
                                 request_address(request))
    except ValueError as exc:
        raise _refused(exc) from exc
    return _assignment_quota(ctx.settings, assignment)
