"""Import direction: no module under worker/ imports grader, at any depth
(a function's body, a TYPE_CHECKING block), read from the source with ast so that nothing is
executed and a lazy import is seen too; and grader/auth/ and grader/course/ never import the web
face."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICE = "grader"


def service_imports(source: str) -> list[str]:
    """The modules of the service that `source` imports, once per import, sorted."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [n for n in names if n == SERVICE or n.startswith(SERVICE + ".")]
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


def test_the_course_rules_and_auth_import_no_web_module() -> None:
    web = ("grader.pages", "grader.api", "grader.app")
    found = {(path.relative_to(ROOT).as_posix(), module)
             for package in ("auth", "course")
             for path in sorted((ROOT / "grader" / package).rglob("*.py"))
             for module in service_imports(path.read_text())
             if any(module == w or module.startswith(w + ".") for w in web)}
    assert found == set(), "grader/auth and grader/course are used by the web face, never the other way"


BLOCKED = ("sqlalchemy", "pydantic", "pydantic_settings", "celery", "fastapi")


def test_the_engine_config_loads_without_the_service_packages() -> None:
    """bench/fidelity.py builds production's configs on the bare GPU machine, where the
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
