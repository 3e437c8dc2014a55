"""Migration 0024 on PostgreSQL and SQLite: the accounts nobody has used yet get the course whose
staff set them up, from what the database says. The first password: the course of the
instructor's roster import that made the account, unless the operator set a password since; the
e-mail: that import's course when no change of it is recorded, the account's course when an
instructor changed it last, none when the operator or a site administrator did; an instructor's
live link: the account's course. Whatever an administrator's import, the operator or the person
set up, and every account that was used, gets none. A downgrade drops the columns, and the
upgrade runs again."""
from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command

from grader.cli.main import _alembic_config
from grader.settings import Settings
from tests.service.test_migration_0020 import NOW, Seed

# key -> (has an address, used before); the accounts the roster jobs made are those of JOBS
ACCOUNTS = {"rostered": (True, False), "no_address": (False, False), "operator_password": (True, False),
            "admin_address": (True, False), "used": (True, True), "admin_job": (True, False),
            "staff_address": (True, False), "operator_address": (True, False), "in_no_course": (False, False)}
JOBS = {"prof": ["rostered", "no_address", "operator_password", "admin_address", "used", "renamed since"],
        "admin": ["admin_job"]}
LATER, LONG_AGO = datetime(2099, 1, 1, tzinfo=UTC), datetime(2000, 1, 1, tzinfo=UTC)  # links' expiry
# (the account's key, who issued it, live (else expired), used)
LINKS = {"prof_live": ("rostered", "prof", True, False), "admin_live": ("rostered", "admin", True, False),
         "prof_expired": ("no_address", "prof", False, False), "prof_used": ("no_address", "prof", True, True),
         "prof_to_used": ("used", "prof", True, False), "prof_no_course": ("in_no_course", "prof", True, False),
         "cli_live": ("staff_address", None, True, False)}


def _seed(seed: Seed, tag: str) -> dict[str, str]:
    """The semester's rows at 0023; the accounts' logins by key."""
    logins = {key: f"{key}-{tag}" for key in [*ACCOUNTS, "prof", "admin"]}
    seed.ids["x"] = seed.insert("courses", slug=f"x-{tag}", title="X")
    seed.ids["y"] = seed.insert("courses", slug=f"y-{tag}", title="Y")
    seed.ids["prof"] = seed.insert("users", username=logins["prof"], role="instructor",
                                   first_login_at=NOW)
    seed.ids["admin"] = seed.insert("users", username=logins["admin"], role="student",
                                    site_admin=True, first_login_at=NOW)
    for key, (addressed, used) in ACCOUNTS.items():
        seed.ids[key] = seed.insert("users", username=logins[key], role="student",
                                    email=f"{key}@uni.example.edu" if addressed else None,
                                    first_login_at=NOW if used else None)
        if key != "in_no_course":
            seed.insert("enrollments", user_id=seed.ids[key], course_id=seed.ids["y" if key == "admin_job" else "x"],
                        role="student")
    for requester, made in JOBS.items():
        seed.insert("roster_jobs", course_id=seed.ids["x" if requester == "prof" else "y"], requested_by=seed.ids[requester],
                    state="done", key_digest="0" * 64,
                    result={"summary": "", "created": [logins.get(key, key) for key in made], "updated": [], "errors": []})
    audit: list[tuple[str, str, str | None]] = [("password_changed", "operator_password", None),
                                                ("email_changed", "admin_address", "admin"),
                                                ("email_changed", "staff_address", "prof"),
                                                ("email_changed", "operator_address", "prof"),
                                                ("email_changed", "operator_address", None)]  # the newest counts
    for event, key, actor in audit:
        seed.insert("audit_events", at=NOW, event=event, via="web", user_id=seed.ids[key], login=logins[key],
                    actor_id=seed.ids[actor] if actor else None, detail="")
    for name, (key, issuer, live, used) in LINKS.items():
        seed.ids[name] = seed.insert("password_resets", user_id=seed.ids[key], token_hash=uuid.uuid4().hex * 2,
                                     issued_by_id=seed.ids[issuer] if issuer else None, created_at=NOW,
                                     expires_at=LATER if live else LONG_AGO,
                                     used_at=NOW if used else None)
    return logins


def _columns(conn: sa.Connection, table: str, column: str) -> dict[int, Any]:
    return dict(conn.execute(sa.text(f"SELECT id, {column} FROM {table}")).all())


def test_upgrade_ties_what_staff_set_up_to_their_course(empty_database: str, tmp_path: Path) -> None:
    config = _alembic_config(Settings.from_variables({"KG_DATABASE_URL": empty_database,
                                                      "KG_DATA_DIR": str(tmp_path)}))
    command.upgrade(config, "0023")
    engine = sa.create_engine(empty_database)
    with engine.begin() as conn:
        metadata = sa.MetaData()
        metadata.reflect(conn)
        seed = Seed(conn, dict(metadata.tables))
        _seed(seed, uuid.uuid4().hex[:6])
    command.upgrade(config, "0024")
    x = seed.ids["x"]
    with engine.connect() as conn:
        password = _columns(conn, "users", "password_set_up_by_course_id")
        email = _columns(conn, "users", "email_set_up_by_course_id")
        links = _columns(conn, "password_resets", "set_up_by_course_id")
    assert {key: (password[seed.ids[key]], email[seed.ids[key]]) for key in ACCOUNTS} == {
        "rostered": (x, x), "no_address": (x, None), "operator_password": (None, x), "admin_address": (x, None),
        "used": (None, None), "admin_job": (None, None), "staff_address": (None, x),
        "operator_address": (None, None), "in_no_course": (None, None)}
    assert (password[seed.ids["prof"]], password[seed.ids["admin"]]) == (None, None)
    assert {name: links[seed.ids[name]] for name in LINKS} == {
        "prof_live": x, "admin_live": None, "prof_expired": None, "prof_used": None, "prof_to_used": None,
        "prof_no_course": None, "cli_live": None}
    command.downgrade(config, "0023")
    with engine.connect() as conn:
        assert "password_set_up_by_course_id" not in {c["name"] for c in sa.inspect(conn).get_columns("users")}
        assert "set_up_by_course_id" not in {c["name"] for c in sa.inspect(conn).get_columns("password_resets")}
    command.upgrade(config, "head")
    engine.dispose()
