"""Appending a measured table to BENCHMARKS.md (shared by the bench scripts)."""
from __future__ import annotations

from pathlib import Path

BENCHMARKS_MD = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def append_section(table: str, path: Path = BENCHMARKS_MD) -> None:
    existing = path.read_text() if path.exists() else "# Benchmarks\n"
    path.write_text(existing.rstrip("\n") + "\n\n" + table)
