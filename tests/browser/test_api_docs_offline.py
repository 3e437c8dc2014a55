"""The API explorers work offline: Chromium opens /docs (Swagger UI) and /redoc with every
request to another host refused, and each draws the API's operations from /openapi.json.
Neither asks another host for code, styles or data; ReDoc's sidebar asks for its maker's logo
(an image: left out offline, nothing else missing)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page, Route

from grader.settings import Settings
from tests.service.conftest import served


@pytest.fixture(scope="module")
def embedded_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data: Path = tmp_path_factory.mktemp("docs")
    settings = Settings(_env_file=None, data_dir=data, database_url=f"sqlite:///{data}/db.sqlite")  # type: ignore[call-arg]
    with served(settings) as url:
        yield url


def offline_page(browser: Browser, base: str, refused: list[tuple[str, str]]) -> Page:
    """A page whose requests to any host but the service's are refused (and noted with their
    resource type)."""
    page = browser.new_context(base_url=base).new_page()
    page.set_default_timeout(20_000)
    own = urlsplit(base).netloc

    def only_here(route: Route) -> None:
        if urlsplit(route.request.url).netloc == own or route.request.url.startswith("data:"):
            route.continue_()
        else:
            refused.append((route.request.resource_type, route.request.url))
            route.abort()

    page.route("**/*", only_here)
    return page


def test_swagger_ui_draws_the_operations_offline(browser: Browser, embedded_url: str) -> None:
    refused: list[tuple[str, str]] = []
    page = offline_page(browser, embedded_url, refused)
    page.goto("/docs")
    page.locator(".opblock-summary-path", has_text="/api/v1/submissions").first.wait_for()
    assert page.locator(".opblock").count() > 10
    assert refused == []
    page.context.close()


def test_redoc_draws_the_operations_offline(browser: Browser, embedded_url: str) -> None:
    refused: list[tuple[str, str]] = []
    page = offline_page(browser, embedded_url, refused)
    page.goto("/redoc")
    page.get_by_text("/api/v1/submissions", exact=False).first.wait_for(state="attached")
    assert page.locator("[data-section-id]").count() > 10
    assert [kind for kind, _ in refused if kind != "image"] == [], refused
    page.context.close()
