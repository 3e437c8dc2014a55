"""The summary table of hostile cases tried (printed at the end of the pytest run by
tests/hostile/conftest.py): what each case expected, what it got, and whether anything escaped."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    suite: str  # pipeline | sandbox | upload
    case: str
    threat: str
    expected: str
    got: str
    escapes: tuple[str, ...]  # what got out; empty when nothing did


ROWS: list[Row] = []


def record(row: Row) -> None:
    ROWS.append(row)


def table(rows: list[Row]) -> list[str]:
    lines = [f"{'suite':<8} {'case':<28} {'expected':<24} {'got':<24} {'escapes'}"]
    for r in rows:
        flag = "ESCAPE: " + "; ".join(r.escapes) if r.escapes else "-"
        lines.append(f"{r.suite:<8} {r.case:<28} {r.expected:<24} {r.got:<24} {flag}")
    by_suite = Counter(r.suite for r in rows)
    escaped = [r for r in rows if r.escapes]
    lines.append(
        f"cases tried: {len(rows)} ({', '.join(f'{k} {v}' for k, v in sorted(by_suite.items()))}); "
        f"outcome as expected: {sum(r.got.startswith(r.expected) for r in rows)}; "
        f"escapes: {len(escaped)}"
    )
    return lines
