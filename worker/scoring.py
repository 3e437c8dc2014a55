"""Points from measurements: a pure function of (rubric, measurements), with reasons.

Rules (per problem, from its `scoring:` section, worker.rubric.ProblemScoring):
- A problem that did not finish (`timeout`, `crashed`, `error`) or did not run (`not_run`)
  scores 0, with a reason quoting the detail.
- Correctness: `hidden_points` of them follow the hidden cases (edge cases inside the
  assignment's domain that the course's tests never reach), in proportion to those passed;
  the rest need every public (course-like) case, by either route, to pass (all-or-nothing),
  or with `partial_correctness` are given in proportion to the passed public cases.
- No speed points unless every public case passes. Otherwise speed points grow from
  `speed_floor` (0 at or below) to the target (all of them at or above), with the logarithm
  of the speedup or linearly (`speed_scale`); the target is the rubric's reference speedup or
  a per-GPU calibrated one passed in.
- `speed_figure` names which measured speed figure scores (the names are the assignment's:
  its plug-in's Words.figures), `speed_fallback` the one that scores, with a flag, where that
  one was not measured; every other figure is information only.
- A fused op whose timed call moved its operation's bytes faster than the GPU's measured copy
  peak (`impossible_figure`) cannot have been timed right: its speed points are not scored, with
  a reason and a flag for staff.
- Every lost point has a reason a student can read, in the assignment's own words
  (worker.assignment.Words); flags for staff (a timing kept in poor conditions, and the
  assignment's own review of its timing evidence, Plugin.review_timing: hw4's gaming guards,
  which may withhold the speed points for staff) are also shown to the student as notes; what CUDA's compute-sanitizer found in a
  failed case (the telemetry's `sanitizer`) follows the reasons, and never changes a point.

Standard library + numpy only (through worker.timing): importable on a bare GPU machine.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from worker.assignment import Plugin, TimingReview, Words, assignment_of
from worker.measurements import (
    CONDITIONS_KEY,
    SANDBOX_REFUSED_KEY,
    CaseOutcome,
    ProblemMeasurement,
    copy_peak_gb_s,
    salient_lines,
    timed_rates,
)
from worker.rubric import ProblemScoring, Rubric
from worker.sanitizer import TOOL, shown
from worker.timing import RatioSummary

MAX_LISTED_FAILURES = 3
_LOG_QUOTE_LINES = 3
_LOG_QUOTE_CHARS = 300

_STATUS_WORDS = {
    "timeout": "timed out",
    "crashed": "crashed",
    "error": "stopped with an error",
    "not_run": "was not run",
}


@dataclass
class ProblemScore:
    problem_id: str
    points: float
    max_points: float
    correctness_points: float
    speed_points: float
    # passed (every correctness case passed) | failed (a case failed, or none ran) |
    # timeout | crashed | error | not_run (the measurement's own status)
    status: str
    reasons: list[str] = field(default_factory=list)  # one or more per lost point, plus flags
    notes: list[str] = field(default_factory=list)  # informational: the speedup line, kernel time
    flags: list[str] = field(default_factory=list)  # for staff: e.g. a suspiciously slow own baseline
    figure: str | None = None  # which speedup scored: reference_ops | student
    speedup: RatioSummary | None = None
    target: float | None = None

    @property
    def full_marks(self) -> bool:
        return self.points >= self.max_points

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["speedup"] = None if self.speedup is None else self.speedup.to_dict()
        return data


@dataclass
class RunScore:
    total: float
    max_total: float
    problems: list[ProblemScore]

    def problem(self, problem_id: str) -> ProblemScore:
        for p in self.problems:
            if p.problem_id == problem_id:
                return p
        raise KeyError(problem_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "max_total": self.max_total,
            "problems": [p.to_dict() for p in self.problems],
        }


def _pts(x: float) -> str:
    """Points as students read them: 6, 3.38, 0."""
    return f"{round(x, 2):g}"


def _x(x: float) -> str:
    return f"{x:.3g}x"


def _ratio_line(r: RatioSummary) -> str:
    return r.describe()


def _log_quote(m: ProblemMeasurement) -> str:
    """The log's first line (how the child ended, and while doing what) and the lines after
    it that name the error."""
    head, _, rest = m.log_tail.strip().partition("\n")
    parts = [head.strip()[:_LOG_QUOTE_CHARS]] if head.strip() else []
    parts += [ln[:_LOG_QUOTE_CHARS] for ln in salient_lines(rest, _LOG_QUOTE_LINES - 1)]
    text = " | ".join(parts)
    if not text and m.first_failure is not None:
        text = m.first_failure.message
    return text


def _case_line(case: CaseOutcome, m: ProblemMeasurement, spec: ProblemScoring, words: Words) -> str:
    route = next((route for route, cases in m.routes.items() if case in cases), "")
    via = words.routes.get(route, route)
    return m.describe_case(case, hidden_details=spec.hidden_case_details) + (f" ({via})" if via else "")


def speed_fraction(speedup: float, floor: float, target: float | None, scale: str = "log") -> float:
    """Share of the speed points earned: 0 at or below the floor, 1 at or above the target, in
    between in proportion to log(speedup / floor) (`log`) or to speedup - floor (`linear`)."""
    if speedup <= floor:
        return 0.0
    if target is None or target <= floor or speedup >= target:
        return 1.0
    if scale == "log" and floor > 0:
        return math.log(speedup / floor) / math.log(target / floor)
    return (speedup - floor) / (target - floor)


def choose_figure(
    spec: ProblemScoring, m: ProblemMeasurement, words: Words | None = None
) -> tuple[RatioSummary | None, str | None, list[str]]:
    """The speedup that scores, which figure it is, and a flag where the rubric's figure was not
    measured and its fallback scores instead (in `words`, the assignment's, where given)."""
    if spec.speed_figure is None:
        return None, None, []
    figure = m.figure(spec.speed_figure)
    if figure is not None:
        return figure, spec.speed_figure, []
    fallback = None if spec.speed_fallback is None else m.figure(spec.speed_fallback)
    if spec.speed_fallback is None or fallback is None:
        return None, None, []
    said = (words or Words()).figures
    why = (m.telemetry.get("timing_dropped") or {}).get(spec.speed_figure, "it was not measured")
    return fallback, spec.speed_fallback, [
        f"{m.problem_id}: speed scored as {said.get(spec.speed_fallback, spec.speed_fallback)}, since "
        f"{said.get(spec.speed_figure, spec.speed_figure)} could not be measured ({why})"]


def _in_words_order(m: ProblemMeasurement, words: Words) -> list[tuple[str, RatioSummary]]:
    """The measured figures, those the assignment names first, in its order."""
    order = [*words.figures, *(name for name in m.figures if name not in words.figures)]
    return [(name, m.figures[name]) for name in order if m.figure(name) is not None]


WITHHELD_WORDS = "its speed points are withheld until course staff review it"  # the flag's ending


def impossible_figure(m: ProblemMeasurement) -> str | None:
    """Why the fused op's timing cannot be trusted, when on some shape its timed call moved the
    bytes its operation must move (worker.measurements.timed_rates) faster than the GPU's peak
    copy bandwidth, as the stage measured it (COPY_PEAK_KEY): no call can, so it was mis-timed
    or did less than the operation needs. None otherwise, also where no peak was measured."""
    peak = copy_peak_gb_s(m.telemetry)
    fastest = max(timed_rates(m.telemetry), key=lambda r: r.gb_s, default=None)
    if peak is None or fastest is None or fastest.gb_s <= peak:
        return None
    return (f"your fused op's timed call moved {fastest.gb_s:.0f} GB/s (shape {list(fastest.shape)}), more than the "
            f"GPU's measured peak of {peak:.0f} GB/s: the timing cannot be trusted; ask the staff")


def conditions_flag(m: ProblemMeasurement) -> str | None:
    """Staff's word on timing windows kept though the GPU's conditions called for a retake
    (worker.gpu_conditions: after its retakes, or with no room for one), or None."""
    record = m.telemetry.get(CONDITIONS_KEY) or {}
    kept = record.get("kept_flagged") or 0
    if not isinstance(kept, int) or kept <= 0:
        return None
    first = next(iter(record.get("kept") or []), "")
    return (f"{m.problem_id}: {kept} of {record.get('windows')} timing windows were kept though the GPU's "
            f"conditions called for measuring them again" + (f" ({first})" if first else ""))


def timing_flags(m: ProblemMeasurement, review: TimingReview) -> list[str]:
    """What the timing's evidence says a student or staff should know: the engine's checks of every
    timing (an impossible figure, windows kept in poor conditions), then the assignment's review."""
    flags = []
    impossible = impossible_figure(m)
    if impossible:
        flags.append(f"{m.problem_id}: impossible timing, its speed points are not scored: {impossible}")
    kept = conditions_flag(m)
    if kept:
        flags.append(kept)
    return flags + review.flags


@dataclass(frozen=True)
class _Tiers:
    """A problem's cases in the two tiers that share its correctness points: the public
    (course-like) ones carry correctness_points - hidden_points, the hidden ones hidden_points
    in proportion to those passed. Without hidden cases (or hidden points) every case is public."""

    public: list[CaseOutcome]
    hidden: list[CaseOutcome]
    public_share: float
    hidden_share: float
    what: str  # how the reasons name the public cases

    @classmethod
    def of(cls, spec: ProblemScoring, cases: list[CaseOutcome]) -> _Tiers:
        split = spec.hidden_points > 0 and any(not c.public for c in cases)
        hidden_share = spec.hidden_points if split else 0.0
        return cls(public=[c for c in cases if c.public or not split],
                   hidden=[c for c in cases if not c.public and split],
                   public_share=spec.correctness_points - hidden_share, hidden_share=hidden_share,
                   what="course-like cases" if split else "correctness cases")

    @property
    def public_passed(self) -> bool:
        return bool(self.public) and all(c.ok for c in self.public)


def _unscorable_reason(spec: ProblemScoring, m: ProblemMeasurement) -> str | None:
    """Why the problem scores 0 before any case is looked at, if it does."""
    if m.status != "ok":
        detail = _log_quote(m)
        return (f"{m.problem_id}: {_STATUS_WORDS.get(m.status, m.status)}" + (f": {detail}" if detail else "")
                + f"; 0 of {_pts(spec.max_points)} points")
    if not m.cases:
        return f"{m.problem_id}: no correctness case was run; 0 of {_pts(spec.max_points)} points"
    return None


def _score_correctness(spec: ProblemScoring, m: ProblemMeasurement, words: Words, score: ProblemScore) -> _Tiers:
    """The correctness points and their reasons, into `score`; the tiers they came from."""
    pid, tiers = m.problem_id, _Tiers.of(spec, m.cases)
    public_failed = [c for c in tiers.public if not c.ok]
    hidden_failed = [c for c in tiers.hidden if not c.ok]
    if tiers.public_passed:
        public_points = tiers.public_share
    elif spec.partial_correctness and tiers.public:
        public_points = tiers.public_share * (len(tiers.public) - len(public_failed)) / len(tiers.public)
    else:
        public_points = 0.0
    hidden_points = (tiers.hidden_share * (len(tiers.hidden) - len(hidden_failed)) / len(tiers.hidden)
                     if tiers.hidden else 0.0)
    score.correctness_points = round(public_points + hidden_points, 2)
    score.status = "failed" if m.failed_cases else "passed"
    if public_failed or not tiers.public:
        score.reasons.append(
            f"{pid}: {len(public_failed)} of {len(tiers.public)} {tiers.what} failed: "
            f"{_pts(round(public_points, 2))} of {_pts(tiers.public_share)} points for them "
            f"({_pts(round(tiers.public_share - public_points, 2))} lost)")
    if hidden_failed:
        score.reasons.append(
            f"{pid}: {len(hidden_failed)} of {len(tiers.hidden)} hidden edge cases failed: "
            f"{_pts(round(hidden_points, 2))} of {_pts(tiers.hidden_share)} points for them "
            f"({_pts(round(tiers.hidden_share - hidden_points, 2))} lost); the course-like cases decide the rest")
    score.reasons.extend(_failed_case_lines(spec, m, words))
    return tiers


def _failed_case_lines(spec: ProblemScoring, m: ProblemMeasurement, words: Words) -> list[str]:
    """The first failure the stage met, then others up to MAX_LISTED_FAILURES, then a count."""
    failed = m.failed_cases
    if not failed:
        return []
    first = m.first_failure if m.first_failure is not None and not m.first_failure.ok else failed[0]
    listed = [first] + [c for c in failed if c != first][: MAX_LISTED_FAILURES - 1]
    lines = [_case_line(c, m, spec, words) for c in listed]
    if len(failed) > len(listed):
        lines.append(f"... and {len(failed) - len(listed)} more failed cases")
    return lines


def _note_timing(spec: ProblemScoring, m: ProblemMeasurement, words: Words, review: TimingReview,
                 score: ProblemScore) -> None:
    """The figure that scores, every figure measured, and the timing's flags, into `score`."""
    pid = m.problem_id
    figure, which, fallback_flags = choose_figure(spec, m, words)
    score.figure, score.speedup = which, figure
    if m.kernel_ms is not None:
        score.notes.append(f"{pid}: fused kernels' own GPU time {m.kernel_ms:.4g} ms per call (CUPTI)")
    shapes = m.telemetry.get("timing_shapes") or []
    if m.telemetry.get("timed"):
        score.notes.append(f"{pid}: timed: {m.telemetry['timed']}")
    over = f", mean over the course's {len(shapes)} shapes" if len(shapes) > 1 else ""
    for name, r in _in_words_order(m, words):
        score.notes.append(f"{pid}: speedup, {words.figures.get(name, name)}: {_ratio_line(r)} "
                           f"({r.median_baseline_ms:.4g} ms / {r.median_custom_ms:.4g} ms{over}, {r.trials} trials)")
    for flag in fallback_flags + timing_flags(m, review):
        score.flags.append(flag)
        score.notes.append(flag)


def _score_speed(spec: ProblemScoring, m: ProblemMeasurement, words: Words, review: TimingReview,
                 score: ProblemScore, tiers: _Tiers) -> None:
    """The speed points for score.speedup against score.target, and why any were lost, into `score`."""
    pid, figure, out_of = m.problem_id, score.speedup, f"of {_pts(spec.speed_points)} speed points"
    if not tiers.public_passed:
        score.reasons.append(f"{pid}: no speed points unless every {tiers.what[:-1]} passes: 0 {out_of}")
    elif figure is None:
        why = m.telemetry.get("timing_skipped")  # the stage's reason for not timing, when it gave one
        score.reasons.append(f"{pid}: speedup was not measured{f' ({why})' if why else ''}: 0 {out_of}")
    elif (impossible := impossible_figure(m)) is not None:
        score.reasons.append(f"{pid}: speed points not scored (0 {out_of}): {impossible}")
    elif review.withheld:
        score.reasons.append(f"{pid}: speed points withheld for review (see the flag): 0 {out_of}")
    else:
        frac = speed_fraction(figure.speedup, spec.speed_floor, score.target, spec.speed_scale)
        score.speed_points = round(spec.speed_points * frac, 2)
        target_text = f"target {_x(score.target)}" if score.target is not None else "no target"
        line = (f"{pid}: speedup {_ratio_line(figure)} ({words.figures.get(score.figure or '', score.figure)}) vs "
                f"{target_text}: {_pts(score.speed_points)} {out_of}")
        if score.speed_points >= spec.speed_points:
            score.notes.insert(0, line)  # full marks: the line is information, not a reason
            return
        if figure.speedup <= spec.speed_floor:
            line += f" (no speed points at or below {_x(spec.speed_floor)})"
        score.reasons.append(line)


def sanitizer_lines(m: ProblemMeasurement) -> tuple[list[str], list[str]]:
    """(reasons, notes) from the stage's compute-sanitizer session on a failed case (its
    telemetry's `sanitizer`, worker.sanitizer): its first findings beside the lost points, or
    a note that it found nothing. Never points."""
    record = m.telemetry.get("sanitizer")
    if not isinstance(record, dict):
        return [], []
    findings = shown(record)
    if findings:
        return [f"{m.problem_id}: {f.text()}" for f in findings], []
    tools = [t for t in record.get("tools") or [] if isinstance(t, str)]
    if tools and not record.get("note"):
        return [], [f"{m.problem_id}: {TOOL} ({', '.join(tools)}) found no bad access, race, barrier misuse or "
                    f"uninitialized read when it ran the failed case {record.get('case')} again"]
    return [], []


def _with_stage_notes(m: ProblemMeasurement, score: ProblemScore) -> ProblemScore:
    """The sanitizer's lines, and what the sandbox refused the submission's code (never points)."""
    reasons, notes = sanitizer_lines(m)
    score.reasons.extend(reasons)
    score.notes.extend(notes)
    refused = m.telemetry.get(SANDBOX_REFUSED_KEY) or []
    if refused:
        score.notes.append(f"{m.problem_id}: the sandbox refused system calls the submission made (each failed "
                           f"with EPERM): {', '.join(map(str, refused))}")
    return score


def score_problem(
    spec: ProblemScoring, measurement: ProblemMeasurement, *, target: float | None = None,
    assignment: Plugin | None = None,
) -> ProblemScore:
    """Points for one problem, its reasons in the words of `assignment` (its plug-in; also its
    review of the timing), where given. `target` (a per-GPU calibrated speedup) overrides spec.target."""
    m = measurement
    words = Words() if assignment is None else assignment.words
    review = TimingReview()
    if assignment is not None and assignment.review_timing is not None:
        review = assignment.review_timing(spec, m, words)
    score = ProblemScore(problem_id=m.problem_id, points=0.0, max_points=spec.max_points, correctness_points=0.0,
                         speed_points=0.0, status=m.status, target=spec.target if target is None else target)
    unscorable = _unscorable_reason(spec, m)
    if unscorable is not None:
        score.status = m.status if m.status != "ok" else "failed"
        score.reasons.append(unscorable)
        return _with_stage_notes(m, score)
    tiers = _score_correctness(spec, m, words, score)
    _note_timing(spec, m, words, review, score)
    if spec.speed_points > 0:
        _score_speed(spec, m, words, review, score, tiers)
    score.points = round(score.correctness_points + score.speed_points, 2)
    return _with_stage_notes(m, score)


def score_run(
    rubric: Rubric,
    measurements: Mapping[str, ProblemMeasurement] | Iterable[ProblemMeasurement],
    *,
    targets: Mapping[str, float] | None = None,
) -> RunScore:
    """Score every rubric problem; a problem with no measurement scores 0 as `not_run`.

    `targets` maps problem id to a per-GPU calibrated target speedup (overrides the rubric).
    """
    if isinstance(measurements, Mapping):
        by_id = dict(measurements)
    else:
        by_id = {}
        for m in measurements:
            if m.problem_id in by_id:
                raise ValueError(f"two measurements for problem {m.problem_id}")
            by_id[m.problem_id] = m
    known = {p.id for p in rubric.problems}
    unknown = sorted(set(by_id) - known)
    if unknown:
        raise ValueError(f"measurements for problems not in rubric {rubric.slug}: {unknown}")
    targets = targets or {}
    assignment = assignment_of(rubric)
    problems = []
    for p in rubric.problems:
        m = by_id.get(p.id) or ProblemMeasurement(p.id, status="not_run", log_tail="no measurement")
        spec = p.scoring
        if abs(spec.max_points - p.points) > 1e-9:  # a Problem built in code with stale defaults
            raise ValueError(f"problem {p.id}: scoring splits {spec.max_points:g} points, rubric says {p.points:g}")
        if spec.target is None and p.reference_speedup is not None:
            spec = replace(spec, target=float(p.reference_speedup))
        problems.append(score_problem(spec, m, target=targets.get(p.id), assignment=assignment))
    return RunScore(
        total=round(sum(s.points for s in problems), 2),
        max_total=round(sum(s.max_points for s in problems), 2),
        problems=problems,
    )
