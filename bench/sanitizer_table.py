"""Which planted and real bugs compute-sanitizer names, and at which line (issue 33).

    bash tests/gpu/suite.sh --bench bench/sanitizer_table.py [--mutants ID,...] [--zip PATH ...]

Grades, with production's settings (bench/production_config.py) and the sanitizer as
production runs it (KG_SANITIZER, default auto), each correctness mutant of the kit
(rubrics/hw4/mutants.yaml) on the problems it must fail, then each --zip on the four kernel
problems, one after another. For every graded problem with a failed C ABI case it prints the
tools that ran, the first findings the student is shown, the session's seconds and, for a
mutant, whether a finding names the file and a line within LINE_SLACK of the mutant's edit
(the line a careful reader would point at). Writes $OUT/sanitizer_table.json and .md.
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_common import gpu_description, log, safe_commit  # noqa: E402
from fidelity import gpu_present, outcome_record  # noqa: E402
from production_config import production_configs  # noqa: E402

from worker.mutants import Mutant, apply_mutant, load_mutants, mutate_text  # noqa: E402
from worker.rubric import load_rubric  # noqa: E402
from worker.sanitizer import Finding, shown  # noqa: E402
from worker.starter_kit import zip_tree  # noqa: E402

KERNEL_PROBLEMS = ("1.1", "1.2", "2.1", "2.2")
LINE_SLACK = 3  # a race is reported at its two accesses, a few lines from a removed barrier


@dataclass(frozen=True)
class Subject:
    """One zip to grade: a mutant of the kit (with the lines its edits changed) or a real one."""

    name: str
    zip_path: Path
    problems: tuple[str, ...]
    edited: dict[str, set[int]]  # file -> lines of the mutated text at or next to an edit; {} for a real zip


def edited_lines(before: str, after: str) -> set[int]:
    """1-based lines of `after` that an edit inserted or replaced; a deletion counts the lines
    either side of where it was."""
    lines: set[int] = set()
    matcher = difflib.SequenceMatcher(a=before.splitlines(), b=after.splitlines(), autojunk=False)
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            lines.update(range(j1 + 1, j2 + 1))
        elif tag == "delete":
            lines.update((j1, j1 + 1))
    return lines


def right_line(findings: Iterable[Finding], edited: dict[str, set[int]]) -> bool:
    """Whether a finding names an edited file at a line within LINE_SLACK of an edit."""
    return any(f.file in edited and f.line is not None and any(abs(f.line - n) <= LINE_SLACK for n in edited[f.file])
               for f in findings)


def mutant_subjects(kit: Path, mutants: list[Mutant], folder: Path) -> list[Subject]:
    subjects = []
    for mutant in mutants:
        texts = mutate_text(kit, mutant)
        edited = {file: edited_lines((kit / file).read_text(), text) for file, text in texts.items()}
        tree = apply_mutant(kit, mutant, folder / mutant.id)
        zipped = zip_tree(tree, folder / f"{mutant.id}.zip")
        subjects.append(Subject(mutant.id, zipped, tuple(mutant.must_fail), edited))
    return subjects


def grade(subject: Subject, work: Path) -> dict[str, Any]:
    """The subject graded on its problems through the production pipeline and GPU stage."""
    from rubrics.hw4.grade import run_gpu_stage
    from worker.assignment import StageProgress
    from worker.pipeline import grade_submission

    rubric = load_rubric("hw4")
    config, stage_config, _ = production_configs(rubric, work / "data", subject.problems)

    def gpu_stage(r: Any, staged: Path, reference: Path, work_dir: Path, *gradable: tuple[str, ...],
                  **_: Any) -> list[Any]:
        # as production's: only the problems whose kernels built are measured
        chosen = replace(stage_config, problems=tuple(p for p in subject.problems if not gradable or p in gradable[0]))
        return run_gpu_stage(r, staged, reference, work_dir, chosen, StageProgress())

    started = time.monotonic()
    outcome = grade_submission(subject.zip_path, rubric, work / "job", config, lambda stage: None,
                               gpu_stage if gpu_present() else None, None)
    return outcome_record(outcome, time.monotonic() - started, subject.problems)


def rows_of(subject: Subject, record: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for pid, problem in record.get("problems", {}).items():
        session = problem.get("sanitizer") or {}
        findings = shown(session) if session else []
        rows.append({
            "subject": subject.name, "problem": pid, "points": f"{round(problem['points'], 2):g}/{problem['max_points']:g}",
            "tools": ", ".join(session.get("tools") or []) or "-",
            "shown": [f.text() for f in findings], "note": session.get("note", ""),
            "seconds": session.get("seconds"),
            "right_line": (right_line([Finding.from_dict(f) for f in session.get("findings") or []], subject.edited)
                           if subject.edited and session else None),
            "first_failure": problem.get("first_failure", ""),
            "edited": {file: sorted(lines) for file, lines in subject.edited.items()},
        })
    return rows


def markdown(rows: list[dict[str, Any]], header: list[str]) -> str:
    out = [*header, "", "| submission or mutant | problem | points | tools run | first findings shown | right line | "
           "sanitizer seconds |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        said = "<br>".join(r["shown"]) or (r["note"] or ("found nothing" if r["tools"] != "-" else "no session"))
        right = {True: "yes", False: "no", None: "-"}[r["right_line"]]
        out.append(f"| {r['subject']} | {r['problem']} | {r['points']} | {r['tools']} | {said.replace('|', '/')} | "
                   f"{right} | {r['seconds'] if r['seconds'] is not None else '-'} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mutants", default="all", help="comma-separated mutant ids, 'all' or 'none'")
    parser.add_argument("--zip", action="append", type=Path, default=[], help="a real submission, graded on 1.1-2.2")
    parser.add_argument("--budget", type=float, default=0.0, help="seconds; no new grade starts past them")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".gpu-out")))
    args = parser.parse_args(argv)
    kit = load_rubric("hw4").starter_dir
    chosen = {m.strip() for m in args.mutants.split(",") if m.strip()}
    mutants = [m for m in load_mutants("hw4") if m.kind == "correctness" and set(m.must_fail) <= set(KERNEL_PROBLEMS)
               and ("all" in chosen or m.id in chosen)]
    work = Path(tempfile.mkdtemp(prefix="kg-sanitizer-table-"))
    work.chmod(0o711)  # the sandbox user reaches the job folders
    deadline = time.monotonic() + args.budget if args.budget > 0 else None
    rows: list[dict[str, Any]] = []
    try:
        subjects = mutant_subjects(kit, mutants, work / "mutants")
        subjects += [Subject(z.stem, z.absolute(), KERNEL_PROBLEMS, {}) for z in args.zip]
        for subject in subjects:
            if deadline is not None and time.monotonic() > deadline:
                log(f"{subject.name}: skipped (budget)")
                continue
            started = time.monotonic()
            record = grade(subject, work / f"grade-{subject.name}")
            rows += rows_of(subject, record)
            log(f"{subject.name}: {time.monotonic() - started:.0f} s; "
                + "; ".join(f"{r['problem']} {r['points']} [{r['tools']}] {r['shown'][:1] or r['note']}"
                            for r in rows if r["subject"] == subject.name))
            shutil.rmtree(work / f"grade-{subject.name}", ignore_errors=True)
    finally:
        header = [f"### compute-sanitizer on the kit's mutants and real submissions ({date.today().isoformat()})", "",
                  f"{gpu_description()}; commit {safe_commit()}; production settings; "
                  f"command `bench/sanitizer_table.py {' '.join(argv if argv is not None else sys.argv[1:])}`."]
        text = markdown(rows, header)
        print(text)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "sanitizer_table.md").write_text(text)
        (args.out / "sanitizer_table.json").write_text(json.dumps(rows, indent=1, default=str))
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
