"""Migration 0023 on PostgreSQL and SQLite: accounts get their first use from what shows it
(a login or reset link used in the audit log, a browser session, an API token used, an upload:
the earliest), no account becomes a site administrator, everyone's staff mail is on. An account
with none of it counts as never used: the only kind an instructor may give a first-login link.
A downgrade drops the columns, and the upgrade runs again."""
from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.script import ScriptDirectory

from grader.cli.main import _alembic_config
from grader.settings import Settings
from tests.service.test_migration_0020 import NOW, Seed


def _instant(value: datetime | str | None) -> datetime | None:
    """A stored instant as UTC (SQLite gives text without a zone)."""
    if value is None:
        return None
    value = datetime.fromisoformat(value) if isinstance(value, str) else value
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def test_upgrade_dates_each_accounts_first_use(empty_database: str, tmp_path: Path) -> None:
    config = _alembic_config(Settings.from_variables({"KG_DATABASE_URL": empty_database,
                                                      "KG_DATA_DIR": str(tmp_path)}))
    before = ScriptDirectory.from_config(config).get_revision("0023").down_revision  # the revision it follows
    assert isinstance(before, str)
    command.upgrade(config, before)
    engine = sa.create_engine(empty_database)
    at = {k: NOW + timedelta(hours=h) for k, h in (("login", 1), ("session", 2), ("token", 3), ("upload", 4),
                                                    ("late", 9))}
    with engine.begin() as conn:
        metadata = sa.MetaData()
        metadata.reflect(conn)
        seed = Seed(conn, dict(metadata.tables))
        for key in ("by_login", "by_session", "by_token", "by_upload", "earliest", "never", "failed_only"):
            seed.user(key)
        seed.insert("audit_events", event="login", via="web", user_id=seed.ids["by_login"], at=at["login"], detail="")
        seed.insert("audit_events", event="reset_used", via="web", user_id=seed.ids["earliest"], at=at["late"],
                    detail="")
        seed.insert("audit_events", event="login_failed", via="web", user_id=seed.ids["failed_only"], at=at["login"],
                    detail="")  # a failure shows nobody in
        seed.insert("web_sessions", user_id=seed.ids["by_session"], id_hash=uuid.uuid4().hex, created_at=at["session"],
                    last_seen_at=at["late"], expires_at=at["late"])
        for key, used in (("by_token", at["token"]), ("never", None), ("earliest", at["session"])):
            seed.insert("api_tokens", user_id=seed.ids[key], name="t", token_hash=uuid.uuid4().hex, scopes="read",
                        created_at=NOW, last_used_at=used)
        seed.assignment("hw", "latest")
        seed.run("hw", "by_upload", 50.0, uploaded=at["upload"])
    command.upgrade(config, "0023")
    with engine.connect() as conn:
        rows = {uid: (first, admin, mail) for uid, first, admin, mail in conn.execute(sa.text(
            "SELECT id, first_login_at, site_admin, staff_mail FROM users"))}
    first = {key: rows[seed.ids[key]][0] for key in seed.ids if key != "hw"}
    assert {key: _instant(value) for key, value in first.items()} == {
        "by_login": at["login"], "by_session": at["session"], "by_token": at["token"], "by_upload": at["upload"],
        "earliest": at["session"], "never": None, "failed_only": None}
    assert {(bool(admin), bool(mail)) for _, admin, mail in rows.values()} == {(False, True)}
    command.downgrade(config, before)
    with engine.connect() as conn:
        assert "first_login_at" not in {c["name"] for c in sa.inspect(conn).get_columns("users")}
    command.upgrade(config, "head")
    engine.dispose()
