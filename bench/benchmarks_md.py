"""Appending a measured table to BENCHMARKS.md (shared by the bench scripts)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

BENCHMARKS_MD = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def append_section(table: str, path: Path = BENCHMARKS_MD) -> None:
    existing = path.read_text() if path.exists() else "# Benchmarks\n"
    path.write_text(existing.rstrip("\n") + "\n\n" + table)


def publish(lines: list[str], record: bool) -> str:
    """Print a measured section and, with --record, append it to BENCHMARKS.md; the text."""
    text = "\n".join(lines) + "\n"
    print(text)
    if record:
        append_section(text)
    return text


def publish_gpu_section(lines: list[str], name: str) -> None:
    """Print a section measured on a GPU machine and leave it as $OUT/<name>.md (the device
    tool's output folder, or .gpu-out/) for BENCHMARKS.md."""
    text = publish(lines, record=False)
    out = Path(os.environ.get("OUT", ".gpu-out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.md").write_text(text)


def current_commit() -> str:
    """The short hash of HEAD, for the 'commit' of a recorded table; "+ uncommitted changes"
    when the tree differs from it (as on a GPU machine, which gets the working tree)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=BENCHMARKS_MD.parent, capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD")
    return f"{head} + uncommitted changes" if head and git("status", "--porcelain", "--untracked-files=no") else head
