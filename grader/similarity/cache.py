"""Fingerprints of source files, computed once per content: kept in memory and, given a
folder (`KG_DATA_DIR/reports/fingerprints` for the service), on disk by the sha256 of the
file's text and the fingerprinting settings, so a submission compared again (or the same file
in many submissions) is tokenized once (an entry kept before a file's normalized digest was, has
none: it is computed again). Misses are fingerprinted in parallel processes."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from grader.datadir import private_dir
from grader.similarity.prints import FilePrint, Fingerprinting, fingerprint_file
from grader.similarity.units import Function

Progress = Callable[[int, int], None]  # (files fingerprinted, files to fingerprint)


class PrintCache:
    def __init__(self, config: Fingerprinting, root: Path | None = None, workers: int | None = None) -> None:
        self.config = config
        self.root = root
        self.workers = workers or len(os.sched_getaffinity(0))
        self._memory: dict[str, FilePrint] = {}

    def key(self, path: str, text: str) -> str:
        # the lexer is chosen by the file's suffix; the units by its language
        spec = f"{self.config.k}/{self.config.window}/{Path(path).suffix}/v2\0"  # v2: lines of prints._removed_before
        return hashlib.sha256(spec.encode() + text.encode("utf-8", errors="replace")).hexdigest()

    def get(self, path: str, text: str) -> FilePrint:
        key = self.key(path, text)
        found = self._memory.get(key) or self._load(key)
        if found is None:
            found = fingerprint_file(path, text, self.config)
            self._store(key, found)
        self._memory[key] = found
        return found

    def fill(self, files: Iterable[tuple[str, str]], progress: Progress | None = None) -> None:
        """Fingerprints every (path, text) not yet cached, across `workers` processes."""
        missing: dict[str, tuple[str, str]] = {}
        for path, text in files:
            key = self.key(path, text)
            if key not in self._memory and key not in missing:
                loaded = self._load(key)
                if loaded is None:
                    missing[key] = (path, text)
                else:
                    self._memory[key] = loaded
        todo = list(missing.items())
        if self.workers < 2 or len(todo) < 8:
            self._collect(todo, (fingerprint_file(path, text, self.config) for _, (path, text) in todo), progress)
            return
        with ProcessPoolExecutor(self.workers) as pool:
            computed = pool.map(fingerprint_file, [p for _, (p, _) in todo], [t for _, (_, t) in todo],
                                [self.config] * len(todo), chunksize=max(1, len(todo) // (8 * self.workers)))
            self._collect(todo, computed, progress)

    def _collect(self, todo: list[tuple[str, tuple[str, str]]], computed: Iterable[FilePrint],
                 progress: Progress | None) -> None:
        for done, ((key, _), found) in enumerate(zip(todo, computed), start=1):
            self._memory[key] = found
            self._store(key, found)
            if progress is not None:
                progress(done, len(todo))

    def _load(self, key: str) -> FilePrint | None:
        if self.root is None:
            return None
        try:
            with np.load(self.root / key[:2] / f"{key}.npz") as data:
                functions = tuple(Function(name, int(first), int(last)) for name, first, last in
                                  json.loads(str(data["functions"])))
                return FilePrint(data["hashes"], data["first"], data["last"], functions, str(data["digest"]))
        except (FileNotFoundError, ValueError, KeyError, OSError):
            return None

    def _store(self, key: str, found: FilePrint) -> None:
        if self.root is None:
            return
        folder = private_dir(self.root / key[:2])
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".fp-", suffix=".npz")
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, hashes=found.hashes, first=found.first, last=found.last, digest=np.array(found.digest),
                     functions=np.array(json.dumps([[f.name, f.first, f.last] for f in found.functions])))
        os.replace(tmp, folder / f"{key}.npz")
