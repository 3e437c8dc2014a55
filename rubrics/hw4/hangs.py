"""Fused launchers that never returned, named once per run (issue 55).

A kernel that hangs costs a call timeout wherever it is called: a softmax forward with an
infinite loop cost 310 s of GPU on an H100, 2.3x a correct grade, as every path and problem
that calls it (both paths of 1.1, 1.2's binding, the timing children, Problem 3) waited out
its own timeouts. So the stage keeps one record (on its LoadGate, beside what did not load):
the first call of a launcher that gets no answer names it, in words ("your softmax forward
(launch_attn_softmax) did not return within 60 s in case abi:sfw-..."), and everything that
would call it is then settled at once with those words, without a child and without a
timeout; a call of it still running in another child is cut short there (the child killed).

What a call calls (rubrics/hw4/CONTRACT.md, rubrics.hw4.child_kernels): a C ABI case (and the
kernel profile) calls its kind's launcher alone; the binding makes its tensors (no launcher),
runs a backward's forward (`binding_forward`, before the clock as the course's tests do: the
fused forward, abi.prepared_forward), then the op (`binding_run`, and `binding_read`, which
waits for work it left): the fused op's own launcher in the custom variant, basic ops alone
in the composition (`baseline`). So a binding case of a backward calls its forward too, and
a timeout is blamed on the launcher the step that got no answer was running, never on one
the case did not reach: a hang in the softmax forward settles 1.2's binding cases, not its C
ABI ones. Problem 3's fused model calls all four.

Scope: a launcher that hung on a hidden case settles only hidden checks. The course's own
cases, the timing (the course's shapes) and Problem 3 (its configuration) still run, so a
kernel right wherever the course tests loses only what worker.scoring promises for an edge
the course never reaches (its hidden points); if it hangs there too, that names it for
everything. A launcher thus costs one timeout when its first hang is on a course case (a
kernel that always hangs), at most two otherwise.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from rubrics.hw4.abi import family, launcher_of, prepared_forward
from worker.gpu.client import ChildClient, ChildFailure

FUSED_KINDS = ("softmax_fw", "softmax_bw", "layernorm_fw", "layernorm_bw")  # Problem 3's fused model calls each
WHAT = {"softmax_fw": "softmax forward", "softmax_bw": "softmax backward",
        "layernorm_fw": "LayerNorm forward", "layernorm_bw": "LayerNorm backward"}


def binding_calls(kind: str) -> tuple[str, ...]:
    """The launchers (by kind) one computation of the fused op through the binding calls: a
    backward runs its forward first."""
    return (kind,) if kind.endswith("_fw") else (f"{family(kind)}_fw", kind)


def path_calls(path: str, kind: str) -> tuple[str, ...]:
    """The launchers a check of `kind` through `path` ("abi" or "binding") calls."""
    return (kind,) if path == "abi" else binding_calls(kind)


def waited_on(request: Mapping[str, Any]) -> str | None:
    """The launcher (its kind) that a request the child never answered was running, or None
    where that step calls none (tensors made, a composition of basic ops)."""
    op, kind, variant = request.get("op"), request.get("kind"), str(request.get("variant"))
    if op in ("abi", "kernel_time"):
        return str(request["case"]["kind"])
    if kind not in FUSED_KINDS:
        return None
    if op == "binding_forward":
        return f"{family(kind)}_fw" if prepared_forward(kind, variant) == "custom" else None
    return str(kind) if op in ("binding_run", "binding_read") and variant == "custom" else None


def hang_words(kind: str, timeout_s: float, where: str) -> str:
    return f"your {WHAT[kind]} ({launcher_of(kind)}) did not return within {timeout_s:g} s {where}"


class LauncherHung(Exception):
    """A call settled because a launcher it needs hung elsewhere: before it started, or cut
    short while it ran (`killed`: its child is gone)."""

    def __init__(self, words: str, killed: bool) -> None:
        super().__init__(words)
        self.words, self.killed = words, killed


@dataclass(frozen=True)
class _Hang:
    words: str
    public: bool  # found on a course case (or the timing): it settles every call, else hidden checks only


@dataclass(frozen=True)
class _Call:
    client: ChildClient
    kinds: tuple[str, ...]
    public: bool


class HungLaunchers:
    """The run's record of launchers that hung; thread-safe (the first phase's checks,
    profiles and warm-ups run at once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hangs: dict[str, _Hang] = {}
        self._running: dict[int, _Call] = {}

    def _why(self, kinds: Iterable[str], public: bool) -> str | None:
        for kind in kinds:
            hang = self._hangs.get(kind)
            if hang is not None and (hang.public or not public):
                return hang.words
        return None

    def why(self, kinds: Iterable[str], public: bool = True) -> str | None:
        """Why a call of `kinds` is settled without running (a launcher of them hung), or
        None. `public`: the call is a course case, the timing or Problem 3 (not a hidden case)."""
        with self._lock:
            return self._why(kinds, public)

    def name(self, kind: str, words: str, public: bool) -> None:
        """`kind`'s launcher hung: record it (unless known already as widely) and kill the
        children running a call of it that this settles."""
        with self._lock:
            known = self._hangs.get(kind)
            if known is not None and (known.public or not public):
                return
            self._hangs[kind] = _Hang(words, public)
            settled = [c.client for c in self._running.values() if kind in c.kinds and (public or not c.public)]
        for client in settled:
            client.process.kill()  # its waiting thread sees the crash: `calling` turns it into LauncherHung

    def _name_request(self, request: Mapping[str, Any], timeout_s: float, where: str, public: bool) -> str | None:
        kind = waited_on(request)
        if kind is None:
            return None
        words = hang_words(kind, timeout_s, where)
        self.name(kind, words, public)
        return words

    def _name_on_timeout(self, request: Mapping[str, Any], timeout_s: float, where: str, public: bool) -> None:
        self._name_request(request, timeout_s, where, public)

    def named_by(self, failure: ChildFailure, timeout_s: float, where: str, public: bool) -> str | None:
        """When `failure` is a timeout of a step that runs a launcher, name that launcher (once:
        a second naming of it changes nothing); the words of this hang, else None."""
        return self._name_request(failure.request, timeout_s, where, public) if failure.kind == "timeout" else None

    @contextlib.contextmanager
    def calling(self, client: ChildClient, kinds: Iterable[str], public: bool, where: str | None = None,
                timeout_s: float = 0.0) -> Iterator[None]:
        """Around calls of `client` that run `kinds`' launchers: LauncherHung at once if one
        of them hung already, or when one is named while these calls wait (their child is
        killed then, so they wait no longer). With `where` (the case), a call that times out
        names its launcher the moment it does, before its own child is killed."""
        call = _Call(client, tuple(kinds), public)
        with self._lock:
            why = self._why(call.kinds, public)
            if why:
                raise LauncherHung(why, killed=False)
            self._running[id(call)] = call
        if where is not None:
            client.on_timeout = partial(self._name_on_timeout, timeout_s=timeout_s, where=where, public=public)
        try:
            yield
        except ChildFailure as exc:
            why = self.why(call.kinds, public) if exc.kind == "crashed" else None
            if why:
                raise LauncherHung(why, killed=True) from exc
            raise
        finally:
            client.on_timeout = None
            with self._lock:
                del self._running[id(call)]

    def record(self) -> dict[str, dict[str, Any]]:
        """Every launcher that hung, for the measurements' telemetry."""
        with self._lock:
            return {kind: {"launcher": launcher_of(kind), "words": h.words, "public": h.public}
                    for kind, h in self._hangs.items()}
