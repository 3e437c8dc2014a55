"""Winnowed fingerprints of one source file (copydetect's tokenizer and winnowing), each with
the lines it covers, and the file's functions (grader.similarity.units)."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np
from copydetect import defaults
from copydetect.utils import filter_code, get_document_fingerprints
from pygments import lexers, token
from pygments.util import ClassNotFound

from grader.similarity.units import Function, functions_of


@dataclass(frozen=True)
class Fingerprinting:
    """k: shortest match (in filtered characters) that is noise; window: winnowing window;
    full_evidence: fingerprints in common for a match to weigh fully; shown: matches
    kept per pair; floor: weakest match kept; literal_copies: files identical apart from
    whitespace count whole (grader.similarity.compare), right only when the base is the starter the
    students received: against a stand-in, two students who both left a file of the real
    starter alone would hand in identical files. near_identical: the share of each side's own
    code two files hold in common to join one cluster (grader.similarity.clusters);
    cluster_min_prints: the least own code (fingerprints) a file needs to be clustered."""

    k: int = defaults.NOISE_THRESHOLD
    window: int = defaults.GUARANTEE_THRESHOLD - defaults.NOISE_THRESHOLD + 1
    full_evidence: int = 200
    shown: int = 4
    floor: float = 0.02
    literal_copies: bool = True
    near_identical: float = 0.9
    cluster_min_prints: int = 5


@dataclass(frozen=True)
class FilePrint:
    """A file's winnowed fingerprints: hash, first and last line of each occurrence; and the
    sha256 of its normalized text (`normalized_digest`)."""

    hashes: np.ndarray  # int64
    first: np.ndarray  # int32
    last: np.ndarray  # int32
    functions: tuple[Function, ...]
    digest: str


def fingerprint_file(path: str, text: str, config: Fingerprinting) -> FilePrint:
    filtered, offsets = filter_code(text, path)  # the lexer from the name (.cu: CUDA, .py: Python)
    _, where = get_document_fingerprints(filtered, config.k, config.window)
    pairs = [(h, i) for h, idx in where.items() for i in idx]
    hashes = np.array([h for h, _ in pairs], dtype=np.int64)
    starts = np.array([i for _, i in pairs], dtype=np.int64)
    line_starts = np.cumsum([0] + [len(line) for line in text.splitlines(keepends=True)])
    first = _line_of(_raw_offset(starts, offsets), line_starts)
    last = _line_of(_raw_offset(starts + config.k - 1, offsets), line_starts)
    return FilePrint(hashes, first, last, functions_of(path, text), normalized_digest(filtered))


def normalized_digest(filtered: str) -> str:
    """sha256 of a file's text as the fingerprints read it (copydetect's `filter_code`: names,
    strings, comments and layout normalized), whitespace a lexer left in dropped too: two files
    of one digest differ in nothing the comparison sees."""
    return hashlib.sha256("".join(filtered.split()).encode("utf-8", errors="replace")).hexdigest()


_COMMENT_MARKS = re.compile(r"^[ \t]*(?://+|/\*+|\*+/?|#+|\"\"\"|\'\'\')?[ \t]?|[ \t]*(?:\*+/|\"\"\"|\'\'\')[ \t]*$",
                            re.MULTILINE)


def hint_text(path: str, text: str) -> str:
    """The code a file's comments and docstrings hold, their marks removed, a line each: what a
    starter gives in its hints (`// Hint: if (len <= 32) ker<float, 1><<<...>>>(...)`, a commented
    out call, an example in a docstring). Fingerprinted as code, it joins the starter's own
    fingerprints, so students who write what the hints show share nothing by it. Prose left in
    tokenizes as runs of names, which no code has; "" for a file the lexer does not know."""
    try:
        lexer = lexers.get_lexer_for_filename(path)
    except ClassNotFound:
        return ""
    kept = [value for kind, value in lexer.get_tokens(text)
            if (kind in token.Comment and kind not in (token.Comment.Preproc, token.Comment.Hashbang))
            or kind in token.String.Doc]
    return "\n".join(_COMMENT_MARKS.sub("", value) for value in kept)


def _raw_offset(filtered_at: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Positions in the filtered text as positions in the file (`_removed_before`)."""
    rows = _removed_before(offsets)
    if len(rows) == 0:
        return filtered_at
    at = np.clip(np.searchsorted(rows[:, 0], filtered_at), 0, rows.shape[0] - 1)
    return filtered_at + rows[:, 1][at]


def _removed_before(offsets: np.ndarray) -> np.ndarray:
    """copydetect's rows, (the last filtered character before a token, characters removed
    before that token), repaired: a character's removed count is then the first row's at or
    after it. Two faults put shared lines dozens of lines away from the code: its first row,
    [0, 0], is no token's (left in, it precedes the rows of a comment that opens the file, whose
    index is -1, and maps the file's start as if nothing had been removed there); and a class
    name's row holds the name's length less one instead of the running count (the next row's
    count, taken after that name, less it is the right one)."""
    rows = np.array(offsets[1:], dtype=np.int64)
    if len(rows) < 2:
        return rows
    counts = rows[:, 1]
    before = np.r_[np.iinfo(np.int64).min, np.maximum.accumulate(counts)[:-1]]
    broken = np.flatnonzero(counts[:-1] < before[:-1])
    counts[broken] = counts[broken + 1] - counts[broken]
    rows[:, 1] = np.maximum.accumulate(counts)
    return rows


def _line_of(raw_at: np.ndarray, line_starts: np.ndarray) -> np.ndarray:
    return np.searchsorted(line_starts, raw_at, side="right").astype(np.int32)
