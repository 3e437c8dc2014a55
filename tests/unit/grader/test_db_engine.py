"""One engine (one connection pool) per database and process."""
from __future__ import annotations

import os
from pathlib import Path

from grader.db import make_engine
from grader.settings import Settings


def test_the_same_database_shares_one_engine_and_another_gets_its_own(tmp_path: Path) -> None:
    first = Settings(data_dir=tmp_path / "a")
    assert make_engine(first) is make_engine(first.model_copy(update={"max_upload_bytes": 1}))
    assert make_engine(first) is not make_engine(Settings(data_dir=tmp_path / "b"))


def test_a_forked_child_gets_an_engine_of_its_own(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    parent = id(make_engine(settings))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        os.write(write, b"same" if id(make_engine(settings)) == parent else b"own")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 8)
    os.waitpid(pid, 0)
    assert answer == b"own"
