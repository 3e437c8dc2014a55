"""The migrations and the models say the same schema: after `upgrade head`, Alembic's comparison
of the database with grader.models finds nothing to add, drop or change (on PostgreSQL and
SQLite: `empty_database` is each), and the newest migration downgrades and upgrades again."""
from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from grader.cli.main import _alembic_config
from grader.models import Base
from grader.settings import Settings


def _differences(url: str) -> list[object]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return list(compare_metadata(MigrationContext.configure(conn), Base.metadata))
    finally:
        engine.dispose()


def test_the_migrated_schema_is_the_models(empty_database: str, tmp_path: Path) -> None:
    config = _alembic_config(Settings.from_variables({"KG_DATABASE_URL": empty_database,
                                                      "KG_DATA_DIR": str(tmp_path)}))
    command.upgrade(config, "head")
    assert _differences(empty_database) == []
    command.downgrade(config, "-1")
    assert _differences(empty_database) != []  # the comparison sees a missing migration
    command.upgrade(config, "head")
    assert _differences(empty_database) == []
