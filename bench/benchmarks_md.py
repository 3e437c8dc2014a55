"""Appending a measured table to BENCHMARKS.md (shared by the bench scripts)."""
from __future__ import annotations

from pathlib import Path

BENCHMARKS_MD = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def append_section(table: str, path: Path = BENCHMARKS_MD) -> None:
    existing = path.read_text() if path.exists() else "# Benchmarks\n"
    path.write_text(existing.rstrip("\n") + "\n\n" + table)


def current_commit() -> str:
    """The short hash of HEAD, for the 'commit' of a recorded table."""
    import subprocess  # noqa: PLC0415

    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=BENCHMARKS_MD.parent,
                          capture_output=True, text=True).stdout.strip()
