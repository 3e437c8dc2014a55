"""Function size: no function of the engine (worker/) or the service (grader/) runs past
MAX_LINES, read from the source with ast, so each stays readable in one screen. A failure
names each function, its file and its length: split it where its steps are."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MAX_LINES = 60


def long_functions(source: str, limit: int) -> list[tuple[str, int, int]]:
    """(name, first line, length) of each function or method in `source` longer than `limit` lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                found.append((node.name, node.lineno, length))
    return found


def test_the_measure_counts_a_function_with_its_body() -> None:
    source = "def short():\n    return 1\n\n\ndef long():\n" + "    x = 1\n" * 9 + "    return x\n"
    assert long_functions(source, 10) == [("long", 5, 11)]
    assert long_functions(source, 11) == []


def test_no_function_of_the_engine_or_the_service_is_too_long() -> None:
    too_long = [f"{path.relative_to(ROOT)}:{line} {name} ({length} lines)"
                for part in ("worker", "grader") for path in sorted((ROOT / part).rglob("*.py"))
                for name, line, length in long_functions(path.read_text(), MAX_LINES)]
    assert not too_long, f"functions over {MAX_LINES} lines: " + "; ".join(too_long)
