"""Layers: no import circle between grader/'s parts (a sub-package or a top-level module is one
part) and none between worker/'s modules, read from the source with ast (lazy and TYPE_CHECKING
imports count: a circle through them is still a circle for a reader). A failure names each
import that closes a circle, so the fix is to move the imported name one layer down."""
from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
Graph = dict[str, dict[str, list[str]]]  # part -> part it imports -> the files that do


def imported_modules(source: str) -> Iterator[tuple[str, ...]]:
    """Every absolute import in `source`, as the modules it may name, the likeliest first:
    `from a import b` is (a.b, a), since b may be a module of package a or a name in a."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from ((alias.name,) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield from ((f"{node.module}.{alias.name}", node.module) for alias in node.names)


def grader_part(module: str) -> str | None:
    """The part of grader/ a module belongs to: `grader.course.roster` -> `course`,
    `grader.service` -> `service`; None outside grader/ or for the package itself."""
    parts = module.split(".")
    return parts[1] if parts[0] == "grader" and len(parts) > 1 else None


def worker_module(module: str) -> str | None:
    """The worker/ module file a dotted name is (`worker.sandbox.view`), or None."""
    if not module.startswith("worker."):
        return None
    path = ROOT.joinpath(*module.split("."))
    if path.with_suffix(".py").is_file():
        return module
    return f"{module}.__init__" if (path / "__init__.py").is_file() else None


def import_graph(package: str, part_of_file: Callable[[Path], str],
                 part_of_module: Callable[[str], str | None]) -> Graph:
    graph: Graph = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        source_part = part_of_file(path)
        edges = graph.setdefault(source_part, {})
        for candidates in imported_modules(path.read_text()):
            target = next(filter(None, map(part_of_module, candidates)), None)
            if target is not None and target != source_part:
                files = edges.setdefault(target, [])
                if path.relative_to(ROOT).as_posix() not in files:
                    files.append(path.relative_to(ROOT).as_posix())
    return graph


def circles(graph: Graph) -> list[list[str]]:
    """The strongly connected parts of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def explained(graph: Graph, found: list[list[str]]) -> str:
    lines = []
    for component in found:
        lines.append("circle: " + ", ".join(component))
        lines += [f"  {a} -> {b}: {', '.join(files)}" for a in component
                  for b, files in sorted(graph.get(a, {}).items()) if b in component]
    return "\n".join(lines)


def grader_graph() -> Graph:
    return import_graph("grader", lambda p: p.relative_to(ROOT / "grader").parts[0].removesuffix(".py"), grader_part)


def worker_graph() -> Graph:
    def part(path: Path) -> str:
        return ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return import_graph("worker", part, worker_module)


def test_the_circle_finder_finds_a_circle_and_only_that() -> None:
    graph: Graph = {"a": {"b": ["a.py"]}, "b": {"c": ["b.py"]}, "c": {"a": ["c.py"]}, "d": {"a": ["d.py"]}}
    assert circles(graph) == [["a", "b", "c"]]
    assert "c -> a: c.py" in explained(graph, circles(graph))
    assert circles({"a": {"b": ["a.py"]}, "b": {}}) == []


def test_the_scan_sees_lazy_and_type_checking_imports_and_submodules() -> None:
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from grader.course import roster\n"
              "def f():\n    import grader.auth.roles\n")
    assert {grader_part(names[0]) for names in imported_modules(source)} == {"course", "auth", None}
    assert worker_module("worker.sandbox.view") == "worker.sandbox.view"
    assert worker_module("worker.sandbox") == "worker.sandbox.__init__"
    assert worker_module("worker.sandbox.SandboxPolicy") is None


def test_grader_parts_import_one_way() -> None:
    graph = grader_graph()
    assert {"course", "auth", "storage", "runs"} <= set(graph), "the scan found grader/'s parts"
    found = circles(graph)
    assert not found, "grader/'s parts import each other in a circle:\n" + explained(graph, found)


def test_worker_modules_import_one_way() -> None:
    graph = worker_graph()
    assert "worker.pipeline" in graph and "worker.assignment" in graph.get("worker.scoring", {})
    found = circles(graph)
    assert not found, "worker/'s modules import each other in a circle:\n" + explained(graph, found)
