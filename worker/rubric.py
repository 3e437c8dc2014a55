"""Rubric files (rubrics/<slug>.yaml) loaded into typed, immutable objects.

Depends only on PyYAML so the GPU suite can read rubrics on the bare GPU machine.
"""
from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from worker.build import KernelTarget

PROJECT_ROOT = Path(__file__).resolve().parent.parent
RUBRIC_DIR = PROJECT_ROOT / "rubrics"
# Where the built reference kit holds the rubric's `kit_library` (worker.pipeline).
KIT_LIBRARY_BUILT = "kg/kit_library.so"


class RubricError(ValueError):
    """A rubric file is missing or malformed."""


SPEED_SCALES = ("log", "linear")
# Share of a problem's points that correctness carries when its `scoring:` section is absent.
DEFAULT_CORRECTNESS_SHARE = 0.7


@dataclass(frozen=True)
class ProblemScoring:
    """How one problem's points split and how its speedup earns points (see worker.scoring).

    Speed points grow from `speed_floor` (0 points at or below it) to `target` (all speed
    points at or above it), with the logarithm of the speedup (`speed_scale: log`) or with the
    speedup itself (`linear`). `target` defaults to the problem's reference_speedup; a per-GPU
    calibrated target may replace it (Rubric.with_targets).
    """

    correctness_points: float = 14.0
    speed_points: float = 6.0
    speed_floor: float = 1.0
    target: float | None = None
    # Which measured speed figure scores (ProblemMeasurement.figures: the names are the
    # assignment's, its plug-in's Words.figures), and which scores, with a flag, where that one
    # was not measured. No figure: no speed points (worker.assignment.assignment_of refuses a
    # figure its plug-in does not measure).
    speed_figure: str | None = None
    speed_fallback: str | None = None
    # log: a speedup that moves by a factor moves the points alike at any level, so the few
    # per cent a figure drifts between re-grades (one child process to the next) move them
    # least where they matter most, near the target (worker.scoring.speed_fraction).
    speed_scale: str = "log"
    # The settings of the assignment's own review of a timing (its plug-in's review_timing), by
    # the names its review_settings declares (hw4: basic_ops_gap_flag); absent, the plug-in's
    # default; null, that check off.
    review: Mapping[str, float | None] = field(default_factory=dict)
    # Of the correctness points, those carried by the hidden cases (edge cases inside the
    # assignment's domain that the course's own tests never reach), given in proportion to the
    # hidden cases passed; the rest need the public (course-like) cases, and so does any speed
    # point. 0: every case weighs the same (see partial_correctness).
    hidden_points: float = 0.0
    # False: the public share is all-or-nothing; True: proportional to passed public cases.
    partial_correctness: bool = False
    # Show shape and error location of failed hidden cases to the student.
    hidden_case_details: bool = True

    @property
    def max_points(self) -> float:
        return self.correctness_points + self.speed_points

    def thresholds(self, target: float | None = None) -> tuple[float, ...]:
        """Speedups where the score changes slope: the floor and the target."""
        t = self.target if target is None else target
        return (self.speed_floor,) if t is None else (self.speed_floor, t)


@dataclass(frozen=True)
class Problem:
    id: str
    title: str
    points: float
    reference_speedup: float | None
    scoring: ProblemScoring = field(default_factory=ProblemScoring)
    # Names of the rubric's kernels this problem's grading uses; the problem is not graded
    # when one of them did not build (worker.pipeline). The parser fills in every kernel when
    # the rubric's entry has no `needs:`.
    needs: tuple[str, ...] = ()


def _problem_needs(p: dict[str, Any], kernels: tuple[str, ...]) -> tuple[str, ...]:
    """The `needs:` list of one problem: kernel names of the rubric, each once; absent, every
    kernel (a problem is never graded on a kernel that did not build)."""
    if "needs" not in p:
        return kernels
    raw = p["needs"]
    if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
        raise RubricError(f"problem {p['id']}: needs must be a list of kernel names")
    unknown = [n for n in raw if n not in kernels]
    if unknown:
        raise RubricError(f"problem {p['id']}: needs unknown kernels {unknown} (kernels: {', '.join(kernels)})")
    if len(set(raw)) != len(raw):
        raise RubricError(f"problem {p['id']}: needs lists a kernel twice")
    return tuple(raw)


def _review_settings(problem_id: str, raw: object) -> dict[str, float | None]:
    """A scoring section's `review:`: names (words) to numbers or null; which names the plug-in
    knows is worker.assignment.assignment_of's check."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(k, str) and k.isidentifier() for k in raw):
        raise RubricError(f"problem {problem_id}: review must map setting names to numbers (or null)")
    try:
        return {k: None if v is None else float(v) for k, v in raw.items()}
    except (TypeError, ValueError):
        raise RubricError(f"problem {problem_id}: every review setting must be a number or null") from None


def _problem_scoring(p: dict[str, Any]) -> ProblemScoring:
    """The `scoring:` section of one problem, with defaults scaled to the problem's points."""
    points = float(p["points"])
    raw = dict(p.get("scoring") or {})
    known = set(ProblemScoring.__dataclass_fields__)
    unknown = set(raw) - known
    if unknown:
        raise RubricError(f"problem {p['id']}: unknown scoring keys {sorted(unknown)}")
    if "correctness_points" not in raw and "speed_points" not in raw:
        raw["correctness_points"] = round(points * DEFAULT_CORRECTNESS_SHARE, 6)
    if "speed_points" not in raw:
        raw["speed_points"] = points - float(raw["correctness_points"])
    if "correctness_points" not in raw:
        raw["correctness_points"] = points - float(raw["speed_points"])
    raw.setdefault("target", p.get("reference_speedup"))
    for key in ("correctness_points", "speed_points", "speed_floor", "hidden_points"):
        raw[key] = float(raw.get(key, getattr(ProblemScoring, key)))
    if raw.get("target") is not None:
        raw["target"] = float(raw["target"])
    raw["review"] = _review_settings(p["id"], raw.get("review"))
    scoring = ProblemScoring(**raw)
    if abs(scoring.max_points - points) > 1e-9:
        raise RubricError(
            f"problem {p['id']}: correctness_points + speed_points = {scoring.max_points:g}, "
            f"but points = {points:g}"
        )
    if scoring.correctness_points < 0 or scoring.speed_points < 0:
        raise RubricError(f"problem {p['id']}: negative points in scoring")
    if not 0 <= scoring.hidden_points <= scoring.correctness_points:
        raise RubricError(f"problem {p['id']}: hidden_points must lie between 0 and correctness_points")
    for key in ("speed_figure", "speed_fallback"):
        name = getattr(scoring, key)
        if name is not None and not (isinstance(name, str) and name.isidentifier()):
            raise RubricError(f"problem {p['id']}: {key} must name a speed figure (a word such as baseline)")
    if scoring.speed_fallback is not None and scoring.speed_figure is None:
        raise RubricError(f"problem {p['id']}: speed_fallback needs a speed_figure to fall back from")
    if scoring.speed_scale not in SPEED_SCALES:
        raise RubricError(f"problem {p['id']}: speed_scale must be one of {SPEED_SCALES}")
    return scoring


@dataclass(frozen=True)
class Rubric:
    slug: str
    title: str
    # The trusted reference kit's folder (the student starter is derived from it): the rubric's
    # `starter:`, relative to the rubric file's folder.
    starter_dir: Path
    required_files: tuple[str, ...]
    student_files: tuple[str, ...]
    kernels: tuple[KernelTarget, ...]
    nvcc_flags: tuple[str, ...]
    problems: tuple[Problem, ...]
    # A library of ours (source under the project root) built with the kit, at KIT_LIBRARY_BUILT,
    # for the stage to use as its assignment needs: hw4's is its basic ops in the starter's ABI,
    # put in place of the submission's library at `output` for the composition that scores
    # (rubrics.hw4.speed).
    kit_library: KernelTarget | None = None
    # The similarity check's default base, the starter the course gave its students
    # ("git:<repository>@<ref>", grader.similarity.base), when staff set none.
    similarity_base: str | None = None
    # The assignment's plug-in (worker.assignment): a module name (rubrics.hw4) or the absolute
    # path of a .py file (written relative to the rubric); None: no stage.
    plugin: str | None = None
    # The file it was read from: a plug-in reads its own sections there (hw4's `cases:`), so a
    # course's copy of an assignment kept outside rubrics/ is graded by its own file.
    path: Path | None = None

    @property
    def total_points(self) -> float:
        return sum(p.points for p in self.problems)

    def with_targets(self, targets: Mapping[str, float] | None) -> Rubric:
        """This rubric with per-GPU calibrated targets in place of the problems' own, so the GPU
        stage measures until clear of the thresholds that will score."""
        if not targets:
            return self
        return replace(self, problems=tuple(
            replace(p, scoring=replace(p.scoring, target=targets[p.id])) if p.id in targets else p
            for p in self.problems))


RUBRIC_FILE = "rubric.yaml"  # an assignment's folder <slug>/ holds its rubric under this name


def rubric_candidates(folder: Path, slug: str) -> tuple[Path, Path]:
    """Where `folder` may hold the rubric of `slug`: its assignment folder `<slug>/rubric.yaml`
    (the project's layout), or a lone `<slug>.yaml` (a course's folder of rubric files)."""
    return folder / slug / RUBRIC_FILE, folder / f"{slug}.yaml"


def find_rubric(slug: str, rubric_dir: Path | None = None, *, search: Iterable[Path] = ()) -> Path:
    """The rubric of `slug` in `rubric_dir` alone; without one, the first found in RUBRIC_DIR
    and then in the `search` folders, in order (the service passes its settings' rubric_dirs,
    so that an assignment may live outside the project)."""
    folders = (rubric_dir,) if rubric_dir is not None else (RUBRIC_DIR, *search)
    path = next((p for d in folders for p in rubric_candidates(d, slug) if p.is_file()), None)
    if path is None:
        raise RubricError(f"no rubric named {slug!r} in {', '.join(map(str, folders))} "
                          f"(looked for {slug}/{RUBRIC_FILE} and {slug}.yaml)")
    return path


def load_rubric(slug: str, rubric_dir: Path | None = None, *, search: Iterable[Path] = ()) -> Rubric:
    """The rubric found by find_rubric, parsed."""
    return read_rubric(find_rubric(slug, rubric_dir, search=search))


def read_rubric(path: Path) -> Rubric:
    """The rubric file at `path`, parsed."""
    # Parsing hw4's rubric (its case list) takes ~30 ms; pages ask for the rubric on every
    # request. Cached per file version, so an edited rubric is read again.
    return _parse_rubric(path, path.stat().st_mtime_ns)


def _plugin_entry(entry: str | None, folder: Path) -> str | None:
    """The rubric's `plugin:`: a module name as written, a .py file made absolute."""
    if entry is not None and not isinstance(entry, str):
        raise RubricError("plugin must be a module name or a Python file")
    return str((folder / entry).resolve()) if entry and entry.endswith(".py") else entry


@functools.lru_cache(maxsize=32)
def _parse_rubric(path: Path, _mtime_ns: int) -> Rubric:
    data = yaml.safe_load(path.read_text())
    try:
        kernels = tuple(KernelTarget(**k) for k in data["kernels"])
        names = tuple(k.name for k in kernels)
        if len(set(names)) != len(names):
            raise RubricError(f"two kernels share a name: {list(names)}")
        student_files = tuple(data["student_files"])
        for k in kernels:  # a kernel is only ever built from the submission's own source
            if not any(PurePosixPath(k.source).match(g) for g in student_files):
                raise RubricError(f"kernel {k.name}: its source {k.source} is not among student_files")
        return Rubric(
            slug=data["slug"],
            title=data["title"],
            starter_dir=(path.parent / data["starter"]).resolve(),
            plugin=_plugin_entry(data.get("plugin"), path.parent),
            path=path.resolve(),
            required_files=tuple(data["required_files"]),
            student_files=student_files,
            kernels=kernels,
            nvcc_flags=tuple(data["nvcc_flags"]),
            kit_library=KernelTarget(**data["kit_library"]) if data.get("kit_library") else None,
            similarity_base=(data.get("similarity") or {}).get("base"),
            problems=tuple(
                Problem(
                    id=str(p["id"]),
                    title=p["title"],
                    points=float(p["points"]),
                    reference_speedup=p.get("reference_speedup"),
                    scoring=_problem_scoring(p),
                    needs=_problem_needs(p, names),
                )
                for p in data["problems"]
            ),
        )
    except RubricError as exc:
        raise RubricError(f"{path.name}: {exc}") from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise RubricError(f"{path.name}: malformed rubric ({exc})") from exc

