"""Small server-rendered SVG charts (no JavaScript, no CDN): a speedup with its interval
against the target, a score histogram, and per-problem speedup distributions.

Each chart is an inline <svg role="img"> whose <title> says in words what it draws, so a
screen reader gets the figures; colours are the stylesheet's (WCAG AA on white)."""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

GOOD, ACCENT, BAD, MUTED, LINE = "#1b6e20", "#0b57a4", "#a10000", "#4a4a4a", "#d0d0d0"


def _n(x: float) -> str:
    """A coordinate or a figure, short."""
    return f"{x:.4g}"


def _svg(width: int, height: int, label: str, body: list[str], css_class: str) -> Markup:
    head = (f'<svg class="{css_class}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
            f'width="{width}" height="{height}" role="img"><title>{escape(label)}</title>')
    return Markup(head + "".join(body) + "</svg>")


def _axis_max(*values: float | None) -> float:
    top = max([v for v in values if v is not None and math.isfinite(v)] + [1.0])
    return top * 1.15


def speedup_chart(speedup: float, low: float, high: float, target: float | None,
                  floor: float | None = None) -> Markup:
    """One measured speedup: its interval as a bar, the median as a dot, the target (and the
    floor below which no speed points are given) as vertical lines, on a 0..max axis."""
    width, height, left, right, axis_y = 260, 46, 6, 254, 32
    top = _axis_max(high, target, floor)

    def x(v: float) -> float:
        return left + (right - left) * min(max(v, 0.0), top) / top

    met = target is not None and speedup >= target
    colour = GOOD if met or target is None else ACCENT
    body = [f'<line x1="{left}" y1="{axis_y}" x2="{right}" y2="{axis_y}" stroke="{MUTED}"/>']
    for tick in (0.0, 1.0):
        body.append(f'<line x1="{_n(x(tick))}" y1="{axis_y}" x2="{_n(x(tick))}" y2="{axis_y + 4}" stroke="{MUTED}"/>'
                    f'<text x="{_n(x(tick))}" y="{axis_y + 13}" font-size="10" fill="{MUTED}" '
                    f'text-anchor="middle">{tick:g}x</text>')
    if floor is not None and floor > 0:
        body.append(f'<line x1="{_n(x(floor))}" y1="8" x2="{_n(x(floor))}" y2="{axis_y}" stroke="{MUTED}" '
                    f'stroke-dasharray="2 2"/>')
    if target is not None:
        tx = x(target)
        anchor = "end" if tx > width * 0.6 else "start"
        body.append(f'<line x1="{_n(tx)}" y1="4" x2="{_n(tx)}" y2="{axis_y + 4}" stroke="{BAD}" stroke-width="2" '
                    f'stroke-dasharray="4 2"/><text x="{_n(tx + (-3 if anchor == "end" else 3))}" y="11" '
                    f'font-size="10" fill="{BAD}" text-anchor="{anchor}">target {target:.3g}x</text>')
    body.append(f'<rect x="{_n(x(low))}" y="{axis_y - 13}" width="{_n(max(x(high) - x(low), 1.5))}" height="10" '
                f'fill="{colour}" fill-opacity="0.3" stroke="{colour}"/>'
                f'<circle cx="{_n(x(speedup))}" cy="{axis_y - 8}" r="4" fill="{colour}"/>')
    words = f"Speedup {speedup:.3g}x, 95% interval {low:.3g} to {high:.3g}"
    if target is not None:
        words += f"; target {target:.3g}x, {'met' if met else 'not met'}"
    if floor is not None:
        words += f"; no speed points at or below {floor:.3g}x"
    return _svg(width, height, words + ".", body, "chart speedup-chart")


def histogram(values: Sequence[float], maximum: float, bins: int = 10, label: str = "Scores") -> Markup:
    """Counts of `values` in `bins` equal bins over 0..maximum (the last bin includes it)."""
    width, height, left, bottom, top_pad = 420, 170, 34, 140, 14
    plot_w = width - left - 8
    counts = [0] * bins
    for v in values:
        counts[min(max(int(v / maximum * bins) if maximum > 0 else 0, 0), bins - 1)] += 1
    peak = max(counts + [1])
    bar_w = plot_w / bins
    body = [f'<line x1="{left}" y1="{bottom}" x2="{width - 8}" y2="{bottom}" stroke="{MUTED}"/>',
            f'<line x1="{left}" y1="{top_pad}" x2="{left}" y2="{bottom}" stroke="{MUTED}"/>',
            f'<text x="{left - 4}" y="{top_pad + 4}" font-size="10" fill="{MUTED}" text-anchor="end">{peak}</text>',
            f'<text x="{left - 4}" y="{bottom}" font-size="10" fill="{MUTED}" text-anchor="end">0</text>']
    parts = []
    for i, c in enumerate(counts):
        lo, hi = maximum * i / bins, maximum * (i + 1) / bins
        h = (bottom - top_pad) * c / peak
        bx = left + i * bar_w
        body.append(f'<rect x="{_n(bx + 1)}" y="{_n(bottom - h)}" width="{_n(bar_w - 2)}" height="{_n(h)}" '
                    f'fill="{ACCENT}"><title>{lo:g}–{hi:g}: {c}</title></rect>')
        if c:
            body.append(f'<text x="{_n(bx + bar_w / 2)}" y="{_n(bottom - h - 3)}" font-size="10" fill="{MUTED}" '
                        f'text-anchor="middle">{c}</text>')
        body.append(f'<text x="{_n(bx)}" y="{bottom + 13}" font-size="10" fill="{MUTED}" '
                    f'text-anchor="middle">{lo:g}</text>')
        parts.append(f"{lo:g} to {hi:g}: {c}")
    body.append(f'<text x="{width - 8}" y="{bottom + 13}" font-size="10" fill="{MUTED}" '
                f'text-anchor="end">{maximum:g}</text>')
    words = f"{label}: histogram of {len(values)} values in {bins} bins. " + "; ".join(parts) + "."
    return _svg(width, height, words, body, "chart histogram")


@dataclass(frozen=True)
class Distribution:
    label: str
    values: list[float]
    target: float | None = None


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def distributions(rows: Sequence[Distribution], unit: str = "x") -> Markup:
    """One horizontal box plot per row (min, quartiles, max; every value as a faint dot) on a
    shared axis, with each row's target as a red tick."""
    width, left, right, row_h, top_pad = 520, 70, 500, 34, 8
    height = top_pad + row_h * len(rows) + 22
    top = _axis_max(*(max(r.values) for r in rows if r.values), *(r.target for r in rows))

    def x(v: float) -> float:
        return left + (right - left) * min(max(v, 0.0), top) / top

    axis_y = top_pad + row_h * len(rows)
    body = [f'<line x1="{left}" y1="{axis_y}" x2="{right}" y2="{axis_y}" stroke="{MUTED}"/>']
    step = 10 ** math.floor(math.log10(top)) if top >= 1 else 0.5
    if top / step < 4:
        step /= 2
    tick = 0.0
    while tick <= top:
        body.append(f'<line x1="{_n(x(tick))}" y1="{top_pad}" x2="{_n(x(tick))}" y2="{axis_y + 3}" stroke="{LINE}"/>'
                    f'<text x="{_n(x(tick))}" y="{axis_y + 14}" font-size="10" fill="{MUTED}" '
                    f'text-anchor="middle">{tick:g}{unit}</text>')
        tick += step
    words = []
    for i, row in enumerate(rows):
        cy = top_pad + row_h * i + row_h / 2
        body.append(f'<text x="{left - 6}" y="{_n(cy + 4)}" font-size="11" fill="#1a1a1a" '
                    f'text-anchor="end">{escape(row.label)}</text>')
        if row.target is not None:
            body.append(f'<line x1="{_n(x(row.target))}" y1="{_n(cy - 12)}" x2="{_n(x(row.target))}" '
                        f'y2="{_n(cy + 12)}" stroke="{BAD}" stroke-width="2"/>')
        if not row.values:
            words.append(f"{row.label}: no measurements")
            continue
        vals = sorted(row.values)
        q1, q2, q3 = _quartiles(vals)
        for v in vals:
            body.append(f'<circle cx="{_n(x(v))}" cy="{_n(cy)}" r="2" fill="{ACCENT}" fill-opacity="0.25"/>')
        body.append(f'<line x1="{_n(x(vals[0]))}" y1="{_n(cy)}" x2="{_n(x(vals[-1]))}" y2="{_n(cy)}" '
                    f'stroke="{MUTED}"/>'
                    f'<rect x="{_n(x(q1))}" y="{_n(cy - 8)}" width="{_n(max(x(q3) - x(q1), 1.5))}" height="16" '
                    f'fill="{ACCENT}" fill-opacity="0.2" stroke="{ACCENT}"/>'
                    f'<line x1="{_n(x(q2))}" y1="{_n(cy - 8)}" x2="{_n(x(q2))}" y2="{_n(cy + 8)}" '
                    f'stroke="{ACCENT}" stroke-width="2"/>')
        text = (f"{row.label}: {len(vals)} runs, min {vals[0]:.3g}{unit}, median {q2:.3g}{unit}, "
                f"max {vals[-1]:.3g}{unit}")
        if row.target is not None:
            met = sum(v >= row.target for v in vals)
            text += f", target {row.target:.3g}{unit} met by {met}"
        words.append(text)
    return _svg(width, height, "; ".join(words) + ".", body, "chart distributions")
