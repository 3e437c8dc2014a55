"""The server-rendered SVG charts: well-formed, accessible (a title in words), and drawn where
the figures say."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from grader.pages.charts import Distribution, distributions, histogram, speedup_chart

SVG = "{http://www.w3.org/2000/svg}"


def _parse(markup: str) -> ET.Element:
    root = ET.fromstring(str(markup))
    assert root.tag == f"{SVG}svg" and root.get("role") == "img"
    return root


def test_speedup_chart_places_interval_dot_and_target() -> None:
    root = _parse(speedup_chart(4.0, 3.0, 5.0, target=8.0, floor=1.0))
    assert root.findtext(f"{SVG}title") == ("Speedup 4x, 95% interval 3 to 5; target 8x, not met; "
                                           "no speed points at or below 1x.")
    rect = root.find(f"{SVG}rect")
    dot = root.find(f"{SVG}circle")
    assert rect is not None and dot is not None
    left, width = float(rect.get("x", 0)), float(rect.get("width", 0))
    # Linear axis: 4 sits in the middle of [3, 5], and 5 - 3 is a quarter of the target's 8.
    assert abs(float(dot.get("cx", 0)) - (left + width / 2)) < 0.5
    target_line = [ln for ln in root.iter(f"{SVG}line") if ln.get("stroke-dasharray") == "4 2"][0]
    axis_start = 6.0  # x of 0x: the interval's width (2) is a quarter of the target's distance (8)
    assert abs(4 * width - (float(target_line.get("x1", 0)) - axis_start)) < 0.5
    assert float(target_line.get("x1", 0)) > left + width  # the target lies right of the interval
    met = _parse(speedup_chart(9.0, 8.5, 9.5, target=8.0))
    assert "target 8x, met" in (met.findtext(f"{SVG}title") or "")


def test_histogram_counts_every_value_once() -> None:
    root = _parse(histogram([0, 5, 12, 99.5, 100, 100, 37], 100, bins=10))
    bars = [r for r in root.iter(f"{SVG}rect")]
    counts = [int((b.findtext(f"{SVG}title") or "").rsplit(": ", 1)[1]) for b in bars]
    assert counts == [2, 1, 0, 1, 0, 0, 0, 0, 0, 3]  # 100 falls in the last bin
    heights = [float(b.get("height", 0)) for b in bars]
    assert heights[9] == max(heights) and heights[2] == 0
    assert "histogram of 7 values" in (root.findtext(f"{SVG}title") or "")


def test_distributions_summarise_each_problem() -> None:
    root = _parse(distributions([Distribution("1.1", [1.0, 2.0, 3.0, 4.0, 5.0], target=3.5),
                                 Distribution("2.2", [])]))
    title = root.findtext(f"{SVG}title") or ""
    assert "1.1: 5 runs, min 1x, median 3x, max 5x, target 3.5x met by 2" in title
    assert "2.2: no measurements" in title
    assert len([c for c in root.iter(f"{SVG}circle")]) == 5
