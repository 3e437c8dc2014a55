"""Pairwise similarity of a class's submissions (copydetect's winnowed fingerprints).

Every student file the rubric takes (`student_files`: kernel sources, headers, MiniTorch
bindings) is tokenized and filtered by copydetect (names, strings and comments normalized, so
renaming and reformatting do not hide a copy), fingerprinted with winnowing, and compared
with the file of the same path of every other student. Fingerprints that also occur in the
student starter (the reference kit with its solutions stripped, as `grader starter build`
renders it) are boilerplate and never count, so only code the students wrote is compared.

A pair's score is the share of both students' own code that the other one also has:
(overlap in A + overlap in B) / (own code of A + own code of B), in tokens. Each matching
file comes with the line ranges of the shared code on both sides (for a side-by-side view).
"""
from __future__ import annotations

import io
import itertools
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from copydetect import CodeFingerprint, compare_files, defaults

from worker.rubric import Rubric
from worker.starter_kit import render_starter

Sources = Mapping[str, str]  # relative path -> text of one student's (or the starter's) files
LineRange = tuple[int, int]  # 1-based, inclusive


@dataclass(frozen=True)
class Fingerprinting:
    """k: shortest match (in filtered characters) that is noise; window: winnowing window."""

    k: int = defaults.NOISE_THRESHOLD
    window: int = defaults.GUARANTEE_THRESHOLD - defaults.NOISE_THRESHOLD + 1


@dataclass(frozen=True)
class FileMatch:
    path: str
    share_a: float  # share of A's own code in this file also found in B's
    share_b: float
    lines_a: tuple[LineRange, ...]
    lines_b: tuple[LineRange, ...]


@dataclass(frozen=True)
class PairResult:
    a: str
    b: str
    score: float
    files: tuple[FileMatch, ...]  # files with shared code, most shared first


@dataclass(frozen=True)
class _Fingerprinted:
    text: str
    print_: CodeFingerprint


def tree_sources(root: Path, patterns: Iterable[str]) -> dict[str, str]:
    """The files under `root` matching the rubric's glob patterns, as text (undecodable bytes
    replaced); symlinks are skipped."""
    found: dict[str, str] = {}
    for pattern in patterns:
        for path in sorted(root.glob(pattern)):
            if path.is_file() and not path.is_symlink():
                found[path.relative_to(root).as_posix()] = path.read_bytes().decode("utf-8", errors="replace")
    return found


def starter_sources(rubric: Rubric) -> dict[str, str]:
    """The student starter's own code: what every submission contains without writing it."""
    with tempfile.TemporaryDirectory(prefix="kg-starter-") as tmp:
        render_starter(rubric.starter_dir, Path(tmp) / "starter")
        return tree_sources(Path(tmp) / "starter", rubric.student_files)


def _fingerprint(path: str, text: str, config: Fingerprinting, boilerplate: np.ndarray) -> CodeFingerprint:
    # copydetect picks the lexer from the file name (.cu: CUDA, .py: Python)
    return CodeFingerprint(path, config.k, config.window, boilerplate=boilerplate, fp=io.StringIO(text))


def boilerplate_hashes(starter: Sources, config: Fingerprinting) -> np.ndarray:
    hashes: set[int] = set()
    for path, text in starter.items():
        hashes |= _fingerprint(path, text, config, np.array([], dtype=np.int64)).hashes
    return np.array(sorted(hashes), dtype=np.int64)


def _line_ranges(text: str, slices: np.ndarray) -> tuple[LineRange, ...]:
    if slices.size == 0:
        return ()
    starts = np.cumsum([0] + [len(line) for line in text.splitlines(keepends=True)])
    ranges: list[LineRange] = []
    for begin, end in zip(slices[0], slices[1]):
        first = int(np.searchsorted(starts, begin, side="right"))
        last = int(np.searchsorted(starts, max(int(end) - 1, int(begin)), side="right"))
        if ranges and first <= ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], last))
        else:
            ranges.append((first, last))
    return tuple(ranges)


def _own_tokens(prints: Mapping[str, _Fingerprinted]) -> int:
    return sum(int(f.print_.token_coverage) for f in prints.values())


def _compare(a: str, b: str, prints_a: Mapping[str, _Fingerprinted], prints_b: Mapping[str, _Fingerprinted]) -> PairResult:
    matches: list[FileMatch] = []
    shared = 0.0
    for path in sorted(prints_a.keys() & prints_b.keys()):
        fa, fb = prints_a[path], prints_b[path]
        overlap, (share_a, share_b), (slices_a, slices_b) = compare_files(fa.print_, fb.print_)
        if overlap == 0:
            continue
        shared += share_a * fa.print_.token_coverage + share_b * fb.print_.token_coverage
        matches.append(FileMatch(path, float(share_a), float(share_b),
                                 _line_ranges(fa.text, slices_a), _line_ranges(fb.text, slices_b)))
    own = _own_tokens(prints_a) + _own_tokens(prints_b)
    matches.sort(key=lambda m: (-(m.share_a + m.share_b), m.path))
    return PairResult(a, b, shared / own if own else 0.0, tuple(matches))


def compare_class(students: Mapping[str, Sources], starter: Sources,
                  config: Fingerprinting = Fingerprinting()) -> list[PairResult]:
    """Every pair of students, most similar first (ties by name)."""
    boilerplate = boilerplate_hashes(starter, config)
    prints = {
        student: {path: _Fingerprinted(text, _fingerprint(path, text, config, boilerplate))
                  for path, text in files.items()}
        for student, files in students.items()
    }
    pairs = [_compare(a, b, prints[a], prints[b]) for a, b in itertools.combinations(sorted(prints), 2)]
    pairs.sort(key=lambda p: (-p.score, p.a, p.b))
    return pairs
