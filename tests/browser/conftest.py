"""Browser tests: the real app served by uvicorn on a free port, Debian's Chromium driven by
Python Playwright (headless), and the service fixtures (PostgreSQL, Redis, a real Celery
worker) reused from tests/service. Skips when Playwright or Chromium is missing."""
from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed (test extra)")
from playwright.sync_api import Browser, BrowserContext, Playwright, sync_playwright  # noqa: E402
from playwright.sync_api import Error as PlaywrightError

from grader.settings import Settings  # noqa: E402

# The same session fixtures as the service tests (a fresh database, queue and worker here).
from tests.service.conftest import database_url, served, sessions, settings, settings_env, worker  # noqa: E402,F401

CHROMIUM = os.environ.get("KG_TEST_CHROMIUM", "/usr/bin/chromium")
# Flags for a closed network and a root user (see the machine notes in README's test section).
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]


@pytest.fixture(scope="session")
def playwright() -> Iterator[Playwright]:
    """One Playwright per test process: its sync API cannot be started twice in one thread."""
    with sync_playwright() as pw:
        yield pw


def chromium(pw: Playwright, *extra_args: str) -> Iterator[Browser]:
    """Debian's Chromium, headless, with CHROMIUM_ARGS and `extra_args` (skips where it is missing)."""
    path = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    if not path:
        pytest.skip(f"no Chromium at {CHROMIUM} (install Debian's `chromium` package)")
    try:
        b = pw.chromium.launch(executable_path=path, headless=True, args=[*CHROMIUM_ARGS, *extra_args])
    except PlaywrightError as exc:
        pytest.skip(f"Chromium did not start: {str(exc).splitlines()[0]}")
    yield b
    b.close()


@pytest.fixture(scope="session")
def browser(playwright: Playwright) -> Iterator[Browser]:
    yield from chromium(playwright)


@pytest.fixture(scope="session")
def base_url(settings: Settings) -> Iterator[str]:  # noqa: F811
    with served(settings) as url:
        yield url


@pytest.fixture
def context(browser: Browser, base_url: str) -> Iterator[BrowserContext]:
    """A fresh browser context (cookies, storage) per test, on the app under test."""
    ctx = browser.new_context(base_url=base_url, viewport={"width": 1100, "height": 800})
    ctx.set_default_timeout(15_000)
    yield ctx
    ctx.close()


@pytest.fixture(scope="session")
def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """KG_SCREENSHOT_DIR (e.g. docs/screenshots) keeps them; otherwise a temp folder."""
    chosen = os.environ.get("KG_SCREENSHOT_DIR")
    path = Path(chosen) if chosen else tmp_path_factory.mktemp("screens")
    path.mkdir(parents=True, exist_ok=True)
    return path
