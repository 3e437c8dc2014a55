"""SQLAlchemy 2 models. The schema is created by Alembic (alembic/versions), never create_all."""
from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship, validates
from sqlalchemy.types import TypeDecorator

from grader.roles import CourseRole, Power, Role, granted_powers
from worker.states import ACTIVE_STATES, FINAL_STATES, WAITING_STATES, ErrorClass, RunState

__all__ = ["ACTIVE_STATES", "FINAL_STATES", "WAITING_STATES", "CourseRole", "ErrorClass", "Role", "RunState"]


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite drops the zone on the way back)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, datetime: UTCDateTime}


def _enum(cls: type[enum.Enum]) -> Enum:
    # Stored as plain strings (no native DB enum) so adding a value needs no type migration.
    return Enum(cls, native_enum=False, length=32, validate_strings=True)


def login_key(login: str) -> str:
    """What two logins must share to name the same account (grader.auth.logins): case-insensitive."""
    return login.strip().casefold()


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(String(128), unique=True)
    role: Mapped[Role] = mapped_column(_enum(Role))
    password_hash: Mapped[str | None] = mapped_column(String(256))  # Argon2id; None: no web login
    # The person's own display name and e-mail address: set when the account is made (by the
    # roster import that makes it, or the CLI), never by a later import. /forgot mails reset links
    # to this address only; a course's pages and notices read the enrollment's own copy first
    # (grader.course.roster_entries), which is what that course's roster says.
    full_name: Mapped[str | None] = mapped_column(String(256))
    email: Mapped[str | None] = mapped_column(String(256))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Who may change the login, password and e-mail of an account: grader.auth.ownership.
    # A site administrator may change anyone's; made by `grader user admin` only.
    site_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    # When the account's person first used it (a login with their password, a link they used, an
    # API token of theirs); None: never, the only time an instructor may give it a first-login link
    first_login_at: Mapped[datetime | None]
    # The person's choice to get their courses' staff mail (new regrade requests, failed grading)
    staff_mail: Mapped[bool] = mapped_column(Boolean, default=True)
    # The login case-folded (login_key), set with the username: logins are case-insensitive and
    # unique so. None only for accounts migration 0018 found differing from another by case alone.
    login_key: Mapped[str | None] = mapped_column(String(128), unique=True, index=True)
    # The course whose staff set up the first password (that course's roster import made the
    # account) and the e-mail address (that import, or that course's instructor) of an account
    # nobody has used yet; None: the operator, a site administrator or the person set it, or it
    # is not set. Such a way in works only while no other course holds the account
    # (grader.auth.set_up); both are cleared at the first use.
    password_set_up_by_course_id: Mapped[int | None] = mapped_column(
        ForeignKey("courses.id", ondelete="SET NULL", name="fk_users_password_set_up_by_course"))
    email_set_up_by_course_id: Mapped[int | None] = mapped_column(
        ForeignKey("courses.id", ondelete="SET NULL", name="fk_users_email_set_up_by_course"))

    tokens: Mapped[list[ApiToken]] = relationship(back_populates="user")

    @validates("username")
    def _keyed(self, _: str, username: str) -> str:
        self.login_key = login_key(username)
        return username

    def note_first_login(self) -> None:
        """Its person uses it now: from the first time on, the account is theirs (grader.auth.ownership)."""
        if self.first_login_at is None:
            self.first_login_at = utcnow()
        self.password_set_up_by_course_id = self.email_set_up_by_course_id = None


class ApiToken(Base):
    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(128))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 hex of the token
    scopes: Mapped[str] = mapped_column(String(256))  # space-separated
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]

    user: Mapped[User] = relationship(back_populates="tokens")

    @property
    def scope_set(self) -> frozenset[str]:
        return frozenset(self.scopes.split())


class WebSession(Base):
    """A browser login (grader/auth/sessions.py): the cookie carries the random session id, this
    row only its sha256. Refused once revoked or past its expiry."""

    __tablename__ = "web_sessions"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    id_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)  # sha256 hex of the session id
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]

    user: Mapped[User] = relationship()


class PasswordReset(Base):
    """A one-time password reset link (grader.auth.password_reset): the link carries a random
    token, this row only its sha256. Refused once used or past its expiry."""

    __tablename__ = "password_resets"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    issued_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))  # None: CLI
    # The course whose instructor issued it as a first-login link; None: a site administrator,
    # the operator or /forgot. Such a link works only as users' set-up columns do (grader.auth.set_up).
    set_up_by_course_id: Mapped[int | None] = mapped_column(
        ForeignKey("courses.id", ondelete="SET NULL", name="fk_password_resets_set_up_by_course"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None]

    user: Mapped[User] = relationship(foreign_keys=[user_id])


class LoginThrottle(Base):
    """Failed attempts of one key (an account or a client address, at one door) and until when
    it is refused (grader.auth.throttle). A row per key, shared by every web process."""

    __tablename__ = "login_throttles"

    key: Mapped[str] = mapped_column(String(300), primary_key=True)
    failures: Mapped[int] = mapped_column(Integer)
    last_failure_at: Mapped[datetime]
    blocked_until: Mapped[datetime | None]


class UploadHit(Base):
    """One upload attempt the rate limit counts (grader.ratelimit): its sender (`user:ID` or
    `address:IP`) and when; kept for one window, shared by every web process."""

    __tablename__ = "upload_hits"
    __table_args__ = (Index("ix_upload_hits_sender_at", "sender", "at"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    sender: Mapped[str] = mapped_column(String(300))
    at: Mapped[datetime]


class AuditEvent(Base):
    """One security event (grader.auth.audit): logins, failures, locks, unlocks, reset links.
    `actor_id` is who acted when it is not the account's own holder (staff issuing a link; None
    for a visitor or the command line), `user_id` the account concerned, `login` its name as
    typed or known, `via` web, api or cli."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    event: Mapped[str] = mapped_column(String(32))
    via: Mapped[str] = mapped_column(String(8))
    actor_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), index=True)
    login: Mapped[str | None] = mapped_column(String(256))
    address: Mapped[str | None] = mapped_column(String(64))
    detail: Mapped[str] = mapped_column(String(512), default="")


class Course(Base):
    """A course: its assignments, and one roster and staff list (its enrollments). Several
    courses share a service; an assignment belongs to at most one (grader.course.courses)."""

    __tablename__ = "courses"

    id: Mapped[int] = mapped_column(primary_key=True)
    slug: Mapped[str] = mapped_column(String(64), unique=True)
    title: Mapped[str] = mapped_column(String(256))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Graded runs each student may start per assignment in the quota window (grader.course.quotas);
    # None: KG_QUOTA_RUNS. An assignment may set its own.
    quota_runs: Mapped[int | None] = mapped_column(Integer)
    # What its instructors let its TAs do besides viewing and grading (grader.roles.TA_GRANTABLE,
    # names comma-separated; read through `ta_granted`); empty: nothing more
    ta_powers: Mapped[str] = mapped_column(String(64), default="", server_default="")

    assignments: Mapped[list[Assignment]] = relationship(back_populates="course", order_by="Assignment.slug")

    @property
    def ta_granted(self) -> frozenset[Power]:
        return granted_powers(self.ta_powers or "")


class Assignment(Base):
    """One graded assignment: its slug is its rubric's (grader.service.sync_assignments), unique
    on the service. Its course says who may see it and as what; without one, nobody does yet."""

    __tablename__ = "assignments"

    id: Mapped[int] = mapped_column(primary_key=True)
    slug: Mapped[str] = mapped_column(String(64), unique=True)
    title: Mapped[str] = mapped_column(String(256))
    total_points: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    course_id: Mapped[int | None] = mapped_column(ForeignKey("courses.id"), index=True)
    # Schedule and late policy (grader.course.deadlines; read through grader.course.policies.late_policy)
    release_at: Mapped[datetime | None]
    due_at: Mapped[datetime | None]
    grace_s: Mapped[int] = mapped_column(Integer, default=0)
    late_window_s: Mapped[int] = mapped_column(Integer, default=0)  # from due_at, grace included
    late_penalty_per_day: Mapped[float] = mapped_column(Float, default=0.0)
    score_policy: Mapped[str] = mapped_column(String(16), default="latest")  # latest | best
    # Paused: new runs are stored and queued but not sent to the broker (grader.runs.grading_control)
    grading_paused: Mapped[bool] = mapped_column(Boolean, default=False)
    # A student may choose which of their own scored runs counts (grader.course.counted_choice); off by default
    students_choose_counted_run: Mapped[bool] = mapped_column(Boolean, default=False)
    # The similarity check's base, the starter its students received (grader.similarity.base):
    # "upload" (the zip staff gave), "git:<repository>@<ref>", or None (the rubric's default)
    similarity_base: Mapped[str | None] = mapped_column(String(512))
    # Sources the similarity check lists (grader.similarity.public): known solutions every student is
    # matched against and common code left out; a list of {"kind": "git", "spec": ..., "role": ...}
    # or {"kind": "upload", "filename": ..., "sha256": ..., "role": ...}; None: none
    similarity_sources: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)
    # Points a grade may reach above total_points through the staff's entries (extra credit; 0: none)
    extra_credit_points: Mapped[float] = mapped_column(Float, default=0.0)
    # The assignment's id in Canvas (digits): the Canvas CSV titles its column `<title> (<id>)`,
    # which Canvas matches to that assignment (grader.api.gradebook.canvas_csv); None: the title alone
    canvas_assignment_id: Mapped[str | None] = mapped_column(String(32))
    # The bytes each student may keep in it (grader.course.storage); None: KG_STORAGE_QUOTA_BYTES
    storage_quota_bytes: Mapped[int | None] = mapped_column(BigInteger)
    # Graded runs each student may start in it per quota window; None: its course's (grader.course.policies.run_limit)
    quota_runs: Mapped[int | None] = mapped_column(Integer)

    course: Mapped[Course | None] = relationship(back_populates="assignments")


class Enrollment(Base):
    """A user's part in one course, for every assignment it holds (grader.course.membership):
    instructor, TA or student (grader.roles: what each may do), and what the course's roster
    says of them (grader.course.roster, read through grader.course.roster_entries): kept per
    course, so one course's import never changes what another shows. None: the roster gave none."""

    __tablename__ = "enrollments"
    __table_args__ = (UniqueConstraint("user_id", "course_id"),
                      Index("uq_enrollments_course_canvas_user", "course_id", "canvas_user_id", unique=True))

    id: Mapped[int] = mapped_column(primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("courses.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    role: Mapped[CourseRole] = mapped_column(_enum(CourseRole))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    full_name: Mapped[str | None] = mapped_column(String(256))  # as the roster gives it
    section: Mapped[str | None] = mapped_column(String(64))
    email: Mapped[str | None] = mapped_column(String(256))  # where this course's notices go (grader.notify)
    canvas_user_id: Mapped[str | None] = mapped_column(String(32))  # Canvas's `ID` (digits)
    sis_user_id: Mapped[str | None] = mapped_column(String(256))  # Canvas's `SIS User ID`
    sis_login_id: Mapped[str | None] = mapped_column(String(256))  # Canvas's `SIS Login ID`, in its own case
    # When the LMS's roster (LTI Names and Roles) stopped listing them (grader.lti.roster_sync);
    # None: listed, or the course has no LMS. Their runs and grades stay.
    dropped_at: Mapped[datetime | None]


class Extension(Base):
    """Extra time for one student on one assignment: moves their due date (grader.course.deadlines)."""

    __tablename__ = "extensions"
    __table_args__ = (UniqueConstraint("assignment_id", "user_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignments.id", ondelete="CASCADE"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    extra_s: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(Text)
    granted_at: Mapped[datetime] = mapped_column(default=utcnow)


class GpuCalibration(Base):
    """Per-GPU-model speedup targets for an assignment, measured on our reference kit."""

    __tablename__ = "gpu_calibrations"
    __table_args__ = (UniqueConstraint("assignment_id", "gpu_name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignments.id"))
    gpu_name: Mapped[str] = mapped_column(String(128))
    targets: Mapped[dict[str, Any]]  # problem id -> target speedup
    margin: Mapped[float] = mapped_column(Float)
    details: Mapped[dict[str, Any] | None]  # measured speedups, telemetry
    measured_at: Mapped[datetime] = mapped_column(default=utcnow)


class SimilarityJob(Base):
    """One computation of an assignment's similarity report by a worker (grader.similarity.jobs):
    queued -> running -> done | failed, with the files fingerprinted so far."""

    __tablename__ = "similarity_jobs"
    __table_args__ = (Index("ix_similarity_jobs_assignment", "assignment_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignments.id"))
    requested_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    state: Mapped[str] = mapped_column(String(16), default="queued")  # queued | running | done | failed
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    files_done: Mapped[int] = mapped_column(Integer, default=0)
    files_total: Mapped[int] = mapped_column(Integer, default=0)
    base: Mapped[str | None] = mapped_column(String(512))  # the base compared against, in words
    error: Mapped[str | None] = mapped_column(Text)


class RosterJob(Base):
    """One roster import run by a worker (grader.course.roster_jobs): queued -> running -> done |
    failed, with the students imported so far and the result. No password is stored: the new
    accounts' first passwords are derived from a key only the requester's browser holds
    (key_digest checks it), and `passwords_taken_at` records their one download."""

    __tablename__ = "roster_jobs"
    __table_args__ = (Index("ix_roster_jobs_requested_by", "requested_by"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("courses.id"))  # where its students are enrolled
    requested_by: Mapped[int] = mapped_column(ForeignKey("users.id"))
    state: Mapped[str] = mapped_column(String(16), default="queued")  # queued | running | done | failed
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    roster: Mapped[str | None] = mapped_column(Text)  # the CSV as uploaded; cleared once the job ends
    lines_done: Mapped[int] = mapped_column(Integer, default=0)
    lines_total: Mapped[int] = mapped_column(Integer, default=0)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # created, updated, unchanged, errors
    key_digest: Mapped[str] = mapped_column(String(64))  # SHA-256 of the passwords' key, hex
    passwords_taken_at: Mapped[datetime | None]
    error: Mapped[str | None] = mapped_column(Text)


class Submission(Base):
    __tablename__ = "submissions"
    __table_args__ = (Index("ix_submissions_user_assignment", "user_id", "assignment_id"),
                      UniqueConstraint("user_id", "idempotency_key", name="uq_submissions_user_idempotency_key"))

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignments.id"))
    original_filename: Mapped[str] = mapped_column(String(512))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64), index=True)
    uploaded_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The client's Idempotency-Key header (API uploads): a repeat answers with this submission
    idempotency_key: Mapped[str | None] = mapped_column(String(128))

    user: Mapped[User] = relationship()
    assignment: Mapped[Assignment] = relationship()
    runs: Mapped[list[Run]] = relationship(back_populates="submission", order_by="Run.id")


REDUCED_ISOLATION = "reduced_isolation"  # Run.toolchain's key: what the worker's sandbox lacked, in words


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (Index("ix_runs_state", "state"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id"), index=True)
    state: Mapped[RunState] = mapped_column(_enum(RunState), default=RunState.queued)
    error_class: Mapped[ErrorClass | None] = mapped_column(_enum(ErrorClass))
    message: Mapped[str | None] = mapped_column(Text)
    reason: Mapped[str] = mapped_column(String(32), default="upload")  # upload | regrade
    score: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    enqueued_at: Mapped[datetime | None]  # last time a task for it reached the broker
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    # Claim (at most one live worker per run): set atomically, refreshed by a heartbeat.
    claimed_by: Mapped[str | None] = mapped_column(String(128))
    heartbeat_at: Mapped[datetime | None]
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker_host: Mapped[str | None] = mapped_column(String(256))
    # nvcc, its flags, Python, the host; and REDUCED_ISOLATION where the worker's sandbox lacked something
    toolchain: Mapped[dict[str, Any] | None]
    stages: Mapped[dict[str, Any] | None]  # stage name -> {status, seconds, log}
    report: Mapped[dict[str, Any] | None]  # Gradescope-format results.json of a scored run
    # Where an active run is: {"stage": ...} or {"stage": "run", "problem", "index", "total"}
    progress: Mapped[dict[str, Any] | None]
    # worker.measure_key's sha256 of what its measurements depend on (runs with a GPU stage), and
    # the run whose measurements it took instead of measuring, where it did (grader.runs.reuse)
    measure_key: Mapped[str | None] = mapped_column(String(64), index=True)
    reused_from: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))

    submission: Mapped[Submission] = relationship(back_populates="runs")
    results: Mapped[list[ProblemResult]] = relationship(
        back_populates="run", order_by="ProblemResult.id", cascade="all, delete-orphan"
    )
    # Staff workflow (grader.course.adjustments), oldest first; the run page reads them from the run
    regrade_requests: Mapped[list[RegradeRequest]] = relationship(
        back_populates="run", order_by="RegradeRequest.id", foreign_keys="RegradeRequest.run_id")
    comments: Mapped[list[RunComment]] = relationship(back_populates="run", order_by="RunComment.id")
    # The requests this run (a re-grade) answered
    answers: Mapped[list[RegradeRequest]] = relationship(
        back_populates="regrade_run", order_by="RegradeRequest.id", foreign_keys="RegradeRequest.regrade_run_id")


class ProblemResult(Base):
    __tablename__ = "problem_results"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    problem_id: Mapped[str] = mapped_column(String(32))
    title: Mapped[str] = mapped_column(String(256))
    status: Mapped[str] = mapped_column(String(32))  # passed | failed | not_run | error
    points: Mapped[float] = mapped_column(Float, default=0.0)
    max_points: Mapped[float] = mapped_column(Float)
    message: Mapped[str | None] = mapped_column(Text)
    details: Mapped[dict[str, Any] | None]

    run: Mapped[Run] = relationship(back_populates="results")


class GradeAdjustment(Base):
    """A staff entry on a student's grade in an assignment, with why (grader.course.adjustments):
    points added or taken (`kind` adjust), or a manual grade (`kind` manual: the grade is
    `points`; None takes it back). It belongs to the student's grade, not to a run, so it stays
    when another run comes to count (grader.course.grades.student_grade). Never changed nor
    deleted: a correction is a further entry, so the history stays whole."""

    __tablename__ = "grade_adjustments"
    __table_args__ = (Index("ix_grade_adjustments_assignment_user", "assignment_id", "user_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignments.id", ondelete="CASCADE"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))  # the student
    kind: Mapped[str] = mapped_column(String(16), default="adjust")  # adjust | manual
    points: Mapped[float | None] = mapped_column(Float)  # signed; a manual grade's points, None: taken back
    reason: Mapped[str] = mapped_column(Text)
    by_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The run that counted when it was made (its page showed the form); None: no run counted
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"), index=True)
    # Why it does not count, where it does not: migration 0020 set aside the adjustments of runs
    # that did not count, which no grade included (None: it counts)
    set_aside: Mapped[str | None] = mapped_column(Text)

    run: Mapped[Run | None] = relationship()
    by: Mapped[User] = relationship(foreign_keys=[by_id])
    answers: Mapped[list[RegradeRequest]] = relationship(back_populates="adjustment")  # the requests it answered


class CountedRun(Base):
    """The run chosen to count for one student in one assignment, instead of the score policy's
    pick (grader.reads.gradebook_reads.gradebook): by staff, or by the student (`by_id` is `user_id`)
    where the assignment lets students choose; removing the row returns to the policy."""

    __tablename__ = "counted_runs"
    __table_args__ = (UniqueConstraint("assignment_id", "user_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignments.id", ondelete="CASCADE"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    reason: Mapped[str | None] = mapped_column(Text, default=None)
    by_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class RegradeRequest(Base):
    """A student's request that staff look at a run again (grader.course.adjustments): open, then
    accepted (a re-grade run, or an adjustment) or rejected, with the staff's reply. At most one
    open request per run (the partial unique index)."""

    __tablename__ = "regrade_requests"
    __table_args__ = (Index("uq_regrade_requests_open_run", "run_id", unique=True,
                            postgresql_where=text("state = 'open'"), sqlite_where=text("state = 'open'")),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    student_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    reason: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(16), default="open")  # open | accepted | rejected
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    decided_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    decided_at: Mapped[datetime | None]
    reply: Mapped[str | None] = mapped_column(Text)
    regrade_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"))  # accepted by a re-grade
    adjustment_id: Mapped[int | None] = mapped_column(ForeignKey("grade_adjustments.id"))  # accepted by one

    run: Mapped[Run] = relationship(back_populates="regrade_requests", foreign_keys=[run_id])
    student: Mapped[User] = relationship(foreign_keys=[student_id])
    decided_by: Mapped[User | None] = relationship(foreign_keys=[decided_by_id])
    adjustment: Mapped[GradeAdjustment | None] = relationship(back_populates="answers")
    regrade_run: Mapped[Run | None] = relationship(back_populates="answers", foreign_keys=[regrade_run_id])


class RunComment(Base):
    """A comment on a run by its student or the assignment's staff (grader.course.adjustments)."""

    __tablename__ = "run_comments"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    author_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    run: Mapped[Run] = relationship(back_populates="comments")
    author: Mapped[User] = relationship()


class ExternalIdentity(Base):
    """A person's identity at a university system, tied to one account for good: an LMS's LTI
    1.3 user (the platform's issuer and its `sub`) or the single sign-on provider's (its issuer
    and `sub`). A launch or an SSO login finds its account through this pair only
    (grader.auth.identities), never by name or e-mail, and never moves it to another account."""

    __tablename__ = "external_identities"
    __table_args__ = (UniqueConstraint("issuer", "subject"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    issuer: Mapped[str] = mapped_column(String(512))
    subject: Mapped[str] = mapped_column(String(256))
    kind: Mapped[str] = mapped_column(String(8))  # "lti" | "sso" | "saml"
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)

    user: Mapped[User] = relationship()


class LtiPlatform(Base):
    """One LMS registration of this tool (grader.lti.registry): the platform's issuer, the client
    id it gave us, its OIDC login, token and key-set addresses; the deployments it may launch
    from are LtiDeployment rows. Made with `grader lti add-platform`, shown on /ops/lti."""

    __tablename__ = "lti_platforms"
    __table_args__ = (UniqueConstraint("issuer", "client_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    issuer: Mapped[str] = mapped_column(String(512))
    client_id: Mapped[str] = mapped_column(String(256))
    auth_login_url: Mapped[str] = mapped_column(String(1024))
    auth_token_url: Mapped[str] = mapped_column(String(1024))
    jwks_url: Mapped[str] = mapped_column(String(1024))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    deployments: Mapped[list[LtiDeployment]] = relationship(back_populates="platform", cascade="all, delete-orphan")


class LtiDeployment(Base):
    """A deployment id a platform launches from; a launch from any other is refused."""

    __tablename__ = "lti_deployments"
    __table_args__ = (UniqueConstraint("platform_id", "deployment_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    platform_id: Mapped[int] = mapped_column(ForeignKey("lti_platforms.id", ondelete="CASCADE"))
    deployment_id: Mapped[str] = mapped_column(String(256))

    platform: Mapped[LtiPlatform] = relationship(back_populates="deployments")


class LtiContext(Base):
    """An LMS course (the launch's context claim) and the kernelgrade course it is: made at the
    first launch of the context's instructor, who links it to a course they teach. Its service
    addresses come from the latest launch: the roster (NRPS) and the line items (AGS)."""

    __tablename__ = "lti_contexts"
    __table_args__ = (UniqueConstraint("platform_id", "context_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    platform_id: Mapped[int] = mapped_column(ForeignKey("lti_platforms.id", ondelete="CASCADE"))
    deployment_id: Mapped[str] = mapped_column(String(256))
    context_id: Mapped[str] = mapped_column(String(256))
    title: Mapped[str | None] = mapped_column(String(256))
    course_id: Mapped[int | None] = mapped_column(ForeignKey("courses.id", ondelete="SET NULL"), index=True)
    memberships_url: Mapped[str | None] = mapped_column(String(1024))
    lineitems_url: Mapped[str | None] = mapped_column(String(1024))
    roster_synced_at: Mapped[datetime | None]

    platform: Mapped[LtiPlatform] = relationship()
    course: Mapped[Course | None] = relationship()


class LtiResourceLink(Base):
    """One LMS link (resource link id) and the assignment it opens: set by deep linking, or by the
    context's instructor at the link's first launch. `lineitem_url`: the LMS gradebook column its
    grades go to (AGS), from the launch or made by the tool."""

    __tablename__ = "lti_resource_links"
    __table_args__ = (UniqueConstraint("context_id", "resource_link_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    context_id: Mapped[int] = mapped_column(ForeignKey("lti_contexts.id", ondelete="CASCADE"), index=True)
    resource_link_id: Mapped[str] = mapped_column(String(256))
    title: Mapped[str | None] = mapped_column(String(256))
    assignment_id: Mapped[int | None] = mapped_column(ForeignKey("assignments.id", ondelete="SET NULL"), index=True)
    lineitem_url: Mapped[str | None] = mapped_column(String(1024))
    # When its grades were last read for sending (grader.lti.passback): a grade event after it
    # (a run finished, an entry, a choice of run, an extension) sends them again
    grades_checked_at: Mapped[datetime | None]

    context: Mapped[LtiContext] = relationship()
    assignment: Mapped[Assignment | None] = relationship()


class LtiLaunchState(Base):
    """One OIDC login initiation (grader.lti.launch): the state and nonce sent to the platform,
    used once, within minutes. The nonce stays recorded after use so a replayed id_token is
    refused."""

    __tablename__ = "lti_launch_states"

    id: Mapped[int] = mapped_column(primary_key=True)
    state_hash: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 hex of the state
    nonce: Mapped[str] = mapped_column(String(64), unique=True)
    platform_id: Mapped[int] = mapped_column(ForeignKey("lti_platforms.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(index=True)
    used_at: Mapped[datetime | None]
    # A launch shown inside the LMS's frame, where no cookie of ours may be set, is entered in a
    # window of our own through a one-time link: the sha256 of its token, the person, where it
    # goes, and when it was used (grader.lti.entry)
    entry_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    entry_user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    entry_target: Mapped[str | None] = mapped_column(String(512))
    entered_at: Mapped[datetime | None]


class LtiGradeSend(Base):
    """The last grade sent (or not) to the LMS for one student on one link (grader.lti.passback):
    what the gradebook says now is sent when it differs from `points`; `status` sent | skipped |
    failed | pending, `detail` why (the LMS's answer for a failure)."""

    __tablename__ = "lti_grade_sends"
    __table_args__ = (UniqueConstraint("link_id", "user_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    link_id: Mapped[int] = mapped_column(ForeignKey("lti_resource_links.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(16))
    points: Mapped[float | None] = mapped_column(Float)
    detail: Mapped[str] = mapped_column(String(512), default="")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class GpuWorkerEvent(Base):
    """What happened to one GPU's worker under `grader worker --gpus` (grader.gpu_events, from
    grader.gpu_workers.Supervisor): `kind` started (the supervisor's first start of it), restarted
    (it exited and was started again) or left_out (it exited once too often in a row: that GPU
    grades nothing until its host's supervisor starts it again). `exit_code` or `signal` say how
    it exited; `restarts` the restarts in a row then. Shown on /ops/workers."""

    __tablename__ = "gpu_worker_events"
    __table_args__ = (Index("ix_gpu_worker_events_gpu", "host", "gpu_index", "id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    gpu_index: Mapped[int] = mapped_column(Integer)
    gpu_uuid: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(16))
    exit_code: Mapped[int | None] = mapped_column(Integer)
    signal: Mapped[int | None] = mapped_column(Integer)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
