"""The axe-core check of tests/browser/a11y.py fails where it should: on a page with a critical
and a serious violation it names both rules, their help and the elements; a sound page passes,
and minor findings alone do not fail."""
from __future__ import annotations

from playwright.sync_api import Browser

from tests.browser.a11y import SHOWN_TARGETS, axe_failures

SOUND = """<!doctype html><html lang="en"><head><title>Sound</title></head>
<body><main><h1>Runs</h1><p>All graded.</p><button type="button">Re-grade</button></main></body></html>"""
# An image without a text alternative (critical), five nameless buttons (critical), pale grey
# text on white (serious); no <main> landmark (moderate: reported by axe, not failed on).
BROKEN = """<!doctype html><html lang="en"><head><title>Broken</title></head><body>
<h1>Runs</h1><img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=" id="chart">
<p style="color:#ccc;background:#fff" id="pale">Graded at 12:00</p>
""" + "".join(f'<button type="button" id="b{i}"></button>' for i in range(5)) + "</body></html>"


def test_axe_names_serious_and_critical_violations(browser: Browser) -> None:
    page = browser.new_page()
    page.set_content(SOUND)
    assert axe_failures(page) == []
    page.set_content(BROKEN)
    failures = {line.split(" ", 1)[0]: line for line in axe_failures(page)}
    assert set(failures) == {"image-alt", "button-name", "color-contrast"}, failures
    assert failures["image-alt"].startswith("image-alt (critical): Images must have alternative text at ['#chart']")
    assert failures["color-contrast"].startswith("color-contrast (serious): ") and "'#pale'" in failures["color-contrast"]
    shown = ", ".join(f"'#b{i}'" for i in range(SHOWN_TARGETS))
    assert failures["button-name"].endswith(f"at [{shown}] (+{5 - SHOWN_TARGETS} more)"), failures["button-name"]
    page.close()
