"""worker.assignment, the one seam between generic code and an assignment: generic modules
name no assignment, the loader finds plug-ins (a module, or a file beside the rubric) and
refuses a bad entry in sentences, and the tests' second assignment (tests/assignments/vecadd)
grades through the generic pipeline with no GPU, its outputs judged by worker.checks."""
from __future__ import annotations

import ast
import shutil
import zipfile
from pathlib import Path

import pytest
import yaml

from grader.runs.engine_config import gpu_stage_for, pipeline_config
from grader.settings import Settings
from worker.assignment import AssignmentError, assignment_of
from worker.pipeline import grade_submission
from worker.rubric import RubricError, load_rubric
from worker.starter_kit import main as starter_main
from worker.starter_kit import write_starter_zip, zip_tree
from worker.states import RunState

ROOT = Path(__file__).resolve().parents[3]
VECADD = ROOT / "tests" / "assignments" / "vecadd"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="the pipeline builds vecadd with nvcc")

# Generic code: everything outside the assignments' folders (rubrics/<slug>/): the whole engine,
# its subpackages included, and the whole service, its pages' templates and scripts included.
GENERIC = sorted([*(ROOT / "worker").rglob("*.py"), *(ROOT / "grader").rglob("*.py")])
PAGES = sorted([*(ROOT / "grader" / "templates").rglob("*.html"), *(ROOT / "grader" / "static").rglob("*.js")])
# The default assignment of the settings' KG_RUBRICS: the one place generic code names hw4.
ALLOWED = {("grader/settings.py", "hw4")}


def _names_of_hw4(path: Path, root: Path = ROOT) -> list[tuple[str, str]]:
    """(file, what) for each import of rubrics.hw4 and each string (docstrings aside) naming hw4."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    rel, found = path.relative_to(root).as_posix(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rubrics.hw4"):
            found.append((rel, f"import {node.module}"))
        elif isinstance(node, ast.Import):
            found += [(rel, f"import {a.name}") for a in node.names if a.name.startswith("rubrics.hw4")]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                and "hw4" in node.value:
            found.append((rel, node.value))
    return found


def test_generic_code_reaches_hw4_only_through_the_seam() -> None:
    found = {hit for path in GENERIC for hit in _names_of_hw4(path)}
    assert found - ALLOWED == set(), "generic code must reach an assignment through worker.assignment"
    assert ALLOWED <= found, "the allowed default is gone: remove it from ALLOWED"


# hw4's names for what its stage measures and records (its routes' and figures' old stored keys,
# its telemetry's phases, its timing evidence and Problem 3's record, its review's setting): the
# engine and the service read them only through the plug-in, save the schema-1 reading of
# measurements stored under them.
HW4_MEASUREMENT_NAMES = ("abi_cases", "binding_cases", "speedup_student", "speedup_reference_ops", "speedup_trusted",
                         "problem3", "kernel_profile", "timing_warm", "timing_evidence", "own_ops_vs_reference_ops",
                         "deferred_share", "basic_ops_gap_flag")
MEASUREMENT_NAMES_ALLOWED = {"worker/measurements.py"}


def test_generic_code_reads_hw4_measurements_only_through_its_plug_in() -> None:
    found = {(path.relative_to(ROOT).as_posix(), node.value) for path in GENERIC
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and any(name in node.value for name in HW4_MEASUREMENT_NAMES)}
    assert {file for file, _ in found} == MEASUREMENT_NAMES_ALLOWED, sorted(found)


def test_the_pages_name_no_assignment() -> None:
    """What a page says of an assignment comes from its rubric, never from the template."""
    assert PAGES, "no templates found: the scan looks in the wrong place"
    found = [(p.relative_to(ROOT).as_posix(), n) for p in PAGES
             for n, line in enumerate(p.read_text().splitlines(), 1) if "hw4" in line]
    assert found == []


def test_the_scan_sees_imports_and_strings(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text('"""About hw4 (a docstring)."""\nfrom rubrics.hw4.grade import x\nimport rubrics.hw4\n'
                      'def f():\n    """hw4 again."""\n    return "llmsys_hw4"\n')
    assert sorted(what for _, what in _names_of_hw4(source, tmp_path)) == [
        "import rubrics.hw4", "import rubrics.hw4.grade", "llmsys_hw4"]


def test_the_rubrics_name_their_plug_ins() -> None:
    hw4 = assignment_of(load_rubric("hw4"))
    assert hw4.zip_folder == "llmsys_hw4" and hw4.stage_needs_gpu and hw4.mutants_file is not None
    assert hw4.mutants_file.is_file() and hw4.words.routes == {"abi": "C ABI", "binding": "binding"}
    vecadd = assignment_of(load_rubric("vecadd", VECADD.parent))  # plugin.py beside its rubric
    assert vecadd.zip_folder == "vecadd" and not vecadd.stage_needs_gpu


def _rubric_copy(tmp_path: Path, plugin: object) -> Path:
    data = yaml.safe_load((VECADD / "rubric.yaml").read_text())
    data["plugin"], data["starter"] = plugin, str(VECADD / "starter")
    (tmp_path / "vecadd.yaml").write_text(yaml.safe_dump(data))
    return tmp_path


@pytest.mark.parametrize("plugin, message", [
    ("worker.no_such_plugin", "The assignment plug-in worker.no_such_plugin cannot be imported"),
    ("missing.py", "cannot be imported (no Python file"),
    ("worker.timing", "The plug-in worker.timing has no ASSIGNMENT of type worker.assignment.Plugin"),
])
def test_a_bad_plugin_entry_is_refused_in_a_sentence(tmp_path: Path, plugin: str, message: str) -> None:
    rubric = load_rubric("vecadd", _rubric_copy(tmp_path, plugin))
    with pytest.raises(AssignmentError, match=message.replace("(", r"\(").replace(".", r"\.")):
        assignment_of(rubric)
    with pytest.raises(AssignmentError):
        gpu_stage_for(Settings(_env_file=None), rubric)  # type: ignore[call-arg]


def test_a_plugin_entry_that_is_not_text_is_a_rubric_error(tmp_path: Path) -> None:
    with pytest.raises(RubricError, match="plugin must be a module name or a Python file"):
        load_rubric("vecadd", _rubric_copy(tmp_path, ["rubrics.hw4"]))


def test_a_rubric_without_a_plugin_has_no_stage(tmp_path: Path) -> None:
    rubric = load_rubric("vecadd", _rubric_copy(tmp_path, None))
    assert assignment_of(rubric).zip_folder == "vecadd"
    assert gpu_stage_for(Settings(_env_file=None, gpu_grading="on"), rubric) is None  # type: ignore[call-arg]


def test_a_rubric_outside_rubrics_is_found_only_along_the_search_passed() -> None:
    course = Settings(_env_file=None, rubric_dirs=[VECADD.parent])  # type: ignore[call-arg]
    plain = Settings(_env_file=None)  # type: ignore[call-arg]
    assert load_rubric("vecadd", search=course.rubric_dirs).starter_dir == VECADD / "starter"
    # Building settings with rubric_dirs changed nothing for anyone else: no search path is global.
    for search in (plain.rubric_dirs, ()):
        with pytest.raises(RubricError, match="no rubric named 'vecadd'"):
            load_rubric("vecadd", search=search)


def test_the_search_is_rubrics_first_then_the_folders_in_order(tmp_path: Path) -> None:
    data = yaml.safe_load((VECADD / "rubric.yaml").read_text())
    data["starter"] = str(VECADD / "starter")
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
        for slug in ("vecadd", "hw4"):
            (folder / f"{slug}.yaml").write_text(yaml.safe_dump({**data, "title": folder.name}))
    assert load_rubric("vecadd", search=(first, second)).title == "first"
    assert load_rubric("vecadd", search=(second, first)).title == "second"
    assert load_rubric("hw4", search=(first,)).title == load_rubric("hw4").title != "first"


def test_the_engines_starter_command_searches_the_folders_it_is_given(tmp_path: Path) -> None:
    out = tmp_path / "given.zip"
    assert starter_main(["vecadd", "--rubric-dir", str(VECADD.parent), "--out", str(out)]) == 0
    expected = write_starter_zip(load_rubric("vecadd", VECADD.parent), tmp_path / "expected.zip")
    assert out.read_bytes() == expected.read_bytes()
    assert all(name.startswith("vecadd/") for name in zipfile.ZipFile(out).namelist())
    with pytest.raises(RubricError, match="no rubric named 'vecadd'"):
        starter_main(["vecadd", "--out", str(tmp_path / "none.zip")])


def test_a_gpu_stage_needs_gpu_grading_a_cpu_stage_does_not() -> None:
    off = Settings(_env_file=None, gpu_grading="off")  # type: ignore[call-arg]
    assert gpu_stage_for(off, load_rubric("hw4")) is None
    assert gpu_stage_for(off, load_rubric("vecadd", VECADD.parent)) is not None


@needs_nvcc
@pytest.mark.parametrize("body, score, reason", [
    (None, 10, "full marks"),
    ("out[i] = a[i] - b[i];", 0, "failed case n1: shape [1], max error"),
])
def test_vecadd_grades_through_the_pipeline(tmp_path: Path, body: str | None, score: float, reason: str) -> None:
    rubric = load_rubric("vecadd", VECADD.parent)
    tree = tmp_path / "vecadd"
    shutil.copytree(rubric.starter_dir, tree)
    if body is not None:
        source = tree / "src" / "vecadd.cu"
        source.write_text(source.read_text().replace("out[i] = a[i] + b[i];", body))
    settings = Settings(_env_file=None, gpu_grading="off", data_dir=tmp_path / "data")  # type: ignore[call-arg]
    outcome = grade_submission(zip_tree(tree, tmp_path / "v.zip", "vecadd"), rubric, tmp_path / "job",
                               pipeline_config(settings, rubric), gpu_stage=gpu_stage_for(settings, rubric))
    assert outcome.state == RunState.scored, outcome.message
    [problem] = outcome.problems
    assert problem.points == score and reason in problem.message, problem.message
    if body is not None:  # the check's message, and the assignment's word for the route
        assert "out: 1 of 1 elements out of tolerance" in problem.message, problem.message
        assert "(vec_add called directly)" in problem.message
