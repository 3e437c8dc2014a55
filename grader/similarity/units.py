"""The functions of a source file, by line range: CUDA/C++ (brace matching, through namespaces
and `extern "C"` blocks) and Python (indentation), so that similarity can score each kernel,
launcher, binding or module method on its own as well as the whole file."""
from __future__ import annotations

import re
from dataclasses import dataclass

_C_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".c", ".cc", ".cpp")
_PY_DEF = re.compile(r"^(?P<indent>[ \t]*)(?:async[ \t]+)?(?P<kind>def|class)[ \t]+(?P<name>\w+)")
_C_NAME_BEFORE_PAREN = re.compile(r"([A-Za-z_]\w*)\s*(?:<[^<>()]*>)?\s*\($")
_C_SCOPES = re.compile(r"^\s*(?:template\s*<.*>\s*)?(?:namespace\b|extern\b|struct\b|class\b|union\b|enum\b)", re.S)
_C_TRANSPARENT = re.compile(r"^\s*(?:namespace\b|extern\b)")


@dataclass(frozen=True)
class Function:
    name: str  # `ker_ln_bw_dinp`, or `Class.method` in Python
    first: int  # 1-based line of the signature
    last: int  # 1-based line of the closing brace / last indented line


def functions_of(path: str, text: str) -> tuple[Function, ...]:
    if path.endswith(".py"):
        return _python_functions(text)
    if path.endswith(_C_SUFFIXES):
        return _c_functions(text)
    return ()


def _python_functions(text: str) -> tuple[Function, ...]:
    lines = text.splitlines()
    found: list[Function] = []
    classes: list[tuple[int, str]] = []  # (indent, name) of the enclosing classes
    for no, line in enumerate(lines, start=1):
        match = _PY_DEF.match(line)
        if match is None:
            continue
        indent = len(match["indent"].expandtabs())
        while classes and classes[-1][0] >= indent:
            classes.pop()
        if match["kind"] == "class":
            classes.append((indent, match["name"]))
            continue
        last = no
        for later in range(no, len(lines)):
            body = lines[later]
            if body.strip() and len(body) - len(body.lstrip()) <= indent and not body.lstrip().startswith((")", "#")):
                break
            if body.strip():
                last = later + 1
        qualified = ".".join([name for _, name in classes] + [match["name"]])
        found.append(Function(qualified, no, last))
    return tuple(f for f in found if f.last > f.first)


def _c_functions(text: str) -> tuple[Function, ...]:
    """Top-level function bodies: a `{` outside any function, struct or class whose header (the
    text since the last `;`, `{` or `}`) ends in a parameter list."""
    code = _blank_comments_and_strings(text)
    found: list[Function] = []
    opened: list[tuple[bool, Function | None]] = []  # per open brace: (namespace-like, function)
    header_start = 0
    for at, char in enumerate(code):
        if char == "{":
            header = code[header_start:at]
            open_scope = all(transparent for transparent, _ in opened)
            function = None
            if open_scope and not _C_SCOPES.match(header):
                name = _c_function_name(header)
                if name is not None:
                    first = text.count("\n", 0, at - len(header.lstrip())) + 1
                    function = Function(name, first, first)
            opened.append((bool(_C_TRANSPARENT.match(header)), function))
            header_start = at + 1
        elif char == "}":
            if opened:
                _, function = opened.pop()
                if function is not None:
                    found.append(Function(function.name, function.first, text.count("\n", 0, at) + 1))
            header_start = at + 1
        elif char == ";":
            header_start = at + 1
    return tuple(found)


def _c_function_name(header: str) -> str | None:
    """`name` of `... name(params) const`, the parameter list matched backwards."""
    stripped = re.sub(r"\)\s*(?:const|noexcept|override)?\s*(?::[^{}]*)?$", ")", header.rstrip())
    if not stripped.endswith(")"):
        return None
    depth = 0
    for at in range(len(stripped) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(stripped[at], 0)
        if depth == 0:
            match = _C_NAME_BEFORE_PAREN.search(stripped[: at + 1])
            if match is None or match[1] in ("if", "for", "while", "switch", "return", "sizeof"):
                return None
            return match[1]
    return None


def _blank_comments_and_strings(text: str) -> str:
    """`text` with comments, preprocessor lines, string and char literals replaced by spaces
    (newlines kept), so braces and semicolons inside them do not count."""
    def blank(match: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", match[0])
    return re.sub(r'^[ \t]*#[^\n]*|//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', blank, text, flags=re.S | re.M)
