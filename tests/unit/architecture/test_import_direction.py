"""Import direction: no module under worker/ imports grader or an assignment (rubrics/), at any depth
(a function's body, a TYPE_CHECKING block), read from the source with ast so that nothing is
executed and a lazy import is seen too; and grader/auth/, grader/course/, grader/storage/,
grader/reads/ and grader/lti/ never import the web face; a page module imports no other page family."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SERVICE = "grader"


def service_imports(source: str, package: str = SERVICE) -> list[str]:
    """The modules of `package` (the service) that `source` imports, once per import, sorted."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [n for n in names if n == package or n.startswith(package + ".")]
    return sorted(found)


def engine_imports_of_the_service() -> set[tuple[str, str]]:
    return {(path.relative_to(ROOT).as_posix(), module)
            for path in sorted((ROOT / "worker").rglob("*.py"))
            for module in service_imports(path.read_text())}


def test_the_scan_sees_every_form_of_import() -> None:
    source = ("import grader\nimport os, grader.models as m\nfrom grader.settings import Settings\n"
              "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from grader import db\n"
              "def f():\n    from grader.runs.lifecycle import RunExecutor\n"
              "import graderx\nfrom . import grader\nfrom worker.rubric import load_rubric\n")
    assert service_imports(source) == ["grader", "grader", "grader.models", "grader.runs.lifecycle",
                                       "grader.settings"]


def test_no_module_under_worker_imports_the_service() -> None:
    assert engine_imports_of_the_service() == set(), "worker/ must not import grader: move the code to grader/runs/"


def test_the_engine_imports_no_assignment() -> None:
    """worker/ reaches an assignment only through the rubric's plug-in entry (worker.assignment's
    importlib), never by an import of rubrics/<slug>/."""
    found = {(path.relative_to(ROOT).as_posix(), module) for path in sorted((ROOT / "worker").rglob("*.py"))
             for module in service_imports(path.read_text(), "rubrics")}
    assert found == set(), "an assignment is a plug-in: the engine must not import it"
    assert service_imports("from rubrics.hw4.grade import x\nimport rubricsx\n", "rubrics") == ["rubrics.hw4.grade"]


def test_the_course_rules_auth_storage_and_reads_import_no_web_module() -> None:
    web = ("grader.pages", "grader.api", "grader.app")
    found = {(path.relative_to(ROOT).as_posix(), module)
             for package in ("auth", "course", "storage", "reads", "lti")
             for path in sorted((ROOT / "grader" / package).rglob("*.py"))
             for module in service_imports(path.read_text())
             if any(module == w or module.startswith(w + ".") for w in web)}
    assert found == set(), "grader/auth, course, storage, reads and lti are used by the web face, never the other way"


# What a page module may import of grader/pages/: what the pages share, never another page family.
PAGE_HELPERS = {"common", "charts", "highlight", "gradebook_view", "run_view", "members_view", "sign_in"}


def pages_imported(source: str) -> set[str]:
    """The modules of grader/pages/ that `source` imports (`from grader.pages import x` too)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {name.split(".")[2] for name in names if name.startswith("grader.pages.")}
    return found


def test_the_page_scan_sees_both_forms() -> None:
    assert pages_imported("from grader.pages import charts, runs\nimport grader.pages.login.x\n"
                          "from grader.pages.common import page\nfrom grader.pagesx import y\n") == {
        "charts", "runs", "login", "common"}


def test_a_page_module_imports_no_other_page_family() -> None:
    found = {(path.name, module)
             for path in sorted((ROOT / "grader" / "pages").glob("*.py")) if path.name != "__init__.py"
             for module in pages_imported(path.read_text()) - PAGE_HELPERS}
    assert found == set(), f"pages import only {sorted(PAGE_HELPERS)} of grader/pages/"


BLOCKED = ("sqlalchemy", "pydantic", "pydantic_settings", "celery", "fastapi")


def test_the_engine_config_loads_without_the_service_packages() -> None:
    """bench/production_config.py builds production's configs on the bare GPU machine, where the
    database, pydantic and Celery packages may be missing: grader.runs.engine_config must load
    with none of them."""
    probe = (
        "import importlib.abc, sys\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        f"        if name.split('.')[0] in {BLOCKED!r}:\n"
        "            raise ImportError(f'blocked: {name}')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from grader.runs.engine_config import gpu_stage_config, pipeline_config\n"
        f"assert not any(m.split('.')[0] in {BLOCKED!r} for m in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
