"""hw4's compute-sanitizer pass (issue 33): a kernel problem whose C ABI case failed or crashed
gets that problem's smallest failed C ABI case run once more, in a fresh child of the stage's
sandbox wrapped in CUDA's compute-sanitizer (worker/sanitizer.py): memcheck first, then
racecheck, synccheck and initcheck in turn while none has found anything (a bad access, a race
on shared memory, a barrier not every thread reaches, a read of global memory never written).
What the tool reports (the kernel, the line of the student's source, the access, the thread)
goes into the problem's telemetry, `sanitizer`, and from there
beside its lost points (worker.scoring); it never changes them.

Bounded: it runs after everything that scores (the kernel problems' checks and timings,
Problem 3), at most one session (up to four tools) per failed problem, all of a run's sessions
within the sanitizer's cap and what is left of the run's GPU budget; a problem with no failed C ABI
case, so every correct submission, runs none. A tool that is missing, cannot start, or runs
out of time is noted in the telemetry, never a failure.
"""
from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rubrics.hw4.case_inputs import make_inputs
from rubrics.hw4.kernel_checks import Check, case_json
from worker.gpu.budget import Deadline
from worker.gpu.client import ChildClient, ChildFailure, OutOfBudget, StudentError
from worker.job_files import is_job_file
from worker.measurements import ProblemMeasurement
from worker.sandbox import SandboxError
from worker.sanitizer import (
    MAX_KEPT,
    TOOL,
    TOOLS,
    Finding,
    SanitizerConfig,
    not_instrumented,
    parse_report,
    read_log,
    tool_messages,
    wrapper_argv,
)

TELEMETRY_KEY = "sanitizer"
# label, the wrapper's argv, the deadline of its calls -> a fresh child of the submission's tree
WrappedFactory = Callable[[str, Sequence[str], Deadline], ChildClient]


def smallest_failed(checks: Sequence[Check]) -> Check | None:
    """The C ABI check of the fewest elements among `checks` (the sanitizer makes a case
    many times slower), or None."""
    abi = [c for c in checks if c.path == "abi"]
    return min(abi, key=lambda c: (math.prod(c.case.shape), c.case.id), default=None)


def rerun_abi(client: ChildClient, check: Check, timeout: float) -> None:
    """The check's launcher call once more, on the same inputs (its seed); its outputs are not
    verified (the check already failed): only what the tool sees matters."""
    client.arena.reset()
    refs = client.arena.put_all(make_inputs(check.case, check.rng()))
    client.call({"op": "abi", "case": case_json(check.case), "arrays": refs}, timeout)


def _drive(client: ChildClient, check: Check, cuda: bool, timeout: float) -> str:
    """Start the wrapped child's CUDA and run the case; why the tool could not, or ""."""
    try:
        client.call({"op": "ready", "cuda": cuda}, timeout)
    except OutOfBudget:
        return "it ran out of time before the case ran"
    except (ChildFailure, StudentError) as exc:
        return f"it could not start the child ({exc})"
    try:
        rerun_abi(client, check, timeout)
    except OutOfBudget:
        return "it ran out of time while the case ran"
    except (ChildFailure, StudentError):
        pass  # the case's own failure (an illegal access, a launcher's exit): the report says why
    return ""


def _end(client: ChildClient, cap: Deadline) -> None:
    """Close the wrapped child (the tool writes its summary as the child exits) and wait until
    its folder holds what it wrote."""
    client.close(wait_s=max(1.0, min(30.0, cap.left())))  # past it, killed: the report holds what the tool wrote
    try:
        client.process.wait(timeout=10)
    except (subprocess.TimeoutExpired, SandboxError):
        pass


def run_tool(tool: str, label: str, check: Check, executable: str, open_wrapped: WrappedFactory, cap: Deadline,
             cuda: bool, timeout: float) -> tuple[list[Finding], str]:
    """One child under `tool` running `check`'s case: the findings (paths as in the
    submission's tree), and a note when the tool could not do its work."""
    try:
        client = open_wrapped(label, wrapper_argv(executable, tool), cap)
    except (SandboxError, OSError) as exc:
        return [], f"{TOOL} {tool} could not start: {exc}"
    trouble = _drive(client, check, cuda, timeout)
    _end(client, cap)
    text = read_log(client.cwd) + "\n" + client.process.output_tail(16384)
    reported = parse_report(tool, text)
    findings = [f.in_tree(client.cwd) for f in reported if not f.device_assert]
    # The student's own lines first (a race may show first inside a library's header).
    findings.sort(key=lambda f: not (f.file and is_job_file(client.cwd, f.file)))
    if not findings and any(f.device_assert for f in reported):  # the other tools would stop there too
        return [], f"{TOOL} {tool}: the kernel stopped at its own assert(); the failed case quotes its message"
    if findings or not_instrumented(text) or not trouble:
        return findings, ""
    said = "; ".join(tool_messages(text)[:2])
    return [], f"{TOOL} {tool}: {trouble}" + (f": {said}" if said else "")


def _skipped(check: Check, why: str) -> dict[str, Any]:
    """The telemetry of a session that did not run (`why` "" while it runs)."""
    return {"case": check.id, "tool": None, "tools": [], "seconds": 0.0, "findings": [], "note": why}


def session(problem_id: str, check: Check, config: SanitizerConfig, open_wrapped: WrappedFactory, cap: Deadline,
            cuda: bool, timeout: float) -> dict[str, Any]:
    """The problem's one session: the tools in turn (worker.sanitizer.TOOLS' order) until one
    finds something or cannot do its work; what the telemetry keeps of it."""
    if config.executable is None:
        return _skipped(check, f"skipped: {TOOL} was not found (KG_SANITIZER={config.setting})")
    record = _skipped(check, "")
    started = time.monotonic()
    for tool in TOOLS:
        if cap.left() <= 0:
            record["note"] = (f"{tool} skipped: the sanitizer's time ({config.cap_s:g} s a run, within what is left "
                              "of its GPU time budget) was used up")
            break
        findings, note = run_tool(tool, f"sanitizer-{problem_id}-{tool}", check, config.executable, open_wrapped,
                                  cap, cuda, timeout)
        record["tools"].append(tool)
        record.update(tool=tool, findings=[f.to_dict() for f in findings[:MAX_KEPT]], note=note)
        if findings or note:
            break
    record["seconds"] = round(time.monotonic() - started, 2)
    return record


def sanitize_failed(failed: Mapping[str, Sequence[Check]], measurements: Sequence[ProblemMeasurement],
                    config: SanitizerConfig | None, open_wrapped: WrappedFactory, run_deadline: Deadline,
                    cuda: bool, timeout: float, settled: Callable[[Check], str | None] = lambda _check: None) -> None:
    """A session for each problem with a failed C ABI check (`failed`: problem id -> its
    failed checks), into its measurement's telemetry; none without the tool's configuration
    (KG_SANITIZER=off) or without a failed C ABI check, and none for a check `settled` gives a
    reason not to run (its launcher hung: under the tool it would hang again). Every session of
    the run shares one cap: the configured seconds, or what is left of the run's budget if less."""
    chosen = {pid: check for pid, checks in failed.items() if (check := smallest_failed(checks)) is not None}
    if config is None or not chosen:
        return
    by_id = {m.problem_id: m for m in measurements}
    cap = Deadline(max(0.0, min(config.cap_s, run_deadline.left())))
    for pid, check in chosen.items():
        if pid in by_id:
            why = settled(check)
            by_id[pid].telemetry[TELEMETRY_KEY] = (_skipped(check, f"skipped: {why}") if why else
                                                   session(pid, check, config, open_wrapped, cap, cuda, timeout))
