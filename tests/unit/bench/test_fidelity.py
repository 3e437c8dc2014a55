"""The fidelity bench's pure parts: reading the course harness's output (bench/harness_output.py),
the agreement rule and the table (bench/fidelity_report.py), the overlay tree the harness runs
in and the runner of one course test file on small stand-in scripts (bench/fidelity_harness.py),
the production configuration it grades with (bench/production_config.py) and bench/fidelity.py's
grading and rendering."""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import textwrap
import time
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))

import bench_common  # noqa: E402
import fidelity  # noqa: E402
import fidelity_harness  # noqa: E402
import fidelity_report as report  # noqa: E402
import production_config  # noqa: E402
from harness_output import (  # noqa: E402
    COURSE_TESTS,
    DEFAULT_CASES,
    CourseVerdict,
    blame_build,
    build_failed,
    course_speed,
    expected_cases,
    parse_harness_output,
    parse_shapes,
)

from rubrics.hw4.course_shapes import course_shapes  # noqa: E402
from worker.build import Toolchain  # noqa: E402
from worker.rubric import load_rubric  # noqa: E402
from worker.unpack import UnpackLimits, unpack_zip  # noqa: E402

LIMITS = UnpackLimits(200 << 20, 50 << 20, 5000, 24, 100.0)


def case_header(i: int, name: str = "test_launch_attn_softmax") -> str:
    return f">>>>>>>>>>>>>>>>>>>>>>{name}, ntest [{i}], dtype [torch.float32]:\n(batch_size, nhead): (2, 8)\n"


def passed_case(i: int, custom: float, baseline: float) -> str:
    return (case_header(i) + "Run baseline...\nRun custom...\nCompare the results of custom and baseline...\n"
            f"Test passed. Time of custom/baseline (ms): {custom:.3f} / {baseline:.3f}, "
            f"speedup: {baseline / custom:.3f}\n")


def five_passes() -> str:
    return "".join(passed_case(i, 1.0 + i, 10.0 * (1.0 + i) + i) for i in range(5))


# --------------------------------------------------------------------------- the parser


def test_five_passes_is_a_pass_with_the_printed_speedups() -> None:
    v = parse_harness_output(five_passes(), 0)
    assert v.verdict == "pass" and v.passes == 5 and v.cases_started == 5
    assert v.speedups == pytest.approx([10.0, 10.5, 10.667, 10.75, 10.8], abs=1e-3)
    assert v.custom_ms == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert report.course_cell(v) == "pass 5/5"
    assert report.speedup_summary(v.speedups) == "10.67x (10.00-10.80)"


def test_allclose_failure_with_exit_status_zero_is_a_fail() -> None:
    out = (passed_case(0, 1, 10) + passed_case(1, 1, 10) + case_header(2)
           + "Run baseline...\nRun custom...\nCompare the results of custom and baseline...\n"
           "torch.allclose failed, use numpy.allclose to log detail.\nUnmatched x: [0.5 0.7]\n"
           "Unmatched y: [0.1 0.2]\nUnmatches in the 2-th tensor.\n\nNot equal to tolerance rtol=0.01, atol=0.001\n")
    v = parse_harness_output(out, 0)
    assert v.verdict == "fail" and v.passes == 2
    assert "case 3" in v.reason and "custom vs baseline" in v.reason and "tensor 2" in v.reason
    assert "exit status 0" in v.reason
    assert v.speedups == [10.0, 10.0]  # the passes before the failure still count as measured


def test_allclose_failure_of_custom_against_its_own_first_run_is_named() -> None:
    out = case_header(0) + "Run baseline...\nRun custom...\ntorch.allclose failed, use numpy.allclose to log detail.\n"
    v = parse_harness_output(out, 0)
    assert v.verdict == "fail" and "case 1" in v.reason and "its own first run" in v.reason


def test_traceback_is_a_crash_with_the_exception() -> None:
    out = (passed_case(0, 1, 5) + case_header(1) + "Traceback (most recent call last):\n"
           '  File "kernel_tests/test_softmax_bw.py", line 30, in custom\n'
           "    inp_mt.grad, _ = minitorch.Attn_Softmax.backward(ctx, g)\n"
           "RuntimeError: CUDA error: an illegal memory access was encountered\n")
    v = parse_harness_output(out, 1)
    assert v.verdict == "crash" and v.passes == 1 and v.returncode == 1
    assert v.reason == "RuntimeError: CUDA error: an illegal memory access was encountered (1/5 passed)"


def test_traceback_after_five_passes_is_still_a_crash() -> None:
    out = five_passes() + "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: late\n"
    assert parse_harness_output(out, 1).verdict == "crash"


def test_not_implemented_error_is_not_implemented() -> None:
    out = (case_header(0) + "Run baseline...\nRun custom...\nTraceback (most recent call last):\n"
           '  File "minitorch/tensor_functions.py", line 139, in forward\n    raise NotImplementedError\n'
           "NotImplementedError\n")
    v = parse_harness_output(out, 1)
    assert v.verdict == "not implemented" and v.reason == "NotImplementedError"


def test_the_starters_raise_of_a_string_is_not_implemented() -> None:
    # The starter's TODOs raise a str: Python reports a TypeError, quoting the source line.
    out = (case_header(0) + "Traceback (most recent call last):\n"
           '  File "minitorch/cuda_kernel_ops.py", line 415, in layernorm_fw\n'
           '    raise("Not implemented")\nTypeError: exceptions must derive from BaseException\n')
    v = parse_harness_output(out, 1)
    assert v.verdict == "not implemented"
    assert v.reason == "TypeError: exceptions must derive from BaseException"


def test_timeout_is_a_crash_with_the_passes_so_far() -> None:
    v = parse_harness_output(passed_case(0, 1, 9) + passed_case(1, 1, 9) + case_header(2), None,
                             timed_out=True, timeout_s=300)
    assert v.verdict == "crash" and v.timed_out and v.passes == 2
    assert v.reason == "timed out after 300 s (2/5 passed)"


def test_timeout_after_five_passes_is_not_a_pass() -> None:
    v = parse_harness_output(five_passes(), None, timed_out=True, timeout_s=10)
    assert v.verdict == "crash" and v.reason.startswith("timed out after 10 s")


def test_exit_zero_with_too_few_passes_is_a_crash() -> None:
    v = parse_harness_output(passed_case(0, 1, 2) + passed_case(1, 1, 2) + case_header(2), 0)
    assert v.verdict == "crash" and "2/5 passed" in v.reason


def test_a_signal_is_named() -> None:
    v = parse_harness_output(case_header(0) + "Run baseline...\n", -11)
    assert v.verdict == "crash" and v.reason.startswith("killed by signal 11 (0/5 passed)")


def test_expected_cases_read_from_the_course_test() -> None:
    src = "@kt.case(atol=1e-3, rtol=1e-3, ntest=7)\ndef test_launch_attn_softmax():\n  pass\n"
    assert expected_cases(src) == 7
    assert expected_cases("def f(): pass\n") == DEFAULT_CASES
    v = parse_harness_output("".join(passed_case(i, 1, 2) for i in range(5)), 0, expected=7)
    assert v.verdict == "crash" and "5/7" in v.reason


def test_the_official_tests_declare_five_cases_when_the_corpus_is_here() -> None:
    official = ROOT / ".corpus" / "official" / "kernel_tests"
    if not official.is_dir():
        pytest.skip("no .corpus/official here")
    for test in COURSE_TESTS:
        assert expected_cases((official / f"{test}.py").read_text()) == 5


def test_build_failures_block_only_the_tests_needing_them() -> None:
    failed = {"layernorm_kernel": "src/layernorm_kernel.cu(12): error: expected a ;"}
    assert build_failed("test_softmax_fw", failed) is None
    blocked = build_failed("test_layernorm_bw", failed)
    assert blocked is not None and blocked.verdict == "build failed" and "layernorm_kernel.so" in blocked.reason
    for test in COURSE_TESTS:  # combine.so is needed by all
        assert build_failed(test, {"combine": "missing kernel source: src/combine.cu"}) is not None


def test_a_crash_loading_a_library_that_failed_to_build_is_blamed_on_the_build() -> None:
    out = ("Traceback (most recent call last):\n  File \"minitorch/cuda_kernel_ops.py\", line 28\n"
           "OSError: minitorch/cuda_kernels/layernorm_kernel.so: cannot open shared object file\n")
    v = parse_harness_output(out, 1)
    failed = {"layernorm_kernel": "error: x"}
    assert blame_build(v, out, failed).verdict == "build failed"
    other = parse_harness_output("Traceback (most recent call last):\nValueError: no\n", 1)
    assert blame_build(other, "ValueError: no", failed).verdict == "crash"


# --------------------------------------------------------------------------- agreement and table


def kg(status: str, **extra: object) -> dict:
    return {"status": status, "points": 20.0 if status == "passed" else 0.0, "max_points": 20.0, **extra}


@pytest.mark.parametrize(("course", "grade", "expected"), [
    ("pass", kg("passed"), "agree (both pass)"),
    ("fail", kg("failed"), "agree (both fail)"),
    ("not implemented", kg("failed"), "agree (both fail)"),
    ("crash", kg("crashed"), "agree (both fail)"),
    ("build failed", kg("not_run"), "agree (both fail)"),
    ("pass", kg("failed"), "DISAGREE (course pass, kernelgrade fail)"),
    ("fail", kg("passed"), "DISAGREE (course fail, kernelgrade pass)"),
    ("crash", kg("passed"), "DISAGREE (course fail, kernelgrade pass)"),
    ("pass", None, "no grade"),
    ("fail", kg("not_run", graded=False), "no grade"),
    ("not run", kg("passed"), "no course run"),
])
def test_agreement(course: str, grade: dict | None, expected: str) -> None:
    assert report.agreement("1.2", CourseVerdict(course), grade) == expected


def test_problem_3_has_no_course_test() -> None:
    assert report.agreement("3", None, kg("passed")) == "course n/a"
    assert report.agreement("1.1", None, kg("passed")) == "no course run"


def results_fixture() -> dict:
    passed = parse_harness_output(five_passes(), 0).to_dict()
    failing = parse_harness_output(
        case_header(0) + "Run custom...\nCompare the results of custom and baseline...\n"
        "torch.allclose failed, use numpy.allclose to log detail.\n", 0).to_dict()
    return {
        "meta": {"mode": "both"},
        "harness": {"alice": {"tests": {"test_softmax_fw": passed, "test_softmax_bw": passed,
                                        "test_layernorm_fw": passed, "test_layernorm_bw": failing},
                              "builds": {"combine": {"ok": True, "seconds": 9.5, "first_error": ""}}},
                    "bob": {"tests": {}, "builds": {}, "error": "cannot unpack: the zip is empty"}},
        "grader": {"alice": {"problems": {
            "1.1": kg("passed", speedup_student="9.1x [8.9, 9.3]", speedup_trusted="8.7x [8.5, 8.9]"),
            "1.2": kg("failed", first_failure="failed case sbw-1: max error 0.5 | bad"),
            "2.1": kg("passed"), "2.2": kg("failed"), "3": kg("passed")}}},
    }


def test_table_rows_one_per_submission_and_problem() -> None:
    rows = report.table_rows(results_fixture())
    alice = [r for r in rows if r["submission"] == "alice"]
    assert [r["problem"] for r in alice] == ["1.1", "1.2", "2.1", "2.2", "3"]
    by = {r["problem"]: r for r in alice}
    assert by["1.1"]["course"] == "pass 5/5" and by["1.1"]["agreement"] == "agree (both pass)"
    assert by["1.1"]["course_speedup"].startswith("10.67x") and by["1.1"]["points"] == "20/20"
    assert by["1.1"]["kg_speedup"] == "9.1x [8.9, 9.3] own; 8.7x [8.5, 8.9] ref"
    assert by["1.2"]["agreement"].startswith("DISAGREE") and by["1.2"]["kernelgrade"].startswith("fail: failed case sbw-1")
    assert by["2.2"]["course"].startswith("fail: torch.allclose failed in case 1")
    assert by["2.2"]["agreement"] == "agree (both fail)"
    assert by["3"]["course"] == "n/a (no course test)" and by["3"]["agreement"] == "course n/a"
    bob = [r for r in rows if r["submission"] == "bob"]
    assert len(bob) == 4 and all(r["course"].startswith("not run: cannot unpack") for r in bob)
    assert all(r["agreement"] == "no course run" for r in bob)
    assert report.summary_counts(rows) == {"agree": 3, "disagree": 1, "not compared": 5}


def test_render_text_and_markdown() -> None:
    rows = report.table_rows(results_fixture())
    text = report.render_text(rows, width=30)
    lines = text.splitlines()
    assert lines[0].startswith("submission  problem  course harness")
    assert len(lines) == 2 + len(rows)
    assert all(len(cell) <= 30 for line in lines[2:] for cell in line.split("  ") if cell)
    md = report.render_markdown(rows, ["### Title", "Hardware: x"])
    md_lines = md.splitlines()
    assert md_lines[:2] == ["### Title", "Hardware: x"]
    assert md_lines[3].startswith("| submission | problem | course harness |")
    assert md_lines[4] == "|" + " --- |" * len(report.COLUMNS)
    assert len(md_lines) == 5 + len(rows)
    assert "max error 0.5 \\| bad" in md  # a pipe in a cell cannot break the table
    assert all(len(re.findall(r"(?<!\\)\|", line)) == len(report.COLUMNS) + 1 for line in md_lines[3:])


def test_merge_keeps_both_halves_and_both_metas() -> None:
    full = results_fixture()
    harness = {"meta": {"mode": "harness"}, "harness": full["harness"], "grader": {}}
    grader = {"meta": {"mode": "grader"}, "harness": {}, "grader": full["grader"]}
    merged = report.merge_results([harness, grader])
    assert [m["mode"] for m in merged["meta"]] == ["harness", "grader"]
    assert report.table_rows(merged) == report.table_rows(full)


def test_merge_combines_grades_of_different_problems() -> None:
    kernels = {"grader": {"bob": {"state": "scored", "problems": {"1.1": {"points": 14}, "2.1": {"points": 3}}}}}
    problem3 = {"grader": {"bob": {"state": "scored", "problems": {"3": {"points": 20}}}}}
    regrade = {"grader": {"bob": {"state": "scored", "problems": {"2.1": {"points": 15}}}}}
    merged = report.merge_results([kernels, problem3, regrade])
    assert merged["grader"]["bob"]["problems"] == {"1.1": {"points": 14}, "2.1": {"points": 15}, "3": {"points": 20}}


def test_render_mode_merges_files_and_writes_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    full = results_fixture()
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"meta": {"mode": "harness", "gpu": "NVIDIA H200", "jobs": 8, "timeout_s": 300.0,
                                      "arch": "-arch=sm_90", "command": "python3 bench/fidelity.py --harness-only"},
                             "harness": full["harness"], "grader": {}}))
    b.write_text(json.dumps({"meta": {"mode": "grader", "problems": ["1.1"], "settings": "s",
                                      "command": "python3 bench/fidelity.py --grader-only"},
                             "harness": {}, "grader": full["grader"]}))
    assert fidelity.main(["--render", str(a), str(b), "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "fidelity.md").read_text()
    assert "NVIDIA H200" in md and "`python3 bench/fidelity.py --grader-only`" in md
    assert "| alice | 1.2 |" in md and "Agreement: 3 agree, 1 disagree, 5 not compared." in md
    assert "- alice (folder ?): combine ok (9.5 s)" in md
    assert "DISAGREE" in capsys.readouterr().out
    assert json.loads((tmp_path / "out" / "fidelity.json").read_text())["grader"]["alice"]


# --------------------------------------------------------------------------- the harness tree


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_overlay_takes_src_and_minitorch_from_the_submission_and_the_rest_from_the_starter(tmp_path: Path) -> None:
    official, sub = tmp_path / "official", tmp_path / "sub"
    write(official / "src" / "softmax_kernel.cu", "starter softmax")
    write(official / "src" / "starter_only.cu", "starter only")
    write(official / "minitorch" / "cuda_kernel_ops.py", "starter ops")
    write(official / "kernel_tests" / "test_softmax_fw.py", "official test")
    write(official / "test_utils.py", "official utils")
    write(official / "compile_cuda.sh", "nvcc ...")
    write(sub / "src" / "softmax_kernel.cu", "student softmax")
    write(sub / "src" / "combine.cu", "student combine")
    write(sub / "minitorch" / "cuda_kernel_ops.py", "student ops")
    write(sub / "minitorch" / "cuda_kernels" / "combine.so", "prebuilt")
    write(sub / "minitorch" / "__pycache__" / "x.cpython-312.pyc", "bytecode")
    write(sub / "kernel_tests" / "test_softmax_fw.py", "student's edited test")
    write(sub / "test_utils.py", "student's utils")
    write(sub / "extra.py", "student extra")

    dest = tmp_path / "tree"
    assert fidelity_harness.overlay_tree(official, sub, dest) == ["src", "minitorch"]
    assert (dest / "src" / "softmax_kernel.cu").read_text() == "student softmax"
    assert (dest / "src" / "combine.cu").read_text() == "student combine"
    assert not (dest / "src" / "starter_only.cu").exists()  # src/ replaced whole
    assert (dest / "minitorch" / "cuda_kernel_ops.py").read_text() == "student ops"
    assert not (dest / "minitorch" / "cuda_kernels" / "combine.so").exists()  # rebuilt, never taken
    assert not (dest / "minitorch" / "__pycache__").exists()
    assert (dest / "kernel_tests" / "test_softmax_fw.py").read_text() == "official test"
    assert (dest / "test_utils.py").read_text() == "official utils"
    assert (dest / "compile_cuda.sh").read_text() == "nvcc ..."
    assert not (dest / "extra.py").exists()
    assert (official / "src" / "starter_only.cu").exists()  # the starter itself untouched


def test_overlay_keeps_the_starters_folder_the_submission_lacks(tmp_path: Path) -> None:
    write(tmp_path / "official" / "minitorch" / "a.py", "starter")
    write(tmp_path / "official" / "src" / "a.cu", "starter")
    write(tmp_path / "sub" / "src" / "a.cu", "student")
    assert fidelity_harness.overlay_tree(tmp_path / "official", tmp_path / "sub", tmp_path / "t") == ["src"]
    assert (tmp_path / "t" / "minitorch" / "a.py").read_text() == "starter"


def make_zip(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


def test_submission_root_found_as_the_grader_finds_it(tmp_path: Path) -> None:
    rubric = load_rubric("hw4")
    complete = make_zip(tmp_path / "a.zip", {f"llmsys_hw4/{f}": "x" for f in rubric.required_files})
    unpack_zip(complete, tmp_path / "a", LIMITS)
    assert fidelity_harness.submission_root(tmp_path / "a", rubric) == tmp_path / "a" / "llmsys_hw4"
    # The untouched starter has no src/combine.cu: found by its softmax source alone.
    starter = make_zip(tmp_path / "b.zip", {"llmsys_hw4/src/softmax_kernel.cu": "x",
                                             "llmsys_hw4/src/layernorm_kernel.cu": "x"})
    unpack_zip(starter, tmp_path / "b", LIMITS)
    assert fidelity_harness.submission_root(tmp_path / "b", rubric) == tmp_path / "b" / "llmsys_hw4"


def test_prepare_records_a_missing_combine_as_a_failed_build(tmp_path: Path) -> None:
    rubric = load_rubric("hw4")
    write(tmp_path / "official" / "kernel_tests" / "test_softmax_fw.py", "official")
    archive = make_zip(tmp_path / "s.zip", {"hw/src/softmax_kernel.cu": "x", "hw/minitorch/__init__.py": ""})
    toolchain = Toolchain(nvcc=str(write(tmp_path / "nvcc", "#!/bin/sh\necho 'release 13.0'\nexit 1\n")),
                          flags=())
    os.chmod(tmp_path / "nvcc", 0o755)
    record = fidelity_harness.prepare_submission(archive, tmp_path / "official", tmp_path / "work", rubric,
                                                 toolchain, LIMITS, tmp_path / "logs")
    assert record["error"] is None and record["root"] == "hw" and record["taken"] == ["src", "minitorch"]
    assert record["builds"]["combine"] == {"ok": False, "seconds": 0.0, "first_error": "missing kernel source: src/combine.cu"}
    assert not record["builds"]["softmax_kernel"]["ok"]  # the stand-in nvcc fails every build
    assert (tmp_path / "logs" / "s" / "build-combine.log").is_file()
    assert (Path(record["tree"]) / "kernel_tests" / "test_softmax_fw.py").read_text() == "official"


# --------------------------------------------------------------------------- running one course test


def fake_test(tree: Path, body: str) -> Path:
    return write(tree / "kernel_tests" / "test_softmax_fw.py", textwrap.dedent(body))


def test_run_course_test_reads_the_printed_passes(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    write(tree / "test_utils.py", "MARK = 'utils from the tree root'\n")
    fake_test(tree, f"""
        import os, sys
        from test_utils import MARK  # the tree root is on PYTHONPATH
        assert os.getcwd() == {str(tree)!r}
        sys.stdout.write({five_passes()!r})
        """)
    v, out = fidelity_harness.run_course_test(tree, "test_softmax_fw", sys.executable, 60, 5, tmp_path / "l.log")
    assert v.verdict == "pass", out
    assert v.passes == 5 and v.seconds is not None


def test_run_course_test_experiments_reach_the_test(tmp_path: Path) -> None:
    """--harness-env reaches the test's environment; --harness-gc off runs it as its own script
    (its folder first on sys.path, __name__ == '__main__') with the collector off."""
    tree = tmp_path / "tree"
    write(tree / "kernel_tests" / "helper_here.py", "OK = 1\n")
    fake_test(tree, f"""
        import gc, os, sys
        import helper_here  # the script's own folder is on sys.path, as for `python3 kernel_tests/x.py`
        assert __name__ == "__main__"
        assert os.environ["KG_PROBE"] == "42"
        assert not gc.isenabled()
        sys.stdout.write({five_passes()!r})
        """)
    v, out = fidelity_harness.run_course_test(tree, "test_softmax_fw", sys.executable, 60, 5, tmp_path / "l.log",
                                              {"KG_PROBE": "42"}, gc_off=True)
    assert v.verdict == "pass", out
    v, _ = fidelity_harness.run_course_test(tree, "test_softmax_fw", sys.executable, 60, 5, tmp_path / "m.log",
                                            {"KG_PROBE": "42"})
    assert v.verdict != "pass"  # the collector is on by default: the assertion fails


def test_run_course_test_allclose_failure_exits_zero_and_fails(tmp_path: Path) -> None:
    fake_test(tmp_path / "t", """
        print(">>>>>>>>>>>>>>>>>>>>>>test_launch_attn_softmax, ntest [0], dtype [torch.float32]:")
        print("Compare the results of custom and baseline...")
        print("torch.allclose failed, use numpy.allclose to log detail.")
        exit(0)
        """)
    v, _ = fidelity_harness.run_course_test(tmp_path / "t", "test_softmax_fw", sys.executable, 60, 5,
                                            tmp_path / "l.log")
    assert v.returncode == 0 and v.verdict == "fail"


def test_run_course_test_times_out_and_kills_it(tmp_path: Path) -> None:
    fake_test(tmp_path / "t", """
        import subprocess, sys, time
        print(">>>>>>>>>>>>>>>>>>>>>>test_launch_attn_softmax, ntest [0], dtype [torch.float32]:", flush=True)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open("child.pid", "w").write(str(child.pid))
        time.sleep(60)
        """)
    v, out = fidelity_harness.run_course_test(tmp_path / "t", "test_softmax_fw", sys.executable, 2, 5,
                                              tmp_path / "l.log")
    assert v.verdict == "crash" and v.timed_out and v.reason == "timed out after 2 s (0/5 passed)", out
    assert v.seconds is not None and v.seconds < 30
    pid = int((tmp_path / "t" / "child.pid").read_text())
    with pytest.raises(ProcessLookupError):  # its whole process group was killed
        for _ in range(50):
            os.kill(pid, 0)
            __import__("time").sleep(0.1)


def test_run_course_test_without_torch_is_a_crash_with_the_reason(tmp_path: Path) -> None:
    fake_test(tmp_path / "t", "import no_such_module_for_fidelity\n")
    v, _ = fidelity_harness.run_course_test(tmp_path / "t", "test_softmax_fw", sys.executable, 60, 5,
                                            tmp_path / "l.log")
    assert v.verdict == "crash" and v.returncode == 1
    assert v.reason == "ModuleNotFoundError: No module named 'no_such_module_for_fidelity' (0/5 passed)"


def test_results_are_written_after_every_update(tmp_path: Path) -> None:
    store = bench_common.ResultStore(tmp_path / "out" / "fidelity.json", {"mode": "harness"})
    assert json.loads(store.path.read_text())["harness"] == {}
    store.update(lambda d: d["harness"].__setitem__("alice", {"tests": {}}))
    assert json.loads(store.path.read_text())["harness"] == {"alice": {"tests": {}}}


# --------------------------------------------------------------------------- production configuration


def test_the_source_fallbacks_build_the_same_configs_as_production(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """On the GPU machine (no pydantic, no database packages) the configs come from the
    settings' source and grader/runs/engine_config.py's own functions; here both paths exist: same result."""
    pytest.importorskip("pydantic_settings")
    from grader.runs.engine_config import gpu_stage_config, pipeline_config
    from grader.settings import Settings

    monkeypatch.setenv("KG_BUILD_JOBS", "5")
    monkeypatch.setenv("KG_SANDBOX_WALL_S", "123.5")
    monkeypatch.setenv("KG_TIMING_CPUS", "off")
    monkeypatch.setenv("KG_SANDBOX_ISOLATE_NETWORK", "false")
    monkeypatch.setenv("KG_BUILD_CPU_S", "77")  # a group's field over its default in the call
    monkeypatch.setenv("KG_BUILD_FILE_TIMEOUT_S", "12.5")
    monkeypatch.setenv("KG_SANDBOX_MAX_PROCESSES", "99")
    monkeypatch.setenv("KG_SANDBOX_BACKEND", "docker")
    monkeypatch.setenv("KG_SANDBOX_DOCKER_GPU", "GPU-7")
    monkeypatch.setenv("KG_UNPACK_MAX_FILES", "321")
    monkeypatch.setenv("KG_SMTP_HOST", "mail.example.edu")
    monkeypatch.setenv("KG_SMTP_FROM", "grader@example.edu")  # the field is from_, read by its alias
    rubric = load_rubric("hw4")
    settings = Settings(data_dir=tmp_path)
    shim = production_config.settings_from_source(ROOT / "grader" / "settings.py", tmp_path, dict(os.environ))
    found = production_config.functions_from_source(ROOT / "grader" / "runs" / "engine_config.py",
                                                    ("pipeline_config", "build_policy", "gpu_stage_config"))
    assert found["pipeline_config"](shim, rubric) == pipeline_config(settings, rubric)
    assert found["gpu_stage_config"](shim) == gpu_stage_config(settings)
    assert found["pipeline_config"](shim, rubric).build_jobs == 5
    assert found["pipeline_config"](shim, rubric).limits.max_files == 321
    assert vars(shim.smtp) == settings.smtp.model_dump() and shim.smtp.from_ == "grader@example.edu"
    assert found["gpu_stage_config"](shim).limits.wall_s == 123.5
    assert found["pipeline_config"](shim, rubric).build_limits.cpu_s == 77
    assert found["pipeline_config"](shim, rubric).build_limits.wall_s == 12.5
    assert found["pipeline_config"](shim, rubric).build_policy.docker.image == "kernelgrade-worker"
    stage = found["gpu_stage_config"](shim)
    assert stage.limits.max_processes == 99 and stage.limits.memory_bytes == 32 << 30
    assert stage.policy.docker.gpu == "GPU-7" and not stage.policy.isolate_network


def test_production_configs_restrict_problems_and_read_an_empty_sandbox_user_as_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KG_SANDBOX_USER", "")
    config, stage, source = production_config.production_configs(load_rubric("hw4"), tmp_path, ("1.1", "2.2"))
    assert stage.problems == ("1.1", "2.2")
    assert stage.policy.user is None and config.build_policy.user is None
    assert config.toolchain.flags[-1] == "-arch=sm_90" and "-fPIC" in config.toolchain.flags
    assert config.build_cache_dir == tmp_path / "build-cache"
    assert replace(stage, problems=("1.1", "1.2", "2.1", "2.2", "3")).timing == stage.timing
    assert "Settings" in source or "settings.py" in source


# --------------------------------------------------------------------------- the grader half


FAKE_NVCC = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "fake nvcc, release 0.0, V0.0"; exit 0; fi
out=""; prev=""
for arg in "$@"; do
  if [ "$prev" = "-o" ]; then out="$arg"; fi
  prev="$arg"
done
: > "$out"
"""


@pytest.fixture
def grading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A zip of our reference kit, a stand-in nvcc the sandbox user can run, a work folder it
    can reach, and the production configs (problems 1.1 and 2.2) that use them."""
    from worker.starter_kit import zip_tree

    visible = Path(tempfile.mkdtemp(prefix="kg-fidelity-test-", dir="/var/lib" if os.geteuid() == 0 else None))
    visible.chmod(0o755)
    # In a folder of its own: a build's sandbox never binds a folder that holds the job's (work/).
    nvcc = write(visible / "bin" / "nvcc", FAKE_NVCC)
    nvcc.chmod(0o755)
    nvcc.parent.chmod(0o755)
    monkeypatch.setenv("KG_NVCC", str(nvcc))
    rubric = load_rubric("hw4")
    work = visible / "work"
    work.mkdir()
    work.chmod(0o711)
    config, stage, _ = production_config.production_configs(rubric, work / "data", ("1.1", "2.2"))
    store = bench_common.ResultStore(tmp_path / "out" / "fidelity.json", {"mode": "grader"})
    yield {"archive": zip_tree(rubric.starter_dir, tmp_path / "kit.zip"), "rubric": rubric, "work": work,
           "config": config, "stage": stage, "store": store}
    shutil.rmtree(visible, ignore_errors=True)


def grade_kit(g: dict) -> dict:
    fidelity.run_grader([g["archive"]], g["work"], g["store"], fidelity.parse_args([]), g["rubric"], g["config"],
                        g["stage"], None)
    return json.loads(g["store"].path.read_text())


def test_run_grader_grades_through_the_pipeline_and_keeps_the_requested_problems(
        grading: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """The production pipeline (unpack, stage, sandboxed build with a stand-in nvcc) with the
    GPU stage's measuring replaced: what reaches the record, and which problems are measured."""
    from rubrics.hw4 import grade
    from worker.measurements import CaseOutcome, ProblemMeasurement
    from worker.timing import RatioSummary

    asked: list[tuple[str, ...]] = []

    def fake_stage(rubric, staged, reference, work_dir, config, progress=None):  # type: ignore[no-untyped-def]
        asked.append(config.problems)
        ok = RatioSummary(1.0, 0.1, 10.0, 9.5, 10.5, 12)
        return [ProblemMeasurement("1.1", routes={"abi": [CaseOutcome("sfw-1", (2, 8, 4, 4), True)]},
                                   figures={"student": ok, "trusted": ok}),
                ProblemMeasurement("2.2", routes={"abi": [CaseOutcome("lbw-1", (4, 32), False, 0.5, (1, 2))]})]

    monkeypatch.setattr(grade, "run_gpu_stage", fake_stage)
    monkeypatch.setattr(fidelity, "gpu_present", lambda: True)
    results = grade_kit(grading)
    record = results["grader"]["kit"]
    assert record["error"] is None and record["state"] == "scored", record
    assert asked == [("1.1", "2.2")]
    assert set(record["problems"]) == {"1.1", "2.2"}  # the other problems were not asked for
    one, two = record["problems"]["1.1"], record["problems"]["2.2"]
    assert one["graded"] and one["status"] == "passed" and one["correct"] and one["speedup_student"] == "10x [9.5, 10.5]"
    assert two["status"] == "failed" and not two["correct"] and two["points"] == 0
    assert two["first_failure"].startswith("failed case lbw-1: shape [4, 32], max error 0.5 at [1, 2]")
    rows = {r["problem"]: r for r in report.table_rows(results)}
    assert rows["1.1"]["kernelgrade"] == "pass" and rows["2.2"]["kernelgrade"].startswith("fail: failed case lbw-1")


def test_run_grader_without_a_gpu_ends_at_the_build_and_gives_no_verdict(
        grading: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fidelity, "gpu_present", lambda: False)
    results = grade_kit(grading)
    record = results["grader"]["kit"]
    assert record["state"] == "built" and set(record["problems"]) == {"1.1", "2.2"}
    assert all(p["graded"] is False for p in record["problems"].values())
    rows = report.table_rows(results)
    for pid, p in record["problems"].items():  # a course pass beside it is not a disagreement
        assert report.agreement(pid, CourseVerdict("pass"), p) == "no grade"
    assert {r["kernelgrade"] for r in rows if r["problem"] in ("1.1", "2.2")} == {"not graded: no GPU stage on this worker"}
    assert {r["points"] for r in rows if r["problem"] in ("1.1", "2.2")} == {"-"}


def test_run_grader_past_its_budget_grades_nothing_and_gives_no_verdict(grading: dict) -> None:
    fidelity.run_grader([grading["archive"]], grading["work"], grading["store"], fidelity.parse_args([]),
                        grading["rubric"], grading["config"], grading["stage"], deadline=time.monotonic())
    results = json.loads(grading["store"].path.read_text())
    assert results["grader"]["kit"] == {"problems": {}, "error": "skipped: --budget used up"}
    rows = report.table_rows(results)
    assert rows and all(r["kernelgrade"] == "not graded: skipped: --budget used up" for r in rows)
    course_pass = CourseVerdict("pass")
    assert report.agreement("1.1", course_pass, {"status": "error", "graded": False}) == "no grade"


# --------------------------------------------------------------------------- the harness half end to end

COURSE_STANDINS = {
    "test_softmax_fw": f"import sys\nsys.stdout.write({five_passes()!r})\n",
    "test_softmax_bw": ("print('>>>>>>>>>>>>>>>>>>>>>>test_launch_attn_softmax_bw, ntest [0], dtype [torch.float32]:')\n"
                        "print('Compare the results of custom and baseline...')\n"
                        "print('torch.allclose failed, use numpy.allclose to log detail.')\nexit(0)\n"),
    "test_layernorm_fw": "import time\nprint('>>>>>>>>>>>>>>>>>>>>>>x, ntest [0], dtype [f]:', flush=True)\ntime.sleep(60)\n",
    "test_layernorm_bw": "import minitorch\nminitorch.layernorm_bw()\n",
}


def harness_setup(tmp_path: Path) -> tuple[Path, Path]:
    """An official tree whose four course tests are stand-ins (each a different ending), a
    stand-in nvcc, and two zips: one complete, one without src/combine.cu."""
    official = tmp_path / "official"
    for test, body in COURSE_STANDINS.items():
        write(official / "kernel_tests" / f"{test}.py", body)
    write(official / "test_utils.py", "")
    write(official / "minitorch" / "__init__.py", "raise ImportError('the starter minitorch must not be used')\n")
    student_minitorch = "def layernorm_bw():\n    raise NotImplementedError('TODO 2.2')\n"
    zips = tmp_path / "zips"
    zips.mkdir()
    make_zip(zips / "alice.zip", {"llmsys_hw4/src/softmax_kernel.cu": "", "llmsys_hw4/src/layernorm_kernel.cu": "",
                                  "llmsys_hw4/src/combine.cu": "", "llmsys_hw4/minitorch/__init__.py": student_minitorch})
    make_zip(zips / "bob.zip", {"llmsys_hw4/src/softmax_kernel.cu": "", "llmsys_hw4/src/layernorm_kernel.cu": "",
                                "llmsys_hw4/minitorch/__init__.py": student_minitorch})
    nvcc = write(tmp_path / "bin" / "nvcc", FAKE_NVCC)
    nvcc.chmod(0o755)
    return official, zips


def run_harness_here(tmp_path: Path, official: Path, zips: Path, *options: str, deadline: float | None = None) -> dict:
    args = fidelity.parse_args(["--nvcc", str(tmp_path / "bin" / "nvcc"), "--python", sys.executable,
                                "--out", str(tmp_path / "out"), "--jobs", "4", *options])
    args.out = args.out.absolute()
    store = bench_common.ResultStore(args.out / "fidelity.json", {"mode": "harness"})
    fidelity_harness.run_harness(sorted(zips.glob("*.zip")), official, tmp_path / "work", store, args,
                                 load_rubric("hw4"), LIMITS, deadline)
    return json.loads(store.path.read_text())


def test_run_harness_end_to_end_on_stand_ins(tmp_path: Path) -> None:
    official, zips = harness_setup(tmp_path)
    results = run_harness_here(tmp_path, official, zips, "--timeout", "3")
    alice, bob = results["harness"]["alice"], results["harness"]["bob"]
    assert all(b["ok"] for b in alice["builds"].values())
    verdicts = {t: v["verdict"] for t, v in alice["tests"].items()}
    assert verdicts == {"test_softmax_fw": "pass", "test_softmax_bw": "fail",
                        "test_layernorm_fw": "crash", "test_layernorm_bw": "not implemented"}
    assert alice["tests"]["test_layernorm_fw"]["reason"] == "timed out after 3 s (0/5 passed)"
    assert alice["tests"]["test_layernorm_bw"]["reason"] == "NotImplementedError: TODO 2.2"
    assert not bob["builds"]["combine"]["ok"]
    assert {v["verdict"] for v in bob["tests"].values()} == {"build failed"}
    assert bob["tests"]["test_softmax_fw"]["reason"] == "combine.so: missing kernel source: src/combine.cu"
    logs = tmp_path / "out" / "fidelity-logs"
    assert "Test passed" in (logs / "alice" / "test_softmax_fw.log").read_text()
    assert (logs / "bob" / "build-combine.log").is_file()
    rows = {(r["submission"], r["problem"]): r for r in report.table_rows(results)}
    assert rows[("alice", "1.1")]["course"] == "pass 5/5" and rows[("alice", "1.1")]["agreement"] == "no grade"


def test_run_harness_cuts_the_last_tests_at_the_budget(tmp_path: Path) -> None:
    official, zips = harness_setup(tmp_path)
    (zips / "bob.zip").unlink()
    fidelity_min = fidelity_harness.MIN_TEST_S
    try:
        fidelity_harness.MIN_TEST_S = 1.0
        results = run_harness_here(tmp_path, official, zips, "--timeout", "300", "--only", "alice",
                                   deadline=time.monotonic() + 8)
    finally:
        fidelity_harness.MIN_TEST_S = fidelity_min
    slow = results["harness"]["alice"]["tests"]["test_layernorm_fw"]
    assert slow["verdict"] == "not run" and slow["reason"].startswith("cut at ") and "by --budget" in slow["reason"]
    assert results["harness"]["alice"]["tests"]["test_softmax_fw"]["verdict"] == "pass"


# --------------------------------------------------------------------------- speed fidelity

SOFTMAX_FW_SHAPE = ("(batch_size, nhead, from_len, to_len, is_dec_self_attn, is_dec_self_attn_infer): "
                    "(1, 8, 115, 282, False, False)\n")


def test_shape_lines_give_their_leading_integers_in_order() -> None:
    out = (">>>>>>>>>>>>>>>>>>>>>>test_launch_attn_softmax, ntest [0], dtype [torch.float32]:\n" + SOFTMAX_FW_SHAPE
           + "Run baseline...\n(batch_size, nhead, from_len, to_len): (3, 8, 40, 41)\n"
           "(batch_token_num, hidden_dim): (115, 32)\nnot a shape: (1, 2)\n(a, b): (x, 2)\n")
    assert parse_shapes(out) == [[1, 8, 115, 282], [3, 8, 40, 41], [115, 32], []]
    assert parse_harness_output(five_passes(), 0).shapes == [[2, 8]] * 5
    old = {k: v for k, v in parse_harness_output(five_passes(), 0).to_dict().items()
           if k not in ("shapes", "repeat_speedups", "runs")}
    v = CourseVerdict.from_dict(old)  # a fidelity.json from before --repeat
    assert v.shapes == [] and v.repeat_speedups == [] and v.runs == 0


def test_course_speed_is_the_mean_over_runs_of_each_runs_mean() -> None:
    v = CourseVerdict("pass", speedups=[1.0, 3.0],
                      repeat_speedups=[[1.0, 3.0], [3.0, 5.0], [2.0, float("nan")]], runs=4)
    speed = course_speed(v)
    assert speed is not None and speed.runs == 2  # the run with a NaN is left out
    assert speed.run_means == [2.0, 4.0] and speed.mean == 3.0
    assert speed.per_case == [2.0, 4.0] and (speed.low, speed.high) == (2.0, 4.0)
    stalled = course_speed(CourseVerdict("pass", speedups=[10.0], repeat_speedups=[[10.0], [10.0], [40.0]]))
    assert stalled is not None and stalled.mean == 20.0 and stalled.robust == 10.0  # one stalled run moves the mean only
    old = course_speed(CourseVerdict("pass", speedups=[10.0, 12.0]))  # no repeat_speedups: one run
    assert old is not None and old.runs == 1 and old.mean == 11.0 and old.per_case == [10.0, 12.0]
    assert course_speed(CourseVerdict("fail", speedups=[10.0], repeat_speedups=[[10.0]])) is None
    assert course_speed(CourseVerdict("pass")) is None and course_speed(None) is None


def speed_results() -> dict:
    shapes = [list(s) for s in course_shapes("1.1")]
    course = CourseVerdict("pass", passes=5, speedups=[10.0] * 5, shapes=shapes, runs=2,
                           repeat_speedups=[[10.0, 10.0, 10.0, 10.0, 10.0], [12.0, 12.0, 12.0, 12.0, 12.0]])
    wrong_shapes = CourseVerdict("pass", passes=5, speedups=[4.0] * 5, shapes=[[1, 8, 2, 2]] * 5, runs=1,
                                 repeat_speedups=[[4.0] * 5])
    timing_shapes = [{"shape": list(s), "speedups": {"baseline": 9.0, "reference_ops": 10.0 + i, "kit": 8.0}}
                     for i, s in enumerate(course_shapes("1.1"))]
    return {
        "meta": {"mode": "both", "repeat": 2},
        "harness": {"alice": {"tests": {"test_softmax_fw": course.to_dict(), "test_softmax_bw": wrong_shapes.to_dict(),
                                        "test_layernorm_fw": course.to_dict()}}},
        "grader": {"alice": {"problems": {
            "1.1": kg("passed", scored_figure="reference_ops", scored_speedup=12.0, speedup_student="11x [10, 12]",
                      speedup_reference_ops="12x [11, 13]", speedup_trusted="9x [8, 10]", flags=["slow CPU share"],
                      timing={"timing_shapes": timing_shapes, "seconds": {"compile": 1.5, "time": 20.0}}),
            "1.2": kg("passed", scored_figure="student", scored_speedup=5.0),
            "2.1": kg("passed"),  # no scored figure: no row
            "3": kg("passed", scored_speedup=2.0)}}},
    }


def test_speed_rows_only_where_both_sides_have_a_figure() -> None:
    rows = {r["problem"]: r for r in report.speed_rows(speed_results())}
    assert set(rows) == {"1.1", "1.2"}
    one = rows["1.1"]
    assert one["course_mean"] == "11.00x (2 runs, 10.00-12.00)"
    assert one["kg_scored"] == "12.00x (reference_ops)" and one["kg_own_ops"] == "11x [10, 12]"
    assert one["kg_our_ops"] == "12x [11, 13]" and one["kg_kit"] == "9x [8, 10]"
    assert one["ratio"] == "1.091" and one["within"] == "yes" and one["shapes"] == "yes"
    assert one["course_robust"] == "11.00x (1.091)"  # two runs: the median of each case is their mean
    two = rows["1.2"]
    assert two["ratio"] == "1.250" and two["within"] == "no" and two["shapes"] == "no" and two["kg_kit"] == "-"
    text = report.render_speed_text(list(rows.values()))
    assert text.splitlines()[0].startswith("submission  problem  course mean") and len(text.splitlines()) == 4
    md = report.render_speed_markdown(list(rows.values()))
    assert md.splitlines()[1] == "|" + " --- |" * len(report.SPEED_COLUMNS)


def test_shape_lines_and_flag_lines() -> None:
    results = speed_results()
    lines = report.shape_lines(results)
    first = course_shapes("1.1")[0]
    assert lines[0] == "- alice 1.1:" and len(lines) == 6
    assert lines[1] == f"  - case 1 course {first}: course 11.00x, kernelgrade 10.00x (reference_ops)"
    flags = report.flag_lines(results)
    assert "- alice 1.1: flags slow CPU share; timing seconds: compile 1.5 s, time 20 s" in flags
    assert "- alice 2.1: flags none; timing seconds: -" in flags


def test_flag_lines_say_where_a_timed_call_and_problem_3_spend_their_time() -> None:
    results = speed_results()
    problems = results["grader"]["alice"]["problems"]
    problems["1.1"].update(kernel_ms=0.008, bandwidth={"gb_s": 1583.0},
                           timing={"timing_shapes": [{"shape": [1, 8, 64, 64], "ms": {"custom": 1.0}},
                                                     {"shape": [1, 8, 430, 460], "ms": {"custom": 3.2}}]})
    problems["3"] = {"graded": True, "flags": [], "timing": {},
                     "step_memory": {"fused": {"host_peak_mib": 6059.0, "device_used_peak_mib": 1446.4,
                                               "host_first_last_mib": [5800.0, 6059.0]},
                                     "unfused": {"host_peak_mib": 6593.1, "device_used_peak_mib": 1444.4}},
                     "problem3_time": {"setup_s": 14.2, "elapsed_s": 117.0, "pairs": 3, "stop": "settled",
                                       "checked_step_s": {"unfused": 9.14, "fused": 8.2},
                                       "unfused_ms": [14100.0, 13900.4, 14000.0],
                                       "fused_ms": [11000.0, 10900.0, 11100.0]}}
    flags = report.flag_lines(results)
    kernel = next(line for line in flags if line.startswith("- alice 1.1:"))
    assert "largest shape [1, 8, 430, 460]: kernels 0.008 ms of a 3.2 ms timed call (0%), 1583 GB/s" in kernel
    three = next(line for line in flags if line.startswith("- alice 3:"))
    assert ("peak memory per step: fused host 6059 MiB (first step 5800 MiB, last 6059 MiB), device 1446 MiB; "
            "unfused host 6593 MiB, device 1444 MiB") in three
    assert three.endswith("; set-up 14 s, checked steps unfused 9.1 s fused 8.2 s, 3 timed pairs (settled) "
                          "unfused [14100, 13900, 14000] ms fused [11000, 10900, 11100] ms, the problem 117 s")
    del problems["3"]["problem3_time"]["unfused_ms"], problems["3"]["problem3_time"]["checked_step_s"]
    three = next(line for line in report.flag_lines(results) if line.startswith("- alice 3:"))
    assert three.endswith("; set-up 14 s, 3 timed pairs (settled) fused [11000, 10900, 11100] ms, the problem 117 s")


def test_render_writes_the_speed_table_and_old_results_still_render(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    new = tmp_path / "new.json"
    new.write_text(json.dumps(speed_results()))
    assert fidelity.main(["--render", str(new), "--out", str(tmp_path / "a")]) == 0
    md = (tmp_path / "a" / "fidelity.md").read_text()
    assert "Speed fidelity" in md and "| alice | 1.1 | 11.00x (2 runs, 10.00-12.00) |" in md
    assert "  - case 1 course" in md and "- alice 1.1: flags slow CPU share" in md
    old = results_fixture()  # as written before --repeat: no shapes, repeats or timing records
    for test in old["harness"]["alice"]["tests"].values():
        test.pop("shapes", None)
    old_json = tmp_path / "old.json"
    old_json.write_text(json.dumps(old))
    assert fidelity.main(["--render", str(old_json), "--out", str(tmp_path / "b")]) == 0
    assert "(no submission and problem with both figures)" in (tmp_path / "b" / "fidelity.md").read_text()


def test_run_harness_repeats_a_passing_test_and_keeps_only_passing_runs(tmp_path: Path) -> None:
    official, zips = harness_setup(tmp_path)
    (zips / "bob.zip").unlink()
    counter = tmp_path / "runs.txt"
    write(official / "kernel_tests" / "test_softmax_fw.py", textwrap.dedent(f"""
        import pathlib, sys
        p = pathlib.Path({str(counter)!r})
        n = int(p.read_text()) + 1 if p.exists() else 1
        p.write_text(str(n))
        if n == 2:
            print("torch.allclose failed, use numpy.allclose to log detail.")
        else:
            sys.stdout.write({five_passes()!r})
        """))
    results = run_harness_here(tmp_path, official, zips, "--timeout", "3", "--repeat", "3")
    tests = results["harness"]["alice"]["tests"]
    fw = tests["test_softmax_fw"]
    assert fw["verdict"] == "pass" and fw["runs"] == 3 and counter.read_text() == "3"
    assert len(fw["repeat_speedups"]) == 2 and fw["shapes"] == [[2, 8]] * 5  # run 2 failed: not kept
    assert tests["test_softmax_bw"]["runs"] == 1 and tests["test_softmax_bw"]["repeat_speedups"] == []
    assert results["meta"] == {"mode": "harness"}
    assert fidelity.parse_args([]).repeat == 5
