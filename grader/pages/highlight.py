"""A small syntax highlighter for the code view, done on the server (no script, no download):
C, C++ and CUDA sources and Python split into comments, strings, preprocessor lines, keywords
and numbers, each in a span whose class static/code.css colours. All text is escaped. Lines come
back one by one; a token across lines (a block comment, a triple-quoted string) is closed at
the end of each line and opened again on the next.
"""
from __future__ import annotations

import keyword
import re
from pathlib import PurePosixPath

from markupsafe import Markup, escape

_C_WORDS = frozenset("""
    auto bool break case char class const constexpr continue default delete do double else enum extern
    false float for goto if inline int long namespace new nullptr private protected public register return
    short signed sizeof size_t static static_cast struct switch template this true typedef typename union
    unsigned using void volatile while __global__ __device__ __host__ __shared__ __constant__ __restrict__
    __forceinline__ __syncthreads __syncwarp dim3 blockIdx blockDim threadIdx gridDim warpSize
""".split())
_PY_WORDS = frozenset([*keyword.kwlist, *keyword.softkwlist, "self"])

_STRING = r'"(?:\\.|[^"\\\n])*"?|' + r"'(?:\\.|[^'\\\n])*'?"
_C = re.compile(
    r"(?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z))|(?P<pre>^[ \t]*#[^\n]*)|(?P<string>" + _STRING + r")"
    r"|(?P<number>\b\d[\w.]*)|(?P<word>\b[A-Za-z_]\w*)", re.S | re.M)
_PY = re.compile(
    r"(?P<comment>#[^\n]*)|(?P<string>[rRbBuUfF]{0,2}(?:\"\"\".*?(?:\"\"\"|\Z)|'''.*?(?:'''|\Z)|" + _STRING + r"))"
    r"|(?P<number>\b\d[\w.]*)|(?P<word>\b[A-Za-z_]\w*)", re.S)
_LANGUAGES = {
    **dict.fromkeys((".c", ".h", ".cu", ".cuh", ".cc", ".cpp", ".cxx", ".hpp"), (_C, _C_WORDS)),
    ".py": (_PY, _PY_WORDS),
}
_CLASS = {"comment": "tok-c", "pre": "tok-p", "string": "tok-s", "number": "tok-n", "word": "tok-k"}


def language(name: str) -> str | None:
    """The name of the highlighting used for a file called `name`, or None (plain text)."""
    suffix = PurePosixPath(name).suffix.lower()
    return None if suffix not in _LANGUAGES else "Python" if suffix == ".py" else "C/C++/CUDA"


def highlight(text: str, name: str) -> list[Markup]:
    """`text` (the file called `name`) as escaped HTML, one item per line."""
    text = text.replace("\r\n", "\n").removesuffix("\n")
    lines: list[list[str]] = [[]]

    def add(piece: str, kind: str | None = None) -> None:
        for i, part in enumerate(piece.split("\n")):
            if i:
                lines.append([])
            if part:
                lines[-1].append(f'<span class="{_CLASS[kind]}">{escape(part)}</span>' if kind else str(escape(part)))

    pattern, words = _LANGUAGES.get(PurePosixPath(name).suffix.lower(), (None, frozenset()))
    at = 0
    for match in pattern.finditer(text) if pattern else ():
        if match.lastgroup == "word" and match.group() not in words:
            continue  # an ordinary name: plain text, added with what follows
        add(text[at:match.start()])
        add(match.group(), match.lastgroup)
        at = match.end()
    add(text[at:])
    return [Markup("".join(parts)) for parts in lines]
