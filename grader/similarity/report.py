"""The similarity report: ranked pairs as JSON, or one self-contained HTML page (no external
assets, so it can be mailed or served as is): every pair in the ranking with the file or
function that drives its score, and for the `detailed` first pairs the shared regions of
their strongest matches side by side (excerpts around them, long lines wrapped to the window).
Highlighting marks shared lines that are not lines of the base's file."""
from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import asdict
from typing import Any

from jinja2 import Environment, select_autoescape

from grader.similarity.base import Base
from grader.similarity.compare import LineRange, PairResult, Sources

CONTEXT = 2  # lines shown around a shared region in the HTML file's excerpts

_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>{{ title }}</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5rem;max-width:100%}
table.rank{border-collapse:collapse}table.rank td,table.rank th{padding:.2rem .6rem;border-bottom:1px solid #ccc;text-align:left}
.sbs{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:1rem}
pre{font-size:12px;overflow-x:hidden;overflow-y:auto;max-height:32rem;border:1px solid #ccc;margin:0}
.l{display:block;white-space:pre-wrap;overflow-wrap:anywhere;padding-left:3.5em;text-indent:-3.5em}
.hit{background:#ffe08a}.gap{color:#777}.n{color:#777;display:inline-block;width:3.5em;text-indent:0;user-select:none}
</style></head><body>
<h1>{{ title }}</h1>
<p>{{ summary }}</p>
<table class="rank"><thead><tr><th>#</th><th>student A</th><th>student B</th><th>score</th><th>driven by</th></tr></thead><tbody>
{% for p in pairs %}<tr><td>{{ loop.index }}</td><td>{{ p.a }}</td><td>{{ p.b }}</td><td>{{ "%.0f%%"|format(100 * p.score) }}</td>
<td>{% if loop.index <= detailed and p.matches %}<a href="#pair-{{ loop.index }}">{{ p.driver }}</a>{% else %}{{ p.driver }}{% endif %}</td></tr>
{% endfor %}</tbody></table>
{% for p in pairs[:detailed] if p.matches %}{% set n = loop.index %}
<section id="pair-{{ n }}"><h2>{{ n }}. {{ p.a }} and {{ p.b }}: {{ "%.0f%%"|format(100 * p.score) }}</h2>
{% for m in p.matches %}<h3>{{ m.label }}: {{ "%.0f%%"|format(100 * m.score) }} ({{ "%.0f%%"|format(100 * m.share_a) }} of {{ p.a }}'s own code there, {{ "%.0f%%"|format(100 * m.share_b) }} of {{ p.b }}'s)</h3>
<div class="sbs">
{% for name, path, lines in ((p.a, m.path_a, m.lines_a), (p.b, m.path_b, m.lines_b)) %}
<div><strong>{{ name }}</strong> lines {{ ranges(lines) }}<pre>{% for no, text, hit in excerpt(sources[name].get(path, ""), lines, base_lines(path)) %}{% if no %}<span class="l{{ ' hit' if hit }}"><span class="n">{{ no }}</span>{{ text }}</span>{% else %}<span class="l gap">…</span>{% endif %}{% endfor %}</pre></div>
{% endfor %}
</div>{% endfor %}</section>
{% endfor %}
</body></html>
"""


def describe_ranges(lines: Sequence[LineRange]) -> str:
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in lines)


def starter_lines(base: Sources, path: str) -> frozenset[str]:
    """The base file's lines, stripped: a shared line that is one of them is not highlighted."""
    return frozenset(line.strip() for line in base.get(path, "").splitlines())


def numbered_lines(text: str, lines: Sequence[LineRange], starter: Set[str] = frozenset()) -> list[tuple[int, str, bool]]:
    """(line number, text, highlighted) for every line of `text`: highlighted when inside one of
    `lines`, not blank and not a line of the starter's file."""
    return [(no, line, any(a <= no <= b for a, b in lines) and bool(line.strip()) and line.strip() not in starter)
            for no, line in enumerate(text.splitlines(), start=1)]


def excerpt(text: str, lines: Sequence[LineRange], starter: Set[str] = frozenset(),
            context: int = CONTEXT) -> list[tuple[int, str, bool]]:
    """`numbered_lines` cut to the shared regions and `context` lines around them; a
    (0, "", False) row stands for each gap."""
    shown: list[tuple[int, str, bool]] = []
    for row in numbered_lines(text, lines, starter):
        if any(a - context <= row[0] <= b + context for a, b in lines):
            if shown and shown[-1][0] and row[0] != shown[-1][0] + 1:
                shown.append((0, "", False))
            shown.append(row)
    return shown


def report_json(assignment: str, pairs: Sequence[PairResult]) -> dict[str, Any]:
    return {"assignment": assignment, "students": _student_count(pairs),
            "pairs": [{**asdict(p), "driver": p.driver} for p in pairs]}


def report_html(assignment: str, pairs: Sequence[PairResult], sources: Mapping[str, Sources], base: Base,
                detailed: int = 50) -> str:
    """The ranking of every pair, and the shared regions of the `detailed` first ones."""
    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    env.globals.update(ranges=describe_ranges, excerpt=excerpt, base_lines=lambda path: starter_lines(base.sources, path))
    summary = (f"{_student_count(pairs)} students, {len(pairs)} pairs, most similar first. Each file and each "
               "function a student changed from the starter is compared with every other student's; a pair's score "
               "is its strongest match (shared share of the two, weighted by how much code they share), named "
               "in 'driven by'. Code of the starter never counts. Highlighted: shared lines outside the starter. "
               f"A high score is a reason to look, not a verdict. Base: {base.label}.")
    return env.from_string(_TEMPLATE).render(
        title=f"Similarity: {assignment}", summary=summary, pairs=pairs, sources=sources, detailed=detailed,
    )


def _student_count(pairs: Sequence[PairResult]) -> int:
    return len({name for p in pairs for name in (p.a, p.b)})
