"""Migration 0018 on PostgreSQL and SQLite: logins become case-insensitive without merging
accounts whose logins differ only by case (they keep their exact-name logins, no key)."""
from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from grader.cli.main import _alembic_config
from grader.settings import Settings


def test_upgrade_keys_logins_and_leaves_case_twins_apart(empty_database: str, tmp_path: Path,
                                                          capfd: pytest.CaptureFixture[str]) -> None:
    config = _alembic_config(Settings.from_variables({"KG_DATABASE_URL": empty_database,
                                                      "KG_DATA_DIR": str(tmp_path)}))
    command.upgrade(config, "0017")
    engine = sa.create_engine(empty_database)
    with engine.begin() as conn:
        for name in ("Alice@Example.edu", "alice@example.edu", "Bob", "carol"):
            conn.execute(sa.text("INSERT INTO users (username, role, created_at) VALUES (:n, 'student', "
                                 "CURRENT_TIMESTAMP)"), {"n": name})
    command.upgrade(config, "0018")
    with engine.connect() as conn:
        keys = dict(conn.execute(sa.text("SELECT username, login_key FROM users")).all())
    assert keys == {"Alice@Example.edu": None, "alice@example.edu": None, "Bob": "bob", "carol": "carol"}
    assert "'Alice@Example.edu'" in capfd.readouterr().err
    with engine.begin() as conn, pytest.raises(sa.exc.IntegrityError):
        conn.execute(sa.text("INSERT INTO users (username, role, created_at, login_key) VALUES ('BOB', 'student', "
                             "CURRENT_TIMESTAMP, 'bob')"))
    command.downgrade(config, "0017")
    command.upgrade(config, "head")
    engine.dispose()
