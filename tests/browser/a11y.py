"""Accessibility checks of a page as it is now: the axe-core engine (bundled by
axe-playwright-python, run in the page) fails on any serious or critical violation; our own
checks add what axe leaves out: every form control has a label, all text meets WCAG AA
contrast, every box that scrolls is itself focusable and named (the keyboard scrolls it), and
the keyboard reaches every control and scrolling box with a visible focus indicator."""
from __future__ import annotations

from typing import Any

from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Page

AXE = Axe()
# Minor and moderate findings are advice (e.g. best-practice landmarks); these two fail a test.
FAILING_IMPACTS = {"serious", "critical"}
SHOWN_TARGETS = 3

# Controls without an accessible name: [description, ...]
UNLABELLED_JS = """() => {
  const bad = [];
  for (const el of document.querySelectorAll("input, select, textarea")) {
    if (el.type === "hidden" || el.type === "submit" || el.type === "button") continue;
    const labelled = (el.id && document.querySelector(`label[for="${CSS.escape(el.id)}"]`))
      || el.closest("label") || el.getAttribute("aria-label") || el.getAttribute("aria-labelledby");
    if (!labelled) bad.push(el.outerHTML.slice(0, 120));
  }
  for (const el of document.querySelectorAll("button, a[href]")) {
    if (!(el.innerText || "").trim() && !el.getAttribute("aria-label")) bad.push(el.outerHTML.slice(0, 120));
  }
  return bad;
}"""

# Text below WCAG AA contrast (4.5:1, or 3:1 for large text): [description, ...]
LOW_CONTRAST_JS = """() => {
  const rgb = (s) => { const m = s.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
    const p = m[1].split(",").map(Number); return { r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1 }; };
  const lum = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
  const background = (el) => { for (let e = el; e; e = e.parentElement) {
      const c = rgb(getComputedStyle(e).backgroundColor); if (c && c.a > 0.5) return c; }
    return { r: 255, g: 255, b: 255, a: 1 }; };
  const bad = [];
  for (const el of document.querySelectorAll("body *")) {
    const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    if (!own || el.closest("title, script, style, option")) continue;
    const style = getComputedStyle(el);
    const box = el.getBoundingClientRect();
    if (style.visibility === "hidden" || style.display === "none" || box.width === 0 || el.closest("[hidden]")) continue;
    const isSvg = el instanceof SVGElement;
    const fg = rgb(isSvg ? style.fill : style.color);
    if (!fg) continue;
    const bg = isSvg ? { r: 255, g: 255, b: 255, a: 1 } : background(el);
    const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
    const ratio = (hi + 0.05) / (lo + 0.05);
    const size = parseFloat(style.fontSize), bold = Number(style.fontWeight) >= 700;
    const need = size >= 24 || (bold && size >= 18.66) ? 3 : 4.5;
    if (ratio < need) bad.push(`${el.tagName} "${el.textContent.trim().slice(0, 40)}" ${ratio.toFixed(2)} < ${need}`);
  }
  return bad;
}"""

# Boxes that scroll now (overflow auto or scroll, content past an edge) that Tab cannot focus or
# that have no name: a keyboard user could not scroll them, or would not know what they are.
UNREACHABLE_SCROLL_JS = """() => [...document.querySelectorAll("body *")].filter((el) => {
    const s = getComputedStyle(el), scrolls = (v) => v === "auto" || v === "scroll";
    const past = (scrolls(s.overflowX) && el.scrollWidth > el.clientWidth + 1)
      || (scrolls(s.overflowY) && el.scrollHeight > el.clientHeight + 1);
    if (!past || !el.checkVisibility()) return false;
    const named = el.getAttribute("aria-label") || el.getAttribute("aria-labelledby") || el.labels?.length;
    return el.tabIndex < 0 || !named;
  }).map((el) => el.outerHTML.slice(0, 120))"""

FOCUSABLE_JS = """() => [...document.querySelectorAll("a[href], button, input, select, textarea, summary, [tabindex]:not([tabindex='-1'])")]
  .filter((el) => el.type !== "hidden" && !el.disabled && el.getClientRects().length > 0
                  && getComputedStyle(el).visibility !== "hidden" && el.checkVisibility())
  .map((el) => el.outerHTML.slice(0, 160))"""

ACTIVE_JS = """() => { const el = document.activeElement; const s = getComputedStyle(el);
  return { html: el.outerHTML.slice(0, 160), outline: s.outlineStyle !== "none" && parseFloat(s.outlineWidth) > 0 }; }"""


def axe_failures(page: Page) -> list[str]:
    """axe-core's serious and critical violations on the page, one readable line each: the rule,
    its help text and the first few elements (CSS selectors) that break it."""
    violations: list[dict[str, Any]] = AXE.run(page).response["violations"]
    lines = []
    for v in violations:
        if v["impact"] not in FAILING_IMPACTS:
            continue
        targets = [" ".join(map(str, node["target"])) for node in v["nodes"]]
        more = f" (+{len(targets) - SHOWN_TARGETS} more)" if len(targets) > SHOWN_TARGETS else ""
        lines.append(f"{v['id']} ({v['impact']}): {v['help']} at {targets[:SHOWN_TARGETS]}{more}")
    return lines


def check_page(page: Page, max_tabs: int = 400) -> None:
    """Assert axe-core's rules, labels, contrast, focusable scrolling boxes and keyboard reach on
    the page as it is now."""
    failures = axe_failures(page)
    assert not failures, f"{page.url}: axe-core found:\n" + "\n".join(failures)
    unlabelled = page.evaluate(UNLABELLED_JS)
    assert not unlabelled, f"{page.url}: controls without a label: {unlabelled}"
    low = page.evaluate(LOW_CONTRAST_JS)
    assert not low, f"{page.url}: text below WCAG AA contrast: {low}"
    unreachable = page.evaluate(UNREACHABLE_SCROLL_JS)
    assert not unreachable, f"{page.url}: scrolling boxes the keyboard cannot focus, or unnamed: {unreachable}"
    wanted = set(page.evaluate(FOCUSABLE_JS))
    page.evaluate("document.activeElement && document.activeElement.blur()")
    reached: set[str] = set()
    for _ in range(min(max_tabs, 3 * len(wanted) + 5)):
        page.keyboard.press("Tab")
        active = page.evaluate(ACTIVE_JS)
        if active["html"].startswith("<body"):  # past the last control; the next Tab wraps around
            continue
        assert active["outline"], f"{page.url}: no visible focus on {active['html']}"
        reached.add(active["html"])
        if wanted <= reached:
            break
    assert wanted <= reached, f"{page.url}: not reachable by Tab: {sorted(wanted - reached)[:5]}"
