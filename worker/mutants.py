"""Mutants: realistic broken variants of a reference kit, for the grader's regression suite.

An assignment's mutant set is the file its plug-in names (worker.assignment; hw4's is
rubrics/hw4/mutants.yaml):

    mutants:
      - id: softmax_fw_no_syncthreads
        description: what a student got wrong
        kind: correctness            # or: speed (values right, speed credit must be lost), or
                                     # gaming (values right, the scored speedup must not rise)
        must_fail: ["1.1"]           # problem ids of the rubric it must fail / lose speed on
                                     # (kind: convention, values right under a reading the
                                     # starter allows: must_pass, full correctness points)
        detect: abi                  # how the failure shows, for the assignment's own GPU tests
                                     # (its words; none, the default: graded whole)
        edits:
          - file: src/softmax_kernel.cu
            find: "exact text"       # must occur exactly once in the reference file
            replace: "new text"
          - file: minitorch/nn.py
            regex: "pattern"         # or a regular expression (Python re, MULTILINE),
            replace: "repl"          # which must match exactly once; replace may use \\1

`apply_mutant` copies the reference (markers kept, build outputs left out) and applies the
edits; it fails loudly (MutantError) when a `find` no longer matches exactly once, so the set
breaks visibly when the reference changes. Standard library + PyYAML only.
"""
from __future__ import annotations

import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from worker.assignment import assignment_of
from worker.rubric import load_rubric
from worker.starter_kit import starter_files

if TYPE_CHECKING:
    from worker.build import KernelTarget

KINDS = frozenset({"correctness", "speed", "gaming", "convention"})


class MutantError(ValueError):
    """A mutant set is malformed, or a mutant no longer applies to the reference."""


@dataclass(frozen=True)
class Edit:
    file: str
    replace: str
    find: str | None = None
    regex: str | None = None

    def apply(self, text: str, mutant_id: str) -> str:
        if self.find is not None:
            count = text.count(self.find)
            if count != 1:
                raise MutantError(
                    f"mutant {mutant_id}: in {self.file}, 'find' text occurs {count} times "
                    f"(must be exactly once): {self.find!r}"
                )
            return text.replace(self.find, self.replace, 1)
        assert self.regex is not None
        pattern = re.compile(self.regex, re.MULTILINE)
        matches = list(pattern.finditer(text))
        if len(matches) != 1:
            raise MutantError(
                f"mutant {mutant_id}: in {self.file}, 'regex' matches {len(matches)} times "
                f"(must be exactly once): {self.regex!r}"
            )
        return pattern.sub(self.replace, text, count=1)


@dataclass(frozen=True)
class Mutant:
    id: str
    description: str
    kind: str
    must_fail: tuple[str, ...]
    edits: tuple[Edit, ...]
    detect: str = "none"
    must_pass: tuple[str, ...] = ()  # kind "convention": problems it keeps full correctness on

    @property
    def files(self) -> tuple[str, ...]:
        """The files this mutant edits, in first-edit order, without repeats."""
        return tuple(dict.fromkeys(e.file for e in self.edits))


def _parse_edit(raw: object, mutant_id: str) -> Edit:
    if not isinstance(raw, dict):
        raise MutantError(f"mutant {mutant_id}: each edit must be a mapping")
    unknown = set(raw) - {"file", "find", "regex", "replace"}
    if unknown:
        raise MutantError(f"mutant {mutant_id}: unknown edit keys {sorted(unknown)}")
    if "file" not in raw or "replace" not in raw:
        raise MutantError(f"mutant {mutant_id}: an edit needs 'file' and 'replace'")
    if ("find" in raw) == ("regex" in raw):
        raise MutantError(f"mutant {mutant_id}: an edit needs exactly one of 'find' or 'regex'")
    file = str(raw["file"])
    if file.startswith("/") or ".." in Path(file).parts:
        raise MutantError(f"mutant {mutant_id}: edit file must be relative inside the kit: {file}")
    find = raw.get("find")
    if find is not None and not str(find):
        raise MutantError(f"mutant {mutant_id}: empty 'find'")
    return Edit(
        file=file,
        replace=str(raw["replace"]),
        find=None if find is None else str(find),
        regex=None if raw.get("regex") is None else str(raw["regex"]),
    )


def parse_mutants(data: object, source: str = "<mutants>",
                  problem_ids: frozenset[str] | None = None) -> list[Mutant]:
    """The mutants of `data`; with `problem_ids` (the rubric's), each must_fail lies within them."""
    if not isinstance(data, dict) or not isinstance(data.get("mutants"), list):
        raise MutantError(f"{source}: expected a mapping with a 'mutants' list")
    mutants: list[Mutant] = []
    seen: set[str] = set()
    for raw in data["mutants"]:
        if not isinstance(raw, dict) or "id" not in raw:
            raise MutantError(f"{source}: every mutant needs an 'id'")
        mid = str(raw["id"])
        if mid in seen:
            raise MutantError(f"{source}: duplicate mutant id {mid}")
        seen.add(mid)
        kind = str(raw.get("kind", ""))
        if kind not in KINDS:
            raise MutantError(f"mutant {mid}: kind must be one of {sorted(KINDS)}, not {kind!r}")
        must_fail = tuple(str(p) for p in raw.get("must_fail") or ())
        must_pass = tuple(str(p) for p in raw.get("must_pass") or ())
        key, named, other = (("must_pass", must_pass, must_fail) if kind == "convention"
                             else ("must_fail", must_fail, must_pass))
        if other or not named or (problem_ids is not None and not set(named) <= problem_ids):
            raise MutantError(f"mutant {mid}: a {kind} mutant names its problems in {key} alone, a "
                              f"non-empty subset of {sorted(problem_ids or ())}")
        edits = tuple(_parse_edit(e, mid) for e in raw.get("edits") or ())
        if not edits:
            raise MutantError(f"mutant {mid}: no edits")
        mutants.append(
            Mutant(
                id=mid,
                description=str(raw.get("description", "")).strip(),
                kind=kind,
                must_fail=must_fail,
                edits=edits,
                detect=str(raw.get("detect", "none")),
                must_pass=must_pass,
            )
        )
    return mutants


def load_mutants(slug: str, *, search: Iterable[Path] = ()) -> list[Mutant]:
    """The mutant set of the assignment `slug` (its rubric found as worker.rubric.load_rubric
    finds it, `search` folders after rubrics/), checked against its rubric's problems."""
    rubric = load_rubric(slug, search=search)
    path = assignment_of(rubric).mutants_file
    if path is None or not path.is_file():
        raise MutantError(f"no mutant set for {slug!r}: {path or 'its plug-in names none'}")
    return parse_mutants(yaml.safe_load(path.read_text()), path.name, frozenset(p.id for p in rubric.problems))


def mutate_text(reference_dir: Path, mutant: Mutant) -> dict[str, str]:
    """The mutated text of every file the mutant edits (edits applied in order)."""
    texts: dict[str, str] = {}
    for edit in mutant.edits:
        if edit.file not in texts:
            path = Path(reference_dir) / edit.file
            if not path.is_file():
                raise MutantError(f"mutant {mutant.id}: file {edit.file} not in the reference kit")
            texts[edit.file] = path.read_text()
        texts[edit.file] = edit.apply(texts[edit.file], mutant.id)
    return texts


def touched_kernels(mutant: Mutant, kernels: Iterable[KernelTarget], root: Path) -> list[KernelTarget]:
    """The kernel targets (worker.build.KernelTarget) a mutant affects: those whose source it
    edits, plus those that #include a header it edits (by file name). `root` holds the sources."""
    touched = set(mutant.files)
    headers = {Path(f).name for f in touched if f.endswith((".h", ".cuh", ".hpp", ".inl"))}
    chosen = []
    for target in kernels:
        if target.source in touched:
            chosen.append(target)
            continue
        source = Path(root) / target.source
        if headers and source.is_file():
            includes = set(re.findall(r'#\s*include\s+"(?:[^"]*/)?([^"/]+)"', source.read_text()))
            if headers & includes:
                chosen.append(target)
    return chosen


def apply_mutant(reference_dir: Path, mutant: Mutant, dest: Path) -> Path:
    """Copy `reference_dir` to `dest` (build outputs and caches left out, solution markers
    kept) with the mutant's edits applied. `dest` must not exist or be an empty folder.
    Raises MutantError when an edit no longer applies; nothing is written in that case."""
    reference_dir = Path(reference_dir)
    dest = Path(dest)
    texts = mutate_text(reference_dir, mutant)  # fail before writing anything
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise FileExistsError(f"destination exists and is not an empty folder: {dest}")
    dest.mkdir(parents=True, exist_ok=True)
    for rel in starter_files(reference_dir):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(reference_dir / rel, target)
    for file, text in texts.items():
        (dest / file).write_text(text)
    return dest
