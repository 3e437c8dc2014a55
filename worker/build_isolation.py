"""Build failures isolate: which of the rubric's kernels did not build, which problems that
leaves out, and the words that say so (each problem's reason, the end of the build log, the
run's message). worker.pipeline grades the other problems, with an empty stand-in library in
place of each kernel that did not build.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from worker.build import BuildResult, KernelTarget
from worker.rubric import Rubric

ERROR_LINE_CHARS = 200  # of a compiler's first error line, quoted in a problem's reason
OVER_BUDGET_HINT = ("a whole build of the course's kernels normally takes well under that. "
                    "Look for template recursion or huge unrolled loops.")


# Where a compiler puts an error: nvcc's `src/x.cu(12): error: ...`, gcc's and clang's
# `src/x.cu:12:5: error: ...` (also `fatal error`, nvcc's `catastrophic error`).
_ERROR_AT = re.compile(r"^\s*(?P<file>[^\s():][^():]*?)(?:\((?P<paren>\d+)\)|:(?P<colon>\d+)(?::\d+)?)"
                       r"\s*:\s*(?:fatal |catastrophic )?error\b\W*(?P<message>.*)$", re.IGNORECASE)


@dataclass(frozen=True)
class CompilerError:
    """The first line of a build log that says "error": its number in the log, its text, and
    the source file and line the compiler names there (None when the line names none: a
    linker's or nvcc's own complaint)."""

    log_line: int  # 1-based
    text: str
    file: str | None = None
    line: int | None = None
    message: str = ""  # what the compiler says after the location


def first_compiler_error(log: str) -> CompilerError | None:
    for number, text in enumerate(log.splitlines(), start=1):
        if "error" not in text.lower():
            continue
        at = _ERROR_AT.match(text)
        if at is None:
            return CompilerError(number, text.strip())
        return CompilerError(number, text.strip(), at["file"].strip(), int(at["paren"] or at["colon"]),
                             at["message"].strip())
    return None


def first_error_line(log: str) -> str:
    """The compiler's first line that says "error" (else its last line): what a problem's
    reason quotes of a build that failed."""
    first = first_compiler_error(log)
    if first is not None:
        return first.text
    lines = [ln for ln in log.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "no compiler output"


@dataclass(frozen=True)
class Unusable:
    """A kernel that did not build: its source is missing, nvcc failed on it, or nvcc ran past
    the per-file wall budget on it."""

    kernel: KernelTarget
    missing: bool
    error_line: str = ""  # the compiler's first error line, cut to ERROR_LINE_CHARS
    over_budget_s: float | None = None

    @property
    def short(self) -> str:
        if self.over_budget_s is not None:
            return (f"{self.kernel.source} did not finish compiling within {self.over_budget_s:g} s, "
                    "the per-file budget")
        return f"{self.kernel.source} {'is missing' if self.missing else 'did not compile'}"

    def reason(self, rubric: Rubric) -> str:
        """What a problem that needs this kernel tells the student."""
        if self.over_budget_s is not None:
            return f"{self.short}; {OVER_BUDGET_HINT}"
        if not self.missing:
            return f"{self.short}: {self.error_line}; see the build log"
        hint = f": {self.kernel.missing_hint}" if self.kernel.missing_hint else ""
        return f"{self.short}{hint}; {_who_needs(rubric, self.kernel.name)}"


def _needed_by(rubric: Rubric, kernel: str) -> list[str]:
    return [p.id for p in rubric.problems if kernel in p.needs]


def _who_needs(rubric: Rubric, kernel: str) -> str:
    ids = _needed_by(rubric, kernel)
    if len(ids) == len(rubric.problems):
        return "every problem needs it"
    if len(ids) == 1:
        return f"problem {ids[0]} needs it"
    return f"problems {_and(ids)} need it" if ids else "no problem needs it"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def unusable_kernels(rubric: Rubric, results: list[BuildResult], missing: tuple[str, ...]) -> list[Unusable]:
    """The rubric's kernels that did not build, in rubric order."""
    failed = {r.name: r for r in results if not r.ok}
    return [Unusable(k, k.source in missing, "" if k.source in missing
                     else first_error_line(failed[k.name].log)[:ERROR_LINE_CHARS], failed[k.name].over_budget_s)
            for k in rubric.kernels if k.name in failed]


def blocked_problems(rubric: Rubric, unusable: list[Unusable]) -> dict[str, list[str]]:
    """Problem id -> the reasons it cannot be graded, for each problem needing an unusable kernel."""
    by_name = {u.kernel.name: u for u in unusable}
    blocked = {p.id: [by_name[n].reason(rubric) for n in p.needs if n in by_name] for p in rubric.problems}
    return {pid: why for pid, why in blocked.items() if why}


def not_graded(why: list[str]) -> str:
    return "not graded: " + "; and ".join(why)


def blocked_summary(unusable: list[Unusable], blocked: dict[str, list[str]]) -> str:
    noun = "Problem" if len(blocked) == 1 else "Problems"
    return f"{noun} {_and(list(blocked))} not graded: {_and([u.short for u in unusable])}; see the build log."


def isolation_log(rubric: Rubric, unusable: list[Unusable], blocked: dict[str, list[str]]) -> str:
    """The end of the build log: what did not build and which problems that leaves out (no
    compiler line again: the run page links the log's first line that says "error")."""
    lines = ["", "== not graded because of the build"]
    for u in unusable:
        left_out = _needed_by(rubric, u.kernel.name)
        lines.append(f"{u.short}: not graded: {_and(left_out)}" if left_out else f"{u.short}: no problem needs it")
    if len(blocked) < len(rubric.problems):
        stubs = ", ".join(u.kernel.output for u in unusable)
        lines.append(f"in place of {stubs}: an empty library (it exports nothing), so that code loading "
                     "every library still loads for the problems that do not need it")
    return "\n".join(lines) + "\n"


def build_error_message(rubric: Rubric, unusable: list[Unusable]) -> str:
    """A run where no problem is left: the first kernel that did not build, and why."""
    first = unusable[0]
    compiled = not first.missing and first.over_budget_s is None
    message = f"{first.kernel.name} did not compile: {first.error_line}" if compiled else first.reason(rubric)
    if len(unusable) > 1:
        message += f" (and {len(unusable) - 1} more file(s) failed; see the build log)"
    return message
