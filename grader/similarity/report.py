"""The similarity report: the clusters (grader.similarity.clusters) and ranked pairs as JSON,
or self-contained HTML pages (no external assets, so they can be mailed or served as they are):
the known public solutions staff listed and the students who match them (each source named by
its label: `<repository>@<commit>`, or a zip's name and sha256), the sources left out as common
code, the clusters, then every pair in the ranking, a page of pairs at a time, with the file or
function that drives its score, and for the `detailed` first pairs a page each with the shared
regions of their strongest matches side by side (excerpts around them, long lines wrapped to
the window). Highlighting marks shared lines that are not lines of the base's file or its
hints, nor a starter's markers."""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence, Set
from dataclasses import asdict
from typing import Any

from jinja2 import Environment, select_autoescape

from grader.similarity.base import Base
from grader.similarity.clusters import Cluster
from grader.similarity.compare import LineRange, PairResult, Sources
from grader.similarity.prints import hint_text

CONTEXT = 2  # lines shown around a shared region in the HTML file's excerpts

_STYLE = """body{font-family:system-ui,sans-serif;margin:1.5rem;max-width:100%}
table.rank{border-collapse:collapse}table.rank td,table.rank th{padding:.2rem .6rem;border-bottom:1px solid #ccc;text-align:left}
.sbs{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:1rem}
pre{font-size:12px;overflow-x:hidden;overflow-y:auto;max-height:32rem;border:1px solid #ccc;margin:0}
.l{display:block;white-space:pre-wrap;overflow-wrap:anywhere;padding-left:3.5em;text-indent:-3.5em}
.hit{background:#ffe08a}.gap{color:#777}.n{color:#777;display:inline-block;width:3.5em;text-indent:0;user-select:none}"""

# A page of the ranking: its pairs, links to the other pages and to each detailed pair's page.
_RANKING = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>{{ title }}</title><style>{{ style }}</style></head><body>
<h1>{{ title }}</h1>
<p>{{ summary }}</p>
{% if page == 1 %}<h2 id="public">Known public solutions</h2>
{% if public %}<p>Compared against: {{ public|join("; ") }}.</p>
{% if public_matches %}<table class="rank" id="public-table"><thead><tr><th>student</th><th>public source</th><th>score</th><th>lines the strongest matches share (longest run)</th><th>driven by</th></tr></thead><tbody>
{% for p in public_matches %}<tr><td>{{ p.a }}</td><td>{{ p.b }}</td><td>{{ "%.0f%%"|format(100 * p.score) }}</td><td>{{ p.shared_lines }} ({{ p.longest_run }})</td><td>{{ p.driver }}</td></tr>
{% endfor %}</tbody></table>{% else %}<p>No student's files match them.</p>{% endif %}
{% else %}<p>None listed.</p>{% endif %}
<h2 id="common">Code the class may share</h2>
<p>{% if common %}Left out like the starter: {{ common|join("; ") }}.{% else %}None listed: only the starter's code is left out.{% endif %}</p>
<h2 id="clusters">Files several students share</h2>
<p>{{ cluster_note }}</p>
{% if clusters %}<table class="rank" id="cluster-table"><thead><tr><th>#</th><th>students</th><th>files</th><th>kind</th><th>each one's first upload of it</th></tr></thead><tbody>
{% for c in clusters %}<tr><td>{{ loop.index }}</td><td>{{ c.students|join(", ") }}</td><td>{{ c.files|join(", ") }}</td><td>{{ c.kind }}</td>
<td>{% for student, times in c.uploads %}{{ student }}: {% for at, paths in times %}{{ at.strftime("%Y-%m-%d %H:%M UTC") if at else "not known" }}{% if times|length > 1 %} ({{ paths|join(", ") }}){% endif %}{% if not loop.last %}, {% endif %}{% endfor %}{% if not loop.last %}; {% endif %}{% endfor %}</td></tr>
{% endfor %}</tbody></table>{% else %}<p>None.</p>{% endif %}
<h2>Pairs</h2>{% endif %}
{% if pages|length > 1 %}<p>Pages of the ranking: {% for n, name in pages %}{% if n == page %}<strong>{{ n }}</strong>{% else %}<a href="{{ name }}">{{ n }}</a>{% endif %} {% endfor %}</p>{% endif %}
<table class="rank"><thead><tr><th>#</th><th>student A</th><th>student B</th><th>score</th><th>lines the strongest matches share (longest run)</th><th>driven by</th></tr></thead><tbody>
{% for rank, p in pairs %}<tr><td>{{ rank }}</td><td>{{ p.a }}</td><td>{{ p.b }}</td><td>{{ "%.0f%%"|format(100 * p.score) }}</td><td>{{ p.shared_lines }} ({{ p.longest_run }})</td>
<td>{% if rank in pair_pages %}<a href="{{ pair_pages[rank] }}">{{ p.driver }}</a>{% else %}{{ p.driver }}{% endif %}</td></tr>
{% endfor %}</tbody></table>
</body></html>
"""

# One pair side by side: the shared regions of its strongest matches (excerpts around them).
_PAIR = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>{{ rank }}. {{ p.a }} and {{ p.b }}</title><style>{{ style }}</style></head><body>
<p><a href="{{ back }}">Back to the ranking</a></p>
<h1>{{ rank }}. {{ p.a }} and {{ p.b }}: {{ "%.0f%%"|format(100 * p.score) }}</h1>
<p>Its strongest matches share {{ p.shared_lines }} lines, the longest run {{ p.longest_run }} lines. Base: {{ base }}.</p>
{% for m in p.matches %}<h2>{{ m.label }}: {{ "%.0f%%"|format(100 * m.score) }} ({{ "%.0f%%"|format(100 * m.share_a) }} of {{ p.a }}'s own code there, {{ "%.0f%%"|format(100 * m.share_b) }} of {{ p.b }}'s)</h2>
<div class="sbs">
{% for name, path, lines in ((p.a, m.path_a, m.lines_a), (p.b, m.path_b, m.lines_b)) %}
<div><strong>{{ name }}</strong> lines {{ ranges(lines) }}<pre>{% for no, text, hit in excerpt(sources[name].get(path, ""), lines, base_lines(path)) %}{% if no %}<span class="l{{ ' hit' if hit }}"><span class="n">{{ no }}</span>{{ text }}</span>{% else %}<span class="l gap">…</span>{% endif %}{% endfor %}</pre></div>
{% endfor %}
</div>{% endfor %}
</body></html>
"""


def describe_ranges(lines: Sequence[LineRange]) -> str:
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in lines)


def starter_lines(base: Sources, path: str) -> frozenset[str]:
    """The base file's lines and the lines of code its hints give, stripped: a shared line that
    is one of them is not highlighted."""
    text = base.get(path, "")
    return frozenset(line.strip() for line in (*text.splitlines(), *hint_text(path, text).splitlines()))


# A starter's region markers, of whichever version or course a student started from
# (`// BEGIN ASSIGN4_1_1`, `/// END ASSIGN4_2_2`, `# BEGIN ASSIGN3_3`, `// BEGIN SOLUTION: 1.1`,
# a lone `/// TODO`): the starter put them there, so two students keeping them share nothing.
STARTER_MARKER = re.compile(r"^\s*(?://+|#+|/\*+)\s*(?:(?:BEGIN|END)\b\s*:?\s*(?:ASSIGN[\w.]*|SOLUTION\b)|TODO\b)"
                            r".*$", re.IGNORECASE)


def numbered_lines(text: str, lines: Sequence[LineRange], starter: Set[str] = frozenset()) -> list[tuple[int, str, bool]]:
    """(line number, text, highlighted) for every line of `text`: highlighted when inside one of
    `lines`, not blank, not a line of the starter's file and not a starter's marker."""
    return [(no, line, any(a <= no <= b for a, b in lines) and bool(line.strip()) and line.strip() not in starter
             and STARTER_MARKER.match(line) is None)
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


CLUSTER_NOTE = ("A file two or more students hand in the same after names, comments and layout are normalized "
                "(identical), or sharing at least 90% of each one's own code (near-identical), is listed here "
                "as one group, however many students share it (the pair scores count it too: nothing is left out "
                "for being common, only the starter's code and the sources staff listed as common code). "
                "Files the same as the starter's or a common source's are not listed.")


def report_json(assignment: str, pairs: Sequence[PairResult], clusters: Sequence[Cluster] = (),
                public: Sequence[str] = (), public_matches: Sequence[PairResult] = (),
                common: Sequence[str] = ()) -> dict[str, Any]:
    """The report as JSON: `public_sources` the labels of the known public solutions compared
    against, `public_matches` each (student `a`, public source `b`) that share code, as a pair;
    `common_sources` the labels of the sources left out as code the class may share."""
    return {"assignment": assignment, "students": _student_count(pairs),
            "clusters": [c.as_json() for c in clusters], "public_sources": list(public),
            "common_sources": list(common),
            "public_matches": [{**asdict(p), "student": p.a, "source": p.b, "driver": p.driver,
                                "shared_lines": p.shared_lines, "longest_run": p.longest_run} for p in public_matches],
            "pairs": [{**asdict(p), "driver": p.driver, "shared_lines": p.shared_lines, "longest_run": p.longest_run}
                      for p in pairs]}


def report_pages(assignment: str, pairs: Sequence[PairResult], sources: Mapping[str, Sources], base: Base,
                 detailed: int = 50, per_page: int = 200, stem: str = "report",
                 clusters: Sequence[Cluster] = (), public: Sequence[str] = (),
                 public_matches: Sequence[PairResult] = (), common: Sequence[str] = ()) -> dict[str, str]:
    """The HTML report as self-contained pages, file name -> HTML, to write side by side: the
    clusters (grader.similarity.clusters) and the ranking of every pair, `per_page` pairs a page (`{stem}.html` first, then
    `{stem}-ranking-2.html`, ...), and a page of its own for each of the `detailed` first pairs
    (`{stem}-pair-1.html`, ...) with the shared regions side by side. One page held every pair's
    excerpts before (1.9 MB for a class of 30)."""
    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    env.globals.update(ranges=describe_ranges, excerpt=excerpt, base_lines=lambda path: starter_lines(base.sources, path))
    summary = (f"{_student_count(pairs)} students, {len(pairs)} pairs, most similar first. Each file and each "
               "function a student changed from the starter is compared with every other student's; a pair's score "
               "is its strongest match (shared share of the two, weighted by how much code they share), named "
               "in 'driven by'; pairs of one score rank by the lines their strongest matches share. Code of the starter, of its "
               "hints and of the sources listed as common code never counts; nothing else is left out for being common. Highlighted: shared lines outside the starter. "
               f"A high score is a reason to look, not a verdict. Base: {base.label}.")
    count = max(1, -(-len(pairs) // per_page))
    names = [(n, f"{stem}.html" if n == 1 else f"{stem}-ranking-{n}.html") for n in range(1, count + 1)]
    ranked = list(enumerate(pairs, start=1))
    pair_pages = {rank: f"{stem}-pair-{rank}.html" for rank, p in ranked[:detailed] if p.matches}
    out = {name: env.from_string(_RANKING).render(
        title=f"Similarity: {assignment}", style=_STYLE, summary=summary, pages=names, page=n, clusters=clusters,
        public=public, public_matches=public_matches, common=common,
        cluster_note=CLUSTER_NOTE,
        pairs=ranked[(n - 1) * per_page: n * per_page], pair_pages=pair_pages) for n, name in names}
    for rank, name in pair_pages.items():
        out[name] = env.from_string(_PAIR).render(style=_STYLE, rank=rank, p=pairs[rank - 1], sources=sources,
                                                  base=base.label, back=names[(rank - 1) // per_page][1])
    return out


def _student_count(pairs: Sequence[PairResult]) -> int:
    return len({name for p in pairs for name in (p.a, p.b)})
