"""The service refuses to read its secrets from a file other users of the host can read or
change (issue 54: the service started with a 0644 `.env` holding KG_SECRET_KEY): the `.env` the
settings read and the session key kept in the data folder, each refused in one line that names
the file and the chmod that fixes it; `.env` is never committed."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.auth.sessions import secret_key
from grader.settings import ExposedSecretFile, Settings

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620])
def test_a_dotenv_others_can_read_or_change_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       mode: int) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("KG_TASK_QUEUE=from-dotenv\n")
    os.chmod(tmp_path / ".env", mode)
    with pytest.raises(ExposedSecretFile) as refused:
        Settings()
    assert str(refused.value) == (f"refusing to start: {tmp_path / '.env'} holds secrets and other users of this host "
                                  f"can read or change it (mode {mode:04o}); run chmod 600 {tmp_path / '.env'} and "
                                  "start again")
    os.chmod(tmp_path / ".env", 0o600)
    assert Settings().task_queue == "from-dotenv"  # the same file, once private, is read


def test_a_session_key_file_others_can_read_is_refused(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, data_dir=tmp_path)  # type: ignore[call-arg]
    key = secret_key(settings)  # created 0600 on first use
    assert secret_key(settings) == key
    os.chmod(tmp_path / "secret_key", 0o644)
    with pytest.raises(ExposedSecretFile, match=rf"run chmod 600 {tmp_path / 'secret_key'} and start again"):
        secret_key(settings)


def test_the_grader_command_stops_in_one_line(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(f"KG_DATA_DIR={tmp_path / 'var'}\n")
    os.chmod(tmp_path / ".env", 0o644)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    done = subprocess.run([str(Path(sys.executable).parent / "grader"), "course", "list"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done
    assert done.stderr.splitlines() == [f"refusing to start: {tmp_path / '.env'} holds secrets and other users of "
                                        f"this host can read or change it (mode 0644); run chmod 600 "
                                        f"{tmp_path / '.env'} and start again"]


def test_dotenv_is_never_committed() -> None:
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", ".env"])
    assert ignored.returncode == 0, ".env is not in .gitignore"
