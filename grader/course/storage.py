"""The bytes each student may keep in one assignment (pure; no database): issue 54 found 30
uploads per 5 minutes of 50 MiB each, kept forever, about 18 GB an hour for one student.

What counts is the size of each distinct upload the student keeps in the assignment: the same
bytes sent again are stored once (the blob store keeps one file per content), so they count
once, and an upload of bytes the student already keeps there adds nothing (it is always taken,
a re-send at the quota included). Staff are exempt; a limit of 0 turns the quota off. The limit
is the assignment's own (its settings page) or else the service's KG_STORAGE_QUOTA_BYTES.
"""
from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024


def mib(size: int) -> str:
    """`size` bytes in MiB as the pages say it: 12.3 MiB, 200 MiB."""
    return f"{size / MiB:.1f}".removesuffix(".0") + " MiB"


def parse_quota_mib(text: str) -> int | None:
    """An assignment's quota as its settings page takes it: MiB (0: no quota), or "" for the
    service's default (None); ValueError saying what to type otherwise."""
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1024 * 1024:  # nan fails this too
        raise ValueError(f"“{text}” is not a size in MiB: give a number such as 200, 0 for no quota, or leave it "
                         "empty for the service's default.")
    return int(value * MiB)


@dataclass(frozen=True)
class StorageUse:
    """What one student keeps in one assignment against its limit."""

    used: int  # bytes, each distinct upload once
    limit: int  # bytes; 0: no quota

    @property
    def words(self) -> str:
        """`N MiB of M used`, for the upload page."""
        return f"{mib(self.used)} of {mib(self.limit)} used" if self.limit else f"{mib(self.used)} used (no quota)"

    def refusal(self, size: int, kept_already: bool) -> str | None:
        """Why an upload of `size` bytes is refused (`kept_already`: the student keeps these
        bytes in the assignment already); None when it fits."""
        if not self.limit or kept_already or self.used + size <= self.limit:
            return None
        return (f"This upload ({mib(size)}) would bring what you keep in this assignment to {mib(self.used + size)}, "
                f"over the {mib(self.limit)} each student may keep ({self.words} now), so nothing was stored. Make "
                "the zip smaller (only the files the assignment asks for), or ask the course staff to raise the quota.")
