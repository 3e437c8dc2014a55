"""`grader course`, `grader user`, `grader token` and `grader roster`: courses, accounts, their
enrolments (a role per course: instructor, TA or student) and API tokens."""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.auth.audit import Event, Via, recent, record
from grader.auth.credentials import issue_token
from grader.auth.ownership import change_email, record_enrollment, set_site_admin
from grader.auth.password_reset import issue_reset, reset_link
from grader.auth.sessions import change_password, revoke_user_sessions
from grader.auth.throttle import account_keys, address_keys, unlock
from grader.course.courses import (
    CourseError,
    add_assignment,
    course_holding,
    create_course,
    find_course,
    free_assignments,
)
from grader.course.membership import courses_of, enroll, get_or_create_user, members_of, unenroll
from grader.course.roster import import_roster
from grader.datadir import write_private
from grader.db import make_engine, make_session_factory, session_scope
from grader.models import Course, CourseRole, Role, User
from grader.service import find_user
from grader.settings import get_settings

course_app = typer.Typer(help="Courses: their assignments (members: `grader user enroll`).", no_args_is_help=True)
user_app = typer.Typer(help="Manage users.", no_args_is_help=True)
token_app = typer.Typer(help="Manage API tokens.", no_args_is_help=True)
roster_app = typer.Typer(help="Student roster.", no_args_is_help=True)
T = TypeVar("T")


def _found(row: T | None, missing: str) -> T:
    """`row`, or the command ends with exit 2 saying `missing`."""
    if row is None:
        typer.echo(missing, err=True)
        raise typer.Exit(2)
    return row


def course_or_exit(session: Session, slug: str) -> Course:
    return _found(find_course(session, slug),
                  f"no course {slug!r}; `grader course list` shows them, `grader course create` makes one")


def _add_or_exit(session: Session, course: Course, slugs: list[str]) -> None:
    for slug in slugs:
        try:
            add_assignment(session, course, slug)
        except CourseError as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(2) from exc


@course_app.command("create")
def course_create(
    slug: str,
    title: Annotated[str, typer.Option(help="the course's title, e.g. 'LLM Systems, fall 2026'")],
    assignment: Annotated[list[str] | None, typer.Option(help="an assignment no course holds yet (repeatable)")] = None,
    instructor: Annotated[list[str] | None, typer.Option(help="an existing account, enrolled as an instructor "
                                                                "(repeatable)")] = None,
) -> None:
    """Make the course SLUG, with its assignments and instructors."""
    with session_scope(make_session_factory(make_engine(get_settings()))) as session:
        try:
            course = create_course(session, slug, title)
        except CourseError as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(2) from exc
        _add_or_exit(session, course, assignment or [])
        for name in instructor or []:
            enroll(session, _user_or_exit(session, name), course, CourseRole.instructor)
        typer.echo(f"course {course.slug}: {', '.join(a.slug for a in course.assignments) or 'no assignment yet'}")


@course_app.command("add")
def course_add(slug: str, assignments: Annotated[list[str], typer.Argument(help="assignments no course holds yet")]) -> None:
    """Add assignments to the course SLUG (an assignment belongs to one course)."""
    with session_scope(make_session_factory(make_engine(get_settings()))) as session:
        course = course_or_exit(session, slug)
        _add_or_exit(session, course, assignments)
        typer.echo(f"course {course.slug}: {', '.join(a.slug for a in course.assignments)}")


@course_app.command("list")
def course_list() -> None:
    """Every course with its assignments and how many instructors, TAs and students it has;
    then the assignments no course holds yet."""
    with session_scope(make_session_factory(make_engine(get_settings()))) as session:
        for course in session.scalars(select(Course).order_by(Course.slug)):
            parts = Counter(part for _, part in members_of(session, course))
            counts = ", ".join(f"{parts[part]} {part.label}{'' if parts[part] == 1 else 's'}" for part in CourseRole)
            typer.echo(f"{course.slug} ({course.title}): {', '.join(a.slug for a in course.assignments) or 'no assignment'}"
                       f"; {counts}")
        free = free_assignments(session)
        if free:
            typer.echo(f"in no course: {', '.join(a.slug for a in free)}")


def _default_courses(session: Session) -> tuple[list[Course], str]:
    """Where `grader user add` without --course enrolls a new account: the one course, when
    there is exactly one; else nowhere, and the sentence saying so."""
    courses = list(session.scalars(select(Course).order_by(Course.slug)).all())
    if len(courses) == 1:
        return courses, ""
    if not courses:
        return [], "no course exists yet, so it is enrolled nowhere"
    return [], (f"enrolled nowhere: {len(courses)} courses exist ({', '.join(c.slug for c in courses)}); "
                "name one with --course, or use `grader user enroll NAME COURSE`")


@user_app.command("add")
def user_add(
    username: str,
    role: Annotated[Role, typer.Option(help="student, or instructor (may make courses)")] = Role.student,
    password: Annotated[bool, typer.Option("--password", help="ask for a web login password and set it")] = False,
    course: Annotated[list[str] | None, typer.Option(
        help="enroll in this course (repeatable; students as students, instructors as instructors); "
             "none: a new user joins the one course there is, and no course when there are several")] = None,
    email: Annotated[str | None, typer.Option(help="the account's e-mail address (run notices, staff mail, "
                                                   "/forgot)")] = None,
    site_admin: Annotated[bool, typer.Option("--site-admin", help="make it a site administrator (may change "
                                                                  "any account's login, password and e-mail)")] = False,
) -> None:
    """Create a user (an existing one keeps its role) and enroll it; --password sets its web
    password (and ends the user's browser sessions), --email its address."""
    secret = typer.prompt("Password", hide_input=True, confirmation_prompt=True) if password else None
    settings = get_settings()
    with session_scope(make_session_factory(make_engine(settings))) as session:
        if course:
            chosen, nowhere = [course_or_exit(session, slug) for slug in course], ""
        elif find_user(session, username) is None:
            chosen, nowhere = _default_courses(session)
        else:
            chosen, nowhere = [], ""  # an existing account keeps its enrollments
        user = get_or_create_user(session, username, role, chosen)
        if secret is not None:
            try:
                change_password(session, user, secret, settings.argon2, settings.password_min_length)
            except ValueError as exc:
                typer.echo(str(exc), err=True)
                raise typer.Exit(1) from exc
            record(session, Event.password_changed, Via.cli, user=user, detail="grader user add --password")
        _set_email_or_exit(session, user, email)
        if site_admin:
            set_site_admin(session, user, True)
        enrolled = ", ".join(f"{c.slug} ({part.label})" for c, part in courses_of(session, user.id)) or "nothing"
        typer.echo(f"user {user.username} ({user.role.value}{', site administrator' if user.site_admin else ''}) "
                   f"id={user.id}, enrolled in {enrolled}" + (", password set" if secret else "")
                   + (f", e-mail {user.email}" if user.email else ""))
        if nowhere:
            typer.echo(nowhere, err=True)


def _set_email_or_exit(session: Session, user: User, email: str | None) -> None:
    """Give `user` the address `email` (None: leave it; empty: remove it), or exit 2 saying why not."""
    if email is None:
        return
    problem = change_email(session, None, user, email, Via.cli)
    if problem is not None:
        typer.echo(problem, err=True)
        raise typer.Exit(2)


@user_app.command("email")
def user_email(username: str, address: Annotated[str, typer.Argument(help="the new address; '' removes it")]) -> None:
    """Set USERNAME's e-mail address (the operator's right, as a site administrator's; recorded)."""
    with session_scope(make_session_factory(make_engine(get_settings()))) as session:
        user = _user_or_exit(session, username)
        _set_email_or_exit(session, user, address)
        typer.echo(f"{user.username}: e-mail {user.email or 'none'}")


@user_app.command("admin")
def user_admin(
    username: str,
    revoke: Annotated[bool, typer.Option("--revoke", help="take the role back")] = False,
) -> None:
    """Make USERNAME a site administrator (or --revoke): it may change any account's login,
    password and e-mail on the web (/accounts/LOGIN), apart from every course role. Only this
    command gives the role."""
    with session_scope(make_session_factory(make_engine(get_settings()))) as session:
        user = _user_or_exit(session, username)
        changed = set_site_admin(session, user, not revoke)
    typer.echo(f"{username} is {'no longer ' if revoke else ''}a site administrator" + ("" if changed else " (already)"))


def _user_or_exit(session: Session, username: str) -> User:
    return _found(find_user(session, username), f"no user {username!r}; create it with `grader user add`")


@user_app.command("enroll")
def user_enroll(
    username: str,
    course: str,
    part: Annotated[CourseRole, typer.Option("--as", help="student, ta or instructor")] = CourseRole.student,
) -> None:
    """Enroll USERNAME in COURSE as a student, a TA or an instructor (changing their part if enrolled)."""
    with session_scope(make_session_factory(make_engine(get_settings()))) as session:
        user, where = _user_or_exit(session, username), course_or_exit(session, course)
        changed = enroll(session, user, where, part)  # the enrollment alone: nothing of the account changes
        if changed:
            record_enrollment(session, None, user, where, part, Via.cli)
    typer.echo(f"{username} is {part.label} of {course}" + ("" if changed else " (already)"))


@user_app.command("unenroll")
def user_unenroll(username: str, course: str) -> None:
    """Take USERNAME out of COURSE: they no longer see or submit to its assignments; their
    submissions stay in the gradebook's records."""
    with session_scope(make_session_factory(make_engine(get_settings()))) as session:
        removed = unenroll(session, _user_or_exit(session, username), course_or_exit(session, course))
    typer.echo(f"{username} {'left' if removed else 'was not enrolled in'} {course}")


@user_app.command("logout-all")
def user_logout_all(username: str) -> None:
    """End every browser session of USERNAME (a lost laptop, a shared computer); API tokens
    are revoked separately, on the token settings page."""
    with session_scope(make_session_factory(make_engine(get_settings()))) as session:
        ended = revoke_user_sessions(session, _user_or_exit(session, username).id)
    typer.echo(f"ended {ended} session{'' if ended == 1 else 's'} of {username}")


@user_app.command("reset-link")
def user_reset_link(
    username: str,
    base_url: Annotated[str | None, typer.Option(help="the service's address, as users reach it (default: "
                                                      "KG_PUBLIC_URL; unset: the link's path is printed)")] = None,
) -> None:
    """Print a one-time password reset link for USERNAME (valid KG_PASSWORD_RESET_MAX_AGE_S);
    hand it to the user, who sets a new password with it (their browser sessions end)."""
    settings = get_settings()
    with session_scope(make_session_factory(make_engine(settings))) as session:
        user = _user_or_exit(session, username)
        token = issue_reset(session, user, settings.password_reset_max_age_s)
        record(session, Event.reset_issued, Via.cli, user=user, detail="grader user reset-link")
    base = base_url if base_url is not None else settings.public_url
    typer.echo(reset_link(base, token))
    if not base:
        typer.echo("that is the link's path: put the service's address in front of it (set KG_PUBLIC_URL, or "
                   "pass --base-url, to print whole links)", err=True)


@user_app.command("unlock")
def user_unlock(
    username: Annotated[str | None, typer.Argument(help="the account whose login throttle to clear")] = None,
    address: Annotated[list[str] | None, typer.Option(help="a client address to clear (repeatable)")] = None,
) -> None:
    """Clear the login throttle (failures, back-off and lock) of an account, at the login form,
    /forgot and the password page, and of client addresses (logins, /forgot, API tokens)."""
    if username is None and not address:
        typer.echo("name an account, an --address, or both", err=True)
        raise typer.Exit(2)
    with session_scope(make_session_factory(make_engine(get_settings()))) as session:
        keys: list[str] = []
        user = _user_or_exit(session, username) if username is not None else None
        if user is not None:
            keys += account_keys(user.id, user.username)
        for one in address or ():
            keys += address_keys(one)
        cleared = unlock(session, keys)
        record(session, Event.unlocked, Via.cli, user=user, address=", ".join(address or ()) or None,
               detail=f"cleared {', '.join(cleared)}" if cleared else "nothing was throttled")
    typer.echo(f"cleared {len(cleared)} throttle record{'' if len(cleared) == 1 else 's'}"
               + (f": {', '.join(cleared)}" if cleared else " (nothing was throttled)"))


@user_app.command("rename")
def user_rename(old: str, new: str) -> None:
    """Give the account OLD the login NEW (e.g. one of two accounts whose logins differ only by
    case, which migration 0018 left case-sensitive); its submissions, grades and tokens stay."""
    with session_scope(make_session_factory(make_engine(get_settings()))) as session:
        user = _user_or_exit(session, old)
        if not new.strip():
            typer.echo("the new login is empty", err=True)
            raise typer.Exit(2)
        taken = find_user(session, new)
        if taken is not None and taken.id != user.id:
            typer.echo(f"the login {new!r} is taken by {taken.username!r} (logins are case-insensitive)", err=True)
            raise typer.Exit(1)
        before, user.username = user.username, new.strip()
        record(session, Event.renamed, Via.cli, user=user, detail=f"{before} -> {user.username}")
        typer.echo(f"{before} is now {user.username}")


@user_app.command("audit")
def user_audit(
    username: Annotated[str | None, typer.Argument(help="only events about this login")] = None,
    limit: Annotated[int, typer.Option(help="how many, newest first")] = 50,
) -> None:
    """The audit log, newest first: logins and failures, throttles and locks, unlocks, reset
    links issued and used, changes of passwords, e-mails and site roles, enrollments of existing
    accounts, and what the ownership rules refused (when, event, via, account, address, who
    acted, detail)."""
    with session_scope(make_session_factory(make_engine(get_settings()))) as session:
        for event in recent(session, limit, login=username):
            actor = session.get(User, event.actor_id) if event.actor_id is not None else None
            typer.echo("\t".join([f"{event.at:%Y-%m-%d %H:%M:%S}Z", event.event, event.via, event.login or "-",
                                  event.address or "-", actor.username if actor else "-", event.detail]))


@token_app.command("create")
def token_create(
    username: str,
    name: Annotated[str, typer.Option(help="label for the token")] = "cli",
    scope: Annotated[list[str] | None, typer.Option(help="scope (repeatable); default by role")] = None,
) -> None:
    """Create an API token for USERNAME and print it (it is shown only once)."""
    sessions = make_session_factory(make_engine(get_settings()))
    with session_scope(sessions) as session:
        typer.echo(issue_token(session, _user_or_exit(session, username), name, tuple(scope) if scope else None))


@roster_app.command("import")
def roster_import(
    file: Annotated[Path, typer.Argument(help="CSV: email,name[,section] per line, or a header row naming the "
                                              "columns (a Canvas gradebook export: Student, ID, SIS User ID, "
                                              "SIS Login ID, Section; or username/login, name, email, section)",
                                         exists=True, dir_okay=False)],
    out: Annotated[Path | None, typer.Option(help="write the new accounts' first passwords here (CSV, mode 600) "
                                                  "instead of printing them")] = None,
    course: Annotated[str | None, typer.Option(help="enroll the students in this course (default: the course "
                                                    "of KG_RUBRICS' first assignment)")] = None,
) -> None:
    """Create (or update) student accounts from a roster CSV, enrolled in one course (the file's
    names, sections, addresses and Canvas ids kept for that course only). New accounts' first
    passwords are printed once as a login,password CSV; exits 1 when a line could not be imported."""
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        typer.echo(f"{file} is not UTF-8 text", err=True)
        raise typer.Exit(2) from None
    settings = get_settings()
    with session_scope(make_session_factory(make_engine(settings))) as session:
        report = import_roster(session, text, course_or_exit(session, course) if course
                               else _default_course(session, settings.rubrics[0]), settings.argon2)
    if out is not None:
        write_private(out, report.passwords_csv())  # first passwords: 0600 from the first byte
    elif report.created:
        typer.echo(report.passwords_csv(), nl=False)
    for error in report.errors:
        typer.echo(str(error), err=True)
    typer.echo(report.summary() + (f"; passwords in {out}" if out is not None and report.created else ""), err=True)
    if report.errors:
        raise typer.Exit(1)


def _default_course(session: Session, slug: str) -> Course:
    return _found(course_holding(session, slug),
                  f"{slug} is in no course: name the course with --course (`grader course list` shows them)")


def register(app: typer.Typer) -> None:
    """Add `course`, `user`, `token` and `roster` to the `grader` Typer app."""
    app.add_typer(course_app, name="course")
    app.add_typer(user_app, name="user")
    app.add_typer(roster_app, name="roster")
    app.add_typer(token_app, name="token")
