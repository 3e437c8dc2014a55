"""The similarity report: ranked pairs as JSON, or one self-contained HTML page with the
matching regions of each listed pair side by side (no external assets, so it can be mailed or
served as is)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from jinja2 import Environment, select_autoescape

from grader.similarity import LineRange, PairResult, Sources

_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5rem}
table.rank{border-collapse:collapse}table.rank td,table.rank th{padding:.2rem .6rem;border-bottom:1px solid #ccc;text-align:left}
.sbs{display:grid;grid-template-columns:1fr 1fr;gap:1rem}
pre{font-size:12px;overflow:auto;max-height:32rem;border:1px solid #ccc;margin:0}
.l{display:block;white-space:pre}.hit{background:#ffe08a}.n{color:#777;display:inline-block;width:3.5em;user-select:none}
</style></head><body>
<h1>{{ title }}</h1>
<p>{{ summary }}</p>
<table class="rank"><thead><tr><th>#</th><th>student A</th><th>student B</th><th>score</th><th>files with shared code</th></tr></thead><tbody>
{% for p in pairs %}<tr><td>{{ loop.index }}</td><td>{{ p.a }}</td><td>{{ p.b }}</td><td>{{ "%.0f%%"|format(100 * p.score) }}</td>
<td>{% if loop.index <= detailed %}<a href="#pair-{{ loop.index }}">{{ p.files|length }}</a>{% else %}{{ p.files|length }}{% endif %}</td></tr>
{% endfor %}</tbody></table>
{% for p in pairs[:detailed] %}{% set n = loop.index %}
<section id="pair-{{ n }}"><h2>{{ n }}. {{ p.a }} and {{ p.b }}: {{ "%.0f%%"|format(100 * p.score) }}</h2>
{% for f in p.files %}<h3>{{ f.path }}: {{ "%.0f%%"|format(100 * f.share_a) }} of {{ p.a }}'s own code, {{ "%.0f%%"|format(100 * f.share_b) }} of {{ p.b }}'s</h3>
<div class="sbs">
<div><strong>{{ p.a }}</strong> lines {{ ranges(f.lines_a) }}<pre>{% for no, text, hit in numbered(sources[p.a][f.path], f.lines_a) %}<span class="l{{ ' hit' if hit }}"><span class="n">{{ no }}</span>{{ text }}</span>{% endfor %}</pre></div>
<div><strong>{{ p.b }}</strong> lines {{ ranges(f.lines_b) }}<pre>{% for no, text, hit in numbered(sources[p.b][f.path], f.lines_b) %}<span class="l{{ ' hit' if hit }}"><span class="n">{{ no }}</span>{{ text }}</span>{% endfor %}</pre></div>
</div>{% endfor %}</section>
{% endfor %}
</body></html>
"""


def describe_ranges(lines: Sequence[LineRange]) -> str:
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in lines)


def numbered_lines(text: str, lines: Sequence[LineRange]) -> list[tuple[int, str, bool]]:
    """(line number, text, inside one of `lines`) for every line of `text`."""
    return [(no, line, any(a <= no <= b for a, b in lines))
            for no, line in enumerate(text.splitlines(), start=1)]


def report_json(assignment: str, pairs: Sequence[PairResult]) -> dict[str, Any]:
    return {"assignment": assignment, "students": _student_count(pairs),
            "pairs": [asdict(p) for p in pairs]}


def report_html(assignment: str, pairs: Sequence[PairResult], sources: Mapping[str, Sources],
                detailed: int = 20) -> str:
    """The ranking of every pair, and the side-by-side view of the `detailed` first ones."""
    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    env.globals.update(ranges=describe_ranges, numbered=numbered_lines)
    summary = (f"{_student_count(pairs)} students, {len(pairs)} pairs, most similar first. Score: the share "
               "of both students' own code (the starter's code never counts) that the other also has. "
               "Highlighted: the shared regions. A high score is a reason to look, not a verdict.")
    return env.from_string(_TEMPLATE).render(
        title=f"Similarity: {assignment}", summary=summary, pairs=pairs, sources=sources, detailed=detailed,
    )


def _student_count(pairs: Sequence[PairResult]) -> int:
    return len({name for p in pairs for name in (p.a, p.b)})

