"""Migration 0020 (grades that stay) on PostgreSQL and SQLite: a database at the revision before
it holds today's rows (adjustments on runs that count and on runs that do not, the latest and
best policies, late uploads and an extension, staff's and students' choices of the run that
counts, clamping), and after the upgrade every gradebook total is the one it had: checked
against totals worked out by hand, and, for a class of random students, against today's rule
(a run's adjustments count while that run counts; "best" compares runs with their own
adjustments). Adjustments of runs that did not count are set aside with why; where "best" would
now pick another run, the run that counted is chosen to count. A downgrade and upgrade again
keep every total."""
from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy.orm import Session

from grader.cli.main import _alembic_config
from grader.course.deadlines import Extension, LatePolicy, evaluate
from grader.models import Assignment, CountedRun, GradeAdjustment
from grader.reads.gradebook_reads import gradebook
from grader.settings import Settings

DUE = datetime(2026, 3, 20, 4, 0, tzinfo=UTC)
NOW = datetime(2026, 3, 10, tzinfo=UTC)


@dataclass
class Seed:
    """Today's rows, written at the revision before 0020, with what today's gradebook makes of them."""

    conn: sa.Connection
    tables: dict[str, sa.Table]
    ids: dict[str, int] = field(default_factory=dict)
    clock: int = 0

    def insert(self, table: str, **values: Any) -> int:
        """A row of `table`; a required column the caller leaves out gets a neutral value."""
        t = self.tables[table]
        for column in t.columns:
            if column.name in values or column.nullable or column.server_default is not None or column.primary_key:
                continue
            python = column.type.python_type
            values[column.name] = (NOW if python is datetime else False if python is bool
                                   else 0 if python in (int, float) else "x")
        return int(self.conn.execute(t.insert().values(**values)).inserted_primary_key[0])

    def assignment(self, key: str, policy: str, **values: Any) -> int:
        self.ids[key] = self.insert("assignments", slug=f"{key}-{uuid.uuid4().hex[:6]}", title=key, total_points=100,
                                    created_at=NOW, score_policy=policy, **values)
        return self.ids[key]

    def user(self, key: str, role: str = "student") -> int:
        self.ids[key] = self.insert("users", username=f"{key}-{uuid.uuid4().hex[:6]}", role=role, created_at=NOW)
        return self.ids[key]

    def run(self, assignment: str, student: str, score: float | None, uploaded: datetime = NOW,
            state: str = "scored") -> int:
        """A new submission with one run (ids grow with the calls: newer is later)."""
        self.clock += 1
        sub = self.insert("submissions", user_id=self.ids[student], assignment_id=self.ids[assignment],
                          original_filename="hw.zip", size_bytes=1, sha256=uuid.uuid4().hex * 2, uploaded_at=uploaded)
        return self.insert("runs", submission_id=sub, state=state, score=score, reason="upload",
                           created_at=NOW + timedelta(seconds=self.clock), attempts=1)

    def adjust(self, run_id: int, points: float, by: str = "prof") -> int:
        return self.insert("grade_adjustments", run_id=run_id, points=points, reason=f"{points:+g} by hand",
                           by_id=self.ids[by], created_at=NOW)

    def pin(self, assignment: str, student: str, run_id: int, by: str) -> None:
        self.insert("counted_runs", assignment_id=self.ids[assignment], user_id=self.ids[student], run_id=run_id,
                    by_id=self.ids[by], created_at=NOW)


def aware(value: datetime | None) -> datetime | None:
    return value if value is None or value.tzinfo else value.replace(tzinfo=UTC)


def todays_totals(conn: sa.Connection, tables: dict[str, sa.Table]) -> dict[tuple[int, int], float | None]:
    """(assignment id, student id) -> the total today's gradebook shows (revision 0019's rule,
    restated: a run's grade is its score less the late penalty plus its own adjustments,
    clamped to [0, total] when it has any; the staff's choice, or the student's where allowed,
    counts while its run is scored; else "latest" the newest submission's newest scored run,
    "best" the highest such grade, ties to the newer)."""
    a, s, r, x, c, g = (tables[n] for n in ("assignments", "submissions", "runs", "extensions", "counted_runs",
                                            "grade_adjustments"))
    totals: dict[tuple[int, int], float | None] = {}
    for row in conn.execute(sa.select(a)).mappings():
        policy = LatePolicy(release_at=aware(row["release_at"]), due_at=aware(row["due_at"]),
                            grace=timedelta(seconds=row["grace_s"]), late_window=timedelta(seconds=row["late_window_s"]),
                            penalty_per_day=row["late_penalty_per_day"])
        students = {uid for (uid,) in conn.execute(sa.select(s.c.user_id).where(s.c.assignment_id == row["id"]))}
        for uid in students:
            extra = conn.scalar(sa.select(x.c.extra_s).where(x.c.assignment_id == row["id"], x.c.user_id == uid))
            grades: dict[int, tuple[float, int, int]] = {}
            for run_id, sub_id, score, uploaded in conn.execute(
                    sa.select(r.c.id, s.c.id, r.c.score, s.c.uploaded_at).join(s, s.c.id == r.c.submission_id)
                    .where(s.c.assignment_id == row["id"], s.c.user_id == uid, r.c.state == "scored",
                           r.c.score.is_not(None))):
                late = evaluate(policy, uploaded if uploaded.tzinfo else uploaded.replace(tzinfo=UTC), Extension(timedelta(seconds=extra)) if extra else None)
                grade = round(late.adjust(score), 2)
                made = [p for (p,) in conn.execute(sa.select(g.c.points).where(g.c.run_id == run_id))]
                if made:
                    grade = round(min(max(grade + sum(made), 0.0), row["total_points"]), 2)
                grades[run_id] = (grade, sub_id, run_id)
            pin = conn.execute(sa.select(c.c.run_id, c.c.by_id).where(c.c.assignment_id == row["id"],
                                                                     c.c.user_id == uid)).first()
            if pin and pin.run_id in grades and (pin.by_id != uid or row["students_choose_counted_run"]):
                totals[(row["id"], uid)] = grades[pin.run_id][0]
            elif grades:
                key = (lambda v: v[1:]) if row["score_policy"] == "latest" else (lambda v: v)
                totals[(row["id"], uid)] = max(grades.values(), key=key)[0]
            else:
                totals[(row["id"], uid)] = None
    return totals


def totals_now(url: str) -> dict[tuple[int, int], float | None]:
    """(assignment id, student id) -> the total the gradebook shows at the head revision."""
    engine = sa.create_engine(url)
    with Session(engine) as session:
        found = {(a.id, row.user_id): row.total for a in session.scalars(sa.select(Assignment))
                 for row in gradebook(session, a).rows if row.submissions}
    engine.dispose()
    return found


def seed_hand_cases(seed: Seed) -> dict[str, float | None]:
    """Cases worked out by hand: student key -> today's total."""
    seed.user("prof", "instructor")
    late = dict(due_at=DUE, late_window_s=5 * 86400, late_penalty_per_day=0.1)
    seed.assignment("L", "latest", **late)
    seed.assignment("B", "best")
    seed.assignment("C", "best", students_choose_counted_run=True)
    expected: dict[str, float | None] = {}
    for key in ("l1", "l2", "l3", "l4", "l5", "l6", "l7", "l8", "b1", "b2", "b3", "b4", "c1"):
        seed.user(key)
    seed.ids["l1 old"] = seed.run("L", "l1", 80)
    seed.adjust(seed.ids["l1 old"], 5)  # a newer run counts: the +5 counts nowhere
    seed.run("L", "l1", 70)
    expected["l1"] = 70
    seed.adjust(seed.run("L", "l2", 60), 10)
    expected["l2"] = 70
    seed.adjust(seed.run("L", "l3", 95), 10)  # clamped to the total
    expected["l3"] = 100
    seed.adjust(seed.run("L", "l4", 90, DUE + timedelta(days=1, hours=12)), 5)  # 2 started days: 20% off, then +5
    expected["l4"] = 77
    older = seed.run("L", "l5", 50)
    seed.adjust(older, -5)
    seed.adjust(seed.run("L", "l5", 90), 3)
    seed.pin("L", "l5", older, "prof")  # staff chose the older run: 45
    expected["l5"] = 45
    mine = seed.run("L", "l6", 40)
    seed.adjust(mine, 20)
    seed.run("L", "l6", 30)
    seed.pin("L", "l6", mine, "l6")  # a student's choice where students may not choose: latest counts
    expected["l6"] = 30
    seed.insert("extensions", assignment_id=seed.ids["L"], user_id=seed.ids["l7"], extra_s=3 * 86400,
                granted_at=NOW)
    seed.adjust(seed.run("L", "l7", 88, DUE + timedelta(days=2)), -8)  # on time with the extension
    expected["l7"] = 80
    seed.adjust(seed.run("L", "l8", None, state="failed"), 4)  # no scored run
    expected["l8"] = None
    seed.ids["b1 kept"] = seed.run("B", "b1", 80)
    seed.adjust(seed.ids["b1 kept"], 15)  # 95 beats 90 today; the run's own 80 would not: it stays chosen
    seed.run("B", "b1", 90)
    expected["b1"] = 95
    seed.adjust(seed.run("B", "b2", 80), 5)  # 85 < 90
    seed.run("B", "b2", 90)
    expected["b2"] = 90
    seed.adjust(seed.run("B", "b3", 60), -70)  # 0 < 10; the run's own 60 would win: 10 stays chosen
    seed.ids["b3 kept"] = seed.run("B", "b3", 10)
    expected["b3"] = 10
    seed.adjust(seed.run("B", "b4", 85), 5)  # 90 ties 90: the newer
    seed.run("B", "b4", 90)
    expected["b4"] = 90
    seed.user("b5")
    seed.adjust(seed.run("B", "b5", 80), -70)  # 10 < 50 today; the run's own 80 would win: 50 stays chosen
    seed.ids["b5 kept"] = seed.run("B", "b5", 50)
    expected["b5"] = 50
    chosen = seed.run("C", "c1", 70)
    seed.adjust(chosen, 3)
    seed.run("C", "c1", 90)
    seed.pin("C", "c1", chosen, "c1")  # students choose here
    expected["c1"] = 73
    return expected


def seed_random_class(seed: Seed, rng: random.Random) -> None:
    """30 students over the three assignments with random scores, uploads around the due time
    and adjustments (some runs failed, some students' choices)."""
    for n in range(30):
        key = f"r{n}"
        seed.user(key)
        assignment = rng.choice(["L", "B", "C"])
        runs = []
        for _ in range(rng.randint(1, 4)):
            scored = rng.random() > 0.15
            uploaded = DUE + timedelta(hours=rng.choice([-30, -1, 10, 30, 60]))
            run_id = seed.run(assignment, key, round(rng.uniform(0, 100), 2) if scored else None, uploaded,
                              "scored" if scored else "failed")
            runs.append(run_id)
            for _ in range(rng.choice([0, 0, 1, 2])):
                seed.adjust(run_id, rng.choice([-30, -4.5, 2, 7.25, 25]))
        if rng.random() < 0.3:
            seed.pin(assignment, key, rng.choice(runs), rng.choice([key, "prof"]))


def _config(url: str, tmp_path: Path) -> tuple[Config, str]:
    config = _alembic_config(Settings.from_variables({"KG_DATABASE_URL": url, "KG_DATA_DIR": str(tmp_path)}))
    before = ScriptDirectory.from_config(config).get_revision("0020").down_revision
    assert isinstance(before, str)
    return config, before


def test_upgrade_keeps_every_total(empty_database: str, tmp_path: Path) -> None:
    config, before = _config(empty_database, tmp_path)
    command.upgrade(config, before)
    engine = sa.create_engine(empty_database)
    meta = sa.MetaData()
    meta.reflect(engine)
    with engine.begin() as conn:
        seed = Seed(conn, dict(meta.tables))
        by_hand = seed_hand_cases(seed)
        seed_random_class(seed, random.Random(30))
        today = todays_totals(conn, seed.tables)
    ids = seed.ids
    hand = {k: today[(ids[{"l": "L", "b": "B", "c": "C"}[k[0]]], ids[k])] for k in by_hand}
    assert hand == by_hand  # today's rule as restated agrees with the cases worked out by hand
    engine.dispose()

    command.upgrade(config, "head")
    assert totals_now(empty_database) == today

    engine = sa.create_engine(empty_database)
    with Session(engine) as session:
        aside = {a.user_id: a.set_aside for a in session.scalars(sa.select(GradeAdjustment).where(
            GradeAdjustment.user_id.in_([ids["l1"], ids["l2"], ids["b2"]])))}
        pins = {p.user_id: (p.run_id, p.by_id, p.reason or "") for p in session.scalars(sa.select(CountedRun))}
    engine.dispose()
    assert f"made on run {ids['l1 old']}, which did not count" in (aside[ids["l1"]] or "")
    assert aside[ids["l2"]] is None and aside[ids["b2"]] is not None  # l2's counts, b2's counted nowhere
    for key in ("b1", "b3", "b5"):
        run_id, by, why = pins[ids[key]]
        assert (run_id, by) == (ids[f"{key} kept"], ids["prof"]) and "migration 0020" in why
    assert not {ids["b2"], ids["b4"]} & set(pins)  # no choice where the pick stays

    command.downgrade(config, before)
    command.upgrade(config, "head")
    assert totals_now(empty_database) == today
