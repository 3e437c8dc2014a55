"""The tables of bench/fidelity.py: the course's verdicts (read by bench/harness_output.py)
beside kernelgrade's, the agreement rule, the table (text and markdown), the merged results of
several runs, and the speed fidelity rows (course_speed beside kernelgrade's scored figure),
per-shape listing and flags.

Standard library and numpy only (worker.measurements), so the unit tests (and a merge of GPU calls' JSON on a CPU
machine) need neither torch nor a GPU.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Any

from harness_output import COURSE_TESTS, CourseVerdict, course_speed, shorten

from rubrics.hw4.course_shapes import course_shapes


def speedup_summary(values: Iterable[float]) -> str:
    """`10.6x (10.1-11.2)`: median and range of the printed speedups; `-` when none."""
    vals = [v for v in values if v == v]  # drop NaN
    if not vals:
        return "-"
    med = statistics.median(vals)
    if len(vals) == 1:
        return f"{med:.2f}x"
    return f"{med:.2f}x ({min(vals):.2f}-{max(vals):.2f})"


def course_cell(v: CourseVerdict | None) -> str:
    if v is None:
        return "not run"
    if v.verdict == "pass":
        return f"pass {v.passes}/{v.expected}"
    if v.verdict == "build failed":
        return f"build failed: {v.reason}"
    return f"{v.verdict}: {v.reason}" if v.reason else v.verdict


def kernelgrade_passed(record: dict[str, Any] | None) -> bool | None:
    """Did kernelgrade find the problem correct (every case passed)? None: not graded."""
    if record is None or record.get("graded") is False:  # built, but no GPU stage measured it
        return None
    return record.get("status") == "passed"


def kernelgrade_cell(record: dict[str, Any] | None) -> str:
    if record is None:
        return "not graded"
    if record.get("graded") is False:
        why = str(record.get("message") or "")
        return why if why.startswith("not graded") else f"not graded: {why}" if why else "not graded"
    status = record.get("status", "?")
    if status == "passed":
        return "pass"
    detail = record.get("first_failure") or record.get("message") or ""
    word = {"failed": "fail", "not_run": "not run"}.get(status, status)
    return f"{word}: {shorten(detail, 120)}" if detail else word


def agreement(problem: str, course: CourseVerdict | None, kernelgrade: dict[str, Any] | None) -> str:
    """agree when both pass or both do not; `course n/a` for Problem 3 (no course test)."""
    if problem not in COURSE_TESTS.values():
        return "course n/a"
    if course is None or course.verdict == "not run":
        return "no course run"
    kg = kernelgrade_passed(kernelgrade)
    if kg is None:
        return "no grade"
    course_pass = course.verdict == "pass"
    if course_pass == kg:
        return "agree (both pass)" if kg else "agree (both fail)"
    return "DISAGREE (course pass, kernelgrade fail)" if course_pass else "DISAGREE (course fail, kernelgrade pass)"


def _points(record: dict[str, Any] | None) -> str:
    if record is None or record.get("points") is None or record.get("graded") is False:
        return "-"
    return f"{round(float(record['points']), 2):g}/{float(record['max_points']):g}"


def _kg_speedups(record: dict[str, Any] | None) -> str:
    if record is None:
        return "-"
    own, ref = record.get("speedup_student"), record.get("speedup_trusted")
    if not own and not ref:
        return "-"
    return f"{own or '-'} own; {ref or '-'} ref"


def table_rows(results: dict[str, Any]) -> list[dict[str, str]]:
    """One row per submission and problem from merged results
    ({"harness": {zip: {"tests": {test: verdict dict}}}, "grader": {zip: {"problems": {pid: record}}}})."""
    harness = results.get("harness", {})
    grader = results.get("grader", {})
    course_tests = {pid: test for test, pid in COURSE_TESTS.items()}
    rows = []
    for name in sorted(set(harness) | set(grader)):
        h, g = harness.get(name, {}), grader.get(name, {})
        problems = list(COURSE_TESTS.values())
        for pid in (g.get("problems") or {}):
            if pid not in problems:
                problems.append(pid)
        for pid in problems:
            test = course_tests.get(pid)
            raw = (h.get("tests") or {}).get(test) if test else None
            if test and raw is None and h.get("error"):
                raw = {"verdict": "not run", "reason": h["error"]}
            course = CourseVerdict.from_dict(raw) if raw else None
            record = (g.get("problems") or {}).get(pid)
            if record is None and g.get("error"):  # the bench could not grade it: no verdict
                record = {"status": "error", "message": g["error"], "graded": False}
            rows.append({
                "submission": name,
                "problem": pid,
                "course": "n/a (no course test)" if test is None else course_cell(course),
                "course_speedup": speedup_summary(course.speedups) if course else "-",
                "kernelgrade": kernelgrade_cell(record),
                "kg_speedup": _kg_speedups(record),
                "points": _points(record),
                "agreement": agreement(pid, course, record),
            })
    return rows


COLUMNS = (("submission", "submission"), ("problem", "problem"), ("course", "course harness"),
           ("course_speedup", "course speedup, median (min-max)"), ("kernelgrade", "kernelgrade"),
           ("kg_speedup", "kernelgrade speedup"), ("points", "points"), ("agreement", "agreement"))


def render_text(rows: list[dict[str, str]], width: int = 48) -> str:
    """An aligned plain-text table; long cells cut to `width` characters."""
    return _text_table(rows, COLUMNS, width)


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def render_markdown(rows: list[dict[str, str]], header: list[str]) -> str:
    """The section for docs/benchmarks/fidelity.md: `header` lines, then the table."""
    lines = [*header, "", "| " + " | ".join(title for _, title in COLUMNS) + " |",
             "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(_md_cell(r[key]) for key, _ in COLUMNS) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def summary_counts(rows: list[dict[str, str]]) -> dict[str, int]:
    counts = {"agree": 0, "disagree": 0, "not compared": 0}
    for r in rows:
        a = r["agreement"]
        counts["agree" if a.startswith("agree") else "disagree" if a.startswith("DISAGREE") else "not compared"] += 1
    return counts


def merge_results(parts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Results of several runs (a harness-only and a grader-only call, grades of different
    problems) as one: per submission the later part's harness half wins, and its graded
    problems replace the same problems of earlier parts (others are kept); each part's meta
    is kept."""
    merged: dict[str, Any] = {"meta": [], "harness": {}, "grader": {}}
    for part in parts:
        meta = part.get("meta")
        if isinstance(meta, list):
            merged["meta"].extend(meta)
        elif meta:
            merged["meta"].append(meta)
        merged["harness"].update(part.get("harness") or {})
        for name, record in (part.get("grader") or {}).items():
            earlier = merged["grader"].get(name) or {}
            if earlier.get("problems") and record.get("problems"):
                record = {**record, "problems": {**earlier["problems"], **record["problems"]}}
            merged["grader"][name] = record
    return merged


# --------------------------------------------------------------------------- speed fidelity

WITHIN = 0.15  # kernelgrade's scored figure "agrees" with the course mean within this fraction
# scored_figure -> the key of a timing_shapes entry's "speedups" that figure is the mean of
FIGURE_SHAPE_KEY = {"reference_ops": "reference_ops", "student": "baseline"}


def shapes_match(problem: str, printed: list[list[int]]) -> str:
    """yes / no: the course's printed shapes are kernelgrade's timing shapes
    (rubrics.hw4.course_shapes); `-` when the record has none (before shapes were kept)."""
    if not printed:
        return "-"
    try:
        ours = [list(s) for s in course_shapes(problem)]
    except ValueError:
        return "-"
    return "yes" if [list(s) for s in printed] == ours else "no"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _scored(record: dict[str, Any]) -> float | None:
    value = record.get("scored_speedup")
    return float(value) if isinstance(value, (int, float)) and value == value else None


Pair = tuple[str, str, "CourseVerdict | None", "dict[str, Any] | None"]


def _course_problem_pairs(results: dict[str, Any]) -> list[Pair]:
    """(submission, problem, course verdict, kernelgrade record) for every course-tested problem."""
    harness, grader = results.get("harness", {}), results.get("grader", {})
    pairs = []
    for name in sorted(set(harness) | set(grader)):
        tests = (harness.get(name) or {}).get("tests") or {}
        problems = (grader.get(name) or {}).get("problems") or {}
        for test, pid in COURSE_TESTS.items():
            raw = tests.get(test)
            pairs.append((name, pid, CourseVerdict.from_dict(raw) if raw else None, problems.get(pid)))
    return pairs


def speed_rows(results: dict[str, Any]) -> list[dict[str, str]]:
    """The speed fidelity table: one row per submission and problem where both the course
    (a passing run) and kernelgrade (a scored speedup) have a figure."""
    rows = []
    for name, pid, course, record in _course_problem_pairs(results):
        speed = course_speed(course)
        scored = _scored(record) if record else None
        if speed is None or scored is None or record is None or course is None:
            continue
        ratio = scored / speed.mean if speed.mean else None
        runs = f"{speed.runs} run{'s' if speed.runs != 1 else ''}"
        rows.append({
            "submission": name,
            "problem": pid,
            "course_mean": f"{speed.mean:.2f}x ({runs}, {speed.low:.2f}-{speed.high:.2f})",
            "kg_scored": f"{scored:.2f}x ({record.get('scored_figure') or '?'})",
            "kg_own_ops": record.get("speedup_student") or "-",
            "kg_our_ops": record.get("speedup_reference_ops") or "-",
            "kg_kit": record.get("speedup_trusted") or "-",
            "ratio": "-" if ratio is None else f"{ratio:.3f}",
            "within": "-" if ratio is None else ("yes" if abs(ratio - 1) <= WITHIN else "no"),
            "course_robust": f"{speed.robust:.2f}x ({scored / speed.robust:.3f})" if speed.robust else "-",
            "shapes": shapes_match(pid, course.shapes),
        })
    return rows


SPEED_COLUMNS = (("submission", "submission"), ("problem", "problem"),
                 ("course_mean", "course mean (runs, min-max of run means)"),
                 ("kg_scored", "kernelgrade scored (figure)"), ("kg_own_ops", "kernelgrade vs its own ops"),
                 ("kg_our_ops", "kernelgrade vs our ops"), ("kg_kit", "kit figure"),
                 ("ratio", "scored / course"), ("within", f"within {WITHIN:.0%}"),
                 ("course_robust", "course per-case medians over runs, mean (scored / that)"), ("shapes", "shapes"))


def _shape_speedup(entry: dict[str, Any], figure: str | None) -> tuple[float | None, str]:
    """A timing_shapes entry's speedup of the scored figure (reference_ops, else baseline)."""
    speedups = entry.get("speedups") or {}
    keys = [FIGURE_SHAPE_KEY[figure]] if figure in FIGURE_SHAPE_KEY else []
    for key in [*keys, "reference_ops", "baseline"]:
        value = speedups.get(key)
        if isinstance(value, (int, float)):
            return float(value), key
    return None, "-"


def shape_lines(results: dict[str, Any]) -> list[str]:
    """Per shape: the course's per-case mean over runs beside kernelgrade's per-shape speedup."""
    lines = []
    for name, pid, course, record in _course_problem_pairs(results):
        speed = course_speed(course)
        shapes = ((record or {}).get("timing") or {}).get("timing_shapes") or []
        if speed is None or not shapes or course is None or record is None:
            continue
        lines.append(f"- {name} {pid}:")
        for i in range(max(len(speed.per_case), len(shapes))):
            printed = course.shapes[i] if i < len(course.shapes) else None
            entry = shapes[i] if i < len(shapes) else {}
            value, key = _shape_speedup(entry, record.get("scored_figure"))
            ours = entry.get("shape")
            where = f"course {tuple(printed) if printed else '?'}"
            if ours is not None and list(ours) != (printed or []):
                where += f" / kernelgrade {tuple(ours)}"
            c = speed.per_case[i] if i < len(speed.per_case) else None
            lines.append(f"  - case {i + 1} {where}: course {_x(c)}, kernelgrade {_x(value)} ({key})")
    return lines


def _seconds_text(seconds: Any) -> str:
    if not isinstance(seconds, dict) or not seconds:
        return "-"
    return ", ".join(f"{k} {v:g} s" if isinstance(v, (int, float)) else f"{k} {v}" for k, v in seconds.items())


def _memory_text(memory: Any) -> str:
    """'unfused host 2310 MiB, device 1020 MiB; fused ...' from a Problem 3 record's step_memory."""
    if not isinstance(memory, dict) or not memory:
        return ""
    def mib(value: Any) -> str:
        return f"{value:.0f} MiB" if isinstance(value, (int, float)) else "-"
    def growth(f: dict[str, Any]) -> str:
        first_last = f.get("host_first_last_mib")
        return f" (first step {mib(first_last[0])}, last {mib(first_last[1])})" if first_last else ""
    return "; ".join(f"{model} host {mib(f.get('host_peak_mib'))}{growth(f)}, device {mib(f.get('device_used_peak_mib'))}"
                     for model, f in sorted(memory.items()))


def _problem3_text(time_record: Any) -> str:
    """'; set-up 14 s, checked steps unfused 9.1 s fused 8.2 s, 8 timed pairs (settled) unfused
    [..] ms fused [..] ms, the problem 117 s' from a Problem 3 record."""
    if not isinstance(time_record, dict):
        return ""
    parts = []
    if isinstance(time_record.get("setup_s"), (int, float)):
        parts.append(f"set-up {time_record['setup_s']:.0f} s")
    checked = time_record.get("checked_step_s") or {}
    if checked:
        parts.append("checked steps " + " ".join(f"{model} {s:.1f} s" for model, s in checked.items()
                                                  if isinstance(s, (int, float))))
    if time_record.get("pairs") is not None:
        steps = " ".join(f"{model} [{', '.join(f'{ms:.0f}' for ms in time_record[f'{model}_ms'])}] ms"
                         for model in ("unfused", "fused") if time_record.get(f"{model}_ms"))
        parts.append(f"{time_record['pairs']} timed pairs ({time_record.get('stop')}) {steps}".rstrip())
    if isinstance(time_record.get("elapsed_s"), (int, float)):
        parts.append(f"the problem {time_record['elapsed_s']:.0f} s")
    return "; " + ", ".join(parts) if parts else ""


def _kernel_text(record: dict[str, Any]) -> str:
    """'; largest shape [..]: kernels 0.21 ms of a 2.9 ms timed call (7%), 2540 GB/s': the
    kernels' own GPU time beside the timed call's median on the same shape."""
    kernel, bandwidth = record.get("kernel_ms"), record.get("bandwidth") or {}
    if not isinstance(kernel, (int, float)):
        return ""
    shapes = [s for s in (record.get("timing") or {}).get("timing_shapes") or [] if s.get("shape")]
    largest = max(shapes, key=lambda s: math.prod(s["shape"]), default=None)
    call = ((largest or {}).get("ms") or {}).get("custom")
    text = f"; kernels {kernel:.3g} ms"
    if largest is not None and isinstance(call, (int, float)) and call > 0:
        text = f"; largest shape {largest['shape']}: kernels {kernel:.3g} ms of a {call:.3g} ms timed call " \
               f"({100 * kernel / call:.0f}%)"
    return text + (f", {bandwidth['gb_s']:.0f} GB/s" if isinstance(bandwidth.get("gb_s"), (int, float)) else "")


def flag_lines(results: dict[str, Any]) -> list[str]:
    """A line per graded problem: its score's flags (if any) and the timing's phase seconds."""
    lines = []
    for name, g in sorted((results.get("grader") or {}).items()):
        for pid, record in sorted(((g or {}).get("problems") or {}).items()):
            if record.get("graded") is False:
                continue
            flags = record.get("flags") or []
            seconds = _seconds_text((record.get("timing") or {}).get("seconds"))
            memory = _memory_text(record.get("step_memory"))
            lines.append(f"- {name} {pid}: flags {'; '.join(flags) if flags else 'none'}; timing seconds: {seconds}"
                         + (f"; peak memory per step: {memory}" if memory else "") + _kernel_text(record)
                         + _problem3_text(record.get("problem3_time")))
    return lines


def render_speed_text(rows: list[dict[str, str]], width: int = 48) -> str:
    return _text_table(rows, SPEED_COLUMNS, width)


def render_speed_markdown(rows: list[dict[str, str]]) -> str:
    return _md_table(rows, SPEED_COLUMNS)


def _text_table(rows: list[dict[str, str]], columns: tuple[tuple[str, str], ...], width: int) -> str:
    def cut(text: str) -> str:
        return text if len(text) <= width else text[: width - 3] + "..."

    header = [title for _, title in columns]
    body = [[cut(r[key]) for key, _ in columns] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(header, *body)] if body else [len(h) for h in header]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip() for cells in body]
    return "\n".join(lines)


def _md_table(rows: list[dict[str, str]], columns: tuple[tuple[str, str], ...]) -> str:
    lines = ["| " + " | ".join(title for _, title in columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(_md_cell(r[key]) for key, _ in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"
