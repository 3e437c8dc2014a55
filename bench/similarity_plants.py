"""Planted copies for the similarity benches: a file copied verbatim, the same file disguised
(identifiers renamed, comments and layout changed, functions reordered), one function pasted
into another student's file; and the perturbations that make synthetic students."""
from __future__ import annotations

import random
import re
from pathlib import Path

from grader.similarity.compare import tree_sources
from grader.similarity.units import functions_of
from worker.rubric import load_rubric
from worker.starter_kit import render_starter

_WORD = re.compile(r"\b[A-Za-z_]\w*\b")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/|#[^\n!]*$", re.S | re.M)


def function_text(path: str, text: str, name: str) -> str | None:
    """The lines of function `name` in `text` (the first of that name), or None."""
    found = next((f for f in functions_of(path, text) if f.name == name), None)
    if found is None:
        return None
    return "".join(text.splitlines(keepends=True)[found.first - 1: found.last])


def paste_function(path: str, into: str, name: str, pasted: str) -> str | None:
    """`into` with its function `name` replaced by `pasted`; None when `into` has no `name`."""
    found = next((f for f in functions_of(path, into) if f.name == name), None)
    if found is None:
        return None
    lines = into.splitlines(keepends=True)
    return "".join(lines[: found.first - 1]) + pasted + "".join(lines[found.last:])


def disguise(path: str, text: str, base_text: str, seed: int) -> str:
    """Identifiers the student introduced (absent from the base file) renamed, comments
    replaced, indentation and blank lines changed, the first two functions swapped."""
    rng = random.Random(seed)
    python = path.endswith(".py")
    known = set(_WORD.findall(base_text))
    if not python:
        text = _COMMENT.sub("", text)
    fresh = sorted({w for w in _WORD.findall(text) if w not in known and len(w) > 2})
    names = {w: f"{rng.choice(['tmp', 'val', 'acc', 'buf', 'idx'])}_{i}" for i, w in enumerate(fresh)}
    text = _WORD.sub(lambda m: names.get(m[0], m[0]), text)
    text = _swap_first_functions(path, text)
    out = []
    for line in text.splitlines():
        if not python:
            stripped = line.lstrip(" ")
            line = "\t" * ((len(line) - len(stripped)) // 2) + stripped
        out.append(line)
        if line.strip() and rng.random() < 0.15:
            out.append("" if python else f"// step {rng.randrange(100)}")
    return "\n".join(out) + "\n"


def _swap_first_functions(path: str, text: str) -> str:
    functions = [f for f in functions_of(path, text) if "." not in f.name]
    if len(functions) < 2:
        return text
    one, two = functions[0], functions[1]
    lines = text.splitlines(keepends=True)
    block = lambda f: "".join(lines[f.first - 1: f.last])  # noqa: E731
    return ("".join(lines[: one.first - 1]) + block(two) + "".join(lines[one.last: two.first - 1])
            + block(one) + "".join(lines[two.last:]))


def perturb(path: str, text: str, rng: random.Random, rate: float = 0.35) -> str:
    """A synthetic student's version of a real file: statements get extra tokens that survive
    normalization (a cast, a parenthesis, an empty statement), at `rate` of the lines, so two
    perturbations of one file share some code without being a copy."""
    python = path.endswith(".py")
    out = []
    for line in text.splitlines():
        if line.strip() and rng.random() < rate:
            if python and " = " in line and line.rstrip().endswith((")", "]")):
                line = line.replace(" = ", " = (", 1) + ")"
            elif not python and line.rstrip().endswith(";"):
                line = line.rstrip() + ";" * rng.randint(1, 3)
        out.append(line)
    return "\n".join(out) + "\n"


def smoke_corpus(dest: Path, students: int = 3, seed: int = 0) -> Path:
    """A corpus the similarity benches' --smoke runs on anywhere (.corpus/ is not in git): the
    kit's student starter as the official one, and `students` perturbed copies of the reference
    kit, each under src/kitN/llmsys_hw4 as the real corpus lays them out."""
    rubric = load_rubric("hw4")
    render_starter(rubric.starter_dir, dest / "official")
    kit = tree_sources(rubric.starter_dir, rubric.student_files)
    rng = random.Random(seed)
    for i in range(students):
        for path, text in kit.items():
            target = dest / "src" / f"kit{i}" / "llmsys_hw4" / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(perturb(path, text, rng))
    return dest
