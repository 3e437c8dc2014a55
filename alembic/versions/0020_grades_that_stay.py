"""Grades that stay: a staff adjustment belongs to the student's grade in the assignment, not to
one run (grade_adjustments.assignment_id and user_id; run_id now only says which run counted
when it was made, and survives the run), manual grades (kind 'manual': the grade is these
points, none taking one back), and extra credit (assignments.extra_credit_points, how far above
its points an adjusted grade may go; 0 as before) (grader.course.grades.student_grade)

No total a student has today changes. Today a run's adjustments count only while that run
counts, so:
- the adjustments of the run that counts for the student today move onto the student's grade;
- those of any other run counted in no grade: they stay in the history, set aside with why
  (grade_adjustments.set_aside), and count nowhere;
- under the "best" policy today's pick compared runs with their adjustments, the new one
  compares the runs' own grades: where they differ, the run that counts today is chosen to count
  (a counted_runs row by the author of the student's newest adjustment, saying why), so it
  keeps counting.
Today's pick is computed as the gradebook computes it: scored runs, the effective choice of the
run that counts (staff's, or the student's where the assignment lets students choose), the late
policy with the student's extension (the course's pure rule, grader.course.deadlines, which the
gradebook reads too), ties to the newer submission and run.

Downgrading puts each adjustment back on the run it names (set-aside ones too, as they were);
manual grades and adjustments made with no run counting are dropped.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-03
"""
from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

import sqlalchemy as sa
from alembic import op

from grader.course.deadlines import Extension, LatePolicy, evaluate

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

SET_ASIDE = ("made on run {run}, which did not count for the student's grade when adjustments moved from runs "
             "to the student's grade (migration 0020), so no grade included it")
KEPT = ("kept by migration 0020: run {run} counted with its adjustments when they moved to the student's grade, "
        "so the grade stays as it was")
# SQLite's reflected foreign keys have no name; batch mode names them by this convention
CONVENTION = {"fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s"}

_utc = sa.DateTime(timezone=True)
assignments = sa.table("assignments", *(sa.column(c, t) for c, t in (
    ("id", sa.Integer()), ("score_policy", sa.String()), ("students_choose_counted_run", sa.Boolean()),
    ("release_at", _utc), ("due_at", _utc), ("grace_s", sa.Integer()), ("late_window_s", sa.Integer()),
    ("late_penalty_per_day", sa.Float()), ("total_points", sa.Float()))))
extensions = sa.table("extensions", sa.column("assignment_id", sa.Integer()), sa.column("user_id", sa.Integer()),
                      sa.column("extra_s", sa.Integer()))
submissions = sa.table("submissions", sa.column("id", sa.Integer()), sa.column("user_id", sa.Integer()),
                       sa.column("assignment_id", sa.Integer()), sa.column("uploaded_at", _utc))
runs = sa.table("runs", sa.column("id", sa.Integer()), sa.column("submission_id", sa.Integer()),
                sa.column("state", sa.String()), sa.column("score", sa.Float()))
counted_runs = sa.table("counted_runs", *(sa.column(c, sa.Integer()) for c in (
    "assignment_id", "user_id", "run_id", "by_id")), sa.column("reason", sa.Text()), sa.column("created_at", _utc))
adjustments = sa.table("grade_adjustments", *(sa.column(c, sa.Integer()) for c in (
    "id", "run_id", "assignment_id", "user_id", "by_id")), sa.column("kind", sa.String()),
    sa.column("points", sa.Float()), sa.column("set_aside", sa.Text()))


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _maybe(value: datetime | None) -> datetime | None:
    return None if value is None else _aware(value)


class _Scored(NamedTuple):  # not a dataclass: Alembic loads this module outside sys.modules
    run_id: int
    submission_id: int
    after_late: float  # the run's own grade: its score less the late penalty

    def newer(self) -> tuple[int, int]:
        return self.submission_id, self.run_id


def _scored_runs(conn: sa.Connection, assignment: sa.Row, user_id: int) -> list[_Scored]:
    policy = LatePolicy(release_at=_maybe(assignment.release_at), due_at=_maybe(assignment.due_at),
                        grace=timedelta(seconds=assignment.grace_s or 0),
                        late_window=timedelta(seconds=assignment.late_window_s or 0),
                        penalty_per_day=assignment.late_penalty_per_day or 0.0)
    extra = conn.scalar(sa.select(extensions.c.extra_s).where(extensions.c.assignment_id == assignment.id,
                                                             extensions.c.user_id == user_id))
    extension = Extension(timedelta(seconds=extra)) if extra is not None else None
    rows = conn.execute(sa.select(runs.c.id, runs.c.submission_id, runs.c.score, submissions.c.uploaded_at)
                        .join(submissions, submissions.c.id == runs.c.submission_id)
                        .where(submissions.c.assignment_id == assignment.id, submissions.c.user_id == user_id,
                               runs.c.state == "scored", runs.c.score.is_not(None)))
    return [_Scored(run_id, submission_id,
                    round(evaluate(policy, _aware(uploaded_at), extension).adjust(score), 2))
            for run_id, submission_id, score, uploaded_at in rows]


def _move(conn: sa.Connection) -> None:
    """Fill assignment_id and user_id from each adjustment's run, then keep counting exactly the
    adjustments that count today (the module's docstring)."""
    owner = (sa.select(submissions.c.assignment_id, submissions.c.user_id)
             .join(runs, runs.c.submission_id == submissions.c.id).where(runs.c.id == adjustments.c.run_id))
    conn.execute(adjustments.update().values(assignment_id=owner.with_only_columns(submissions.c.assignment_id)
                                             .scalar_subquery(),
                                             user_id=owner.with_only_columns(submissions.c.user_id).scalar_subquery()))
    made: dict[tuple[int, int], dict[int, list[tuple[int, float, int]]]] = defaultdict(lambda: defaultdict(list))
    for adj_id, run_id, assignment_id, user_id, points, by_id in conn.execute(sa.select(
            adjustments.c.id, adjustments.c.run_id, adjustments.c.assignment_id, adjustments.c.user_id,
            adjustments.c.points, adjustments.c.by_id).order_by(adjustments.c.id)):
        made[(assignment_id, user_id)][run_id].append((adj_id, points, by_id))
    for (assignment_id, user_id), by_run in made.items():
        assignment = conn.execute(sa.select(assignments).where(assignments.c.id == assignment_id)).one()
        scored = {s.run_id: s for s in _scored_runs(conn, assignment, user_id)}
        today = _counted_today(conn, assignment, user_id, scored, by_run)
        for run_id, made_on in by_run.items():
            if run_id != today:
                conn.execute(adjustments.update().where(adjustments.c.id.in_([a for a, _, _ in made_on]))
                             .values(set_aside=SET_ASIDE.format(run=run_id)))
        pinned = conn.scalar(sa.select(counted_runs.c.run_id).where(counted_runs.c.assignment_id == assignment_id,
                                                                    counted_runs.c.user_id == user_id))
        best = max(scored.values(), key=lambda s: (s.after_late, *s.newer()), default=None)
        if today is not None and pinned != today and assignment.score_policy == "best" and best is not None \
                and best.run_id != today:
            conn.execute(counted_runs.delete().where(counted_runs.c.assignment_id == assignment_id,
                                                     counted_runs.c.user_id == user_id))
            conn.execute(counted_runs.insert().values(assignment_id=assignment_id, user_id=user_id, run_id=today,
                                                      by_id=max(made for made_on in by_run.values()
                                                                for made in made_on)[2],
                                                      reason=KEPT.format(run=today),
                                                      created_at=datetime.now(UTC)))


def _counted_today(conn: sa.Connection, assignment: sa.Row, user_id: int, scored: dict[int, _Scored],
                   by_run: dict[int, list[tuple[int, float, int]]]) -> int | None:
    """The run that counts for the student before this revision: the effective choice while its
    run is scored, else the policy's pick, where "best" compares each run's grade with its own
    adjustments, clamped to [0, total] (grader.course.grades.final_grade as of revision 0019)."""
    pin = conn.execute(sa.select(counted_runs.c.run_id, counted_runs.c.by_id).where(
        counted_runs.c.assignment_id == assignment.id, counted_runs.c.user_id == user_id)).first()
    if pin is not None and pin.run_id in scored and (pin.by_id != user_id or assignment.students_choose_counted_run):
        return int(pin.run_id)
    if not scored:
        return None
    if assignment.score_policy != "best":
        return max(scored.values(), key=_Scored.newer).run_id
    def today(s: _Scored) -> float:
        made_on = by_run.get(s.run_id)
        if not made_on:
            return s.after_late
        return round(min(max(s.after_late + sum(points for _, points, _ in made_on), 0.0), float(assignment.total_points)), 2)

    return max(scored.values(), key=lambda s: (today(s), *s.newer())).run_id


def _run_fk(conn: sa.Connection) -> str:
    """The name of grade_adjustments' foreign key to runs (PostgreSQL names it; SQLite's has the
    convention's name inside a batch)."""
    for fk in sa.inspect(conn).get_foreign_keys("grade_adjustments"):
        if fk["referred_table"] == "runs" and fk["name"]:
            return str(fk["name"])
    return "fk_grade_adjustments_run_id_runs"


def upgrade() -> None:
    with op.batch_alter_table("assignments") as batch:
        batch.add_column(sa.Column("extra_credit_points", sa.Float(), nullable=False, server_default="0"))
    fk = _run_fk(op.get_bind())
    with op.batch_alter_table("grade_adjustments", naming_convention=CONVENTION) as batch:
        batch.add_column(sa.Column("assignment_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("user_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("kind", sa.String(length=16), nullable=False, server_default="adjust"))
        batch.add_column(sa.Column("set_aside", sa.Text(), nullable=True))
        batch.alter_column("points", existing_type=sa.Float(), nullable=True)
        batch.alter_column("run_id", existing_type=sa.Integer(), nullable=True)
        batch.drop_constraint(fk, type_="foreignkey")
        batch.create_foreign_key("fk_grade_adjustments_run_id", "runs", ["run_id"], ["id"], ondelete="SET NULL")
    _move(op.get_bind())
    with op.batch_alter_table("grade_adjustments") as batch:
        batch.alter_column("assignment_id", existing_type=sa.Integer(), nullable=False)
        batch.alter_column("user_id", existing_type=sa.Integer(), nullable=False)
        batch.create_foreign_key("fk_grade_adjustments_assignment_id", "assignments", ["assignment_id"], ["id"],
                                 ondelete="CASCADE")
        batch.create_foreign_key("fk_grade_adjustments_user_id", "users", ["user_id"], ["id"], ondelete="CASCADE")
        batch.create_index("ix_grade_adjustments_assignment_user", ["assignment_id", "user_id"])


def downgrade() -> None:
    conn = op.get_bind()
    conn.execute(adjustments.delete().where(sa.or_(adjustments.c.kind != "adjust", adjustments.c.run_id.is_(None),
                                                   adjustments.c.points.is_(None))))
    with op.batch_alter_table("grade_adjustments") as batch:
        batch.drop_index("ix_grade_adjustments_assignment_user")
        batch.drop_constraint("fk_grade_adjustments_user_id", type_="foreignkey")
        batch.drop_constraint("fk_grade_adjustments_assignment_id", type_="foreignkey")
        batch.drop_constraint("fk_grade_adjustments_run_id", type_="foreignkey")
        batch.create_foreign_key("grade_adjustments_run_id_fkey", "runs", ["run_id"], ["id"], ondelete="CASCADE")
        batch.alter_column("run_id", existing_type=sa.Integer(), nullable=False)
        batch.alter_column("points", existing_type=sa.Float(), nullable=False)
        batch.drop_column("set_aside")
        batch.drop_column("kind")
        batch.drop_column("user_id")
        batch.drop_column("assignment_id")
    with op.batch_alter_table("assignments") as batch:
        batch.drop_column("extra_credit_points")
