"""The student starter generator (worker/starter_kit.py) and the real starter of hw4.

CPU only. The nvcc checks skip (with the reason) only where nvcc is absent.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from worker.build import Toolchain, build_kernels, cuda_include_dirs
from worker.rubric import load_rubric
from worker.starter_kit import (
    MarkerError,
    find_regions,
    render_starter,
    starter_files,
    strip_solutions,
    write_starter_zip,
)

CHECK_ARCH = "-arch=sm_90"  # the H200's; compiling for it needs no GPU
# a solution marker line in any file kind (docs may mention the words in passing)
MARKER_LINE = re.compile(r"^[ \t]*(//|#)[ \t]*(BEGIN|END) SOLUTION", re.MULTILINE)


def _nvcc() -> str | None:
    for cand in (os.environ.get("KG_NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and Path(cand).is_file():
            return cand
    return None


# --------------------------------------------------------------------------- stripping units


def test_strip_python_region_becomes_raise_at_begin_indentation() -> None:
    src = textwrap.dedent(
        """\
        def f(x):
            y = x + 1
            # BEGIN SOLUTION: f body
            z = y * 2
            if z:
                return z
            # END SOLUTION
            return y
        """
    )
    out = strip_solutions(src, ".py")
    assert out == textwrap.dedent(
        """\
        def f(x):
            y = x + 1
            raise NotImplementedError("f body: your code here")
            return y
        """
    )
    compile(out, "<stripped>", "exec")


def test_strip_cuda_region_becomes_todo_and_keeps_the_rest() -> None:
    src = (
        "__global__ void k(float *x, int n) {\n"
        "  int i = threadIdx.x;\n"
        "  // BEGIN SOLUTION: Problem 1.1 reduce\n"
        "  if (i < n) {\n"
        "    x[i] *= 2.f;\n"
        "  }\n"
        "  // END SOLUTION\n"
        "}\n"
        "\t\t// BEGIN SOLUTION: tabs\n"
        "\t\tint unused = 0;\n"
        "\t\t// END SOLUTION\n"
    )
    out = strip_solutions(src, ".cu")
    assert out == (
        "__global__ void k(float *x, int n) {\n"
        "  int i = threadIdx.x;\n"
        "  // TODO(Problem 1.1 reduce): your code here\n"
        "}\n"
        "\t\t// TODO(tabs): your code here\n"
    )


@pytest.mark.parametrize("suffix", [".h", ".cuh", ".cpp"])
def test_strip_headers_use_cuda_style(suffix: str) -> None:
    src = "int a;\n// BEGIN SOLUTION: h\nint b;\n// END SOLUTION\n"
    assert strip_solutions(src, suffix) == "int a;\n// TODO(h): your code here\n"


def test_strip_keeps_crlf_and_a_missing_final_newline() -> None:
    src = "x = 1\r\n# BEGIN SOLUTION: crlf\r\ny = 2\r\n# END SOLUTION"
    assert strip_solutions(src, ".py") == 'x = 1\r\nraise NotImplementedError("crlf: your code here")'


def test_strip_several_regions_and_unmarked_text() -> None:
    src = "a\n# BEGIN SOLUTION: one\nb\n# END SOLUTION\nc\n    # BEGIN SOLUTION: two\n    d\n    # END SOLUTION\n"
    out = strip_solutions(src, ".py")
    assert out == (
        'a\nraise NotImplementedError("one: your code here")\nc\n'
        '    raise NotImplementedError("two: your code here")\n'
    )
    assert strip_solutions("no markers here\n", ".py") == "no markers here\n"
    assert [r.label for r in find_regions(src, ".py")] == ["one", "two"]


def test_other_file_kinds_are_left_alone() -> None:
    src = "# BEGIN SOLUTION: x\nsecret\n# END SOLUTION\n"
    assert strip_solutions(src, ".sh") == src
    assert strip_solutions(src, ".txt") == src


@pytest.mark.parametrize(
    ("src", "suffix", "line", "fragment"),
    [
        ("a\n# BEGIN SOLUTION: x\nb\n", ".py", 2, "never closed"),
        ("a\n# END SOLUTION\n", ".py", 2, "without a BEGIN"),
        ("# BEGIN SOLUTION: a\n# BEGIN SOLUTION: b\n# END SOLUTION\n# END SOLUTION\n", ".py", 2, "nested"),
        ("// BEGIN SOLUTION: a\nx;\n// END SOLUTION\n// END SOLUTION\n", ".cu", 4, "without a BEGIN"),
        ("// BEGIN SOLUTION\nx;\n// END SOLUTION\n", ".cu", 1, "label"),
        ("// BEGIN SOLUTION:   \nx;\n// END SOLUTION\n", ".cu", 1, "label"),
        ('# BEGIN SOLUTION: say "hi"\nx\n# END SOLUTION\n', ".py", 1, "quotes"),
        ("int a; // BEGIN SOLUTION: inline\n", ".cu", 1, "not a"),
        ("# BEGIN SOLUTION: wrong comment style\nx;\n# END SOLUTION\n", ".cu", 1, "not a"),
    ],
)
def test_malformed_markers_raise_with_file_and_line(src: str, suffix: str, line: int, fragment: str) -> None:
    with pytest.raises(MarkerError) as info:
        strip_solutions(src, suffix, filename="src/f" + suffix)
    message = str(info.value)
    assert f"src/f{suffix}:{line}:" in message
    assert fragment in message


# --------------------------------------------------------------------------- render / zip units


def _toy_reference(root: Path) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "minitorch" / "cuda_kernels").mkdir(parents=True)
    (root / "minitorch" / "__pycache__").mkdir()
    (root / "src" / "k.cu").write_text("// BEGIN SOLUTION: k\nint secret_cuda;\n// END SOLUTION\n")
    (root / "minitorch" / "__init__.py").write_text(
        "def f():\n    # BEGIN SOLUTION: f\n    return 'secret_py'\n    # END SOLUTION\n"
    )
    (root / "minitorch" / "cuda_kernels" / "k.so").write_bytes(b"\x7fELF")
    (root / "minitorch" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"junk")
    (root / "compile_cuda.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "compile_cuda.sh", 0o755)
    return root


def test_render_strips_copies_and_skips_build_junk(tmp_path: Path) -> None:
    ref = _toy_reference(tmp_path / "ref")
    dest = tmp_path / "out"
    render_starter(ref, dest)
    files = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert files == ["compile_cuda.sh", "minitorch/__init__.py", "src/k.cu"]
    assert "secret" not in (dest / "src/k.cu").read_text()
    assert "secret" not in (dest / "minitorch/__init__.py").read_text()
    assert os.stat(dest / "compile_cuda.sh").st_mode & 0o111
    with pytest.raises(FileExistsError):
        render_starter(ref, dest)  # never renders over an existing tree


def test_render_fails_before_writing_on_bad_markers(tmp_path: Path) -> None:
    ref = _toy_reference(tmp_path / "ref")
    (ref / "src" / "bad.cu").write_text("// BEGIN SOLUTION: open\n")
    with pytest.raises(MarkerError, match=r"src/bad\.cu:1"):
        render_starter(ref, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- the real hw4 starter


@pytest.fixture(scope="module")
def rubric():
    return load_rubric("hw4")


@pytest.fixture(scope="module")
def reference_dir(rubric) -> Path:
    ref = rubric.starter_dir
    missing = [f for f in rubric.required_files if not (ref / f).is_file()]
    assert not missing, f"reference kit {ref} lacks {missing}"
    return ref


@pytest.fixture(scope="module")
def starter_tree(reference_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("starter") / "llmsys_hw4"
    render_starter(reference_dir, dest)
    return dest


def _marked_files(reference_dir: Path) -> dict[str, list]:
    marked = {}
    for rel in starter_files(reference_dir):
        text = (reference_dir / rel).read_text()
        regions = find_regions(text, rel.suffix, rel.as_posix())
        if regions:
            marked[rel.as_posix()] = regions
    return marked


def test_reference_marks_the_student_work(reference_dir: Path) -> None:
    marked = _marked_files(reference_dir)
    assert "src/softmax_kernel.cu" in marked, "softmax_kernel.cu has no solution regions"
    assert "src/layernorm_kernel.cu" in marked, "layernorm_kernel.cu has no solution regions"
    assert any(name.startswith("minitorch/") for name in marked), "no solution regions in minitorch/"


def test_starter_has_no_markers_and_no_build_outputs(starter_tree: Path) -> None:
    for path in starter_tree.rglob("*"):
        rel = path.relative_to(starter_tree).as_posix()
        assert "__pycache__" not in rel
        if not path.is_file():
            continue
        assert path.suffix != ".so", rel
        text = path.read_bytes().decode("utf-8", errors="replace")
        assert not MARKER_LINE.search(text), rel
        if path.suffix in (".py", ".cu", ".h", ".cuh", ".cpp"):  # code: not even in passing
            assert "BEGIN SOLUTION" not in text, rel
            assert "END SOLUTION" not in text, rel


def test_every_region_became_a_todo_and_its_text_is_gone(reference_dir: Path, starter_tree: Path) -> None:
    for rel, regions in _marked_files(reference_dir).items():
        ref_lines = (reference_dir / rel).read_text().splitlines()
        inside = {n for r in regions for n in range(r.begin, r.end + 1)}
        outside = {ln.strip() for n, ln in enumerate(ref_lines, start=1) if n not in inside}
        out_text = (starter_tree / rel).read_text()
        out_lines = out_text.splitlines()
        for region in regions:
            stub = (
                f'{region.indent}raise NotImplementedError("{region.label}: your code here")'
                if rel.endswith(".py")
                else f"{region.indent}// TODO({region.label}): your code here"
            )
            assert stub in out_lines, f"{rel}: region {region.label!r} has no stub"
            for line in region.body:
                s = line.strip()
                # distinctive solution lines only: long enough and not also outside the regions
                if len(s) >= 16 and s not in outside:
                    assert s not in out_text, f"{rel}: solution text of {region.label!r} leaked: {s!r}"
        assert len(out_lines) == len(ref_lines) - sum(r.end - r.begin for r in regions)


def test_starter_python_files_are_valid_syntax(starter_tree: Path) -> None:
    for path in sorted(starter_tree.rglob("*.py")):
        compile(path.read_text(), str(path.relative_to(starter_tree)), "exec")


def test_starter_minitorch_imports(starter_tree: Path) -> None:
    modules = sorted(
        p.stem for p in (starter_tree / "minitorch").glob("*.py")
        if p.stem not in ("__init__", "cuda_kernel_ops")  # that one needs pycuda/torch and a GPU
    )
    code = (
        "import importlib, minitorch\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module('minitorch.' + m)\n"
        "print('imported', len(sys.modules) > 0)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", "import sys\n" + code],
        cwd=starter_tree,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(starter_tree), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "imported True" in proc.stdout


def test_starter_cuda_files_compile(rubric, starter_tree: Path, tmp_path: Path) -> None:
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (set KG_NVCC or put nvcc on PATH): cannot compile the starter")
    root = tmp_path / "build"
    shutil.copytree(starter_tree, root)
    toolchain = Toolchain(
        nvcc=nvcc, flags=(*rubric.nvcc_flags, CHECK_ARCH), include_dirs=cuda_include_dirs()
    )
    results = build_kernels(root, list(rubric.kernels), toolchain)
    failed = [r for r in results if not r.ok]
    assert not failed, "starter does not compile:\n" + "\n".join(f"--- {r.name}\n{r.log}" for r in failed)
    assert {r.name for r in results} == {"combine", "softmax_kernel", "layernorm_kernel"}


def test_starter_zip_is_deterministic(rubric, tmp_path: Path) -> None:
    first = write_starter_zip(rubric, tmp_path / "a" / "starter.zip")
    second = write_starter_zip(rubric, tmp_path / "b" / "starter.zip")
    assert first.read_bytes() == second.read_bytes()
    with zipfile.ZipFile(first) as zf:
        names = zf.namelist()
        assert names == sorted(names)
        assert all(n.startswith("llmsys_hw4/") for n in names)
        for required in rubric.required_files:
            assert f"llmsys_hw4/{required}" in names
        assert not any(n.endswith(".so") or "__pycache__" in n for n in names)
        assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in zf.infolist())
        for name in names:
            assert not MARKER_LINE.search(zf.read(name).decode("utf-8", errors="replace")), name
