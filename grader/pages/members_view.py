"""The members page of a course as its instructor sees it (a presentation helper, no routes):
who is enrolled and as what, with the course's roster name and section, each account's own
e-mail and first login; an account the instructor still sets up (never used, in no course of
another's: grader.auth.ownership) offers its e-mail and a first-login link, one whose course
set-up no longer opens it says that a site administrator gives the first login
(grader.auth.set_up), and the page counts the accounts nobody has used for the course's re-issue. Drawn by grader.pages.courses and, with
a link just issued or a refusal, by grader.pages.first_logins."""
from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from grader.auth.first_logins import mails_links
from grader.auth.ownership import refusals
from grader.auth.set_up import shut_set_ups
from grader.course.membership import members_of
from grader.course.roster_entries import entries_of, shown_name
from grader.models import CourseRole
from grader.pages.common import CourseOf, get_context, page


def members_page(request: Request, session: Session, staff: CourseOf, status_code: int = 200,
                 **values: Any) -> HTMLResponse:
    """The page with `values` (a refusal's `error` and the form's `kept` fields, a first-login
    `link` just issued)."""
    values.setdefault("error", None)
    values.setdefault("kept", {})  # the form's fields as sent, when refused
    values.setdefault("link", None)  # a first-login link just issued, shown once
    members = members_of(session, staff.course)
    entries = entries_of(session, staff.course.id)
    roster = {user.id: (shown_name(entries.get(user.id), user), entries[user.id].section) for user, _ in members}
    settings = get_context(request).settings
    unused = [user for user, _ in members if user.first_login_at is None]
    set_up = {uid for uid, why in refusals(session, staff.user, unused).items() if why is None}
    return page(request, "course_members.html", staff.user, status_code, course=staff.course,
                members=members, roster=roster, parts=list(CourseRole), set_up=set_up,
                shut=shut_set_ups(session, unused), zone=settings.course_zone,
                unused=len(unused), mail_on=mails_links(settings),
                by_mail=sum(1 for u in unused if u.id in set_up and u.email),
                saved=request.query_params.get("saved"), **values)
