"""Winnowed fingerprints of one source file (copydetect's tokenizer and winnowing), each with
the lines it covers, and the file's functions (grader.similarity.units)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from copydetect import defaults
from copydetect.utils import filter_code, get_document_fingerprints

from grader.similarity.units import Function, functions_of


@dataclass(frozen=True)
class Fingerprinting:
    """k: shortest match (in filtered characters) that is noise; window: winnowing window;
    common_*: a fingerprint held by more than max(common_min, common_share x students) is
    common; full_evidence: fingerprints in common for a match to weigh fully; shown: matches
    kept per pair; floor: weakest match kept; literal_copies: files identical apart from
    whitespace count whole (grader.similarity.compare), right only when the base is the starter the
    students received: against a stand-in, two students who both left a file of the real
    starter alone would hand in identical files."""

    k: int = defaults.NOISE_THRESHOLD
    window: int = defaults.GUARANTEE_THRESHOLD - defaults.NOISE_THRESHOLD + 1
    common_share: float = 0.25
    common_min: int = 3
    full_evidence: int = 200
    shown: int = 4
    floor: float = 0.02
    literal_copies: bool = True


@dataclass(frozen=True)
class FilePrint:
    """A file's winnowed fingerprints: hash, first and last line of each occurrence."""

    hashes: np.ndarray  # int64
    first: np.ndarray  # int32
    last: np.ndarray  # int32
    functions: tuple[Function, ...]


def fingerprint_file(path: str, text: str, config: Fingerprinting) -> FilePrint:
    filtered, offsets = filter_code(text, path)  # the lexer from the name (.cu: CUDA, .py: Python)
    _, where = get_document_fingerprints(filtered, config.k, config.window)
    pairs = [(h, i) for h, idx in where.items() for i in idx]
    hashes = np.array([h for h, _ in pairs], dtype=np.int64)
    starts = np.array([i for _, i in pairs], dtype=np.int64)
    line_starts = np.cumsum([0] + [len(line) for line in text.splitlines(keepends=True)])
    first = _line_of(_raw_offset(starts, offsets), line_starts)
    last = _line_of(_raw_offset(starts + config.k - 1, offsets), line_starts)
    return FilePrint(hashes, first, last, functions_of(path, text))


def _raw_offset(filtered_at: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    if len(offsets) == 0:
        return filtered_at
    at = np.clip(np.searchsorted(offsets[:, 0], filtered_at), 0, offsets.shape[0] - 1)
    return filtered_at + offsets[:, 1][at]


def _line_of(raw_at: np.ndarray, line_starts: np.ndarray) -> np.ndarray:
    return np.searchsorted(line_starts, raw_at, side="right").astype(np.int32)
