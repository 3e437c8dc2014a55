"""Similarity of a class's submissions: what each student wrote, file by file and function by
function, against every other student's, through an index of shared fingerprints.

Each student file the rubric takes (`student_files`) that differs from the base (the starter the
students received) is tokenized by copydetect (names, strings and comments normalized, so
renaming and reformatting do not hide a copy) and winnowed into fingerprints (hashes of
k-grams, with the line each covers). A file's fingerprints are computed once per file content
(grader.similarity.cache keeps them by sha256). Fingerprints that occur anywhere in the base are
boilerplate, and so are those of the code its comments and docstrings give (the starter's hints,
`prints.hint_text`: honest students write what a hint shows); they never count.

Nothing else is discounted for how many students hold it (issue 51): four students of eight
handing in one solution score high with each other, and the clusters (grader.similarity.clusters)
list them as one group. Code a class legitimately shares beyond the starter, such as an earlier
assignment's files the starter lacks (on the development corpus, hw3's `src/combine.cu` and
minitorch, which six of the seven hw4 submissions carry and the official hw4 starter does not),
is named by staff: a source listed with the role "common" (grader.similarity.public) is boilerplate
like the base, its fingerprints never count and a file equal to one of its files is no literal copy.

Known public solutions staff list for the assignment (grader.similarity.public, the role
"solution") are compared as extra submissions that are no student's: each student against each listed source, never a
source against another (`compare_all`, `Comparison.sources`); a source counts in no share of
the class and is never ranked among the students' pairs.

The units compared are each file and each function in it (grader.similarity.units). A unit
of A matches a unit of B by the fingerprints both hold: an inverted index (fingerprint ->
units holding it) gives every unit pair with anything in common without comparing every pair
from scratch. A match scores its Dice share 2s/(|a|+|b|) times min(1, s/`full_evidence`)
(s: fingerprints in common), so a small function alike in two submissions weighs less than a
whole copied kernel; a pair of students ranks by its strongest match, which the report names.

A file identical in two submissions apart from whitespace (and neither the base's nor a common
source's) is a literal copy (`Fingerprinting.literal_copies`, on when the base is the starter the
students received): independent work never agrees on every comment, name and line, so the match
is named identical and counts every occurrence of a fingerprint outside the base, repeats
included, weighted by `full_evidence` like any match.
"""
from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from grader.similarity.cache import PrintCache, Progress
from grader.similarity.prints import FilePrint, Fingerprinting, hint_text
from grader.similarity.units import Function
from worker.rubric import Rubric
from worker.starter_kit import render_starter

Sources = Mapping[str, str]  # relative path -> text of one student's (or the base's) files
PAIR_BATCH = 4_000_000  # self-join entries made at once (each costs about 60 bytes on the way)
LineRange = tuple[int, int]  # 1-based, inclusive


@dataclass(frozen=True)
class Match:
    """One file or function of A against one of B (function None: the whole file)."""

    path_a: str
    function_a: str | None
    path_b: str
    function_b: str | None
    score: float
    share_a: float  # share of A's own fingerprints in this unit also in B's unit
    share_b: float
    lines_a: tuple[LineRange, ...]
    lines_b: tuple[LineRange, ...]
    identical: bool = False  # the two files are the same apart from whitespace

    @property
    def shared_lines(self) -> int:
        """Lines the shared code spans, the smaller side's."""
        return min(_line_count(self.lines_a), _line_count(self.lines_b))

    @property
    def longest_run(self) -> int:
        """The longest stretch of consecutive lines shared, the smaller side's."""
        return min(max((b - a + 1 for a, b in self.lines_a), default=0),
                   max((b - a + 1 for a, b in self.lines_b), default=0))

    @property
    def label(self) -> str:
        a = f"{self.path_a}: {self.function_a}" if self.function_a else self.path_a
        if (self.path_b, self.function_b) != (self.path_a, self.function_a):
            a = f"{a} ~ {self.path_b}: {self.function_b}" if self.function_b else f"{a} ~ {self.path_b}"
        return f"{a} (identical file)" if self.identical else a


@dataclass(frozen=True)
class PairResult:
    a: str
    b: str
    score: float  # the strongest match's
    matches: tuple[Match, ...]  # strongest first

    @property
    def breadth(self) -> float:
        """The evidence besides the strongest match."""
        return sum(m.score for m in self.matches[1:])

    @property
    def strongest(self) -> tuple[Match, ...]:
        """The matches that score what the pair scores (several when the score saturates at 1)."""
        return tuple(m for m in self.matches if m.score == self.score)

    @property
    def shared_lines(self) -> int:
        """Lines the strongest matches span, each line of a file once, the smaller side's: what
        separates pairs whose scores saturate at 1 (a whole copied file from one function)."""
        return min(_line_count_by_file([(m.path_a, r) for m in self.strongest for r in m.lines_a]),
                   _line_count_by_file([(m.path_b, r) for m in self.strongest for r in m.lines_b]))

    @property
    def longest_run(self) -> int:
        return max((m.longest_run for m in self.strongest), default=0)

    @property
    def rank_key(self) -> tuple[float, int, int, float, str, str]:
        """Most similar first: the score, then (among equal scores) the lines shared, the
        longest run, the other matches, then the names."""
        return (-self.score, -self.shared_lines, -self.longest_run, -self.breadth, self.a, self.b)

    @property
    def driver(self) -> str:
        return self.matches[0].label if self.matches else ""


@dataclass
class _Unit:
    student: int
    path: str
    function: Function | None
    hashes: np.ndarray  # own fingerprints, unique
    first: np.ndarray
    last: np.ndarray
    # a file unit's (first, last) of every fingerprint occurrence outside the base, repeats included
    outside_base: tuple[np.ndarray, np.ndarray] | None = None


@dataclass
class _Class:
    names: list[str]  # the students, then the listed public sources
    students: int = 0  # how many of `names` are students
    units: list[_Unit] = field(default_factory=list)
    literal: set[tuple[int, int]] = field(default_factory=set)  # file units (a, b) that are literal copies


@dataclass(frozen=True)
class Comparison:
    pairs: list[PairResult]  # every pair of students, most similar first
    sources: list[PairResult]  # (student, public source's label) pairs with a match, most similar first


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
    """The fallback base: our kit's student starter (its solutions stripped), used only when
    staff gave no starter of their own (grader.similarity.base)."""
    with tempfile.TemporaryDirectory(prefix="kg-starter-") as tmp:
        render_starter(rubric.starter_dir, Path(tmp) / "starter")
        return tree_sources(Path(tmp) / "starter", rubric.student_files)


def own_files(files: Sources, base: Sources) -> dict[str, str]:
    """The files a student changed: those identical to the base's are dropped unread."""
    return {path: text for path, text in files.items() if base.get(path) != text}


def compare_class(students: Mapping[str, Sources], base: Sources, config: Fingerprinting = Fingerprinting(),
                  cache: PrintCache | None = None, progress: Progress | None = None,
                  common: Iterable[Sources] = ()) -> list[PairResult]:
    """Every pair of students, most similar first (`PairResult.rank_key`). `cache`: where fingerprints
    are computed and kept (grader.similarity.cache.PrintCache; in memory for this call when
    None); `progress`: told (files fingerprinted, files to fingerprint); `common`: the files of
    each source listed as code the class may share, left out like the base's."""
    return compare_all(students, base, {}, config, cache, progress, common).pairs


def compare_all(students: Mapping[str, Sources], base: Sources, public: Mapping[str, Sources],
                config: Fingerprinting = Fingerprinting(), cache: PrintCache | None = None,
                progress: Progress | None = None, common: Iterable[Sources] = ()) -> Comparison:
    """`compare_class`'s pairs, and each student against each known public solution of `public`
    (its label -> its files), a pair (student, label) kept where they share anything."""
    prints = cache or PrintCache(config)
    names = sorted(students)
    own = [own_files(students[name], base) for name in names] + [own_files(public[label], base) for label in sorted(public)]
    shared = boilerplate_files(base, common)
    prints.fill([*shared, *(item for files in own for item in files.items())], progress)
    boilerplate = fingerprints_of(shared, prints)
    klass = _Class([*names, *sorted(public)], len(names))
    for index, texts in enumerate(own):
        for path, text in texts.items():
            print_ = prints.get(path, text)
            _add_units(klass, index, path, print_, ~np.isin(print_.hashes, boilerplate))
    if config.literal_copies:
        klass.literal = _literal_copies(klass, [text for texts in own for text in texts.values()],
                                        {_normalized(text) for files in common for text in files.values()})
    results = _pairs(klass, config)
    pairs = sorted((p for p in results if p.b not in public), key=lambda p: p.rank_key)
    matched = sorted((p for p in results if p.b in public and p.matches), key=lambda p: p.rank_key)
    return Comparison(pairs, matched)


def boilerplate_files(base: Sources, common: Iterable[Sources]) -> list[tuple[str, str]]:
    """(path, text) of all code that never counts: the base's files, the code its comments and
    docstrings give (`prints.hint_text`), and every common source's files."""
    hints = [(path, hint) for path, text in base.items() if (hint := hint_text(path, text)).strip()]
    return [*base.items(), *hints, *(item for files in common for item in files.items())]


def fingerprints_of(files: Iterable[tuple[str, str]], prints: PrintCache) -> np.ndarray:
    """The unique fingerprints of `files`."""
    found = [prints.get(path, text).hashes for path, text in files]
    return np.unique(np.concatenate(found)) if found else np.array([], dtype=np.int64)


def _add_units(klass: _Class, student: int, path: str, print_: FilePrint, keep: np.ndarray) -> None:
    hashes, first, last = print_.hashes[keep], print_.first[keep], print_.last[keep]
    klass.units.append(_unit(student, path, None, hashes, first, last))
    klass.units[-1].outside_base = (first, last)
    for function in print_.functions:
        inside = (first >= function.first) & (first <= function.last)
        klass.units.append(_unit(student, path, function, hashes[inside], first[inside], last[inside]))


def _normalized(text: str) -> str:
    """A file's text with its whitespace made uniform, hashed: what a literal copy must share."""
    return hashlib.sha256(" ".join(text.split()).encode()).hexdigest()


def _literal_copies(klass: _Class, texts: list[str], common: set[str]) -> set[tuple[int, int]]:
    """Pairs of file units (of two students or a student and a public source, lower index first)
    whose texts are equal apart from whitespace and no common source's file (`common`: their
    normalized digests). `texts`: each file unit's text, in the order of the file units."""
    files = [i for i, u in enumerate(klass.units) if u.function is None]
    holders: dict[str, list[int]] = {}
    for unit, text in zip(files, texts, strict=True):
        holders.setdefault(_normalized(text), []).append(unit)
    return {(a, b) for digest, units in holders.items() if digest not in common
            for a in units for b in units
            if klass.units[a].student < klass.units[b].student and klass.units[a].student < klass.students}


def _unit(student: int, path: str, function: Function | None, hashes: np.ndarray, first: np.ndarray,
          last: np.ndarray) -> _Unit:
    unique, at = np.unique(hashes, return_index=True)
    return _Unit(student, path, function, unique, first[at], last[at])


def _shared_counts(klass: _Class, level_is_file: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """(unit a, unit b, fingerprints in common) for every pair of units of one level (files or
    functions) of two different students sharing any: a self-join of the inverted index, taken
    `PAIR_BATCH` entries at a time (a fingerprint held by g units makes g(g-1)/2 entries: with no
    code dropped for being common, a whole class holds some)."""
    ids = [i for i, u in enumerate(klass.units) if (u.function is None) == level_is_file and u.hashes.size]
    if not ids:
        empty = np.array([], dtype=np.int64)
        return empty, empty, empty, ids
    hashes = np.concatenate([klass.units[i].hashes for i in ids])
    owner = np.concatenate([np.full(klass.units[i].hashes.size, i, dtype=np.int64) for i in ids])
    order = np.argsort(hashes, kind="stable")
    hashes, owner = hashes[order], owner[order]
    starts = np.flatnonzero(np.r_[True, hashes[1:] != hashes[:-1]])
    ends = np.r_[starts[1:], hashes.size]
    student = np.array([u.student for u in klass.units], dtype=np.int64)
    tally = _Tally()
    for lo, hi in _batches((ends - starts) * (ends - starts - 1) // 2, PAIR_BATCH):
        tally.add(*_group_pairs(owner, starts[lo:hi], ends[lo:hi], student))
    keys, counts = tally.total()
    return keys // len(klass.units), keys % len(klass.units), counts, ids


def _batches(sizes: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """(first, end) slices of consecutive items, in order and covering them all, each adding up to
    at most `limit` plus one item's size."""
    if not sizes.size:
        return []
    total = np.cumsum(sizes)
    cuts = np.searchsorted(total, np.arange(limit, int(total[-1]), limit), side="right")
    edges = np.unique(np.r_[0, cuts, sizes.size]).tolist()
    return list(zip(edges[:-1], edges[1:]))


def _group_pairs(owner: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                 student: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unit pairs (a * units + b, a's student before b's) of different students within the
    groups [starts, ends) of `owner`, each with the fingerprints they share there."""
    sizes = ends - starts
    position = np.arange(starts[0], ends[-1]) if sizes.size else np.array([], dtype=np.int64)
    later = np.repeat(ends, sizes) - position - 1  # entries after each one in its group
    left = np.repeat(position, later)
    right = np.arange(left.size) - np.repeat(np.cumsum(later) - later, later) + left + 1
    a, b = owner[left], owner[right]
    other = student[a] != student[b]
    a, b = a[other], b[other]
    swap = student[a] > student[b]
    a, b = np.where(swap, b, a), np.where(swap, a, b)
    return np.unique(a * student.size + b, return_counts=True)


class _Tally:
    """Counts per key added up over the batches, folded as they come: a pair of units sharing
    fingerprints in many batches is one entry of the total, not one per batch (on 300 students
    the batches' entries alone took gigabytes)."""

    def __init__(self) -> None:
        self.keys, self.counts = np.array([], dtype=np.int64), np.array([], dtype=np.int64)
        self.pending: list[tuple[np.ndarray, np.ndarray]] = []
        self.pending_size = 0

    def add(self, keys: np.ndarray, counts: np.ndarray) -> None:
        self.pending.append((keys, counts))
        self.pending_size += keys.size
        if self.pending_size > max(PAIR_BATCH, self.keys.size):  # folds at most about twice per doubling
            self._fold()

    def total(self) -> tuple[np.ndarray, np.ndarray]:
        self._fold()
        return self.keys, self.counts

    def _fold(self) -> None:
        key = np.concatenate([self.keys, *(k for k, _ in self.pending)])
        count = np.concatenate([self.counts, *(c for _, c in self.pending)])
        self.pending, self.pending_size = [], 0
        order = np.argsort(key, kind="stable")
        key, count = key[order], count[order]
        first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if key.size else np.array([], dtype=np.int64)
        self.keys, self.counts = key[first], np.add.reduceat(count, first) if key.size else count


def _pairs(klass: _Class, config: Fingerprinting) -> list[PairResult]:
    student = np.array([u.student for u in klass.units], dtype=np.int64)
    sizes = np.array([u.hashes.size for u in klass.units], dtype=np.float64)
    n = len(klass.names)
    levels = [_shared_counts(klass, level_is_file) for level_is_file in (True, False)]
    a = np.concatenate([level[0] for level in levels])
    b = np.concatenate([level[1] for level in levels])
    shared = np.concatenate([level[2] for level in levels])
    score = 2 * shared / np.maximum(sizes[a] + sizes[b], 1) * np.minimum(1.0, shared / config.full_evidence)
    a, b, score = _with_literal(klass, a, b, score, config)
    keep = score >= config.floor
    a, b, score = a[keep], b[keep], score[keep]
    pair_key = student[a] * n + student[b]
    order = np.lexsort((b, a, -score, pair_key))  # per student pair, strongest first
    pair_key, a, b, score = pair_key[order], a[order], b[order], score[order]
    starts = np.flatnonzero(np.r_[True, pair_key[1:] != pair_key[:-1]]) if pair_key.size else np.array([], np.int64)
    rank = np.arange(pair_key.size) - np.repeat(starts, np.diff(np.r_[starts, pair_key.size]))
    top = rank < 4 * config.shown  # enough candidates for `shown` distinct matches
    found: dict[int, list[tuple[float, int, int]]] = {}
    for key, ua, ub, value in zip(pair_key[top].tolist(), a[top].tolist(), b[top].tolist(), score[top].tolist()):
        found.setdefault(key, []).append((value, ua, ub))
    results = []
    for i in range(klass.students):  # a listed public source is compared with the students only
        for j in range(i + 1, n):
            best = _distinct(klass, found.get(i * n + j, []), config.shown)
            matches = tuple(_match(klass, ua, ub, value) for value, ua, ub in best)
            results.append(PairResult(klass.names[i], klass.names[j], matches[0].score if matches else 0.0, matches))
    return results


def _with_literal(klass: _Class, a: np.ndarray, b: np.ndarray, score: np.ndarray,
                  config: Fingerprinting) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The unit matches with each literal copy scored by all its fingerprints outside the base
    (once per unit pair: the literal score replaces the fingerprints' where higher)."""
    if not klass.literal:
        return a, b, score
    la, lb = (np.array(side, dtype=np.int64) for side in zip(*sorted(klass.literal)))
    whole = np.array([_outside_base(klass.units[i])[0].size for i in la.tolist()], dtype=np.float64)
    a, b = np.r_[a, la], np.r_[b, lb]
    score = np.r_[score, np.minimum(1.0, whole / config.full_evidence)]
    order = np.lexsort((-score, b, a))
    a, b, score = a[order], b[order], score[order]
    first = np.r_[True, (a[1:] != a[:-1]) | (b[1:] != b[:-1])] if a.size else np.array([], dtype=bool)
    return a[first], b[first], score[first]


def _outside_base(unit: _Unit) -> tuple[np.ndarray, np.ndarray]:
    if unit.outside_base is None:
        raise ValueError(f"{unit.path}: a function unit has no whole-file fingerprints")
    return unit.outside_base


def _distinct(klass: _Class, best: list[tuple[float, int, int]], shown: int) -> list[tuple[float, int, int]]:
    """The strongest matches, a function left out when its file's match already says as much
    (a file copied whole matches function by function too)."""
    kept: list[tuple[float, int, int]] = []
    for candidate in best:
        value, ua, ub = candidate
        unit_a, unit_b = klass.units[ua], klass.units[ub]
        if unit_a.function is not None and any(
                klass.units[ka].function is None and klass.units[ka].path == unit_a.path
                and klass.units[kb].path == unit_b.path and kept_value >= value for kept_value, ka, kb in kept):
            continue
        kept.append(candidate)
        if len(kept) == shown:
            break
    return kept


def _match(klass: _Class, ua: int, ub: int, score: float) -> Match:
    unit_a, unit_b = klass.units[ua], klass.units[ub]
    if (ua, ub) in klass.literal:
        return Match(unit_a.path, None, unit_b.path, None, round(float(score), 4), 1.0, 1.0,
                     _ranges(*_outside_base(unit_a)), _ranges(*_outside_base(unit_b)), identical=True)
    common, at_a, at_b = np.intersect1d(unit_a.hashes, unit_b.hashes, assume_unique=True, return_indices=True)
    return Match(
        unit_a.path, unit_a.function.name if unit_a.function else None,
        unit_b.path, unit_b.function.name if unit_b.function else None,
        round(float(score), 4),
        round(common.size / max(unit_a.hashes.size, 1), 4), round(common.size / max(unit_b.hashes.size, 1), 4),
        _ranges(unit_a.first[at_a], unit_a.last[at_a]), _ranges(unit_b.first[at_b], unit_b.last[at_b]),
    )


def _line_count(ranges: Iterable[LineRange]) -> int:
    """Lines in `ranges` (of one file), each once."""
    return _line_count_by_file([("", r) for r in ranges])


def _line_count_by_file(ranges: Iterable[tuple[str, LineRange]]) -> int:
    """Lines in (path, range) pairs, each line of a file once (the ranges merged)."""
    count, path_at, reach = 0, None, 0
    for path, (first, last) in sorted(ranges):
        if path != path_at:
            path_at, reach = path, 0
        count += max(0, last - max(first, reach + 1) + 1)
        reach = max(reach, last)
    return count


def _ranges(first: np.ndarray, last: np.ndarray) -> tuple[LineRange, ...]:
    """The lines the shared fingerprints cover (first..last of each), merged into ranges."""
    if first.size == 0:
        return ()
    order = np.argsort(first, kind="stable")
    first, reach = first[order], np.maximum.accumulate(last[order])
    opens = np.flatnonzero(np.r_[True, first[1:] > reach[:-1] + 1])
    closes = np.r_[opens[1:] - 1, first.size - 1]
    return tuple(zip(first[opens].tolist(), reach[closes].tolist()))
