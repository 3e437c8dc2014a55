"""Browser tests: the real app served by uvicorn on a free port, Debian's Chromium driven by
Python Playwright (headless), and the service fixtures (PostgreSQL, Redis, a real Celery
worker) reused from tests/service. Skips when Playwright or Chromium is missing."""
from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed (test extra)")
import uvicorn  # noqa: E402
from playwright.sync_api import Browser, BrowserContext, sync_playwright  # noqa: E402
from playwright.sync_api import Error as PlaywrightError

from grader.app import create_app  # noqa: E402
from grader.settings import Settings  # noqa: E402

# The same session fixtures as the service tests (a fresh database, queue and worker here).
from tests.service.conftest import database_url, sessions, settings, settings_env, worker  # noqa: E402,F401

CHROMIUM = os.environ.get("KG_TEST_CHROMIUM", "/usr/bin/chromium")
# Flags for a closed network and a root user (see the machine notes in README's test section).
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    path = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    if not path:
        pytest.skip(f"no Chromium at {CHROMIUM} (install Debian's `chromium` package)")
    with sync_playwright() as pw:
        try:
            b = pw.chromium.launch(executable_path=path, headless=True, args=CHROMIUM_ARGS)
        except PlaywrightError as exc:
            pytest.skip(f"Chromium did not start: {str(exc).splitlines()[0]}")
        yield b
        b.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def base_url(settings: Settings) -> Iterator[str]:  # noqa: F811
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


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
