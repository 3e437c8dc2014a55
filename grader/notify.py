"""Run notices by e-mail: when a run ends, its student gets the grade (or why the run was not
graded) and a link to the run page, where a mail server is configured (KG_SMTP_HOST) and the
student has an address: the one their course's roster gave (the enrollment's), else their
account's own (grader.course.roster_entries.notice_address). The worker sends it right after it
records the outcome; a notice that cannot be built or sent is logged, and the run is untouched.
A run that failed on the grading side (infra_error) also tells the course's staff
(failure_messages), once per KG_STAFF_MAIL_QUIET_S. Also the reset links people ask for on
/forgot (reset_message, send_reset_link), the first-login links an instructor re-issues
(first_login_message), and the regrade queue's mail: a new request to the assignment's staff,
an answer to its student (request_messages, answer_messages; the web door sends them after it
answered, send_quietly). Staff mail goes to each instructor and TA of the course whose account
has an address and who has not turned it off on their account page (users.staff_mail)."""
from __future__ import annotations

import logging
import smtplib
import ssl
from dataclasses import dataclass
from datetime import timedelta
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from sqlalchemy import select
from sqlalchemy.orm import Session, object_session, sessionmaker

from grader.course.deadlines import LateStatus
from grader.course.grade_reads import counted_of, run_grades
from grader.course.membership import members_of
from grader.course.roster_entries import entry_of, notice_address, shown_name
from grader.db import session_scope
from grader.models import Assignment, Course, ErrorClass, RegradeRequest, Run, RunState, Submission, User
from grader.settings import Settings, SmtpSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProblemLine:
    problem_id: str
    title: str
    points: float
    max_points: float


@dataclass(frozen=True)
class RunNotice:
    """What one notice says, read from a final run."""

    to: str
    student: str  # their name, or their login without one
    run_id: int
    slug: str
    title: str
    state: RunState
    grade: float | None  # after a late penalty; None: not scored
    raw_score: float | None  # before the penalty; None: no penalty taken
    total_points: float
    late_reason: str | None  # where the upload fell in the schedule, when it was not on time
    message: str | None  # the run's own words (why it was not graded)
    problems: tuple[ProblemLine, ...]
    link: str
    standing: str | None = None  # the student's grade in the assignment, when it is not this run's grade


def _points(value: float) -> str:
    return f"{round(value, 2):g}"


def run_notice(session: Session, run: Run, settings: Settings) -> RunNotice | None:
    """The notice for `run`'s student; None when neither their course's roster nor their account
    gives an e-mail address."""
    submission = run.submission
    user, assignment = submission.user, submission.assignment
    entry = entry_of(session, user.id, assignment.course_id)
    to = notice_address(entry, user)
    if not to:
        return None
    grade = run_grades(session, [run], settings.course_zone).get(run.id)
    path = f"/runs/{run.id}"
    counted = counted_of(session, assignment, user.id, settings.course_zone)
    standing = None
    if counted.grade is not None and grade is not None and (counted.run_id != run.id or counted.grade.adjustments):
        other = f", from run {counted.run_id}" if counted.run_id not in (None, run.id) else ""
        standing = (f"Your grade in {assignment.slug}: {_points(counted.grade.final)} / "
                    f"{_points(assignment.total_points)}{other}. {counted.grade.reason}")
    return RunNotice(
        to=to, student=shown_name(entry, user) or user.username, run_id=run.id,
        slug=assignment.slug, title=assignment.title, state=run.state,
        grade=grade.final if grade else None, raw_score=grade.raw if grade and grade.penalty else None,
        total_points=assignment.total_points,
        late_reason=grade.reason if grade and grade.status != LateStatus.on_time.value else None,
        message=run.message,
        problems=tuple(ProblemLine(r.problem_id, r.title, r.points, r.max_points) for r in run.results),
        link=_link(settings, path), standing=standing,
    )


def _link(settings: Settings, path: str) -> str:
    """`path` on the service's public address where it is known, else the path alone."""
    return settings.public_url.rstrip("/") + path if settings.public_url else path


def _where(link: str) -> str:
    return link if link.startswith(("http://", "https://")) else f"{link} on the grader's site"


def subject(notice: RunNotice) -> str:
    if notice.grade is not None:
        return f"Run {notice.run_id} of {notice.slug}: {_points(notice.grade)} / {_points(notice.total_points)}"
    if notice.state is RunState.built:
        return f"Run {notice.run_id} of {notice.slug}: built, not scored"
    return f"Run {notice.run_id} of {notice.slug}: not graded"


def body(notice: RunNotice) -> str:
    lines = [f"Hello {notice.student},", "", f"Your run {notice.run_id} of {notice.slug} ({notice.title}) has ended.", ""]
    if notice.grade is not None:
        lines.append(f"Grade: {_points(notice.grade)} / {_points(notice.total_points)}")
        if notice.raw_score is not None:
            lines.append(f"Before the late penalty: {_points(notice.raw_score)}")
        if notice.late_reason:
            lines.append(f"Lateness: {notice.late_reason}")
        lines += ["", "Per problem" + (" (before the late penalty):" if notice.raw_score is not None else ":")]
        lines += [f"  {p.problem_id} {p.title}: {_points(p.points)} / {_points(p.max_points)}" for p in notice.problems]
        if notice.standing:
            lines += ["", notice.standing]
    elif notice.state is RunState.built:
        lines.append("Your kernels were built, but this grader has no GPU stage, so no score was recorded.")
    else:
        lines.append("It was not graded: " + (notice.message or "no reason was recorded."))
    lines += ["", f"The run page, with the details and logs: {_where(notice.link)}"]
    return _signed(lines)


def _signed(lines: list[str]) -> str:
    return "\n".join([*lines, "", "-- ", "kernelgrade (an automatic message: replies are not read)"]) + "\n"


def compose(notice: RunNotice, sender: str) -> EmailMessage:
    return _message(sender, notice.to, subject(notice), body(notice))


def first_login_message(sender: str, to: str, username: str, link: str, hours: float, course: Course,
                        issuer: User) -> EmailMessage:
    """The e-mail carrying a first-login link an instructor re-issued (grader.auth.first_logins)."""
    text = _signed([f"{issuer.full_name or issuer.username}, an instructor of {course.title} ({course.slug}), "
                    f"sent you the way into your kernelgrade account {username}.", "",
                    f"Choose your password at this link; it works once, for {hours:g} hours:", link, "",
                    "From then on the account is yours alone: nobody else can change its password or e-mail.",
                    "If the link has expired, ask your instructor for a new one."])
    return _message(sender, to, f"kernelgrade: your account for {course.slug}", text)


def reset_message(sender: str, to: str, username: str, link: str, hours: float) -> EmailMessage:
    """The e-mail carrying a reset link someone asked for on /forgot."""
    text = (f"Someone (you, we hope) asked for a new kernelgrade password for {username}.\n\n"
            f"Choose one at this link; it works once, for {hours:g} hours:\n{link}\n\n"
            "If you did not ask for it, ignore this message: your password stays as it is.\n\n"
            "-- \nkernelgrade (an automatic message: replies are not read)\n")
    return _message(sender, to, "kernelgrade: choose a new password", text)


def _message(sender: str, to: str, title: str, text: str) -> EmailMessage:
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = sender, to, title
    message["Date"] = formatdate(localtime=False, usegmt=True)
    message["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2] or None)
    message["Auto-Submitted"] = "auto-generated"  # RFC 3834: no auto-replies back to it
    message.set_content(text)
    return message


def send(server: SmtpSettings, message: EmailMessage) -> None:
    host, port, timeout = server.host, server.port, server.timeout_s
    if server.security == "tls":
        smtp: smtplib.SMTP = smtplib.SMTP_SSL(host, port, timeout=timeout, context=ssl.create_default_context())
    else:
        smtp = smtplib.SMTP(host, port, timeout=timeout)
    with smtp:
        if server.security == "starttls":
            smtp.starttls(context=ssl.create_default_context())
        if server.user:
            smtp.login(server.user, server.password)
        smtp.send_message(message)


def notify_run_ended(settings: Settings, sessions: sessionmaker[Session], run_id: int) -> None:
    """E-mail the notice of final run `run_id` (and its staff's, failure_messages), when mail
    is configured. Never raises: the outcome is already recorded, and a mail server's trouble
    must not fail or repeat a run."""
    if not settings.smtp.host:
        return
    try:
        with session_scope(sessions) as session:
            run = session.get(Run, run_id)
            notice = run_notice(session, run, settings) if run is not None else None
            staff = failure_messages(session, settings, run) if run is not None else []
        send_quietly(settings.smtp, staff)
        if notice is None:
            log.info("run %s: no e-mail notice (no address from the course roster nor the account)", run_id)
            return
        send(settings.smtp, compose(notice, settings.smtp.from_))
        log.info("run %s: e-mail notice sent to %s", run_id, notice.to)
    except Exception:  # any failure (the server, the network, the data) only costs the notice
        log.exception("run %s: the e-mail notice could not be sent; the run's result is recorded", run_id)


def staff_to_mail(session: Session, course: Course | None) -> list[User]:
    """The instructors and TAs of `course` who get its staff mail: an address, and the mail on."""
    if course is None:
        return []
    return [member for member, part in members_of(session, course)
            if part.is_staff and member.email and member.staff_mail]


def _failed_since(session: Session, course: Course, run: Run, since: timedelta) -> bool:
    """Whether another run of the course failed on the grading side within `since` before `run`."""
    if run.finished_at is None or since <= timedelta(0):
        return False
    earlier = session.scalar(
        select(Run.id).join(Submission).join(Assignment)
        .where(Assignment.course_id == course.id, Run.id != run.id, Run.error_class == ErrorClass.infra_error,
               Run.finished_at > run.finished_at - since, Run.finished_at <= run.finished_at).limit(1))
    return earlier is not None


def failure_messages(session: Session, settings: Settings, run: Run) -> list[EmailMessage]:
    """A run that failed on the grading side (infra_error), to its course's staff
    (staff_to_mail): one mail for the first such run after KG_STAFF_MAIL_QUIET_S without one,
    so an outage that fails many runs sends one mail, not one per run."""
    course = run.submission.assignment.course
    if run.error_class is not ErrorClass.infra_error or course is None:
        return []
    quiet = timedelta(seconds=settings.staff_mail_quiet_s)
    if _failed_since(session, course, run, quiet):
        return []
    slug = run.submission.assignment.slug
    text = _signed([f"Run {run.id} of {slug} ({run.submission.user.username}'s upload) failed on the grading side "
                    "(infra_error): no score was recorded, and it is not the student's fault.", "",
                    *_quoted(run.message or "no reason was recorded."), "",
                    f"The run: {_where(_link(settings, f'/runs/{run.id}'))}",
                    f"How grading is going, and re-grading: {_where(_link(settings, f'/assignments/{slug}/grading'))}",
                    "", f"Further failures in {course.slug} within {_duration(quiet)} send no other mail."])
    return [_message(settings.smtp.from_, member.email or "", f"Grading failed: run {run.id} of {slug}", text)
            for member in staff_to_mail(session, course)]


def _duration(span: timedelta) -> str:
    minutes = round(span.total_seconds() / 60)
    return f"{minutes} minute{'' if minutes == 1 else 's'}"


def request_messages(session: Session, settings: Settings, request: RegradeRequest) -> list[EmailMessage]:
    """A new regrade request, to each of its course's staff who get its mail (who answer it:
    instructors and TAs; staff_to_mail; none without mail configured)."""
    run, student, assignment = request.run, request.student, request.run.submission.assignment
    if not settings.smtp.host:
        return []
    staff = staff_to_mail(session, assignment.course)
    slug = assignment.slug
    link = _link(settings, f"/assignments/{slug}/regrade-requests#request-{request.id}")
    name = shown_name(entry_of(session, student.id, assignment.course_id), student)
    who = f"{name} ({student.username})" if name else student.username
    text = _signed([f"{who} asks for a regrade of run {run.id} of {slug}:", "", *_quoted(request.reason), "",
                    f"Answer it in the regrade queue: {_where(link)}"])
    return [_message(settings.smtp.from_, member.email, f"Regrade request on run {run.id} of {slug} by "
                     f"{student.username}", text) for member in staff if member.email]


def answer_messages(settings: Settings, requests: list[RegradeRequest]) -> list[EmailMessage]:
    """The staff's answer to each of `requests`, to its student where their course's roster or
    their account gives an address (none without mail configured)."""
    if not settings.smtp.host:
        return []
    messages = []
    for request in requests:
        student, run, session = request.student, request.run, object_session(request)
        entry = entry_of(session, student.id, run.submission.assignment.course_id) if session is not None else None
        to = notice_address(entry, student)
        if not to:
            continue
        slug = run.submission.assignment.slug
        made = [f"The grade was adjusted by {request.adjustment.points:+g} points."] if request.adjustment else []
        if request.regrade_run is not None:
            made = [f"The submission is graded again as run {request.regrade_run.id}: "
                    f"{_where(_link(settings, f'/runs/{request.regrade_run.id}'))}"]
        by = request.decided_by.username if request.decided_by else "the course staff"
        text = _signed([f"Hello {shown_name(entry, student) or student.username},", "",
                        f"Your regrade request on run {run.id} of {slug} was {request.state} by {by}.", "",
                        "Their reply:", *_quoted(request.reply or "(no reply)"), *([""] + made if made else []), "",
                        f"The run page: {_where(_link(settings, f'/runs/{run.id}'))}"])
        messages.append(_message(settings.smtp.from_, to,
                                 f"Your regrade request on run {run.id} of {slug}: {request.state}", text))
    return messages


def _quoted(text: str) -> list[str]:
    return ["> " + line for line in text.splitlines()]


def send_quietly(server: SmtpSettings, messages: list[EmailMessage]) -> None:
    """Send `messages` (a background task of the page or API route, after it answered, or the
    worker's after it recorded a run; none without mail set up). Never raises: each failure is
    logged and costs that message only; what they tell of is recorded."""
    for message in messages:
        try:
            send(server, message)
            log.info("e-mail %r sent to %s", message["Subject"], message["To"])
        except Exception:
            log.exception("the e-mail %r to %s could not be sent", message["Subject"], message["To"])


def send_reset_link(server: SmtpSettings, message: EmailMessage) -> None:
    """Send a reset link's e-mail (after the page answered). Never raises: a mail server's
    trouble is logged; the student can ask again, or ask their course staff."""
    try:
        send(server, message)
        log.info("password reset link e-mailed to %s", message["To"])
    except Exception:
        log.exception("the password reset link for %s could not be e-mailed", message["To"])
