"""What of a submission loads at all, found once per run before its code runs anywhere else.

A submission's code first runs when a child loads it: a kernel library (ctypes runs its
constructors) or the minitorch package (imported with its CUDA backend, which loads every
library). A part that hangs, crashes or raises there would fail every case, timing and
problem that needs it, each waiting out its own timeout in a fresh child: a package that hung
at import cost 427 s of GPU, against ~170 s for a correct grade. So the stage loads each part
once, each in a probe child of its own, all at once (a run pays one load timeout however many
parts hang), and a part that does not load is named once, in words ("your minitorch package
does not import: it hung for 30 s"). Everything that needs it is then settled at once with
those words; what does not still runs (a kernel's C ABI cases need only its library).

Whose fault: before any of the submission's code runs, every probe child answers `ready` (our
interpreter and modules and, on a GPU, a CUDA context of our own: worker.gpu.child). A child
that fails there failed on our side: StageInfraError, which the run's lifecycle treats as an
infrastructure fault (retried, never a grade). Only a failure after `ready`, while its part
loads, is the submission's.

`LoadGate.blocked(part)` answers, for every caller, whether code needing `part` may run now
and if not why: the part did not load, or the run's GPU time budget is used up. The gate also
carries the run's record of launchers that hung once loaded (`LoadGate.hangs`,
rubrics.hw4.hangs), settled the same way.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rubrics.hw4.hangs import HungLaunchers
from worker.gpu.budget import Deadline
from worker.gpu.client import ChildClient, ChildFailure, OutOfBudget, StageInfraError, StudentError
from worker.measurements import salient_lines

MINITORCH = "minitorch"  # the submission's package with its CUDA backend; any other part is a library's path
READY_TIMEOUT_S = 60.0  # our own start in a child: interpreter, numpy, a CUDA context (seconds on a loaded host)
PROBE_ARENA_BYTES = 1 << 16  # a probe passes no arrays

ProbeFactory = Callable[[str], ChildClient]  # a label -> a fresh sandboxed child with rubrics.hw4.child_kernels


@dataclass(frozen=True)
class Verdict:
    """How one part loaded: `words` None when it did; else why not (a student's words), and
    `log`, those words with what the child printed."""

    words: str | None
    log: str
    seconds: float


def _what_happened(failure: ChildFailure | StudentError, timeout_s: float) -> str:
    """`hung for 60 s`, `aborted (SIGABRT)`, `raised ImportError: ...`: what the part did."""
    if isinstance(failure, StudentError):
        return f"raised {failure.error}"
    if failure.kind == "timeout":
        return f"hung for {timeout_s:g} s"
    ended = failure.ended
    if ended is None:
        return failure.detail
    if ended.reason == "signal":
        return f"{'aborted' if ended.detail.startswith('SIGABRT') else 'crashed'} ({ended.detail})"
    if ended.reason == "exited":
        return f"ended the process ({ended.detail})"
    return f"was stopped: {ended.detail}"


def failure_words(part: str, failure: ChildFailure | StudentError, timeout_s: float) -> str:
    """The load failure of `part` as a student reads it, with the child's telling last lines."""
    subject = ("your minitorch package does not import" if part == MINITORCH
               else f"the kernels' library {part} does not load")
    said = salient_lines(failure.tail) if isinstance(failure, ChildFailure) else []
    return f"{subject}: it {_what_happened(failure, timeout_s)}" + "".join(f" | {line}" for line in said)


class LoadGate:
    """The load probes of one run, and the answer to "may code needing this part run now"."""

    def __init__(self, deadline: Deadline, load_timeout_s: float, cuda: bool) -> None:
        self.deadline, self.load_timeout_s, self.cuda = deadline, load_timeout_s, cuda
        self._probes: dict[str, ChildClient] = {}
        self._verdicts: dict[str, Future[Verdict]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self.hangs = HungLaunchers()  # launchers that never returned: what calls them is settled too

    def open(self, parts: Iterable[str], open_probe: ProbeFactory) -> None:
        """Spawn a probe child per part (from the spawning thread, before `start`)."""
        for i, part in enumerate(parts):
            self._probes[part] = open_probe(f"load-{i}")

    def start(self) -> None:
        """Ask every probe child whether our side is up (`ready`; the first also makes a CUDA
        context when the stage has a GPU), then load each part in its own, all at once. Call
        it once every child of the stage's first phase is spawned and before any of them runs
        the submission's code: nothing may spawn while the loads run (fork + exec is not
        thread-safe). A second call does nothing."""
        if self._pool is not None:
            return
        for i, client in enumerate(self._probes.values()):
            try:
                client.call({"op": "ready", "cuda": self.cuda and i == 0}, READY_TIMEOUT_S)
            except OutOfBudget:
                break  # the loads meet the same budget: each part is settled with its words
            except (ChildFailure, StudentError) as exc:
                raise StageInfraError(f"a sandboxed child of the GPU stage did not start: {exc}") from exc
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(self._probes)), thread_name_prefix="kg-load")
        for part, client in self._probes.items():
            self._verdicts[part] = self._pool.submit(self._load, part, client)

    def _load(self, part: str, client: ChildClient) -> Verdict:
        started = time.monotonic()
        message = {"op": "load_minitorch"} if part == MINITORCH else {"op": "load_library", "path": part}
        words: str | None = None
        log = ""
        try:
            client.call(message, self.load_timeout_s)
        except OutOfBudget as exc:
            words = log = exc.detail
        except (ChildFailure, StudentError) as exc:
            words = failure_words(part, exc, self.load_timeout_s)
            log = f"{words}\n{exc.tail if isinstance(exc, ChildFailure) else exc.trace}"[-8000:]
        finally:
            client.close()
        return Verdict(words, log, round(time.monotonic() - started, 3))

    def settle(self) -> None:
        """Wait until every part's verdict is in (and its probe child closed): after this no
        thread of the gate runs, so the caller may spawn."""
        for future in self._verdicts.values():
            future.result()

    def verdict(self, part: str) -> Verdict | None:
        """The part's verdict, waiting for it; None for a part that was not probed."""
        if self._pool is None:
            raise RuntimeError("LoadGate.start() has not run: no part may be used before the probes")
        future = self._verdicts.get(part)
        return None if future is None else future.result()

    def failed(self, part: str) -> str | None:
        """Why `part` does not load, or None when it does (or was not probed)."""
        found = self.verdict(part)
        return None if found is None else found.words

    def blocked(self, *parts: str) -> str | None:
        """Why code needing `parts` may not run now: the first of them that does not load, or
        the run's budget used up; None when it may."""
        return next((why for why in map(self.failed, parts) if why), None) or self.deadline.spent()

    def log(self, part: str) -> str:
        """What the stage records of a part that did not load: its words and the child's output."""
        found = self.verdict(part)
        return "" if found is None or found.words is None else found.log

    def record(self) -> dict[str, Any]:
        """Every probed part's verdict, for the measurements' telemetry."""
        return {part: {"loaded": v.words is None, "seconds": v.seconds, "why": v.words}
                for part in self._verdicts if (v := self.verdict(part)) is not None}

    def close(self) -> None:
        """Wait for the loads and close any probe child that never got to load (a failed `start`)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for part, client in self._probes.items():
            if part not in self._verdicts:
                client.close()
