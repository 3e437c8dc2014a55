"""The API's request and response bodies. A response is read from its rows (`FromRow.of`): each
field is the row's attribute of that name, or of its `validation_alias` path; a route passes
only what no row holds (links, counts, a picked run)."""
from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import AliasPath, BaseModel, ConfigDict, Field

from grader.ids import RowId

if TYPE_CHECKING:
    from grader.reads.bandwidth import ProblemBandwidth


class _WithDerived:
    """`row` with the values in `derived` in front of its own attributes."""

    def __init__(self, row: object, derived: dict[str, Any]) -> None:
        self._row, self._derived = row, derived

    def __getattr__(self, name: str) -> Any:
        return self._derived[name] if name in self._derived else getattr(self._row, name)


class RequestBody(BaseModel):
    """A request's JSON body: a field it does not name is refused (422 `validation_error`), so
    that a misspelt field is never silently ignored and the description says what is taken."""

    model_config = ConfigDict(extra="forbid")


class FromRow(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    @classmethod
    def of(cls, row: object, **derived: Any) -> Self:
        """This body read from `row`'s attributes, with `derived` for the fields the row lacks."""
        return cls.model_validate(_WithDerived(row, derived) if derived else row)


class StageOut(BaseModel):
    status: str
    seconds: float | None = None
    log: str = ""


class ProblemResultOut(FromRow):
    problem_id: str
    title: str
    status: str
    points: float
    max_points: float
    message: str | None
    details: dict[str, Any] | None


class AdjustmentOut(FromRow):
    """A staff entry on the student's grade in the assignment, and why (grader.course.adjustments):
    points given (positive) or taken (negative), or a manual grade."""

    kind: Literal["adjust", "manual"] = Field(description="adjust: points added; manual: the grade is `points`")
    points: float | None = Field(description="signed points; a manual grade's points (null: the manual grade "
                                             "taken back, the run's grade counts again)")
    reason: str
    by: str = Field(description="the staff member's login")
    at: datetime
    run_id: int | None = Field(default=None, description="the run that counted when it was made; null: none")


class GradeOut(FromRow):
    """A final grade, the same number on every page and export (grader.course.grades): a run's
    own, or the student's in the assignment (the run that counts with the staff's entries)."""

    raw_score: float | None = Field(validation_alias="raw", description="the run's score, before any late "
                                    "penalty; null: no run counts (a manual grade alone)")
    penalty: float = Field(description="points the late policy took off")
    manual_grade: float | None = Field(default=None, validation_alias="manual_points",
                                       description="the manual grade in force, which replaces the run's; null: none")
    adjustment: float = Field(validation_alias="adjusted", description="the staff adjustments' sum, in points")
    adjustments: list[AdjustmentOut] = Field(description="the staff's entries on the student's grade (adjustments "
                                             "and manual grades), oldest first, each with who, when and why")
    final_score: float = Field(validation_alias="final", description="(the manual grade, else raw - penalty) + "
                               "adjustment, within [0, total_points + extra_credit] once staff made an entry: "
                               "the grade")
    clamped_to: float | None = Field(description="where the clamp held the grade when the adjustment would have "
                                     "taken it past total_points + extra_credit (that ceiling) or below 0 (0); "
                                     "null: the adjustment applied in full")
    total_points: float
    extra_credit: float = Field(description="points the grade may reach above total_points (the assignment's)")
    lateness: Literal["on_time", "grace", "late", "closed", "not_released", "no_run"] = Field(
        validation_alias="status", description="closed and not_released: staff uploads outside the window; "
                                               "no_run: no run counts")
    late: bool = Field(description="true: the late policy charged it (after the due time and its grace, or "
                                   "outside the window)")
    penalty_days: int = Field(description="started days after the grace that were charged")
    due_at: datetime | None = Field(description="the student's due time, extension included; null: none")
    reason: str = Field(description="the grade in words")


class AssignmentGradeOut(BaseModel):
    """The student's grade in a run's assignment, which the run page shows beside the run's own:
    the run that counts with the staff's entries, or a manual grade alone."""

    assignment: str = Field(description="the assignment's slug")
    counted_run_id: int | None = Field(description="the run the gradebook counts for the student; null: none")
    grade: GradeOut | None = Field(description="the student's grade in the assignment; null: no scored run and "
                                               "no manual grade")


class GpuPhaseOut(FromRow):
    phase: str
    seconds: dict[str, float] = Field(description="problem id -> its seconds in this phase")
    run_s: float | None = Field(description="the phase's share of the stage's wall time; null for a phase that "
                                            "runs beside others (their shared total is a row of its own)")
    note: str


class GpuTimeOut(FromRow):
    """Where the run's GPU-stage time went (grader/reads/gpu_phases.py): staff only."""

    problems: list[str]
    rows: list[GpuPhaseOut]
    stage_s: float | None = Field(description="the whole GPU stage, wall seconds")
    budget_s: float | None
    loads: dict[str, float] = Field(description="part of the submission -> seconds its load probe took")
    gpu_busy: dict[str, float] = Field(description="part of the stage -> the GPU's busy share (NVML)")


class BandwidthOut(BaseModel):
    """A profiled problem's achieved memory bandwidth (grader/reads/bandwidth.py)."""

    problem_id: str
    case: str = Field(description="the profiled case (the problem's largest timed shape)")
    shape: list[int]
    kernel_ms: float = Field(description="the kernels' own GPU time per call (CUPTI)")
    bytes: int = Field(description="the traffic the operation needs: every array read or written once, "
                                   "an in-place one both")
    gb_s: float = Field(description="bytes / kernel time, in GB/s (1e9 bytes)")
    percent_of_peak: float | None = Field(description="gb_s as a share of the GPU model's measured peak copy "
                                                      "bandwidth; null: no peak measured for it (grader calibrate)")
    reference_gb_s: float | None = Field(description="the calibration submissions' bandwidth on this problem")
    above_peak: bool | None = Field(default=None, description="staff of the course only: above 100% of the peak, "
                                                              "an anomaly to review; null for students")

    @classmethod
    def of(cls, p: ProblemBandwidth, staff: bool) -> BandwidthOut:
        m = p.measured
        percent = p.percent_of_peak
        return cls(problem_id=p.problem_id, case=m.case, shape=list(m.shape), kernel_ms=m.kernel_ms, bytes=m.bytes,
                   gb_s=round(m.gb_s, 1), percent_of_peak=None if percent is None else round(percent, 1),
                   reference_gb_s=p.reference_gb_s, above_peak=p.above_peak if staff else None)


class RunOut(FromRow):
    id: int
    submission_id: int
    state: str
    error_class: str | None
    message: str | None
    reason: str
    score: float | None
    attempts: int
    created_at: datetime
    enqueued_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    worker_host: str | None
    toolchain: dict[str, Any] | None
    stages: dict[str, StageOut]
    results: list[ProblemResultOut]
    report: dict[str, Any] | None = None  # Gradescope-format results.json once scored
    reused_from: int | None = Field(default=None, description="the run whose measurements this run took instead of "
                                    "measuring: the same staged sources, rubric, toolchain and GPU model")
    progress: dict[str, Any] | None = Field(
        default=None, description='while active: {"stage"} or {"stage": "run", "problem", "index", "total"}, '
                                  'with "checked" once correctness verdicts are known while speed is measured: '
                                  '[{"problem", "correct", "correctness_points", "correctness_max", '
                                  '"speed": "being measured" | "not timed"}]')
    grade: GradeOut | None = Field(default=None, description="scored runs: the final grade (score is the raw score)")
    assignment_grade: AssignmentGradeOut | None = Field(
        default=None, description="the student's grade in the assignment, whichever run counts (the run page's)")
    bandwidth: list[BandwidthOut] = Field(default_factory=list, description="each profiled problem's achieved "
                                          "memory bandwidth beside the GPU's peak and the reference's")
    gpu_time: GpuTimeOut | None = Field(default=None, description="staff of the course only: the GPU stage's time "
                                                                  "per phase and problem; null for students and runs "
                                                                  "without a GPU stage")


class RunSummary(FromRow):
    id: int
    state: str
    error_class: str | None
    score: float | None
    reason: str
    created_at: datetime


class _SubmissionFields(FromRow):
    id: int
    user: str = Field(validation_alias=AliasPath("user", "username"))
    assignment: str = Field(validation_alias=AliasPath("assignment", "slug"))
    original_filename: str
    size_bytes: int
    uploaded_at: datetime


class SubmissionOut(_SubmissionFields):
    sha256: str
    runs: list[RunSummary]


class SubmissionSummary(_SubmissionFields):
    run_count: int
    latest_run: RunSummary | None
    url: str


class SubmissionPage(BaseModel):
    items: list[SubmissionSummary]
    total: int = Field(description="submissions matching the filters, over all pages")
    page: int
    page_size: int
    next: str | None = Field(description="path and query of the next page; null on the last page")


class RunListItem(RunSummary):
    submission_id: int
    attempts: int
    started_at: datetime | None
    finished_at: datetime | None
    problems: dict[str, float] = Field(description="problem id -> points (scored runs)")
    url: str


class SubmissionRuns(BaseModel):
    submission_id: int
    items: list[RunListItem]


class ProblemColumnOut(FromRow):
    problem_id: str
    title: str
    max_points: float


class ScoredRunOut(FromRow):
    run_id: int
    submission_id: int
    score: float = Field(description="after any late penalty")
    finished_at: datetime | None
    problems: dict[str, float]
    raw_score: float | None = Field(default=None, description="before the late penalty; null: none applied")
    late: str | None = Field(default=None, description="the late policy's reason; null: on time")
    grade: GradeOut


class GradebookRowOut(FromRow):
    user: str = Field(validation_alias="username")
    name: str | None = Field(default=None, validation_alias="full_name",
                             description="as the course's roster gives it, else the account's display name")
    section: str | None = Field(default=None, description="from the course's roster")
    submissions: int
    total: float | None = Field(description="the student's grade: the run that counts (staff's choice, else the "
                                "policy's pick) with the staff's entries; null: no scored run and no manual grade")
    problems: dict[str, float] = Field(description="problem id -> points of that run, before any late penalty")
    run_id: int | None
    grade: GradeOut | None = Field(default=None, description="the student's grade; total is its final_score")
    chosen_by: str | None = Field(default=None, description="the login who chose that run to count "
                                  "instead of the policy's pick: staff, or the student (equal to user) where "
                                  "the assignment lets students choose; null: the policy's pick")
    chosen_reason: str | None = Field(default=None, description="why it was chosen, when they said")
    latest: ScoredRunOut | None
    best: ScoredRunOut | None


class GradebookOut(FromRow):
    assignment: str
    title: str
    total_points: float
    policy: Literal["latest", "best"]
    problems: list[ProblemColumnOut]
    rows: list[GradebookRowOut]


class RegradeRequest(RequestBody):
    submissions: list[RowId] | Literal["all", "latest"] = Field(
        description='submission ids, "all" (every submission of the assignment) or '
        '"latest" (each student\'s newest submission)',
        examples=[[12, 15], "all"],
    )


class RegradeAccepted(BaseModel):
    run_ids: list[int]
    submission_ids: list[int]
    queued: int = Field(description="how many runs reached the queue now (the rest are sent later)")
    message: str


class Accepted(BaseModel):
    submission_id: int
    run_id: int
    queued: bool
    message: str
    run_url: str


class SubmissionCreated(Accepted):
    sha256: str
    size_bytes: int
    earlier_upload: bool = Field(
        default=False, description="true (status 200): the same upload as an earlier submission (same "
        "Idempotency-Key, or the same bytes within the re-send window); nothing new was stored")
