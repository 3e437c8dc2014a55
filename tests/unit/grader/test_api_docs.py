"""The API explorers (/docs: Swagger UI, /redoc: ReDoc) load every script, style and icon from
the service itself, so they work offline; each file they name is served."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from grader.app import create_app
from grader.settings import Settings


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    data = tmp_path_factory.mktemp("docs")
    return TestClient(create_app(Settings(_env_file=None, data_dir=data, database_url=f"sqlite:///{data}/db.sqlite")))  # type: ignore[call-arg]


@pytest.mark.parametrize(("page", "assets"), [
    ("/docs", {"swagger-ui-bundle.js": "javascript", "swagger-ui.css": "css", "favicon.png": "image/png"}),
    ("/redoc", {"redoc.standalone.js": "javascript", "favicon.png": "image/png"}),
])
def test_explorer_assets_are_served_here(client: TestClient, page: str, assets: dict[str, str]) -> None:
    html = client.get(page).text
    named = re.findall(r"""(?:src|href|url)\s*[=:]\s*["']([^"']+)["']""", html)
    assert named and not [url for url in named if "//" in url], named  # no other host, no CDN
    assert {Path(url).name for url in named if url.startswith("/static/docs/")} == set(assets)
    assert "/openapi.json" in named
    for name, kind in assets.items():
        answer = client.get(f"/static/docs/{name}")
        assert answer.status_code == 200 and kind in answer.headers["content-type"] and len(answer.content) > 1000


def test_swagger_asks_no_validator_site(client: TestClient) -> None:
    assert '"validatorUrl": null' in client.get("/docs").text
